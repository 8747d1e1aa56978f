"""The README's and the documentation's own examples run as written: every ```` ```sh ```` block, command by command.

The pages are ``README.md`` and then the site's pages in ``mkdocs.yml``'s nav order. Their blocks run in that
order, in one scratch folder (so a block may use what an earlier one wrote: ``expert.demo``, ``results/bc``), one
command after another in one interpreter through the console script's entry point, ``cli.main.main``
(``tests.cli_batch``): the argv as written, less the interpreter's start, so TensorFlow loads once, not once per
training command. (The same paths run by the console script itself, in subprocesses, are in ``test_cli.py`` and
``test_record_cli.py``.) Before the commands run, every code block with a ``title="FILE"`` (the getting-started
page's custom environment and its config) is written to FILE in the scratch folder, which is on the batch's
module path as ``export PYTHONPATH=$PWD`` puts it for a reader. The scratch ``configs/`` are the repository's, and
every config there or written from a page gets fast budgets (``FAST_BUDGETS``: a few hundred steps instead of
tens of thousands); nothing else of a command is changed.

``NOT_RUN`` names the few blocks this test cannot run here, by their first line, each with why. A block that is
neither run nor listed fails the test: one holding a command other than ``stepstream``, or a listed block that is
no longer on any page (so the list stays true).

The site's two references are generated from the code (``docs/gen_ref.py``); the tests at the end check that
every settings field and every CLI argument they show is documented, without MkDocs installed.

Runtime is TensorFlow's import and the three short training runs.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.cli_batch import run_batch
from tests.integration.test_cli import REPO, subprocess_env, tail

README = REPO / "README.md"
DOCS = REPO / "docs"
NOT_RUN = {
    "make train": "sets up .venv and trains CartPole for 100k steps; `make test` is what runs this very test",
    "docker compose up --scale env=4": "needs a Docker engine (benchmarks/compose_up.sh runs the stack)",
    "mkdir -p secrets && cd secrets": "makes openssl secrets for the Docker stack, then needs a Docker engine",
}
"""First line of each ``sh`` block of the pages that this test does not run, and why."""
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
TITLED = re.compile(r'^( *)```\w+ title="([\w.-]+)"\n(.*?)^\1```', re.MULTILINE | re.DOTALL)


def nav_pages(nav: list[Any]) -> list[str]:
    """The Markdown files of a ``mkdocs.yml`` nav, in order (generated pages included)."""
    pages: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def pages() -> list[Path]:
    """``README.md``, then every written page of the site in nav order (the generated references have no file)."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    return [README, *(DOCS / page for page in nav_pages(nav) if (DOCS / page).is_file())]


def all_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in pages())


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


