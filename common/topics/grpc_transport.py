"""The trainer's side of the topics over gRPC: ``Subscribe``, ``PublishPolicy`` and ``GetPolicyStatus``.

In the stack topology a trainer is its own process (container) and reaches the processor's topics
through the ``AgentProcessor`` service; these classes plug into the same roles as the in-process
topics (``common.topics.base``), so a trainer is written once for both (``connect_trajectories``,
``connect_policies``).

Design: the **synchronous** gRPC API, with one daemon reader thread per subscription. A trainer's
loop is synchronous (block in ``get``, then a TensorFlow update), so the blocking API is what it
needs; it works unchanged from a thread, a process or a coroutine (``aget`` waits on a future the
reader thread wakes, as in ``common.topics.waiting``) and needs no private event loop thread that
every call must be marshalled through. The reader decodes ``DeliveryBatch`` -> ``Delivery(tag,
Trajectory)`` into a bounded local buffer; when it is full the reader stops reading and HTTP/2 flow
control stalls the server, whose queue already counts these items as in flight. Acks go on the same
stream through a queue feeding the request iterator: in order, and before ``detach``'s half-close.

Who holds a subscriber name: the holder wins. The processor attaches one live stream per durable
queue and refuses a second Subscribe of that name with ALREADY_EXISTS (``SubscriberBusyError``) for
as long as the first stream lives; the newcomer retries with backoff (``SUBSCRIBE_RETRY_*``) and a
WARNING each time, and attaches once the holder is gone. Newest-wins would let any peer that
knows the name (``"trainer"``) displace the real trainer at will, and two trainers started by
mistake for one behavior would take turns displacing each other, each training on part of the data
and publishing over the other's policy; with holder-wins the running trainer is never disturbed, the
second one says why it waits, and a trainer restarting after a crash waits only until the processor
notices the old stream is gone: at once for a closed socket, within the processor's keepalive bound
for a hung or vanished peer (``processor.server.ServerOptions.hung_peer_bound_s``).

Delivery is at least once, as in process: everything not acked when the stream ends (``detach``, a
lost connection, a server stop) is requeued by the server for the next subscriber of that name;
items buffered here but not yet taken are then discarded, as the server owns them again. The wire
``Delivery`` carries no redelivered flag, so ``Delivery.redelivered`` is always False here: drop
duplicates by ``Trajectory.id`` with a ``Deduplicator``.

Security: each class takes a ``ClientSecurity`` (TLS, token; none by default); every call carries the
token and, for the processor's logs, the behavior as metadata (a channel passed in brings its own TLS).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import grpc

from common.backoff import Backoff
from common.errors import DeadlineExceededError, StepstreamError, SubscriberBusyError, TopicClosedError, UnknownBehaviorError
from common.logs import identity_metadata
from common.security import PLAINTEXT, ClientSecurity
from common.specs import BrainParameters
from common.topics.base import Delivery, FullPolicy, PolicySink, SubscriptionStats, TrajectorySubscription
from common.topics.grpc_status import GrpcStatusError, error_from_rpc
from common.topics.memory import DEFAULT_MAX_ITEMS, DEFAULT_MAX_SIZE
from common.topics.policy import stamped_with_version
from common.topics.registry import TopicRegistry
from common.topics.waiting import (
    deadline_after,
    expired,
    refuse_in_event_loop,
    remaining_s,
    take_or_wait,
    wake_all,
)
from common.trajectory import Trajectory
from protos import pb
from protos import stepstream_pb2_grpc as pb_grpc

logger = logging.getLogger(__name__)

__all__ = [
    "GrpcPolicyPublisher",
    "GrpcStatusError",
    "GrpcTrajectorySubscription",
    "connect_policies",
    "connect_trajectories",
    "error_from_rpc",
    "open_channel",
]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest message either way; the processor's default limit."""
DETACH_GRACE_S = 5.0
"""How long ``detach`` lets the server end the stream after the half-close before cancelling it."""
CALL_TIMEOUT_S = 30.0
"""Default deadline of a unary call (PublishPolicy, GetPolicyStatus), waiting for the server included."""
POLL_INTERVAL_S = 0.2
"""How often ``wait_for_brain_parameters`` asks again."""
NOT_FOUND_RETRY_S = 120.0
"""How long ``publish`` retries a behavior the processor does not know yet (NOT_FOUND: no config declares
it and no env client has yet), with backoff from ``POLL_INTERVAL_S`` to ``NOT_FOUND_RETRY_MAX_S``, before it raises."""
NOT_FOUND_RETRY_MAX_S = 5.0
"""Longest wait between two tries of a ``publish`` the processor answered NOT_FOUND."""
SUBSCRIBE_RETRY_INITIAL_S = 0.5
"""First wait before a refused (``SubscriberBusyError``) Subscribe is tried again; it doubles each time."""
SUBSCRIBE_RETRY_MAX_S = 10.0
"""Longest wait between two tries of a refused Subscribe (a WARNING is logged per try)."""

