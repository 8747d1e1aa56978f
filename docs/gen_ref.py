"""Generates the two reference pages of the site from the code, so they cannot drift from it.

- ``reference/cli.md``: every ``stepstream`` subcommand, walked from the argparse parser the console script
  builds (``cli.main``), with each argument's flags, default and help text.
- ``reference/config.md``: every key of the trainer YAML, walked from the frozen settings dataclasses
  (``common.config``) with each field's type, default and docstring (the string literal under the field), plus
  the ML-Agents keys the parser accepts and ignores or refuses as not supported yet (``EXTRA_KEYS``).

``mkdocs build`` runs this file through the ``gen-files`` plugin (``mkdocs.yml``). A field without a docstring, or
an argument without help, is shown as **undocumented** and logged as a warning, which ``mkdocs build --strict``
(``make docs``) turns into a failed build. ``tests/integration/test_readme.py`` imports the two page builders
directly, so ``make test`` checks the same without MkDocs installed.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import itertools
import logging
import os
import re
import textwrap
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("mkdocs.plugins.stepstream.gen_ref")

OWN_FIELD_NAMES = frozenset({"max_policy_lag", "max_queued_trajectories", "demo_action_timing"})
"""stepstream's own keys in sections whose fields carry no ``STEPSTREAM_KEY`` metadata (``trainer_type: bc`` and the
mapped ``env_path`` entry are stepstream's whole)."""
UNDOCUMENTED = "**undocumented**"
HIDE_TOC = ("---", "hide:", "  - toc", "---", "")
"""Front matter of the generated pages: their wide tables take the table of contents' column."""
"""What a page shows in place of a missing field docstring or argument help."""


# --- the config reference -------------------------------------------------------------------------------------------


