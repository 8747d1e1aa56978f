"""``trajectories/<behavior>`` as a JetStream stream with Interest retention (see the package docstring)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js import api

from common.errors import (
    DeadlineExceededError,
    ProtocolError,
    PublishInDoubtCancelledError,
    PublishInDoubtError,
    TopicClosedError,
    TopicFullError,
)
from common.topics.base import FullPolicy, TopicStats
from common.topics.jetstream.connection import (
    HEADER_ROOM_BYTES,
    REQUEST_TIMEOUT_S,
    UNREACHABLE,
    JetStreamConnection,
    broker_error,
    pause,
    request_backoff,
    subject_token,
)
from common.topics.jetstream.consumer import JetStreamSubscription
from common.topics.memory import DEFAULT_MAX_SIZE
from common.topics.registry import trajectory_topic_name
from common.topics.waiting import deadline_after, expired, refuse_in_event_loop, remaining_s
from common.trajectory import Trajectory

logger = logging.getLogger(__name__)

T = TypeVar("T")

RECOMMENDED_MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
"""The broker's ``max_payload`` stepstream is built for (``max_payload: 8MB`` in nats-server.conf)."""
DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
"""``max_bytes`` of a trajectory stream declared without one."""
ACK_WAIT_S = 30.0
"""How long a delivery may stay unacked before the broker delivers it again (a subscriber died)."""
DUPLICATE_WINDOW_S = 120.0
"""How long the broker remembers a ``Nats-Msg-Id``: a publish retried within it is stored once."""
_STORE_FULL_CODE = 10077
"""JetStream's err_code for a store refusing a message ("maximum messages/bytes exceeded")."""


