"""``stepstream unity``: the ML-Agents protocol gateway in front of a processor (``envclient.unity``).

The YAML's ``engine_settings`` and constant ``environment_parameters`` become the typed
``UnitySettings`` here (``unity_settings_from_yaml``); the rest of the file is the processor's and
the trainers' business and is not read. Samplers and curricula are not supported yet.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cli.flags import add_client_security_flags, add_metrics_flags, client_security_from_args
from cli.signals import StopSignals, set_soon
from common.config import read_yaml
from common.errors import ConfigError
from common.metrics import serve_metrics
from envclient.unity.fleet import (
    DEFAULT_MAX_LIFETIME_RESTARTS,
    DEFAULT_RESTARTS_RATE_LIMIT_N,
    DEFAULT_RESTARTS_RATE_LIMIT_PERIOD_S,
    BuildFleet,
    RestartPolicy,
)
from envclient.unity.gateway import DEFAULT_UNITY_PORT, RECONNECT_TIMEOUT_S, GatewayServer, GatewaySettings
from envclient.unity.launcher import DEFAULT_BUILD_PORT, LaunchSettings
from envclient.unity.metrics import UnityCollector
from envclient.unity.side_channels import EngineSettings, UnitySettings

log = logging.getLogger(__name__)

EDITOR_HINT = "Listening on port {port}. Start training by pressing the Play button in the Unity Editor."
"""What mlagents-learn prints (``UnityEnvironment`` with no file name) while it waits for the Editor."""

_ENGINE_TYPES: dict[str, type] = {
    "width": int,
    "height": int,
    "quality_level": int,
    "time_scale": float,
    "target_frame_rate": int,
    "capture_frame_rate": int,
    "no_graphics": bool,
}
"""``EngineSettings``' fields and their types (a test checks they agree)."""


def _engine_settings(section: Any) -> EngineSettings:
    if section is None:
        return EngineSettings()
    if not isinstance(section, Mapping):
        raise ConfigError(f"engine_settings: expected a mapping, got {type(section).__name__} {section!r}")
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key == "no_graphics_monitor":  # an ML-Agents key about its own monitor; nothing to tell Unity
            continue
        if key not in _ENGINE_TYPES:
            raise ConfigError(f"engine_settings.{key}: unknown key (known: {', '.join(sorted(_ENGINE_TYPES))})")
        want = _ENGINE_TYPES[key]
        ok = isinstance(value, bool) if want is bool else isinstance(value, (int, float) if want is float else int)
        if not ok or (want is not bool and isinstance(value, bool)):
            raise ConfigError(f"engine_settings.{key}: expected {want.__name__}, got {type(value).__name__} {value!r}")
        values[key] = want(value)
    return EngineSettings(**values)


