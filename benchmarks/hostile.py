"""The soak's hostile minority: clients that send issue 13's attack classes at a real processor.

A hostile peer does not use stepstream's clients: every call here is a raw gRPC call whose request is
bytes serialized once (``channel.stream_stream(path)`` without serializers), so a 16 MiB Hello costs
the attacker one copy and the processor a full decode. ``HOSTILE_KINDS`` is the table of attack
classes, name -> (issue 13 point, coroutine). Each hostile client runs every kind as its own task,
in a loop until the soak's clock stops: one attempt (a call, or a few calls held open), its outcome
recorded (the status code the processor ended it with, or ``still_open`` for a call that was neither
refused nor ended when the attacker ended it), a pause, and a new connection for the next attempt,
as a peer reconnecting after each refusal does.

The kinds that open a real session for the soak's behavior (``agents_flood``) count the experiences
they implied by the soak's own rule (an agent's row after its first sighting), from the BrainInfos
the processor answered: a refused BrainInfo adds nothing, and the processor flushes the rest when
the stream ends. Every other kind's sessions are refused at Hello or hold no experience.

No kind is ever cancelled mid-call: each finishes its attempt and checks the clock, so the implied
counts are exact (a cancelled step would leave it unknown whether the processor took the row).

Run as a script, it is the many-behaviors benchmark (``MANY_DOC``): a well-behaved client's slowest step
while 10,000 behaviors open and close. The soak's behavior, policy and processor helpers come from
``benchmarks.soak_processor``, which ``soak.py`` imports too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import grpc
import numpy as np

log = logging.getLogger("benchmarks.hostile")

SERVICE = "/stepstream.v1.AgentProcessor"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
GARBAGE = b"\x0a\xff\xff\xff\xff\x0f\x01"
"""A length-delimited field 1 that claims 4 GiB: no message decodes it."""
HUGE_NAME_BYTES = 2 * 1024 * 1024
"""The unknown names of point 7's queries (the issue's 2 MiB)."""
HEALTH_NAME_BYTES = 1024 * 1024
"""The service names of point 8's Watch streams (the issue's 1 MiB)."""
HEALTH_WATCHES_PER_CLIENT = 50
"""Watch streams each hostile client holds at once (the issue held 200 with four clients' worth)."""
MANY_BEHAVIORS = 10_000
"""Behaviors in point 9's Hello (the issue's 10,000)."""
FLOOD_BATCH_AGENTS = 4096
"""New agent ids per BrainInfo of the agents flood (each stepped twice, never done)."""
HOLD_S = 1.0
"""How long a kind that holds calls open (subscriptions, watches) keeps them before ending them."""
CALL_TIMEOUT_S = 30.0
"""A refused call ends at once; one the processor neither answers nor ends within this is ``stalled``."""
FLUSH_TIMEOUT_S = 300.0
"""How long the agents flood waits for its session's end: the processor flushes every agent it holds as a
trajectory, into a queue that holds back the flush until the trainer has taken room (``block``)."""
STILL_OPEN = "still_open"
"""The outcome of a call the processor had neither refused nor ended when the attacker ended it, ``HOLD_S`` after
it began: accepted, or not handled yet (200 Watch requests of 1 MiB take longer than that to arrive on a loaded
machine)."""


class Outcomes(NamedTuple):
    """What one hostile process saw: per kind, outcome -> count; experiences its sessions implied."""

    by_kind: dict[str, dict[str, int]]
    implied_experiences: int
    details_over_limit: int
    """Statuses whose message passed ``MAX_STATUS_DETAILS_BYTES`` (point 11)."""


@dataclass
class HostileClient:
    """One hostile peer: the processor's address, its index, the soak's model and what it recorded."""

    address: str
    index: int
    behavior: str
    policy: bytes
    """The soak's first PolicyUpdate, serialized (a real model): a kind changes only the field it attacks."""
    flood_agents: int
    """Live agents the agents flood aims for in one session (past the processor's cap, to provoke it)."""
    twice_agents: int
    """Of those, how many it steps twice (whole batches): each is a one-experience trajectory at the flush."""
    stop_at: float
    """Epoch seconds: no attempt starts after it."""
    pause_s: float
    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    implied_experiences: int = 0
    details_over_limit: int = 0

    @property
    def client_id_prefix(self) -> str:
        return f"hostile-{self.index}"

    def record(self, kind: str, outcome: str, details: str = "") -> None:
        from processor.servicer import MAX_STATUS_DETAILS_BYTES

        self.outcomes.setdefault(kind, Counter())[outcome] += 1
        if len(details.encode("utf-8", "surrogatepass")) > MAX_STATUS_DETAILS_BYTES:
            self.details_over_limit += 1

    def channel(self) -> grpc.aio.Channel:
        from common.topics.grpc_transport import MESSAGE_SIZE_OPTIONS

        return grpc.aio.insecure_channel(self.address, options=list(MESSAGE_SIZE_OPTIONS))


# -- messages ------------------------------------------------------------------------------------


def _params(behavior: str, obs_size: int, action_size: int) -> Any:
    from common.specs import ActionSpec, BrainParameters, ObservationSpec

    return BrainParameters(behavior, (ObservationSpec((obs_size,), np.dtype(np.float32)),), ActionSpec(action_size))


def hello_bytes(client_id: str, *params: Any) -> bytes:
    """A serialized StepRequest carrying a Hello of ``params`` (BrainParameters or their protos)."""
    from protos import PROTOCOL_VERSION, pb

    msg = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id=client_id)
    msg.brain_parameters.extend(p if isinstance(p, pb.BrainParameters) else p.to_proto() for p in params)
    return pb.StepRequest(hello=msg).SerializeToString()


