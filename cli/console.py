"""What a user sees on the terminal: TensorFlow's native output filtered and logged, and the progress bar.

On a CPU-only machine TensorFlow's C++ start-up writes lines that read as errors (``failed call to
cuInit``, ``Could not find cuda drivers``, the ``cpu_feature_guard`` and oneDNN notices, absl's
``All log messages before absl::InitializeLog()``), and LiteRT adds its own at the first export
(``Created TensorFlow Lite XNNPACK delegate``). ``TF_CPP_MIN_LOG_LEVEL`` does not reach them in this
TensorFlow: native code writes them to file descriptor 2 before absl's logging is initialised, or
with its own logger. So:

* :func:`load_tensorflow` points descriptor 2 at a temporary file while TensorFlow imports and
  initialises its devices, then logs every line that is not one of :data:`NATIVE_NOISE`;
* :func:`route_native_stderr` then keeps descriptor 2 on a pipe for the rest of the process: a
  thread logs what native code writes there (logger ``tensorflow.native``), noise dropped, while
  Python's own ``sys.stderr`` (the log handler, tracebacks) writes to the terminal directly. So with
  ``--log-format json`` every line is a JSON object, and real native errors still reach the user.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import fcntl
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from common.logs import JsonFormatter

native_log = logging.getLogger("tensorflow.native")
"""What TensorFlow's native code wrote to stderr while it loaded, noise aside."""

NATIVE_NOISE = re.compile(
    r"absl::InitializeLog\(\)"
    r"|^[IWE]\d{4} [\d:.]+ +\d+ (port|cudart_stub|cpu_feature_guard|cuda_platform|cuda_executor|cuda_dnn|cuda_fft"
    r"|cuda_blas|computation_placer|gpu_device|dso_loader)\.cc:\d+\]"
    r"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$"
    r"|^INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$"
    r"|^[IW]\d{4} [\d:.]+ +\d+ (flatbuffer_export|tf_tfl_flatbuffer_helpers|devices|single_machine)\.cc:\d+\]"
)
"""TensorFlow's and LiteRT's native notices on a machine without a GPU (and with one: device placement notices), and
the TFLite converter's (its grappler session's "Number of eligible GPUs", "Starting new session")."""
_SEVERITY = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
PIPE_BYTES = 1 << 20
"""Capacity asked for the native-stderr pipe (Linux; the default 64 KiB elsewhere)."""
RELAY_DRAIN_S = 2.0
"""At exit, how long the relay thread may take to log what native code wrote last."""


def _log_native(line: str, noise: re.Pattern[str]) -> None:
    """One line native code wrote, at its own severity (absl's ``I``/``W``/``E``/``F`` prefix; else WARNING)."""
    if line.strip() and not noise.search(line):
        native_log.log(_SEVERITY.get(line[:1], logging.WARNING) if line[1:5].isdigit() else logging.WARNING, "%s", line)


@contextlib.contextmanager
def native_stderr_filtered(noise: re.Pattern[str] = NATIVE_NOISE) -> Iterator[None]:
    """While inside, file descriptor 2 (native code's stderr) goes to a file; after, its lines but ``noise`` go back."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines():
                _log_native(line, noise)  # through logging: with --log-format json, a JSON object too


def load_tensorflow() -> None:
    """Import TensorFlow, size its thread pools and initialise its devices, with the native noise filtered out."""
    # Keras 3 imports scikit-learn, when installed, for wrappers stepstream never uses: ~1.4 s of CPU at every start
    # (2-core machine). Hidden while TensorFlow imports (Keras takes the ImportError as "not installed"), importable after.
    hide_sklearn = "sklearn" not in sys.modules
    if hide_sklearn:
        sys.modules["sklearn"] = None  # type: ignore[assignment]
    try:
        with native_stderr_filtered():
            from trainer.loop import configure_tf_threads

            configure_tf_threads()  # before TensorFlow runs anything
            import tensorflow as tf

            tf.config.list_physical_devices()  # device initialisation writes the CUDA lines now, not mid-run
            tf.zeros((1,)) + 0  # the first op initialises the CPU device (oneDNN's notice)
    finally:
        if hide_sklearn:
            sys.modules.pop("sklearn", None)
    route_native_stderr()


def route_native_stderr(noise: re.Pattern[str] = NATIVE_NOISE) -> bool:
    """From now on, log what native code writes to file descriptor 2 (module docstring); returns whether it did.

    Nothing happens where ``sys.stderr`` is not the process's own (a host such as pytest captures it),
    or where it was done before. At exit, descriptor 2 is restored and the last lines are logged.
    """
    global _routed
    own = sys.__stderr__
    if _routed or own is None or sys.stderr is not own:
        return False
    own.flush()
    terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding=own.encoding, errors="backslashreplace")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is own:
            handler.setStream(terminal)
    sys.stderr = terminal  # Python's own writes go to the terminal, not into the pipe
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # room for a burst while the relay waits for the GIL
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    os.dup2(write_end, 2)
    os.close(write_end)
    relay = threading.Thread(target=_relay, args=(read_end, noise), name="native-stderr", daemon=True)
    relay.start()
    atexit.register(_restore, terminal.fileno(), relay)
    _routed = True
    return True


_routed = False


def _relay(read_end: int, noise: re.Pattern[str]) -> None:
    with os.fdopen(read_end, "rb") as pipe:
        for raw in pipe:  # ends when descriptor 2, the pipe's only write end, is restored at exit
            _log_native(raw.decode(errors="replace").rstrip("\n"), noise)


def _restore(terminal_fd: int, relay: threading.Thread) -> None:
    os.dup2(terminal_fd, 2)  # closes the pipe's write end: the relay logs what is left and ends
    relay.join(RELAY_DRAIN_S)


# -- the terminal: one console for the log lines and the live bar ------------------------------------

SUMMARY_LOGGER = "trainer.summaries"
"""The logger of the trainers' summary lines (``trainer.summaries.ConsoleWriter``), throttled on the console."""
CONSOLE_SUMMARY_INTERVAL_S = 10.0
"""While the live bar shows, at most one summary line per behavior this often (TensorBoard keeps every one)."""