class JetStreamTrajectoryTopic:
    """``trajectories/<behavior>`` on a JetStream stream: a ``TrajectorySink`` and ``TrajectorySource``.

    Made by ``JetStreamTopics.trajectories``. The stream is created at the first ``declare``,
    ``subscribe`` or ``publish`` (module docstring for the mapping of the topic's semantics).
    """

    def __init__(
        self, conn: JetStreamConnection, behavior_name: str, max_bytes: int = DEFAULT_MAX_BYTES, ack_wait_s: float = ACK_WAIT_S
    ) -> None:
        self._conn = conn
        self._ack_wait_s = ack_wait_s
        self.behavior_name = behavior_name
        token = subject_token(behavior_name)
        self.stream_name = f"trajectories_{token}"
        self.subject = f"trajectories.{token}"
        self._max_bytes = max_bytes
        self._stream_settings: tuple[int, FullPolicy] | None = None
        self._consumers: set[str] = set()
        self._routed = False
        """Some subscriber is declared (here or by another process): publishes are kept."""
        self._closed = False
        self._published = self._unrouted = self._duplicates = 0
        self._blocked_seconds = 0.0
        self._blocked_publishers = 0
        self._unrouted_expected = False

    @property
    def name(self) -> str:
        return trajectory_topic_name(self.behavior_name)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_payload_bytes(self) -> int:
        """The largest encoded trajectory the connected broker takes."""
        return self._conn.max_payload - HEADER_ROOM_BYTES

    def expect_no_subscribers(self) -> None:
        """Publishes with no declared subscriber are meant to be dropped: count, do not warn."""
        self._unrouted_expected = True

    # -- stream and consumers ------------------------------------------------------------------

    def declare(
        self,
        subscriber_name: str,
        max_size: int | None = None,
        full_policy: FullPolicy | None = None,
        *,
        release_after_s: float | None = None,
    ) -> None:
        """Create the stream (if absent) and the subscriber's durable consumer (if absent).

        Args:
            subscriber_name: the durable consumer's name, e.g. ``TRAINER_SUBSCRIBER``.
            max_size: the stream's ``max_msgs`` and the consumer's ``max_ack_pending``, >= 1;
                None keeps the stream's (``DEFAULT_MAX_SIZE`` for a new one).
            full_policy: None keeps the stream's (``block`` for a new one).
            release_after_s: accepted as the in-process topic takes it, not applied: the broker's
                stream is not released while its durable consumer is away.

        Raises:
            ValueError: ``max_size`` < 1 or an empty name.
            TopicClosedError: the topic is closed.
            StepstreamError: the broker refused (``DeadlineExceededError`` when unreachable).
        """
        del release_after_s  # the broker's stream is not released
        self._check_open()
        if not subscriber_name:
            raise ValueError(f"topic {self.name!r}: subscriber_name must not be empty")
        if max_size is not None and max_size < 1:
            raise ValueError(f"topic {self.name!r}: max_size of subscriber {subscriber_name!r} must be >= 1, got {max_size}")
        policy = None if full_policy is None else FullPolicy(full_policy)
        self._call(self._declare(subscriber_name, max_size, policy))

    async def _declare(self, subscriber_name: str, max_size: int | None, full_policy: FullPolicy | None) -> None:
        size, _ = await self._ensure_stream(max_size, full_policy)
        consumer = subject_token(subscriber_name)
        if consumer in self._consumers:
            return
        try:
            await self._conn.js.consumer_info(self.stream_name, consumer)
        except nats.js.errors.NotFoundError:
            pass
        else:  # declared earlier, by this or another process: it keeps its settings and position
            self._consumers.add(consumer)
            self._routed = True
            return
        config = api.ConsumerConfig(
            durable_name=consumer,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_wait=self._ack_wait_s,
            max_ack_pending=size,
            max_deliver=-1,
        )
        await self._conn.js.add_consumer(self.stream_name, config)
        self._consumers.add(consumer)
        self._routed = True
        logger.info("topic %r: durable consumer %r declared", self.name, subscriber_name)

    async def _ensure_stream(self, max_size: int | None, full_policy: FullPolicy | None) -> tuple[int, FullPolicy]:
        known = self._stream_settings
        if known is not None and max_size in (None, known[0]) and full_policy in (None, known[1]):
            return known
        js = self._conn.js
        try:
            info = await js.stream_info(self.stream_name)
        except nats.js.errors.NotFoundError:
            info = None
        if info is not None:
            have = (int(info.config.max_msgs or DEFAULT_MAX_SIZE), _full_policy_of(info.config.discard))
            want = (max_size or have[0], full_policy or have[1])
            if want != have:
                await js.update_stream(self._stream_config(*want))
                logger.info("topic %r: stream limits updated from %s to %s", self.name, have, want)
            self._stream_settings = want
            return want
        want = (max_size or DEFAULT_MAX_SIZE, full_policy or FullPolicy.BLOCK)
        await js.add_stream(self._stream_config(*want))
        logger.info("topic %r: stream %r created (max_msgs=%d, %s)", self.name, self.stream_name, *want)
        self._stream_settings = want
        return want

    def _stream_config(self, max_size: int, full_policy: FullPolicy) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.stream_name,
            subjects=[self.subject],
            retention=api.RetentionPolicy.INTEREST,
            storage=api.StorageType.FILE,
            discard=api.DiscardPolicy.NEW if full_policy is FullPolicy.BLOCK else api.DiscardPolicy.OLD,
            max_msgs=max_size,
            max_bytes=self._max_bytes,
            max_msg_size=self.max_payload_bytes + HEADER_ROOM_BYTES,
            duplicate_window=DUPLICATE_WINDOW_S,
        )

    # -- publishing ------------------------------------------------------------------------------

    async def publish(self, item: Trajectory, timeout_s: float | None = None) -> None:
        """Store ``item`` in the stream, waiting at most ``timeout_s`` for room or for the broker.

        Returns once the broker acknowledged it (it is then on disk). ``Nats-Msg-Id`` is the
        trajectory id, so a retry after a lost acknowledgement is not stored twice.

        Raises:
            TopicFullError: the stream stayed full (``block``), or the broker unreachable, past
                ``timeout_s``; or the trajectory is larger than the broker's ``max_payload``.
            PublishInDoubtError: as ``TopicFullError``, but an attempt went unanswered: the broker may
                have stored it (``_PublishAttempts``).
            PublishInDoubtCancelledError: the caller was cancelled while an attempt went unanswered.
            TopicClosedError: the topic is closed (before any attempt was sent).
        """
        payload = self._encode(item)
        attempts = _PublishAttempts()
        try:
            await self._conn.arun(self._publish(payload, str(item.id), timeout_s, attempts))
        except asyncio.CancelledError as err:
            # The publish runs on in the connection's loop (``arun`` shields it) until its next attempt,
            # which it then does not make: what this says stays true.
            if attempts.abandon():
                raise PublishInDoubtCancelledError(f"topic {self.name!r}: publish of {item.id} cancelled unanswered") from err
            raise

    def publish_blocking(self, item: Trajectory, timeout_s: float | None = None) -> None:
        """``publish`` for a thread that is not running an event loop (same errors)."""
        refuse_in_event_loop("JetStreamTrajectoryTopic.publish_blocking")
        payload = self._encode(item)
        self._call(self._publish(payload, str(item.id), timeout_s, _PublishAttempts()))

    def _encode(self, item: Trajectory) -> bytes:
        self._check_open()
        payload = item.to_proto().SerializeToString()
        if len(payload) > self.max_payload_bytes:
            raise TopicFullError(
                f"topic {self.name!r}: trajectory {item.id} is {len(payload)} bytes, above the broker's limit of "
                f"{self.max_payload_bytes} bytes (max_payload {self._conn.max_payload}; stepstream expects "
                f"max_payload: {RECOMMENDED_MAX_PAYLOAD_BYTES // (1024 * 1024)}MB): shorten time_horizon"
            )
        return payload

    async def _publish(self, payload: bytes, msg_id: str, timeout_s: float | None, attempts: _PublishAttempts) -> None:
        deadline = deadline_after(timeout_s)
        if self._stream_settings is None:
            await self._retrying(lambda: self._ensure_stream(None, None), deadline, timeout_s)
        if not await self._is_routed():
            return
        wait = _Wait()
        try:
            await self._attempts(payload, msg_id, timeout_s, deadline, attempts, wait)
        finally:
            if wait.since is not None:
                self._blocked_publishers -= 1
                self._blocked_seconds += time.monotonic() - wait.since

    async def _is_routed(self) -> bool:
        """Whether a declared subscriber's consumer takes publishes in; if not, the publish is counted as unrouted (and
        dropped, with a warning the first time where none was expected)."""
        if self._routed or await self._has_consumers():  # another process may have declared them
            return True
        if not self._unrouted and not self._unrouted_expected:
            logger.warning("topic %r has no declared subscriber: publishes are dropped (declare one first)", self.name)
        self._unrouted += 1
        return False

    async def _attempts(
        self,
        payload: bytes,
        msg_id: str,
        timeout_s: float | None,
        deadline: float | None,
        attempts: _PublishAttempts,
        wait: _Wait,
    ) -> None:
        """Attempts with backoff until the broker acknowledges the publish, or ``deadline`` passes (then raises, as
        ``publish``). Past the deadline, an attempt in doubt gets one more try while the broker is connected: its
        answer settles it."""
        backoff = request_backoff()
        last_try = False
        while True:
            self._check_open_for(msg_id, attempts)
            attempt_started = time.monotonic()
            disconnects = self._conn.disconnects
            if not self._conn.nc.is_connected:  # made while the broker is away: this publish waits
                self._waiting(wait, attempt_started)
            if not attempts.begin():
                return  # the caller was cancelled, and has counted what it knew
            timeout = REQUEST_TIMEOUT_S if last_try else self._request_timeout(deadline)
            outcome = await self._attempt(payload, msg_id, timeout, attempts)
            if isinstance(outcome, api.PubAck):
                if self._conn.disconnects != disconnects:  # buffered by the client until the broker came back
                    self._waiting(wait, attempt_started)
                self._published += 1
                self._duplicates += bool(outcome.duplicate)
                return
            self._waiting(wait, attempt_started)
            if last_try or expired(remaining_s(deadline)):
                last_try = self._one_more_try(last_try, attempts)
                if not last_try:
                    error = PublishInDoubtError if attempts.in_doubt else TopicFullError
                    raise error(f"topic {self.name!r}: no room for {msg_id} within timeout_s={timeout_s}: {outcome}")
                continue
            await pause(backoff, deadline)

    def _check_open_for(self, msg_id: str, attempts: _PublishAttempts) -> None:
        """Raises TopicClosedError, or PublishInDoubtError once an attempt went unanswered, when the topic is closed."""
        try:
            self._check_open()
        except TopicClosedError as err:
            if attempts.in_doubt:
                raise PublishInDoubtError(f"topic {self.name!r} closed with {msg_id} unanswered: {err}") from err
            raise

    def _waiting(self, wait: _Wait, since: float) -> None:
        """The publish waits from ``since`` on (a refusal, or an attempt made while the broker was away), unless it
        already waited: counted in ``blocked_publishers`` until it ends."""
        if wait.since is None:
            wait.since = since
            self._blocked_publishers += 1

    def _one_more_try(self, last_try: bool, attempts: _PublishAttempts) -> bool:
        """Past the deadline: whether an attempt in doubt gets its one more try (not made yet, the broker connected)."""
        return attempts.in_doubt and not last_try and self._conn.nc.is_connected

    async def _attempt(self, payload: bytes, msg_id: str, timeout: float, attempts: _PublishAttempts) -> api.PubAck | str:
        """One publish attempt: the broker's acknowledgement, or why it may be retried.

        Raises:
            PublishInDoubtError: it failed for good after an attempt the broker may have stored.
            TopicClosedError: the connection closed, and nothing of it was stored.
            ProtocolError: the broker refused it for good (not for a full stream).
        """
        try:
            ack = await self._conn.js.publish(self.subject, payload, timeout=timeout, headers={"Nats-Msg-Id": msg_id})
        except (nats.errors.OutboundBufferLimitError, nats.js.errors.NoStreamResponseError) as err:
            attempts.not_sent()  # not sent, or answered "no stream here" (nothing stored)
            return f"the broker is unreachable ({type(err).__name__})"
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError) as err:
            attempts.not_sent()
            error = PublishInDoubtError if attempts.in_doubt else TopicClosedError
            raise error(f"topic {self.name!r}: the connection closed with {msg_id} unpublished") from err
        except nats.js.errors.APIError as err:
            if err.err_code == _STORE_FULL_CODE:
                # The broker checks Nats-Msg-Id before the stream's limits: had an earlier attempt been
                # stored, this one would have been acknowledged as a duplicate. So none was.
                attempts.refused()
                return f"the stream is full ({err.description})"
            if isinstance(err, UNREACHABLE):
                return f"the broker did not store it ({err.description})"
            if attempts.in_doubt:
                raise PublishInDoubtError(f"topic {self.name!r}: publish of {msg_id}: {err.description}") from err
            raise broker_error(f"topic {self.name!r}: publish of {msg_id}", err) from err
        except UNREACHABLE as err:
            return f"the broker is unreachable ({type(err).__name__})"
        except Exception as err:  # whatever it was, the attempt may have reached the broker
            raise PublishInDoubtError(f"topic {self.name!r}: publish of {msg_id}: {err!r}") from err
        attempts.stored()
        return ack

    async def _has_consumers(self) -> bool:
        info = await self._conn.js.stream_info(self.stream_name)
        if info.state.consumer_count:
            self._routed = True  # some exist: never ask again
        return bool(info.state.consumer_count)

    @staticmethod
    def _request_timeout(deadline: float | None) -> float:
        remaining = remaining_s(deadline)
        return REQUEST_TIMEOUT_S if remaining is None else max(0.05, min(REQUEST_TIMEOUT_S, remaining))

    async def _retrying(self, call: Callable[[], Awaitable[T]], deadline: float | None, timeout_s: float | None) -> T:
        backoff = request_backoff()
        while True:
            try:
                return await call()
            except UNREACHABLE as err:
                if expired(remaining_s(deadline)):
                    raise TopicFullError(
                        f"topic {self.name!r}: the broker {self._conn.url} did not answer within timeout_s={timeout_s}"
                    ) from err
                await pause(backoff, deadline)

    # -- subscribing -----------------------------------------------------------------------------

    def subscribe(
        self,
        subscriber_name: str,
        max_size: int | None = None,
        full_policy: FullPolicy | None = None,
        *,
        declared_only: bool = False,
    ) -> JetStreamSubscription:
        """Bind to the subscriber's durable consumer, declaring it (and the stream) first if needed.

        Several subscriptions of one name share its deliveries (the broker does not refuse a
        second one, unlike the in-process topic).

        Args:
            declared_only: set by the processor's ``Subscribe`` RPC, which does not relay a broker's
                stream: refused, naming the broker to subscribe at instead.

        Raises:
            ProtocolError: (precondition) ``declared_only``.
            as ``declare``.
        """
        if declared_only:
            raise ProtocolError(
                f"topic {self.name!r} is on the NATS broker {self._conn.url}: subscribe there "
                "(stepstream trainer --topics URL), not over this processor's Subscribe",
                precondition=True,
            )
        self.declare(subscriber_name, max_size, full_policy)
        return JetStreamSubscription(self._conn, self.stream_name, self.name, subscriber_name, lambda: self._stream_settings)

    def remove(self, subscriber_name: str) -> int:
        """Delete the subscriber's durable consumer: a subscriber gone for good (its behavior finished training).

        With Interest retention the broker then drops what only that consumer held, so publishers
        blocked on a full ``block`` stream get room, in this process and in every other processor
        publishing into the stream (``processor.behaviors.BehaviorTable.finish``). A consumer already
        deleted, by another processor, is not an error.

        Returns:
            The messages it had not yet acknowledged (pending and in flight); 0 if there was no such consumer.

        Raises:
            TopicClosedError: the topic is closed.
            StepstreamError: the broker refused (``DeadlineExceededError`` when unreachable).
        """
        self._check_open()
        return self._call(self._remove(subscriber_name))

    async def _remove(self, subscriber_name: str) -> int:
        consumer = subject_token(subscriber_name)
        self._consumers.discard(consumer)
        try:
            info = await self._conn.js.consumer_info(self.stream_name, consumer)
            await self._conn.js.delete_consumer(self.stream_name, consumer)
        except nats.js.errors.NotFoundError:
            return 0
        discarded = int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        logger.info("topic %r: durable consumer %r removed (%d unacknowledged)", self.name, subscriber_name, discarded)
        return discarded

    def _call(self, coro: Awaitable[T]) -> T:
        try:
            return self._conn.run(coro)
        except UNREACHABLE as err:
            raise DeadlineExceededError(f"topic {self.name!r}: the broker {self._conn.url} did not answer: {err!r}") from err
        except nats.errors.Error as err:
            raise broker_error(f"topic {self.name!r}", err) from err

    def _check_open(self) -> None:
        if self._closed:
            raise TopicClosedError(f"topic {self.name!r} is closed")

    def stats(self) -> TopicStats:
        """The publisher's counters (``subscribers`` is empty: each subscription counts its own)."""
        return TopicStats(
            name=self.name,
            published=self._published,
            unrouted=self._unrouted,
            blocked_seconds=self._blocked_seconds,
            blocked_publishers=self._blocked_publishers,
            subscribers={},
        )

    @property
    def duplicates(self) -> int:
        """Publishes the broker recognised by ``Nats-Msg-Id`` as already stored (retries)."""
        return self._duplicates

    def close(self) -> None:
        """Refuse further publishes here; the stream and what it holds stay on the broker. Idempotent."""
        self._closed = True