def brain_info_bytes(behavior: str, ids: np.ndarray, obs_size: int) -> bytes:
    """A serialized StepRequest: one BrainInfo of ``ids`` (none done), zero observations and rewards."""
    from envclient.session import brain_info_message
    from protos import pb

    n = len(ids)
    info = brain_info_message(behavior, ids, [np.zeros((n, obs_size), np.float32)], np.zeros(n, np.float32), np.zeros(n, bool))
    return pb.StepRequest(brain_info=info).SerializeToString()


def huge_brain_info_agents(max_message_bytes: int, obs_size: int) -> int:
    """The most agents one BrainInfo of ``obs_size`` floats fits in a message (ids, obs, reward, done, max_reached)."""
    return (max_message_bytes - 64 * 1024) // (8 + 4 * obs_size + 4 + 1 + 1)


# -- calls ---------------------------------------------------------------------------------------


def _status(err: grpc.aio.AioRpcError) -> tuple[str, str]:
    return err.code().name, err.details() or ""


async def _stream(
    client: HostileClient, method: str, requests: list[bytes], *, hold_s: float = 0.0, end_timeout_s: float = CALL_TIMEOUT_S
) -> tuple[str, str, int]:
    """Write ``requests`` on a raw stream of ``method``, reading one answer to each (for Step) or holding it
    ``hold_s`` (Subscribe); returns the outcome, its details and how many requests were answered.

    The stream's end is awaited ``end_timeout_s`` at most (``stalled`` past it)."""
    answered = 0
    async with client.channel() as channel:
        call = channel.stream_stream(f"{SERVICE}/{method}")()
        try:
            for request in requests:
                await call.write(request)
                if method == "Step":
                    if await asyncio.wait_for(call.read(), CALL_TIMEOUT_S) is grpc.aio.EOF:
                        break
                    answered += 1
            if hold_s:
                try:  # a refusal ends the stream before the hold is over
                    await asyncio.wait_for(call.code(), hold_s)
                except asyncio.TimeoutError:
                    call.cancel()
                    return STILL_OPEN, "", answered
            elif method == "Step" and answered == len(requests):
                await call.done_writing()
            code = await asyncio.wait_for(call.code(), end_timeout_s)
            return code.name, await call.details() or "", answered
        except asyncio.TimeoutError:
            call.cancel()
            return "stalled", "", answered
        except grpc.aio.AioRpcError as err:
            return (*_status(err), answered)


