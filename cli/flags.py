"""The security and metrics flags of the ``stepstream`` services, and what they build.

Each flag's default comes from an environment variable, so a container is configured by its
environment (or by files mounted as Docker secrets) without changing its command:

==================================  =============================  ==========================================
flag                                environment                    meaning
==================================  =============================  ==========================================
``processor --tls-cert/--tls-key``  ``STEPSTREAM_TLS_SERVER_CERT``  the server's certificate chain and key (PEM)
                                    ``STEPSTREAM_TLS_SERVER_KEY``
``processor --tls-client-ca``       ``STEPSTREAM_TLS_CLIENT_CA``    require client certificates signed by it (mTLS)
client ``--tls``                    ``STEPSTREAM_TLS`` (``1``)      TLS, trusting the system roots
client ``--tls-ca``                 ``STEPSTREAM_TLS_CA``           TLS, trusting this CA for the server
client ``--tls-cert/--tls-key``     ``STEPSTREAM_TLS_CERT/_KEY``    this client's certificate and key (mTLS)
client ``--tls-server-name``        ``STEPSTREAM_TLS_SERVER_NAME``  name to check the server certificate against
``--token`` / ``--token-file``      ``STEPSTREAM_TOKEN[_FILE]``     the shared token (every service)
``--metrics-host/--metrics-port``   ``STEPSTREAM_METRICS_HOST/PORT``  the Prometheus endpoint (off without a port)
``--topics-tls-ca``                 ``STEPSTREAM_TOPICS_TLS_CA``    TLS to the NATS broker, trusting this CA
``--topics-tls-cert/--topics-tls-key``  ``STEPSTREAM_TOPICS_TLS_CERT/_KEY``  a client certificate for the broker
``--topics-tls-server-name``        ``STEPSTREAM_TOPICS_TLS_SERVER_NAME``  name to check the broker's certificate against
``--topics-token[-file]``           ``STEPSTREAM_TOPICS_TOKEN[_FILE]``  the broker's ``authorization { token }``
==================================  =============================  ==========================================

The server's certificate variables are named apart from the clients' because ``stepstream health``
runs as a client inside the processor's container (the compose healthcheck), next to the server.
Clients are ``trainer``, ``env`` and ``health``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from common.metrics import DEFAULT_METRICS_HOST
from common.security import BrokerSecurity, ClientSecurity, ServerSecurity

_TRUE = {"1", "true", "yes", "on"}


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _port(value: str) -> int:
    """A port, 0..65535 (argparse ``type``); its errors name the value, never this function."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {port}")
    return port


def _add_token(parser: argparse.ArgumentParser, flag: str = "--token", env: str = "STEPSTREAM_TOKEN", what: str = "") -> None:
    """``FLAG`` and ``FLAG-file`` (one or the other): a token given inline or read from a file."""
    what = what or "shared token sent/required on every call as 'authorization: Bearer TOKEN'"
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        flag,
        metavar="TOKEN",
        default=_env(env),
        help=f"{what} (visible in ps: prefer the environment or {flag}-file) [env {env}]",
    )
    group.add_argument(
        f"{flag}-file",
        metavar="PATH",
        default=_env(f"{env}_FILE"),
        help=f"read the token from this file, e.g. a Docker secret [env {env}_FILE]",
    )


def add_server_security_flags(parser: argparse.ArgumentParser) -> None:
    """``--tls-cert``, ``--tls-key``, ``--tls-client-ca``, ``--token``, ``--token-file`` of a server."""
    parser.add_argument(
        "--tls-cert",
        metavar="PEM",
        default=_env("STEPSTREAM_TLS_SERVER_CERT"),
        help="serve TLS with this certificate chain (with --tls-key) [env STEPSTREAM_TLS_SERVER_CERT]",
    )
    parser.add_argument(
        "--tls-key",
        metavar="PEM",
        default=_env("STEPSTREAM_TLS_SERVER_KEY"),
        help="its private key [env STEPSTREAM_TLS_SERVER_KEY]",
    )
    parser.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        default=_env("STEPSTREAM_TLS_CLIENT_CA"),
        help="require every client to present a certificate signed by this CA (mutual TLS) [env STEPSTREAM_TLS_CLIENT_CA]",
    )
    _add_token(parser)


