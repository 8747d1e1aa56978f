"""``docker-compose.secure.yml`` against the CLI: its variables turn on mutual TLS and the token for every service.

The override's secrets are replaced by certificates made here (``tests.certs``); each service's
command from ``docker-compose.yml`` is parsed with the override's environment, and the security it
builds must be complete: TLS with a CA (mutual on the processor) and the token, for the services and
for the processor's healthcheck. No Docker engine needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.flags import client_security_from_args, server_security_from_args
from cli.main import _build_parser
from tests.certs import make_certs
from tests.unit.test_compose import SERVICES, _host_argv

REPO = Path(__file__).resolve().parents[2]
OVERRIDE = yaml.safe_load((REPO / "docker-compose.secure.yml").read_text(encoding="utf-8"))
SECRETS_DIR = "/run/secrets/"
TOKEN = "0123456789abcdef"


@pytest.fixture
def secret_files(tmp_path: Path) -> dict[str, Path]:
    """Secret name -> a host file with the content its ``file:`` names (certificates made here)."""
    certs = make_certs(tmp_path / "certs")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    by_file = {
        "ca.crt": certs.ca,
        "processor.crt": certs.server_cert,
        "processor.key": certs.server_key,
        "client.crt": certs.client_cert,
        "client.key": certs.client_key,
        "token": token,
    }
    return {name: by_file[Path(spec["file"]).name] for name, spec in OVERRIDE["secrets"].items()}


def _environment(name: str, secret_files: dict[str, Path]) -> dict[str, str]:
    """The override's environment of service ``name``, with /run/secrets/<secret> mapped to the host files."""
    service: dict[str, Any] = OVERRIDE["services"][name]
    mounted = set(service["secrets"])
    env = {}
    for key, value in service["environment"].items():
        if value.startswith(SECRETS_DIR):
            secret = value.removeprefix(SECRETS_DIR)
            assert secret in mounted, f"{name}: {key} names secret {secret!r}, which the service does not mount"
            value = str(secret_files[secret])
        env[key] = value
    return env


def test_the_override_only_adds_to_services_of_the_stack() -> None:
    assert set(OVERRIDE["services"]) <= set(SERVICES)
    for name, service in OVERRIDE["services"].items():
        assert set(service) <= {"environment", "secrets"}, f"{name}: the override must not change commands or ports"


@pytest.mark.parametrize("name", sorted(OVERRIDE["services"]))
def test_every_service_is_secured_by_the_override(
    name: str, secret_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _environment(name, secret_files).items():
        monkeypatch.setenv(key, value)
    args = _build_parser().parse_args(_host_argv(SERVICES[name]))  # flag defaults read the environment
    if args.command == "processor":
        server = server_security_from_args(args)
        assert server.tls and server.mutual_tls and server.token == TOKEN
        health = _build_parser().parse_args(SERVICES[name]["healthcheck"]["test"][2:])
        args = health
    client = client_security_from_args(args)
    assert client.tls and client.root_certificates and client.certificate_chain and client.token == TOKEN


def test_without_the_override_nothing_is_secured(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (
        "STEPSTREAM_TLS_CA",
        "STEPSTREAM_TLS_SERVER_CERT",
        "STEPSTREAM_TOKEN",
        "STEPSTREAM_TOKEN_FILE",
        "STEPSTREAM_TLS",
    ):
        monkeypatch.delenv(key, raising=False)
    for name in ("processor", "env"):
        args = _build_parser().parse_args(_host_argv(SERVICES[name]))
        if args.command == "processor":
            assert not server_security_from_args(args).tls and args.metrics_port is None
        else:
            assert not client_security_from_args(args).tls
