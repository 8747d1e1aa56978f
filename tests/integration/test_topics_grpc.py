"""The topics over gRPC: a real ProcessorServer on loopback and the real trainer-side clients.

Trajectories are published straight into the server's in-process topic (``server.topics``) and
taken through ``Subscribe`` by ``GrpcTrajectorySubscription``; policies go through
``PublishPolicy`` / ``GetPolicyStatus`` with ``GrpcPolicyPublisher``. The server runs on the test's
event loop, so every blocking client call runs in a worker thread (``asyncio.to_thread``), or the
test uses ``aget``. Stalls are shown by state, never by sleeping; every wait has a liveness bound.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import grpc
import numpy as np
import pytest

from common.errors import DeadlineExceededError, ProtocolError, TopicClosedError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.topics import MAX_POLICY_VERSION, Deduplicator, Delivery, FullPolicy, TopicRegistry, TrajectorySubscription
from common.topics.grpc_transport import GrpcPolicyPublisher, GrpcTrajectorySubscription, connect_trajectories
from common.trajectory import Trajectory, TrajectoryId
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.servicer import delivery_batches
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.integration.conftest import StartProcessor
from tests.policies import build_mlp_policy_update

BEHAVIOR = "Walker"
LIVENESS_S = 10.0
OBS_SIZE, ACTION_SIZE = 3, 2


def make_trajectory(sequence: int, session_id: str = "s0", steps: int = 2) -> Trajectory:
    """A small continuous-action trajectory of ``steps`` experiences, told apart by ``sequence``."""
    return Trajectory(
        id=TrajectoryId(session_id, agent_id=7, sequence=sequence),
        behavior_name=BEHAVIOR,
        obs=[np.full((steps, OBS_SIZE), sequence, dtype=np.float32)],
        next_obs=[np.zeros(OBS_SIZE, dtype=np.float32)],
        continuous_actions=np.zeros((steps, ACTION_SIZE), dtype=np.float32),
        discrete_actions=np.zeros((steps, 0), dtype=np.int32),
        continuous_log_probs=np.zeros((steps, ACTION_SIZE), dtype=np.float32),
        discrete_log_probs=np.zeros((steps, 0), dtype=np.float32),
        prev_continuous_actions=np.zeros((steps, ACTION_SIZE), dtype=np.float32),
        prev_discrete_actions=np.zeros((steps, 0), dtype=np.int32),
        action_mask=None,
        rewards=np.arange(steps, dtype=np.float32),
        done=np.zeros(steps, dtype=bool),
        policy_versions=np.full(steps, sequence, dtype=np.int64),
        done_reached=False,
        interrupted=False,
    )


def settings(*subscribers: str, queue_size: int = 64, full_policy: FullPolicy = FullPolicy.BLOCK) -> ProcessorSettings:
    """Settings whose BEHAVIOR topic declares ``subscribers`` at start, so publishes wait for them."""
    return ProcessorSettings(
        behaviors={BEHAVIOR: BehaviorRuntime()},
        declared_subscribers=subscribers or ("trainer",),
        trajectory_queue_size=queue_size,
        full_policy=full_policy,
    )


async def auntil(condition: Callable[[], bool]) -> None:
    """Poll ``condition()`` until it holds (a liveness bound, not a timing assertion)."""
    deadline = time.monotonic() + LIVENESS_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def take(
    subscription: TrajectorySubscription[Trajectory], count: int, *, ack: bool = True
) -> list[Delivery[Trajectory]]:
    """Take exactly ``count`` deliveries with ``aget`` (acking them unless told not to)."""
    taken: list[Delivery[Trajectory]] = []
    while len(taken) < count:
        deliveries = await subscription.aget(count - len(taken), timeout_s=LIVENESS_S)
        assert deliveries, f"only {len(taken)} of {count} trajectories arrived"
        taken.extend(deliveries)
        if ack:
            assert subscription.ack(d.tag for d in deliveries) == len(deliveries)
    return taken


def sequences(deliveries: list[Delivery[Trajectory]]) -> list[int]:
    return [d.item.id.sequence for d in deliveries]


def policy_update(version: int) -> pb.PolicyUpdate:
    return build_mlp_policy_update(BEHAVIOR, [(OBS_SIZE,)], pb.ActionSpec(continuous_size=ACTION_SIZE), version, seed=0)


def trainer_thread(address: str, subscriber_name: str, count: int) -> list[int]:
    """What a trainer process does: blocking ``get`` and ``ack`` in its loop, then ``detach`` (joins)."""
    sequences_seen: list[int] = []
    with GrpcTrajectorySubscription(address, BEHAVIOR, subscriber_name) as subscription:
        while len(sequences_seen) < count:
            deliveries = subscription.get(max_items=2, timeout_s=LIVENESS_S)
            assert deliveries, "no trajectory within the liveness bound"
            sequences_seen += [d.item.id.sequence for d in deliveries]
            subscription.ack(d.tag for d in deliveries)
    return sequences_seen


async def test_fan_out_to_two_remote_subscribers(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings("ppo", "probe"))
    topic = server.topics.trajectories(BEHAVIOR)
    for sequence in range(5):  # queued in both durable queues before anyone subscribes
        await topic.publish(make_trajectory(sequence))
    ppo = asyncio.ensure_future(asyncio.to_thread(trainer_thread, address, "ppo", 6))
    with GrpcTrajectorySubscription(address, BEHAVIOR, "probe", max_buffered=1) as probe:  # a tiny local buffer
        await topic.publish(make_trajectory(5))
        got_probe = await take(probe, 6)
        assert sequences(got_probe) == list(range(6))
        np.testing.assert_array_equal(got_probe[3].item.obs[0], make_trajectory(3).obs[0])  # decoded intact
        assert probe.stats().acked == 6
    assert await asyncio.wait_for(ppo, LIVENESS_S) == list(range(6))
    await auntil(lambda: all(s.acked == 6 and s.in_flight == 0 and s.depth == 0 for s in topic.stats().subscribers.values()))


async def test_block_backpressure_stalls_until_the_remote_subscriber_acks(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings(queue_size=2))
    topic = server.topics.trajectories(BEHAVIOR)
    with GrpcTrajectorySubscription(address, BEHAVIOR, "trainer") as trainer:
        await topic.publish(make_trajectory(0))
        await topic.publish(make_trajectory(1))
        paused = await take(trainer, 2, ack=False)  # delivered, never acked: the queue is full
        stalled = asyncio.ensure_future(topic.publish(make_trajectory(2)))
        await auntil(lambda: topic.stats().blocked_publishers == 1)
        assert not stalled.done()
        assert topic.stats().subscribers["trainer"].in_flight == 2

        assert await trainer.aget(timeout_s=0) == []  # nothing else was published
        assert trainer.ack(d.tag for d in paused) == 2
        await asyncio.wait_for(stalled, LIVENESS_S)
        assert sequences(await take(trainer, 1)) == [2]
        assert topic.stats().blocked_publishers == 0


async def test_drop_oldest_counts_its_drops(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings(queue_size=2, full_policy=FullPolicy.DROP_OLDEST))
    topic = server.topics.trajectories(BEHAVIOR)
    for sequence in range(5):
        await topic.publish(make_trajectory(sequence))  # never waits
    stats = topic.stats()
    assert stats.subscribers["trainer"].dropped == 3 and stats.dropped == 3
    with GrpcTrajectorySubscription(address, BEHAVIOR, "trainer") as trainer:
        assert sequences(await take(trainer, 2)) == [3, 4]  # the newest survive


async def test_unacked_are_redelivered_to_the_next_subscriber_and_deduplicated(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings())
    topic = server.topics.trajectories(BEHAVIOR)
    dedup: Deduplicator[TrajectoryId] = Deduplicator(capacity=256)
    kept: list[TrajectoryId] = []
    for sequence in range(3):
        await topic.publish(make_trajectory(sequence))

    first = GrpcTrajectorySubscription(address, BEHAVIOR, "trainer")
    deliveries = await take(first, 3, ack=False)
    kept += [d.item.id for d in deliveries if not dedup.seen(d.item.id)]
    first.ack([deliveries[0].tag])  # the trainer "crashes" before acking the other two
    await asyncio.to_thread(first.detach)  # half-close after the ack; waits for the server's end
    with pytest.raises(TopicClosedError):
        await first.aget(timeout_s=0)
    assert first.ack([deliveries[1].tag]) == 0
    assert not topic.stats().subscribers["trainer"].attached

    await topic.publish(make_trajectory(3))
    with GrpcTrajectorySubscription(address, BEHAVIOR, "trainer") as second:
        again = await take(second, 3)
    kept += [d.item.id for d in again if not dedup.seen(d.item.id)]
    assert sequences(again) == [1, 2, 3]
    assert dedup.duplicates == 2
    assert [key.sequence for key in kept] == [0, 1, 2, 3]
    assert topic.stats().subscribers["trainer"].redelivered == 2


async def test_policy_latest_wins_through_publish_policy(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings())
    with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
        before = await asyncio.to_thread(publisher.status)
        assert before.highest_version == -1 and not before.HasField("brain_parameters")

        assert await asyncio.to_thread(publisher.publish, policy_update(3), 3)
        assert await asyncio.to_thread(lambda: publisher.highest_version) == 3
        assert not await asyncio.to_thread(publisher.publish, policy_update(2), 2)  # older: ignored
        assert not await asyncio.to_thread(publisher.publish, policy_update(3), 3)  # equal: ignored
        assert await asyncio.to_thread(lambda: publisher.highest_version) == 3
        assert await asyncio.to_thread(publisher.publish, policy_update(0), 4)  # the version argument wins

    latest = server.topics.policies(BEHAVIOR).latest()
    assert latest is not None and latest[0] == 4 and latest[1].version == 4
    assert server.topics.policies(BEHAVIOR).ignored == 2


async def test_a_refused_policy_is_a_protocol_error(start_processor: StartProcessor) -> None:
    _, address = await start_processor(settings())
    broken = policy_update(1)
    broken.artifact.model = b"not a flatbuffer"
    with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
        with pytest.raises(ProtocolError):
            await asyncio.to_thread(publisher.publish, broken, 1)
        assert await asyncio.to_thread(lambda: publisher.highest_version) == -1


async def test_wait_for_brain_parameters_once_an_env_client_declares_the_behavior(start_processor: StartProcessor) -> None:
    _, address = await start_processor(settings())
    params = BrainParameters(BEHAVIOR, (ObservationSpec((OBS_SIZE,), np.dtype(np.float32)),), ActionSpec(ACTION_SIZE))
    with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
        with pytest.raises(DeadlineExceededError):
            await asyncio.to_thread(publisher.wait_for_brain_parameters, timeout_s=0.3)
        waiting = asyncio.ensure_future(asyncio.to_thread(publisher.wait_for_brain_parameters, timeout_s=LIVENESS_S))
        async with grpc.aio.insecure_channel(address) as channel:
            step = pb_grpc.AgentProcessorStub(channel).Step()
            hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[params.to_proto()])
            await step.write(pb.StepRequest(hello=hello))
            assert (await step.read()).WhichOneof("payload") == "hello_reply"
            assert await asyncio.wait_for(waiting, LIVENESS_S) == params
            await step.done_writing()


async def test_a_refused_subscription_is_a_protocol_error(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings(queue_size=64))
    server.topics.trajectories(BEHAVIOR).declare("odd", max_size=3)  # conflicts with the server's queue size
    with GrpcTrajectorySubscription(address, BEHAVIOR, "odd") as odd:
        with pytest.raises(ProtocolError) as refused:
            await odd.aget(timeout_s=LIVENESS_S)
        assert refused.value.precondition  # FAILED_PRECONDITION, mapped back
        assert not odd.stats().attached


async def test_a_server_stop_ends_the_subscription_with_topic_closed(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings())
    with GrpcTrajectorySubscription(address, BEHAVIOR, "trainer") as trainer:
        await server.topics.trajectories(BEHAVIOR).publish(make_trajectory(0))
        assert sequences(await take(trainer, 1)) == [0]
        await server.stop(0.5)
        with pytest.raises(TopicClosedError):
            await trainer.aget(timeout_s=LIVENESS_S)
        assert trainer.ack([0]) == 0


async def test_connect_trajectories_by_registry_or_address(start_processor: StartProcessor) -> None:
    registry: TopicRegistry[pb.PolicyUpdate] = TopicRegistry()
    local = connect_trajectories(registry, BEHAVIOR, "trainer")
    await registry.trajectories(BEHAVIOR).publish(make_trajectory(0))
    assert sequences(await take(local, 1)) == [0]
    local.detach()

    server, address = await start_processor(settings())
    remote = connect_trajectories(address, BEHAVIOR, "trainer")
    await server.topics.trajectories(BEHAVIOR).publish(make_trajectory(1))
    assert sequences(await take(remote, 1)) == [1]
    remote.detach()


async def test_the_server_refuses_anything_but_acks_after_subscribe_open(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings())
    await server.topics.trajectories(BEHAVIOR).publish(make_trajectory(0))
    open_message = pb.SubscriberMessage(open=pb.SubscribeOpen(behavior_name=BEHAVIOR, subscriber_name="trainer"))
    async with grpc.aio.insecure_channel(address) as channel:
        call = pb_grpc.AgentProcessorStub(channel).Subscribe()
        await call.write(open_message)
        assert len((await call.read()).deliveries) == 1
        await call.write(open_message)
        assert await asyncio.wait_for(call.code(), LIVENESS_S) is grpc.StatusCode.FAILED_PRECONDITION
    await auntil(lambda: server.topics.trajectories(BEHAVIOR).stats().subscribers["trainer"].depth == 1)  # requeued


def test_delivery_batches_stay_under_their_byte_limit() -> None:
    deliveries = [Delivery(tag, make_trajectory(tag, steps=8)) for tag in range(5)]
    largest = max(d.item.to_proto().ByteSize() for d in deliveries)  # sequence 0 encodes a little smaller
    batches = list(delivery_batches(deliveries, max_bytes=2 * largest))
    assert [len(b.deliveries) for b in batches] == [2, 2, 1]
    assert [d.delivery_tag for b in batches for d in b.deliveries] == list(range(5))
    assert [len(b.deliveries) for b in delivery_batches(deliveries, max_bytes=1)] == [1] * 5  # a lone large one still goes


async def test_a_published_policy_is_loaded_once(start_processor: StartProcessor, monkeypatch: pytest.MonkeyPatch) -> None:
    """PublishPolicy loads the artifact to validate it; the behavior then acts with that very Policy."""
    from processor.inference import Policy

    loads: list[int] = []
    load = Policy.from_update.__func__  # type: ignore[attr-defined]

    def counting_load(cls: type[Policy], update: pb.PolicyUpdate) -> Policy:
        loads.append(update.version)
        return load(cls, update)  # type: ignore[no-any-return]

    monkeypatch.setattr(Policy, "from_update", classmethod(counting_load))
    server, address = await start_processor(settings())
    params = BrainParameters(BEHAVIOR, (ObservationSpec((OBS_SIZE,), np.dtype(np.float32)),), ActionSpec(ACTION_SIZE))
    async with grpc.aio.insecure_channel(address) as channel:
        step = pb_grpc.AgentProcessorStub(channel).Step()
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[params.to_proto()])
        await step.write(pb.StepRequest(hello=hello))
        assert (await step.read()).WhichOneof("payload") == "hello_reply"
        with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
            for version in (1, 2):
                assert await asyncio.to_thread(publisher.publish, policy_update(version), version)
                batcher = server.behaviors.get(BEHAVIOR).batcher  # type: ignore[union-attr]
                deadline = time.monotonic() + LIVENESS_S
                while (batcher.policy is None or batcher.policy.version != version) and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                assert batcher.policy is not None and batcher.policy.version == version
        await step.done_writing()
    assert loads == [1, 2], "each version was loaded once, by PublishPolicy"


# -- hostile peers (issue 13, points 2-4) ----------------------------------------------------------


async def open_raw_subscribe(channel: grpc.aio.Channel, subscriber_name: str) -> grpc.aio.StreamStreamCall:
    """A stranger's Subscribe, written with its own stub: the open only, never an ack."""
    call = pb_grpc.AgentProcessorStub(channel).Subscribe()
    await call.write(pb.SubscriberMessage(open=pb.SubscribeOpen(behavior_name=BEHAVIOR, subscriber_name=subscriber_name)))
    return call