def _add_client_tls_flags(parser: argparse.ArgumentParser, flag: str, env: str, peer: str, host: str) -> None:
    """``FLAG``, ``FLAG-ca``, ``FLAG-cert``, ``FLAG-key``, ``FLAG-server-name``: TLS towards ``peer``."""
    parser.add_argument(
        flag,
        action="store_true",
        default=(os.environ.get(env, "").lower() in _TRUE),
        help=f"TLS to {peer}, trusting the system's root CAs (implied by {flag}-ca) [env {env}=1]",
    )
    parser.add_argument(
        f"{flag}-ca",
        metavar="PEM",
        default=_env(f"{env}_CA"),
        help=f"TLS to {peer}, trusting this CA for its certificate [env {env}_CA]",
    )
    parser.add_argument(
        f"{flag}-cert",
        metavar="PEM",
        default=_env(f"{env}_CERT"),
        help=f"this client's certificate, for {peer} when it requires one (with {flag}-key) [env {env}_CERT]",
    )
    parser.add_argument(f"{flag}-key", metavar="PEM", default=_env(f"{env}_KEY"), help=f"its private key [env {env}_KEY]")
    parser.add_argument(
        f"{flag}-server-name",
        metavar="NAME",
        default=_env(f"{env}_SERVER_NAME"),
        help=f"check {peer}'s certificate against NAME instead of the {host}'s host [env {env}_SERVER_NAME]",
    )


def add_client_security_flags(parser: argparse.ArgumentParser) -> None:
    """``--tls``, ``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name``, ``--token[-file]`` of a client."""
    _add_client_tls_flags(parser, "--tls", "STEPSTREAM_TLS", "the processor", "address")
    _add_token(parser)


def add_broker_security_flags(parser: argparse.ArgumentParser) -> None:
    """``--topics-tls[-ca|-cert|-key|-server-name]`` and ``--topics-token[-file]``: NATS's own TLS and token
    towards the ``--topics`` broker (``common.security.BrokerSecurity``)."""
    _add_client_tls_flags(parser, "--topics-tls", "STEPSTREAM_TOPICS_TLS", "the --topics broker", "URL")
    _add_token(parser, "--topics-token", "STEPSTREAM_TOPICS_TOKEN", "the --topics broker's authorization token")


def broker_security_from_args(args: Any) -> BrokerSecurity:
    """The ``BrokerSecurity`` of ``add_broker_security_flags``; raises ``ConfigError`` for an unreadable file."""
    return BrokerSecurity.from_paths(
        args.topics_tls_ca,
        args.topics_tls_cert,
        args.topics_tls_key,
        tls=args.topics_tls,
        server_name=args.topics_tls_server_name,
        token=args.topics_token,
        token_file=args.topics_token_file,
    )


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    """``--metrics-host`` and ``--metrics-port``: the process's Prometheus endpoint, off unless a port is given."""
    port = _env("STEPSTREAM_METRICS_PORT")
    parser.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        default=None if port is None else _port(port),
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off; 0 picks a free port, logged) "
        "[env STEPSTREAM_METRICS_PORT]",
    )
    parser.add_argument(
        "--metrics-host",
        metavar="HOST",
        default=_env("STEPSTREAM_METRICS_HOST") or DEFAULT_METRICS_HOST,
        help="interface of the metrics endpoint (default 127.0.0.1; 0.0.0.0 must be asked for) [env STEPSTREAM_METRICS_HOST]",
    )


def server_security_from_args(args: Any) -> ServerSecurity:
    """The ``ServerSecurity`` of ``add_server_security_flags``; raises ``ConfigError`` for an unreadable file."""
    return ServerSecurity.from_paths(args.tls_cert, args.tls_key, args.tls_client_ca, args.token, args.token_file)


def client_security_from_args(args: Any) -> ClientSecurity:
    """The ``ClientSecurity`` of ``add_client_security_flags``; raises ``ConfigError`` for an unreadable file."""
    return ClientSecurity.from_paths(
        args.tls_ca,
        args.tls_cert,
        args.tls_key,
        tls=args.tls,
        server_name=args.tls_server_name,
        token=args.token,
        token_file=args.token_file,
    )


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where a process serves its Prometheus metrics (``add_metrics_flags``)."""

    host: str = DEFAULT_METRICS_HOST
    """Interface to bind; 127.0.0.1 unless 0.0.0.0 is asked for."""
    port: int | None = None
    """Port; None serves none, 0 picks a free one (logged)."""


def metrics_from_args(args: Any) -> MetricsEndpoint:
    """The ``MetricsEndpoint`` of ``add_metrics_flags``."""
    return MetricsEndpoint(args.metrics_host, args.metrics_port)