async def _unary(client: HostileClient, method: str, request: bytes) -> tuple[str, str]:
    async with client.channel() as channel:
        try:
            await channel.unary_unary(f"{SERVICE}/{method}")(request, timeout=CALL_TIMEOUT_S)
            return "OK", ""
        except grpc.aio.AioRpcError as err:
            return _status(err)


# -- the attack classes (issue 13's point in each docstring) -------------------------------------


async def trajectory_too_large(client: HostileClient) -> None:
    """Point 1: a Hello whose trajectories could not fit a message (the widest row, time_horizon 64)."""
    from processor.wire import MAX_ROW_WIDTH

    wide = _params(client.behavior, MAX_ROW_WIDTH, 2)
    code, details, _ = await _stream(client, "Step", [hello_bytes(f"{client.client_id_prefix}-wide", wide)])
    client.record("trajectory_too_large", code, details)


async def huge_client_id(client: HostileClient) -> None:
    """Point 1: a Hello whose client id fills the message limit."""
    from common.topics.grpc_transport import MAX_MESSAGE_BYTES

    request = _cached(client, "huge_client_id", lambda: hello_bytes("h" * (MAX_MESSAGE_BYTES - 4096), _soak_params(client)))
    code, details, _ = await _stream(client, "Step", [request])
    client.record("huge_client_id", code, details)


async def stranger_trainer(client: HostileClient) -> None:
    """Point 2: a Subscribe under the trainer's name, held open without acking."""
    from common.topics import TRAINER_SUBSCRIBER

    code, details, _ = await _stream(
        client, "Subscribe", [_subscribe_bytes(client.behavior, TRAINER_SUBSCRIBER)], hold_s=HOLD_S
    )
    client.record("stranger_trainer", code, details)


async def version_overflow(client: HostileClient) -> None:
    """Point 3: a valid policy (the soak's own model) at version 2**63 - 1."""
    code, details = await _unary(client, "PublishPolicy", _policy_bytes(client, 2**63 - 1))
    client.record("version_overflow", code, details)


async def unknown_subscriber(client: HostileClient) -> None:
    """Point 4: a Subscribe under a name no one declared, held open without acking."""
    request = _subscribe_bytes(client.behavior, f"spy-{client.index}")
    code, details, _ = await _stream(client, "Subscribe", [request], hold_s=HOLD_S)
    client.record("unknown_subscriber", code, details)


async def foreign_policy(client: HostileClient) -> None:
    """Point 5: a policy for a behavior no one declared, and one whose action spec disagrees with the soak's."""
    from common.specs import ActionSpec

    code, details = await _unary(client, "PublishPolicy", _policy_bytes(client, 1, behavior=f"Ghost{client.index}"))
    client.record("foreign_policy", code, details)
    code, details = await _unary(client, "PublishPolicy", _policy_bytes(client, 1, action_spec=ActionSpec(1)))
    client.record("foreign_policy", code, details)


async def agents_flood(client: HostileClient) -> None:
    """Point 6: one session that steps ``twice_agents`` new ids twice (one experience each, never done), then
    brings new ids (first sightings) ``FLOOD_BATCH_AGENTS`` at a time until it holds ``flood_agents`` or the
    processor refuses it; then it ends, and the processor flushes what it holds."""
    from benchmarks.soak_processor import OBS_SIZE

    requests = [hello_bytes(f"{client.client_id_prefix}-flood", _soak_params(client))]
    gains = [0]  # the experiences each request implies once answered
    twice = min(client.twice_agents, client.flood_agents)
    for start, end, times in ((0, twice, 2), (twice, client.flood_agents, 1)):
        for first in range(start, end, FLOOD_BATCH_AGENTS):
            n = min(FLOOD_BATCH_AGENTS, end - first)
            step = brain_info_bytes(client.behavior, np.arange(first, first + n), OBS_SIZE)
            requests += [step] * times
            gains += [0, n][:times]
    code, details, answered = await _stream(client, "Step", requests, end_timeout_s=FLUSH_TIMEOUT_S)
    client.implied_experiences += sum(gains[:answered])
    client.record("agents_flood", code, details)