def _environment_parameters(section: Any) -> dict[str, float]:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"environment_parameters: expected a mapping, got {type(section).__name__} {section!r}")
    out: dict[str, float] = {}
    for key, value in section.items():
        if isinstance(value, Mapping) and set(value) == {"value"}:
            value = value["value"]
        if isinstance(value, Mapping) and ("curriculum" in value or "sampler_type" in value):
            continue  # the processor serves samplers and curricula; the gateway hands them on (its _new_samplers)
        if isinstance(value, Mapping):
            raise ConfigError(f"environment_parameters.{key}: expected a number, a sampler or a curriculum, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"environment_parameters.{key}: expected a number, got {type(value).__name__} {value!r}")
        out[str(key)] = float(value)
    return out


def unity_settings_from_yaml(path: str | Path | None, seed: int = -1, num_areas: int = 1) -> UnitySettings:
    """The ``engine_settings`` and ``environment_parameters`` of the YAML at ``path`` (None: the defaults).

    Raises:
        ConfigError: an unreadable file, an unknown key, a wrong type or value (the dotted path named).
    """
    mapping: Any = {}
    if path is not None:
        mapping = read_yaml(path) or {}  # bounded size and alias expansion, as every config read
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{path}: expected a mapping at the top, got {type(mapping).__name__}")
    return UnitySettings(
        engine=_engine_settings(mapping.get("engine_settings")),
        environment_parameters=_environment_parameters(mapping.get("environment_parameters")),
        seed=seed,
        num_areas=num_areas,
    )


_LAUNCH_TYPES: dict[str, type] = {
    "base_port": int,
    "max_lifetime_restarts": int,
    "restarts_rate_limit_n": int,
    "restarts_rate_limit_period_s": float,
}


def launch_keys_from_yaml(path: str | Path) -> dict[str, Any]:
    """``env_settings``' Unity launching keys of the YAML at ``path`` (ML-Agents' names; only those set).

    Raises:
        ConfigError: a value of the wrong type, naming its dotted key.
    """
    mapping = read_yaml(path) or {}
    section = mapping.get("env_settings") if isinstance(mapping, Mapping) else None
    out: dict[str, Any] = {}
    for key, want in _LAUNCH_TYPES.items():
        if not isinstance(section, Mapping) or section.get(key) is None:
            continue
        value = section[key]
        if isinstance(value, bool) or not isinstance(value, (int, float) if want is float else int):
            raise ConfigError(f"env_settings.{key}: expected {want.__name__}, got {type(value).__name__} {value!r}")
        out[key] = want(value)
    return out


def add_unity_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "unity",
        help="let an unmodified Unity build or the Editor train through a processor (ML-Agents' protocol)",
        description="Listen where Unity dials its trainer (127.0.0.1:5004, the Editor's port; a build's --mlagents-port) "
        "and step every behavior as it appears through one session per behavior with the processor, which may be on "
        "another host. CONFIG's engine_settings and constant environment_parameters go to Unity on its side channels.",
    )
    parser.add_argument("config", nargs="?", help="ML-Agents-style trainer YAML (engine_settings, environment_parameters)")
    parser.add_argument(
        "--port",
        type=int,
        help=f"port Unity dials (default {DEFAULT_UNITY_PORT}, the Editor's; {DEFAULT_BUILD_PORT} with --env; "
        "0 with --env: any free port, passed to the build)",
    )
    parser.add_argument(
        "--env",
        metavar="PATH",
        dest="env_path",
        help="launch this Unity build with --mlagents-port, as mlagents-learn does; the command ends when it exits",
    )
    parser.add_argument(
        "--no-graphics",
        action="store_true",
        default=None,
        help="start the build with -nographics -batchmode (default: engine_settings.no_graphics)",
    )
    parser.add_argument("--num-envs", type=int, default=1, help="with --env: copies of the build, on consecutive ports")
    parser.add_argument(
        "--base-port",
        type=int,
        help=f"with --env: copy i listens on BASE_PORT + i (default {DEFAULT_BUILD_PORT}; 0: free ports)",
    )
    parser.add_argument(
        "--max-lifetime-restarts",
        type=int,
        default=DEFAULT_MAX_LIFETIME_RESTARTS,
        help=f"restarts of a crashed copy over the run (default {DEFAULT_MAX_LIFETIME_RESTARTS}; -1: no limit)",
    )
    parser.add_argument(
        "--restarts-rate-limit-n",
        type=int,
        default=DEFAULT_RESTARTS_RATE_LIMIT_N,
        help=f"restarts of a copy within --restarts-rate-limit-period-s (default {DEFAULT_RESTARTS_RATE_LIMIT_N}; "
        "-1: no limit)",
    )
    parser.add_argument(
        "--restarts-rate-limit-period-s",
        type=float,
        default=DEFAULT_RESTARTS_RATE_LIMIT_PERIOD_S,
        help=f"the rate limit's window (default {DEFAULT_RESTARTS_RATE_LIMIT_PERIOD_S:g} s)",
    )
    parser.add_argument("--log-dir", type=Path, help="the build writes -logFile LOG_DIR/Player-0.log")
    parser.add_argument(
        "--env-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="arguments for the build after stepstream's own (last on the command line, as in mlagents-learn)",
    )
    parser.add_argument(
        "--processor",
        metavar="ADDR",
        default=os.environ.get("STEPSTREAM_PROCESSOR", "127.0.0.1:50051"),
        help="host:port of the processor (default 127.0.0.1:50051) [env STEPSTREAM_PROCESSOR]",
    )
    parser.add_argument("--client-id", default="unity", help="session ids are <client-id>/<behavior> (default: unity)")
    parser.add_argument("--seed", type=int, default=-1, help="the seed Unity is initialized with (default -1: Unity picks)")
    parser.add_argument("--num-areas", type=int, default=1, help="training areas Unity instantiates (default 1)")
    parser.add_argument(
        "--reconnect-timeout-s",
        type=float,
        default=RECONNECT_TIMEOUT_S,
        help=f"how long a step waits for an unreachable processor before Unity is told to quit "
        f"(default {RECONNECT_TIMEOUT_S:g})",
    )
    add_client_security_flags(parser)
    add_metrics_flags(parser)
    parser.set_defaults(func=run_unity)


