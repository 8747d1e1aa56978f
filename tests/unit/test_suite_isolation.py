"""What keeps the suite right under ``pytest -n N --dist loadgroup`` (pytest-xdist): ports held, never bound and
released (``tests.ports``), the learning runs in one worker, every other file in one (``tests/conftest.py``)."""

from __future__ import annotations

import errno
import logging
import re
import socket
from pathlib import Path

import pytest

from common.metrics import MetricsServer, new_registry
from tests.conftest import LEARNING_FILES, LEARNING_GROUP, worker_group
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


def test_learning_runs_share_one_group_and_every_other_file_has_its_own() -> None:
    assert worker_group("tests/learning/test_a.py::test_x[1]") == LEARNING_GROUP
    for path in LEARNING_FILES:
        assert worker_group(f"{path}::test_y") == LEARNING_GROUP
        assert (TESTS.parent / path).is_file(), f"{path} is gone: its tests would run beside others"
    assert (
        worker_group("tests/unit/test_c.py::test_z[1]")
        == worker_group("tests/unit/test_c.py::test_w")
        == ("tests/unit/test_c.py")
    )


def test_every_learning_test_of_this_session_is_in_the_learning_group(request: pytest.FixtureRequest) -> None:
    """The group goes by path (the scheduler sees node ids, not marks): a ``learning`` test elsewhere must be listed."""
    for item in request.session.items:
        if item.get_closest_marker("learning") is not None:
            assert worker_group(item.nodeid) == LEARNING_GROUP, f"add {item.nodeid.split('::')[0]} to LEARNING_FILES"