async def huge_brain_info(client: HostileClient) -> None:
    """Point 6: one BrainInfo with as many agents as a message holds (first sightings: no experience)."""
    from benchmarks.soak_processor import OBS_SIZE
    from common.topics.grpc_transport import MAX_MESSAGE_BYTES

    agents = huge_brain_info_agents(MAX_MESSAGE_BYTES, OBS_SIZE)
    step = _cached(client, "huge_brain_info", lambda: brain_info_bytes(client.behavior, np.arange(agents), OBS_SIZE))
    code, details, _ = await _stream(
        client, "Step", [hello_bytes(f"{client.client_id_prefix}-huge", _soak_params(client)), step]
    )
    client.record("huge_brain_info", code, details)


async def unknown_queries(client: HostileClient) -> None:
    """Point 7: GetPolicyStatus and Subscribe naming a 2 MiB behavior no one declared."""
    from protos import pb

    name = _cached(client, "huge_name", lambda: "q" * HUGE_NAME_BYTES)
    code, details = await _unary(client, "GetPolicyStatus", pb.PolicyQuery(behavior_name=name).SerializeToString())
    client.record("unknown_queries", code, details)
    code, details, _ = await _stream(client, "Subscribe", [_subscribe_bytes(name, "trainer")], hold_s=HOLD_S)
    client.record("unknown_queries", code, details)


async def health_watches(client: HostileClient) -> None:
    """Point 8: ``HEALTH_WATCHES_PER_CLIENT`` Watch streams of 1 MiB service names, with no token, held open."""
    from grpc_health.v1 import health_pb2

    request = _cached(
        client, "health", lambda: health_pb2.HealthCheckRequest(service="w" * HEALTH_NAME_BYTES).SerializeToString()
    )
    async with client.channel() as channel:
        watch = channel.unary_stream(HEALTH_WATCH)
        calls = [watch(request) for _ in range(HEALTH_WATCHES_PER_CLIENT)]
        await asyncio.sleep(HOLD_S)
        for call in calls:
            if call.done():
                client.record("health_watches", (await call.code()).name, await call.details() or "")
            else:
                call.cancel()
                client.record("health_watches", STILL_OPEN)


async def many_behaviors(client: HostileClient) -> None:
    """Point 9: a Hello declaring ``MANY_BEHAVIORS`` behaviors."""
    from benchmarks.soak_processor import ACTION_SIZE, OBS_SIZE

    request = _cached(
        client,
        "many_behaviors",
        lambda: hello_bytes(
            f"{client.client_id_prefix}-many", *[_params(f"B{i}", OBS_SIZE, ACTION_SIZE) for i in range(MANY_BEHAVIORS)]
        ),
    )
    code, details, _ = await _stream(client, "Step", [request])
    client.record("many_behaviors", code, details)


async def long_status(client: HostileClient) -> None:
    """Point 11: a Hello of 64 long unknown names, and a step for an undeclared behavior, whose refusals
    would list every name."""
    from benchmarks.soak_processor import ACTION_SIZE, OBS_SIZE
    from processor.wire import MAX_BEHAVIORS_PER_HELLO

    names = [f"{i:03d}" + "b" * 250 for i in range(MAX_BEHAVIORS_PER_HELLO)]
    params = [_params(n, OBS_SIZE, ACTION_SIZE) for n in names]
    code, details, _ = await _stream(client, "Step", [hello_bytes(f"{client.client_id_prefix}-long", *params)])
    client.record("long_status", code, details)
    stranger = brain_info_bytes(names[0], np.arange(1), OBS_SIZE)
    requests = [hello_bytes(f"{client.client_id_prefix}-long", _soak_params(client)), stranger]
    code, details, _ = await _stream(client, "Step", requests)
    client.record("long_status", code, details)


