"""The durable queue of one named trajectory subscriber: queued items, in-flight deliveries, counters."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Generic, TypeVar

from common.topics.base import Delivery, FullPolicy, SubscriptionStats
from common.topics.waiting import wake_all

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SubscriberQueue(Generic[T]):
    """The durable state of one named subscriber of a ``TrajectoryTopic``.

    Every field is guarded by the topic's lock, which the caller holds for every method.

    A ``block`` queue holds back publishers while it is full and its subscriber is attached, has not
    attached yet (a trainer that starts after the processor loses nothing), or left less than
    ``release_after_s`` ago (a trainer restarting). Once its subscriber has been gone longer, nobody is
    coming to drain it: it is *released*, drops its oldest items like ``drop_oldest``, and blocks again
    when a subscriber attaches.
    """

    def __init__(
        self, name: str, max_size: int, full_policy: FullPolicy, lock: threading.Lock, release_after_s: float | None
    ) -> None:
        self.name = name
        self.max_size = max_size
        self.full_policy = full_policy
        self.release_after_s = release_after_s
        """None: never released."""
        self.detached_at: float | None = None
        """``time.monotonic()`` of the last detach while no subscription is attached; None otherwise."""
        self._release_logged = False
        self.queued: deque[tuple[T, bool]] = deque()
        """(item, redelivered), oldest first."""
        self.in_flight: dict[int, T] = {}
        """tag -> item, in delivery order."""
        self.next_tag = 0
        self.attached: object | None = None
        """The live subscription, compared by identity."""
        self.readable = threading.Condition(lock)
        self.thread_readers = 0
        self.async_readers: set[asyncio.Future[None]] = set()
        self.published = self.delivered = self.acked = self.dropped = self.redelivered = 0
        self.blocked_seconds = 0.0

    @property
    def used(self) -> int:
        return len(self.queued) + len(self.in_flight)

    def released_in_s(self, now: float) -> float | None:
        """Seconds until this queue is released (<= 0: it is); None if it is not waiting to be released."""
        if self.full_policy is not FullPolicy.BLOCK or self.detached_at is None or self.release_after_s is None:
            return None
        return self.detached_at + self.release_after_s - now

    def holds_back(self, now: float) -> bool:
        """Whether a publish must wait for room here: a full ``block`` queue that is not released."""
        if self.full_policy is not FullPolicy.BLOCK or self.used < self.max_size:
            return False
        release_in = self.released_in_s(now)
        if release_in is None or release_in > 0:
            return True
        if not self._release_logged:
            self._release_logged = True
            logger.warning(
                "subscriber queue %r: its subscriber has been gone for over %.0f s; it no longer holds back publishers "
                "and drops its oldest items until a subscriber attaches",
                self.name,
                self.release_after_s,
            )
        return False

    def attach(self, subscription: object) -> None:
        self.attached = subscription
        self.detached_at = None
        self._release_logged = False

    def detach(self) -> None:
        self.attached = None
        self.detached_at = time.monotonic()

    def put(self, item: T) -> None:
        if len(self.queued) + len(self.in_flight) >= self.max_size:
            self.drop_oldest()
        self.queued.append((item, False))
        self.published += 1
        self.wake_readers()

    def drop_oldest(self) -> None:
        """Drop the oldest queued item or, when all are in flight, forget the oldest delivery."""
        if self.queued:
            self.queued.popleft()
        else:  # its later ack is ignored, and it will not be redelivered
            del self.in_flight[next(iter(self.in_flight))]
        if not self.dropped:
            logger.warning("subscriber queue %r is full (%d): dropping its oldest items", self.name, self.max_size)
        self.dropped += 1

    def take(self, max_items: int) -> list[Delivery[T]]:
        taken = []
        for _ in range(min(max_items, len(self.queued))):
            item, redelivered = self.queued.popleft()
            tag = self.next_tag
            self.next_tag = tag + 1
            self.in_flight[tag] = item
            taken.append(Delivery(tag, item, redelivered))
            self.redelivered += redelivered
        self.delivered += len(taken)
        return taken

    def requeue_in_flight(self) -> int:
        """Return every in-flight item to the queue front, oldest delivery first."""
        count = len(self.in_flight)
        self.queued.extendleft((item, True) for item in reversed(self.in_flight.values()))
        self.in_flight.clear()
        return count

    def wake_readers(self) -> None:
        if self.thread_readers:
            self.readable.notify_all()
        if self.async_readers:
            wake_all(self.async_readers)

    def stats(self) -> SubscriptionStats:
        return SubscriptionStats(
            subscriber_name=self.name,
            max_size=self.max_size,
            full_policy=self.full_policy,
            attached=self.attached is not None,
            published=self.published,
            delivered=self.delivered,
            acked=self.acked,
            dropped=self.dropped,
            redelivered=self.redelivered,
            blocked_seconds=self.blocked_seconds,
            depth=len(self.queued),
            in_flight=len(self.in_flight),
            released=(release_in := self.released_in_s(time.monotonic())) is not None and release_in <= 0,
        )