async def test_a_stranger_cannot_displace_the_trainer_and_a_newcomer_waits_for_the_name(
    start_processor: StartProcessor, caplog: pytest.LogCaptureFixture
) -> None:
    """Holder wins: a second Subscribe under a live name gets ALREADY_EXISTS; the trainer's stream is untouched; a
    real client refused so retries (a WARNING per try) and attaches once the holder has gone."""
    server, address = await start_processor(settings())
    topic = server.topics.trajectories(BEHAVIOR)
    trainer = GrpcTrajectorySubscription(address, BEHAVIOR, "trainer")
    await topic.publish(make_trajectory(0))
    assert sequences(await take(trainer, 1)) == [0]
    async with grpc.aio.insecure_channel(address) as channel:
        stranger = await open_raw_subscribe(channel, "trainer")
        assert await asyncio.wait_for(stranger.code(), LIVENESS_S) is grpc.StatusCode.ALREADY_EXISTS
        assert "already attached" in await stranger.details()
    await topic.publish(make_trajectory(1))
    assert sequences(await take(trainer, 1)) == [1], "the trainer's stream goes on"

    newcomer = GrpcTrajectorySubscription(address, BEHAVIOR, "trainer")
    await auntil(lambda: "subscribing again" in caplog.text)
    assert not newcomer.stats().attached and trainer.stats().attached
    await topic.publish(make_trajectory(2))
    assert sequences(await take(trainer, 1)) == [2]
    await asyncio.to_thread(trainer.detach)
    await topic.publish(make_trajectory(3))
    assert sequences(await take(newcomer, 1)) == [3], "the newcomer attached once the name was free"
    assert newcomer.stats().attached
    await asyncio.to_thread(newcomer.detach)