async def garbage_bytes(client: HostileClient) -> None:
    """Point 13: bytes no message decodes, as a Step, Subscribe, PublishPolicy and GetPolicyStatus."""
    for method in ("Step", "Subscribe"):
        code, details, _ = await _stream(client, method, [GARBAGE])
        client.record("garbage_bytes", code, details)
    for method in ("PublishPolicy", "GetPolicyStatus"):
        code, details = await _unary(client, method, GARBAGE)
        client.record("garbage_bytes", code, details)


async def empty_step(client: HostileClient) -> None:
    """Point 14: a StepRequest with no payload after a valid Hello."""
    requests = [hello_bytes(f"{client.client_id_prefix}-empty", _soak_params(client)), b""]
    code, details, _ = await _stream(client, "Step", requests)
    client.record("empty_step", code, details)


class HostileKind(NamedTuple):
    """One attack class: the issue 13 point it tests and one attempt at it."""

    point: int
    attempt: Callable[[HostileClient], Awaitable[None]]


HOSTILE_KINDS: dict[str, HostileKind] = {
    "trajectory_too_large": HostileKind(1, trajectory_too_large),
    "huge_client_id": HostileKind(1, huge_client_id),
    "stranger_trainer": HostileKind(2, stranger_trainer),
    "version_overflow": HostileKind(3, version_overflow),
    "unknown_subscriber": HostileKind(4, unknown_subscriber),
    "foreign_policy": HostileKind(5, foreign_policy),
    "agents_flood": HostileKind(6, agents_flood),
    "huge_brain_info": HostileKind(6, huge_brain_info),
    "unknown_queries": HostileKind(7, unknown_queries),
    "health_watches": HostileKind(8, health_watches),
    "many_behaviors": HostileKind(9, many_behaviors),
    "long_status": HostileKind(11, long_status),
    "garbage_bytes": HostileKind(13, garbage_bytes),
    "empty_step": HostileKind(14, empty_step),
}
"""Issue 13's network-reachable classes. Not sent: 10 (a hung client: a stopped process, not a message),
12, 15 and 16 (a config file, a .demo file and checkpoints: files on the processor's or trainer's disk)."""


# -- helpers of the kinds ------------------------------------------------------------------------

_CACHE: dict[tuple[int, str], Any] = {}


def _cached(client: HostileClient, key: str, make: Callable[[], Any]) -> Any:
    """A large request built once per client (the attacker pays one copy; the processor decodes each)."""
    if (client.index, key) not in _CACHE:
        _CACHE[client.index, key] = make()
    return _CACHE[client.index, key]


def _soak_params(client: HostileClient) -> Any:
    from benchmarks.soak_processor import ACTION_SIZE, OBS_SIZE

    return _params(client.behavior, OBS_SIZE, ACTION_SIZE)


def _subscribe_bytes(behavior: str, subscriber: str) -> bytes:
    from protos import pb

    return pb.SubscriberMessage(open=pb.SubscribeOpen(behavior_name=behavior, subscriber_name=subscriber)).SerializeToString()


def _policy_bytes(client: HostileClient, version: int, *, behavior: str | None = None, action_spec: Any = None) -> bytes:
    """The soak's own PolicyUpdate with ``version`` and, if given, another behavior name or action spec."""
    from protos import pb

    update = pb.PolicyUpdate.FromString(client.policy)
    update.version = version
    if behavior is not None:
        update.behavior_name = behavior
    if action_spec is not None:
        action_spec.to_proto(update.artifact.action_spec)
    return update.SerializeToString()


# -- running them --------------------------------------------------------------------------------


async def _loop(client: HostileClient, name: str, kind: HostileKind) -> None:
    while time.time() < client.stop_at:
        try:
            await kind.attempt(client)
        except (grpc.RpcError, OSError) as err:  # the processor went away: record it, keep trying
            client.record(name, type(err).__name__)
        await asyncio.sleep(client.pause_s)


