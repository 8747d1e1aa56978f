"""The console (``cli.console``): the progress bar at 80 columns, its step rate, and the native-stderr filter."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cli.console import (
    NAME_WIDTH,
    NATIVE_NOISE,
    SUMMARY_LOGGER,
    ConsoleFormatter,
    StepRate,
    SummaryThrottle,
    format_elapsed,
    native_stderr_filtered,
    progress_bar,
)

# TensorFlow 2.x's start-up lines on a CPU-only machine, as a user saw them.
NOISE_LINES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796157617.747742    3430 port.cc:153] oneDNN custom operations are on. You may see slightly different",
    "I0000 00:00:1796157617.761902    3430 cudart_stub.cc:31] Could not find cuda drivers on your machine.",
    "I0000 00:00:1796157337.357759   27543 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available CPU",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
    "E0000 00:00:1796157647.609479    3430 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error (303)",
]


@pytest.mark.parametrize("name", ["CartPole", "PushBlockCollabAgent"])
def test_the_bar_fits_80_columns_with_its_whole_total(name: str) -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False, color_system=None)
    progress = progress_bar(console)
    progress.add_task(name, total=1_000_000, completed=150_017, rate=2016.4, reward="244.8", version=123, elapsed="0:00:22")
    console.print(progress.make_tasks_table(progress.tasks))
    lines = out.getvalue().rstrip("\n").splitlines()
    assert len(lines) == 1 and len(lines[0]) <= 80, lines
    shown = name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"  # only a long name gives way
    for part in (shown, "150017/1000000", "2016 steps/s", "R   244.8", "v123", "0:00:22"):
        assert part in lines[0], (part, lines[0])
    assert "…" not in lines[0].replace(shown, "")


def test_step_rate_is_over_its_window() -> None:
    rate = StepRate(window_s=10.0)
    assert rate.update(0.0, 0) == 0.0
    assert rate.update(5.0, 500) == pytest.approx(100.0)
    assert rate.update(10.0, 1000) == pytest.approx(100.0)
    # Samples older than the window drop out: 1000 steps in the 5 s since t = 10 -> 200/s, not the all-time 133/s.
    assert rate.update(15.0, 2000) == pytest.approx(150.0)
    assert rate.update(20.0, 3000) == pytest.approx(200.0)


def test_format_elapsed() -> None:
    assert [format_elapsed(s) for s in (0, 22.4, 3599, 3600 * 2 + 61)] == ["0:00:00", "0:00:22", "0:59:59", "2:01:01"]


def test_native_noise_is_filtered_and_everything_else_kept(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    real = "E0000 00:00:1.0 1 some_op.cc:1] a real TensorFlow error stays visible"
    with caplog.at_level(logging.WARNING, logger="tensorflow.native"), native_stderr_filtered():
        os.write(2, ("\n".join([*NOISE_LINES, real]) + "\n").encode())
    assert capfd.readouterr().err == ""  # nothing raw on the terminal ...
    assert [r.getMessage() for r in caplog.records] == [real]  # ... and the real line as a log record
    assert all(NATIVE_NOISE.search(line) for line in NOISE_LINES)


def test_tensorflow_loads_without_importing_scikit_learn_which_stays_importable() -> None:
    """``load_tensorflow`` hides scikit-learn from Keras' import (~1.4 s of CPU per start); it imports after.

    scikit-learn is in the bench extra only, so a test venv may lack it: the hiding must then leave no
    trace either (no ``None`` left in ``sys.modules``, which would turn a later import into an odd error).
    """
    script = (
        "import importlib.util, sys\n"
        "from cli.console import load_tensorflow\n"
        "load_tensorflow()\n"
        "import keras\n"
        "assert 'sklearn' not in sys.modules, 'scikit-learn imported with TensorFlow, or its hiding left behind'\n"
        "installed = importlib.util.find_spec('sklearn') is not None\n"
        "if installed:\n"
        "    import sklearn\n"
        "print('ok', installed)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    installed = importlib.util.find_spec("sklearn") is not None
    assert done.returncode == 0 and done.stdout.strip() == f"ok {installed}", done.stderr[-2000:]


def _summary(behavior: str, created: float, level: int = logging.INFO) -> logging.LogRecord:
    record = logging.LogRecord(SUMMARY_LOGGER, level, "summaries.py", 1, "%s. Step: 1000.", (behavior,), None)
    record.created = created
    record.behavior = behavior
    return record


def test_the_summary_lines_are_thinned_per_behavior_and_nothing_else() -> None:
    throttle = SummaryThrottle(interval_s=10.0)
    passed = [throttle.filter(_summary(name, t)) for name, t in [("A", 0.0), ("A", 4.0), ("B", 4.5), ("A", 10.0)]]
    assert passed == [True, False, True, True]
    assert throttle.filter(_summary("A", 11.0, logging.WARNING))  # a summary-writer failure always shows
    other = logging.LogRecord("trainer.loop", logging.INFO, "loop.py", 1, "trainer stopped", (), None)
    assert throttle.filter(other) and throttle.filter(other)


def test_the_throttled_logger_is_the_summaries_one() -> None:
    from trainer import summaries

    assert summaries.logger.name == SUMMARY_LOGGER


def test_the_console_line_keeps_its_width_for_the_message() -> None:
    formatter = ConsoleFormatter("%(message)s")
    info = logging.LogRecord("trainer.loop", logging.INFO, "loop.py", 1, "trainer stopped", (), None)
    info.context = " [behavior=CartPole]"
    warning = logging.LogRecord("trainer.checkpoint", logging.WARNING, "checkpoint.py", 1, "cut file", (), None)
    warning.context = " [behavior=CartPole]"
    refusal = logging.LogRecord("cli.main", logging.ERROR, "main.py", 1, "--out x.txt: must end in .onnx", (), None)
    refusal.context = ""
    assert formatter.format(info) == "trainer stopped"
    assert formatter.format(warning) == "trainer.checkpoint: cut file [behavior=CartPole]"
    assert formatter.format(refusal) == "--out x.txt: must end in .onnx"


def test_demo_inspect_wraps_its_lines_at_word_boundaries() -> None:
    from cli.demo import _wrap

    line = "action timing  c.demo: same (by episode_start_zeros; inverse-dynamics accuracy of record t's action 1.0)"
    rows = _wrap(line, 80)
    assert len(rows) == 2 and all(len(row) <= 80 for row in rows)
    assert rows[1].startswith("    ") and " ".join(r.strip() for r in rows) == line