class _Wait:
    """When one publish began to wait (``JetStreamTrajectoryTopic._waiting``); None while it has not."""

    __slots__ = ("since",)

    def __init__(self) -> None:
        self.since: float | None = None


class _PublishAttempts:
    """What the attempts of one publish tell about the broker's store, shared with a caller on another thread.

    An attempt sent and never answered (its acknowledgement timed out, the broker died, the caller was
    cancelled) leaves the trajectory **in doubt**: the broker may have stored it. The next attempt's
    answer settles it: an acknowledgement (perhaps a duplicate one), or a refusal of a full stream,
    which the broker only gives when it holds no message with that ``Nats-Msg-Id``, so long as it still
    remembers the ids of every attempt in doubt (``DUPLICATE_WINDOW_S`` since the first was sent; after
    that a refusal settles nothing). An attempt the client refused to send (buffer full, connection
    closed) changes nothing. ``abandon`` (the caller) and ``begin`` (the connection's loop) are atomic:
    after ``abandon`` no attempt starts, so its answer stays true.

    Args:
        clock: seconds, monotonic (a test's stand-in for ``time.monotonic``).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._abandoned = False
        self._was_in_doubt = False
        self._doubt_since: float | None = None
        """When the first attempt in doubt was sent."""
        self.in_doubt = False

    def begin(self) -> bool:
        """An attempt is about to be sent (False: the caller abandoned the publish, send nothing)."""
        with self._lock:
            if self._abandoned:
                return False
            self._was_in_doubt, self.in_doubt = self.in_doubt, True
            if not self._was_in_doubt:
                self._doubt_since = self._clock()
            return True

    def not_sent(self) -> None:
        with self._lock:
            self.in_doubt = self._was_in_doubt

    def refused(self) -> None:
        """The broker refused the attempt for a full stream."""
        with self._lock:
            assert self._doubt_since is not None, "refused before any attempt began"
            if self._clock() - self._doubt_since < DUPLICATE_WINDOW_S:
                self.in_doubt = False

    def stored(self) -> None:
        with self._lock:
            self.in_doubt = False

    def abandon(self) -> bool:
        """Start no more attempts; whether the broker may have stored the trajectory."""
        with self._lock:
            self._abandoned = True
            return self.in_doubt


def _full_policy_of(discard: api.DiscardPolicy | None) -> FullPolicy:
    return FullPolicy.BLOCK if discard == api.DiscardPolicy.NEW else FullPolicy.DROP_OLDEST
