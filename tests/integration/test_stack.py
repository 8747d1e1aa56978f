"""The stack topology as local processes: the service commands of ``docker-compose.yml``, on loopback.

``stepstream processor``, ``stepstream trainer`` and two ``stepstream env`` run as separate processes
on ``configs/simple_ppo.yaml`` (PPO on the 1-D goal task), exactly as their containers would, with
only the addresses and the results folder changed. One run goes through three phases:

1. **learn**: the processor comes up healthy (``stepstream health``, the compose healthcheck), the
   trainer waits for an env client to declare the behavior, and the mean return of the last
   ``WINDOW`` episodes in ``results/<run-id>/Simple1D/episodes.csv`` passes ``THRESHOLD``; meanwhile
   an env client for a behavior the processor's config lacks is refused and exits 2 (no retrying);
2. **processor restart**: the processor is stopped (SIGTERM) and started again on the same port; the
   env clients reconnect with backoff and the trainer resumes from its checkpoint, so new episodes
   arrive, acted by policy versions above any from before the restart, and still pass the threshold;
3. **clean stop**: SIGTERM to the env clients, the trainer, the processor; each exits 0, and the
   trainer has checkpointed and written ``run_logs/training_status.json``.

Every process is terminated (then killed) at teardown, also on failure, and the tail of each log is
written to this test's log output when it fails. Liveness bounds are generous; no speed is asserted.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.ports import PortReservation

pytestmark = pytest.mark.learning

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "simple_ppo.yaml"
BEHAVIOR = "Simple1D"
RUN_ID = "stack"
THRESHOLD = 0.9
"""Mean return of the last WINDOW episodes (best 1.02; walking the wrong way returns -1.10)."""
WINDOW = 20
LIVENESS_TIMEOUT_S = 180.0
"""Bound on each phase: processes up and learning, or recovered after the restart."""
STOP_TIMEOUT_S = 20.0
"""Bound on a process exiting after SIGTERM (the trainer checkpoints first)."""
POLL_S = 0.2
LOG_TAIL_LINES = 40


def _stepstream() -> list[str]:
    """The ``stepstream`` console script of the Python running the tests (``.venv/bin/stepstream``)."""
    script = Path(sys.executable).with_name("stepstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]


class Stack:
    """Service processes started from the repository root, each logging to its own file; stopped at exit."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.oneshots: set[str] = set()
        """Services expected to exit on their own (``check_running`` ignores them)."""
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}

    def start(self, name: str, *args: str, oneshot: bool = False) -> subprocess.Popen[bytes]:
        """Run ``stepstream *args`` as service ``name`` (a name already used is replaced once it has exited)."""
        assert name not in self.processes or self.processes[name].poll() is not None, f"{name} is running"
        with open(self.log_dir / f"{name}.log", "ab") as log_file:
            process = subprocess.Popen(
                [*_stepstream(), *args], cwd=REPO, env=self._env, stdout=log_file, stderr=subprocess.STDOUT
            )
        self.processes[name] = process
        if oneshot:
            self.oneshots.add(name)
        return process

    def check_running(self) -> None:
        """Fail if any service has exited."""
        exited = {
            name: p.returncode for name, p in self.processes.items() if name not in self.oneshots and p.poll() is not None
        }
        assert not exited, f"services exited unexpectedly (exit codes): {exited}"

    def stop(self, name: str) -> int:
        """SIGTERM service ``name``; its exit code (it must exit within ``STOP_TIMEOUT_S``)."""
        process = self.processes[name]
        process.send_signal(signal.SIGTERM)
        return process.wait(STOP_TIMEOUT_S)

    def wait_until(self, condition: Callable[[], bool], what: str, timeout_s: float = LIVENESS_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.check_running()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def log_tails(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
            parts.append(f"---- {path.name} (last {len(lines)} lines) ----\n" + "\n".join(lines))
        return "\n".join(parts)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        # Clients first, then the processor (as `docker compose stop` orders them by depends_on): a trainer
        # whose processor vanished mid-publish would wait for it to come back.
        clients = {name: p for name, p in self.processes.items() if name != "processor"}
        for group in (clients, {name: p for name, p in self.processes.items() if name == "processor"}):
            for process in group.values():
                if process.poll() is None:
                    process.terminate()
            for name, process in group.items():
                try:
                    process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    logger.error("%s did not exit within %.0f s of SIGTERM; killing it", name, STOP_TIMEOUT_S)
                    process.kill()
                    process.wait()
        if exc_type is not None:
            logger.error("service logs:\n%s", self.log_tails())


def serving(address: str) -> bool:
    """Whether the gRPC health service at ``address`` answers SERVING."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def read_episodes(path: Path) -> list[tuple[int, float, int]]:
    """``(agent_steps, episode_reward, policy_version)`` of every complete row of ``episodes.csv`` (none yet: [])."""
    if not path.exists():
        return []
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            try:
                rows.append((int(row["agent_steps"]), float(row["episode_reward"]), int(row["policy_version"])))
            except (TypeError, ValueError):  # the last row, half written
                break
    return rows


def reached(rows: list[tuple[int, float, int]]) -> bool:
    return len(rows) >= WINDOW and sum(reward for _, reward, _ in rows[-WINDOW:]) / WINDOW > THRESHOLD


def test_stack_learns_survives_a_processor_restart_and_stops_cleanly(tmp_path: Path, ports: PortReservation) -> None:
    results = tmp_path / "results"
    episodes_csv = results / RUN_ID / BEHAVIOR / "episodes.csv"
    port = ports.port()  # held through the restart: no other test's server takes it meanwhile
    address = f"127.0.0.1:{port}"
    processor_args = ("processor", str(CONFIG), "--port", str(port), "--grace-s", "1")
    started = time.monotonic()
    with Stack(tmp_path) as stack:
        # 1. learn
        stack.start("processor", *processor_args)
        stack.wait_until(lambda: serving(address), "processor SERVING")
        health = subprocess.run([*_stepstream(), "health", address], capture_output=True, timeout=STOP_TIMEOUT_S)
        assert health.returncode == 0, health.stderr.decode()
        stack.start(
            *("trainer", "trainer", str(CONFIG), "--behavior", BEHAVIOR, "--processor", address),
            *("--results-dir", str(results), "--run-id", RUN_ID, "--seed", "0"),
        )
        # A client whose behavior the processor's config lacks is refused (NOT_FOUND): it exits, not retries.
        stack.start("refused", "env", str(REPO / "configs" / "cartpole_ppo.yaml"), "--processor", address, oneshot=True)
        for i in range(2):
            stack.start(f"env{i}", "env", str(CONFIG), "--processor", address, "--client-id", f"env-{i}", "--seed", "0")
        stack.wait_until(lambda: reached(read_episodes(episodes_csv)), f"mean of the last {WINDOW} episodes > {THRESHOLD}")
        rows = read_episodes(episodes_csv)
        assert stack.processes["refused"].wait(STOP_TIMEOUT_S) == 2, "a non-retryable status must end the env client"
        learned_s = time.monotonic() - started
        logger.info("threshold after %d agent steps, %d episodes, %.1f s", rows[-1][0], len(rows), learned_s)

        # 2. processor restart
        assert stack.stop("processor") == 0
        before = read_episodes(episodes_csv)
        version_before = max(version for _, _, version in before)
        stack.start("processor", *processor_args)

        def recovered() -> bool:
            after = read_episodes(episodes_csv)[len(before) :]
            fresh = [row for row in after if row[2] > version_before]
            return len(after) >= 2 * WINDOW and len(fresh) >= WINDOW and reached(fresh)

        stack.wait_until(recovered, "new episodes, acted by versions above the old processor's, past the threshold")
        logger.info("recovered from the processor restart in %.1f s", time.monotonic() - started - learned_s)

        # 3. clean stop
        for name in ("env0", "env1", "trainer", "processor"):
            assert stack.stop(name) == 0, f"{name} did not exit cleanly:\n{stack.log_tails()}"
        # A clean stop logs no traceback (issue 14: CancelledError at stop), and LiteRT's XNNPACK notice, which
        # the processor's first policy writes to native stderr, is dropped as noise (cli.console.NATIVE_NOISE).
        processor_log = (tmp_path / "processor.log").read_text(encoding="utf-8", errors="replace")
        for unwanted in ("Traceback", "CancelledError", "XNNPACK"):
            assert unwanted not in processor_log, f"processor log has {unwanted!r}:\n{stack.log_tails()}"
    status = json.loads((results / RUN_ID / "run_logs" / "training_status.json").read_text(encoding="utf-8"))[BEHAVIOR]
    assert status["steps"] >= rows[-1][0] and status["checkpoints"], status
    assert status["policy_version"] > version_before
    assert (results / RUN_ID / "configuration.yaml").exists()
    logger.info("stack test: %.1f s in all", time.monotonic() - started)
