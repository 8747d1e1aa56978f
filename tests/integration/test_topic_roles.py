"""The topic roles' contract, one test body per rule, run against every transport.

``memory`` is the in-process topics; ``grpc`` a real ``ProcessorServer`` on loopback with the
trainer-side gRPC clients; ``jetstream`` a real ``nats-server`` (``tests.nats_server``) with
``common.topics.jetstream``. Each ``Transport`` opens the roles of one behavior: a trajectory
sink whose subscribers are declared up front (as the processor declares them at start), a way to
subscribe by name, and a policy sink (the trainer's side) and source (the processor's side).

Every role call that may block runs in a worker thread (``asyncio.to_thread``) or is awaited
(``publish``, ``aget``): the gRPC server runs on the test's loop. Stalls are shown by state
(``blocked_publishers``, a task not done), never by sleeping; waits have liveness bounds.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from common.errors import TopicClosedError
from common.topics import (
    Deduplicator,
    Delivery,
    FullPolicy,
    PolicySink,
    PolicySource,
    PolicyTopic,
    TrajectorySubscription,
    TrajectoryTopic,
)
from common.topics.grpc_transport import GrpcPolicyPublisher, GrpcTrajectorySubscription
from common.topics.jetstream import JetStreamTopics
from common.trajectory import Trajectory, TrajectoryId
from protos import pb
from tests.integration.conftest import StartProcessor
from tests.integration.test_topics_grpc import BEHAVIOR, LIVENESS_S, auntil, make_trajectory, sequences, settings, take
from tests.nats_server import NatsServer
from tests.policies import build_mlp_policy_update

TRANSPORTS = ("memory", "grpc", "jetstream")


@functools.lru_cache(maxsize=1)
def _policy_template() -> pb.PolicyUpdate:
    return build_mlp_policy_update(BEHAVIOR, [(3,)], pb.ActionSpec(continuous_size=2), 0, seed=0)


def policy_update(version: int) -> pb.PolicyUpdate:
    """A real, loadable policy of BEHAVIOR stamped ``version`` (the gRPC processor validates artifacts)."""
    update = pb.PolicyUpdate()
    update.CopyFrom(_policy_template())
    update.version = version
    return update


@dataclass
class Roles:
    """The roles of BEHAVIOR on one transport, as a processor and a trainer see them."""

    sink: Any
    """``TrajectorySink`` with ``stats().blocked_publishers`` (the processor's side)."""
    subscribe: Callable[[str], TrajectorySubscription[Trajectory]]
    """Attach a named subscriber (the trainer's side); may block, call it in a thread."""
    dropped: Callable[[str, TrajectorySubscription[Trajectory]], int]
    """What drop_oldest dropped for that subscriber, as far as the transport can tell."""
    policy_sink: PolicySink[pb.PolicyUpdate]
    policy_source: PolicySource[pb.PolicyUpdate]
    flags_redeliveries: bool = True
    """Whether ``Delivery.redelivered`` is set (the gRPC wire does not carry it)."""
    stores_a_republished_id_once: bool = False
    """Whether the broker drops a second publish of one trajectory id (JetStream's Nats-Msg-Id)."""
    closers: list[Callable[[], None]] = field(default_factory=list)


class Transport:
    """Opens ``Roles`` with the named subscribers declared before any publish."""

    def __init__(self, kind: str, start_processor: StartProcessor, tmp_path: Path) -> None:
        self.kind = kind
        self._start_processor = start_processor
        self._tmp_path = tmp_path
        self._opened: list[Roles] = []
        self._nats: NatsServer | None = None

    async def open(self, *subscribers: str, max_size: int = 64, full_policy: FullPolicy = FullPolicy.BLOCK) -> Roles:
        roles = await getattr(self, f"_open_{self.kind}")(subscribers or ("trainer",), max_size, full_policy)
        self._opened.append(roles)
        return roles

    async def _open_memory(self, subscribers: tuple[str, ...], max_size: int, full_policy: FullPolicy) -> Roles:
        topic: TrajectoryTopic[Trajectory] = TrajectoryTopic(f"trajectories/{BEHAVIOR}")
        for name in subscribers:
            topic.declare(name, max_size, full_policy)
        policies: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(f"policies/{BEHAVIOR}")
        return Roles(
            sink=topic,
            subscribe=topic.subscribe,
            dropped=lambda name, unused_sub: topic.stats().subscribers[name].dropped,
            policy_sink=policies,
            policy_source=policies,
        )

    async def _open_grpc(self, subscribers: tuple[str, ...], max_size: int, full_policy: FullPolicy) -> Roles:
        server, address = await self._start_processor(settings(*subscribers, queue_size=max_size, full_policy=full_policy))
        topic = server.topics.trajectories(BEHAVIOR)
        publisher = GrpcPolicyPublisher(address, BEHAVIOR)
        return Roles(
            sink=topic,
            subscribe=lambda name: GrpcTrajectorySubscription(address, BEHAVIOR, name),
            dropped=lambda name, unused_sub: topic.stats().subscribers[name].dropped,
            policy_sink=publisher,
            policy_source=server.topics.policies(BEHAVIOR),
            flags_redeliveries=False,
            closers=[publisher.close],
        )

    async def _open_jetstream(self, subscribers: tuple[str, ...], max_size: int, full_policy: FullPolicy) -> Roles:
        if self._nats is None:
            self._nats = NatsServer(self._tmp_path / "nats").start()
        processor = JetStreamTopics(self._nats.url, name="processor")
        trainer = JetStreamTopics(self._nats.url, name="trainer", follow_policies=False)
        topic = processor.trajectories(BEHAVIOR)
        for name in subscribers:
            await asyncio.to_thread(topic.declare, name, max_size, full_policy)
        return Roles(
            sink=topic,
            subscribe=trainer.trajectories(BEHAVIOR).subscribe,
            dropped=lambda unused_name, sub: sub.stats().dropped,
            policy_sink=await asyncio.to_thread(trainer.policies, BEHAVIOR),
            policy_source=await asyncio.to_thread(processor.policies, BEHAVIOR),
            stores_a_republished_id_once=True,
            closers=[trainer.close, processor.close],
        )

    def close(self) -> None:
        for roles in self._opened:
            for close in roles.closers:
                close()
        if self._nats is not None:
            self._nats.stop()


@pytest.fixture(params=TRANSPORTS)
async def transport(
    request: pytest.FixtureRequest, start_processor: StartProcessor, tmp_path: Path
) -> AsyncIterator[Transport]:
    """Each role test once per transport; everything it opened is closed (and the broker stopped) at teardown."""
    opened = Transport(request.param, start_processor, tmp_path)
    try:
        yield opened
    finally:
        await asyncio.to_thread(opened.close)


async def subscribe(roles: Roles, name: str) -> TrajectorySubscription[Trajectory]:
    return await asyncio.to_thread(roles.subscribe, name)


# -- trajectories ----------------------------------------------------------------------------------


async def test_fan_out_to_every_declared_subscriber(transport: Transport) -> None:
    roles = await transport.open("ppo", "probe")
    for sequence in range(5):  # kept for both before either subscribes
        await roles.sink.publish(make_trajectory(sequence), LIVENESS_S)
    ppo, probe = await subscribe(roles, "ppo"), await subscribe(roles, "probe")
    got_ppo = await take(ppo, 5)
    assert sequences(got_ppo) == list(range(5))
    assert sequences(await take(probe, 2)) == [0, 1]
    assert sequences(await take(probe, 3)) == [2, 3, 4]
    assert got_ppo[3].item.rewards.tolist() == make_trajectory(3).rewards.tolist()  # decoded intact
    for subscription in (ppo, probe):
        assert await subscription.aget(timeout_s=0) == []
        await asyncio.to_thread(subscription.detach)


async def test_block_stalls_the_publisher_until_an_ack_frees_room(transport: Transport) -> None:
    roles = await transport.open(max_size=2)
    trainer = await subscribe(roles, "trainer")
    await roles.sink.publish(make_trajectory(0), LIVENESS_S)
    await roles.sink.publish(make_trajectory(1), LIVENESS_S)
    paused = await take(trainer, 2, ack=False)  # delivered, not acked: still counts against max_size
    stalled = asyncio.ensure_future(roles.sink.publish(make_trajectory(2), LIVENESS_S))
    await auntil(lambda: roles.sink.stats().blocked_publishers == 1)
    assert not stalled.done()
    assert trainer.ack(d.tag for d in paused) == 2
    await asyncio.wait_for(stalled, LIVENESS_S)
    assert sequences(await take(trainer, 1)) == [2]
    assert roles.sink.stats().blocked_publishers == 0
    assert roles.sink.stats().blocked_seconds > 0
    await asyncio.to_thread(trainer.detach)


async def test_drop_oldest_keeps_the_newest_and_counts_its_drops(transport: Transport) -> None:
    roles = await transport.open(max_size=3, full_policy=FullPolicy.DROP_OLDEST)
    trainer = await subscribe(roles, "trainer")
    for sequence in range(10):
        await roles.sink.publish(make_trajectory(sequence), timeout_s=0)  # never waits
    assert sequences(await take(trainer, 3)) == [7, 8, 9]
    assert roles.dropped("trainer", trainer) == 7
    await asyncio.to_thread(trainer.detach)


async def test_unacked_are_redelivered_after_the_subscriber_goes(transport: Transport) -> None:
    roles = await transport.open(max_size=8)
    for sequence in range(4):
        await roles.sink.publish(make_trajectory(sequence), LIVENESS_S)
    dedup: Deduplicator[TrajectoryId] = Deduplicator(capacity=64)
    kept: list[TrajectoryId] = []

    first = await subscribe(roles, "trainer")
    deliveries = await take(first, 3, ack=False)
    kept += [d.item.id for d in deliveries if not dedup.seen(d.item.id)]
    first.ack([deliveries[0].tag])  # 1 and 2 are taken in, but the trainer dies before acking them
    await asyncio.to_thread(first.detach)
    assert first.ack([deliveries[1].tag]) == 0
    with pytest.raises(TopicClosedError):
        await first.aget(timeout_s=0)

    for sequence in (4, 5):
        await roles.sink.publish(make_trajectory(sequence), LIVENESS_S)
    second = await subscribe(roles, "trainer")
    again = await take(second, 5)
    assert sequences(again) == [1, 2, 3, 4, 5]
    if roles.flags_redeliveries:
        assert [d.redelivered for d in again] == [True, True, False, False, False]
    kept += [d.item.id for d in again if not dedup.seen(d.item.id)]
    assert [key.sequence for key in kept] == [0, 1, 2, 3, 4, 5]
    assert dedup.duplicates == 2
    await asyncio.to_thread(second.detach)


async def test_a_republished_trajectory_is_taken_in_once(transport: Transport) -> None:
    """A publish retried after a lost acknowledgement: the broker or the subscriber's Deduplicator drops the copy."""
    roles = await transport.open()
    for sequence in (0, 0, 1):
        await roles.sink.publish(make_trajectory(sequence), LIVENESS_S)
    trainer = await subscribe(roles, "trainer")
    expected = 2 if roles.stores_a_republished_id_once else 3
    deliveries: list[Delivery[Trajectory]] = await take(trainer, expected)
    assert await trainer.aget(timeout_s=0) == []
    dedup: Deduplicator[TrajectoryId] = Deduplicator(capacity=64)
    assert [d.item.id.sequence for d in deliveries if not dedup.seen(d.item.id)] == [0, 1]
    await asyncio.to_thread(trainer.detach)


# -- policies --------------------------------------------------------------------------------------


async def test_policy_latest_wins_and_older_versions_are_ignored(transport: Transport) -> None:
    roles = await transport.open()
    sink, source = roles.policy_sink, roles.policy_source
    assert await asyncio.to_thread(lambda: sink.highest_version) == -1
    assert source.latest() is None
    # Each publish the next version: the processor accepts no jump (tests/integration/test_policy_versions.py).
    assert await asyncio.to_thread(sink.publish, policy_update(1), 1)
    assert await asyncio.to_thread(sink.publish, policy_update(2), 2)
    assert await asyncio.to_thread(sink.publish, policy_update(3), 3)
    assert not await asyncio.to_thread(sink.publish, policy_update(2), 2)  # older: ignored
    assert not await asyncio.to_thread(sink.publish, policy_update(3), 3)  # equal: ignored
    assert await asyncio.to_thread(lambda: sink.highest_version) == 3
    newest = await source.await_newer(2, timeout_s=LIVENESS_S)
    assert newest is not None and newest[0] == 3 and newest[1].version == 3
    assert source.highest_version == 3
    assert await source.await_newer(3, timeout_s=0.05) is None


async def test_a_cancelled_aget_loses_nothing(transport: Transport) -> None:
    roles = await transport.open()
    trainer = await subscribe(roles, "trainer")
    waiting = asyncio.ensure_future(trainer.aget(10, timeout_s=LIVENESS_S))
    await asyncio.sleep(0.05)  # let it start waiting (a liveness aid, not a proof)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await roles.sink.publish(make_trajectory(7), LIVENESS_S)
    assert sequences(await take(trainer, 1)) == [7]
    assert await trainer.aget(timeout_s=0) == []
    await asyncio.to_thread(trainer.detach)
