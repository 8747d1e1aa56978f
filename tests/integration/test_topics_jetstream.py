"""What only the JetStream transport has: a broker that dies and comes back, payload limits, the Object Store.

Every test starts its own ``nats-server`` (``tests.nats_server``) on a free port with a temporary
store, and kills it with SIGKILL where it says so. The role contract shared with the other
transports is in ``test_topic_roles.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import nats
import numpy as np
import pytest

from common.errors import PublishInDoubtError, TopicFullError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.topics import TRAINER_SUBSCRIBER, Deduplicator
from common.topics.jetstream import JetStreamSubscription, JetStreamTopics, subject_token
from common.trajectory import Trajectory, TrajectoryId
from envclient.simple_env import simple_brain_parameters
from processor.behaviors import Behavior, BehaviorRuntime, ProcessorSettings
from processor.metrics import ProcessorCollector
from processor.server import ProcessorServer, ServerOptions
from processor.wire import TrajectorySize
from protos import pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.integration.test_hardening import hello, raw_step
from tests.integration.test_topics_grpc import BEHAVIOR, LIVENESS_S, auntil, make_trajectory, sequences, take
from tests.nats_server import NatsServer, nats_server
from tests.processor_fleet import IN_DOUBT_LINE

__all__ = ["nats_server"]  # the fixture, used by name below

RESTART_LIVENESS_S = 60.0


@pytest.fixture
def small_broker(tmp_path: Path) -> Iterator[NatsServer]:
    """A broker at NATS's default ``max_payload`` of 1 MB."""
    server = NatsServer(tmp_path / "nats-1mb", max_payload="1MB").start()
    try:
        yield server
    finally:
        server.stop()


def image_trajectory(sequence: int, steps: int = 64) -> Trajectory:
    """One 84x84x3 uint8 trajectory at time_horizon 64: about 1.35 MB encoded."""
    trajectory = make_trajectory(sequence, steps=steps)
    trajectory.obs = [np.zeros((steps, 84, 84, 3), dtype=np.uint8)]
    trajectory.next_obs = [np.zeros((84, 84, 3), dtype=np.uint8)]
    return trajectory


def trainer_subscription(topics: JetStreamTopics) -> JetStreamSubscription:
    """The trainer's subscription of BEHAVIOR (a context manager: detached on exit)."""
    return topics.trajectories(BEHAVIOR).subscribe(TRAINER_SUBSCRIBER)


def test_subject_token_is_injective_and_valid() -> None:
    assert subject_token("CartPole") == "CartPole"
    assert subject_token("My Walker.v2") == "My_20Walker_2Ev2"
    assert subject_token("a_b") != subject_token("a b")
    assert subject_token("é") == "_C3_A9"
    with pytest.raises(ValueError):
        subject_token("")


@pytest.mark.parametrize("timeout_s", [0.0, 0.05, 0.3])
def test_short_polls_take_what_is_stored(nats_server: NatsServer, timeout_s: float) -> None:
    """A trainer polls (``get(n, poll_s)``, trainer.loop): each short pull request lives long enough for the
    broker to deliver what it holds (one that expired at once took nothing, and the trainer never trained)."""
    processor = JetStreamTopics(nats_server.url, name="processor")
    trainer = JetStreamTopics(nats_server.url, name="trainer", follow_policies=False)
    try:
        topic = processor.trajectories(BEHAVIOR)
        topic.declare(TRAINER_SUBSCRIBER, 64)
        for sequence in range(5):
            topic.publish_blocking(make_trajectory(sequence), timeout_s=LIVENESS_S)
        with trainer_subscription(trainer) as subscription:
            taken: list[int] = []
            deadline = time.monotonic() + LIVENESS_S
            while len(taken) < 5 and time.monotonic() < deadline:
                deliveries = subscription.get(2, timeout_s=timeout_s)
                assert len(deliveries) <= 2
                taken.extend(d.item.id.sequence for d in deliveries)
                subscription.ack(d.tag for d in deliveries)
            assert taken == list(range(5))
    finally:
        trainer.close()
        processor.close()


