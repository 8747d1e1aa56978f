"""``stepstream demo inspect FILE [--json]``: what an ML-Agents .demo file (or a directory of them) holds.

``--json`` prints one object: ``records`` (read, up to each header's count), ``episodes_done``
(records flagged done), ``sum_reward`` (over every record), ``observation_shapes`` (from the agent
infos), ``continuous_actions``, ``discrete_branches`` and ``action_timing``: each file's name
mapped to its detected action timing and the evidence (``common.demo_timing.TimingEvidence``:
``timing`` same|next, ``decided_by``, ``metric`` r2|accuracy, ``same_fit`` and ``next_fit``, the
inverse-dynamics scores of record t's and record t+1's action, ``scored_rows``, ``episode_starts``,
``start_zero_actions``, ``zero_action_share``). Without it, a readable summary with one timing
line per file.

For a directory, the JSON also holds ``specs_agree`` and ``files``: each file's own object of the keys above
(its ``action_timing`` naming that file alone) with ``file`` and ``behavior``. The folder-level figures are
there only where every file has the same observation shapes and action spec; where they differ, the text
summary lists each file's own figures and spec and says that there are no folder totals.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # the demo reader loads only when the command runs
    from common.demo import DemoFile, Demonstration
    from common.demo_timing import TimingEvidence


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo`` and its ``inspect`` subcommand."""
    parser = sub.add_parser(
        "demo", help="work with ML-Agents .demo demonstration files", description="Work with ML-Agents .demo files."
    )
    demo_sub = parser.add_subparsers(dest="demo_command", metavar="COMMAND", required=True)
    inspect = demo_sub.add_parser(
        "inspect",
        help="print what a .demo file (or a directory of them) holds",
        description="Read a .demo file, or every .demo file of a directory, as ML-Agents' loader does, and print its "
        "record and episode counts, total reward, observation shapes, action spec and the action timing detected "
        "per file (which record holds the action chosen at an observation) with its evidence.",
    )
    inspect.add_argument("path", metavar="FILE", help="a .demo file, or a directory of .demo files")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    inspect.set_defaults(func=run_demo_inspect)


def run_demo_inspect(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from common.demo import load_demo_files, merge_demonstrations, specs_agree

    stream = sys.stdout if out is None else out
    demos = load_demo_files(args.path)
    agree = specs_agree(demos)
    merged = merge_demonstrations(demos) if agree else None
    if args.json:
        print(json.dumps(_inspect_json(args.path, demos, merged)), file=stream)
        return 0
    if merged is not None:
        lines = _agreeing_lines(args.path, merged)
    else:
        lines = [f"{args.path}: {len(demos)} files whose specs differ: each file's figures, no folder totals"]
        for d in demos:
            lines += _disagreeing_file_lines(d)
    if stream.isatty():  # wrapped at word boundaries, continuation lines indented, rather than cut by the terminal
        width = shutil.get_terminal_size().columns
        lines = [wrapped for line in lines for wrapped in _wrap(line, width)]
    print("\n".join(lines), file=stream)
    return 0


def _wrap(line: str, width: int) -> list[str]:
    """``line`` in rows of at most ``width`` columns; rows after the first indented 4 more than the line."""
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [line]


def _inspect_json(path: str, demos: list[Demonstration], merged: Demonstration | None) -> dict[str, object]:
    """One file: its summary. A directory: the folder's summary where specs agree, beside ``specs_agree`` and
    ``files`` (each file's own summary, ``file`` and ``behavior``)."""
    from common.demo import demo_action_timings, demo_summary

    if merged is not None and len(demos) == 1 and not Path(path).is_dir():
        return demo_summary(merged, demo_action_timings(merged))
    timings = [t for d in demos for t in demo_action_timings(d)]  # per file: the folder's are the same ones
    files = [
        {"file": d.files[0].path.name, "behavior": d.spec.behavior_name} | demo_summary(d, [t])
        for d, t in zip(demos, timings, strict=True)
    ]
    folder = demo_summary(merged, timings) if merged is not None else {}
    return folder | {"specs_agree": merged is not None, "files": files}


def _spec_lines(demo: Demonstration, indent: str) -> list[str]:
    """The observation shapes and action spec of ``demo``."""
    lines = []
    for k, obs in enumerate(demo.spec.observation_specs):
        name = f" ({obs.name})" if obs.name else ""
        lines.append(f"{indent}observation {k}  {list(obs.shape)}{name}")
    actions = demo.spec.action_spec
    lines.append(
        f"{indent}actions        {actions.continuous_size} continuous, discrete branches {list(actions.discrete_branches)}"
    )
    return lines


def _file_line(f: DemoFile) -> str:
    note = " (file ends early: truncated)" if f.truncated else ""
    return (
        f"  {f.path.name}: '{f.name}' api v{f.api_version}, header {f.number_steps} steps / {f.number_episodes} "
        f"episodes / mean reward {f.mean_reward:.4g}; read {len(f.pairs)} records{note}"
    )


def _timing_text(t: TimingEvidence) -> str:
    return (
        f"{t.timing} (by {t.decided_by}; inverse-dynamics {t.metric} of record t's action {t.same_fit}, of record "
        f"t+1's {t.next_fit}, on {t.scored_rows} rows; {t.start_zero_actions}/{t.episode_starts} episode starts with "
        "a zero action)"
    )


def _agreeing_lines(path: str, demo: Demonstration) -> list[str]:
    """The summary of one file, or of a folder whose files share a spec: each file, then the totals."""
    from common.demo import demo_action_timings, demo_summary

    timings = demo_action_timings(demo)
    summary = demo_summary(demo, timings)
    lines = [f"{path}: behavior {demo.spec.behavior_name!r}, {len(demo.files)} file(s)"]
    lines += [_file_line(f) for f in demo.files]
    lines.append(f"records        {summary['records']}")
    lines.append(f"episodes done  {summary['episodes_done']}")
    lines.append(f"sum of rewards {summary['sum_reward']:.6g}")
    lines += _spec_lines(demo, "")
    lines += [f"action timing  {f.path.name}: {_timing_text(t)}" for f, t in zip(demo.files, timings, strict=True)]
    return lines


def _disagreeing_file_lines(demo: Demonstration) -> list[str]:
    """One file of a folder whose specs differ: its header line, then its own figures and spec, indented."""
    from common.demo import demo_action_timings, demo_summary

    (timing,) = demo_action_timings(demo)
    summary = demo_summary(demo)
    indent = "    "
    return [
        f"{_file_line(demo.files[0])}, behavior {demo.spec.behavior_name!r}",
        f"{indent}records        {summary['records']}",
        f"{indent}episodes done  {summary['episodes_done']}",
        f"{indent}sum of rewards {summary['sum_reward']:.6g}",
        *_spec_lines(demo, indent),
        f"{indent}action timing  {_timing_text(timing)}",
    ]
