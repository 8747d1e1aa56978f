"""``stepstream train --resume`` on damaged checkpoints, through the console script's entry point (``cli.main.main``).

The session's short PPO run of the 1-D task (``conftest.simple_ppo_run``, ``tests.integration.simple_run``)
leaves three checkpoints; each case damages a copy of its folder as a crash or a disk would, then resumes it:

* the newest checkpoint's TensorFlow data file cut in half: one WARNING names it, and the run
  resumes from the checkpoint before it;
* every checkpoint's data cut: one clear error line, exit 2, no traceback;
* TensorFlow's ``checkpoint`` state file gone (it is not needed): the run resumes from the newest;
* the newest checkpoint's ``.json`` record missing (a save killed before its commit): one WARNING
  names it, and the run resumes from the one before;
* no checkpoint at all: a WARNING says the run starts at step 0;
* a checkpoint at int64's highest policy version (a trainer that followed a hostile publisher): the
  resumed run refuses the next version with one error line, exit 2 (offline BC, no env needed).

The module resumes every case once (``resumed``), one after another in a single interpreter through the console
script's entry point (``tests.cli_batch``), so TensorFlow loads once for the module rather than once per case; the
console script itself trains the shared run, and resumes a run in a subprocess in ``test_cli.py``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_batch import CommandResult, run_batch
from tests.integration.simple_run import (
    BEHAVIOR,
    CHECKPOINT_INTERVAL,
    MAX_STEPS,
    RUN_ID,
    checkpoint_steps,
    checkpoints_dir,
    train_args,
    write_config,
)
from tests.integration.test_cli import subprocess_env, tail

pytestmark = pytest.mark.timeout(600)
"""The first test's setup resumes every case (``resumed``): 166-173 s at load 15 on 2 cores, near the 300 s default."""

INT64_MAX = 2**63 - 1
RESUMED_MAX_STEPS = MAX_STEPS + CHECKPOINT_INTERVAL


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


# -- the damages, each done to a copy of the shared run ------------------------------------------


def cut_the_newest_data_file(run_dir: Path) -> None:
    cut_in_half(data_file(run_dir, checkpoint_steps(run_dir)[-1]))


def cut_every_data_file(run_dir: Path) -> None:
    for step in checkpoint_steps(run_dir):
        cut_in_half(data_file(run_dir, step))


def remove_the_tensorflow_state_file(run_dir: Path) -> None:
    (checkpoints_dir(run_dir) / "checkpoint").unlink(missing_ok=True)  # written by tf.train.CheckpointManager


def remove_the_newest_json_record(run_dir: Path) -> None:
    (checkpoints_dir(run_dir) / f"ckpt-{checkpoint_steps(run_dir)[-1]}.json").unlink()


def remove_every_checkpoint(run_dir: Path) -> None:
    for file in checkpoints_dir(run_dir).iterdir():
        if file.is_file():
            file.unlink()


DAMAGES: dict[str, tuple[Callable[[Path], None], int]] = {
    "cut-data-file": (cut_the_newest_data_file, RESUMED_MAX_STEPS),
    "every-data-file-cut": (cut_every_data_file, RESUMED_MAX_STEPS),
    "no-tensorflow-state-file": (remove_the_tensorflow_state_file, RESUMED_MAX_STEPS),
    "missing-json-record": (remove_the_newest_json_record, RESUMED_MAX_STEPS),
    "no-checkpoint": (remove_every_checkpoint, CHECKPOINT_INTERVAL),
}
"""Case name -> (what is done to the copy, ``max_steps`` of the resumed run)."""


def checkpoint_at_the_highest_version(root: Path) -> list[str | Path]:
    """An offline BC run whose only checkpoint holds int64's highest policy version; returns its resume command."""
    from cli.record import demo_bytes, record_episodes, scripted_actor
    from common.config import load_config
    from envclient.simple_env import SimpleEnv, scripted_expert
    from trainer.checkpoint import Checkpointer
    from trainer.loop import CHECKPOINTS_DIR
    from trainer.offline import make_offline_learner

    env = SimpleEnv(4, continuous=False, behavior_name=BEHAVIOR, seed=0)
    pairs, returns = record_episodes(env, scripted_actor(scripted_expert, env.brain_parameters, "expert"), 4)
    demo = root / "expert.demo"
    demo.write_bytes(demo_bytes("expert", env.brain_parameters, pairs, returns))
    behavior = {"trainer_type": "bc", "hyperparameters": {"demo_path": str(demo), "batch_size": 8}, "max_steps": 100}
    config = root / "bc.yaml"
    config.write_text(yaml.safe_dump({"behaviors": {BEHAVIOR: behavior}}), encoding="utf-8")
    run_dir = root / "results" / RUN_ID
    settings = load_config(config).behaviors[BEHAVIOR]
    learner = make_offline_learner(BEHAVIOR, settings, seed=0)
    Checkpointer(run_dir / BEHAVIOR / CHECKPOINTS_DIR, learner, settings.keep_checkpoints).save(step=10, version=INT64_MAX)
    return train_args(config, root / "results", "--resume")


@dataclass(frozen=True)
class Resumed:
    """One case: the damaged copy (``run_dir``, the shared run's steps in ``original_steps``) and its resume's output."""

    run_dir: Path
    original_steps: list[int]
    proc: CommandResult


