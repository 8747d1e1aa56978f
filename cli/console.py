"""What a user sees on the terminal: TensorFlow's native start-up noise filtered out of stderr, and the progress bar.

On a CPU-only machine TensorFlow's C++ start-up writes lines that read as errors (``failed call to
cuInit``, ``Could not find cuda drivers``, the ``cpu_feature_guard`` and oneDNN notices, absl's
``All log messages before absl::InitializeLog()``). ``TF_CPP_MIN_LOG_LEVEL`` does not reach them in
this TensorFlow: they are written to file descriptor 2 before absl's logging is initialised. So
:func:`load_tensorflow` points descriptor 2 at a temporary file while TensorFlow imports and
initialises its devices, then writes back every line that is not one of :data:`NATIVE_NOISE`:
real errors and warnings still reach the user.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

NATIVE_NOISE = re.compile(
    r"absl::InitializeLog\(\)"
    r"|^[IWE]\d{4} [\d:.]+ +\d+ (port|cudart_stub|cpu_feature_guard|cuda_platform|cuda_executor|cuda_dnn|cuda_fft"
    r"|cuda_blas|computation_placer|gpu_device|dso_loader)\.cc:\d+\]"
    r"|^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$"
)
"""TensorFlow's native start-up lines on a machine without a GPU (and with one: device placement notices)."""


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
            kept = [line for line in captured.read().decode(errors="replace").splitlines() if not noise.search(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()


def load_tensorflow() -> None:
    """Import TensorFlow, size its thread pools and initialise its devices, with the native noise filtered out."""
    with native_stderr_filtered():
        from trainer.loop import configure_tf_threads

        configure_tf_threads()  # before TensorFlow runs anything
        import tensorflow as tf

        tf.config.list_physical_devices()  # device initialisation writes the CUDA lines now, not mid-run
        tf.zeros((1,)) + 0  # the first op initialises the CPU device (oneDNN's notice)


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
    ``rate`` (agent steps/s over ``RATE_WINDOW_S``), ``reward`` (mean return of the last 100
    episodes, as text: ``n/a`` before the first), ``version`` (policy version) and ``elapsed``
    (since the process started, as the summary lines' "Time Elapsed").
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
        console=console,
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
