"""``stepstream demo inspect FILE [--json]``: what an ML-Agents .demo file (or a directory of them) holds.

``--json`` prints one object: ``records`` (read, up to each header's count), ``episodes_done``
(records flagged done), ``sum_reward`` (over every record), ``observation_shapes`` (from the agent
infos), ``continuous_actions``, ``discrete_branches`` and ``action_timing``: each file's name
mapped to its detected action timing and the evidence (``common.demo_timing.TimingEvidence``:
``timing`` same|next, ``decided_by``, ``metric`` r2|accuracy, ``same_fit`` and ``next_fit``, the
inverse-dynamics scores of record t's and record t+1's action, ``scored_rows``, ``episode_starts``,
``start_zero_actions``, ``zero_action_share``). Without it, a readable summary with one timing
line per file.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``demo`` and its ``inspect`` subcommand."""
    parser = sub.add_parser(
        "demo", help="work with ML-Agents .demo demonstration files", description="Work with ML-Agents .demo files."
    )
    demo_sub = parser.add_subparsers(dest="demo_command", required=True)
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
    from common.demo import demo_action_timings, demo_summary, load_demonstration

    stream = sys.stdout if out is None else out
    demo = load_demonstration(args.path)
    timings = demo_action_timings(demo)
    summary = demo_summary(demo, timings)
    if args.json:
        print(json.dumps(summary), file=stream)
        return 0
    spec = demo.spec
    lines = [f"{args.path}: behavior {spec.behavior_name!r}, {len(demo.files)} file(s)"]
    for f in demo.files:
        note = " (file ends early: truncated)" if f.truncated else ""
        lines.append(
            f"  {f.path.name}: '{f.name}' api v{f.api_version}, header {f.number_steps} steps / {f.number_episodes} "
            f"episodes / mean reward {f.mean_reward:.4g}; read {len(f.pairs)} records{note}"
        )
    lines.append(f"records        {summary['records']}")
    lines.append(f"episodes done  {summary['episodes_done']}")
    lines.append(f"sum of rewards {summary['sum_reward']:.6g}")
    for k, obs in enumerate(spec.observation_specs):
        name = f" ({obs.name})" if obs.name else ""
        lines.append(f"observation {k}  {list(obs.shape)}{name}")
    actions = spec.action_spec
    lines.append(f"actions        {actions.continuous_size} continuous, discrete branches {list(actions.discrete_branches)}")
    for f, t in zip(demo.files, timings, strict=True):
        lines.append(
            f"action timing  {f.path.name}: {t.timing} (by {t.decided_by}; inverse-dynamics {t.metric} of record t's "
            f"action {t.same_fit}, of record t+1's {t.next_fit}, on {t.scored_rows} rows; "
            f"{t.start_zero_actions}/{t.episode_starts} episode starts with a zero action)"
        )
    print("\n".join(lines), file=stream)
    return 0