async def test_broker_sigkill_mid_publish_loses_no_acknowledged_trajectory(nats_server: NatsServer) -> None:
    """SIGKILL the broker while a publisher and a subscriber run, restart it on the same store.

    Both reconnect by themselves; every trajectory whose publish the broker acknowledged reaches
    the subscriber, exactly once after its Deduplicator (a retried publish is stored once by
    ``Nats-Msg-Id``; an ack lost with the broker may bring a copy, which the Deduplicator drops).
    """
    count = 300
    processor = JetStreamTopics(nats_server.url, name="processor")
    trainer = JetStreamTopics(nats_server.url, name="trainer", follow_policies=False)
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER, 64)
    subscription = await asyncio.to_thread(trainer.trajectories(BEHAVIOR).subscribe, TRAINER_SUBSCRIBER)
    taken_in: list[int] = []
    deliveries_seen = 0
    done = threading.Event()

    def learner() -> None:  # the trainer's thread: take, "train", ack
        nonlocal deliveries_seen
        dedup: Deduplicator[TrajectoryId] = Deduplicator(capacity=4 * count)
        while not done.is_set():
            deliveries = subscription.get(32, timeout_s=0.5)
            deliveries_seen += len(deliveries)
            taken_in.extend(d.item.id.sequence for d in deliveries if not dedup.seen(d.item.id))
            subscription.ack(d.tag for d in deliveries)

    acknowledged: list[int] = []

    async def publisher() -> None:
        for sequence in range(count):
            await topic.publish(make_trajectory(sequence), timeout_s=RESTART_LIVENESS_S)
            acknowledged.append(sequence)

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    publishing = asyncio.ensure_future(publisher())
    try:
        await auntil(lambda: len(acknowledged) >= count // 3)
        nats_server.kill()
        killed_at = len(acknowledged)
        await asyncio.sleep(1.0)  # the broker is down for a while: the publisher waits, it does not fail
        assert not publishing.done()
        await asyncio.to_thread(nats_server.start)
        await asyncio.wait_for(publishing, RESTART_LIVENESS_S)
        deadline = time.monotonic() + RESTART_LIVENESS_S
        while len(taken_in) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        done.set()
        await asyncio.to_thread(thread.join, LIVENESS_S)
    assert killed_at < count
    assert acknowledged == list(range(count))
    assert sorted(taken_in) == acknowledged, "every acknowledged trajectory, exactly once"
    assert processor.connection.reconnects >= 1 and trainer.connection.reconnects >= 1
    assert topic.stats().blocked_seconds > 0  # the wait while the broker was down is counted
    await asyncio.to_thread(subscription.detach)
    await asyncio.to_thread(trainer.close)
    await asyncio.to_thread(processor.close)


async def test_pulls_and_policies_resume_after_a_restart_with_nothing_in_flight(nats_server: NatsServer) -> None:
    """A subscriber idle in ``aget`` and a policy follower both see what is published after a restart (nats.py#504)."""
    processor = JetStreamTopics(nats_server.url, name="processor")
    trainer = JetStreamTopics(nats_server.url, name="trainer", follow_policies=False)
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER)
    subscription = await asyncio.to_thread(trainer.trajectories(BEHAVIOR).subscribe, TRAINER_SUBSCRIBER)
    source = await asyncio.to_thread(processor.policies, BEHAVIOR)
    sink = await asyncio.to_thread(trainer.policies, BEHAVIOR)
    waiting = asyncio.ensure_future(subscription.aget(10, timeout_s=RESTART_LIVENESS_S))
    await asyncio.to_thread(nats_server.restart)
    await auntil(lambda: processor.connection.reconnects >= 1 and trainer.connection.reconnects >= 1)
    await topic.publish(make_trajectory(0), timeout_s=LIVENESS_S)
    assert sequences(await asyncio.wait_for(waiting, RESTART_LIVENESS_S)) == [0]
    update = pb.PolicyUpdate(behavior_name=BEHAVIOR)
    assert await asyncio.to_thread(sink.publish, update, 5)
    newest = await source.await_newer(-1, timeout_s=LIVENESS_S)
    assert newest is not None and newest[0] == 5
    for closing in (subscription.detach, trainer.close, processor.close):
        await asyncio.to_thread(closing)


