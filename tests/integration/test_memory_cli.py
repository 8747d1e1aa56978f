"""``network_settings.memory`` through the ``stepstream`` command: train, checkpoint (with its ONNX model), ``--resume``
and ``--inference``, each a subprocess on a tiny budget of the 1-D task (which needs no memory: this checks the
plumbing, ``tests/learning/test_ppo_memory.py`` the learning)."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import yaml

from protos import pb
from tests.integration.test_cli import run_cli, tail

MEMORY_SIZE = 8


def _config(path: Path, max_steps: int) -> Path:
    behavior = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 16, "buffer_size": 64, "learning_rate": 5.0e-3, "num_epoch": 3},
        "network_settings": {
            "hidden_units": 16,
            "num_layers": 1,
            "memory": {"memory_size": MEMORY_SIZE, "sequence_length": 4},
        },
        "max_steps": max_steps,
        "time_horizon": 16,
        "summary_freq": 300,
        "checkpoint_interval": 300,
    }
    config = {"behaviors": {"Simple1D": behavior}, "env_settings": {"env_path": "simple:discrete", "num_envs": 2}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _args(config: Path, results: Path, *extra: str) -> list[str | Path]:
    return ["train", config, "--results-dir", results, "--run-id", "memory", "--seed", "0", "--no-progress", *extra]


def test_a_recurrent_run_checkpoints_resumes_and_acts_in_inference(tmp_path: Path) -> None:
    results = tmp_path / "results"
    first = run_cli(_args(_config(tmp_path / "a.yaml", 600), results))
    assert first.returncode == 0, tail(first.stdout)
    checkpoints = results / "memory" / "Simple1D" / "checkpoints"
    saved = sorted(checkpoints.glob("ckpt-*.policy.pb"))
    assert saved, sorted(p.name for p in checkpoints.iterdir())
    update = pb.PolicyUpdate.FromString(saved[-1].read_bytes())
    assert update.artifact.memory_size == MEMORY_SIZE
    model = onnx.load(str(results / "memory" / "Simple1D.onnx"))
    assert [i.name for i in model.graph.input][-1] == "recurrent_in"
    assert model.graph.output[-1].name == "recurrent_out"

    resumed = run_cli(_args(_config(tmp_path / "b.yaml", 900), results, "--resume"))
    assert resumed.returncode == 0, tail(resumed.stdout)
    stopped = re.search(r"stopped \(max_steps\) at step (\d+)", resumed.stdout)
    assert "restored" in resumed.stdout and stopped is not None and int(stopped.group(1)) >= 900, tail(resumed.stdout)

    inference = run_cli(_args(_config(tmp_path / "b.yaml", 900), results, "--inference"))
    assert inference.returncode == 0, tail(inference.stdout)
    assert "inference ran" in inference.stdout, tail(inference.stdout)
