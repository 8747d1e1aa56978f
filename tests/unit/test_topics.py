"""The in-process topics: fan-out, backpressure, drops, redelivery, policies, threads and the loop.

No test sleeps to prove a point: a stalled call is shown by state (``blocked_publishers``, a task
that is not done), and every wait has a generous liveness bound.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from common.errors import ProtocolError, SubscriberBusyError, TopicClosedError, TopicFullError
from common.topics import (
    Deduplicator,
    FullPolicy,
    PolicySink,
    PolicySource,
    PolicyTopic,
    Subscription,
    TopicRegistry,
    TrajectorySink,
    TrajectorySource,
    TrajectorySubscription,
    TrajectoryTopic,
)
from common.trajectory import TrajectoryId

LIVENESS_S = 10.0


def until(condition: Callable[[], bool]) -> None:
    """Spin until ``condition()`` holds (a liveness bound, not a timing assertion)."""
    deadline = time.monotonic() + LIVENESS_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.0005)


async def auntil(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LIVENESS_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.0005)


def items(subscription: Subscription[int], max_items: int = 100) -> list[int]:
    """Take what is queued now, ack it, return the items."""
    deliveries = subscription.get(max_items, timeout_s=0)
    subscription.ack(d.tag for d in deliveries)
    return [d.item for d in deliveries]


def start_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


# -- trajectory topic ----------------------------------------------------------------------------


def test_in_process_topics_fill_the_roles() -> None:
    """mypy checks these assignments against the Protocols of ``common.topics.base``."""
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    policies: PolicyTopic[str] = PolicyTopic("policies/T")
    sink: TrajectorySink[int] = topic
    source: TrajectorySource[int] = topic
    subscription: TrajectorySubscription[int] = source.subscribe("trainer")
    policy_sink: PolicySink[str] = policies
    policy_source: PolicySource[str] = policies
    assert sink is topic and subscription.stats().attached
    assert policy_sink.highest_version == policy_source.highest_version == -1


async def test_fan_out_to_two_subscribers() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    first, second = topic.subscribe("a"), topic.subscribe("b")
    for i in range(5):
        await topic.publish(i)
    assert items(first) == [0, 1, 2, 3, 4]
    assert items(second, max_items=2) == [0, 1]
    assert items(second) == [2, 3, 4]
    stats = topic.stats()
    assert stats.published == 5
    assert stats.subscribers["a"].delivered == stats.subscribers["a"].acked == 5
    assert stats.in_flight == stats.depth == 0


async def test_block_stalls_publisher_until_an_ack_frees_room() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("trainer", max_size=2)
    await topic.publish(0)
    await topic.publish(1)
    blocked = asyncio.create_task(topic.publish(2))
    await auntil(lambda: topic.stats().blocked_publishers == 1)
    deliveries = await subscription.aget(10)  # taken but not acked: still counts against max_size
    assert [d.item for d in deliveries] == [0, 1]
    for _ in range(10):
        await asyncio.sleep(0)
    assert not blocked.done()
    assert subscription.ack([deliveries[0].tag]) == 1
    await asyncio.wait_for(blocked, LIVENESS_S)
    assert [d.item for d in subscription.get(10, timeout_s=0)] == [2]
    stats = topic.stats()
    assert stats.blocked_publishers == 0
    assert stats.blocked_seconds > 0
    assert stats.subscribers["trainer"].in_flight == 2


def test_blocking_publisher_thread_resumes_when_subscriber_takes_and_acks() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("trainer", max_size=2)
    published: list[int] = []

    def publisher() -> None:
        for i in range(4):
            topic.publish_blocking(i, timeout_s=LIVENESS_S)
            published.append(i)

    thread = start_thread(publisher)
    until(lambda: topic.stats().blocked_publishers == 1)
    assert published == [0, 1]
    assert items(subscription) == [0, 1]
    until(lambda: published == [0, 1, 2, 3])
    thread.join(LIVENESS_S)
    assert items(subscription) == [2, 3]


async def test_drop_oldest_counts_its_drops_and_keeps_the_newest() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("viewer", max_size=3, full_policy=FullPolicy.DROP_OLDEST)
    for i in range(10):
        await topic.publish(i, timeout_s=0)
    assert items(subscription) == [7, 8, 9]
    assert subscription.stats().dropped == 7


def test_drop_oldest_forgets_the_oldest_delivery_when_all_are_in_flight() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("viewer", max_size=2, full_policy="drop_oldest")  # type: ignore[arg-type]
    topic.publish_blocking(0)
    topic.publish_blocking(1)
    first, second = subscription.get(2, timeout_s=0)
    topic.publish_blocking(2)
    assert subscription.ack([first.tag, second.tag]) == 1  # the forgotten delivery's ack is ignored
    assert items(subscription) == [2]
    assert subscription.stats().dropped == 1


async def test_one_blocking_queue_full_means_no_subscriber_gets_the_item() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    blocking = topic.subscribe("trainer", max_size=1)
    dropping = topic.subscribe("viewer", max_size=1, full_policy=FullPolicy.DROP_OLDEST)
    await topic.publish(0)
    with pytest.raises(TopicFullError, match="trainer"):
        await topic.publish(1, timeout_s=0.01)
    with pytest.raises(TopicFullError):
        topic.publish_blocking(1, timeout_s=0)
    assert items(dropping) == [0]
    assert items(blocking) == [0]
    assert topic.stats().published == 1


async def test_unacked_items_are_redelivered_and_deduplicated() -> None:
    topic: TrajectoryTopic[TrajectoryId] = TrajectoryTopic("trajectories/T")
    topic.declare("trainer", max_size=8)
    ids = [TrajectoryId("s", 0, i) for i in range(6)]
    for trajectory_id in ids[:4]:
        await topic.publish(trajectory_id)
    dedup: Deduplicator[TrajectoryId] = Deduplicator(capacity=16)
    received: list[TrajectoryId] = []

    first = topic.subscribe("trainer")
    deliveries = first.get(3, timeout_s=0)
    received += [d.item for d in deliveries if not dedup.seen(d.item)]
    first.ack([deliveries[0].tag])  # 1 and 2 are taken in, but their acks are lost
    first.detach()
    assert first.ack([deliveries[1].tag]) == 0
    with pytest.raises(TopicClosedError):
        first.get(1, timeout_s=0)

    for trajectory_id in ids[4:]:
        await topic.publish(trajectory_id)
    with topic.subscribe("trainer") as second:
        again = await second.aget(10, timeout_s=0)
        assert [(d.item, d.redelivered) for d in again] == [
            (ids[1], True),
            (ids[2], True),
            (ids[3], False),
            (ids[4], False),
            (ids[5], False),
        ]
        assert len({d.tag for d in again} & {d.tag for d in deliveries}) == 0
        received += [d.item for d in again if not dedup.seen(d.item)]
        second.ack(d.tag for d in again)
        assert second.stats().redelivered == 2
    assert received == ids
    assert dedup.duplicates == 2


async def test_published_before_the_subscriber_arrives_is_kept_only_if_declared() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    await topic.publish(0)
    assert topic.stats().unrouted == 1
    topic.declare("trainer", max_size=4, full_policy=FullPolicy.BLOCK)
    await topic.publish(1)
    assert items(topic.subscribe("trainer")) == [1]


def test_second_live_subscription_fails_unless_it_replaces() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    old = topic.subscribe("trainer", max_size=4)
    topic.publish_blocking(0)
    taken = old.get(1, timeout_s=0)
    with pytest.raises(ProtocolError, match="already attached") as raised:
        topic.subscribe("trainer")
    assert raised.value.precondition
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            old.get(1)
        except TopicClosedError as error:
            errors.append(error)

    thread = start_thread(waiter)
    until(lambda: not thread.is_alive() or old._queue.thread_readers == 1)
    new = topic.subscribe("trainer", replace=True)
    thread.join(LIVENESS_S)
    assert len(errors) == 1
    assert not old.attached and new.attached
    assert [(d.item, d.redelivered) for d in new.get(1, timeout_s=0)] == [(taken[0].item, True)]


def test_settings_are_checked() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    with pytest.raises(ValueError, match="max_size"):
        topic.declare("trainer", max_size=0)
    topic.declare("trainer", max_size=4)
    topic.declare("trainer")
    with pytest.raises(ProtocolError, match="max_size=4"):
        topic.subscribe("trainer", max_size=5)
    with pytest.raises(ProtocolError):
        topic.subscribe("trainer", full_policy=FullPolicy.DROP_OLDEST)
    subscription = topic.subscribe("trainer", 4, FullPolicy.BLOCK)
    with pytest.raises(ValueError, match="max_items"):
        subscription.get(0)
    with pytest.raises(ValueError, match="timeout_s"):
        subscription.get(1, timeout_s=-1)
    assert subscription.get(1, timeout_s=0) == []


async def test_blocking_calls_refuse_to_wait_on_the_event_loop() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("trainer", max_size=1)
    assert subscription.get(1, timeout_s=0) == []  # polling never waits, so it is allowed
    with pytest.raises(RuntimeError, match="event loop"):
        subscription.get(1, timeout_s=1)
    topic.publish_blocking(0)
    with pytest.raises(RuntimeError, match="event loop"):
        topic.publish_blocking(1, timeout_s=1)
    with pytest.raises(RuntimeError, match="event loop"):
        PolicyTopic[int]("policies/T").wait_newer(-1, timeout_s=1)


async def test_cancelled_aget_loses_nothing() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("trainer")
    waiting = asyncio.create_task(subscription.aget(10))
    await auntil(lambda: len(subscription._queue.async_readers) == 1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await topic.publish(7)
    assert [d.item for d in await subscription.aget(10, timeout_s=LIVENESS_S)] == [7]
    assert await subscription.aget(10, timeout_s=0.001) == []


async def test_coroutine_publisher_and_subscriber_thread() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("trainer", max_size=8)
    count = 2000
    received: list[int] = []

    def trainer() -> None:
        while len(received) < count:
            deliveries = subscription.get(16, timeout_s=LIVENESS_S)
            received.extend(d.item for d in deliveries)
            subscription.ack(d.tag for d in deliveries)

    thread = start_thread(trainer)
    for i in range(count):
        await topic.publish(i, timeout_s=LIVENESS_S)
    await asyncio.wait_for(asyncio.to_thread(thread.join), LIVENESS_S)
    assert received == list(range(count))
    stats = subscription.stats()
    assert stats.acked == count and stats.depth == stats.in_flight == 0


async def test_close_wakes_every_waiter_after_queued_items_are_drained() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    empty = topic.subscribe("empty", max_size=1)
    full = topic.subscribe("full", max_size=1)
    await topic.publish(0)
    items(empty)
    errors: list[BaseException] = []

    def thread_waiter() -> None:
        try:
            empty.get(1)
        except TopicClosedError as error:
            errors.append(error)

    thread = start_thread(thread_waiter)
    async_waiter = asyncio.create_task(empty.aget(1))
    publisher = asyncio.create_task(topic.publish(1))
    await auntil(lambda: topic.stats().blocked_publishers == 1 and empty._queue.thread_readers == 1)
    await auntil(lambda: len(empty._queue.async_readers) == 1)
    topic.close()
    for task in (async_waiter, publisher):
        with pytest.raises(TopicClosedError):
            await asyncio.wait_for(task, LIVENESS_S)
    await asyncio.wait_for(asyncio.to_thread(thread.join), LIVENESS_S)
    assert len(errors) == 1
    assert [d.item for d in full.get(1)] == [0]  # drained first, then closed
    with pytest.raises(TopicClosedError):
        full.get(1)
    with pytest.raises(TopicClosedError):
        topic.subscribe("late")


def test_remove_discards_the_queue_and_unblocks_publishers() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    subscription = topic.subscribe("gone", max_size=1)
    topic.publish_blocking(0)
    thread = start_thread(lambda: topic.publish_blocking(1, timeout_s=LIVENESS_S))
    until(lambda: topic.stats().blocked_publishers == 1)
    assert topic.remove("gone") == 1
    thread.join(LIVENESS_S)
    assert not thread.is_alive()
    assert topic.stats().unrouted == 1
    with pytest.raises(TopicClosedError):
        subscription.get(1, timeout_s=0)


# -- policy topic, registry, dedup ---------------------------------------------------------------


def test_policy_latest_wins_and_older_versions_are_ignored() -> None:
    topic: PolicyTopic[str] = PolicyTopic("policies/T")
    assert topic.latest() is None and topic.highest_version == -1
    assert topic.publish("v1", 1)
    assert topic.publish("v3", 3)
    assert not topic.publish("v2", 2)
    assert not topic.publish("v3 again", 3)
    assert topic.latest() == (3, "v3")
    assert topic.highest_version == 3
    assert (topic.published, topic.ignored) == (2, 2)
    assert topic.wait_newer(2, timeout_s=0) == (3, "v3")
    assert topic.wait_newer(3, timeout_s=0) is None
    with pytest.raises(ValueError, match="version"):
        topic.publish("bad", -1)


async def test_policy_published_by_a_thread_reaches_the_event_loop() -> None:
    topic: PolicyTopic[str] = PolicyTopic("policies/T")
    loop = asyncio.get_running_loop()
    heard: list[tuple[int, str, bool]] = []
    loop_thread = threading.get_ident()
    remove = topic.add_listener(lambda v, item: heard.append((v, item, threading.get_ident() == loop_thread)), loop)
    newer = asyncio.create_task(topic.await_newer(0))
    await asyncio.sleep(0)

    def trainer() -> None:
        for version in (1, 2):
            topic.publish(f"v{version}", version)

    thread = start_thread(trainer)
    assert await asyncio.wait_for(newer, LIVENESS_S) in ((1, "v1"), (2, "v2"))
    await asyncio.wait_for(asyncio.to_thread(thread.join), LIVENESS_S)
    await auntil(lambda: len(heard) == 2)
    assert heard == [(1, "v1", True), (2, "v2", True)]
    remove()
    topic.publish("v3", 3)
    assert await topic.await_newer(2, timeout_s=LIVENESS_S) == (3, "v3")
    assert await topic.await_newer(3, timeout_s=0.001) is None
    assert len(heard) == 2


async def test_policy_close_wakes_waiters() -> None:
    topic: PolicyTopic[str] = PolicyTopic("policies/T")
    waiter = asyncio.create_task(topic.await_newer(-1))
    errors: list[BaseException] = []

    def thread_waiter() -> None:
        try:
            topic.wait_newer(-1)
        except TopicClosedError as error:
            errors.append(error)

    thread = start_thread(thread_waiter)
    await asyncio.sleep(0)
    topic.close()
    with pytest.raises(TopicClosedError):
        await asyncio.wait_for(waiter, LIVENESS_S)
    await asyncio.wait_for(asyncio.to_thread(thread.join), LIVENESS_S)
    assert len(errors) == 1
    with pytest.raises(TopicClosedError):
        topic.publish("late", 1)


def test_registry_names_and_reuses_topics() -> None:
    registry: TopicRegistry[str] = TopicRegistry()
    trajectories = registry.trajectories("CartPole")
    assert trajectories is registry.trajectories("CartPole")
    assert trajectories.name == "trajectories/CartPole"
    assert registry.policies("CartPole").name == "policies/CartPole"
    registry.policies("Pendulum")
    assert registry.behavior_names() == ["CartPole", "Pendulum"]
    registry.close()
    assert trajectories.closed and registry.policies("Pendulum").closed
    with pytest.raises(ValueError):
        registry.trajectories("")


def test_deduplicator_is_lru_bounded() -> None:
    dedup: Deduplicator[int] = Deduplicator(capacity=2)
    assert [dedup.seen(k) for k in (1, 2, 1, 3)] == [False, False, True, False]
    assert 2 not in dedup and len(dedup) == 2  # 2 was least recently seen
    assert dedup.seen(1) and not dedup.seen(2)
    assert dedup.duplicates == 2
    with pytest.raises(ValueError):
        Deduplicator(0)


def test_a_remote_peer_attaches_only_to_a_declared_queue_and_the_holder_keeps_it() -> None:
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    topic.declare("trainer", max_size=2)
    with pytest.raises(ProtocolError, match="not declared") as refused:
        topic.subscribe("x" * 10_000, declared_only=True)
    assert refused.value.precondition and len(str(refused.value)) < 300, "a peer's name is quoted cut short"
    assert list(topic.stats().subscribers) == ["trainer"]
    holder = topic.subscribe("trainer", declared_only=True)
    with pytest.raises(SubscriberBusyError):
        topic.subscribe("trainer", declared_only=True)
    assert holder.attached


def test_a_block_queue_released_after_its_subscriber_left_drops_until_one_attaches() -> None:
    """Released queues are checked with release_after_s=0 (released at once) and None (never): no timing here."""
    topic: TrajectoryTopic[int] = TrajectoryTopic("trajectories/T")
    topic.declare("trainer", max_size=1, release_after_s=0.0)
    topic.declare("kept", max_size=1, release_after_s=None)
    topic.publish_blocking(0)
    with pytest.raises(TopicFullError):  # never attached: both hold publishers back
        topic.publish_blocking(1, timeout_s=0)
    topic.subscribe("trainer").detach()
    topic.subscribe("kept").detach()
    with pytest.raises(TopicFullError, match="'kept'"):  # release_after_s=None: held back for ever
        topic.publish_blocking(1, timeout_s=0)
    topic.remove("kept")
    topic.publish_blocking(1, timeout_s=0)  # "trainer" is released: the oldest is dropped instead
    stats = topic.stats().subscribers["trainer"]
    assert stats.released and stats.dropped == 1 and stats.depth == 1
    with topic.subscribe("trainer") as subscription:
        assert not subscription.stats().released
        with pytest.raises(TopicFullError):
            topic.publish_blocking(2, timeout_s=0)
        assert [d.item for d in subscription.get(1, timeout_s=0)] == [1]
