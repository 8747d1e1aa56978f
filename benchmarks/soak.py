"""Soak: many env clients for a fixed time against a real ``stepstream processor`` process, on loopback only.

``--clients`` sessions (default 32) of ``--agents`` agents each (default 16) step for ``--seconds`` (default 60),
spread over ``--client-processes`` processes (default 2), each one asyncio loop speaking the real SDK
(``EnvSession``), as env clients do. The processor is ``stepstream processor`` in a process of its own, with its
metrics endpoint; it acts with a real TensorFlow-produced 2x64 MLP (TFLite artifact, as ``grpc_g1.py``), and a new
policy version is published every ``--policy-every-s`` seconds (PPO's ``max_policy_lag`` 2 applies). A subscriber
on the ``trainer`` queue counts the trajectories it receives (by unique id) and acknowledges them.

Observations are W1's (32 float32), 4 continuous actions, time_horizon 64. Each agent's episode lasts uniform
[50, 300] steps; one in five ends by a time limit (done + max_reached); the same id comes back as a new episode.
At the end every client closes its session, so the processor flushes the partial trajectories.

Conservation is counted by the clients themselves from the rows they sent (docs/architecture.md's rules): an agent's row
is an experience unless it is a first sighting (its first row, or its first after a done row); done rows are
experiences. The processor reports where each went (``stepstream_processor_*`` metrics): published on the topic, or
dropped (``stale``: ``max_policy_lag``; ``unpublished``: the topic stayed full or closed). Flushed experiences (the
partial trajectories of ended sessions) are published or dropped like any other, so they are a part of those two,
reported beside them. ``conserved``: implied == published + dropped, to the single experience, and the subscriber
received every published experience.

Hostile minority (``--hostile N``, issue 13): N more clients, in a process of their own, send the attack classes of
``benchmarks.hostile.HOSTILE_KINDS`` at the same processor while the well-behaved ones step (each kind in a loop,
reconnecting after each refusal). Before the clients start, the processor's RSS is measured at idle and the bound
its peak must stay under is computed from the configured caps and the memory model (``rss_bound``), and printed.
``good_conserved``: the well-behaved clients' implied experiences equal what the subscriber received for their
sessions (client ids ``soak-*``) plus what the processor dropped of theirs. Its drops are not counted per session:
the good clients' share is all it dropped less at most what the hostile sessions miss (the hostile agents flood
counts the experiences it implied, the subscriber what it received of them); exact when it dropped nothing. A
stranger can displace the subscriber (issue 13, point 2, where that is not defended): it then subscribes again, as
a trainer would (``subscriber_restarts``).

Prints one JSON line last: agent_steps_per_s (= good_agent_steps_per_s: the well-behaved clients' rows), p50_ms /
p99_ms (their round trip of one BrainInfo), peak processor RSS (MB, sampled every 0.1 s from /proc), the RSS bound,
the conservation counts, and with ``--hostile`` the outcomes of every hostile kind (status code -> count).

usage: soak.py [--clients 32] [--agents 16] [--seconds 60] [--client-processes 2] [--policy-every-s 10] [--hostile 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

log = logging.getLogger("benchmarks.soak")
EPISODE_STEPS = (50, 300)
MAX_REACHED_FRACTION = 0.2
START_DELAY_S = 5.0
"""Time the client processes get to import and connect before the clock starts."""
DRAIN_TIMEOUT_S = 120.0
"""After the clients end: how long the subscriber gets to take every published trajectory (a flood's flush included)."""
SETTLE_S = 10.0
"""After the clients end, the counts are final once nothing has moved for this long."""
STALL_MARGIN_S = 120.0
"""A client process that has not reported this long after the clock stopped is stalled (issue 13, point 4)."""
RSS_POLL_S = 0.1
BASELINE_S = 1.0
"""How long the idle processor's RSS is sampled (its maximum) before the clients start."""
GOOD_PREFIX = "soak-"
"""The well-behaved clients' client ids (and so their session ids) start with it; the hostile ones' do not."""
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* as package modules

from benchmarks.soak_processor import (  # noqa: E402
    ACTION_SIZE,
    BEHAVIOR,
    OBS_SIZE,
    REPO,
    TIME_HORIZON,
    free_port,
    policy_update,
    rss_bytes,
    wait_serving,
)

CONFIG = f"""
behaviors:
  {BEHAVIOR}:
    trainer_type: ppo
    time_horizon: {TIME_HORIZON}
"""


class ClientResult(NamedTuple):
    """What one client measured: round trips (s), rows sent, experiences implied, its timed window (perf_counter)."""

    round_trips_s: list[float]
    rows: int
    implied_experiences: int
    window_start: float
    window_end: float


def _brain_parameters() -> Any:
    from common.specs import ActionSpec, BrainParameters, ObservationSpec

    return BrainParameters(BEHAVIOR, (ObservationSpec((OBS_SIZE,), np.dtype(np.float32)),), ActionSpec(ACTION_SIZE))


async def _client(address: str, index: int, agents: int, start_at: float, stop_at: float) -> ClientResult:
    """One env client session, stepping from ``start_at`` to ``stop_at`` (epoch seconds), then closing cleanly."""
    from envclient import EnvSession
    from envclient.session import brain_info_message

    rng = np.random.default_rng(index)
    ids = np.arange(agents, dtype=np.int64)
    obs = rng.standard_normal((64, agents, OBS_SIZE), dtype=np.float32)
    rewards = rng.standard_normal((64, agents)).astype(np.float32)
    left = rng.integers(*EPISODE_STEPS, endpoint=True, size=agents)
    truncates = rng.random(agents) < MAX_REACHED_FRACTION
    seen = np.zeros(agents, bool)
    timings: list[float] = []
    rows = implied = 0
    async with EnvSession(address, f"soak-{index}", [_brain_parameters()]) as session:
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        window_start = time.perf_counter()
        t = 0
        while time.time() < stop_at:
            done = left <= 0
            message = brain_info_message(BEHAVIOR, ids, [obs[t % 64]], rewards[t % 64], done, done & truncates)
            implied += int(seen.sum())  # a row of an agent seen since its last done is an experience
            seen = ~done  # after a done row the agent's next row is a first sighting
            rows += agents
            left = np.where(done, rng.integers(*EPISODE_STEPS, endpoint=True, size=agents), left - 1)
            truncates = np.where(done, rng.random(agents) < MAX_REACHED_FRACTION, truncates)
            started = time.perf_counter()
            await session.send(message)
            timings.append(time.perf_counter() - started)
            t += 1
        window_end = time.perf_counter()
    return ClientResult(timings, rows, implied, window_start, window_end)


def _client_process(address: str, first: int, count: int, agents: int, start_at: float, stop_at: float, out: Any) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    async def run_all() -> list[ClientResult]:
        return await asyncio.gather(*[_client(address, first + i, agents, start_at, stop_at) for i in range(count)])

    out.put([tuple(r) for r in asyncio.run(run_all())])


class CountingSubscriber:
    """The ``trainer`` queue's subscriber: counts unique trajectories and their experiences, and acks each batch.

    Experiences are counted apart for the well-behaved sessions (``GOOD_PREFIX``) and the rest. When its stream
    ends (a stranger displaced it, where that is possible), it subscribes again after a pause, as a trainer
    restarting would; the unacked deliveries were requeued, and the ids drop their duplicates.
    """

    RESUBSCRIBE_S = 0.5

    def __init__(self, address: str) -> None:
        self.address = address
        self.trajectories = self.experiences = self.duplicates = self.restarts = 0
        self.good_experiences = 0
        self._ids: set[tuple[str, int, int]] = set()
        self._stop = threading.Event()
        self._subscription = self._subscribe()
        self._thread = threading.Thread(target=self._run, name="soak-subscriber", daemon=True)
        self._thread.start()

    def _subscribe(self) -> Any:
        from common.topics.grpc_transport import GrpcTrajectorySubscription

        return GrpcTrajectorySubscription(self.address, BEHAVIOR, "trainer")

    def _run(self) -> None:
        from common.errors import StepstreamError
        from processor.sessions import client_id_of

        while not self._stop.is_set():
            try:
                deliveries = self._subscription.get(1024, 0.1)
            except StepstreamError as err:
                log.warning("the subscriber's stream ended (%s): subscribing again", str(err)[:200])
                self.restarts += 1
                self._subscription.detach()
                self._stop.wait(self.RESUBSCRIBE_S)
                self._subscription = self._subscribe()
                continue
            for delivery in deliveries:
                key = (delivery.item.id.session_id, delivery.item.id.agent_id, delivery.item.id.sequence)
                if key in self._ids:
                    self.duplicates += 1
                    continue
                self._ids.add(key)
                self.trajectories += 1
                self.experiences += delivery.item.length
                # The session's client id says whose experiences these are.
                if client_id_of(key[0]).startswith(GOOD_PREFIX):
                    self.good_experiences += delivery.item.length
            self._subscription.ack([d.tag for d in deliveries])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10.0)
        self._subscription.detach()


