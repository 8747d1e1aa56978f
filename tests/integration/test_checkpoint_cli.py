"""``stepstream train --resume`` on damaged checkpoints, through the real console script in subprocesses.

One short PPO run of the 1-D task (``simple:discrete``) leaves three checkpoints; each test damages a
copy of its folder as a crash or a disk would, then resumes it:

* the newest checkpoint's TensorFlow data file cut in half: one WARNING names it, and the run
  resumes from the checkpoint before it;
* every checkpoint's data cut: one clear error line, exit 2, no traceback;
* TensorFlow's ``checkpoint`` state file gone (it is not needed): the run resumes from the newest;
* the newest checkpoint's ``.json`` record missing (a save killed before its commit): one WARNING
  names it, and the run resumes from the one before;
* no checkpoint at all: a WARNING says the run starts at step 0;
* a checkpoint at int64's highest policy version (a trainer that followed a hostile publisher): the
  resumed run refuses the next version with one error line, exit 2 (offline BC, no env needed).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_cli import run_cli, tail

BEHAVIOR = "Simple1D"
MAX_STEPS = 600
CHECKPOINT_INTERVAL = 200
RUN_ID = "damaged"


INT64_MAX = 2**63 - 1


def write_config(path: Path, max_steps: int, checkpoint_interval: int = CHECKPOINT_INTERVAL) -> Path:
    behavior = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 16, "buffer_size": 64, "learning_rate": 5e-3, "num_epoch": 1},
        "network_settings": {"hidden_units": 8, "num_layers": 1},
        "max_steps": max_steps,
        "time_horizon": 16,
        "summary_freq": checkpoint_interval,
        "checkpoint_interval": checkpoint_interval,
        "keep_checkpoints": 3,
    }
    config = {"behaviors": {BEHAVIOR: behavior}, "env_settings": {"env_path": "simple:discrete", "num_envs": 4, "seed": 0}}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def train(config: Path, results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(["train", config, "--results-dir", results, "--run-id", RUN_ID, "--seed", "0", "--no-progress", *extra])


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / BEHAVIOR / "checkpoints"


def checkpoint_steps(run_dir: Path) -> list[int]:
    indexes = checkpoints_dir(run_dir).glob("ckpt-*.index")
    return sorted(int(p.name.removeprefix("ckpt-").removesuffix(".index")) for p in indexes)


def read_status(run_dir: Path) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads((run_dir / "run_logs" / "training_status.json").read_text(encoding="utf-8"))[BEHAVIOR]
    return entry


def warnings(output: str) -> list[str]:
    """The trainer's WARNING lines (gRPC's own, e.g. a stream aborted at shutdown, are not about checkpoints)."""
    return [line for line in output.splitlines() if " WARNING trainer." in line]


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def data_file(run_dir: Path, step: int) -> Path:
    (found,) = checkpoints_dir(run_dir).glob(f"ckpt-{step}.data-*")
    return found


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run with three checkpoints; tests damage copies of it."""
    root = tmp_path_factory.mktemp("first")
    proc = train(write_config(root / "run.yaml", MAX_STEPS), root / "results")
    assert proc.returncode == 0, tail(proc.stdout)
    run_dir = root / "results" / RUN_ID
    assert len(checkpoint_steps(run_dir)) == 3, checkpoint_steps(run_dir)
    return run_dir


