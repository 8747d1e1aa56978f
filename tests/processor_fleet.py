"""Several ``stepstream processor`` processes on one NATS broker, env clients across them, and a counting trainer.

Shared by ``tests/integration/test_processor_fleet.py`` and ``benchmarks/broker_faults.py``:

* ``Fleet``: a real ``nats-server`` (``tests.nats_server``) and N real ``stepstream processor
  --topics nats://... --processor-id pI`` processes on loopback, each with a metrics endpoint;
  ``kill(i)`` SIGKILLs one. ``target`` is the one gRPC target naming them all.
* ``FleetClients``: ``ReconnectingEnvClient``\\ s on the 1-D task (``envclient.simple_env``) in this
  process, all dialling ``target`` (gRPC's ``round_robin``), so a client whose processor dies
  moves to another. Each client's ``session_records`` say what every session sent.
* ``CountingTrainer``: the trainer's side of the topics without the learner: a durable
  subscription of ``TRAINER_SUBSCRIBER`` that records each trajectory it takes in (id, length,
  policy versions) *before* it acks it, and the ids it saw twice. Run in a thread, or as a process
  (``python -m tests.processor_fleet trainer URL BEHAVIOR LEDGER``) that a fault can SIGKILL: its
  ledger file is then what it had taken in, line by line.

The conservation rule (issue 16): the experiences the clients' rows imply equal, exactly, those
taken in (ids acked, no id twice, over all trainer lifetimes) + those dropped and counted (the
processors' ``experiences_dropped``) + those in partials lost with a SIGKILLed processor, counted
from the clients' side as what its sessions sent less what of them was taken in or dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a module or from benchmarks/: tests.* and the packages from this tree
    sys.path.insert(0, str(REPO))

from common.topics import TRAINER_SUBSCRIBER  # noqa: E402
from common.topics.jetstream import JetStreamTopics  # noqa: E402
from common.trajectory import Trajectory  # noqa: E402
from envclient.reconnect import Backoff, ReconnectingEnvClient  # noqa: E402
from envclient.session import EnvSession  # noqa: E402
from envclient.simple_env import SimpleEnv  # noqa: E402
from processor.behaviors import IN_DOUBT_LOG  # noqa: E402
from tests.nats_server import NatsServer  # noqa: E402
from tests.ports import PortReservation  # noqa: E402
from tests.scrape import scrape  # noqa: E402

logger = logging.getLogger(__name__)

BEHAVIOR = "Simple1D"
READY_TIMEOUT_S = 120.0
"""A processor process imports TensorFlow's runtime: on a loaded 2-core machine that takes a while."""
STOP_TIMEOUT_S = 20.0


def fleet_config(path: Path, max_policy_lag: int, time_horizon: int = 16) -> Path:
    """A trainer YAML for the fleet's processors: PPO on ``BEHAVIOR`` with the given lag; its queue (one update
    buffer of trajectories, ``common.config_schema``) holds 64 of them."""
    path.write_text(
        f"""behaviors:
  {BEHAVIOR}:
    trainer_type: ppo
    hyperparameters:
      batch_size: 64
      buffer_size: {64 * time_horizon}
    max_policy_lag: {max_policy_lag}
    time_horizon: {time_horizon}
    max_steps: 1000000
env_settings:
  env_path: simple:discrete
  num_envs: 4
  seed: 0
"""
    )
    return path


IN_DOUBT_LINE = re.compile(re.escape(IN_DOUBT_LOG) + r" (\S+) \((\d+) experiences\)")