async def test_a_policy_version_above_the_bound_is_refused_and_the_highest_stays_followable(
    start_processor: StartProcessor,
) -> None:
    """2**63 - 1 was accepted, and a trainer resuming at highest + 1 overflowed int64; versions stop at 2**53."""
    server, address = await start_processor(settings())
    with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
        assert await asyncio.to_thread(publisher.publish, policy_update(1), 1)
        for version in (2**63 - 1, MAX_POLICY_VERSION + 1):
            with pytest.raises(ProtocolError) as refused:
                await asyncio.to_thread(publisher.publish, policy_update(1), version)
            assert not refused.value.precondition  # INVALID_ARGUMENT
            assert str(MAX_POLICY_VERSION) in str(refused.value)
            assert await asyncio.to_thread(lambda: publisher.highest_version) == 1
        # The bound itself is a valid version, but not the next one (processor.behaviors): not accepted.
        assert not await asyncio.to_thread(publisher.publish, policy_update(1), MAX_POLICY_VERSION)
    assert server.topics.policies(BEHAVIOR).highest_version == 1
    with pytest.raises(ValueError, match="version"):  # in process too
        server.topics.policies(BEHAVIOR).publish(policy_update(1), MAX_POLICY_VERSION + 1)


async def test_a_subscribe_under_an_undeclared_name_is_refused_and_cannot_stall_publishers(
    start_processor: StartProcessor,
) -> None:
    """Any name used to get a durable ``block`` queue that nobody drained: the env clients stalled for good."""
    server, address = await start_processor(settings(queue_size=2))
    topic = server.topics.trajectories(BEHAVIOR)
    async with grpc.aio.insecure_channel(address) as channel:
        stranger = await open_raw_subscribe(channel, "stranger")
        assert await asyncio.wait_for(stranger.code(), LIVENESS_S) is grpc.StatusCode.FAILED_PRECONDITION
        assert "not declared" in await stranger.details()
    assert list(topic.stats().subscribers) == ["trainer"], "a refused name creates no queue"
    with GrpcTrajectorySubscription(address, BEHAVIOR, "trainer") as trainer:
        for sequence in range(6):  # three times the queue size: only the trainer's acks make room
            await asyncio.wait_for(topic.publish(make_trajectory(sequence)), LIVENESS_S)
            assert sequences(await take(trainer, 1)) == [sequence]