async def run_hostile_clients(
    address: str,
    count: int,
    behavior: str,
    policy: bytes,
    flood: tuple[int, int],
    start_at: float,
    stop_at: float,
    pause_s: float,
    kinds: tuple[str, ...] = tuple(HOSTILE_KINDS),
) -> Outcomes:
    """``count`` hostile clients, each running every kind of ``kinds`` (``HOSTILE_KINDS``' names) in its own loop
    from ``start_at`` until ``stop_at`` (epoch seconds); ``flood``: the agents flood's (agents, twice-stepped agents)."""
    clients = [HostileClient(address, i, behavior, policy, *flood, stop_at, pause_s) for i in range(count)]
    await asyncio.sleep(max(0.0, start_at - time.time()))
    await asyncio.gather(*[_loop(c, name, HOSTILE_KINDS[name]) for c in clients for name in kinds])
    by_kind: dict[str, Counter[str]] = {}
    for c in clients:
        for name, counts in c.outcomes.items():
            by_kind.setdefault(name, Counter()).update(counts)
    return Outcomes(
        {name: dict(counts) for name, counts in by_kind.items()},
        sum(c.implied_experiences for c in clients),
        sum(c.details_over_limit for c in clients),
    )


def hostile_process(*args: Any, out: Any) -> None:
    """Entry point of the hostile clients' process: ``run_hostile_clients(*args)``, its Outcomes put on ``out``."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    out.put(tuple(asyncio.run(run_hostile_clients(*args))))


SMALL_MESSAGE_BYTES = 64 * 1024
"""What the memory model counts for any other kind's message (a Hello of one behavior, a policy, garbage)."""


def message_bytes_per_kind(max_message_bytes: int, flood_batch_bytes: int) -> dict[str, int]:
    """Kind -> the bytes of the messages one hostile client of that kind has in the processor at once, at most:
    its largest request (all its open streams' for ``health_watches``), capped by the message limit."""
    from benchmarks.soak_processor import OBS_SIZE

    sizes = dict.fromkeys(HOSTILE_KINDS, SMALL_MESSAGE_BYTES)
    sizes["huge_client_id"] = max_message_bytes
    sizes["huge_brain_info"] = min(
        max_message_bytes, huge_brain_info_agents(max_message_bytes, OBS_SIZE) * (4 * OBS_SIZE + 14)
    )
    sizes["agents_flood"] = flood_batch_bytes
    sizes["unknown_queries"] = HUGE_NAME_BYTES
    sizes["health_watches"] = HEALTH_WATCHES_PER_CLIENT * HEALTH_NAME_BYTES
    sizes["many_behaviors"] = min(max_message_bytes, MANY_BEHAVIORS * 64)  # a name, one obs spec, an action spec each
    return sizes


SESSION_KINDS = ("agents_flood", "huge_brain_info", "long_status", "empty_step")
"""The kinds whose Hello is valid: each holds one session at a time (the others are refused at Hello)."""


# -- the many-behaviors benchmark (``python benchmarks/hostile.py``) ------------------------------

GOOD_BEHAVIOR = "Good"
"""The well-behaved client's behavior, the one configured behavior (others come from ``default_settings``)."""
MANY_CONFIG = f"""
behaviors:
  {GOOD_BEHAVIOR}:
    trainer_type: ppo
default_settings:
  trainer_type: ppo
"""
"""The processor's config: any behavior is accepted, as an env client declares it."""
CHANNELS = 8
"""Connections the opener spreads its sessions over (as several peers would)."""