class RssSampler:
    """Peak resident set size of a process, sampled every ``RSS_POLL_S`` from ``/proc/<pid>/status``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = Path(f"/proc/{self.pid}/status").read_text(encoding="utf-8")
            except OSError:
                return
            for line in text.splitlines():
                if line.startswith("VmRSS:"):
                    self.peak_bytes = max(self.peak_bytes, int(line.split()[1]) * 1024)
            self._stop.wait(RSS_POLL_S)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)


# -- the memory model ---------------------------------------------------------------------------

CONNECTION_BYTES = 512 * 1024
"""Estimate: one client connection's state in the processor (gRPC's HTTP/2 transport, its read buffers, the
channel's call objects), besides the messages it carries."""
SESSION_BYTES = 64 * 1024
"""Estimate: one session's own objects (the ``Session``, its assemblers' empty buffers, the handler task and its
grpc.aio call), besides its agents."""
AGENT_SLOT_BYTES = 150
"""Per live agent besides its rows: per-slot counters and the id table's entry (``processor.assembly``'s model)."""
GROWTH_FACTOR = 3
"""Slots and chunks grow by doubling (``common.buffer.ProcessingBuffer``): up to twice the bytes in use, and while
a doubling copies, the old arrays beside the new ones: three times."""
TRAJECTORY_OBJECT_BYTES = 4 * 1024
"""Estimate: a queued trajectory's Python objects beside its arrays (about 16 numpy headers, the id, the delivery)."""
IN_FLIGHT_COPIES = 5
"""A request is in memory up to five times while it is handled, by its decode path: gRPC's receive buffer, the bytes
handed to the deserializer, the parsed message, and what the checks decode from it: a Python ``str`` of a name and
its UTF-8 ``encode`` (``processor.wire.check_name``), or a tensor's ``bytes`` and its numpy conversion."""
POLICIES_HELD = 3
"""Policy versions the processor may hold at once: the current one, one being loaded, one just replaced."""
POLICY_BYTES = 4 * 1024 * 1024
"""Estimate: one loaded policy of the soak's 2x64 MLP (the TFLite interpreter, its arena, the PolicyUpdate)."""
WATCH_BYTES = 64 * 1024
"""Estimate: one open health Watch stream's state besides its request."""