def run_unity(args: argparse.Namespace) -> int:
    """Serve Unity until SIGTERM or Ctrl-C; returns 0."""
    settings = GatewaySettings(
        processor=args.processor,
        client_id=args.client_id,
        unity=unity_settings_from_yaml(args.config, args.seed, args.num_areas),
        security=client_security_from_args(args),
        reconnect_timeout_s=args.reconnect_timeout_s,
    )
    fleet = None
    port = args.port if args.port is not None else DEFAULT_UNITY_PORT
    if args.env_path is not None:
        no_graphics = settings.unity.engine.no_graphics if args.no_graphics is None else args.no_graphics
        base_port = next(p for p in (args.base_port, args.port, DEFAULT_BUILD_PORT) if p is not None)
        fleet = BuildFleet(
            settings,
            LaunchSettings(args.env_path, no_graphics, args.log_dir, tuple(args.env_args)),
            num_envs=args.num_envs,
            base_port=base_port,
            restarts=RestartPolicy(args.max_lifetime_restarts, args.restarts_rate_limit_n, args.restarts_rate_limit_period_s),
        )
    elif args.num_envs != 1:
        raise ConfigError(f"--num-envs {args.num_envs}: copies need a build to launch (--env PATH)")
    return asyncio.run(_serve(settings, port, fleet, args.metrics_host, args.metrics_port))


async def _serve(
    settings: GatewaySettings, port: int, fleet: BuildFleet | None, metrics_host: str, metrics_port: int | None
) -> int:
    """Serve until SIGTERM/SIGINT or, with builds, until every copy exited with 0 (one past its restarts: an error)."""
    gateways = fleet.gateways if fleet is not None else [GatewayServer(settings, port=port)]
    endpoint = None
    stop = asyncio.Event()
    ran: asyncio.Task[None] | None = None
    with StopSignals(set_soon(stop)):  # the CLI's one signal pattern (cli.signals), before anything listens
        try:
            if fleet is None:
                port = await gateways[0].start()
                log.info(EDITOR_HINT.format(port=port))
            else:
                await fleet.start()
            endpoint = serve_metrics(metrics_host, metrics_port, UnityCollector(*(g.gateway.stats for g in gateways)))
            waits: list[asyncio.Future[object]] = [asyncio.ensure_future(stop.wait())]
            if fleet is not None:
                ran = asyncio.ensure_future(fleet.run())
                waits.append(ran)  # type: ignore[arg-type]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in waits:
                if task is not ran:
                    task.cancel()
            if ran is not None and ran.done() and not stop.is_set():
                ran.result()  # a copy past its restarts fails the command
                log.info("the Unity build exited")
        finally:
            if ran is not None and not ran.done():
                ran.cancel()
            if fleet is not None:
                await fleet.stop()
            else:
                await gateways[0].stop()
            if endpoint is not None:
                endpoint.stop()
    return 0