async def _hold_many(address: str, behaviors: int, per_session: int, hold_s: float, out: Any) -> None:
    """Open ``ceil(behaviors / per_session)`` sessions declaring ``per_session`` new behaviors each, all at once;
    hold them ``hold_s`` once every Hello is answered; then end them all. Puts the epoch seconds of each phase
    (opening, opened, closing, closed) and the Hellos refused on ``out``."""
    from benchmarks.soak_processor import ACTION_SIZE, OBS_SIZE
    from common.topics.grpc_transport import MESSAGE_SIZE_OPTIONS

    channels = [grpc.aio.insecure_channel(address, options=list(MESSAGE_SIZE_OPTIONS)) for _ in range(CHANNELS)]
    names = [f"Many{i:05d}" for i in range(behaviors)]
    hellos = [
        hello_bytes(f"many-{k}", *[_params(n, OBS_SIZE, ACTION_SIZE) for n in names[k : k + per_session]])
        for k in range(0, behaviors, per_session)
    ]
    opening = time.time()
    calls = [channels[i % CHANNELS].stream_stream(f"{SERVICE}/Step")() for i in range(len(hellos))]

    async def hello(call: Any, request: bytes) -> bool:
        await call.write(request)
        return await call.read() is not grpc.aio.EOF

    answered = await asyncio.gather(*[hello(c, r) for c, r in zip(calls, hellos, strict=True)], return_exceptions=True)
    opened = time.time()
    await asyncio.sleep(hold_s)
    closing = time.time()
    for call in calls:
        await call.done_writing()
    await asyncio.gather(*[call.code() for call in calls])
    closed = time.time()
    for channel in channels:
        await channel.close()
    out.put((opening, opened, closing, closed, sum(a is not True for a in answered)))


def _opener_process(address: str, behaviors: int, per_session: int, hold_s: float, start_at: float, out: Any) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    time.sleep(max(0.0, start_at - time.time()))
    asyncio.run(_hold_many(address, behaviors, per_session, hold_s, out))


async def _good_client(address: str, agents: int, stop: Any) -> list[tuple[float, float]]:
    """Step ``agents`` agents of ``GOOD_BEHAVIOR`` back to back until ``stop`` is set: (epoch start, seconds) per step."""
    from benchmarks.soak_processor import ACTION_SIZE, OBS_SIZE
    from envclient import EnvSession
    from envclient.session import brain_info_message

    params = _params(GOOD_BEHAVIOR, OBS_SIZE, ACTION_SIZE)
    ids = np.arange(agents, dtype=np.int64)
    obs = np.random.default_rng(0).standard_normal((agents, OBS_SIZE), dtype=np.float32)
    steps: list[tuple[float, float]] = []
    async with EnvSession(address, "good", [params]) as session:
        while not stop.is_set():
            message = brain_info_message(GOOD_BEHAVIOR, ids, [obs], np.zeros(agents, np.float32), np.zeros(agents, bool))
            started, wall = time.perf_counter(), time.time()
            await session.send(message)
            steps.append((wall, time.perf_counter() - started))
    return steps


def _slowest_ms(steps: list[tuple[float, float]], start: float, end: float) -> float:
    """The slowest step that began in [start, end) (epoch seconds), milliseconds."""
    return 1000 * max((s for t, s in steps if start <= t < end), default=0.0)


