"""What keeps the suite right under ``pytest -n N --dist loadgroup`` (pytest-xdist): ports held, never bound and
released (``tests.ports``), the learning runs in one group, every other file in its own (``tests/conftest.py``)."""

from __future__ import annotations

import errno
import logging
import re
import socket
from pathlib import Path

import pytest

from common.metrics import MetricsServer, new_registry
from tests.conftest import LEARNING_GROUP, SERIAL_FILES, group_for_workers
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
    """What of ``pytest.Item`` the grouping uses."""

    def __init__(self, nodeid: str, *markers: str) -> None:
        self.nodeid = nodeid
        self.markers = [getattr(pytest.mark, name) for name in markers]

    def get_closest_marker(self, name: str) -> pytest.MarkDecorator | None:
        return next((m for m in self.markers if m.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker)

    def group(self) -> str:
        marker = self.get_closest_marker("xdist_group")
        assert marker is not None, self.nodeid
        return str(marker.args[0])


def test_learning_tests_share_one_group_and_every_other_test_has_its_files() -> None:
    items = [
        _Item("tests/learning/test_a.py::test_x", "learning"),
        _Item("tests/integration/test_b.py::test_y", "learning"),
        _Item("tests/unit/test_c.py::test_z[1]", "timeout"),
        _Item("tests/unit/test_c.py::test_z[2]"),
        *(_Item(f"{path}::test_w") for path in sorted(SERIAL_FILES)),
    ]
    group_for_workers(items)  # type: ignore[arg-type]
    file_c = "tests/unit/test_c.py"
    want = [LEARNING_GROUP, LEARNING_GROUP, file_c, file_c, *(LEARNING_GROUP for _ in SERIAL_FILES)]
    assert [item.group() for item in items] == want
    assert all((TESTS.parent / path).is_file() for path in SERIAL_FILES), "a renamed file would run beside others"


def test_this_sessions_tests_carry_the_groups(request: pytest.FixtureRequest) -> None:
    """The hook ran on this collection too."""
    for item in request.session.items:
        path = item.nodeid.split("::")[0]
        serial = path in SERIAL_FILES or item.get_closest_marker("learning") is not None
        want = LEARNING_GROUP if serial else path
        assert _Item.group(item) == want, item.nodeid  # type: ignore[arg-type]