async def test_a_queue_whose_subscriber_is_gone_too_long_stops_blocking_visibly(start_processor: StartProcessor) -> None:
    """A ``block`` queue holds publishers back for ``subscriber_release_after_s`` after its subscriber left, then drops."""
    from processor.metrics import ProcessorCollector

    release_s = 0.3
    server, address = await start_processor(replace(settings(queue_size=2), subscriber_release_after_s=release_s))
    topic = server.topics.trajectories(BEHAVIOR)

    def released_gauge() -> float:
        for family in ProcessorCollector(server).collect():
            if family.name == "stepstream_processor_queue_released":
                return next(s.value for s in family.samples if s.labels["subscriber"] == "trainer")
        raise AssertionError("no queue_released metric")

    await topic.publish(make_trajectory(0))
    await topic.publish(make_trajectory(1))
    publishing = asyncio.ensure_future(topic.publish(make_trajectory(2)))
    await asyncio.sleep(2 * release_s)
    assert not publishing.done(), "never attached: the queue waits for its trainer"
    trainer = GrpcTrajectorySubscription(address, BEHAVIOR, "trainer")
    assert sequences(await take(trainer, 1)) == [0]
    await asyncio.wait_for(publishing, LIVENESS_S)
    await asyncio.to_thread(trainer.detach)  # the queue is full again (1 requeued, 2)
    gone_at = time.monotonic()
    await asyncio.wait_for(topic.publish(make_trajectory(3)), LIVENESS_S)  # released: goes through, dropping the oldest
    assert time.monotonic() - gone_at >= release_s * 0.9, "it held publishers back for the release time first"
    stats = topic.stats().subscribers["trainer"]
    assert stats.released and stats.dropped == 1 and released_gauge() == 1
    with GrpcTrajectorySubscription(address, BEHAVIOR, "trainer") as again:
        assert sequences(await take(again, 2, ack=False)) == [2, 3]
        assert not topic.stats().subscribers["trainer"].released and released_gauge() == 0
        blocked = asyncio.ensure_future(topic.publish(make_trajectory(4)))
        await asyncio.sleep(2 * release_s)
        assert not blocked.done(), "attached again: the queue blocks again"
        blocked.cancel()
