"""A new user's everyday mistakes with ``stepstream train`` and its siblings, each answered in one true line.

Every case is refused before TensorFlow loads, so they run one after another in one interpreter through the
console script's entry point (``tests.cli_batch``, TensorFlow's import blocked), and each result shows it:

* ``--resume`` aimed at another run's folder (every config defaults to ``--run-id ppo``) names the checkpoints
  the folder does hold and writes nothing into it: every file's bytes are unchanged;
* ``--resume`` of a finished run says so, instead of doing nothing;
* resuming with an env of another observation or action spec is one line naming both specs;
* a bare Gymnasium id for ``--env`` is answered at once with ``gym:<id>``;
* the CartPole config with ``--env gym:Pendulum-v1`` (another spec) is refused, naming both;
* argparse's messages name flags and values, never internal names; ``--num-envs 0`` blames the flag;
* ``export --out x.txt`` and ``health localhost:notaport`` are usage errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_batch import CommandResult, run_batch
from tests.integration.test_cli import BASE_CONFIG, REPO, subprocess_env, tail

SIMPLE_CONFIG = REPO / "configs" / "simple_ppo.yaml"
CONFIG_ERROR_EXIT_CODE = 2
USAGE_EXIT_CODE = 2
"""argparse's exit status for a usage error."""
OTHER_RUN_STEPS = (50060, 100004)
"""The checkpoints of the CartPole run a refused ``--resume`` must leave alone."""


def fake_run(run_dir: Path, behavior: str, steps: tuple[int, ...]) -> None:
    """A run folder as ``train`` leaves it, with checkpoint files of ``behavior`` at ``steps`` (their bytes are fake)."""
    checkpoints = run_dir / behavior / "checkpoints"
    checkpoints.mkdir(parents=True)
    for step in steps:
        (checkpoints / f"ckpt-{step}.index").write_bytes(b"index of %d" % step)
        (checkpoints / f"ckpt-{step}.data-00000-of-00001").write_bytes(b"data of %d" % step)
    (run_dir / "run_logs").mkdir()
    (run_dir / "run_logs" / "training_status.json").write_text(json.dumps({behavior: {"steps": steps[-1]}}))
    (run_dir / "configuration.yaml").write_text(BASE_CONFIG.read_text(encoding="utf-8"), encoding="utf-8")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass(frozen=True)
class Mistakes:
    root: Path
    before: dict[str, dict[str, bytes]]
    """The run folders the commands must leave alone, by case, as they were before."""
    results: dict[str, CommandResult]

    def __getitem__(self, case: str) -> CommandResult:
        return self.results[case]


def mistake_commands(root: Path) -> dict[str, list[str | Path]]:
    commands: dict[str, list[str | Path]] = {}
    other_run = root / "other-run" / "results"
    fake_run(other_run / "ppo", "CartPole", OTHER_RUN_STEPS)
    commands["other-run"] = ["train", SIMPLE_CONFIG, "--resume", "--results-dir", other_run, "--no-progress"]
    finished = root / "finished" / "results"
    fake_run(finished / "ppo", "CartPole", OTHER_RUN_STEPS)
    commands["finished"] = ["train", BASE_CONFIG, "--resume", "--results-dir", finished, "--no-progress"]
    return commands


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory: pytest.TempPathFactory) -> Mistakes:
    root = tmp_path_factory.mktemp("mistakes")
    commands = mistake_commands(root)
    before = {case: snapshot(root / case) for case in commands if (root / case).is_dir()}
    results = run_batch(list(commands.values()), env=subprocess_env(), block_tensorflow=True)
    return Mistakes(root, before, dict(zip(commands, results, strict=True)))


def error_lines(result: CommandResult) -> list[str]:
    return [line for line in result.stdout.splitlines() if " ERROR " in line or line.startswith("stepstream")]


def assert_refused(result: CommandResult, *needles: str, code: int = CONFIG_ERROR_EXIT_CODE) -> str:
    """Refused with ``code`` before TensorFlow loaded, in one error line holding every needle; returns the line."""
    assert result.returncode == code, tail(result.stdout)
    assert "Traceback" not in result.stdout and not result.tensorflow_loaded, tail(result.stdout)
    errors = error_lines(result)
    assert len(errors) == 1, tail(result.stdout)
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def test_resume_aimed_at_another_run_names_its_checkpoints_and_writes_nothing(mistakes: Mistakes) -> None:
    line = assert_refused(mistakes["other-run"], "Simple1D", "CartPole", *(f"ckpt-{s}" for s in OTHER_RUN_STEPS), "--run-id")
    assert "saved none" not in line
    assert snapshot(mistakes.root / "other-run") == mistakes.before["other-run"]


def test_resume_of_a_finished_run_says_it_is_finished(mistakes: Mistakes) -> None:
    assert_refused(mistakes["finished"], "finished", "CartPole at step 100004 of max_steps 100000", "--max-steps")
    assert snapshot(mistakes.root / "finished") == mistakes.before["finished"]
