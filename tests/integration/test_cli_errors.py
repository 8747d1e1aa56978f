"""Everyday mistakes and hostile files through the real ``stepstream`` console script: one clear line, no traceback.

* a config file that is too large, a YAML alias bomb, a recursive alias, and a value too large to
  quote are refused at once (issue 13, "Bad files and bad bytes"): bounded time, one line that
  gives the limit, never the expanded value;
* an unknown Gymnasium id names the closest registered id;
* a port in use (processor, its metrics, train's metrics), an unusable ``--results-dir`` and
  ``--resume`` of a run without a checkpoint are one line and a non-zero exit, and a start that
  fails after the run folder was made leaves no folder behind (issue 14).

Each refusal is run once for the module (``refused``): one per user path by the real console script in a
subprocess, as a user meets it (``BY_CONSOLE_SCRIPT``), the others one after another in a single interpreter
through the same entry point, ``cli.main.main`` (``tests.cli_batch``), with TensorFlow's import blocked: every
check happens before TensorFlow loads, and the batch shows it. The failed start and the stack trainer's
``--resume`` load TensorFlow and run as subprocesses of their own.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.config import MAX_CONFIG_BYTES, MAX_CONFIG_NODES
from tests.cli_batch import CommandResult, run_batch
from tests.integration.test_cli import BASE_CONFIG, REPO, RUN_TIMEOUT_S, run_cli, stepstream_command, subprocess_env, tail
from tests.ports import PortReservation

QUICK_TIMEOUT_S = 60.0
"""Liveness bound of a refused command (it stops before TensorFlow loads; the bomb once hung past 1 GB)."""
CONFIG_ERROR_EXIT_CODE = 2


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs" YAML: ``levels`` anchors, each a list of ``width`` aliases of the one before."""
    lines = ["a0: &a0 [" + ",".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    # The expanded graph as a typed field's value: its error message once called repr on it.
    lines.append(f"behaviors:\n  CartPole:\n    max_steps: *a{levels - 1}")
    return "\n".join(lines) + "\n"


def assert_one_clear_error(output: str, *needles: str) -> None:
    """A refused command's output: no traceback, an ERROR line holding every needle, and bounded length."""
    assert "Traceback" not in output, tail(output)
    errors = [line for line in output.splitlines() if " ERROR " in line]
    assert len(errors) == 1, tail(output)
    for needle in needles:
        assert needle in errors[0], tail(output)
    assert len(output) < 4000, f"{len(output)} characters of output"


BOMB_COMMANDS = {
    "train": ["train", "--results-dir", "RESULTS"],
    "processor": ["processor", "--port", "0"],
    "trainer": ["trainer", "--behavior", "CartPole"],
    "env": ["env"],
    "unity": ["unity", "--port", "0"],
}
LARGE_VALUES = {
    "long-list": (
        "behaviors:\n  CartPole:\n    max_steps: [" + ", ".join(["7"] * 15_000) + "]\n",
        "expected an integer, got list [7, 7",
    ),
    "long-string": ("behaviors:\n  CartPole:\n    max_steps: '" + "9x" * 200_000 + "'\n", "chars)"),
    "long-key": ("behaviors:\n  CartPole:\n    ? " + "k" * 300_000 + "\n    : 1\n", "chars)"),
}
BY_CONSOLE_SCRIPT = {"bomb-train", "processor-port-in-use--port"}
"""The refusals run by the real console script, one per user path (a config refused, a service that cannot start);
the others run in one interpreter through the same entry point (``tests.cli_batch``), with TensorFlow's import
blocked, so each also shows that it is refused before TensorFlow loads."""


@dataclass(frozen=True)
class Refusals:
    """The module's refused commands, each run once: ``case`` names its folder under ``root`` and its result."""

    root: Path
    busy_port: int
    """A port another process listened on while the commands ran."""
    results: dict[str, CommandResult | subprocess.CompletedProcess[str]]

    def folder(self, case: str) -> Path:
        return self.root / case

    def __getitem__(self, case: str) -> CommandResult | subprocess.CompletedProcess[str]:
        return self.results[case]


def refusal_commands(root: Path, busy_port: int) -> dict[str, list[str | Path]]:
    """Every refused command of the module by case name; what a case reads or must not make is under ``root / case``."""

    def folder(case: str) -> Path:
        (root / case).mkdir()
        return root / case

    def config(case: str, name: str, text: str) -> Path:
        path = folder(case) / name
        path.write_text(text, encoding="utf-8")
        return path

    commands: dict[str, list[str | Path]] = {}
    for name, (command, *flags) in BOMB_COMMANDS.items():
        case = f"bomb-{name}"
        bomb = config(case, "bomb.yaml", alias_bomb())
        commands[case] = [command, bomb, *(root / case / "results" if flag == "RESULTS" else flag for flag in flags)]
    loop = config("recursive-alias", "loop.yaml", "behaviors:\n  CartPole: &x\n    max_steps: *x\n")
    commands["recursive-alias"] = ["train", loop]
    huge = config("over-size-limit", "huge.yaml", BASE_CONFIG.read_text(encoding="utf-8"))
    with open(huge, "a", encoding="utf-8") as f:  # 20 MB: once more than 120 s of parsing
        f.write(("# " + "x" * 1000 + "\n") * 20_000)
    commands["over-size-limit"] = ["train", huge]
    for name, (text, _) in LARGE_VALUES.items():
        commands[f"large-value-{name}"] = ["train", config(f"large-value-{name}", "large_value.yaml", text)]
    results = folder("unknown-gym-id") / "results"
    commands["unknown-gym-id"] = ["train", BASE_CONFIG, "--env", "gym:CartPol-v1", "--results-dir", results]
    for flag, other in (("--port", "--metrics-port"), ("--metrics-port", "--port")):
        commands[f"processor-port-in-use{flag}"] = ["processor", flag, str(busy_port), other, "0"]
    results = folder("train-metrics-port-in-use") / "results"
    commands["train-metrics-port-in-use"] = ["train", BASE_CONFIG, "--metrics-port", str(busy_port), "--results-dir", results]
    for where in ("a-file", "under-a-file"):
        blocker = config(f"results-dir-{where}", "blocker", "not a folder\n")
        results = blocker if where == "a-file" else blocker / "results"
        commands[f"results-dir-{where}"] = ["train", BASE_CONFIG, "--results-dir", results]
    results = folder("resume-without-checkpoint") / "results"
    (results / "ppo" / "CartPole").mkdir(parents=True)  # a run killed before its first checkpoint
    commands["resume-without-checkpoint"] = ["train", BASE_CONFIG, "--results-dir", results, "--resume"]
    return commands


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> Refusals:
    """Every refused command of the module, run once, while another process holds ``busy_port``."""
    root = tmp_path_factory.mktemp("refused")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy_port = holder.getsockname()[1]
        commands = refusal_commands(root, busy_port)
        batched = [case for case in commands if case not in BY_CONSOLE_SCRIPT]
        results: dict[str, CommandResult | subprocess.CompletedProcess[str]] = dict(
            zip(batched, run_batch([commands[c] for c in batched], env=subprocess_env(), block_tensorflow=True), strict=True)
        )
        for case in BY_CONSOLE_SCRIPT:
            results[case] = run_cli(commands[case], timeout_s=QUICK_TIMEOUT_S)
    return Refusals(root, busy_port, results)


def assert_refused(result: CommandResult | subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 and one clear error line holding every needle, at once (``QUICK_TIMEOUT_S``; a subprocess's is its timeout)."""
    assert result.returncode == CONFIG_ERROR_EXIT_CODE, tail(result.stdout)
    assert_one_clear_error(result.stdout, *needles)
    if isinstance(result, CommandResult):
        assert result.seconds < QUICK_TIMEOUT_S and not result.tensorflow_loaded, (result.seconds, result.args)


@pytest.mark.parametrize("command", list(BOMB_COMMANDS))
def test_an_alias_bomb_is_refused_at_once(refused: Refusals, command: str) -> None:
    assert len(alias_bomb().encode()) < 500  # the bomb was 422 bytes
    case = f"bomb-{command}"
    assert_refused(refused[case], str(refused.folder(case) / "bomb.yaml"), f"expand to more than {MAX_CONFIG_NODES} nodes")
    assert not (refused.folder(case) / "results").exists()


def test_a_recursive_alias_is_refused(refused: Refusals) -> None:
    assert_refused(refused["recursive-alias"], "refers to its own anchor")


def test_a_config_over_the_size_limit_is_refused_unread(refused: Refusals) -> None:
    assert (refused.folder("over-size-limit") / "huge.yaml").stat().st_size > 19 * MAX_CONFIG_BYTES
    assert_refused(refused["over-size-limit"], f"larger than {MAX_CONFIG_BYTES} bytes")


@pytest.mark.parametrize("value", list(LARGE_VALUES))
def test_an_error_quotes_a_large_value_bounded(refused: Refusals, value: str) -> None:
    assert_refused(refused[f"large-value-{value}"], "behaviors.CartPole", LARGE_VALUES[value][1])


def test_an_unknown_gym_id_names_the_closest_one(refused: Refusals) -> None:
    assert_refused(refused["unknown-gym-id"], "env_path: gym:CartPol-v1", "unknown Gymnasium id", "did you mean CartPole-v1")
    assert not (refused.folder("unknown-gym-id") / "results").exists()


# -- everyday mistakes (issue 14, "No traceback for an everyday mistake") ------------------------------


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_processor_on_a_port_in_use_is_one_line(refused: Refusals, flag: str) -> None:
    assert_refused(refused[f"processor-port-in-use{flag}"], f"{flag} {refused.busy_port}", "already in use")


def test_train_on_a_metrics_port_in_use_is_refused_before_anything_starts(refused: Refusals) -> None:
    assert_refused(refused["train-metrics-port-in-use"], f"--metrics-port {refused.busy_port}", "already in use")
    # refused before the results folder, and so before TensorFlow's import
    assert not (refused.folder("train-metrics-port-in-use") / "results").exists()


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_an_unusable_results_dir_is_one_line(refused: Refusals, where: str) -> None:
    blocker = refused.folder(f"results-dir-{where}") / "blocker"
    assert_refused(refused[f"results-dir-{where}"], f"--results-dir {blocker if where == 'a-file' else blocker / 'results'}")


def test_resume_of_a_run_without_a_checkpoint_is_refused(refused: Refusals) -> None:
    assert_refused(refused["resume-without-checkpoint"], "holds no checkpoint to resume", "--force")


def test_a_failed_start_leaves_no_run_folder_so_the_rerun_is_not_refused(tmp_path: Path) -> None:
    """A learner that cannot be built fails after TensorFlow loaded and the run folder exists: the folder goes."""
    config = tmp_path / "curious.yaml"
    config.write_text(
        "behaviors:\n  CartPole:\n    trainer_type: ppo\n    max_steps: 500\n    reward_signals:\n      extrinsic: {}\n"
        "      curiosity:\n        network_settings: {normalize: true}\nenv_settings:\n  env_path: gym:CartPole-v1\n",
        encoding="utf-8",
    )
    results = tmp_path / "results"
    # Both attempts in one interpreter (tests.cli_batch): TensorFlow loads once; the folder is checked between them
    # by the second attempt itself (a leftover folder would make it refuse with "already exists").
    attempts = run_batch([["train", config, "--results-dir", results, "--no-progress"]] * 2, env=subprocess_env())
    for attempt, proc in enumerate(attempts):
        assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
        assert "reward_signals.curiosity.network_settings.normalize" in proc.stdout, (attempt, tail(proc.stdout))
        assert "already exists" not in proc.stdout and "Traceback" not in proc.stdout, (attempt, tail(proc.stdout))
        assert proc.tensorflow_loaded, attempt  # the premise: it failed after TensorFlow loaded
        assert not (results / "ppo").exists(), attempt


def test_trainer_resume_without_a_checkpoint_says_it_starts_from_scratch(tmp_path: Path, ports: PortReservation) -> None:
    """The stack trainer keeps its documented fallback (--resume with nothing saved starts fresh), and says so."""
    address = f"127.0.0.1:{ports.port()}"  # held and never listened on: the trainer waits for its processor
    log = tmp_path / "trainer.log"
    args = ["trainer", BASE_CONFIG, "--behavior", "CartPole", "--processor", address, "--resume", "--results-dir", tmp_path]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [*stepstream_command(), *map(str, args)], cwd=REPO, env=subprocess_env(), stdout=out, stderr=out
        )
        try:
            # Stop it once it waits for its processor (TensorFlow loaded, its signal handlers installed).
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while "waiting for an env client" not in log.read_text(encoding="utf-8") and time.monotonic() < deadline:
                assert proc.poll() is None, tail(log.read_text(encoding="utf-8"))
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(RUN_TIMEOUT_S) == 0, tail(log.read_text(encoding="utf-8"))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = log.read_text(encoding="utf-8")
    warnings = [line for line in output.splitlines() if " WARNING " in line and "starting from scratch" in line]
    assert len(warnings) == 1 and "--resume" in warnings[0] and "no checkpoint" in warnings[0], tail(output)
    assert "Traceback" not in output, tail(output)
