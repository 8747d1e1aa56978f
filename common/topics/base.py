"""Topic roles: what publishers and subscribers of trajectories and policies may rely on.

Each behavior has two topics (``TopicRegistry`` names them):

* ``trajectories/<behavior>``: bounded, acknowledged fan-out. Every named subscriber owns a durable
  queue whose capacity counts queued *and* in-flight (delivered, not yet acknowledged) items. A
  subscriber that detaches returns its in-flight items to the front of its queue; the next
  subscription of that name gets them again, flagged ``redelivered``. Delivery is therefore
  at-least-once: drop duplicates by ``Trajectory.id`` (``common.topics.Deduplicator``).
* ``policies/<behavior>``: latest-wins by version. Versions only go up; an older or equal version
  is ignored and counted.

``common.topics.memory`` implements these in process; a gRPC transport plugs into the same roles.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

MAX_POLICY_VERSION = 2**53
"""The highest policy version a topic accepts (a larger one is refused, never adopted).

Versions are int64 on the wire, but they are also exported as float64 (Prometheus gauges, JSON): 2**53
is the largest bound under which every version is exact there, and a trainer that resumes above the
highest (highest + 1) can never overflow int64. At one version per millisecond it lasts 285,000 years.
"""

#: The durable subscriber queue the processor declares on every behavior's trajectory topic at start,
#: and the name a trainer subscribes as: a trainer that subscribes after env clients connected still
#: gets every trajectory.
TRAINER_SUBSCRIBER = "trainer"

T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class FullPolicy(str, enum.Enum):
    """What a publish does when a subscriber's queue is full (queued + in flight == max_size)."""

    BLOCK = "block"
    """The publish waits until every blocking queue has room (an ack frees it): backpressure."""
    DROP_OLDEST = "drop_oldest"
    """The oldest unacknowledged item is dropped and counted; the publish never waits."""


@dataclass(frozen=True)
class Delivery(Generic[T_co]):
    """One item handed to a subscriber; acknowledge it by ``tag`` once it is taken in."""

    tag: int
    """Unique within the subscriber's queue, never reused (a redelivery gets a new tag)."""
    item: T_co
    redelivered: bool = False
    """An earlier subscription of this name was given this item and detached without acking it."""


@dataclass(frozen=True)
class SubscriptionStats:
    """Counters of one named subscriber queue (cumulative since it was declared)."""

    subscriber_name: str
    max_size: int
    full_policy: FullPolicy
    attached: bool
    published: int
    """Items enqueued for this subscriber."""
    delivered: int
    """Deliveries handed out, redeliveries included."""
    acked: int
    dropped: int
    """Items let go unacknowledged: drop_oldest, or discarded by ``remove``."""
    redelivered: int
    """Deliveries flagged ``redelivered``."""
    blocked_seconds: float
    """Seconds publishers waited for room in this queue."""
    depth: int
    """Items queued, not yet delivered."""
    in_flight: int
    """Items delivered, not yet acknowledged."""
    released: bool = False
    """A ``block`` queue whose subscriber has been gone longer than its ``release_after_s``: it no longer holds
    back publishers, and drops its oldest items when full (counted in ``dropped``) until a subscriber attaches."""


@dataclass(frozen=True)
class TopicStats:
    """Counters of one trajectory topic, with its subscriber queues."""

    name: str
    published: int
    """Publishes that reached at least one subscriber queue."""
    unrouted: int
    """Publishes dropped because no subscriber queue was declared."""
    blocked_seconds: float
    """Seconds publishers waited for room, in total."""
    blocked_publishers: int
    """Publishers waiting for room right now."""
    subscribers: Mapping[str, SubscriptionStats]

    @property
    def dropped(self) -> int:
        return self.unrouted + sum(s.dropped for s in self.subscribers.values())

    @property
    def depth(self) -> int:
        return sum(s.depth for s in self.subscribers.values())

    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.subscribers.values())


class TrajectorySink(Protocol[T_contra]):
    """Where the processor publishes trajectories."""

    async def publish(self, item: T_contra, timeout_s: float | None = None) -> None:
        """Hand ``item`` to every subscriber queue, waiting at most ``timeout_s`` (None: forever) for room.

        Raises:
            TopicFullError: a blocking queue had no room within ``timeout_s``; nothing was enqueued.
            TopicClosedError: the topic is closed.
        """


class TrajectorySubscription(Protocol[T_co]):
    """One attachment of a named subscriber to a trajectory topic."""

    def get(self, max_items: int = ..., timeout_s: float | None = None) -> Sequence[Delivery[T_co]]:
        """Block the calling thread until at least one item is queued; return up to ``max_items``.

        Returns ``[]`` when ``timeout_s`` passes first. Never call it on an event loop's thread.

        Raises:
            TopicClosedError: the subscription is detached, or the topic is closed and drained.
        """

    async def aget(self, max_items: int = ..., timeout_s: float | None = None) -> Sequence[Delivery[T_co]]:
        """``get`` for a coroutine; cancelling it loses no item."""

    def ack(self, delivery_tags: Iterable[int]) -> int:
        """Release acknowledged deliveries; return how many were in flight (unknown tags are ignored)."""

    def detach(self) -> None:
        """End this attachment; its unacknowledged deliveries go back to the queue front. Idempotent."""

    def stats(self) -> SubscriptionStats: ...


class TrajectorySource(Protocol[T_co]):
    """Where a trainer subscribes to trajectories."""

    def subscribe(self, subscriber_name: str) -> TrajectorySubscription[T_co]: ...


class PolicySink(Protocol[T_contra]):
    """Where a trainer publishes policy versions."""

    @property
    def highest_version(self) -> int:
        """The highest version published so far, -1 if none: resume above it."""

    def publish(self, item: T_contra, version: int) -> bool:
        """Publish ``item`` as ``version``; True iff it is higher than every earlier one (else ignored)."""


class PolicySource(Protocol[T_co]):
    """Where the processor learns of new policy versions."""

    @property
    def highest_version(self) -> int: ...

    def latest(self) -> tuple[int, T_co] | None:
        """The highest version and its item, None before the first publish."""

    def wait_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, T_co] | None:
        """Block until a version above ``than_version`` exists; None on timeout."""

    async def await_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, T_co] | None:
        """``wait_newer`` for a coroutine."""
