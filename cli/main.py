"""The ``stepstream`` command line: one subcommand per service, flags as in ``mlagents-learn``.

Addresses and ports come from flags, or from environment variables for the stack
(``STEPSTREAM_HOST``, ``STEPSTREAM_PORT``, ``STEPSTREAM_PROCESSOR``). The stack's services (``processor``,
``trainer``, ``env``; ``docker-compose.yml``) run the very commands the integration tests start as local processes.
TLS, the shared token and the metrics endpoint are flags too, with environment defaults (``cli.flags``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from cli.flags import (
    add_broker_security_flags,
    add_client_security_flags,
    add_metrics_flags,
    add_server_security_flags,
    broker_security_from_args,
    client_security_from_args,
    server_security_from_args,
)
from cli.ports import check_port_free
from common.errors import StepstreamError
from common.logs import LOG_FORMATS, configure_logging

log = logging.getLogger(__name__)

DEFAULT_PORT = 50051


def at_least_one(value: str) -> int:
    """An integer >= 1 (argparse ``type``); its errors name the value, never this function."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def host_port(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` as ``(host, port)``: 127.0.0.1 when no host is given; a port in 0..65535 (0 picks one)."""
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not [HOST:]PORT (a port is 0..65535)")
    return host or "127.0.0.1", int(port)


def an_address(value: str) -> str:
    """``HOST:PORT`` with a port in 1..65535, or a gRPC target with a scheme (``dns:///...``, ``unix:...``)."""
    if "://" in value or value.startswith(("unix:", "ipv4:", "ipv6:")):
        return value
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (a port is 1..65535)")
    return value


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
        "--port",
        type=int,
        default=int(os.environ.get("STEPSTREAM_PORT", DEFAULT_PORT)),
        help="port (default 50051) [env STEPSTREAM_PORT]",
    )
    parser.add_argument("--grace-s", type=float, default=10.0, help="drain time on SIGTERM/SIGINT, seconds (default 10)")
    parser.add_argument(
        "--full-policy",
        choices=("block", "drop_oldest"),
        default="block",
        help="what a publish does when a trainer's trajectory queue is full: block (backpressure env clients; default) "
        "or drop_oldest (drop and count the oldest unacknowledged trajectory)",
    )
    parser.add_argument(
        "--topics",
        metavar="URL",
        default=os.environ.get("STEPSTREAM_TOPICS") or None,
        help="nats://HOST:4222: the trajectory and policy topics on that NATS JetStream broker (many processors, "
        "durable) instead of in this process [env STEPSTREAM_TOPICS]",
    )
    parser.add_argument(
        "--processor-id",
        metavar="ID",
        default=os.environ.get("STEPSTREAM_PROCESSOR_ID") or None,
        help="this processor's identity in every session and trajectory id (default <hostname>-<pid>); processors "
        "sharing one --topics broker need distinct ones [env STEPSTREAM_PROCESSOR_ID]",
    )
    parser.add_argument(
        "--exit-when-finished",
        action="store_true",
        help="exit 0 once the trainer of every configured behavior reported max_steps and no env client is connected "
        "(the compose stack's end); without it the processor serves inference on with the last policies",
    )
    add_server_security_flags(parser)
    add_broker_security_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(func=_run_processor)


