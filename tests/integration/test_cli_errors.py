"""Everyday mistakes and hostile files through the real ``stepstream`` console script: one clear line, no traceback.

* a config file that is too large, a YAML alias bomb, a recursive alias, and a value too large to
  quote are refused at once (issue 13, "Bad files and bad bytes"): bounded time, one line that
  gives the limit, never the expanded value;
* an unknown Gymnasium id names the closest registered id;
* a port in use (processor, its metrics, train's metrics), an unusable ``--results-dir`` and
  ``--resume`` of a run without a checkpoint are one line and a non-zero exit, and a start that
  fails after the run folder was made leaves no folder behind (issue 14).

Each case runs the CLI in a subprocess, as a user meets it; all but the failed start need no
TensorFlow (every check happens before it loads), so each takes about the interpreter's start-up.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.config import MAX_CONFIG_BYTES, MAX_CONFIG_NODES
from tests.integration.test_cli import BASE_CONFIG, REPO, RUN_TIMEOUT_S, run_cli, stepstream_command, subprocess_env, tail

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


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--results-dir", "RESULTS"],
        ["processor", "--port", "0"],
        ["trainer", "--behavior", "CartPole"],
        ["env"],
        ["unity", "--port", "0"],
    ],
    ids=lambda command: command[0],
)
def test_an_alias_bomb_is_refused_at_once(tmp_path: Path, command: list[str]) -> None:
    bomb = alias_bomb()
    assert len(bomb.encode()) < 500  # the bomb was 422 bytes
    config = tmp_path / "bomb.yaml"
    config.write_text(bomb, encoding="utf-8")
    results = tmp_path / "results"
    args = [command[0], config, *(str(results) if arg == "RESULTS" else arg for arg in command[1:])]
    proc = run_cli(args, timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, str(config), f"expand to more than {MAX_CONFIG_NODES} nodes")
    assert not results.exists()


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "loop.yaml"
    config.write_text("behaviors:\n  CartPole: &x\n    max_steps: *x\n", encoding="utf-8")
    proc = run_cli(["train", config], timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, "refers to its own anchor")


def test_a_config_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    config = tmp_path / "huge.yaml"
    base = BASE_CONFIG.read_text(encoding="utf-8")
    with open(config, "w", encoding="utf-8") as f:  # 20 MB: once more than 120 s of parsing
        f.write(base)
        f.write(("# " + "x" * 1000 + "\n") * 20_000)
    assert config.stat().st_size > 19 * MAX_CONFIG_BYTES
    proc = run_cli(["train", config], timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, f"larger than {MAX_CONFIG_BYTES} bytes")


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        (
            "behaviors:\n  CartPole:\n    max_steps: [" + ", ".join(["7"] * 15_000) + "]\n",
            "expected an integer, got list [7, 7",
        ),
        ("behaviors:\n  CartPole:\n    max_steps: '" + "9x" * 200_000 + "'\n", "chars)"),
        ("behaviors:\n  CartPole:\n    ? " + "k" * 300_000 + "\n    : 1\n", "chars)"),
    ],
    ids=["long-list", "long-string", "long-key"],
)
def test_an_error_quotes_a_large_value_bounded(tmp_path: Path, yaml_text: str, needle: str) -> None:
    config = tmp_path / "large_value.yaml"
    config.write_text(yaml_text, encoding="utf-8")
    proc = run_cli(["train", config], timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, "behaviors.CartPole", needle)


def test_an_unknown_gym_id_names_the_closest_one(tmp_path: Path) -> None:
    proc = run_cli(
        ["train", BASE_CONFIG, "--env", "gym:CartPol-v1", "--results-dir", tmp_path / "results"], timeout_s=QUICK_TIMEOUT_S
    )
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, "env_path: gym:CartPol-v1", "unknown Gymnasium id", "did you mean CartPole-v1")
    assert not (tmp_path / "results").exists()


# -- everyday mistakes (issue 14, "No traceback for an everyday mistake") ------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_processor_on_a_port_in_use_is_one_line(busy_port: int, flag: str) -> None:
    other = ["--metrics-port", "0"] if flag == "--port" else ["--port", "0"]
    proc = run_cli(["processor", flag, str(busy_port), *other], timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, f"{flag} {busy_port}", "already in use")


def test_train_on_a_metrics_port_in_use_is_refused_before_anything_starts(busy_port: int, tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = run_cli(
        ["train", BASE_CONFIG, "--metrics-port", str(busy_port), "--results-dir", results], timeout_s=QUICK_TIMEOUT_S
    )
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, f"--metrics-port {busy_port}", "already in use")
    assert not results.exists()  # refused before the results folder, and so before TensorFlow's import


@pytest.mark.parametrize("where", ["a-file", "under-a-file"])
def test_an_unusable_results_dir_is_one_line(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder\n", encoding="utf-8")
    results = blocker if where == "a-file" else blocker / "results"
    proc = run_cli(["train", BASE_CONFIG, "--results-dir", results], timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, f"--results-dir {results}")


def test_resume_of_a_run_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "results" / "ppo" / "CartPole").mkdir(parents=True)  # a run killed before its first checkpoint
    proc = run_cli(["train", BASE_CONFIG, "--results-dir", tmp_path / "results", "--resume"], timeout_s=QUICK_TIMEOUT_S)
    assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
    assert_one_clear_error(proc.stdout, "holds no checkpoint to resume", "--force")


def test_a_failed_start_leaves_no_run_folder_so_the_rerun_is_not_refused(tmp_path: Path) -> None:
    """A learner that cannot be built fails after TensorFlow loaded and the run folder exists: the folder goes."""
    config = tmp_path / "curious.yaml"
    config.write_text(
        "behaviors:\n  CartPole:\n    trainer_type: ppo\n    max_steps: 500\n    reward_signals:\n      extrinsic: {}\n"
        "      curiosity:\n        network_settings: {normalize: true}\nenv_settings:\n  env_path: gym:CartPole-v1\n",
        encoding="utf-8",
    )
    results = tmp_path / "results"
    for attempt in range(2):
        proc = run_cli(["train", config, "--results-dir", results, "--no-progress"])
        assert proc.returncode == CONFIG_ERROR_EXIT_CODE, tail(proc.stdout)
        assert "reward_signals.curiosity.network_settings.normalize" in proc.stdout, (attempt, tail(proc.stdout))
        assert "already exists" not in proc.stdout and "Traceback" not in proc.stdout, (attempt, tail(proc.stdout))
        assert not (results / "ppo").exists(), attempt


def test_trainer_resume_without_a_checkpoint_says_it_starts_from_scratch(tmp_path: Path) -> None:
    """The stack trainer keeps its documented fallback (--resume with nothing saved starts fresh), and says so."""
    with socket.socket() as probe:  # a port nobody listens on: the trainer waits for its processor
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
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
