"""What keeps the suite right under ``pytest -n N --dist loadgroup`` (pytest-xdist): ports held, never bound and
released (``tests.ports``), the learning runs in one worker's group (``tests/conftest.py``)."""

from __future__ import annotations

import errno
import logging
import re
import socket
from pathlib import Path

import pytest

from common.metrics import MetricsServer, new_registry
from tests.conftest import LEARNING_GROUP, group_learning_tests
from tests.ports import HOST, PortReservation, logged_metrics_port

TESTS = Path(__file__).resolve().parents[1]
HOLDS_A_BUSY_PORT = {"tests/integration/test_cli_errors.py"}
"""Files that bind a socket of their own on purpose (a port another process must find in use), not to find one."""


def test_a_reserved_port_is_held_from_other_binds_until_released() -> None:
    with PortReservation() as reservation:
        port = reservation.port()
        with socket.socket() as other, pytest.raises(OSError) as busy:
            other.bind((HOST, port))  # what a bind-then-release search (or another worker) would try
        assert busy.value.errno == errno.EADDRINUSE
    with socket.socket() as after:
        after.bind((HOST, port))  # released


def test_the_server_a_test_starts_listens_on_its_reserved_port() -> None:
    """The servers bind with SO_REUSEADDR (gRPC, nats-server, the Prometheus endpoint): beside the reservation."""
    with PortReservation() as reservation:
        port = reservation.port()
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((HOST, port))
            server.listen()
            with socket.create_connection((HOST, port), timeout=5.0):
                accepted, _ = server.accept()
                accepted.close()


def test_the_metrics_line_pattern_reads_the_port_the_endpoint_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = MetricsServer(new_registry(), HOST, 0)
    with caplog.at_level(logging.INFO, logger="common.metrics"):
        port = server.start()
    server.stop()
    log = tmp_path / "process.log"
    log.write_text("\n".join(record.getMessage() for record in caplog.records) + "\n", encoding="utf-8")
    assert logged_metrics_port(log) == port


def test_no_test_finds_a_port_by_binding_and_releasing_it() -> None:
    """A port probed free and closed can be taken by another worker before the test's server binds it (the
    benchmarks count: tests/integration/test_benchmarks.py runs them)."""
    files = [*TESTS.rglob("*.py"), *(TESTS.parent / "benchmarks").rglob("*.py")]
    offenders = [
        str(path.relative_to(TESTS.parent))
        for path in files
        if path.name != "ports.py"
        and path != Path(__file__).resolve()
        and str(path.relative_to(TESTS.parent)) not in HOLDS_A_BUSY_PORT
        and re.search(r"getsockname\(\)", path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"use tests.ports.PortReservation (the ports fixture) instead: {offenders}"


class _Item:
    """The two methods of ``pytest.Item`` that the grouping uses."""

    def __init__(self, *markers: str) -> None:
        self.markers = [getattr(pytest.mark, name) for name in markers]

    def get_closest_marker(self, name: str) -> pytest.MarkDecorator | None:
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker)


def test_learning_tests_and_only_they_share_one_xdist_group() -> None:
    learning, other = _Item("learning"), _Item("timeout")
    group_learning_tests([learning, other])  # type: ignore[list-item]
    group = learning.get_closest_marker("xdist_group")
    assert group is not None and group.args == (LEARNING_GROUP,)
    assert other.get_closest_marker("xdist_group") is None


def test_this_suites_learning_tests_are_collected_into_the_group(request: pytest.FixtureRequest) -> None:
    """The hook runs on this collection too: a learning test of this session carries the group."""
    items = [item for item in request.session.items if item.get_closest_marker("learning") is not None]
    for item in items:
        group = item.get_closest_marker("xdist_group")
        assert group is not None and group.args == (LEARNING_GROUP,), item.nodeid
