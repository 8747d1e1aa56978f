"""Loopback ports for the servers a test starts: held while the test runs, never bound and then released.

A port found by binding port 0 and closing the socket is free only until someone else binds it; under
``pytest -n N`` that someone is another worker, and the server the test starts then fails to bind (or,
worse, the test talks to another test's server). A ``PortReservation`` keeps its socket bound (with
``SO_REUSEADDR``, never listening) until it is closed: the kernel hands the port to nobody else's port-0
bind, while the server the test starts can still bind and listen on it (gRPC, nats-server, the Prometheus
endpoint all set ``SO_REUSEADDR``; the CLI's ``cli.ports.check_port_free`` probe
does too). So a restart "on the same port" is race-free as well: the port stays held between the two runs.
Where a server can bind port 0 itself and the test reads the port back (``ProcessorServer.start``,
``GatewayServer``), that is simpler still; this is for servers that are processes, or that must be
known before they start (an env client started before its processor).
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from types import TracebackType

HOST = "127.0.0.1"
METRICS_LINE = re.compile(r"metrics on http://\S+:(\d+)/metrics")
"""What ``common.metrics.MetricsServer.start`` logs, with the port it bound (``--metrics-port 0``)."""


class PortReservation:
    """Loopback ports held until ``close()`` (or the end of a ``with`` block)."""

    def __init__(self) -> None:
        self._held: list[socket.socket] = []

    def port(self) -> int:
        """A new port on ``HOST``, held by this reservation."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # lets the real server bind it beside us
        sock.bind((HOST, 0))
        self._held.append(sock)
        return int(sock.getsockname()[1])

    def close(self) -> None:
        """Release every port. Idempotent."""
        held, self._held = self._held, []
        for sock in held:
            sock.close()

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def logged_metrics_port(log: Path) -> int:
    """The port of the first metrics endpoint that the process logging to ``log`` started.

    Raises:
        AssertionError: ``log`` names none (the endpoint is not up yet, or the line changed).
    """
    found = METRICS_LINE.search(log.read_text(encoding="utf-8", errors="replace"))
    assert found is not None, f"no metrics endpoint logged in {log}"
    return int(found.group(1))
