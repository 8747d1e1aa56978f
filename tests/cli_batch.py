"""A batch of ``stepstream`` commands run one after another in one fresh interpreter, through ``cli.main.main``.

``cli.main.main`` is the console script's entry point (``pyproject.toml``: ``stepstream = "cli.main:main"``), so a
command run here is the one a user types, less the interpreter's start: a test that runs many commands pays
the start (about 2 s on 2 loaded cores) and TensorFlow's import (about 10 s) once for all of them, not per command.
Each command's output (its log lines, in the console script's text format, and whatever it writes to stdout and
stderr) and exit code are kept apart, as if it had run alone.

With ``block_tensorflow`` the batch runs with ``import tensorflow`` made to fail, so a command that is refused
before TensorFlow loads (issue 14's rule for everyday mistakes) passes, and one that imports it ends in a
traceback naming the import. Tests keep at least one real console-script subprocess per user path
(``tests/integration/test_cli.py``'s ``run_cli``); this is for the many variants of one path.

Run as ``python -m tests.cli_batch`` with a JSON request on stdin (``run_batch`` writes it); it prints one JSON
line, one result per command.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BATCH_TIMEOUT_S = 600.0
"""Liveness bound of a whole batch (a few commands of seconds each)."""


@dataclass(frozen=True)
class CommandResult:
    """What one command of a batch gave: like ``subprocess.CompletedProcess`` with stderr in ``stdout``."""

    args: list[str]
    returncode: int
    stdout: str
    """Its log lines and its stdout and stderr, in order."""
    seconds: float
    """Wall time of the command alone (the interpreter's start and imports before it excluded)."""
    tensorflow_loaded: bool
    """Whether TensorFlow was imported when the command ended (always False with ``block_tensorflow``)."""


def run_batch(
    commands: Sequence[Sequence[str | Path]],
    *,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    block_tensorflow: bool = False,
    timeout_s: float = BATCH_TIMEOUT_S,
) -> list[CommandResult]:
    """Run ``stepstream ARGS`` for each of ``commands``, in order, in one new interpreter started in ``cwd``.

    Raises:
        AssertionError: the interpreter itself failed (its output in the message); a failing command does not.
        subprocess.TimeoutExpired: the batch ran past ``timeout_s``.
    """
    request = {"commands": [[str(a) for a in args] for args in commands], "block_tensorflow": block_tensorflow}
    python_path = os.pathsep.join(filter(None, [str(REPO), (env or os.environ).get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.cli_batch"],
        input=json.dumps(request),
        cwd=cwd,
        env={**(env or os.environ), "PYTHONPATH": python_path},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"the batch interpreter failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return [CommandResult(**result) for result in json.loads(lines[-1])]


def _run_one(args: list[str]) -> dict[str, object]:
    from cli.main import main

    root = logging.getLogger()
    for handler in root.handlers[:]:  # the previous command's: main() installs its own, as in a fresh process
        root.removeHandler(handler)
    output = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):  # main's log handler writes to stderr
        try:
            returncode = main(args)
        except SystemExit as exit_:  # argparse's usage errors and --help
            returncode = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        except BaseException:  # what the interpreter would print before exiting 1
            output.write(traceback.format_exc())
            returncode = 1
        for handler in root.handlers:
            handler.flush()
    return {
        "args": args,
        "returncode": returncode,
        "stdout": output.getvalue(),
        "seconds": time.monotonic() - started,
        "tensorflow_loaded": sys.modules.get("tensorflow") is not None,
    }


def _serve() -> None:
    request = json.loads(sys.stdin.read())
    if request["block_tensorflow"]:
        sys.modules["tensorflow"] = None  # type: ignore[assignment]  # makes `import tensorflow` raise ImportError
    real_stdout = sys.stdout
    results = [_run_one(args) for args in request["commands"]]
    real_stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    _serve()
