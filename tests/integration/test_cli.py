"""Smoke runs of the real ``stepstream`` console script in subprocesses, each on a tiny step budget.

* ``--help`` of the command and of every subcommand (enumerated from the argparse parser, so new
  subcommands are covered) exits 0 and mentions every flag;
* a config typo is an error naming the dotted key and the file; an existing run without
  ``--resume``/``--force``, and ``--resume``/``--inference`` of a missing run, are clear errors;
* ``train`` runs CartPole PPO end to end and writes every file of docs/architecture.md's "Results
  layout" (one run, shared by the tests below through a module-scoped fixture; tests that change a
  run work on a copy);
* ``--resume`` continues above the first run's steps and policy versions;
* ``--inference`` acts with the newest checkpoint without training;
* SIGINT mid-run saves a checkpoint and exits with 130 (128 + SIGINT, as a shell reports Ctrl-C),
  after which ``--resume`` continues from it; the same run (``interrupted_run``) serves the processor's and the
  trainer's metrics on ``--metrics-port`` while it trains.

Runtime is dominated by TensorFlow's import, once per training process (each trains a few seconds); tests share
runs through module-scoped fixtures where they only read them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.config import parse_config
from tests.cli_batch import CommandResult, run_batch
from tests.ports import logged_metrics_port
from tests.scrape import Scrapes

REPO = Path(__file__).resolve().parents[2]
BASE_CONFIG = REPO / "configs" / "cartpole_ppo.yaml"
BEHAVIOR = "CartPole"
SEED = 0
MAX_STEPS = 2000
SUMMARY_FREQ = 500
CHECKPOINT_INTERVAL = 500
KEEP_CHECKPOINTS = 3
EPISODES_HEADER = ["agent_steps", "wall_seconds", "episode_reward", "episode_length", "policy_version"]
STATUS_KEYS = {"steps", "episodes", "mean_reward", "wall_seconds", "policy_version", "checkpoints"}
RUN_TIMEOUT_S = 120.0
"""Liveness bound of one subprocess (a run takes a few seconds)."""
INTERRUPT_AFTER_STEPS = 1000
"""The interrupted run is scraped once training_status.json reports this many steps and twice as many, then
interrupted (``interrupted_run``)."""
INTERRUPTED_EXIT_CODE = 130
"""What ``stepstream train`` returns after a SIGINT/SIGTERM that it handled (checkpoint saved)."""


# -- helpers -------------------------------------------------------------------------------------


def stepstream_command() -> list[str]:
    """The console script beside this interpreter (the venv's), else ``python -m cli.main``."""
    script = Path(sys.executable).with_name("stepstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]


def subprocess_env() -> dict[str, str]:
    """The test's environment, with unbuffered output, wide help text and quieter TensorFlow C++ logs."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_cli(args: Sequence[str | Path], timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``stepstream ARGS`` to its end; stdout and stderr together in ``.stdout``."""
    return subprocess.run(
        [*stepstream_command(), *map(str, args)],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a process's output, for failure messages."""
    return "\n".join(text.splitlines()[-lines:])


def write_config(path: Path, **behavior: Any) -> Path:
    """``configs/cartpole_ppo.yaml`` with the CartPole behavior's keys replaced by ``behavior``."""
    config = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
    config["behaviors"][BEHAVIOR].update(behavior)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def train_args(config: Path, results_dir: Path, run_id: str, *extra: str) -> list[str | Path]:
    # 4 copies, not the config's 32: on these small budgets every run, the resumed ones included,
    # must finish episodes, and a 2000-step run of 32 copies is only ~60 env steps per copy.
    return [
        "train", config, "--results-dir", results_dir, "--run-id", run_id, "--seed", str(SEED), "--num-envs", "4",
        "--no-progress", *extra,
    ]  # fmt: skip


def read_status(run_dir: Path) -> dict[str, Any]:
    """The behavior's entry of ``run_logs/training_status.json``."""
    status = json.loads((run_dir / "run_logs" / "training_status.json").read_text(encoding="utf-8"))
    assert set(status) == {BEHAVIOR}, status
    entry: dict[str, Any] = status[BEHAVIOR]
    return entry


def read_episodes(run_dir: Path) -> list[dict[str, float]]:
    """The rows of ``<behavior>/episodes.csv`` (numbers), after checking its header."""
    with open(run_dir / BEHAVIOR / "episodes.csv", newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        assert next(reader) == EPISODES_HEADER
        return [{key: float(value) for key, value in zip(EPISODES_HEADER, row, strict=True)} for row in reader]


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the checkpoints kept on disk, ascending (from their ``ckpt-<step>.index`` files)."""
    directory = run_dir / BEHAVIOR / "checkpoints"
    return sorted(int(p.name.removeprefix("ckpt-").removesuffix(".index")) for p in directory.glob("ckpt-*.index"))


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and mtime (to see that nothing changed)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.rglob("*") if p.is_file()
    }


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """The ``stepstream`` parser's subcommands, from cli.main's own parser."""
    import cli.main

    build = getattr(cli.main, "build_parser", None) or cli.main._build_parser
    parser: argparse.ArgumentParser = build()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the stepstream parser has no subcommands")


def expected_mentions(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser``, and the metavar (or name) of each positional."""
    mentions: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            mentions += list(action.choices)
        elif action.option_strings:
            mentions += action.option_strings
        else:
            mentions.append(str(action.metavar or action.dest))
    return mentions


@dataclass(frozen=True)
class TrainedRun:
    """The module's one finished training run."""

    results_dir: Path
    run_id: str
    config: Path
    output: str
    returncode: int
    elapsed_s: float
    """From just before the process was launched to its exit, as the test saw it."""

    @property
    def run_dir(self) -> Path:
        return self.results_dir / self.run_id

    def copy_to(self, results_dir: Path) -> Path:
        """A copy of the run folder under ``results_dir`` (same run id), for tests that change it."""
        target = results_dir / self.run_id
        shutil.copytree(self.run_dir, target)
        return target


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """``stepstream train`` of CartPole PPO for MAX_STEPS steps, run once for the module."""
    root = tmp_path_factory.mktemp("trained")
    config = write_config(
        root / "cartpole.yaml",
        max_steps=MAX_STEPS,
        summary_freq=SUMMARY_FREQ,
        checkpoint_interval=CHECKPOINT_INTERVAL,
        keep_checkpoints=KEEP_CHECKPOINTS,
    )
    started = time.time()
    proc = run_cli(train_args(config, root / "results", "first"))
    run = TrainedRun(root / "results", "first", config, proc.stdout, proc.returncode, time.time() - started)
    assert run.returncode == 0, tail(run.output)
    return run


# -- --help ----------------------------------------------------------------------------------------

SUBCOMMANDS = sorted(subcommand_parsers())


def test_top_level_help_lists_every_subcommand() -> None:
    import cli.main

    build = getattr(cli.main, "build_parser", None) or cli.main._build_parser
    proc = run_cli(["--help"])
    assert proc.returncode == 0, tail(proc.stdout)
    for mention in expected_mentions(build()):
        assert mention in proc.stdout, f"`stepstream --help` does not mention {mention!r}:\n{proc.stdout}"


@pytest.fixture(scope="module")
def subcommand_helps() -> dict[str, CommandResult]:
    """``stepstream SUBCOMMAND --help`` of each subcommand, in one interpreter (``tests.cli_batch``; the top-level
    ``--help`` above is the console script's), with TensorFlow's import blocked: no help needs it."""
    results = run_batch([[subcommand, "--help"] for subcommand in SUBCOMMANDS], env=subprocess_env(), block_tensorflow=True)
    return dict(zip(SUBCOMMANDS, results, strict=True))


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_subcommand_help_lists_every_flag(subcommand_helps: dict[str, CommandResult], subcommand: str) -> None:
    proc = subcommand_helps[subcommand]
    assert proc.returncode == 0, tail(proc.stdout)
    for mention in expected_mentions(subcommand_parsers()[subcommand]):
        assert mention in proc.stdout, f"`stepstream {subcommand} --help` does not mention {mention!r}:\n{proc.stdout}"


# -- errors ----------------------------------------------------------------------------------------


def test_config_typo_names_the_dotted_key_and_the_file(tmp_path: Path) -> None:
    config = yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8"))
    hyperparameters = config["behaviors"][BEHAVIOR]["hyperparameters"]
    hyperparameters["lamd"] = hyperparameters.pop("lambd")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")

    proc = run_cli(train_args(path, tmp_path / "results", "typo"))

    assert proc.returncode != 0
    assert f"behaviors.{BEHAVIOR}.hyperparameters.lamd" in proc.stdout, proc.stdout
    assert str(path) in proc.stdout, proc.stdout
    assert "lambd" in proc.stdout.split("lamd", 1)[1], f"no did-you-mean:\n{proc.stdout}"
    assert "Traceback" not in proc.stdout, proc.stdout
    assert not (tmp_path / "results" / "typo").exists(), "a config error must not create the run folder"


def test_existing_run_without_resume_or_force_is_an_error(trained_run: TrainedRun) -> None:
    before = snapshot(trained_run.run_dir)

    proc = run_cli(train_args(trained_run.config, trained_run.results_dir, trained_run.run_id))

    assert proc.returncode != 0
    assert "already exists" in proc.stdout and "--resume" in proc.stdout and "--force" in proc.stdout, proc.stdout
    assert str(trained_run.run_dir) in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout, proc.stdout
    assert snapshot(trained_run.run_dir) == before, "the refused run changed the existing run folder"


@pytest.mark.parametrize("mode", ["--resume", "--inference"])
def test_resume_or_inference_of_a_missing_run_is_an_error(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path / "cartpole.yaml", max_steps=MAX_STEPS)

    proc = run_cli(train_args(config, tmp_path / "results", "missing", mode))

    assert proc.returncode != 0
    assert "does not exist" in proc.stdout and "missing" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stdout, proc.stdout


# -- train: the results layout ---------------------------------------------------------------------


def test_a_normal_train_run_logs_no_warning(trained_run: TrainedRun) -> None:
    # Our log lines are "<date> <time> LEVEL logger: message"; TensorFlow's own C++ start-up lines are not ours.
    ours = [line for line in trained_run.output.splitlines() if line[:4].isdigit()]
    assert ours, tail(trained_run.output)
    noisy = [line for line in ours if line.split()[2] in ("WARNING", "ERROR", "CRITICAL")]
    assert not noisy, "\n".join(noisy)
    # A line per policy version would flood the log (hundreds per CartPole run): DEBUG only.
    assert not any("acting with policy version" in line for line in ours)


def test_train_logs_when_its_imports_are_done(trained_run: TrainedRun) -> None:
    # benchmarks/time_to_solve.py reads this line to count as the peers do, from the end of their imports
    from benchmarks.time_to_solve import IMPORTS_DONE_PATTERN

    found = IMPORTS_DONE_PATTERN.findall(trained_run.output)
    assert len(found) == 1, tail(trained_run.output)
    assert 0 < float(found[0]) < trained_run.elapsed_s


def test_train_writes_the_results_layout(trained_run: TrainedRun) -> None:
    run_dir = trained_run.run_dir

    # configuration.yaml: the resolved config, which parses again, with the --seed override applied
    resolved = yaml.safe_load((run_dir / "configuration.yaml").read_text(encoding="utf-8"))
    options = parse_config(resolved, "configuration.yaml")
    assert options.env_settings.seed == SEED
    assert options.behaviors[BEHAVIOR].max_steps == MAX_STEPS
    assert options.to_dict() == resolved

    # run_logs/training_status.json
    status = read_status(run_dir)
    assert STATUS_KEYS <= set(status), status
    assert status["steps"] >= MAX_STEPS
    assert status["policy_version"] >= 1, "no update was published"
    assert 0 < status["wall_seconds"] <= trained_run.elapsed_s + 1.0

    # <behavior>/checkpoints: the newest keep_checkpoints, the last one at the final step
    kept = checkpoint_steps(run_dir)
    assert 1 <= len(kept) <= KEEP_CHECKPOINTS, kept
    assert kept[-1] == status["steps"]
    assert [c["steps"] for c in status["checkpoints"]] == kept
    assert status["checkpoints"][-1]["policy_version"] == status["policy_version"]
    for step in kept:
        prefix = run_dir / BEHAVIOR / "checkpoints" / f"ckpt-{step}"
        assert Path(f"{prefix}.json").exists() and Path(f"{prefix}.policy.pb").exists(), prefix

    # <behavior>/events.out.tfevents.*: TensorBoard scalars with ML-Agents' tags
    events = list((run_dir / BEHAVIOR).glob("events.out.tfevents.*"))
    assert events, f"no TensorBoard event file in {run_dir / BEHAVIOR}"
    assert any(b"Environment/Cumulative Reward" in p.read_bytes() for p in events)

    # <behavior>/episodes.csv: one sane row per finished episode
    rows = read_episodes(run_dir)
    assert len(rows) == status["episodes"] > 0
    walls = [r["wall_seconds"] for r in rows]
    assert walls[0] > 0, "wall_seconds counts from the process start (imports included)"
    assert walls == sorted(walls), "wall_seconds must not go back"
    assert walls[-1] <= status["wall_seconds"]
    steps = [r["agent_steps"] for r in rows]
    assert steps == sorted(steps) and 0 < steps[0] and steps[-1] <= status["steps"]
    for row in rows:
        assert 1 <= row["episode_length"] <= 500, row
        assert row["episode_reward"] == row["episode_length"], f"CartPole pays 1 per step: {row}"
        assert 0 <= row["policy_version"] <= status["policy_version"], row
    last_100 = [r["episode_reward"] for r in rows[-100:]]
    assert status["mean_reward"] == pytest.approx(sum(last_100) / len(last_100))


def test_resume_continues_above_the_first_run(trained_run: TrainedRun, tmp_path: Path) -> None:
    run_dir = trained_run.copy_to(tmp_path)
    first = read_status(run_dir)
    first_rows = len(read_episodes(run_dir))
    config = write_config(
        tmp_path / "more.yaml",
        max_steps=MAX_STEPS + 1000,
        summary_freq=SUMMARY_FREQ,
        checkpoint_interval=CHECKPOINT_INTERVAL,
        keep_checkpoints=KEEP_CHECKPOINTS,
    )

    proc = run_cli(train_args(config, tmp_path, trained_run.run_id, "--resume"))

    assert proc.returncode == 0, tail(proc.stdout)
    assert_continued(run_dir, first, first_rows, MAX_STEPS + 1000)


def assert_continued(run_dir: Path, before: dict[str, Any], rows_before: int, max_steps: int) -> None:
    """The resumed run's steps, versions, checkpoints and episodes all continue above ``before``."""
    after = read_status(run_dir)
    assert after["steps"] >= max_steps > before["steps"]
    assert after["policy_version"] > before["policy_version"]
    kept = checkpoint_steps(run_dir)
    assert kept[-1] == after["steps"]
    assert after["checkpoints"][-1]["policy_version"] == after["policy_version"]
    rows = read_episodes(run_dir)
    new = rows[rows_before:]
    assert new, "the resumed run finished no episode"
    assert all(r["policy_version"] > before["policy_version"] for r in new), "a resumed trainer acts above the old versions"
    assert all(r["agent_steps"] > before["steps"] for r in new), "resumed steps continue from the checkpoint"
    assert after["episodes"] == len(rows), "training_status.json counts the episodes of both runs"


# -- --inference -----------------------------------------------------------------------------------


def test_inference_acts_with_the_latest_checkpoint_without_training(trained_run: TrainedRun, tmp_path: Path) -> None:
    run_dir = trained_run.copy_to(tmp_path)
    status = read_status(run_dir)
    before = snapshot(run_dir)

    proc = run_cli(train_args(trained_run.config, tmp_path, trained_run.run_id, "--inference"))

    assert proc.returncode == 0, tail(proc.stdout)
    assert f"checkpoint of step {status['steps']} (policy version {status['policy_version']})" in proc.stdout, tail(
        proc.stdout
    )
    assert "Traceback" not in proc.stdout, tail(proc.stdout)
    after = snapshot(run_dir)
    assert {k: v for k, v in after.items() if "checkpoints" in k} == {k: v for k, v in before.items() if "checkpoints" in k}
    assert after == before, "--inference changed the run folder"


def test_inference_acts_with_the_saved_policy_without_the_tensorflow_checkpoint(
    trained_run: TrainedRun, tmp_path: Path
) -> None:
    """The ``ckpt-<step>.policy.pb`` beside the newest checkpoint is all --inference needs: with every TensorFlow
    file gone it still acts, with that version (a restore would find no complete checkpoint)."""
    run_dir = trained_run.copy_to(tmp_path)
    status = read_status(run_dir)
    checkpoints = run_dir / BEHAVIOR / "checkpoints"
    tf_files = [*checkpoints.glob("ckpt-*.index"), *checkpoints.glob("ckpt-*.data-*")]
    assert tf_files
    for path in tf_files:
        path.unlink()

    proc = run_cli(train_args(trained_run.config, tmp_path, trained_run.run_id, "--inference"))

    assert proc.returncode == 0, tail(proc.stdout)
    acting = f"checkpoint of step {status['steps']} (policy version {status['policy_version']}), not training"
    assert f"{acting}: ckpt-{status['steps']}.policy.pb" in proc.stdout, tail(proc.stdout)
    assert "inference ran" in proc.stdout and "Traceback" not in proc.stdout, tail(proc.stdout)


def test_inference_restores_the_tensorflow_checkpoint_where_no_policy_was_saved(
    trained_run: TrainedRun, tmp_path: Path
) -> None:
    """Checkpoints of an earlier layout have no saved policy: the learner is restored and exports one."""
    run_dir = trained_run.copy_to(tmp_path)
    status = read_status(run_dir)
    for path in (run_dir / BEHAVIOR / "checkpoints").glob("ckpt-*.policy.pb"):
        path.unlink()

    proc = run_cli(train_args(trained_run.config, tmp_path, trained_run.run_id, "--inference"))

    assert proc.returncode == 0, tail(proc.stdout)
    acting = f"checkpoint of step {status['steps']} (policy version {status['policy_version']}), not training"
    assert acting in proc.stdout and ".policy.pb" not in proc.stdout, tail(proc.stdout)
    assert f"restored {run_dir / BEHAVIOR / 'checkpoints'}" in proc.stdout, tail(proc.stdout)


def test_inference_with_an_env_the_policy_does_not_fit_is_a_clean_error(trained_run: TrainedRun, tmp_path: Path) -> None:
    """CartPole's policy (4 observations, 2 actions) against Acrobot (6 and 3): refused, naming the saved policy."""
    trained_run.copy_to(tmp_path)

    proc = run_cli(train_args(trained_run.config, tmp_path, trained_run.run_id, "--inference", "--env", "gym:Acrobot-v1"))

    assert proc.returncode != 0
    assert ".policy.pb: the policy takes observations [(4,)]" in proc.stdout, tail(proc.stdout)
    assert "Traceback" not in proc.stdout and "never awaited" not in proc.stdout, tail(proc.stdout)


def test_inference_without_a_checkpoint_is_a_clean_error(tmp_path: Path) -> None:
    """The error comes after the server started: it must still be stopped (no 'Event loop is closed' traceback)."""
    config = write_config(tmp_path / "cartpole.yaml", max_steps=MAX_STEPS)
    (tmp_path / "results" / "empty").mkdir(parents=True)

    proc = run_cli(train_args(config, tmp_path / "results", "empty", "--inference"))

    assert proc.returncode != 0
    assert "no checkpoint to run with --inference" in proc.stdout, tail(proc.stdout)
    assert "Traceback" not in proc.stdout and "never awaited" not in proc.stdout, tail(proc.stdout)


# -- Ctrl-C ----------------------------------------------------------------------------------------


def wait_for_steps(run_dir: Path, proc: subprocess.Popen[bytes], steps: int, log: Path) -> dict[str, Any]:
    """Poll training_status.json until it reports ``steps``; fail if the process ends first or after the timeout."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before step {steps}:\n{tail(log.read_text())}")
        try:
            status = read_status(run_dir)
            if status["steps"] >= steps:
                return status
        except (OSError, ValueError):  # not written yet
            pass
        time.sleep(0.05)
    pytest.fail(f"no training_status.json with {steps} steps after {RUN_TIMEOUT_S} s:\n{tail(log.read_text())}")


@dataclass(frozen=True)
class InterruptedRun:
    """A long ``train --metrics-port`` run scraped at two step counts, then stopped with SIGINT (``interrupted_run``)."""

    run_dir: Path
    config: Path
    returncode: int
    output: str
    checkpoints_before_interrupt: list[int]
    scrapes: Scrapes
    long_run: int

    def copy_to(self, results_dir: Path) -> Path:
        """A copy of the run folder under ``results_dir`` (same run id), for tests that change it."""
        target = results_dir / self.run_dir.name
        shutil.copytree(self.run_dir, target)
        return target


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InterruptedRun]:
    """One run for the SIGINT and the metrics tests (each training process costs a TensorFlow import): its
    endpoint is scraped at ``INTERRUPT_AFTER_STEPS`` and twice that, then it gets SIGINT."""
    root = tmp_path_factory.mktemp("interrupted")
    long_run = 50 * MAX_STEPS
    config = write_config(
        root / "long.yaml", max_steps=long_run, summary_freq=SUMMARY_FREQ, checkpoint_interval=long_run, keep_checkpoints=2
    )
    results, run_id = root / "results", "interrupted"
    run_dir = results / run_id
    log = root / "interrupted.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*stepstream_command(), *map(str, train_args(config, results, run_id, "--metrics-port", "0"))],
            cwd=REPO,
            env=subprocess_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_steps(run_dir, proc, INTERRUPT_AFTER_STEPS, log)
        scrapes = Scrapes(f"http://127.0.0.1:{logged_metrics_port(log)}/metrics")  # port 0: the one it bound
        scrapes.take()
        wait_for_steps(run_dir, proc, 2 * INTERRUPT_AFTER_STEPS, log)
        scrapes.take()
        before = checkpoint_steps(run_dir)
        proc.send_signal(signal.SIGINT)
        returncode = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    yield InterruptedRun(run_dir, config, returncode, log.read_text(encoding="utf-8"), before, scrapes, long_run)


def test_sigint_saves_a_checkpoint_and_resume_continues(interrupted_run: InterruptedRun, tmp_path: Path) -> None:
    assert interrupted_run.checkpoints_before_interrupt == [], "checkpoint_interval is the whole budget: none before"
    output = interrupted_run.output
    assert interrupted_run.returncode == INTERRUPTED_EXIT_CODE, tail(output)
    assert "interrupted" in output and "Traceback" not in output, tail(output)
    resume = f"to continue this run: stepstream train {interrupted_run.config} --run-id {interrupted_run.run_dir.name}"
    assert resume in output and output.rstrip().endswith("--resume"), tail(output)  # the last line says how
    run_dir = interrupted_run.copy_to(tmp_path / "results")
    status = read_status(run_dir)
    assert INTERRUPT_AFTER_STEPS <= status["steps"] < interrupted_run.long_run
    assert checkpoint_steps(run_dir) == [status["steps"]], "the interrupt saves a checkpoint at the last step"
    assert status["checkpoints"][-1]["policy_version"] == status["policy_version"]
    rows = read_episodes(run_dir)
    assert len(rows) == status["episodes"]

    more = status["steps"] + 1000
    resume_config = write_config(
        tmp_path / "resume.yaml",
        max_steps=more,
        summary_freq=SUMMARY_FREQ,
        checkpoint_interval=interrupted_run.long_run,
        keep_checkpoints=2,
    )
    resumed = run_cli(train_args(resume_config, run_dir.parent, run_dir.name, "--resume"))
    assert resumed.returncode == 0, tail(resumed.stdout)
    assert f"restored {run_dir / BEHAVIOR / 'checkpoints'}/ckpt-{status['steps']}" in resumed.stdout, tail(resumed.stdout)
    assert_continued(run_dir, status, len(rows), more)


def test_train_serves_processor_and_trainer_metrics(interrupted_run: InterruptedRun) -> None:
    assert interrupted_run.returncode == INTERRUPTED_EXIT_CODE, tail(interrupted_run.output)
    scrapes = interrupted_run.scrapes
    for metric, kind in {
        "stepstream_processor_agent_steps_total": "counter",
        "stepstream_processor_inference_seconds": "histogram",
        "stepstream_trainer_step": "gauge",
        "stepstream_trainer_experiences_total": "counter",
    }.items():
        assert scrapes.moved(metric, kind), f"{metric} did not move between two scrapes of the embedded run"
    assert scrapes.value("stepstream_trainer_step", behavior=BEHAVIOR) is not None


# -- the console -----------------------------------------------------------------------------------

TENSORFLOW_NOISE = ("absl::InitializeLog", "cuInit", "cuda", "cpu_feature_guard", "oneDNN", "rebuild TensorFlow", "XNNPACK")
"""What TensorFlow's native start-up wrote to a CPU-only user's terminal before ``cli.console.load_tensorflow``."""


def test_a_normal_run_writes_no_tensorflow_start_up_noise(tmp_path: Path) -> None:
    env = {key: value for key, value in subprocess_env().items() if not key.startswith("TF_CPP")}  # as a user runs it
    proc = subprocess.run(
        [*stepstream_command(), *map(str, train_args(BASE_CONFIG, tmp_path / "results", "quiet", "--max-steps", "500"))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, tail(proc.stderr)
    noisy = [line for line in proc.stderr.splitlines() if any(word in line for word in TENSORFLOW_NOISE)]
    assert not noisy, "\n".join(noisy)


def test_json_logs_are_one_object_per_line_and_summaries_name_their_behavior(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cartpole.yaml", summary_freq=250)
    args = ["--log-format", "json", "train", config, "--results-dir", tmp_path / "results", "--max-steps", "500"]
    args += ["--seed", str(SEED), "--num-envs", "4"]  # and no --no-progress: JSON logs show no bar
    proc = subprocess.run(
        [*stepstream_command(), *map(str, args)], cwd=REPO, env=subprocess_env(), capture_output=True, text=True,
        timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, tail(proc.stderr)
    records = []
    for line in [*proc.stdout.splitlines(), *proc.stderr.splitlines()]:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON object: {line!r}")
    summaries = [r for r in records if str(r.get("message", "")).startswith(f"{BEHAVIOR}. Step: ")]
    assert summaries and all(r.get("behavior") == BEHAVIOR for r in summaries), summaries
