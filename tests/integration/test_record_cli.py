"""``stepstream record`` and offline BC through the real console script, in subprocesses.

* ``record`` with the 1-D task's scripted expert writes a .demo file our reader loads with the right
  counts (no TensorFlow in that process);
* ``train`` of a config whose only behavior is ``bc`` with no env trains offline from that demo
  and exits, writing ``bc_metrics.json``, ``training_status.json`` and a checkpoint with its policy;
* ``record --checkpoint`` of that run acts with the cloned policy (the processor's inference code)
  and its demo header's mean return shows it solves the task;
* a bad ``demo_path`` is an error naming the config key.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from common.demo import demo_to_buffer, load_demonstration
from tests.integration.test_cli import run_cli, tail

BEHAVIOR = "Simple1D"
EXPERT = "scripted:envclient.simple_env:scripted_expert"
EPISODES = 17
"""17 expert episodes of 6 records each: a 102-record demo."""


def _env_config(path: Path) -> Path:
    config = {
        "behaviors": {BEHAVIOR: {"trainer_type": "ppo"}},
        "env_settings": {"env_path": "simple:discrete", "num_envs": 4, "seed": 0},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _bc_config(path: Path, demo_path: Path) -> Path:
    behavior = {
        "trainer_type": "bc",
        "hyperparameters": {"demo_path": str(demo_path), "batch_size": 16, "num_epoch": 3, "learning_rate": 1e-3},
        "network_settings": {"hidden_units": 32, "num_layers": 2},
        "max_steps": 6000,
        "summary_freq": 2000,
        "checkpoint_interval": 100000,
    }
    path.write_text(yaml.safe_dump({"behaviors": {BEHAVIOR: behavior}}), encoding="utf-8")
    return path


def test_record_then_offline_bc_then_record_the_clone(tmp_path: Path) -> None:
    env_config = _env_config(tmp_path / "env.yaml")
    demo = tmp_path / "demos" / "expert.demo"
    proc = run_cli(["record", env_config, "--policy", EXPERT, "--episodes", str(EPISODES), "--out", demo])
    assert proc.returncode == 0, tail(proc.stdout)
    loaded = load_demonstration(demo)
    assert loaded.records == 6 * EPISODES and loaded.files[0].number_episodes == EPISODES
    _, buffer = demo_to_buffer(demo, 1)
    assert buffer.num_experiences == 6 * EPISODES - 1
    again = run_cli(["record", env_config, "--policy", EXPERT, "--episodes", "1", "--out", demo])
    assert again.returncode == 2 and "exists; pass --force" in again.stdout

    results = tmp_path / "results"
    proc = run_cli(
        ["train", _bc_config(tmp_path / "bc.yaml", demo), "--results-dir", results, "--run-id", "bc", "--no-progress"]
    )
    assert proc.returncode == 0, tail(proc.stdout)
    assert "offline BC stopped (max_steps)" in proc.stdout
    last = proc.stdout.splitlines()[-1]  # the run's result: no reward where no episode ran, never "nan"
    assert last.startswith(f"{BEHAVIOR}: ") and "nan" not in last and "mean reward" not in last, last
    metrics = json.loads((results / "bc" / BEHAVIOR / "bc_metrics.json").read_text())
    assert {"cloning_loss", "held_out_accuracy", "held_out_chance_accuracy", "held_out_rows", "train_rows"} <= set(metrics)
    assert metrics["held_out_rows"] == 10 and metrics["train_rows"] == 91
    status = json.loads((results / "bc" / "run_logs" / "training_status.json").read_text())[BEHAVIOR]
    assert status["steps"] >= 6000 and status["checkpoints"]

    clone = tmp_path / "clone.demo"
    proc = run_cli(["record", env_config, "--checkpoint", results / "bc", "--episodes", "20", "--out", clone])
    assert proc.returncode == 0, tail(proc.stdout)
    assert load_demonstration(clone).files[0].mean_reward > 0.9


def test_bad_demo_path_names_the_key(tmp_path: Path) -> None:
    proc = run_cli(
        ["train", _bc_config(tmp_path / "bc.yaml", tmp_path / "absent.demo"), "--results-dir", tmp_path, "--no-progress"]
    )
    assert proc.returncode == 2
    assert f"behaviors.{BEHAVIOR}.hyperparameters.demo_path: demonstration path" in proc.stdout
    assert "does not exist" in proc.stdout