async def test_a_trajectory_above_max_payload_is_refused_with_the_numbers(small_broker: NatsServer) -> None:
    """At the default 1 MB, a 1.35 MB image trajectory is refused before it is sent; the stream goes on."""
    processor = JetStreamTopics(small_broker.url, name="processor")
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER)
    big = image_trajectory(0)
    size = len(big.to_proto().SerializeToString())
    with pytest.raises(TopicFullError, match=rf"{size} bytes.*{topic.max_payload_bytes} bytes.*max_payload 1048576"):
        await topic.publish(big, timeout_s=LIVENESS_S)
    await topic.publish(make_trajectory(1), timeout_s=LIVENESS_S)
    with trainer_subscription(processor) as subscription:
        assert sequences(await take(subscription, 1)) == [1]
    await asyncio.to_thread(processor.close)


async def test_an_image_trajectory_fits_at_8_mb(nats_server: NatsServer) -> None:
    processor = JetStreamTopics(nats_server.url, name="processor")
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER)
    await topic.publish(image_trajectory(3), timeout_s=LIVENESS_S)
    with trainer_subscription(processor) as subscription:
        (delivery,) = await take(subscription, 1)
    assert delivery.item.obs[0].shape == (64, 84, 84, 3) and delivery.item.obs[0].dtype == np.uint8
    await asyncio.to_thread(processor.close)


async def test_a_policy_above_max_payload_goes_through_the_object_store(small_broker: NatsServer) -> None:
    processor = JetStreamTopics(small_broker.url, name="processor")
    trainer = JetStreamTopics(small_broker.url, name="trainer", follow_policies=False)
    sink = await asyncio.to_thread(trainer.policies, BEHAVIOR)
    source = await asyncio.to_thread(processor.policies, BEHAVIOR)
    model = np.random.default_rng(0).integers(0, 256, 3 * 1024 * 1024, dtype=np.uint8).tobytes()  # a CNN's size
    for version in (1, 2):
        update = pb.PolicyUpdate(behavior_name=BEHAVIOR, artifact=pb.InferenceArtifact(model=model[version:]))
        assert await asyncio.to_thread(sink.publish, update, version)
        newest = await source.await_newer(version - 1, timeout_s=LIVENESS_S)
        assert newest is not None and newest[0] == version and newest[1].artifact.model == model[version:]
    assert not await asyncio.to_thread(sink.publish, update, 1)
    store = await asyncio.to_thread(processor.connection.run, processor.connection.js.object_store(sink.object_bucket))
    names = await asyncio.to_thread(processor.connection.run, store.list(ignore_deletes=True))
    assert [info.name for info in names] == ["v2"]  # the replaced artifact was deleted
    late = JetStreamTopics(small_broker.url, name="late-processor")  # reads the stored version at start
    assert (await asyncio.to_thread(late.policies, BEHAVIOR)).highest_version == 2
    for closing in (late.close, trainer.close, processor.close):
        await asyncio.to_thread(closing)


async def test_an_undecodable_message_is_terminated_and_counted(nats_server: NatsServer) -> None:
    processor = JetStreamTopics(nats_server.url, name="processor")
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER)
    raw = await nats.connect(nats_server.url)
    await raw.jetstream().publish(topic.subject, b"\xff not a trajectory")
    await raw.close()
    await topic.publish(make_trajectory(1), timeout_s=LIVENESS_S)
    with trainer_subscription(processor) as subscription:
        assert sequences(await take(subscription, 1)) == [1]
        assert subscription.stats().dropped == 1
    await asyncio.to_thread(processor.close)


async def test_a_subscriber_that_dies_without_detaching_gets_redelivered_after_ack_wait(nats_server: NatsServer) -> None:
    processor = JetStreamTopics(nats_server.url, name="processor", ack_wait_s=1.0)
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER)
    await topic.publish(make_trajectory(0), timeout_s=LIVENESS_S)
    dying = JetStreamTopics(nats_server.url, name="dying-trainer")
    subscription = await asyncio.to_thread(dying.trajectories(BEHAVIOR).subscribe, TRAINER_SUBSCRIBER)
    assert sequences(await take(subscription, 1, ack=False)) == [0]
    await asyncio.to_thread(dying.connection.close)  # gone without a NAK, as a SIGKILL would
    with trainer_subscription(processor) as second:
        (again,) = await take(second, 1)
    assert again.item.id.sequence == 0 and again.redelivered
    await asyncio.to_thread(processor.close)


