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


def add_broker_security_flags(parser: argparse.ArgumentParser) -> None:
    """``--topics-tls[-ca|-cert|-key|-server-name]`` and ``--topics-token[-file]``: NATS's own TLS and token
    towards the ``--topics`` broker (``common.security.BrokerSecurity``)."""
    parser.add_argument(
        "--topics-tls",
        action="store_true",
        default=(os.environ.get("STEPSTREAM_TOPICS_TLS", "").lower() in _TRUE),
        help="TLS to the --topics broker, trusting the system's root CAs (implied by --topics-tls-ca) "
        "[env STEPSTREAM_TOPICS_TLS=1]",
    )
    parser.add_argument(
        "--topics-tls-ca",
        metavar="PEM",
        default=_env("STEPSTREAM_TOPICS_TLS_CA"),
        help="TLS to the --topics broker, trusting this CA for its certificate [env STEPSTREAM_TOPICS_TLS_CA]",
    )
    parser.add_argument(
        "--topics-tls-cert",
        metavar="PEM",
        default=_env("STEPSTREAM_TOPICS_TLS_CERT"),
        help="a client certificate for a broker that verifies them (with --topics-tls-key) [env STEPSTREAM_TOPICS_TLS_CERT]",
    )
    parser.add_argument(
        "--topics-tls-key",
        metavar="PEM",
        default=_env("STEPSTREAM_TOPICS_TLS_KEY"),
        help="its key [env STEPSTREAM_TOPICS_TLS_KEY]",
    )
    parser.add_argument(
        "--topics-tls-server-name",
        metavar="NAME",
        default=_env("STEPSTREAM_TOPICS_TLS_SERVER_NAME"),
        help="check the broker's certificate against NAME instead of the URL's host [env STEPSTREAM_TOPICS_TLS_SERVER_NAME]",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--topics-token",
        default=_env("STEPSTREAM_TOPICS_TOKEN"),
        help="the --topics broker's authorization token (visible in ps: prefer the environment or --topics-token-file) "
        "[env STEPSTREAM_TOPICS_TOKEN]",
    )
    group.add_argument(
        "--topics-token-file",
        metavar="PATH",
        default=_env("STEPSTREAM_TOPICS_TOKEN_FILE"),
        help="read the broker's token from this file, e.g. a Docker secret [env STEPSTREAM_TOPICS_TOKEN_FILE]",
    )


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