def _stepstream() -> list[str]:
    script = Path(sys.executable).with_name("stepstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]


def _serving(port: int) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


class Fleet:
    """A broker and ``count`` processor processes (``pI`` on ``ports[I]``), logs under ``root``; stopped at exit."""

    def __init__(self, root: Path, config: Path, count: int, extra_args: Iterable[str] = ()) -> None:
        self.root = root
        self.config = config
        self.broker = NatsServer(root / "nats")
        self._reservation = PortReservation()  # held until stop: a processor restarts on its port
        self.ports = [self._reservation.port() for _ in range(count)]
        self.metrics_ports = [self._reservation.port() for _ in range(count)]
        self.ids = [f"p{i}" for i in range(count)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self.extra_args = list(extra_args)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.last_dropped: dict[int, float] = {}
        """Per processor, its ``experiences_dropped`` at its last scrape (a killed one's stay here)."""
        self.last_dropped_by_reason: dict[int, dict[str, float]] = {}
        """The same per ``reason`` label (stale, unpublished, undeliverable)."""

    @property
    def target(self) -> str:
        """Every processor as one gRPC target (``envclient.reconnect.processor_target``'s list form)."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self) -> Fleet:
        self.broker.start()
        for i in range(len(self.ports)):
            self.start_processor(i)
        for i in range(len(self.ports)):
            self.wait_serving(i)
        return self

    def start_processor(self, i: int) -> None:
        command = [
            *_stepstream(),
            *("processor", str(self.config), "--port", str(self.ports[i]), "--grace-s", "2"),
            *("--topics", self.broker.url, "--processor-id", self.ids[i]),
            *("--metrics-port", str(self.metrics_ports[i]), *self.extra_args),
        ]
        with open(self.root / f"processor{i}.log", "ab") as log_file:
            self.processes[i] = subprocess.Popen(command, cwd=REPO, env=self.env, stdout=log_file, stderr=subprocess.STDOUT)

    def wait_serving(self, i: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not _serving(self.ports[i]):
            process = self.processes[i]
            if process is None or process.poll() is not None:
                raise RuntimeError(f"processor {i} exited:\n{self.log_tail(i)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"processor {i} not SERVING within {timeout_s:.0f} s:\n{self.log_tail(i)}")
            time.sleep(0.2)

    def kill(self, i: int) -> None:
        """SIGKILL processor ``i`` (a crash: its sessions' partial trajectories die with it)."""
        process = self.processes[i]
        assert process is not None and process.poll() is None, f"processor {i} is not running"
        self.dropped_experiences(i)  # its last scrape: what it dropped and counted before the kill
        process.send_signal(signal.SIGKILL)
        process.wait(STOP_TIMEOUT_S)
        self.processes[i] = None

    def pause(self, i: int) -> None:
        """SIGSTOP processor ``i``: it accepts TCP connections but answers nothing, so a new channel's
        ``round_robin`` finds only the others ready (how a test places a client on a chosen processor)."""
        process = self.processes[i]
        assert process is not None
        process.send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        process = self.processes[i]
        assert process is not None
        process.send_signal(signal.SIGCONT)

    def dropped_experiences(self, i: int) -> float:
        """Processor ``i``'s ``stepstream_processor_experiences_dropped_total`` (every reason), scraped now if it runs."""
        if self.processes[i] is not None:
            samples = scrape(f"http://127.0.0.1:{self.metrics_ports[i]}/metrics")
            by_reason: dict[str, float] = defaultdict(float)
            for (name, labels), value in samples.items():
                if name == "stepstream_processor_experiences_dropped_total":
                    by_reason[dict(labels).get("reason", "")] += value
            self.last_dropped_by_reason[i] = dict(by_reason)
            self.last_dropped[i] = sum(by_reason.values())
        return self.last_dropped.get(i, 0.0)

    def in_doubt(self, i: int) -> dict[str, int]:
        """Processor ``i``'s trajectories counted in doubt (``processor.behaviors.IN_DOUBT_LOG``), id -> experiences,
        read from its log: whether each was stored is for a ledger of what the trainer took in to tell."""
        path = self.root / f"processor{i}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return {m.group(1): int(m.group(2)) for m in IN_DOUBT_LINE.finditer(text)}

    def log_tail(self, i: int, lines: int = 30) -> str:
        path = self.root / f"processor{i}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.terminate()
        for i, process in enumerate(self.processes):
            if process is not None:
                try:
                    process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                self.processes[i] = None
        self.broker.stop()
        self._reservation.close()

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(self, *unused_exc: object) -> None:
        self.stop()


PLACEABLE_CHANNEL_OPTIONS = (
    # A connection of its own, as a client in its own process has: gRPC otherwise shares one per processor among
    # the channels of a process, and a pause or a kill hits them all at once.
    ("grpc.use_local_subchannel_pool", 1),
    # gRPC's client-side health checking: a connection counts as ready for round_robin only once the processor's
    # health Watch says SERVING. A SIGSTOPped processor still completes the TCP handshake, and without this a
    # client placed while it is paused could send its Hello there (2 of 48 runs did, 2026-12-07) and wait out the
    # keepalive (15 s), by when the clients on the paused processor had moved away too. Failover is unchanged:
    # a SIGKILL closes the connection either way.
    ("grpc.service_config", json.dumps({"healthCheckConfig": {"serviceName": ""}})),
)
"""Channel options of ``FleetClients``: what ``place`` needs on top of the env client's own."""


class FleetClients:
    """``count`` env clients of ``agents`` agents each on ``target``, stepping in this process's event loop."""

    def __init__(self, target: str, count: int, agents: int = 4) -> None:
        self.stop = asyncio.Event()
        self.clients = [
            ReconnectingEnvClient(
                target,
                f"env-{i}",
                BEHAVIOR,
                SimpleEnv(agents, continuous=False, seed=i),
                self.stop,
                backoff=Backoff(initial_s=0.2, max_s=1.0),
                channel_options=PLACEABLE_CHANNEL_OPTIONS,
            )
            for i in range(count)
        ]
        self.tasks: list[asyncio.Task[int]] = []

    def start(self, indices: Iterable[int] | None = None) -> None:
        """Run the clients of ``indices`` (default: all)."""
        chosen = range(len(self.clients)) if indices is None else indices
        self.tasks.extend(asyncio.ensure_future(self.clients[i].run()) for i in chosen)

    async def place(self, fleet: Fleet, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the clients spread evenly, client ``i`` on processor ``i % N``: the others are paused while its
        session opens (one fresh channel's ``round_robin`` picks the first processor ready, so unpaused
        clients that start together all land on one; a paused one never turns ready: ``PLACEABLE_CHANNEL_OPTIONS``)."""
        count = len(fleet.ports)
        for p in range(count):
            # A first Hello declares the behavior (its inference too): slow. Done first on this processor alone,
            # so the others stay paused only for a warm Hello, far below the clients' keepalive timeout.
            warmup = EnvSession(f"127.0.0.1:{fleet.ports[p]}", f"warmup-{p}", [self.clients[0].env.brain_parameters])
            await warmup.open()
            await warmup.close()
            others = [q for q in range(count) if q != p]
            for q in others:
                fleet.pause(q)
            try:
                mine = [i for i in range(len(self.clients)) if i % count == p]
                self.start(mine)
                deadline = time.monotonic() + timeout_s
                while any(not self.clients[i].session_records for i in mine):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"clients {mine} opened no session on processor {p} within {timeout_s:.0f} s")
                    await asyncio.sleep(0.05)
            finally:
                for q in others:
                    fleet.resume(q)

    async def finish(self, timeout_s: float = 60.0) -> None:
        """Stop every client after its step in flight; each closes its session, which flushes its partials."""
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), timeout_s)

    def current_processors(self) -> list[str]:
        """The processor id of each client's newest session ('' before its first)."""
        return [c.session_records[-1].session_id.split(":", 1)[0] if c.session_records else "" for c in self.clients]

    def newest_versions(self) -> list[int]:
        """The policy version each client's newest session last acted with (-1 before any)."""
        out = []
        for client in self.clients:
            versions = client.session_records[-1].stats.policy_versions if client.session_records else []
            out.append(versions[-1] if versions else -1)
        return out

    def sent_by_session(self) -> dict[str, int]:
        """Session id -> the experiences its rows imply (answered or not)."""
        return {r.session_id: r.stats.sent_experiences for c in self.clients for r in c.session_records}


@dataclass
class Ledger:
    """What trainer lifetimes took in: each trajectory once per take (a second take of an id is a duplicate)."""

    experiences_by_session: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ids: Counter[str] = field(default_factory=Counter)
    version_spans: list[int] = field(default_factory=list)
    """Per trajectory taken in: its newest less its oldest policy version."""
    lost_trainer_kill: int = 0
    """Experiences a SIGKILLed lifetime had acked but not yet "trained" on (part of what was taken in)."""

    def take(self, trajectory_id: str, session_id: str, length: int, span: int) -> None:
        self.ids[trajectory_id] += 1
        if self.ids[trajectory_id] == 1:
            self.experiences_by_session[session_id] += length
            self.version_spans.append(span)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.ids.values())

    @property
    def experiences(self) -> int:
        return sum(self.experiences_by_session.values())

    @classmethod
    def of_lifetimes(cls, lifetimes: Iterable[tuple[Path, bool]]) -> Ledger:
        """The ledger of ``CountingTrainer`` processes' files, in order, each with whether it was SIGKILLed.

        A lifetime's last batch may lack its ``acked`` line (killed between the ack and that line): it counts
        as taken in by that lifetime exactly when no later lifetime was delivered it again (the broker
        had the ack), so the broker, not a guess, decides.
        """
        ledger = cls()
        unsure: list[tuple[dict[str, object], bool]] = []
        for path, killed in lifetimes:
            pending: list[dict[str, object]] = []
            untrained = 0
            for line in path.read_text().splitlines() if path.exists() else []:
                if not line.endswith("}"):
                    continue  # torn by the kill
                row = json.loads(line)
                if "id" in row:
                    pending.append(row)
                elif "acked" in row:
                    for taken in pending:
                        ledger.take(str(taken["id"]), str(taken["session"]), int(taken["length"]), int(taken["span"]))  # type: ignore[call-overload]
                        untrained += int(taken["length"])  # type: ignore[call-overload]
                    pending = []
                elif "trained" in row:
                    untrained = 0
            if killed:
                ledger.lost_trainer_kill += untrained
            unsure.extend((row, killed) for row in pending)
        for row, killed in unsure:
            if str(row["id"]) not in ledger.ids:
                ledger.take(str(row["id"]), str(row["session"]), int(row["length"]), int(row["span"]))  # type: ignore[call-overload]
                ledger.lost_trainer_kill += int(row["length"]) if killed else 0  # type: ignore[call-overload]
        return ledger


def _span(trajectory: Trajectory) -> int:
    versions = trajectory.policy_versions
    return int(versions.max() - versions.min()) if len(versions) else 0


class CountingTrainer:
    """The trainer's subscription with a counter in place of the learner (module docstring).

    It acks a trajectory only after recording it (in ``ledger``, and as a flushed line of
    ``ledger_file`` when given, then an ``acked`` line once the acks are sent), as the trainer acks
    only once a trajectory is in its buffer. Every ``buffer_experiences`` experiences it writes a
    ``trained`` line, as a learner empties its buffer into an update: what a SIGKILL finds acked since
    the last one is what a killed trainer loses. Like the trainer (its Deduplicator) it drops a
    redelivery of an id this lifetime took in; one that a later lifetime takes in again is what
    ``Ledger.duplicates`` counts.
    """

    def __init__(
        self, url: str, behavior: str = BEHAVIOR, ledger_file: TextIO | None = None, buffer_experiences: int = 1024
    ) -> None:
        self.buffer_experiences = buffer_experiences
        self._buffered = 0
        self._seen: set[str] = set()
        """Ids this lifetime took in (the trainer's Deduplicator; a new lifetime starts empty)."""
        self.redelivered_dropped = 0
        self.topics = JetStreamTopics(url, name="counting-trainer", follow_policies=False)
        self.subscription = self.topics.trajectories(behavior).subscribe(TRAINER_SUBSCRIBER)
        self.policies = self.topics.policies(behavior)
        self.ledger = Ledger()
        self.ledger_file = ledger_file
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self, stop: threading.Event | Callable[[], bool] | None = None) -> None:
        """Take, record, ack until stopped."""
        stopped = self._stop.is_set if stop is None else stop.is_set if isinstance(stop, threading.Event) else stop
        while not stopped():
            deliveries = self.subscription.get(64, timeout_s=0.5)
            for delivery in deliveries:
                item = delivery.item
                if str(item.id) in self._seen:  # redelivered after a lost ack: dropped, as TrainerLoop's Deduplicator does
                    self.redelivered_dropped += 1
                    continue
                self._seen.add(str(item.id))
                self.ledger.take(str(item.id), item.id.session_id, item.length, _span(item))
                if self.ledger_file is not None:
                    row = {"id": str(item.id), "session": item.id.session_id, "length": item.length, "span": _span(item)}
                    self.ledger_file.write(json.dumps(row) + "\n")
            if self.ledger_file is not None and deliveries:
                self.ledger_file.flush()  # in the kernel before the ack: a SIGKILL after it keeps the line
            self.subscription.ack(d.tag for d in deliveries)
            if self.ledger_file is not None and deliveries:
                self._buffered += sum(d.item.length for d in deliveries)
                self.ledger_file.write(json.dumps({"acked": len(deliveries)}) + "\n")
                if self._buffered >= self.buffer_experiences:
                    self.ledger_file.write(json.dumps({"trained": self._buffered}) + "\n")
                    self._buffered = 0
                self.ledger_file.flush()

    def start(self) -> CountingTrainer:
        self._thread = threading.Thread(target=self.run, name="counting-trainer", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.subscription.detach()
        self.topics.close()


def main(argv: list[str]) -> int:
    """``trainer URL BEHAVIOR LEDGER``: a ``CountingTrainer`` process appending to LEDGER until SIGTERM."""
    if len(argv) != 4 or argv[0] != "trainer":
        logger.error("usage: python -m tests.processor_fleet trainer URL BEHAVIOR LEDGER")
        return 2
    _, url, behavior, ledger_path = argv
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(ledger_path, "a") as ledger_file:
        trainer = CountingTrainer(url, behavior, ledger_file)
        try:
            trainer.run(stop)
        finally:
            trainer.subscription.detach()
            trainer.topics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