async def test_a_hello_whose_trajectories_exceed_the_brokers_max_payload_is_refused_with_the_numbers(
    small_broker: NatsServer,
) -> None:
    """A behavior as wide as an 84x84x3 uint8 image (21,168 bytes a step: about 1.35 MB a trajectory at time_horizon
    64) cannot be published to a 1 MB broker (images themselves are not supported yet)."""
    topics = JetStreamTopics(small_broker.url, name="processor")
    server = ProcessorServer(ProcessorSettings(), ServerOptions(host="127.0.0.1", port=0), topics)  # type: ignore[arg-type]
    port = await server.start()
    try:
        image = BrainParameters("Pixels", (ObservationSpec((84 * 84 * 3 // 4,), np.dtype(np.float32)),), ActionSpec(0, (3,)))
        code, details, _ = await raw_step(f"127.0.0.1:{port}", hello(image))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details}"
        limit = topics.max_payload_bytes
        assert limit == 1024 * 1024 - 1024
        longest = TrajectorySize.of(image).longest_within(limit)
        for part in ("behavior 'Pixels'", "time_horizon 64", f"{limit:,}-byte message limit", f"at most {longest}"):
            assert part in details, f"{part!r} not in {details!r}"
    finally:
        await server.stop(1.0)


async def test_a_full_block_stream_refuses_a_thread_publisher_after_timeout_s(nats_server: NatsServer) -> None:
    """``publish_blocking`` from a thread: DiscardNew refuses, the publisher retries until ``timeout_s``, then gives up."""
    processor = JetStreamTopics(nats_server.url, name="processor")
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER, 1)
    await asyncio.to_thread(topic.publish_blocking, make_trajectory(0), LIVENESS_S)
    with pytest.raises(TopicFullError, match=r"no room for s0/7/1 within timeout_s=0.3: the stream is full"):
        await asyncio.to_thread(topic.publish_blocking, make_trajectory(1), 0.3)
    stats = topic.stats()
    assert stats.published == 1 and stats.blocked_seconds >= 0.3 and stats.blocked_publishers == 0
    with trainer_subscription(processor) as subscription:
        assert sequences(await take(subscription, 1)) == [0]
        await asyncio.to_thread(topic.publish_blocking, make_trajectory(2), LIVENESS_S)  # the ack made room
        assert sequences(await take(subscription, 1)) == [2]
    await asyncio.to_thread(processor.close)


async def test_the_processors_subscribe_rpc_names_the_broker_when_its_topics_are_there(nats_server: NatsServer) -> None:
    """A trainer without ``--topics`` that subscribes over gRPC to a processor on the broker is told where to go."""
    topics = JetStreamTopics(nats_server.url, name="processor")
    settings = ProcessorSettings(behaviors={BEHAVIOR: BehaviorRuntime(time_horizon=8)})
    server = ProcessorServer(settings, ServerOptions(host="127.0.0.1", port=0), topics)  # type: ignore[arg-type]
    port = await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = pb_grpc.AgentProcessorStub(channel).Subscribe()
            open_message = pb.SubscriberMessage(
                open=pb.SubscribeOpen(behavior_name=BEHAVIOR, subscriber_name=TRAINER_SUBSCRIBER)
            )
            await call.write(open_message)
            await call.done_writing()
            assert await call.code() == grpc.StatusCode.FAILED_PRECONDITION
            details = await call.details()
            assert nats_server.url in details and "--topics" in details, details
    finally:
        await server.stop(1.0)


async def test_a_publish_cancelled_awaiting_the_brokers_answer_counts_in_doubt_not_dropped(
    nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The processor's stop cancels a session whose publish is sent and unanswered (the broker hangs): the broker
    stores it once it answers, and the trainer takes it in, so counting it unpublished (a drop) counted it twice.
    Its id is logged in the form ``broker_faults`` reads back (``Fleet.in_doubt``)."""
    processor = JetStreamTopics(nats_server.url, name="processor")
    trainer = JetStreamTopics(nats_server.url, name="trainer", follow_policies=False)
    behavior = Behavior(simple_brain_parameters(BEHAVIOR, continuous=True), BehaviorRuntime(), ProcessorSettings(), processor)  # type: ignore[arg-type]
    await asyncio.to_thread(behavior.trajectories.declare, TRAINER_SUBSCRIBER, 64)
    await behavior.publish([make_trajectory(0)])
    stats = processor.connection.nc.stats
    sent = stats["out_msgs"]
    nats_server.pause()
    try:
        publishing = asyncio.ensure_future(behavior.publish([make_trajectory(1, steps=3), make_trajectory(2, steps=5)]))
        await auntil(lambda: stats["out_msgs"] > sent)  # the first one's attempt is on its way
        publishing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await publishing
    finally:
        nats_server.resume()
    c = behavior.counters
    assert (c.unpublished_trajectories, c.unpublished_experiences) == (1, 5)  # the second, never sent: dropped for sure
    assert (c.published_trajectories, c.in_doubt_trajectories, c.in_doubt_experiences) == (1, 1, 3)
    exported = {
        family.name: family.samples[0].value
        for family in ProcessorCollector(None)._behavior_metrics([behavior])  # type: ignore[arg-type]
        if family.name.endswith("_in_doubt")
    }
    assert exported == {"stepstream_processor_trajectories_in_doubt": 1, "stepstream_processor_experiences_in_doubt": 3}
    logged = [m.groups() for r in caplog.records if (m := IN_DOUBT_LINE.search(r.getMessage()))]
    assert logged == [("s0/7/1", "3")]
    with trainer_subscription(trainer) as subscription:
        assert sequences(await take(subscription, 2)) == [0, 1]  # the one in doubt was stored: taken in, not dropped
    for closing in (trainer.close, processor.close):
        await asyncio.to_thread(closing)


async def test_a_publish_whose_timeout_passes_unanswered_is_in_doubt_and_stored_once(nats_server: NatsServer) -> None:
    """Past ``timeout_s`` with its attempts unanswered (and one last try, also unanswered), a publish raises
    ``PublishInDoubtError``, not a plain ``TopicFullError``: both attempts reach the broker when it answers again,
    and the shared ``Nats-Msg-Id`` stores the trajectory once."""
    processor = JetStreamTopics(nats_server.url, name="processor")
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER, 64)
    await topic.publish(make_trajectory(0), timeout_s=LIVENESS_S)
    nats_server.pause()
    try:
        with pytest.raises(PublishInDoubtError, match=r"no room for s0/7/1 within timeout_s=0.2"):
            await asyncio.to_thread(topic.publish_blocking, make_trajectory(1), 0.2)
    finally:
        nats_server.resume()
    await topic.publish(make_trajectory(2), timeout_s=LIVENESS_S)
    with trainer_subscription(processor) as subscription:
        assert sequences(await take(subscription, 3)) == [0, 1, 2]
        assert not await subscription.aget(1, timeout_s=0.2)  # s0/7/1 once
    await asyncio.to_thread(processor.close)


async def test_a_full_stream_acknowledges_a_stored_id_as_a_duplicate(nats_server: NatsServer) -> None:
    """What settles a publish in doubt: the broker checks ``Nats-Msg-Id`` before the stream's limits, so a full
    stream acknowledges a retry of a stored trajectory (duplicate) and refuses only one it does not hold."""
    processor = JetStreamTopics(nats_server.url, name="processor")
    topic = processor.trajectories(BEHAVIOR)
    await asyncio.to_thread(topic.declare, TRAINER_SUBSCRIBER, 1)
    await topic.publish(make_trajectory(0), timeout_s=LIVENESS_S)
    await topic.publish(make_trajectory(0), timeout_s=0.3)
    assert topic.duplicates == 1
    with pytest.raises(TopicFullError, match="the stream is full") as refused:
        await topic.publish(make_trajectory(1), timeout_s=0.3)
    assert not isinstance(refused.value, PublishInDoubtError)
    await asyncio.to_thread(processor.close)
