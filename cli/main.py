"""The ``stepstream`` command line: one subcommand per service, flags as in ``mlagents-learn``.

Addresses and ports come from flags, or from environment variables for the stack
(``STEPSTREAM_HOST``, ``STEPSTREAM_PORT``, ``STEPSTREAM_PROCESSOR``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from common.errors import StepstreamError

log = logging.getLogger(__name__)

DEFAULT_PORT = 50051


def _add_processor(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "processor",
        help="run the AgentProcessor service (stack mode)",
        description="Serve env-client sessions and the trajectory/policy topics over gRPC until SIGTERM or SIGINT.",
    )
    parser.add_argument("config", nargs="?", help="trainer YAML (time_horizon etc. per behavior); none accepts any behavior")
    parser.add_argument(
        "--host",
        default=os.environ.get("STEPSTREAM_HOST", "127.0.0.1"),
        help="interface to bind (default 127.0.0.1; 0.0.0.0 must be asked for) [env STEPSTREAM_HOST]",
    )
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("STEPSTREAM_PORT", DEFAULT_PORT)), help="port (default 50051) [env STEPSTREAM_PORT]"
    )
    parser.add_argument("--grace-s", type=float, default=10.0, help="drain time on SIGTERM/SIGINT, seconds (default 10)")
    parser.set_defaults(func=_run_processor)


def _add_health(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "health", help="exit 0 when a service is SERVING", description="Query the standard gRPC health service at ADDRESS."
    )
    parser.add_argument("address", nargs="?", default=os.environ.get("STEPSTREAM_PROCESSOR", f"127.0.0.1:{DEFAULT_PORT}"))
    parser.add_argument("--timeout-s", type=float, default=3.0, help="seconds to wait for an answer (default 3)")
    parser.set_defaults(func=_run_health)


def _add_train(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "train",
        help="train the behaviors of CONFIG on this machine (embedded mode)",
        description="Run the processor, the env clients and one trainer per behavior in this process; "
        "results go to RESULTS_DIR/RUN_ID. Ctrl-C saves checkpoints and exits; --resume continues.",
    )
    parser.add_argument("config", help="ML-Agents-style trainer YAML")
    parser.add_argument("--run-id", default="ppo", help="name of the run's results folder (default: ppo)")
    parser.add_argument("--results-dir", default="results", help="where run folders go (default: results)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the run RUN_ID from its latest checkpoints")
    mode.add_argument("--force", action="store_true", help="overwrite the run RUN_ID if it exists")
    mode.add_argument("--inference", action="store_true", help="act with RUN_ID's latest checkpoints, without training")
    parser.add_argument("--env", help="override env_settings.env_path (gym:<id>)")
    parser.add_argument("--num-envs", type=int, help="override env_settings.num_envs (copies per env)")
    parser.add_argument("--seed", type=int, help="override env_settings.seed")
    parser.add_argument("--no-progress", action="store_true", help="no live progress bar (log lines only)")
    parser.set_defaults(func=_run_train)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stepstream", description="Asynchronous agent-processor service for RL.")
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_processor(sub)
    _add_health(sub)
    return parser


def _run_processor(args: argparse.Namespace) -> int:
    from common.config import load_config
    from processor.behaviors import ProcessorSettings
    from processor.server import ProcessorServer, ServerOptions

    settings = ProcessorSettings.from_run_options(load_config(args.config)) if args.config else ProcessorSettings()
    server = ProcessorServer(settings, ServerOptions(host=args.host, port=args.port))
    asyncio.run(server.serve(grace_s=args.grace_s))
    return 0


def _run_health(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(args.address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=args.timeout_s)
        except grpc.RpcError as err:
            log.error("%s: %s", args.address, err.code().name)  # type: ignore[attr-defined]
            return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    log.info("%s: %s", args.address, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if serving else 1


def _run_train(args: argparse.Namespace) -> int:
    from cli.train import options_from_args, run_train

    return run_train(options_from_args(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except StepstreamError as err:
        log.error("%s", err)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
