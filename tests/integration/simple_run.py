"""One short ``stepstream train`` of PPO on the 1-D task (``simple:discrete``), shared by the CLI tests that need a run.

``conftest.simple_ppo_run`` trains it once per test session, by the real console script; the checkpoint tests
damage copies of it, the export test converts its checkpoints. It leaves ``CHECKPOINTS`` checkpoints (each with its
``.json`` record, ``.policy.pb`` and ``.onnx``) and ``<run>/Simple1D.onnx``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.integration.test_cli import run_cli, tail

BEHAVIOR = "Simple1D"
RUN_ID = "damaged"
CHECKPOINT_INTERVAL = 200
CHECKPOINTS = 3
MAX_STEPS = CHECKPOINTS * CHECKPOINT_INTERVAL
"""Agent steps of the shared run: ``CHECKPOINTS`` checkpoints, every one kept (``keep_checkpoints``)."""


def write_config(path: Path, max_steps: int, checkpoint_interval: int = CHECKPOINT_INTERVAL) -> Path:
    behavior = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 16, "buffer_size": 64, "learning_rate": 5e-3, "num_epoch": 1},
        "network_settings": {"hidden_units": 8, "num_layers": 1},
        "max_steps": max_steps,
        "time_horizon": 16,
        "summary_freq": checkpoint_interval,
        "checkpoint_interval": checkpoint_interval,
        "keep_checkpoints": CHECKPOINTS,
    }
    config = {"behaviors": {BEHAVIOR: behavior}, "env_settings": {"env_path": "simple:discrete", "num_envs": 4, "seed": 0}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def train_args(config: Path, results: Path, *extra: str) -> list[str | Path]:
    return ["train", config, "--results-dir", results, "--run-id", RUN_ID, "--seed", "0", "--no-progress", *extra]


def train(config: Path, results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(train_args(config, results, *extra))


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / BEHAVIOR / "checkpoints"


def checkpoint_steps(run_dir: Path) -> list[int]:
    indexes = checkpoints_dir(run_dir).glob("ckpt-*.index")
    return sorted(int(p.name.removeprefix("ckpt-").removesuffix(".index")) for p in indexes)


def train_simple_ppo_run(root: Path) -> Path:
    """Train the shared run under ``root``; returns its run folder ``root/results/RUN_ID``."""
    proc = train(write_config(root / "run.yaml", MAX_STEPS), root / "results")
    assert proc.returncode == 0, tail(proc.stdout)
    run_dir = root / "results" / RUN_ID
    assert len(checkpoint_steps(run_dir)) == CHECKPOINTS, checkpoint_steps(run_dir)
    return run_dir