MESSAGE_SIZE_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)
"""Channel limits of every stepstream client; the processor refuses larger messages with RESOURCE_EXHAUSTED anyway."""
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
)
"""Client keepalive: notice a vanished processor even on an idle stream or while a call waits. The ping
timeout (gRPC's default 60 s) bounds every ping, as on the server (``processor.server.ServerOptions``):
an unanswered BDP ping would otherwise hold back the keepalive ping for a minute."""
_CHANNEL_OPTIONS = [*MESSAGE_SIZE_OPTIONS, *KEEPALIVE_OPTIONS]


def open_channel(target: str | grpc.Channel, security: ClientSecurity = PLAINTEXT) -> tuple[grpc.Channel, bool]:
    """``(channel, owned)``: a new channel to ``host:port`` with ``security``'s credentials (owned), or the one given."""
    if isinstance(target, str):
        return security.channel(target, _CHANNEL_OPTIONS), True
    return target, False


def call_metadata(security: ClientSecurity, behavior_name: str) -> tuple[tuple[str, str], ...]:
    """The metadata of every call of a trainer-side client: the token, and the behavior for the server's logs."""
    return (*security.metadata(), *identity_metadata(behaviors=[behavior_name]))


class GrpcTrajectorySubscription:
    """A ``TrajectorySubscription`` of ``Trajectory`` over the processor's ``Subscribe`` stream.

    The stream opens at construction (it waits for the processor to come up); a daemon thread
    reads it into a local buffer of at most ``max_buffered`` items. While another live stream holds
    the name, the thread retries with backoff (module docstring) and ``get`` finds nothing; ``stats()``
    says not ``attached`` until the first delivery after such a refusal. ``get`` (a thread) and
    ``aget`` (a coroutine) return as soon as one item is buffered; ``ack`` sends an ``Ack`` and never blocks;
    ``detach`` half-closes the stream after the pending acks, and the server requeues what was not
    acked. Use it as a context manager to detach on exit.

    Args:
        target: ``host:port`` of the processor, or a channel to share (it is then not closed here).
        behavior_name: the behavior whose trajectories to take.
        subscriber_name: the durable queue name; the processor declares ``"trainer"`` at start.
        max_buffered: local buffer capacity in trajectories, >= 1.
        detach_grace_s: how long ``detach`` lets the server end the stream before cancelling it.
        security: TLS credentials and the shared token (plaintext, none by default).

    Raises:
        ValueError: an empty name, or ``max_buffered`` < 1.
    """

    def __init__(
        self,
        target: str | grpc.Channel,
        behavior_name: str,
        subscriber_name: str,
        *,
        max_buffered: int = DEFAULT_MAX_SIZE,
        detach_grace_s: float = DETACH_GRACE_S,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        if not behavior_name or not subscriber_name:
            raise ValueError(f"empty behavior_name or subscriber_name: {behavior_name!r}, {subscriber_name!r}")
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be >= 1, got {max_buffered}")
        self.behavior_name = behavior_name
        self.subscriber_name = subscriber_name
        self._where = f"trajectories/{behavior_name}, subscriber {subscriber_name!r}"
        self._max_buffered = max_buffered
        self._detach_grace_s = detach_grace_s
        self._lock = threading.Lock()
        self._readable = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._async_readers: set[asyncio.Future[None]] = set()
        self._buffer: deque[Delivery[Trajectory]] = deque()
        self._handed: set[int] = set()
        """Tags taken by ``get``/``aget``, not yet acked."""
        self._error: StepstreamError | None = None
        """Set once the stream has ended; ``get`` raises it."""
        self._detached = False
        self._received = self._delivered = self._acked = 0
        self._blocked_seconds = 0.0
        self._cancel_timer: threading.Timer | None = None
        self._detaching = threading.Event()
        self._busy = False
        """The processor refused the name (another stream holds it); retrying."""
        self._channel, self._owns_channel = open_channel(target, security)
        self._stub = pb_grpc.AgentProcessorStub(self._channel)
        self._metadata = call_metadata(security, behavior_name)
        self._outbox: queue.SimpleQueue[pb.SubscriberMessage | None] = queue.SimpleQueue()
        self._call: Any = self._open_call()
        name = f"subscribe/{behavior_name}/{subscriber_name}"  # runs in the creator's log context (common.logs)
        self._reader = threading.Thread(target=contextvars.copy_context().run, args=(self._read,), name=name, daemon=True)
        self._reader.start()

    # -- the stream ------------------------------------------------------------------------------

    def _open_call(self) -> Any:
        """Open a Subscribe stream whose requests come from ``self._outbox``."""
        return self._stub.Subscribe(self._requests(self._outbox), metadata=self._metadata, wait_for_ready=True)

    def _requests(self, outbox: queue.SimpleQueue[pb.SubscriberMessage | None]) -> Iterator[pb.SubscriberMessage]:
        """SubscribeOpen, then the acks as they are queued; returns (half-closes) on None."""
        yield pb.SubscriberMessage(
            open=pb.SubscribeOpen(behavior_name=self.behavior_name, subscriber_name=self.subscriber_name)
        )
        while (message := outbox.get()) is not None:
            yield message

    def _read(self) -> None:
        """The reader thread: buffer every batch until the stream ends, then record why it ended."""
        error: StepstreamError = TopicClosedError(f"{self._where}: the processor ended the stream")
        backoff = Backoff(SUBSCRIBE_RETRY_INITIAL_S, SUBSCRIBE_RETRY_MAX_S, jitter=0.0)
        try:
            while True:
                try:
                    for batch in self._call:
                        self._busy = False
                        self._buffer_batch(batch)
                    break
                except grpc.RpcError as rpc_error:
                    error = error_from_rpc(rpc_error, self._where)
                    if not isinstance(error, SubscriberBusyError) or not self._retry_after(backoff.next_delay_s(), error):
                        break
        except StepstreamError as decode_error:  # a malformed trajectory: give up on this stream
            error = decode_error
            self._call.cancel()
        finally:
            self._outbox.put(None)  # ends the request iterator, whose thread would wait forever
            with self._lock:
                if self._detached:
                    error = TopicClosedError(f"{self._where}: detached")
                elif isinstance(error, TopicClosedError):
                    logger.info("%s", error)
                else:
                    logger.warning("subscription ended: %s", error)
                self._error = error
                self._buffer.clear()  # unacked: the server has requeued them
                self._handed.clear()
                self._wake_readers()
                if self._cancel_timer is not None:
                    self._cancel_timer.cancel()
            if self._owns_channel:
                self._channel.close()

    def _retry_after(self, wait_s: float, refusal: StepstreamError) -> bool:
        """Open a new stream after ``wait_s`` (the name was held by another); False if detached meanwhile."""
        self._busy = True
        logger.warning("%s; subscribing again in %.1f s", refusal, wait_s)
        self._outbox.put(None)  # ends the refused call's request iterator
        if self._detaching.wait(wait_s):
            return False
        with self._lock:  # a new outbox for the new stream (nothing was delivered, so no ack is pending)
            if self._detached:  # detach() ended the old outbox, not this one
                return False
            self._outbox = queue.SimpleQueue()
            self._call = self._open_call()
        return True

    def _buffer_batch(self, batch: pb.DeliveryBatch) -> None:
        deliveries = [Delivery(d.delivery_tag, Trajectory.from_proto(d.trajectory)) for d in batch.deliveries]
        with self._lock:
            started = time.monotonic()
            while len(self._buffer) >= self._max_buffered and not self._detached:
                self._not_full.wait()
            self._blocked_seconds += time.monotonic() - started
            if self._detached:  # keep draining until the server ends the stream; it requeues these
                return
            self._buffer.extend(deliveries)
            self._received += len(deliveries)
            self._wake_readers()

    def _wake_readers(self) -> None:
        """Wake ``get`` and ``aget`` waiters (the lock is held)."""
        self._readable.notify_all()
        if self._async_readers:
            wake_all(self._async_readers)

    # -- TrajectorySubscription ------------------------------------------------------------------

    def _take(self, max_items: int) -> list[Delivery[Trajectory]]:
        """Take what is buffered (the lock is held)."""
        if self._detached or self._error is not None:
            raise self._error or TopicClosedError(f"{self._where}: detached")
        count = min(max_items, len(self._buffer))
        taken = [self._buffer.popleft() for _ in range(count)]
        self._handed.update(d.tag for d in taken)
        self._delivered += count
        if count:
            self._not_full.notify()
        return taken

    def get(self, max_items: int = DEFAULT_MAX_ITEMS, timeout_s: float | None = None) -> list[Delivery[Trajectory]]:
        """Block the calling thread until a trajectory is buffered, then take up to ``max_items``.

        Args:
            max_items: the largest batch to return, >= 1.
            timeout_s: the longest wait; None waits until an item arrives, 0 only polls.

        Returns:
            The deliveries, oldest first, in flight until acked; ``[]`` if ``timeout_s`` passed.

        Raises:
            TopicClosedError: detached, or the stream ended (processor stopped or unreachable).
            StepstreamError: the processor refused the subscription (e.g. ``ProtocolError`` for an
                empty name) or ended it with another status.
            RuntimeError: it would wait on a running event loop's thread (use ``aget``).
        """
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        deadline = deadline_after(timeout_s)
        with self._lock:
            while True:
                taken = self._take(max_items)
                remaining = remaining_s(deadline)
                if taken or expired(remaining):
                    return taken
                refuse_in_event_loop("GrpcTrajectorySubscription.get")
                self._readable.wait(remaining)

    async def aget(self, max_items: int = DEFAULT_MAX_ITEMS, timeout_s: float | None = None) -> list[Delivery[Trajectory]]:
        """``get`` for a coroutine of any event loop; cancelling it loses no item.

        Raises:
            TopicClosedError: detached, or the stream ended.
            StepstreamError: the processor ended the stream with another status.
        """
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        return await take_or_wait(self._lock, lambda: self._take(max_items), self._async_readers, timeout_s)

    def ack(self, delivery_tags: Iterable[int]) -> int:
        """Acknowledge taken deliveries; the ``Ack`` is sent in the background, in order.

        Returns:
            How many of the tags were taken and not yet acked; unknown or repeated tags, and every
            tag once the stream has ended, are ignored.
        """
        with self._lock:
            if self._detached or self._error is not None:
                return 0
            released = [tag for tag in dict.fromkeys(delivery_tags) if tag in self._handed]
            self._handed.difference_update(released)
            self._acked += len(released)
        if released:
            self._outbox.put(pb.SubscriberMessage(ack=pb.Ack(delivery_tags=released)))
        return len(released)

    def detach(self) -> None:
        """Half-close the stream after the pending acks; the server requeues the unacked items. Idempotent.

        From a plain thread this waits (at most ``detach_grace_s``) until the server has ended the
        stream, so a new subscription of this name then gets the unacked items. On an event loop's
        thread it does not wait (the server may run on that loop); the stream is cancelled in the
        background if the server has not ended it within ``detach_grace_s``.
        """
        with self._lock:
            if self._detached:
                return
            self._detached = True
            self._not_full.notify_all()
            self._wake_readers()
            outbox = self._outbox
        self._detaching.set()
        outbox.put(None)
        if asyncio._get_running_loop() is None:
            self._reader.join(self._detach_grace_s)
            if self._reader.is_alive():
                logger.warning("%s: the stream did not end within %.1f s; cancelling", self._where, self._detach_grace_s)
                self._call.cancel()
        else:
            with self._lock:
                if self._error is None:  # the reader still runs; it cancels the timer when it ends
                    self._cancel_timer = threading.Timer(self._detach_grace_s, self._cancel_if_running)
                    self._cancel_timer.name = f"{self._reader.name}/detach"
                    self._cancel_timer.daemon = True
                    self._cancel_timer.start()
        logger.info("%s: detached", self._where)

    def _cancel_if_running(self) -> None:
        if self._reader.is_alive():
            self._call.cancel()

    def stats(self) -> SubscriptionStats:
        """The client side: ``published`` = received, ``depth`` = buffered, ``max_size`` = ``max_buffered``."""
        with self._lock:
            return SubscriptionStats(
                subscriber_name=self.subscriber_name,
                max_size=self._max_buffered,
                full_policy=FullPolicy.BLOCK,
                attached=self._error is None and not self._detached and not self._busy,
                published=self._received,
                delivered=self._delivered,
                acked=self._acked,
                dropped=0,
                redelivered=0,
                blocked_seconds=self._blocked_seconds,
                depth=len(self._buffer),
                in_flight=len(self._handed),
            )

    def __enter__(self) -> GrpcTrajectorySubscription:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.detach()


class GrpcPolicyPublisher:
    """A ``PolicySink`` of ``PolicyUpdate`` for one behavior over ``PublishPolicy`` / ``GetPolicyStatus``.

    Every call is a blocking unary RPC that first waits for the processor to be reachable, at most
    ``timeout_s``. Use it as a context manager (or ``close``) to release its channel.

    Args:
        target: ``host:port`` of the processor, or a channel to share (it is then not closed here).
        behavior_name: the behavior whose policies this publishes.
        timeout_s: the deadline of each call.
        security: TLS credentials and the shared token (plaintext, none by default).
        snapshots: publish self-play snapshots instead (``snapshots/<behavior>``): ``publish(item, number)`` sends
            ``item`` with ``PolicyUpdate.snapshot`` = ``number`` and its own version (``common.self_play``).
    """

    def __init__(
        self,
        target: str | grpc.Channel,
        behavior_name: str,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
        security: ClientSecurity = PLAINTEXT,
        snapshots: bool = False,
    ) -> None:
        if not behavior_name:
            raise ValueError("behavior_name must not be empty")
        self.behavior_name = behavior_name
        self.snapshots = snapshots
        self.timeout_s = timeout_s
        self._metadata = call_metadata(security, behavior_name)
        self._channel, self._owns_channel = open_channel(target, security)
        self._stub = pb_grpc.AgentProcessorStub(self._channel)

    def status(self, behavior_name: str | None = None, timeout_s: float | None = None) -> pb.PolicyStatus:
        """The processor's ``PolicyStatus`` of ``behavior_name`` (default: this publisher's).

        Raises:
            StepstreamError: the call failed (``DeadlineExceededError`` when the processor was not
                reachable within ``timeout_s``, default ``self.timeout_s``).
        """
        name = behavior_name or self.behavior_name
        query = pb.PolicyQuery(behavior_name=name)
        try:
            return self._stub.GetPolicyStatus(
                query, timeout=timeout_s or self.timeout_s, metadata=self._metadata, wait_for_ready=True
            )
        except grpc.RpcError as err:
            raise error_from_rpc(err, f"GetPolicyStatus({name!r})") from err

    @property
    def highest_version(self) -> int:
        """The highest version the processor holds for the behavior, -1 if none (one RPC)."""
        return int(self.status().highest_version)

    def publish(self, item: pb.PolicyUpdate, version: int) -> bool:
        """Hand ``item`` to the processor as ``version`` (stamped on a copy if ``item.version`` differs).

        Returns:
            True iff the processor accepted it: ``version`` was above every earlier one.

        A behavior the processor does not know yet (NOT_FOUND) is retried with backoff, with one log
        line, for ``NOT_FOUND_RETRY_S``: a trainer may start before any env client declares it.

        Raises:
            UnknownBehaviorError: still not known after ``NOT_FOUND_RETRY_S``.
            ProtocolError: the processor refused the update (an empty name, an artifact it cannot
                run, an action spec that differs from the declared one).
            StepstreamError: the call failed otherwise.
            ValueError: ``item`` is for another behavior.
        """
        if item.behavior_name != self.behavior_name:
            raise ValueError(f"a policy of {item.behavior_name!r} given to the publisher of {self.behavior_name!r}")
        if self.snapshots:
            snapshot = pb.PolicyUpdate()
            snapshot.CopyFrom(item)
            snapshot.snapshot = version
            item = snapshot
        else:
            item = stamped_with_version(item, version)
        deadline, backoff = deadline_after(NOT_FOUND_RETRY_S), Backoff(POLL_INTERVAL_S, NOT_FOUND_RETRY_MAX_S, jitter=0.0)
        while True:
            try:
                reply = self._stub.PublishPolicy(item, timeout=self.timeout_s, metadata=self._metadata, wait_for_ready=True)
                break
            except grpc.RpcError as err:
                error = error_from_rpc(err, f"PublishPolicy({self.behavior_name!r}, version {version})")
                if not isinstance(error, UnknownBehaviorError) or expired(remaining_s(deadline)):
                    raise error from err
                if backoff.attempts == 0:
                    logger.warning("%s; retrying for up to %.0f s (until an env client declares it)", error, NOT_FOUND_RETRY_S)
                time.sleep(backoff.next_delay_s())
        if not reply.accepted:
            logger.warning("%r: version %d not accepted (have %d)", self.behavior_name, version, reply.current_version)
        return bool(reply.accepted)

    def finish(self, trainer_step: int, policy_version: int) -> pb.PolicyStatus:
        """Tell the processor this behavior's training is over (``FinishTraining``): it ends the env clients.

        Raises:
            StepstreamError: the call failed (the processor is gone, or does not know the behavior).
        """
        request = pb.TrainingFinished(
            behavior_name=self.behavior_name, trainer_step=trainer_step, policy_version=policy_version
        )
        try:
            return self._stub.FinishTraining(request, timeout=self.timeout_s, metadata=self._metadata, wait_for_ready=True)
        except grpc.RpcError as err:
            raise error_from_rpc(err, f"FinishTraining({self.behavior_name!r})") from err

    def wait_for_brain_parameters(
        self, behavior_name: str | None = None, timeout_s: float | None = 60.0, poll_interval_s: float = POLL_INTERVAL_S
    ) -> BrainParameters:
        """Poll ``GetPolicyStatus`` until an env client has declared the behavior; a trainer sizes its networks from it.

        An unreachable processor counts as "not yet" until ``timeout_s`` passes.

        Raises:
            DeadlineExceededError: no env client declared it within ``timeout_s``.
            ProtocolError: the declared BrainParameters do not decode.
            StepstreamError: the processor refused the query.
        """
        name = behavior_name or self.behavior_name
        deadline = deadline_after(timeout_s)
        while True:
            remaining = remaining_s(deadline)
            try:
                status = self.status(name, None if remaining is None else max(remaining, 0.001))
                if status.HasField("brain_parameters"):
                    return BrainParameters.from_proto(status.brain_parameters)
            except (TopicClosedError, DeadlineExceededError, UnknownBehaviorError) as err:  # not known: not declared yet
                logger.debug("processor not ready: %s", err)
            remaining = remaining_s(deadline)
            if expired(remaining):
                raise DeadlineExceededError(f"behavior {name!r} was not declared by an env client within {timeout_s} s")
            time.sleep(poll_interval_s if remaining is None else min(poll_interval_s, remaining))

    def close(self) -> None:
        """Close the channel if this publisher opened it. Idempotent."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> GrpcPolicyPublisher:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.close()


# -- factories -------------------------------------------------------------------------------------


def connect_trajectories(
    source: str | grpc.Channel | TopicRegistry[Any],
    behavior_name: str,
    subscriber_name: str,
    security: ClientSecurity = PLAINTEXT,
) -> TrajectorySubscription[Trajectory]:
    """Subscribe to ``trajectories/<behavior_name>`` in process (a ``TopicRegistry``) or at ``host:port``.

    Raises:
        ProtocolError: (in process) the name is already attached.
        TopicClosedError: (in process) the topic is closed.
    """
    if isinstance(source, TopicRegistry):
        return source.trajectories(behavior_name).subscribe(subscriber_name)
    return GrpcTrajectorySubscription(source, behavior_name, subscriber_name, security=security)


def connect_policies(
    source: str | grpc.Channel | TopicRegistry[pb.PolicyUpdate], behavior_name: str, security: ClientSecurity = PLAINTEXT
) -> PolicySink[pb.PolicyUpdate]:
    """The ``policies/<behavior_name>`` sink, in process (a ``TopicRegistry``) or at ``host:port``."""
    if isinstance(source, TopicRegistry):
        return source.policies(behavior_name)
    return GrpcPolicyPublisher(source, behavior_name, security=security)