def field_docstrings(cls: type) -> dict[str, str]:
    """Each field's docstring: the string literal right under its annotated assignment, searched along the MRO."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        assert isinstance(body, ast.ClassDef)
        statements = body.body
        for statement, following in itertools.pairwise(statements):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section below)"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{_plain(k)}: ..." for k in value) + "}`" if value else "`{}`"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value!r}`"


def _plain(value: Any) -> str:
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def _type(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return f"`{text}`"


def _cell(text: str) -> str:
    """One Markdown table cell from docstring or help text: one line, pipes escaped, Sphinx roles dropped, and ``<``
    and ``>`` escaped outside code spans (``gym:<id>`` in plain text would read as an HTML tag)."""
    text = re.sub(r":(?:class|mod|func|meth|data|attr):`", "`", " ".join(text.split()))
    parts = re.split(r"(`+[^`]*`+)", text)
    escaped = (
        part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;")
        for part in parts
    )
    return "".join(escaped)


def _enum_values(annotation: Any, namespace: dict[str, Any]) -> str:
    """The allowed values of an enum-typed field, from the names in its annotation."""
    names = annotation.replace("|", " ").split() if isinstance(annotation, str) else []
    values = [
        ", ".join(f"`{member.value}`" for member in namespace[name])
        for name in names
        if isinstance(namespace.get(name), type) and issubclass(namespace[name], enum.Enum)
    ]
    return "; ".join(values)


def config_sections() -> Iterator[tuple[str, type, str]]:
    """(dotted section, settings class, what it is) for every section of the trainer YAML, in reading order."""
    from common import config

    yield "", config.RunOptions, "The whole file."
    yield "env_settings", config.EnvSettings, "The environments a `stepstream train` run starts itself."
    yield "env_settings.env_path[]", config.EnvPathEntry, "An `env_path` entry written as a mapping, to name its behavior."
    yield "behaviors.NAME", config.BehaviorSettings, "One behavior; `default_settings` has the same keys."
    for trainer_type, cls in config.HYPERPARAMETERS_FOR.items():
        yield (
            f"behaviors.NAME.hyperparameters (trainer_type: {trainer_type.value})",
            cls,
            f"The hyperparameters of `trainer_type: {trainer_type.value}`.",
        )
    yield "behaviors.NAME.network_settings", config.NetworkSettings, "The networks' body and image encoders."
    yield "behaviors.NAME.network_settings.memory", config.MemorySettings, "Recurrent memory (refused: not supported yet)."
    for kind, cls in config.REWARD_SIGNAL_SETTINGS_FOR.items():
        yield f"behaviors.NAME.reward_signals.{kind.value}", cls, f"The `{kind.value}` reward signal."
    yield "behaviors.NAME.behavioral_cloning", config.BehavioralCloningSettings, "A BC loss beside PPO or SAC."


def config_reference_markdown() -> tuple[str, list[str]]:
    """The config reference page, and the ``section.field`` names that have no docstring."""
    from common import config, config_schema

    namespace = {**vars(config), **vars(config_schema)}
    own_classes = (config.BCHyperparameters, config.EnvPathEntry)
    missing: list[str] = []
    lines = [
        *HIDE_TOC,
        "# Config reference",
        "",
        "Every key of the trainer YAML that `stepstream train`, `processor`, `trainer` and `env` read, generated from",
        "the typed settings in `common/config_schema.py` and `common/config_sections.py` (each field's docstring is its",
        "description). **Origin** says whether ML-Agents' YAML has the key (ML-Agents 1.x, with its default) or it is",
        "stepstream's own. Units: *agent steps* count experiences, one agent for one step. How a file is read, merged",
        "and checked: [Training](../training.md).",
        "",
    ]
    for section, cls, what in config_sections():
        docs = field_docstrings(cls)
        lines += [f"## `{section}`" if section else "## Top level", "", what + " (`" + cls.__name__ + "`)", ""]
        lines += ["| key | type | default | origin | description |", "|---|---|---|---|---|"]
        for field in dataclasses.fields(cls):
            doc = docs.get(field.name)
            if doc is None:
                missing.append(f"{cls.__name__}.{field.name}")
            own = field.metadata.get("stepstream") or cls in own_classes or field.name in OWN_FIELD_NAMES
            origin = "stepstream" if own else "ML-Agents"
            allowed = _enum_values(field.type, namespace)
            description = _cell(doc) if doc else UNDOCUMENTED
            if allowed:
                description += f" Values: {allowed}."
            lines.append(f"| `{field.name}` | {_type(field.type)} | {_default(field)} | {origin} | {description} |")
        lines.append("")
    lines += [
        "## ML-Agents keys stepstream does not use",
        "",
        "Valid ML-Agents keys that are not fields above (`common/config_schema.py` `EXTRA_KEYS`). *Ignored* keys are",
        "accepted and named in one log line; *Unity only* ones are read where the env is a Unity build; the others are",
        "accepted only at the value given and are a `NotSupportedKeyError` naming the dotted key otherwise.",
        "",
        "| section | key | handling |",
        "|---|---|---|",
    ]
    for section_cls, keys in config_schema.EXTRA_KEYS.items():
        for key, extra in sorted(keys.items()):
            if extra.unity:
                handling = "Unity only"
            elif extra.only is config_schema.ANY:
                handling = "ignored"
            else:
                handling = f"only `{extra.only if extra.only is not None else 'null'}`: {extra.why} is not supported yet"
            if extra.subkeys:
                handling += " (sub-keys " + ", ".join(f"`{k}`" for k in sorted(extra.subkeys)) + ")"
            if extra.choices:
                handling += " (values " + ", ".join(f"`{k}`" for k in sorted(extra.choices)) + ")"
            lines.append(f"| `{section_cls.__name__}` | `{key}` | {handling} |")
    for enum_cls, values in config_schema.NOT_SUPPORTED_VALUES.items():
        for value, what_needed in values.items():
            lines.append(f"| `{enum_cls.__name__}` | value `{value}` | not supported yet: {what_needed} |")
    for old, new in config_schema.VALUE_HINTS.items():
        lines.append(f"| (any) | value `{old}` | refused, with the hint to write `{new}` |")
    lines.append("")
    return "\n".join(lines), missing


# --- the CLI reference ----------------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(command line, parser, one-line help) of every subcommand below ``parser``, depth first, in parser order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", sub, helps.get(name, "")
                yield from _subcommands(sub, f"{prefix} {name}")


def _argument_row(action: argparse.Action, missing: list[str], where: str) -> str | None:
    if isinstance(action, argparse._HelpAction | argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
        return None
    if action.option_strings:
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or action.dest.upper()
            flags += f" `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
    else:
        flags = f"`{action.metavar or action.dest.upper()}`"
        if action.nargs in ("?", "*"):
            flags += " (optional)"
    default = action.default
    if default in (None, False, argparse.SUPPRESS) or isinstance(action, argparse._StoreTrueAction):
        shown = ""
    else:
        shown = f"`{default}`"
    if action.choices is not None and not isinstance(action.choices, dict):
        shown += ("; " if shown else "") + "one of " + ", ".join(f"`{c}`" for c in action.choices)
    if action.required and action.option_strings:
        shown = "required"
    if not action.help:
        missing.append(f"{where} {action.option_strings or action.dest}")
    return f"| {flags} | {_cell(shown)} | {_cell(action.help or UNDOCUMENTED)} |"


def cli_reference_markdown() -> tuple[str, list[str]]:
    """The CLI reference page, and the arguments that have no help text.

    The parser is built with no ``STEPSTREAM_*`` variable set and 100 columns, so the page does not depend on
    the environment of the machine that builds it.
    """
    saved = {key: os.environ.pop(key) for key in list(os.environ) if key.startswith("STEPSTREAM_")}
    saved_columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        from cli.main import _build_parser

        parser = _build_parser()
        missing: list[str] = []
        lines = [
            *HIDE_TOC,
            "# CLI reference",
            "",
            "Every `stepstream` subcommand and argument, generated from the command's own argparse parser",
            "(`cli/main.py` and the `add_*_parser` functions it calls), so it matches `stepstream COMMAND --help`.",
            "Defaults shown are those with no `STEPSTREAM_*` variable set; `[env NAME]` in a description names the",
            "variable that sets the default. Exit codes: 0 done, 1 a failure outside the checks (a port taken, a",
            "full disk), 2 a refused config, flag or checkpoint (one line saying why), 130 / 143 after Ctrl-C /",
            "SIGTERM.",
            "",
            "## `stepstream`",
            "",
            "```text",
            parser.format_usage().strip(),
            "```",
            "",
            "Options before the subcommand (`stepstream --log-level WARNING train ...`):",
            "",
            "| argument | default | description |",
            "|---|---|---|",
        ]
        lines += [row for a in parser._actions if (row := _argument_row(a, missing, "stepstream")) is not None]
        lines.append("")
        for command, sub, summary in _subcommands(parser, "stepstream"):
            lines += [f"## `{command}`", "", (summary[:1].upper() + summary[1:] + ".") if summary else "", ""]
            if sub.description:
                lines += [_cell(sub.description), ""]
            lines += ["```text", sub.format_usage().strip(), "```", ""]
            rows = [row for a in sub._actions if (row := _argument_row(a, missing, command)) is not None]
            if rows:
                lines += ["| argument | default | description |", "|---|---|---|", *rows, ""]
            if sub.epilog:
                lines += ["```text", sub.epilog.strip(), "```", ""]
        return "\n".join(lines), missing
    finally:
        os.environ.update(saved)
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns


def write_pages() -> None:
    """Write both pages into the site being built (``mkdocs_gen_files``), warning for each undocumented item."""
    import mkdocs_gen_files

    for path, build in (("reference/config.md", config_reference_markdown), ("reference/cli.md", cli_reference_markdown)):
        text, missing = build()
        for name in missing:
            log.warning("%s: %s has no docstring or help text", path, name)
        with mkdocs_gen_files.open(path, "w") as page:
            page.write(text)
        mkdocs_gen_files.set_edit_path(path, "gen_ref.py")


if __name__ in ("__main__", "<run_path>"):
    write_pages()
