"""The README's own examples run as written: every ```` ```sh ```` block of ``README.md``, command by command.

The blocks run in their README order, in one scratch folder (so a block may use what an earlier one
wrote: ``expert.demo``, ``results/bc``), one command after another in one interpreter through the
console script's entry point, ``cli.main.main`` (``tests.cli_batch``): the argv as written, less the
interpreter's start, so TensorFlow loads once, not once per training command. (The same paths run by the
console script itself, in subprocesses, are in ``test_cli.py`` and ``test_record_cli.py``.) Their
``configs/`` there are the repository's with fast budgets (``FAST_BUDGETS``: a few hundred steps
instead of tens of thousands); nothing else of a command is changed.

``NOT_RUN`` names the few blocks this test cannot run here, by their first line, each with why. A
block that is neither run nor listed fails the test: one holding a command other than
``stepstream``, or a listed block that is no longer in the README (so the list stays true).

Runtime is TensorFlow's import (about 10 s on 2 loaded cores) and the two short training runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from tests.cli_batch import run_batch
from tests.integration.test_cli import REPO, subprocess_env, tail

README = REPO / "README.md"
NOT_RUN = {
    "make train": "sets up .venv and trains CartPole for 100k steps; `make test` is what runs this very test",
    "docker compose up --scale env=4": "needs a Docker engine (benchmarks/compose_up.sh runs the stack)",
    "mkdir -p secrets && cd secrets": "makes openssl secrets for the Docker stack, then needs a Docker engine",
}
"""First line of each README ``sh`` block this test does not run, and why."""
FAST_BUDGETS = {"ppo": 512, "sac": 300, "bc": 300}
"""``max_steps`` per trainer type in the scratch ``configs/`` (summaries and checkpoints scale down with it)."""
ML_AGENTS_TAGS = (
    "Environment/Cumulative Reward",
    "Environment/Episode Length",
    "Policy/Learning Rate",
    "Policy/Extrinsic Reward",
    "Losses/Value Loss",
    "Losses/Policy Loss",
)
"""Tags an ML-Agents PPO run writes, which the README's CartPole run must write as scalars too."""
COMMAND_TIMEOUT_S = 120.0
"""Liveness bound of one command (each takes seconds)."""
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def sh_blocks(text: str) -> list[str]:
    """The bodies of the ```` ```sh ```` blocks in ``text``, indented ones (inside list items) included."""
    return BLOCK.findall(re.sub(r"^ +", "", text, flags=re.MULTILINE))


def commands(block: str) -> list[list[str]]:
    """Each command line of ``block`` as argv: comments dropped, ``\\`` continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def first_line(block: str) -> str:
    """The block's first command line, its comment dropped and its spaces collapsed: what ``NOT_RUN`` keys on."""
    lines = (" ".join(line.split("#", 1)[0].split()) for line in block.splitlines())
    return next(line for line in lines if line)


def fast_configs(destination: Path) -> None:
    """The repository's ``configs/`` with each behavior's ``max_steps`` cut to ``FAST_BUDGETS``."""
    destination.mkdir()
    for source in sorted((REPO / "configs").glob("*.yaml")):
        config = yaml.safe_load(source.read_text(encoding="utf-8"))
        for behavior in config.get("behaviors", {}).values():
            trainer_type = behavior.get("trainer_type", config.get("default_settings", {}).get("trainer_type", "ppo"))
            steps = min(int(behavior.get("max_steps", FAST_BUDGETS[trainer_type])), FAST_BUDGETS[trainer_type])
            behavior.update(max_steps=steps, summary_freq=max(1, steps // 2), checkpoint_interval=steps)
        (destination / source.name).write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def test_sh_blocks_are_found_and_split() -> None:
    """The extraction itself: indented blocks, comments and continuations."""
    text = "intro\n```sh\na --x 1   # why\n# only a comment\n```\n- item:\n\n  ```sh\n  b \\\n      --y 2\n  ```\n"
    blocks = sh_blocks(text)
    assert [commands(b) for b in blocks] == [[["a", "--x", "1"]], [["b", "--y", "2"]]]
    assert [first_line(b) for b in blocks] == ["a --x 1", "b \\"]


def test_every_readme_sh_block_runs_as_written(tmp_path: Path) -> None:
    blocks = sh_blocks(README.read_text(encoding="utf-8"))
    listed = {first_line(b) for b in blocks} & set(NOT_RUN)
    assert listed == set(NOT_RUN), f"NOT_RUN names blocks the README no longer has: {set(NOT_RUN) - listed}"
    to_run = [b for b in blocks if first_line(b) not in NOT_RUN]
    assert to_run, "the README has no runnable sh block"
    for block in to_run:
        for argv in commands(block):
            assert argv[0] == "stepstream", (
                f"README block {first_line(block)!r} runs {argv[0]!r}: make it a stepstream command or list it in NOT_RUN"
            )

    fast_configs(tmp_path / "configs")
    argvs = [argv for block in to_run for argv in commands(block)]
    results = run_batch(
        [argv[1:] for argv in argvs], cwd=tmp_path, env=subprocess_env(), timeout_s=COMMAND_TIMEOUT_S * len(argvs)
    )
    ran = []
    for argv, proc in zip(argvs, results, strict=True):
        assert proc.returncode == 0, f"README command failed: {shlex.join(argv)}\n{tail(proc.stdout)}"
        assert "Traceback" not in proc.stdout, f"{shlex.join(argv)}\n{tail(proc.stdout)}"
        assert proc.seconds < COMMAND_TIMEOUT_S, f"{shlex.join(argv)} took {proc.seconds:.0f} s"
        ran.append(shlex.join(argv))
    assert len(ran) >= 5, ran

    # The README says scripts written for ML-Agents' event files read ours: its CartPole run's events.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "results" / "cartpole" / "CartPole"))
    events.Reload()
    for tag in ML_AGENTS_TAGS:
        assert events.Scalars(tag), f"no {tag!r} scalars in {sorted(events.Tags()['scalars'])}"


def test_the_readme_names_no_config_the_repository_lacks() -> None:
    """Every ``configs/*.yaml`` the README names is shipped."""
    named = set(re.findall(r"configs/[\w.-]+\.yaml", README.read_text(encoding="utf-8")))
    assert named and all((REPO / name).is_file() for name in named), sorted(n for n in named if not (REPO / n).is_file())