def many_behaviors_benchmark(args: Any) -> dict[str, Any]:
    """The benchmark: a processor process, the good client in a thread, the opener in a process of its own."""
    import gc
    import multiprocessing as mp
    import subprocess
    import sys
    import tempfile
    import threading
    from pathlib import Path

    from benchmarks.soak_processor import REPO, free_port, policy_update, rss_bytes, wait_serving
    from common.topics.grpc_transport import GrpcPolicyPublisher

    port = free_port()
    address = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        config = Path(tmp) / "many.yaml"
        config.write_text(MANY_CONFIG, encoding="utf-8")
        command = [sys.executable, "-m", "cli.main", "--log-level", "WARNING", "processor", str(config), "--port", str(port)]
        command += ["--full-policy", "drop_oldest"]  # no trainer drains the good behavior's queue
        processor = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            update = policy_update(1)
            update.behavior_name = GOOD_BEHAVIOR
            wait_serving(address, processor)
            with GrpcPolicyPublisher(address, GOOD_BEHAVIOR) as publisher:
                publisher.publish(update, 1)
            gc.collect()
            gc.freeze()  # TensorFlow's objects, here: the client's own full collections would pass for the processor's
            stop = threading.Event()
            result: list[list[tuple[float, float]]] = []
            good = threading.Thread(target=lambda: result.append(asyncio.run(_good_client(address, args.agents, stop))))
            good.start()
            time.sleep(args.idle_s)
            idle_rss = rss_bytes(processor.pid)
            out = mp.get_context("spawn").Queue()
            opener = mp.get_context("spawn").Process(
                target=_opener_process,
                args=(address, args.behaviors, args.per_session, args.hold_s, time.time() + 3.0, out),
            )
            opener.start()
            held_rss = 0
            while opener.is_alive() and out.empty():
                held_rss = max(held_rss, rss_bytes(processor.pid))
                time.sleep(0.1)
            opening, opened, closing, closed, refused = out.get(timeout=600)
            opener.join()
            time.sleep(args.idle_s)
            stop.set()
            good.join()
            after_rss = rss_bytes(processor.pid)
        finally:
            processor.terminate()
            processor.wait(30)
    steps = result[0]
    windowed = [s for t, s in steps if opening <= t < closed + args.idle_s]
    slowest_at = max(((s, t) for t, s in steps if opening <= t < closed + args.idle_s), default=(0.0, opening))[1]
    return {
        "behaviors": args.behaviors,
        "sessions": -(-args.behaviors // args.per_session),
        "hellos_refused": refused,
        "good_steps": len(windowed),
        "slowest_step_ms": round(1000 * max(windowed, default=0.0), 1),
        "slowest_step_opening_ms": round(_slowest_ms(steps, opening, opened), 1),
        "slowest_step_holding_ms": round(_slowest_ms(steps, opened, closing), 1),
        "slowest_step_closing_ms": round(_slowest_ms(steps, closing, closed + args.idle_s), 1),
        "slowest_step_idle_ms": round(_slowest_ms(steps, 0.0, opening), 1),
        "p99_step_ms": round(1000 * float(np.quantile(windowed, 0.99)) if windowed else 0.0, 2),
        "slowest_step_at_s": round(slowest_at - opening, 2),
        "closing_at_s": round(closing - opening, 2),
        "open_s": round(opened - opening, 2),
        "close_s": round(closed - closing, 2),
        "processor_rss_idle_mb": round(idle_rss / 2**20, 1),
        "processor_rss_per_behavior_kib": round((held_rss - idle_rss) / args.behaviors / 1024, 2),
        "processor_rss_after_mb": round(after_rss / 2**20, 1),
    }


def main() -> None:
    import argparse
    import json
    import os
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script
    parser = argparse.ArgumentParser(description=MANY_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--behaviors", type=int, default=10_000, help="behaviors the opener declares, all live at once")
    parser.add_argument("--per-session", type=int, default=64, help="behaviors per session (the Hello cap)")
    parser.add_argument("--hold-s", type=float, default=5.0, help="how long they stay open once all are")
    parser.add_argument("--agents", type=int, default=16, help="agents of the well-behaved client")
    parser.add_argument("--idle-s", type=float, default=3.0, help="the good client alone, before and after")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    figures = many_behaviors_benchmark(args)
    print(json.dumps({"workload": "many_behaviors", **figures}))


MANY_DOC = """Many behaviors at once: a well-behaved client's slowest step while N behaviors open and close.

A ``stepstream processor`` process (any behavior accepted, ``default_settings``; no trainer, so its queues drop
their oldest trajectories instead of holding the client back); one well-behaved client steps
``--agents`` agents of its behavior back to back; after ``--idle-s`` a process of its own opens
``ceil(--behaviors / --per-session)`` sessions at once, each declaring ``--per-session`` new behaviors (within the
Hello cap), holds them ``--hold-s`` once every Hello is answered, and ends them all. Prints one JSON line:
the good client's slowest step (overall, when it began and per phase: opening, holding, closing, idle before),
its p99, and
the processor's RSS per live behavior (peak while held, less idle, over the behaviors).

usage: hostile.py [--behaviors 10000] [--per-session 64] [--hold-s 5] [--agents 16] [--idle-s 3]
"""


if __name__ == "__main__":
    main()
