"""The ``stepstream`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

log = logging.getLogger(__name__)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stepstream", description="Asynchronous agent-processor service for RL.")
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the behaviors of CONFIG on this machine (embedded mode)")
    train.add_argument("config", help="ML-Agents-style trainer YAML")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "train":
        log.error("training is not built yet (see issue 'Run it'); nothing was trained from %s", args.config)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
