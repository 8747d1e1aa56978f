"""``train --initialize-from RUN_ID`` and ``--deterministic`` end to end, on the shared 1-D run (``simple_ppo_run``).

A new run initialized from the shared one loads its newest checkpoint and starts at step 0, and both flags are
written into the new run's ``configuration.yaml``; a RUN_ID with no checkpoints is refused before anything starts.
(That the weights are the checkpoint's, and that deterministic acting takes the mode: ``tests/unit/test_deterministic.py``.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.integration.simple_run import BEHAVIOR, RUN_ID, write_config
from tests.integration.test_cli import run_cli, tail


def test_a_run_initialized_from_another_starts_at_step_0_from_its_weights(simple_ppo_run: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(simple_ppo_run, results / RUN_ID)
    config = write_config(tmp_path / "run.yaml", 64)
    args = ["train", config, "--results-dir", results, "--run-id", "second", "--seed", "0", "--no-progress"]
    proc = run_cli([*args, "--initialize-from", RUN_ID, "--deterministic"])
    assert proc.returncode == 0, tail(proc.stdout)
    assert f"initialized from {results / RUN_ID / BEHAVIOR / 'checkpoints'}" in proc.stdout, tail(proc.stdout)
    status = json.loads((results / "second" / "run_logs" / "training_status.json").read_text(encoding="utf-8"))
    assert 64 <= status[BEHAVIOR]["steps"] < 600  # from 0, not from the first run's 600
    written = (results / "second" / "configuration.yaml").read_text(encoding="utf-8")
    assert "deterministic: true" in written and f"init_path: {results / RUN_ID / BEHAVIOR}" in written


def test_an_initialize_from_run_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path / "run.yaml", 64)
    proc = run_cli(["train", config, "--results-dir", tmp_path / "results", "--initialize-from", "nothing", "--no-progress"])
    assert proc.returncode == 2, tail(proc.stdout)
    assert "behaviors.Simple1D.init_path" in proc.stdout and "holds no checkpoints" in proc.stdout
    assert not (tmp_path / "results" / "ppo").exists()