@dataclass(frozen=True)
class MemoryCaps:
    """The processor's configured caps that bound what peers can make it hold, read from its code and config."""

    max_message_bytes: int
    """``ServerOptions.max_message_bytes``: every request and every delivered trajectory fits it."""
    time_horizon: int
    """The soak behavior's ``time_horizon``: the most experiences an agent holds before its trajectory is cut."""
    queue_size: int
    """Trajectories (queued + unacknowledged) of each subscriber queue (``BehaviorTable.queue_size``)."""
    declared_subscribers: int
    """Subscriber queues declared on each behavior's trajectory topic; a remote peer may attach to no other."""
    max_trajectory_bytes: int
    """``processor.wire.TrajectorySize``: the encoded size of the soak behavior's longest trajectory."""
    one_step_trajectory_bytes: int
    """The same, for a trajectory of one experience (what the agents flood's agents flush)."""
    agent_row_bytes: int
    """``ProcessingBuffer.row_bytes`` of the soak behavior: one stored experience (or pending row) of one agent."""
    chunk_rows: int
    """``ProcessingBuffer.chunk_rows``: rows are stored in chunks of this many."""
    max_agents_per_session: int
    """``ProcessorSettings.max_agents_per_session``: live agents one session may hold."""
    max_agents_per_brain_info: int
    """``ProcessorSettings.max_agents_per_brain_info``: rows one BrainInfo may carry."""
    flush_batch_agents: int
    """``processor.assembly.FLUSH_BATCH_AGENTS``: agents flushed per batch at a session's end."""
    max_health_watches: int
    """``processor.server.MAX_HEALTH_WATCHES``: concurrent health Watch streams."""
    max_health_name_bytes: int
    """``processor.server.MAX_HEALTH_SERVICE_NAME_BYTES``: the longest name a health call may ask about."""
    max_batch_bytes: int
    """``processor.servicer.MAX_BATCH_BYTES``: one DeliveryBatch to a subscriber."""
    max_concurrent_rpcs: int
    """``ServerOptions.max_concurrent_rpcs``: calls open at once (grpc.aio refuses more with RESOURCE_EXHAUSTED)."""

    def agent_bytes(self, rows: int) -> int:
        """Bytes held for one live agent with ``rows`` experiences stored (``processor.assembly``'s model):
        ``GROWTH_FACTOR * (W + AGENT_SLOT_BYTES + ceil(rows / c) * (c * W + 16))``, with the pending row ``W``."""
        w, c = self.agent_row_bytes, self.chunk_rows
        return GROWTH_FACTOR * (w + AGENT_SLOT_BYTES + -(-rows // c) * (c * w + 16))


def configured_caps(config: Path) -> MemoryCaps:
    """The caps of a ``stepstream processor CONFIG`` started with default flags, read from the code."""
    from common.config import load_config
    from common.topics import TopicRegistry
    from processor.assembly import FLUSH_BATCH_AGENTS, TrajectoryAssembler
    from processor.behaviors import BehaviorTable, ProcessorSettings
    from processor.server import MAX_HEALTH_SERVICE_NAME_BYTES, MAX_HEALTH_WATCHES, ServerOptions
    from processor.servicer import MAX_BATCH_BYTES
    from processor.wire import TrajectorySize

    settings = ProcessorSettings.from_run_options(load_config(config))
    runtime = settings.runtime(BEHAVIOR)
    params = _brain_parameters()
    size = TrajectorySize.of(params)
    buffer = TrajectoryAssembler(params, "caps", runtime.time_horizon).buffer
    return MemoryCaps(
        max_message_bytes=ServerOptions().max_message_bytes,
        time_horizon=runtime.time_horizon,
        queue_size=BehaviorTable(settings, TopicRegistry()).queue_size(BEHAVIOR),
        declared_subscribers=len(settings.declared_subscribers),
        max_trajectory_bytes=size.at_most(runtime.time_horizon),
        one_step_trajectory_bytes=size.at_most(1),
        agent_row_bytes=buffer.row_bytes,
        chunk_rows=buffer.chunk_rows,
        max_agents_per_session=settings.max_agents_per_session,
        max_agents_per_brain_info=settings.max_agents_per_brain_info,
        flush_batch_agents=FLUSH_BATCH_AGENTS,
        max_health_watches=MAX_HEALTH_WATCHES,
        max_health_name_bytes=MAX_HEALTH_SERVICE_NAME_BYTES,
        max_batch_bytes=MAX_BATCH_BYTES,
        max_concurrent_rpcs=ServerOptions().max_concurrent_rpcs,
    )


def rss_bound(
    baseline_bytes: int,
    caps: MemoryCaps,
    clients: int,
    agents: int,
    hostile: int,
    flood: tuple[int, int],
    kinds: tuple[str, ...],
) -> dict[str, int]:
    """The processor's peak RSS under the soak, term by term (bytes), from the caps and the memory model.

    Computed before anything is measured but the idle baseline. ``K`` = ``clients`` well-behaved sessions of
    ``agents`` agents, ``H`` = ``hostile`` clients, each running every kind of ``kinds`` at once.

    * ``baseline``: the processor's RSS at idle, serving, with the first policy loaded, before any client.
    * ``connections``: ``(K + 2 + H * len(kinds)) * CONNECTION_BYTES`` (the publisher and subscriber are the 2).
    * ``sessions``: ``(K + H * (kinds that open a session, SESSION_KINDS)) * SESSION_BYTES``.
    * ``good_agents``: ``K * agents`` agents holding ``time_horizon`` experiences each (``MemoryCaps.agent_bytes``).
    * ``flood_agents``: each hostile client's agents flood holds ``min(agents, max_agents_per_session)`` agents
      (``flood``: agents, twice-stepped agents), the twice-stepped ones with one experience, the rest with none;
      its huge BrainInfo's first sightings (no rows) unless ``max_agents_per_brain_info`` refuses it.
    * ``queues``: every declared queue full (a remote peer cannot attach to any other): ``declared * queue_size``
      trajectories of ``max_trajectory_bytes + TRAJECTORY_OBJECT_BYTES``.
    * ``flushing``: each hostile flood session's end flush in progress, ``flush_batch_agents`` one-experience
      trajectories at a time.
    * ``in_flight``: ``IN_FLIGHT_COPIES`` times every request the processor may be decoding at once: each hostile
      client's largest message of each kind (``message_bytes_per_kind``), the well-behaved BrainInfos, and two
      DeliveryBatches (``max_batch_bytes``) to the subscriber; at most ``max_concurrent_rpcs`` messages of
      ``max_message_bytes`` whatever the clients (a refused request is not kept past its call).
    * ``watches``: ``WATCH_BYTES`` per health Watch stream that can stay open (``max_health_watches``, and none when
      ``max_health_name_bytes`` refuses the hostile names).
    * ``policies``: ``POLICIES_HELD * POLICY_BYTES``.

    Returns:
        Term -> bytes, with ``total`` their sum.
    """
    from benchmarks import hostile as h

    flood_held = min(flood[0], caps.max_agents_per_session) if "agents_flood" in kinds else 0
    flood_twice = min(flood[1], flood_held)
    huge = h.huge_brain_info_agents(caps.max_message_bytes, OBS_SIZE) if "huge_brain_info" in kinds else 0
    huge_held = 0 if huge > caps.max_agents_per_brain_info else huge
    flood_batch_bytes = h.FLOOD_BATCH_AGENTS * (4 * OBS_SIZE + 14)
    brain_info_bytes = agents * (4 * OBS_SIZE + 14) + 1024
    watches_open = hostile * h.HEALTH_WATCHES_PER_CLIENT if "health_watches" in kinds else 0
    watches_open = 0 if h.HEALTH_NAME_BYTES > caps.max_health_name_bytes else min(watches_open, caps.max_health_watches)
    flush_batch = min(flood_held, caps.flush_batch_agents)
    message_bytes = h.message_bytes_per_kind(caps.max_message_bytes, flood_batch_bytes)
    terms = {
        "baseline": baseline_bytes,
        "connections": (clients + 2 + hostile * len(kinds)) * CONNECTION_BYTES,
        "sessions": (clients + hostile * len(set(h.SESSION_KINDS) & set(kinds))) * SESSION_BYTES,
        "good_agents": clients * agents * caps.agent_bytes(caps.time_horizon),
        "flood_agents": hostile
        * (flood_twice * caps.agent_bytes(1) + (flood_held - flood_twice + huge_held) * caps.agent_bytes(0)),
        "queues": caps.declared_subscribers * caps.queue_size * (caps.max_trajectory_bytes + TRAJECTORY_OBJECT_BYTES),
        "flushing": hostile * flush_batch * (caps.one_step_trajectory_bytes + TRAJECTORY_OBJECT_BYTES),
        "in_flight": IN_FLIGHT_COPIES
        * min(
            hostile * sum(message_bytes[k] for k in kinds) + clients * brain_info_bytes + 2 * caps.max_batch_bytes,
            caps.max_concurrent_rpcs * caps.max_message_bytes,
        ),
        "watches": watches_open * WATCH_BYTES,
        "policies": POLICIES_HELD * POLICY_BYTES,
    }
    terms["total"] = sum(terms.values())
    return terms


def _idle_rss(pid: int) -> int:
    """The largest RSS of ``pid`` over ``BASELINE_S``."""
    peak, deadline = 0, time.monotonic() + BASELINE_S
    while time.monotonic() < deadline:
        peak = max(peak, rss_bytes(pid))
        time.sleep(RSS_POLL_S)
    return peak


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5.0) as reply:
        text = reply.read().decode("utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> int:
    """Sum of the samples ``stepstream_processor_<name>`` whose labels include ``labels`` (0 if none)."""
    full = f"stepstream_processor_{name}"
    return int(sum(v for (n, ls), v in samples.items() if n == full and set(labels.items()) <= set(ls)))


class Hostile(NamedTuple):
    """What the hostile process reported (``benchmarks.hostile.Outcomes``), or None where it stalled."""

    by_kind: dict[str, dict[str, int]]
    implied_experiences: int
    details_over_limit: int


def _run_clients(
    args: argparse.Namespace, address: str, publish: Any, policy: bytes
) -> tuple[list[ClientResult], int, Hostile | None]:
    """Start the client processes (and the hostile one), publish a new policy version every ``--policy-every-s``
    while they run; returns the well-behaved clients' results, how many of their processes stalled, and the
    hostile outcomes (None without ``--hostile`` or where the hostile process stalled)."""
    from benchmarks.hostile import hostile_process

    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    start_at = time.time() + START_DELAY_S
    stop_at = start_at + args.seconds
    processes, first = [], 0
    for p in range(args.client_processes):
        count = args.clients // args.client_processes + (p < args.clients % args.client_processes)
        child = ctx.Process(target=_client_process, args=(address, first, count, args.agents, start_at, stop_at, out))
        child.start()
        processes.append(child)
        first += count
    hostile_out: Any = ctx.Queue()
    hostile_child = None
    if args.hostile:
        flood = (args.flood_agents, args.flood_twice_agents)
        hostile_args = (
            address,
            args.hostile,
            BEHAVIOR,
            policy,
            flood,
            start_at,
            stop_at,
            args.hostile_pause_s,
            args.hostile_kinds,
        )
        hostile_child = ctx.Process(target=hostile_process, args=hostile_args, kwargs={"out": hostile_out})
        hostile_child.start()
    version = 1
    next_policy = start_at + args.policy_every_s
    while time.time() < stop_at:
        time.sleep(min(0.2, max(0.0, next_policy - time.time())))
        if time.time() >= next_policy:
            version += 1
            publish(version)
            next_policy += args.policy_every_s
    results: list[ClientResult] = []
    stalled = 0
    for _ in processes:
        try:
            results += [ClientResult(*r) for r in out.get(timeout=max(1.0, stop_at + STALL_MARGIN_S - time.time()))]
        except queue.Empty:
            stalled += 1
    hostile = None
    if hostile_child is not None:
        try:
            hostile = Hostile(*hostile_out.get(timeout=max(1.0, stop_at + STALL_MARGIN_S - time.time())))
        except queue.Empty:
            log.warning("the hostile clients did not end within %.0f s of the clock", STALL_MARGIN_S)
    for child in [*processes, *([hostile_child] if hostile_child is not None else [])]:
        child.join(5.0)
        if child.is_alive():
            child.kill()
            child.join()
    if stalled:
        log.warning(
            "%d of %d client processes stalled (no result %.0f s after the clock)", stalled, len(processes), STALL_MARGIN_S
        )
    return results, stalled, hostile


def soak(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.hostile import HOSTILE_KINDS
    from common.errors import StepstreamError
    from common.topics.grpc_transport import GrpcPolicyPublisher

    port, metrics_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        config = Path(tmp) / "soak.yaml"
        config.write_text(CONFIG, encoding="utf-8")
        caps = configured_caps(config)
        command = [sys.executable, "-m", "cli.main", "--log-level", "WARNING", "processor", str(config)]
        command += ["--port", str(port), "--metrics-port", str(metrics_port), "--grace-s", "10"]
        with open(Path(tmp) / "processor.log", "wb") as log_file:
            processor = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            first = policy_update(1)  # TensorFlow's import overlaps the processor's start
            wait_serving(address, processor)
            with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
                publisher.publish(first, 1)
                subscriber = CountingSubscriber(address)
                baseline = _idle_rss(processor.pid)
                flood = (args.flood_agents, args.flood_twice_agents)
                bound = rss_bound(baseline, caps, args.clients, args.agents, args.hostile, flood, args.hostile_kinds)
                log.warning(
                    "RSS bound %.0f MB: %s",
                    bound["total"] / 2**20,
                    ", ".join(f"{k} {v / 2**20:.1f}" for k, v in bound.items() if k != "total"),
                )
                rss = RssSampler(processor.pid)
                publish_failures: list[str] = []

                def publish(version: int) -> None:
                    """Publish a new version; a processor too busy to answer in time is a figure, not a crash."""
                    try:
                        publisher.publish(policy_update(version), version)
                    except StepstreamError as err:
                        log.warning("policy version %d not published: %s", version, err)
                        publish_failures.append(f"{version}: {str(err)[:200]}")

                results, stalled, hostile = _run_clients(args, address, publish, first.SerializeToString())
            # Every session is closed, but its flush may still wait for room on the queue: wait until every
            # implied experience is published or dropped and the subscriber has taken every published one,
            # or until nothing moved for SETTLE_S (something was lost: the counts will say so).
            implied_all = sum(r.implied_experiences for r in results) + (hostile.implied_experiences if hostile else 0)
            deadline, moved = time.monotonic() + DRAIN_TIMEOUT_S, time.monotonic()
            last: tuple[int, int] = (-1, -1)
            while True:
                samples = _scrape(metrics_port)
                accounted = _metric(samples, "experiences_published_total") + _metric(samples, "experiences_dropped_total")
                taken = subscriber.experiences == _metric(samples, "experiences_published_total")
                if (accounted, subscriber.experiences) != last:
                    last, moved = (accounted, subscriber.experiences), time.monotonic()
                idle = _metric(samples, "sessions") == 0 and taken
                if idle and (accounted == implied_all or time.monotonic() - moved > SETTLE_S):
                    break
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            subscriber.close()
            rss.close()
        finally:
            processor.send_signal(signal.SIGTERM)
            try:
                processor.wait(30.0)
            except subprocess.TimeoutExpired:
                processor.kill()
                processor.wait()
            processor_log = (Path(tmp) / "processor.log").read_text(encoding="utf-8", errors="replace")
            if args.processor_log:
                Path(args.processor_log).write_text(processor_log, encoding="utf-8")
    timings = np.concatenate([np.asarray(r.round_trips_s) for r in results]) if results else np.zeros(1)
    wall = (max(r.window_end for r in results) - min(r.window_start for r in results)) if results else float("inf")
    implied = sum(r.implied_experiences for r in results)
    hostile_implied = hostile.implied_experiences if hostile else 0
    published = _metric(samples, "experiences_published_total")
    dropped = _metric(samples, "experiences_dropped_total")
    # The processor's drops are not counted per session: the good clients' share is all of them less at most what
    # the hostile sessions are missing (exact when it dropped nothing, or the hostile sessions miss nothing).
    good_missing = implied - subscriber.good_experiences
    hostile_missing = hostile_implied - (subscriber.experiences - subscriber.good_experiences)
    good_accounted = max(0, dropped - max(0, hostile_missing)) <= good_missing <= dropped
    received_all = subscriber.experiences == published and subscriber.duplicates == 0
    good_steps_per_s = sum(r.rows for r in results) / wall
    figures: dict[str, Any] = {
        "agent_steps_per_s": good_steps_per_s,
        "p50_ms": float(np.percentile(timings, 50) * 1e3),
        "p99_ms": float(np.percentile(timings, 99) * 1e3),
        "peak_processor_rss_mb": rss.peak_bytes / 2**20,
        "agent_steps": sum(r.rows for r in results),
        "experiences_implied": implied + hostile_implied,
        "experiences_accounted": published + dropped,
        "experiences_published": published,
        "experiences_dropped_stale": _metric(samples, "experiences_dropped_total", reason="stale"),
        "experiences_dropped_unpublished": _metric(samples, "experiences_dropped_total", reason="unpublished"),
        "experiences_flushed": _metric(samples, "experiences_flushed_total"),
        "experiences_received": subscriber.experiences,
        "trajectories_received": subscriber.trajectories,
        "duplicates_received": subscriber.duplicates,
        "queue_dropped": _metric(samples, "queue_dropped_total"),
        "policy_versions": _metric(samples, "policy_updates_total"),
        "conserved": not stalled and implied + hostile_implied == published + dropped and received_all,
        "hostile_clients": args.hostile,
        "hostile_kinds": [{"kind": name, "issue_point": HOSTILE_KINDS[name].point} for name in args.hostile_kinds]
        if args.hostile
        else [],
        "good_agent_steps_per_s": good_steps_per_s,
        "good_experiences_implied": implied,
        "good_experiences_received": subscriber.good_experiences,
        "good_experiences_missing": good_missing,
        "good_conserved": not stalled and received_all and good_accounted and not (args.hostile and hostile is None),
        "good_client_processes_stalled": stalled,
        "hostile_stalled": bool(args.hostile) and hostile is None,
        "hostile_experiences_implied": hostile_implied,
        "hostile_outcomes": hostile.by_kind if hostile else {},
        "hostile_details_over_limit": hostile.details_over_limit if hostile else 0,
        "subscriber_restarts": subscriber.restarts,
        "policy_publish_failures": publish_failures,
        "baseline_rss_mb": baseline / 2**20,
        "rss_bound_mb": bound["total"] / 2**20,
        "rss_bound_terms_mb": {k: round(v / 2**20, 1) for k, v in bound.items() if k != "total"},
        "rss_within_bound": rss.peak_bytes <= bound["total"],
        "processor_exit_code": processor.returncode,
        "processor_log_tracebacks": processor_log.count("Traceback"),
        "load_average_1m": os.getloadavg()[0],
    }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="env-client sessions")
    parser.add_argument("--agents", type=int, default=16, help="agents per session")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the clients step")
    parser.add_argument("--client-processes", type=int, default=2, help="processes the sessions are spread over")
    parser.add_argument("--policy-every-s", type=float, default=10.0, help="seconds between new policy versions")
    parser.add_argument("--processor-log", help="keep the processor's log (WARNING and above) in this file")
    parser.add_argument("--hostile", type=int, default=0, help="hostile clients beside the well-behaved ones")
    parser.add_argument(
        "--hostile-kinds",
        type=lambda text: tuple(text.split(",")),
        default=None,
        help="comma-separated kinds of benchmarks.hostile.HOSTILE_KINDS the hostile clients send (default: all)",
    )
    parser.add_argument("--hostile-pause-s", type=float, default=0.5, help="pause of each hostile kind between attempts")
    parser.add_argument(
        "--flood-agents",
        type=int,
        default=None,
        help="live agents one hostile agents flood aims for (default: the processor's per-session cap and one batch more)",
    )
    parser.add_argument(
        "--flood-twice-agents",
        type=int,
        default=1024,
        help="of those, how many it steps twice: each flushes as a one-experience trajectory when the flood ends",
    )
    args = parser.parse_args()
    if not 1 <= args.client_processes <= args.clients:
        parser.error("--client-processes must be between 1 and --clients")
    if args.hostile < 0:
        parser.error("--hostile must be >= 0")
    from benchmarks.hostile import HOSTILE_KINDS

    args.hostile_kinds = args.hostile_kinds or tuple(HOSTILE_KINDS)
    if unknown := set(args.hostile_kinds) - set(HOSTILE_KINDS):
        parser.error(f"--hostile-kinds: unknown {sorted(unknown)} (known: {list(HOSTILE_KINDS)})")
    if args.flood_agents is None:
        from benchmarks.hostile import FLOOD_BATCH_AGENTS
        from processor.behaviors import ProcessorSettings

        args.flood_agents = ProcessorSettings().max_agents_per_session + FLOOD_BATCH_AGENTS
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    figures = soak(args)
    logging.getLogger().setLevel(logging.INFO)
    log.info(
        "soak K=%d A=%d H=%d %.0f s: %.0f agent-steps/s, p50 %.2f ms, p99 %.2f ms, peak processor RSS %.0f MB"
        " (bound %.0f MB); implied %d, published %d + dropped %d, flushed %d, received %d: conserved %s, good %s",
        args.clients,
        args.agents,
        args.hostile,
        args.seconds,
        figures["agent_steps_per_s"],
        figures["p50_ms"],
        figures["p99_ms"],
        figures["peak_processor_rss_mb"],
        figures["rss_bound_mb"],
        figures["experiences_implied"],
        figures["experiences_published"],
        figures["experiences_accounted"] - figures["experiences_published"],
        figures["experiences_flushed"],
        figures["experiences_received"],
        figures["conserved"],
        figures["good_conserved"],
    )
    rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
    if not rounded["rss_within_bound"]:
        log.warning("peak RSS %.0f MB passed the bound %.0f MB", figures["peak_processor_rss_mb"], figures["rss_bound_mb"])
    print(json.dumps({"workload": "soak", "clients": args.clients, "agents": args.agents, "seconds": args.seconds, **rounded}))


if __name__ == "__main__":
    main()
