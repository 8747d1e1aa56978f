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
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.cli_batch import CommandResult, run_batch
from tests.integration.test_cli import BASE_CONFIG, REPO, RUN_TIMEOUT_S, stepstream_command, subprocess_env, tail
from tests.ports import PortReservation

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


def mistake_commands(root: Path, simple_ppo_run: Path) -> dict[str, list[str | Path]]:
    commands: dict[str, list[str | Path]] = {}
    other_run = root / "other-run" / "results"
    fake_run(other_run / "ppo", "CartPole", OTHER_RUN_STEPS)
    commands["other-run"] = ["train", SIMPLE_CONFIG, "--resume", "--results-dir", other_run, "--no-progress"]
    finished = root / "finished" / "results"
    fake_run(finished / "ppo", "CartPole", OTHER_RUN_STEPS)
    commands["finished"] = ["train", BASE_CONFIG, "--resume", "--results-dir", finished, "--no-progress"]
    other_spec = root / "other-spec" / "results"
    shutil.copytree(simple_ppo_run, other_spec / simple_ppo_run.name)
    continuous = yaml.safe_load(SIMPLE_CONFIG.read_text(encoding="utf-8"))
    continuous["env_settings"]["env_path"] = "simple:continuous"
    (root / "continuous.yaml").write_text(yaml.safe_dump(continuous), encoding="utf-8")
    commands["other-spec"] = [
        "train", root / "continuous.yaml", "--resume", "--results-dir", other_spec, "--run-id", simple_ppo_run.name,
    ]  # fmt: skip
    commands["bare-gym-id"] = ["train", BASE_CONFIG, "--env", "CartPole-v1", "--results-dir", root / "bare" / "results"]
    commands["env-of-another-spec"] = [
        "train", BASE_CONFIG, "--env", "gym:Pendulum-v1", "--results-dir", root / "pendulum" / "results",
    ]  # fmt: skip
    commands["max-steps-not-an-integer"] = ["train", BASE_CONFIG, "--max-steps", "x"]
    commands["demo-without-its-command"] = ["demo"]
    commands["num-envs-0"] = ["train", BASE_CONFIG, "--num-envs", "0"]
    commands["export-to-txt"] = ["export", root / "no-run", "--out", root / "model.txt"]
    commands["health-not-a-port"] = ["health", "localhost:notaport"]
    return commands


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory: pytest.TempPathFactory, simple_ppo_run: Path) -> Mistakes:
    root = tmp_path_factory.mktemp("mistakes")
    commands = mistake_commands(root, simple_ppo_run)
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


def test_resuming_with_an_env_of_another_spec_is_one_line_naming_both(mistakes: Mistakes) -> None:
    assert_refused(mistakes["other-spec"], "--resume", "discrete [2]", "continuous 1", "simple:continuous")
    assert snapshot(mistakes.root / "other-spec") == mistakes.before["other-spec"]


def test_a_bare_gym_id_is_answered_at_once_with_its_prefix(mistakes: Mistakes) -> None:
    assert_refused(mistakes["bare-gym-id"], "did you mean --env gym:CartPole-v1?")
    assert not (mistakes.root / "bare").exists()


def test_a_config_on_an_env_of_another_spec_is_refused_naming_both(mistakes: Mistakes) -> None:
    line = assert_refused(mistakes["env-of-another-spec"], "--env gym:Pendulum-v1", "gym:CartPole-v1", "'CartPole'")
    assert "float32[3], actions continuous 1" in line and "float32[4], actions discrete [2]" in line
    assert not (mistakes.root / "pendulum").exists()


def test_a_trainer_with_no_processor_says_nothing_answers(tmp_path: Path, ports: PortReservation) -> None:
    address = f"127.0.0.1:{ports.port()}"  # held and never listened on
    log = tmp_path / "trainer.log"
    args = ["trainer", BASE_CONFIG, "--behavior", "CartPole", "--processor", address, "--results-dir", tmp_path]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [*stepstream_command(), *map(str, args)], cwd=REPO, env=subprocess_env(), stdout=out, stderr=out
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while "nothing answers" not in log.read_text(encoding="utf-8") and time.monotonic() < deadline:
                assert proc.poll() is None, tail(log.read_text(encoding="utf-8"))
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(RUN_TIMEOUT_S) == 0, tail(log.read_text(encoding="utf-8"))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = log.read_text(encoding="utf-8")
    warnings = [line for line in output.splitlines() if " WARNING " in line and "nothing answers" in line]
    assert warnings and f"nothing answers at {address}" in warnings[0] and "stepstream processor" in warnings[0], tail(output)


@pytest.mark.parametrize(
    ("case", "needles", "internal"),
    [
        ("max-steps-not-an-integer", ["argument --max-steps: not an integer: 'x'"], "_at_least_one"),
        ("demo-without-its-command", ["required: COMMAND"], "demo_command"),
        ("num-envs-0", ["argument --num-envs: must be >= 1, got 0"], "env_settings"),
        ("health-not-a-port", ["'localhost:notaport' is not HOST:PORT"], "UNAVAILABLE"),
    ],
)
def test_usage_errors_name_flags_and_values_never_internal_names(
    mistakes: Mistakes, case: str, needles: list[str], internal: str
) -> None:
    assert_refused(mistakes[case], *needles, code=USAGE_EXIT_CODE)
    assert internal not in mistakes[case].stdout


def test_export_refuses_an_out_file_that_is_not_onnx(mistakes: Mistakes) -> None:
    assert_refused(mistakes["export-to-txt"], "--out", "must end in .onnx")
    assert not (mistakes.root / "model.txt").exists()


def test_the_quiet_recipe_still_prints_the_run_s_result(tmp_path: Path) -> None:
    """``--log-level WARNING ... --no-progress``: no log line, and the result on stdout all the same."""
    args = [
        "--log-level",
        "WARNING",
        "train",
        SIMPLE_CONFIG,
        "--results-dir",
        tmp_path,
        "--max-steps",
        "1000",
        "--no-progress",
    ]
    proc = subprocess.run(
        [*stepstream_command(), *map(str, args)], cwd=REPO, env=subprocess_env(), capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, tail(proc.stderr)
    assert re.fullmatch(r"Simple1D: \d+ steps, \d+ episodes, mean reward [\d.-]+, policy version \d+\n", proc.stdout), (
        proc.stdout
    )
    assert " INFO " not in proc.stderr, tail(proc.stderr)
