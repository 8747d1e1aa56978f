"""In-process trajectory topic: bounded, acknowledged fan-out to named, durable subscriber queues.

One ``threading.Lock`` per topic guards every queue, held only for short critical sections that
never wait, so the processor's event loop may publish and take directly; waiting works as
``common.topics.waiting`` describes. One lock per topic rather than per queue makes a fan-out
publish all-or-nothing: it enqueues into every subscriber queue at once or, when a blocking queue
stays full past ``timeout_s``, into none.

A subscriber queue is named and durable: ``declare`` it before publishing starts (a trainer that
starts after the processor then loses nothing), and it outlives its subscriptions. With no queue
declared, a publish is dropped and counted as ``unrouted``. A queue's capacity ``max_size`` counts
queued and in-flight items, so memory stays bounded; under ``FullPolicy.BLOCK``, a subscriber that
never acks stalls the publishers once ``max_size`` deliveries are unacknowledged. A ``block`` queue
whose subscriber has been gone for longer than ``release_after_s`` stops holding publishers back
(``SubscriberQueue``): only a subscriber that is there, or coming, can stall a behavior.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from common.errors import ProtocolError, SubscriberBusyError, TopicClosedError, TopicFullError
from common.topics.base import Delivery, FullPolicy, SubscriptionStats, TopicStats
from common.topics.subscriber_queue import SubscriberQueue
from common.topics.waiting import (
    deadline_after,
    expired,
    refuse_in_event_loop,
    remaining_s,
    take_or_wait,
    wait_woken,
    wake_all,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_SIZE = 1024
"""Capacity (queued + in flight) of a subscriber queue declared without ``max_size``."""
DEFAULT_MAX_ITEMS = 256
"""Largest batch ``get`` / ``aget`` return by default."""
DEFAULT_RELEASE_AFTER_S = 60.0
"""How long a ``block`` queue keeps holding back publishers after its subscriber detached: long enough for a
trainer to restart (a TensorFlow import and a checkpoint restore take 10-30 s), short enough that a subscriber
gone for good stalls the env clients for a minute, not forever."""

_MISSING: Any = object()


class Subscription(Generic[T]):
    """One attachment of a named subscriber queue; made by ``TrajectoryTopic.subscribe``.

    A thread takes with ``get``, a coroutine with ``aget``; both return as soon as at least one item
    is queued (a partial batch) and never wait to fill ``max_items``. Use it as a context manager to
    ``detach`` on exit. After detach (or ``remove`` of its queue) ``get``/``aget`` raise
    ``TopicClosedError`` and ``ack`` is ignored: the unacknowledged items are back in the queue.
    """

    def __init__(self, topic: TrajectoryTopic[T], queue: SubscriberQueue[T]) -> None:
        self._topic = topic
        self._queue = queue
        self._lock = topic._lock

    @property
    def topic(self) -> TrajectoryTopic[T]:
        """The topic this subscription reads."""
        return self._topic

    @property
    def subscriber_name(self) -> str:
        return self._queue.name

    @property
    def attached(self) -> bool:
        return self._queue.attached is self

    def get(self, max_items: int = DEFAULT_MAX_ITEMS, timeout_s: float | None = None) -> list[Delivery[T]]:
        """Block the calling thread until an item is queued, then take up to ``max_items``.

        Args:
            max_items: the largest batch to return, >= 1.
            timeout_s: the longest wait; None waits until an item arrives, 0 only polls.

        Returns:
            The deliveries, oldest first, now in flight until acked; ``[]`` if ``timeout_s`` passed.

        Raises:
            TopicClosedError: this subscription is detached, or the topic is closed and drained.
            RuntimeError: it would wait on a running event loop's thread (use ``aget``).
        """
        _check_max_items(max_items)
        deadline = deadline_after(timeout_s)
        queue = self._queue
        with self._lock:
            while True:
                taken = self._take(max_items)
                remaining = remaining_s(deadline)
                if taken or expired(remaining):
                    return taken
                refuse_in_event_loop("Subscription.get")
                queue.thread_readers += 1
                try:
                    queue.readable.wait(remaining)
                finally:
                    queue.thread_readers -= 1

    async def aget(self, max_items: int = DEFAULT_MAX_ITEMS, timeout_s: float | None = None) -> list[Delivery[T]]:
        """``get`` for a coroutine of any event loop; cancelling it loses no item.

        Raises:
            TopicClosedError: this subscription is detached, or the topic is closed and drained.
        """
        _check_max_items(max_items)
        return await take_or_wait(self._lock, lambda: self._take(max_items), self._queue.async_readers, timeout_s)

    def _take(self, max_items: int) -> list[Delivery[T]]:
        """Take what is queued (the lock is held)."""
        queue = self._queue
        if queue.attached is not self:
            raise TopicClosedError(f"subscription {queue.name!r} of topic {self._topic.name!r} is detached")
        if queue.queued:
            return queue.take(max_items)
        if self._topic.closed:
            raise TopicClosedError(f"topic {self._topic.name!r} is closed and subscriber {queue.name!r} is drained")
        return []

    def ack(self, delivery_tags: Iterable[int]) -> int:
        """Release acknowledged deliveries, making room for publishers.

        Returns:
            How many of the tags were in flight; unknown or already acked tags, and every tag once
            detached, are ignored.
        """
        queue = self._queue
        with self._lock:
            if queue.attached is not self:
                return 0
            pop = queue.in_flight.pop
            released = sum(1 for tag in delivery_tags if pop(tag, _MISSING) is not _MISSING)
            queue.acked += released
            if released:
                self._topic._wake_writers()
        return released

    def detach(self) -> None:
        """End this attachment; unacknowledged deliveries return to the queue front. Idempotent."""
        queue = self._queue
        with self._lock:
            if queue.attached is not self:
                return
            returned = queue.requeue_in_flight()
            queue.detach()
            queue.wake_readers()
            self._topic._wake_writers()  # they re-check when the queue will be released
        logger.info("subscriber %r detached from %r; %d unacked items requeued", queue.name, self._topic.name, returned)

    def stats(self) -> SubscriptionStats:
        with self._lock:
            return self._queue.stats()

    def __enter__(self) -> Subscription[T]:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.detach()


def _until_release(full: list[SubscriberQueue[Any]], remaining: float | None) -> float | None:
    """The wait of a blocked publisher: ``remaining``, cut short when one of the ``full`` queues is released."""
    now = time.monotonic()
    releases = [r for q in full if (r := q.released_in_s(now)) is not None]
    if not releases:
        return remaining
    first = max(min(releases), 0.0) + 0.001  # just past the release, so the next try sees it
    return first if remaining is None else min(first, remaining)


def _quoted(name: str, limit: int = 64) -> str:
    """``name`` repr'd for a message, cut to ``limit`` characters (a peer chose it)."""
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} characters)"