def copy_run(first_run: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(first_run, tmp_path / "results" / RUN_ID)
    return tmp_path / "results" / RUN_ID


def resume(run_dir: Path, tmp_path: Path, max_steps: int = MAX_STEPS + 200) -> subprocess.CompletedProcess[str]:
    return train(write_config(tmp_path / "more.yaml", max_steps), run_dir.parent, "--resume")


def assert_resumed_from(proc: subprocess.CompletedProcess[str], run_dir: Path, step: int) -> None:
    assert proc.returncode == 0, tail(proc.stdout)
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    assert f"restored {checkpoints_dir(run_dir)}/ckpt-{step} (step {step}," in proc.stdout, tail(proc.stdout)
    assert f"trainer started at step {step} " in proc.stdout, tail(proc.stdout)
    status = read_status(run_dir)
    assert status["steps"] >= MAX_STEPS + 200
    # What is listed is what is on disk, each complete: the damaged checkpoint is gone.
    assert [c["steps"] for c in status["checkpoints"]] == checkpoint_steps(run_dir)
    for kept in checkpoint_steps(run_dir):
        prefix = checkpoints_dir(run_dir) / f"ckpt-{kept}"
        assert Path(f"{prefix}.json").is_file() and Path(f"{prefix}.policy.pb").is_file(), prefix


def test_a_cut_data_file_falls_back_to_the_checkpoint_before(first_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(first_run, tmp_path)
    *_, before, newest = checkpoint_steps(run_dir)
    cut_in_half(data_file(run_dir, newest))

    proc = resume(run_dir, tmp_path)

    (warning,) = warnings(proc.stdout)
    assert f"skipping checkpoint {checkpoints_dir(run_dir)}/ckpt-{newest}: its TensorFlow data cannot be read" in warning
    assert_resumed_from(proc, run_dir, before)


def test_every_checkpoint_cut_is_one_clear_error(first_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(first_run, tmp_path)
    for step in checkpoint_steps(run_dir):
        cut_in_half(data_file(run_dir, step))

    proc = resume(run_dir, tmp_path)

    assert proc.returncode == 2, tail(proc.stdout)
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    errors = [line for line in proc.stdout.splitlines() if "no complete checkpoint to restore" in line]
    assert len(errors) == 1 and str(checkpoints_dir(run_dir)) in errors[0], tail(proc.stdout)


def test_no_tensorflow_state_file_resumes_from_the_newest(first_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(first_run, tmp_path)
    (checkpoints_dir(run_dir) / "checkpoint").unlink(missing_ok=True)  # written by tf.train.CheckpointManager

    proc = resume(run_dir, tmp_path)

    assert not warnings(proc.stdout), warnings(proc.stdout)
    assert_resumed_from(proc, run_dir, checkpoint_steps(first_run)[-1])


def test_a_missing_json_record_falls_back_to_the_checkpoint_before(first_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(first_run, tmp_path)
    *_, before, newest = checkpoint_steps(run_dir)
    (checkpoints_dir(run_dir) / f"ckpt-{newest}.json").unlink()

    proc = resume(run_dir, tmp_path)

    (warning,) = warnings(proc.stdout)
    assert f"skipping checkpoint {checkpoints_dir(run_dir)}/ckpt-{newest}: no readable ckpt-{newest}.json record" in warning
    assert_resumed_from(proc, run_dir, before)


def test_resume_without_any_checkpoint_is_refused_in_one_line(first_run: Path, tmp_path: Path) -> None:
    """``train --resume`` of a run that saved no checkpoint is refused (cli.results.check_resumable), not started
    from scratch behind the user's back; the stack trainer's ``--resume`` says it starts from scratch instead
    (tests/integration/test_cli_errors.py)."""
    run_dir = copy_run(first_run, tmp_path)
    for file in checkpoints_dir(run_dir).iterdir():
        if file.is_file():
            file.unlink()

    proc = resume(run_dir, tmp_path, max_steps=200)

    assert proc.returncode == 2, tail(proc.stdout)
    assert "holds no checkpoint to resume" in proc.stdout and "Traceback" not in proc.stdout, tail(proc.stdout)


def test_resuming_past_the_highest_policy_version_is_one_clear_error(tmp_path: Path) -> None:
    from cli.record import demo_bytes, record_episodes, scripted_actor
    from common.config import load_config
    from envclient.simple_env import SimpleEnv, scripted_expert
    from trainer.checkpoint import Checkpointer
    from trainer.loop import CHECKPOINTS_DIR
    from trainer.offline import make_offline_learner

    env = SimpleEnv(4, continuous=False, behavior_name=BEHAVIOR, seed=0)
    pairs, returns = record_episodes(env, scripted_actor(scripted_expert, env.brain_parameters, "expert"), 4)
    demo = tmp_path / "expert.demo"
    demo.write_bytes(demo_bytes("expert", env.brain_parameters, pairs, returns))
    behavior = {"trainer_type": "bc", "hyperparameters": {"demo_path": str(demo), "batch_size": 8}, "max_steps": 100}
    config = tmp_path / "bc.yaml"
    config.write_text(yaml.safe_dump({"behaviors": {BEHAVIOR: behavior}}), encoding="utf-8")
    run_dir = tmp_path / "results" / RUN_ID
    settings = load_config(config).behaviors[BEHAVIOR]
    learner = make_offline_learner(BEHAVIOR, settings, seed=0)
    Checkpointer(run_dir / BEHAVIOR / CHECKPOINTS_DIR, learner, settings.keep_checkpoints).save(step=10, version=INT64_MAX)

    proc = train(config, tmp_path / "results", "--resume")

    assert proc.returncode == 2, tail(proc.stdout)
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    errors = [line for line in proc.stdout.splitlines() if "would pass the highest allowed" in line]
    assert len(errors) == 1 and str(2**53) in errors[0], tail(proc.stdout)
