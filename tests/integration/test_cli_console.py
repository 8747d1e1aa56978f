"""``stepstream train`` in a real terminal: a pseudo-terminal of 80 columns, its screen rendered by a terminal
emulator (pyte), as a user sees it once the run ended.

* no log line shares a row with the progress bar, and no stale bar is left behind (the log lines go through
  the bar's own console, rich's ``RichHandler``);
* the run's last line agrees with the last bar: the same steps and the same mean reward (the latest summary's);
* the summary lines are thinned on the console while the bar shows (TensorBoard keeps every one);
* nothing is wider than the terminal.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import termios
import time
from pathlib import Path

import pyte

from tests.integration.test_cli import REPO, RUN_TIMEOUT_S, stepstream_command, subprocess_env, write_config

COLUMNS = 80
ROWS = 300
"""Tall enough that nothing scrolls off: the whole run stays on the screen."""
MAX_STEPS = 12_000
SUMMARY_FREQ = 1000
BAR = re.compile(r"^CartPole +[━╸╺ ]+ +(?P<steps>\d+)/(?P<total>\d+) +\d+ steps/s R +(?P<reward>\S+) v\d+ \d+:\d\d:\d\d *$")
RESULT = re.compile(r"^CartPole: (?P<steps>\d+) steps, \d+ episodes, mean reward (?P<reward>[\d.-]+|n/a)")


def run_in_terminal(args: list[str | Path], columns: int = COLUMNS, rows: int = ROWS) -> tuple[list[str], int]:
    """Run ``stepstream ARGS`` on a pseudo-terminal of ``columns`` x ``rows``; its screen's rows and exit code."""
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in subprocess_env().items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [*stepstream_command(), *map(str, args)], cwd=REPO, env=env, stdin=terminal, stdout=terminal, stderr=terminal
    )
    os.close(terminal)
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(controller, 65536)
            except OSError as err:  # EIO: every copy of the terminal's end is closed (the process ended)
                if err.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            stream.feed(chunk)
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return [row.rstrip() for row in screen.display], code


def test_train_in_an_80_column_terminal(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cartpole.yaml", summary_freq=SUMMARY_FREQ, checkpoint_interval=MAX_STEPS)
    rows, code = run_in_terminal(["train", config, "--results-dir", tmp_path / "results", "--max-steps", str(MAX_STEPS)])
    shown = "\n".join(row for row in rows if row)
    assert code == 0, shown
    bar_rows = [row for row in rows if any(glyph in row for glyph in "━╸╺") or " steps/s R " in row]
    assert len(bar_rows) == 1, shown  # the one last bar: none left behind, none glued to a log line
    bar = BAR.match(bar_rows[0])
    assert bar is not None, bar_rows[0]
    results = [RESULT.match(row) for row in rows if row.startswith("CartPole: ")]
    assert len(results) == 1 and results[0] is not None, shown
    result = results[0]
    assert bar["steps"] == result["steps"], (bar_rows[0], result.group(0))
    reward = result["reward"]
    assert reward != "n/a" and bar["reward"] == f"{float(reward):.1f}", (bar_rows[0], result.group(0))
    summaries = [row for row in rows if "CartPole. Step:" in row]
    assert 1 <= len(summaries) < MAX_STEPS // SUMMARY_FREQ // 2, shown  # thinned; TensorBoard has all 12
    assert all(len(row) <= COLUMNS for row in rows)
    assert "Traceback" not in shown