@pytest.fixture(scope="module")
def resumed(simple_ppo_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Resumed]:
    """Every case of the module, damaged and resumed once."""
    root = tmp_path_factory.mktemp("resumed")
    run_dirs: dict[str, Path] = {}
    commands: dict[str, list[str | Path]] = {}
    for case, (damage, max_steps) in DAMAGES.items():
        run_dir = root / case / "results" / RUN_ID
        shutil.copytree(simple_ppo_run, run_dir)
        damage(run_dir)
        run_dirs[case] = run_dir
        commands[case] = train_args(write_config(root / case / "more.yaml", max_steps), run_dir.parent, "--resume")
    (root / "highest-version").mkdir()
    commands["highest-version"] = checkpoint_at_the_highest_version(root / "highest-version")
    run_dirs["highest-version"] = root / "highest-version" / "results" / RUN_ID
    procs = dict(zip(commands, run_batch(list(commands.values()), env=subprocess_env()), strict=True))
    original = checkpoint_steps(simple_ppo_run)
    return {case: Resumed(run_dirs[case], original, procs[case]) for case in commands}


def assert_resumed_from(proc: CommandResult, run_dir: Path, step: int) -> None:
    assert proc.returncode == 0, tail(proc.stdout)
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    assert f"restored {checkpoints_dir(run_dir)}/ckpt-{step} (step {step}," in proc.stdout, tail(proc.stdout)
    assert f"trainer started at step {step} " in proc.stdout, tail(proc.stdout)
    status = read_status(run_dir)
    assert status["steps"] >= RESUMED_MAX_STEPS
    # What is listed is what is on disk, each complete: the damaged checkpoint is gone.
    assert [c["steps"] for c in status["checkpoints"]] == checkpoint_steps(run_dir)
    for kept in checkpoint_steps(run_dir):
        prefix = checkpoints_dir(run_dir) / f"ckpt-{kept}"
        assert Path(f"{prefix}.json").is_file() and Path(f"{prefix}.policy.pb").is_file(), prefix


def test_a_cut_data_file_falls_back_to_the_checkpoint_before(resumed: dict[str, Resumed]) -> None:
    case = resumed["cut-data-file"]
    *_, before, newest = case.original_steps

    (warning,) = warnings(case.proc.stdout)
    assert f"skipping checkpoint {checkpoints_dir(case.run_dir)}/ckpt-{newest}: its TensorFlow data cannot be read" in warning
    assert_resumed_from(case.proc, case.run_dir, before)


def test_every_checkpoint_cut_is_one_clear_error(resumed: dict[str, Resumed]) -> None:
    case = resumed["every-data-file-cut"]
    proc = case.proc

    assert proc.returncode == 2, tail(proc.stdout)
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    errors = [line for line in proc.stdout.splitlines() if "no complete checkpoint to restore" in line]
    assert len(errors) == 1 and str(checkpoints_dir(case.run_dir)) in errors[0], tail(proc.stdout)


def test_no_tensorflow_state_file_resumes_from_the_newest(resumed: dict[str, Resumed]) -> None:
    case = resumed["no-tensorflow-state-file"]

    assert not warnings(case.proc.stdout), warnings(case.proc.stdout)
    assert_resumed_from(case.proc, case.run_dir, case.original_steps[-1])


def test_a_missing_json_record_falls_back_to_the_checkpoint_before(resumed: dict[str, Resumed]) -> None:
    case = resumed["missing-json-record"]
    *_, before, newest = case.original_steps

    (warning,) = warnings(case.proc.stdout)
    assert (
        f"skipping checkpoint {checkpoints_dir(case.run_dir)}/ckpt-{newest}: no readable ckpt-{newest}.json record" in warning
    )
    assert_resumed_from(case.proc, case.run_dir, before)


def test_resume_without_any_checkpoint_is_refused_in_one_line(resumed: dict[str, Resumed]) -> None:
    """``train --resume`` of a run that saved no checkpoint is refused (cli.results.check_resumable), not started
    from scratch behind the user's back; the stack trainer's ``--resume`` says it starts from scratch instead
    (tests/integration/test_cli_errors.py)."""
    proc = resumed["no-checkpoint"].proc

    assert proc.returncode == 2, tail(proc.stdout)
    assert "holds no checkpoint to resume" in proc.stdout and "Traceback" not in proc.stdout, tail(proc.stdout)


def test_resuming_at_the_highest_policy_version_trains_on(resumed: dict[str, Resumed]) -> None:
    """A checkpoint at ``MAX_POLICY_VERSION`` gives way to the processor's count (``TrainerLoop._publish``, "Versions
    rise by one" in docs/architecture.md): the resumed run trains to its end instead of stopping."""
    proc = resumed["highest-version"].proc

    assert proc.returncode == 0, tail(proc.stdout)
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    assert "would pass the highest allowed" not in proc.stdout, tail(proc.stdout)
    assert "started at step 10 with policy version 0 " in proc.stdout, tail(proc.stdout)  # the sink's count
    assert "saved (step 100, policy version" in proc.stdout, tail(proc.stdout)  # trained to max_steps