def _add_health(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "health", help="exit 0 when a service is SERVING", description="Query the standard gRPC health service at ADDRESS."
    )
    parser.add_argument(
        "address",
        nargs="?",
        type=an_address,
        default=os.environ.get("STEPSTREAM_PROCESSOR", f"127.0.0.1:{DEFAULT_PORT}"),
        help="HOST:PORT of the service (default 127.0.0.1:50051) [env STEPSTREAM_PROCESSOR]",
    )
    parser.add_argument("--timeout-s", type=float, default=3.0, help="seconds to wait for an answer (default 3)")
    add_client_security_flags(parser)
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
    parser.add_argument(
        "--env", help="override env_settings.env_path (gym:<id>), or launch this Unity build (mlagents-learn's --env)"
    )
    parser.add_argument("--num-envs", type=at_least_one, metavar="N", help="override env_settings.num_envs (copies per env)")
    parser.add_argument("--seed", type=int, help="override env_settings.seed")
    parser.add_argument(
        "--max-steps",
        type=at_least_one,
        metavar="N",
        help="override every behavior's max_steps (agent steps), e.g. a short smoke run",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress bar (log lines only)")
    parser.add_argument(
        "--serve",
        type=host_port,
        metavar="[HOST:]PORT",
        help="serve your own simulator's SDK clients (envclient.EnvSession) at HOST:PORT (host default 127.0.0.1) "
        "instead of stepping env_settings.env_path: a trainer starts as a client declares each behavior, and the "
        "command ends when every behavior of CONFIG reaches max_steps (its clients are told: TrainingFinishedError)",
    )
    add_metrics_flags(parser)
    parser.set_defaults(func=_run_train)


def _add_trainer(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "trainer",
        help="train one behavior against a running processor (stack mode)",
        description="Subscribe to the processor's trajectories/BEHAVIOR topic over gRPC, train BEHAVIOR with its settings "
        "from CONFIG and publish each policy version back; results go to RESULTS_DIR/RUN_ID/BEHAVIOR. Waits for an env "
        "client to declare the behavior, and for the processor when it restarts. SIGTERM or Ctrl-C saves a checkpoint "
        "and exits.",
    )
    parser.add_argument("config", help="ML-Agents-style trainer YAML, the same file every service of the stack reads")
    parser.add_argument(
        "--behavior", required=True, metavar="NAME", help="the behavior to train (one trainer process per behavior)"
    )
    parser.add_argument(
        "--processor",
        metavar="ADDR",
        default=os.environ.get("STEPSTREAM_PROCESSOR", f"127.0.0.1:{DEFAULT_PORT}"),
        help="host:port of the processor (default 127.0.0.1:50051) [env STEPSTREAM_PROCESSOR]",
    )
    parser.add_argument(
        "--run-id", default="ppo", metavar="ID", help="name of the run's results folder, shared by its trainers (default: ppo)"
    )
    parser.add_argument("--results-dir", default="results", metavar="DIR", help="where run folders go (default: results)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the behavior's newest checkpoint in RESULTS_DIR/RUN_ID (starts fresh if there is none); "
        "without it an existing RESULTS_DIR/RUN_ID/BEHAVIOR is an error",
    )
    parser.add_argument(
        "--seed", type=int, metavar="S", help="the learner's random seed (default: env_settings.seed; -1 picks one)"
    )
    parser.add_argument(
        "--topics",
        metavar="URL",
        default=os.environ.get("STEPSTREAM_TOPICS") or None,
        help="nats://HOST:4222: the trajectory and policy topics on that NATS JetStream broker (many processors, "
        "durable) instead of the processor's over gRPC (BrainParameters still come from --processor) [env STEPSTREAM_TOPICS]",
    )
    add_client_security_flags(parser)
    add_broker_security_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(func=_run_trainer)


def _add_env(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "env",
        help="step the config's environments through a running processor (stack mode)",
        description="Build the environments of CONFIG's env_settings.env_path (gym:<id>, or the built-in 1-D task "
        "simple:discrete / simple:continuous) and step them through one session per behavior until SIGTERM, Ctrl-C or "
        "--max-env-steps. Reconnects with capped exponential backoff when the processor goes away or restarts; exits "
        "with an error on statuses retrying cannot fix (INVALID_ARGUMENT, NOT_FOUND, ...).",
    )
    parser.add_argument("config", help="ML-Agents-style trainer YAML, the same file every service of the stack reads")
    parser.add_argument(
        "--processor",
        metavar="ADDR",
        default=os.environ.get("STEPSTREAM_PROCESSOR", f"127.0.0.1:{DEFAULT_PORT}"),
        help="host:port of the processor (default 127.0.0.1:50051); several: IP:PORT,IP:PORT or one DNS name resolving "
        "to all (dns:///processor:50051), balanced by gRPC's round_robin [env STEPSTREAM_PROCESSOR]",
    )
    parser.add_argument("--behavior", metavar="NAME", help="host only this behavior's env_path entry (default: every entry)")
    parser.add_argument(
        "--num-envs",
        type=at_least_one,
        metavar="N",
        help="copies (agents) per env_path entry (default: env_settings.num_envs)",
    )
    parser.add_argument(
        "--client-id",
        metavar="ID",
        help="the client id sent at hello; a newer session with the same id replaces the older one "
        "(default: <hostname>-<pid>, distinct for scaled replicas)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help="env seed (default: env_settings.seed; -1 is random); mixed with the client id, so replicas differ",
    )
    parser.add_argument(
        "--max-env-steps",
        type=int,
        metavar="N",
        help="stop after this many env steps (BrainInfos) per behavior (default: until SIGTERM)",
    )
    add_client_security_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(func=_run_env)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    from cli.demo import add_demo_parser

    add_demo_parser(sub)


def _add_record(sub: argparse._SubParsersAction) -> None:
    from cli.record import add_record_parser

    add_record_parser(sub)


def _add_unity(sub: argparse._SubParsersAction) -> None:
    from cli.unity import add_unity_parser

    add_unity_parser(sub)


def _add_export(sub: argparse._SubParsersAction) -> None:
    from cli.export import add_export_parser

    add_export_parser(sub)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stepstream", description="Asynchronous agent-processor service for RL.")
    parser.add_argument("--log-level", default="INFO", help="logging level (default: INFO)")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=os.environ.get("STEPSTREAM_LOG_FORMAT", "text"),
        help="text, or json: one object per line, with client_id and behavior fields (default: text) "
        "[env STEPSTREAM_LOG_FORMAT]",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_processor(sub)
    _add_health(sub)
    _add_trainer(sub)
    _add_env(sub)
    _add_demo(sub)
    _add_record(sub)
    _add_unity(sub)
    _add_export(sub)
    return parser


def _run_processor(args: argparse.Namespace) -> int:
    from cli.console import route_native_stderr
    from common.config import load_config
    from common.topics import FullPolicy
    from processor.behaviors import ProcessorSettings
    from processor.server import ProcessorServer, ServerOptions
    from processor.sessions import default_processor_id

    route_native_stderr()  # LiteRT's "Created TensorFlow Lite XNNPACK delegate" at the first policy: noise, dropped
    full_policy = FullPolicy(args.full_policy)
    if args.config:
        settings = ProcessorSettings.from_run_options(load_config(args.config), full_policy=full_policy)
    else:
        settings = ProcessorSettings(full_policy=full_policy)
    security = server_security_from_args(args)
    check_port_free(args.host, args.port, "--port")
    check_port_free(args.metrics_host, args.metrics_port, "--metrics-port")
    options = ServerOptions(
        host=args.host,
        port=args.port,
        security=security,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        processor_id=args.processor_id,
    )
    topics = None
    if args.topics:
        from common.topics.jetstream import open_topics

        name = f"processor/{args.processor_id or default_processor_id()}"
        topics = open_topics(args.topics, name=name, security=broker_security_from_args(args))
    server = ProcessorServer(settings, options, topics)  # type: ignore[arg-type]  # the same surface as TopicRegistry
    asyncio.run(server.serve(grace_s=args.grace_s, exit_when_finished=args.exit_when_finished))
    return 0


def _run_health(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    security = client_security_from_args(args)  # the health service needs no token; sent anyway (processor.interceptors)
    with security.channel(args.address) as channel:
        try:
            request = health_pb2.HealthCheckRequest()
            reply = health_pb2_grpc.HealthStub(channel).Check(request, timeout=args.timeout_s, metadata=security.metadata())
        except grpc.RpcError as err:
            log.error("%s: %s", args.address, err.code().name)  # type: ignore[attr-defined]
            return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    log.info("%s: %s", args.address, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    return 0 if serving else 1


def _run_train(args: argparse.Namespace) -> int:
    from cli.train import options_from_args, run_train

    return run_train(options_from_args(args))


def _run_trainer(args: argparse.Namespace) -> int:
    from cli.services import run_trainer, trainer_options_from_args

    return run_trainer(trainer_options_from_args(args))


def _run_env(args: argparse.Namespace) -> int:
    from cli.services import env_options_from_args, run_env_client

    return run_env_client(env_options_from_args(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    handler = None
    if args.log_format == "text" and sys.stderr.isatty():  # a person watching: rich's lines, the bar below them
        from cli.console import console_handler

        handler = console_handler()
    configure_logging(args.log_level, args.log_format, handler)
    try:
        return int(args.func(args))
    except StepstreamError as err:
        log.error("%s", err)
        return 2
    except OSError as err:
        # An everyday failure outside the checks (a port taken between its check and the bind, a full
        # disk): one line, no traceback.
        log.error("%s", err)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
