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
from common.security import ClientSecurity, ServerSecurity

_TRUE = {"1", "true", "yes", "on"}


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _port(value: str) -> int:
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {port}")
    return port


def _add_token(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--token",
        default=_env("STEPSTREAM_TOKEN"),
        help="shared token sent/required on every call as 'authorization: Bearer TOKEN' (visible in ps: prefer the "
        "environment or --token-file) [env STEPSTREAM_TOKEN]",
    )
    group.add_argument(
        "--token-file",
        metavar="PATH",
        default=_env("STEPSTREAM_TOKEN_FILE"),
        help="read the shared token from this file, e.g. a Docker secret [env STEPSTREAM_TOKEN_FILE]",
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


def add_client_security_flags(parser: argparse.ArgumentParser) -> None:
    """``--tls``, ``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name``, ``--token[-file]`` of a client."""
    parser.add_argument(
        "--tls",
        action="store_true",
        default=(os.environ.get("STEPSTREAM_TLS", "").lower() in _TRUE),
        help="connect with TLS, trusting the system's root CAs (implied by --tls-ca) [env STEPSTREAM_TLS=1]",
    )
    parser.add_argument(
        "--tls-ca",
        metavar="PEM",
        default=_env("STEPSTREAM_TLS_CA"),
        help="connect with TLS, trusting this CA for the processor's certificate [env STEPSTREAM_TLS_CA]",
    )
    parser.add_argument(
        "--tls-cert",
        metavar="PEM",
        default=_env("STEPSTREAM_TLS_CERT"),
        help="this client's certificate, for a processor that requires one (with --tls-key) [env STEPSTREAM_TLS_CERT]",
    )
    parser.add_argument(
        "--tls-key", metavar="PEM", default=_env("STEPSTREAM_TLS_KEY"), help="its private key [env STEPSTREAM_TLS_KEY]"
    )
    parser.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=_env("STEPSTREAM_TLS_SERVER_NAME"),
        help="check the processor's certificate against NAME instead of the address's host [env STEPSTREAM_TLS_SERVER_NAME]",
    )
    _add_token(parser)


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