def _check_max_items(max_items: int) -> None:
    if max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")


class TrajectoryTopic(Generic[T]):
    """Bounded, acknowledged fan-out of items (in practice ``Trajectory``) to named subscribers.

    Every publish goes to every declared subscriber queue (module docstring). Publishing: a
    coroutine awaits ``publish``, a thread calls ``publish_blocking``. Either returns at once unless
    a ``FullPolicy.BLOCK`` queue is full; then it waits until every such queue has room (an ack,
    ``remove`` or ``close`` wakes it) or ``timeout_s`` passes. No FIFO fairness among blocked
    publishers. ``close`` wakes every waiter: publishers and empty subscribers get
    ``TopicClosedError``; items still queued can be drained first.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._writable = threading.Condition(self._lock)
        self._thread_writers = 0
        self._async_writers: set[asyncio.Future[None]] = set()
        self._queues: dict[str, SubscriberQueue[T]] = {}
        self._queue_list: list[SubscriberQueue[T]] = []
        self._closed = False
        self._published = 0
        self._unrouted = 0
        self._unrouted_expected = False
        self._blocked_seconds = 0.0

    def expect_no_subscribers(self) -> None:
        """Publishes with no subscriber queue are meant to be dropped (``--inference``): count, do not warn."""
        self._unrouted_expected = True

    @property
    def name(self) -> str:
        return self._name

    @property
    def closed(self) -> bool:
        return self._closed

    def declare(
        self,
        subscriber_name: str,
        max_size: int | None = None,
        full_policy: FullPolicy | None = None,
        *,
        release_after_s: float | None = DEFAULT_RELEASE_AFTER_S,
    ) -> None:
        """Create the named subscriber queue if absent, so publishes are kept until it subscribes.

        Args:
            subscriber_name: the durable name, e.g. the trainer's behavior or run id.
            max_size: capacity, queued + in flight, >= 1; None means ``DEFAULT_MAX_SIZE`` (or as declared).
            full_policy: None means ``FullPolicy.BLOCK`` (or as declared).
            release_after_s: (a new queue) how long a ``block`` queue holds back publishers after its
                subscriber detached; None: for ever.

        Raises:
            ValueError: ``max_size`` < 1 (no publish could ever succeed).
            ProtocolError: (precondition) the queue exists with another ``max_size`` or ``full_policy``.
            TopicClosedError: the topic is closed.
        """
        with self._lock:
            self._declare(subscriber_name, max_size, full_policy, release_after_s)

    def subscribe(
        self,
        subscriber_name: str,
        max_size: int | None = None,
        full_policy: FullPolicy | None = None,
        *,
        replace: bool = False,
        declared_only: bool = False,
    ) -> Subscription[T]:
        """Attach to the named queue, declaring it first if needed (arguments as in ``declare``).

        A queue holds one attachment at a time. If one is live, ``replace=True`` detaches it (its
        unacked items are requeued and its waiters get ``TopicClosedError``); otherwise the call
        fails and the holder keeps it.

        Args:
            declared_only: refuse a name that has no queue yet instead of declaring it: a remote
                peer may attach only to a queue the processor declared, so it cannot create a
                queue that stalls the publishers.

        Raises:
            SubscriberBusyError: (a precondition ``ProtocolError``) the name is attached and
                ``replace`` is false.
            ProtocolError: (precondition) the settings differ from the declared ones, or
                ``declared_only`` and the name has no queue.
            ValueError: ``max_size`` < 1.
            TopicClosedError: the topic is closed.
        """
        with self._lock:
            if declared_only and subscriber_name not in self._queues:
                raise ProtocolError(
                    f"topic {self._name!r}: subscriber {_quoted(subscriber_name)} is not declared "
                    f"(declared: {sorted(self._queues)[:8]}); declare it in the processor's settings",
                    precondition=True,
                )
            queue = self._declare(subscriber_name, max_size, full_policy, DEFAULT_RELEASE_AFTER_S)
            old = queue.attached
            if old is not None and not replace:
                raise SubscriberBusyError(
                    f"topic {self._name!r}: subscriber {_quoted(subscriber_name)} is already attached to a live stream "
                    "(the holder keeps it; retry once it detaches, or subscribe with replace=True in process)"
                )
            requeued = queue.requeue_in_flight()
            subscription = Subscription(self, queue)
            queue.attach(subscription)
            if old is not None:
                queue.wake_readers()
        logger.info(
            "subscriber %r attached to %r (%d queued, %d requeued)", subscriber_name, self._name, len(queue.queued), requeued
        )
        return subscription

    def _declare(
        self, name: str, max_size: int | None, full_policy: FullPolicy | None, release_after_s: float | None
    ) -> SubscriberQueue[T]:
        if self._closed:
            raise TopicClosedError(f"topic {self._name!r} is closed")
        if max_size is not None and max_size < 1:
            raise ValueError(f"topic {self._name!r}: max_size of subscriber {name!r} must be >= 1, got {max_size}")
        queue = self._queues.get(name)
        if queue is None:
            size = DEFAULT_MAX_SIZE if max_size is None else max_size
            queue = SubscriberQueue(name, size, FullPolicy(full_policy or "block"), self._lock, release_after_s)
            self._queues[name] = queue
            self._queue_list = list(self._queues.values())
            return queue
        if (max_size not in (None, queue.max_size)) or (full_policy not in (None, queue.full_policy)):
            raise ProtocolError(
                f"topic {self._name!r}: subscriber {name!r} is declared with max_size={queue.max_size}, "
                f"full_policy={queue.full_policy.value}; asked for max_size={max_size}, full_policy={full_policy}",
                precondition=True,
            )
        return queue

    def remove(self, subscriber_name: str) -> int:
        """Delete the named queue (a subscriber gone for good), detaching its live subscription.

        Returns:
            How many items (queued and in flight) were discarded; 0 if there was no such queue.
        """
        with self._lock:
            queue = self._queues.pop(subscriber_name, None)
            if queue is None:
                return 0
            self._queue_list = list(self._queues.values())
            discarded = queue.used
            queue.dropped += discarded
            queue.queued.clear()
            queue.in_flight.clear()
            queue.attached = None
            queue.wake_readers()
            self._wake_writers()
        # Removal is its caller's decision (a trainer that is done), so not a warning; the count stays in ``dropped``.
        logger.info("subscriber %r removed from %r; %d items discarded", subscriber_name, self._name, discarded)
        return discarded

    async def publish(self, item: T, timeout_s: float | None = None) -> None:
        """Enqueue ``item`` for every subscriber, awaiting room in blocking queues.

        Args:
            item: the payload, shared (not copied) by every subscriber.
            timeout_s: the longest wait for room; None waits forever, 0 fails at once when full.

        Raises:
            TopicFullError: a blocking queue had no room within ``timeout_s``; nothing was enqueued.
            TopicClosedError: the topic is closed.
        """
        deadline = deadline_after(timeout_s)
        while True:
            with self._lock:
                full = self._try_put(item)
                if not full:
                    return
                remaining = remaining_s(deadline)
                if expired(remaining):
                    raise self._full_error(full, timeout_s)
                woken = asyncio.get_running_loop().create_future()
                self._async_writers.add(woken)
            started = time.monotonic()
            try:
                await wait_woken(woken, _until_release(full, remaining))
            finally:
                with self._lock:
                    self._async_writers.discard(woken)
                    self._count_blocked(full, time.monotonic() - started)

    def publish_blocking(self, item: T, timeout_s: float | None = None) -> None:
        """``publish`` for a thread that is not running an event loop.

        Raises:
            TopicFullError: a blocking queue had no room within ``timeout_s``; nothing was enqueued.
            TopicClosedError: the topic is closed.
            RuntimeError: it would wait on a running event loop's thread (await ``publish``).
        """
        deadline = deadline_after(timeout_s)
        with self._lock:
            while True:
                full = self._try_put(item)
                if not full:
                    return
                remaining = remaining_s(deadline)
                if expired(remaining):
                    raise self._full_error(full, timeout_s)
                refuse_in_event_loop("TrajectoryTopic.publish_blocking")
                started = time.monotonic()
                self._thread_writers += 1
                try:
                    self._writable.wait(_until_release(full, remaining))
                finally:
                    self._thread_writers -= 1
                    self._count_blocked(full, time.monotonic() - started)

    def _try_put(self, item: T) -> list[SubscriberQueue[T]]:
        """Enqueue into every queue and return []; or enqueue nowhere and return the full blocking queues."""
        if self._closed:
            raise TopicClosedError(f"topic {self._name!r} is closed")
        queues = self._queue_list
        if not queues:
            if not self._unrouted and not self._unrouted_expected:
                logger.warning("topic %r has no subscriber queue: publishes are dropped (declare one first)", self._name)
            self._unrouted += 1
            return []
        now = time.monotonic()
        full = [q for q in queues if q.holds_back(now)]
        if full:
            return full
        for queue in queues:
            queue.put(item)
        self._published += 1
        return []

    def _count_blocked(self, full: list[SubscriberQueue[T]], seconds: float) -> None:
        self._blocked_seconds += seconds
        for queue in full:
            queue.blocked_seconds += seconds

    def _full_error(self, full: list[SubscriberQueue[T]], timeout_s: float | None) -> TopicFullError:
        queues = ", ".join(f"{q.name!r} ({q.used}/{q.max_size}, {len(q.in_flight)} unacked)" for q in full)
        return TopicFullError(f"topic {self._name!r}: no room within timeout_s={timeout_s} in blocking queue(s) {queues}")

    def _wake_writers(self) -> None:
        """Wake blocked publishers (the lock is held)."""
        if self._thread_writers:
            self._writable.notify_all()
        if self._async_writers:
            wake_all(self._async_writers)

    def close(self) -> None:
        """Refuse further publishes and subscribes; wake every waiter (they raise TopicClosedError). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for queue in self._queue_list:
                queue.readable.notify_all()
                wake_all(queue.async_readers)
            self._writable.notify_all()
            wake_all(self._async_writers)
        logger.debug("topic %r closed", self._name)

    def stats(self) -> TopicStats:
        with self._lock:
            return TopicStats(
                name=self._name,
                published=self._published,
                unrouted=self._unrouted,
                blocked_seconds=self._blocked_seconds,
                blocked_publishers=self._thread_writers + len(self._async_writers),
                subscribers={q.name: q.stats() for q in self._queue_list},
            )