_terminal: Any = None


def terminal() -> Any:
    """The process's one ``rich.console.Console``, on stderr.

    The log handler (``console_handler``) and the progress bar (``progress_bar``) both write through it, so
    rich prints each log line above the live bar and redraws the bar below it: no line is ever glued to a
    bar, and no stale bar is left behind. It writes to whatever ``sys.stderr`` is at the time (the terminal
    itself once ``route_native_stderr`` moved descriptor 2 onto its pipe).
    """
    global _terminal
    if _terminal is None:
        from rich.console import Console

        _terminal = Console(stderr=True)
    return _terminal


class ConsoleFormatter(logging.Formatter):
    """A log line for ``console_handler``: the message alone, and on warnings and errors the record's context
    (``common.logs.ContextFilter``) and, but for the command's own (``cli.*``) one-line refusals, the logger's name.

    Rich's own columns give the time and the level, so an INFO line at 80 columns keeps its width for its message
    (the INFO lines of a run name their behavior themselves; the text and JSON formats keep every field).
    """

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.levelno >= logging.WARNING:
            where = "" if record.name.startswith("cli.") else f"{record.name}: "
            message = f"{where}{message}{getattr(record, 'context', '')}"
        return message


def console_handler() -> logging.Handler:
    """The log handler of a text console on a terminal: rich's ``RichHandler`` on ``terminal()``."""
    from rich.logging import RichHandler

    handler = RichHandler(console=terminal(), show_path=False, markup=False, log_time_format="[%X]")
    handler.setFormatter(ConsoleFormatter("%(message)s"))
    return handler


class SummaryThrottle(logging.Filter):
    """Passes at most one summary line per behavior every ``interval_s`` seconds; every other record passes.

    Installed on the console's handler while the live bar shows the same figures continuously; the summaries
    themselves (TensorBoard, ``episodes.csv``) are still written every ``summary_freq``.
    """

    def __init__(self, interval_s: float = CONSOLE_SUMMARY_INTERVAL_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[object, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != SUMMARY_LOGGER or record.levelno != logging.INFO:
            return True
        key = getattr(record, "behavior", None)
        last = self._last.get(key)
        if last is not None and record.created - last < self.interval_s:
            return False
        self._last[key] = record.created
        return True


def write_result(line: str, logger_name: str) -> None:
    """One line of a command's result (a run's final figures) on stdout, whatever the log level.

    With ``--log-format json`` it is a JSON object as the log records are (``logger_name`` its logger), so that
    every line the command writes parses.
    """
    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
        record = logging.getLogger(logger_name).makeRecord(logger_name, logging.INFO, "", 0, "%s", (line,), None)
        line = JsonFormatter().format(record)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# -- the progress bar ------------------------------------------------------------------------------

RATE_WINDOW_S = 10.0
"""The bar's steps/s: agent steps over the last this-many seconds."""
BAR_WIDTH = 12
"""Characters of the bar itself, so that a line fits 80 columns with its whole ``completed/total``."""
NAME_WIDTH = 16
"""Longest behavior name shown whole on the bar; a longer one is cut with an ellipsis."""


def progress_bar(console: Any = None) -> Any:
    """A ``rich.progress.Progress`` of one line per behavior that fits 80 columns.

    ``name ━━━━━━ 15017/100000 2016 steps/s R 244.8 v12 0:00:22``. Each task carries the fields
    ``rate`` (agent steps/s over ``RATE_WINDOW_S``), ``reward`` (the latest summary's mean reward, as the
    summary lines and TensorBoard show it, as text: ``n/a`` before the first), ``version`` (policy version)
    and ``elapsed`` (since the process started, as the summary lines' "Time Elapsed"). ``console``: where it
    draws, ``terminal()`` by default.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Column

    def fixed() -> Column:
        return Column(no_wrap=True, overflow="ignore")

    return Progress(
        # Only a long behavior name gives way (cut with an ellipsis); the numbers are never cut.
        TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", max_width=NAME_WIDTH)),
        BarColumn(bar_width=BAR_WIDTH),
        MofNCompleteColumn(table_column=fixed()),
        TextColumn(
            "{task.fields[rate]:>5.0f} steps/s R {task.fields[reward]:>7} v{task.fields[version]}", table_column=fixed()
        ),
        TextColumn("{task.fields[elapsed]}", table_column=fixed()),
        console=terminal() if console is None else console,
        transient=False,
    )


def format_elapsed(seconds: float) -> str:
    """``h:mm:ss``, as rich writes elapsed time."""
    whole = max(int(seconds), 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class StepRate:
    """Agent steps per second over the last ``window_s`` seconds (a sliding window of samples)."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def update(self, now: float, steps: int) -> float:
        """Record ``steps`` at ``now`` (monotonic seconds); the rate since the oldest sample in the window."""
        self._samples.append((now, steps))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        then, before = self._samples[0]
        return (steps - before) / (now - then) if now > then else 0.0
