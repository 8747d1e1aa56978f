"""``stepstream demo inspect FILE [--json]``: what an ML-Agents .demo file (or a directory of them) holds.

``--json`` prints one object: ``records`` (read, up to each header's count), ``episodes_done``
(records flagged done), ``sum_reward`` (over every record), ``observation_shapes`` (from the agent
infos), ``continuous_actions`` and ``discrete_branches``. Without it, a readable summary.
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
        "record and episode counts, total reward, observation shapes and action spec.",
    )
    inspect.add_argument("path", metavar="FILE", help="a .demo file, or a directory of .demo files")
    inspect.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    inspect.set_defaults(func=run_demo_inspect)


def run_demo_inspect(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from common.demo import demo_summary, load_demonstration

    stream = sys.stdout if out is None else out
    demo = load_demonstration(args.path)
    summary = demo_summary(demo)
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
    print("\n".join(lines), file=stream)
    return 0