def fast_config(text: str) -> str:
    """A trainer YAML with each behavior's ``max_steps`` cut to ``FAST_BUDGETS`` (summaries and checkpoints with it)."""
    config = yaml.safe_load(text)
    for behavior in config.get("behaviors", {}).values():
        trainer_type = behavior.get("trainer_type", config.get("default_settings", {}).get("trainer_type", "ppo"))
        steps = min(int(behavior.get("max_steps", FAST_BUDGETS[trainer_type])), FAST_BUDGETS[trainer_type])
        behavior.update(max_steps=steps, summary_freq=max(1, steps // 2), checkpoint_interval=steps)
    return yaml.safe_dump(config, sort_keys=False)


def fast_configs(destination: Path) -> None:
    """The repository's ``configs/`` with fast budgets."""
    destination.mkdir()
    for source in sorted((REPO / "configs").glob("*.yaml")):
        (destination / source.name).write_text(fast_config(source.read_text(encoding="utf-8")), encoding="utf-8")


def write_titled_files(text: str, destination: Path) -> list[str]:
    """Every ``title="FILE"`` code block of ``text`` written to ``destination / FILE`` (a YAML with fast budgets)."""
    written = []
    for _, name, indented in TITLED.findall(text):
        body = textwrap.dedent(indented)
        (destination / name).write_text(fast_config(body) if name.endswith(".yaml") else body, encoding="utf-8")
        written.append(name)
    return written


def test_sh_blocks_are_found_and_split() -> None:
    """The extraction itself: indented blocks, comments and continuations."""
    text = "intro\n```sh\na --x 1   # why\n# only a comment\n```\n- item:\n\n  ```sh\n  b \\\n      --y 2\n  ```\n"
    blocks = sh_blocks(text)
    assert [commands(b) for b in blocks] == [[["a", "--x", "1"]], [["b", "--y", "2"]]]
    assert [first_line(b) for b in blocks] == ["a --x 1", "b \\"]


def test_titled_blocks_are_written_as_files(tmp_path: Path) -> None:
    text = '```python title="m.py"\nX = 1\n```\n```yaml title="c.yaml"\nbehaviors:\n  B: {max_steps: 100000}\n```\n'
    assert write_titled_files(text, tmp_path) == ["m.py", "c.yaml"]
    assert (tmp_path / "m.py").read_text() == "X = 1\n"
    assert yaml.safe_load((tmp_path / "c.yaml").read_text())["behaviors"]["B"]["max_steps"] == FAST_BUDGETS["ppo"]


def test_the_pages_are_the_readme_and_the_nav() -> None:
    """Every written page of docs/ is in the nav (so its blocks run here), and the README links into the site."""
    listed = {page.name for page in pages()}
    written = {page.name for page in DOCS.glob("*.md")}
    assert written <= listed, f"docs pages missing from mkdocs.yml's nav: {sorted(written - listed)}"
    readme = README.read_text(encoding="utf-8")
    assert all(f"](docs/{name})" in readme for name in ("getting-started.md", "benchmarks.md", "architecture.md"))


def test_every_sh_block_of_the_pages_runs_as_written(tmp_path: Path) -> None:
    text = all_text()
    blocks = sh_blocks(text)
    listed = {first_line(b) for b in blocks} & set(NOT_RUN)
    assert listed == set(NOT_RUN), f"NOT_RUN names blocks no page has any more: {set(NOT_RUN) - listed}"
    to_run = [b for b in blocks if first_line(b) not in NOT_RUN]
    assert to_run, "the README has no runnable sh block"
    for block in to_run:
        for argv in commands(block):
            assert argv[0] == "stepstream", (
                f"block {first_line(block)!r} runs {argv[0]!r}: make it a stepstream command or list it in NOT_RUN"
            )

    fast_configs(tmp_path / "configs")
    assert write_titled_files(text, tmp_path), "the getting-started page's custom environment is gone"
    argvs = [argv for block in to_run for argv in commands(block)]
    results = run_batch(
        [argv[1:] for argv in argvs], cwd=tmp_path, env=subprocess_env(), timeout_s=COMMAND_TIMEOUT_S * len(argvs)
    )
    ran = []
    for argv, proc in zip(argvs, results, strict=True):
        assert proc.returncode == 0, f"documented command failed: {shlex.join(argv)}\n{tail(proc.stdout)}"
        assert "Traceback" not in proc.stdout, f"{shlex.join(argv)}\n{tail(proc.stdout)}"
        assert proc.seconds < COMMAND_TIMEOUT_S, f"{shlex.join(argv)} took {proc.seconds:.0f} s"
        ran.append(shlex.join(argv))
    assert len(ran) >= 5, ran

    # The pages say scripts written for ML-Agents' event files read ours: the training page's CartPole run's events.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "results" / "cartpole" / "CartPole"))
    events.Reload()
    for tag in ML_AGENTS_TAGS:
        assert events.Scalars(tag), f"no {tag!r} scalars in {sorted(events.Tags()['scalars'])}"


def test_the_pages_name_no_config_the_repository_lacks() -> None:
    """Every ``configs/*.yaml`` the README and the pages name is shipped, and every shipped one is named."""
    named = set(re.findall(r"configs/[\w.-]+\.yaml", all_text()))
    assert named and all((REPO / name).is_file() for name in named), sorted(n for n in named if not (REPO / n).is_file())
    shipped = {f"configs/{path.name}" for path in (REPO / "configs").glob("*.yaml")}
    assert shipped <= named, f"configs the training page does not list: {sorted(shipped - named)}"


def test_the_readme_is_short_and_its_first_paragraph_states_no_figure() -> None:
    """The README is the front door (under 200 lines); figures live on the benchmarks page, with their dates."""
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    first = readme.split("\n\n")[1]
    assert not re.search(r"\d+(\.\d+)? ?(s|ms|%)\b", first), first
    assert not re.search(r"20\d\d-[01]\d-[0-3]\d", readme), "a date in the README: it belongs on docs/benchmarks.md"


def gen_ref() -> ModuleType:
    """``docs/gen_ref.py``, the generator of the site's two references, imported without MkDocs."""
    spec = importlib.util.spec_from_file_location("gen_ref", DOCS / "gen_ref.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_config_reference_documents_every_settings_field() -> None:
    import dataclasses

    generator = gen_ref()
    text, missing = generator.config_reference_markdown()
    assert missing == [], f"settings fields without a docstring (the config reference shows them undocumented): {missing}"
    for _, cls, _ in generator.config_sections():
        for field in dataclasses.fields(cls):
            assert f"| `{field.name}` |" in text, f"{cls.__name__}.{field.name} is not in the config reference"
    # stepstream's own keys are told apart from ML-Agents' (the training page's compatibility promise).
    assert re.search(r"^\| `max_policy_lag` \| .* \| stepstream \|", text, re.MULTILINE)
    assert re.search(r"^\| `lambd` \| .* \| ML-Agents \|", text, re.MULTILINE)


def test_the_cli_reference_documents_every_subcommand_and_argument() -> None:
    text, missing = gen_ref().cli_reference_markdown()
    assert missing == [], f"CLI arguments without help text: {missing}"
    from cli.main import _build_parser

    commands = next(a for a in _build_parser()._actions if a.dest == "command").choices
    for name in commands:
        assert f"## `stepstream {name}`" in text, f"stepstream {name} is not in the CLI reference"
    assert "`--metrics-port` `PORT`" in text and "## `stepstream demo inspect`" in text
    # Built with no STEPSTREAM_* variable: the page shows the code's defaults, whatever the builder's environment.
    assert "| `--host` `HOST` | `127.0.0.1` |" in text
