"""The topics on NATS JetStream: trajectories as a stream with durable pull consumers, policies in a KV bucket.

Many processors on many hosts publish into one broker, and the trainers subscribe there; the
classes plug into the roles of ``common.topics.base`` like the in-process and gRPC transports.
``JetStreamTopics`` stands where a ``TopicRegistry`` stands: ``trajectories(behavior)`` and
``policies(behavior)``.

Trajectories (``trajectories/<behavior>``):

* A stream ``trajectories_<behavior>`` on subject ``trajectories.<behavior>`` (the behavior name
  escaped by ``subject_token``), with file storage and **Interest retention**: a trajectory leaves
  the stream once every declared subscriber has acked it.
* Each declared subscriber is a **durable pull consumer** of that name, so fan-out is per
  subscriber. Whoever declares (the processor at start) creates the stream and the consumers; a
  trainer that subscribes later loses nothing. Subscribing also declares, as in process.
* The stream is bounded by ``max_msgs`` (the queue size) and ``max_bytes``. A queue's capacity is
  the stream's, shared by its subscribers: a trajectory holds its place until the *last* declared
  subscriber acks it. ``block`` is DiscardNew: the broker refuses a publish to a full stream, and
  the publisher retries with backoff until ``timeout_s``, counting the wait in ``blocked_seconds``.
  ``drop_oldest`` is DiscardOld: the broker drops the oldest; each subscriber counts the drops it
  missed as the gaps in the stream sequence it is delivered. A declare whose ``max_size`` or
  ``full_policy`` differs from the stream's updates the stream (the declaring processor owns them).
* Every publish carries ``Nats-Msg-Id`` = the trajectory id, so a publish retried after a lost
  acknowledgement (a broker restart) is stored once (``DUPLICATE_WINDOW_S``).
* ``ack_wait`` (``ACK_WAIT_S``) and ``max_ack_pending`` (the queue size) are set explicitly: a
  subscriber that dies without acking gets its deliveries again after ``ack_wait``; one that
  ``detach``\\ es NAKs them, so they come again at once. Deliveries are fetched when ``get`` asks,
  never ahead, so ``ack_wait`` runs only while the caller holds them; the trainer acks once the
  trajectory is in its update buffer.
* **Payload limit.** A trajectory travels as one message; the broker's ``max_payload`` bounds it.
  The broker should run with ``max_payload: 8MB`` (``RECOMMENDED_MAX_PAYLOAD_BYTES``; NATS's default
  is 1 MB, and one 84x84x3 trajectory at time_horizon 64 is about 1.35 MB). A trajectory larger than
  the connected broker's limit is refused at publish with ``TopicFullError`` naming both sizes,
  before anything is sent, so nothing can wedge the stream; ``max_payload_bytes`` tells the
  processor the limit up front. A stored message that does not decode is terminated (never
  redelivered) and counted as dropped.

Policies (``policies/<behavior>``): a KV bucket ``policies_<behavior>`` with history 1 and one
key, written with compare-and-set on the key's revision: a publish reads the stored version and
writes only above it, so versions never go backwards even with racing trainers. An artifact
larger than what fits a KV value goes to the Object Store bucket ``policy_artifacts_<behavior>``
and the KV value holds its name. Readers follow the key with a watch, plus a poll every
``POLICY_POLL_S`` (and at once after a reconnect) in case a watch went silent across a restart.

Connection: one nats client per ``JetStreamTopics``, on a private event loop thread, so the
trainer's thread (``get``) and the processor's loop (``publish``, ``aget``) both reach it.
Reconnects are unbounded (``max_reconnect_attempts=-1``, one try every ``RECONNECT_WAIT_S``); a
ping every ``PING_INTERVAL_S`` with ``MAX_OUTSTANDING_PINGS`` unanswered notices a dead server in
about ``PING_INTERVAL_S * (MAX_OUTSTANDING_PINGS + 1)`` seconds (a killed server on the same host
is noticed at once). Fetches are issued in slices of ``FETCH_SLICE_S``, so a pull lost with a
restarted server is re-issued within a slice (nats.py#504). While the broker is down, publishers
wait and retry like on a full stream: an env client waits at most the processor's
``publish_timeout_s``, then that trajectory is counted unpublished.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from common.errors import DeadlineExceededError, ProtocolError, StepstreamError, TopicClosedError, TopicFullError
from common.topics.base import Delivery, FullPolicy, SubscriptionStats, TopicStats
from common.topics.memory import DEFAULT_MAX_ITEMS, DEFAULT_MAX_SIZE
from common.topics.policy import PolicyListener, PolicyTopic
from common.topics.registry import policy_topic_name, trajectory_topic_name
from common.topics.waiting import deadline_after, expired, refuse_in_event_loop, remaining_s
from common.trajectory import Trajectory
from protos import pb

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
PING_INTERVAL_S = 2.0
"""The client pings the broker this often..."""
MAX_OUTSTANDING_PINGS = 2
"""...and declares it dead (and reconnects) after this many unanswered pings."""
RECONNECT_WAIT_S = 0.5
"""Pause between reconnect attempts; the attempts are unbounded."""
CONNECT_TIMEOUT_S = 30.0
"""How long the first connect keeps trying before it gives up (``DeadlineExceededError``)."""
PENDING_BYTES = 64 * 1024 * 1024
"""What the client buffers while reconnecting; a publish beyond it fails and is retried."""
REQUEST_TIMEOUT_S = 5.0
"""Timeout of one JetStream API request or publish acknowledgement (a publish is then retried)."""
FETCH_SLICE_S = 1.0
"""A pull request lives at most this long, so one lost with a restarted broker is re-issued (nats.py#504)."""
POLL_SLICE_S = 0.1
"""The shortest pull request: what a poll (``get(timeout_s=0)``) waits when nothing is stored."""
PUBLISH_BACKOFF_S = (0.005, 0.5)
"""The first and the largest pause between retries of a refused (full) or failed publish; it doubles."""
POLICY_POLL_S = 1.0
"""A policy reader also reads the key this often, in case its watch went silent across a restart."""
_STORE_FULL_CODE = 10077
"""JetStream's err_code for a store refusing a message ("maximum messages/bytes exceeded")."""
_HEADER_ROOM_BYTES = 1024
"""Room left in ``max_payload`` for headers (Nats-Msg-Id, KV headers)."""
_POLICY_KEY = "latest"
_INLINE, _IN_OBJECT_STORE = 0, 1
_POLICY_HEADER = struct.Struct(">qB")
"""KV value prefix: the version (int64) and where the artifact is (inline or in the Object Store)."""

_UNREACHABLE: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
)
"""Errors that mean "the broker is not answering right now": wait and try again."""


def subject_token(behavior_name: str) -> str:
    """``behavior_name`` as one subject token, stream, bucket and consumer name (injective).

    Letters, digits and ``-`` stay; every other character becomes ``_XX`` per UTF-8 byte, so
    ``"My Walker"`` -> ``"My_20Walker"`` and no two names collide.

    Raises:
        ValueError: the name is empty.
    """
    if not behavior_name:
        raise ValueError("behavior_name must not be empty")
    out = []
    for char in behavior_name:
        if char.isascii() and (char.isalnum() or char == "-"):
            out.append(char)
        else:
            out.extend(f"_{byte:02X}" for byte in char.encode())
    return "".join(out)


# -- the connection --------------------------------------------------------------------------------


class JetStreamConnection:
    """One nats client on a private event loop thread; any thread or loop runs calls on it.

    Args:
        url: ``nats://host:port`` (or several, comma-separated).
        name: the client name the broker shows.
        token: the broker's auth token, if it requires one.
        tls: a client ``ssl.SSLContext`` for a TLS broker.
        connect_timeout_s: how long the first connect keeps trying.

    Raises:
        DeadlineExceededError: no broker answered within ``connect_timeout_s``.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str = "stepstream",
        token: str | None = None,
        tls: Any = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.disconnects = 0
        self.reconnects = 0
        self._reconnect_hooks: list[Callable[[], Awaitable[None]]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"nats/{name}", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self.nc: Client = self.run(self._connect(url.split(","), name, token, tls, connect_timeout_s))
        except BaseException:
            self._stop_loop()
            raise
        self.js: JetStreamContext = self.nc.jetstream(timeout=REQUEST_TIMEOUT_S)

    async def _connect(self, servers: list[str], name: str, token: str | None, tls: Any, timeout_s: float) -> Client:
        deadline = deadline_after(timeout_s)
        while True:
            try:
                return await nats.connect(
                    servers=servers,
                    name=name,
                    token=token,
                    tls=tls,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=RECONNECT_WAIT_S,  # type: ignore[arg-type]
                    ping_interval=PING_INTERVAL_S,  # type: ignore[arg-type]
                    max_outstanding_pings=MAX_OUTSTANDING_PINGS,
                    connect_timeout=2,
                    pending_size=PENDING_BYTES,
                    disconnected_cb=self._disconnected,
                    reconnected_cb=self._reconnected,
                    error_cb=self._error,
                )
            except (nats.errors.NoServersError, OSError, asyncio.TimeoutError) as err:
                if expired(remaining_s(deadline)):
                    raise DeadlineExceededError(f"no NATS broker answered at {self.url} within {timeout_s} s: {err}") from err
                await asyncio.sleep(RECONNECT_WAIT_S)

    async def _disconnected(self) -> None:
        self.disconnects += 1
        if not self._closed:
            logger.warning("NATS broker %s: disconnected; reconnecting", self.url)

    async def _reconnected(self) -> None:
        self.reconnects += 1
        logger.info("NATS broker %s: reconnected", self.url)
        for hook in list(self._reconnect_hooks):
            try:
                await hook()
            except Exception:
                logger.exception("after reconnecting to %s", self.url)

    async def _error(self, err: Exception) -> None:
        logger.debug("NATS client error: %r", err)

    def on_reconnect(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook()`` on the connection's loop after every reconnect."""
        self._reconnect_hooks.append(hook)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def max_payload(self) -> int:
        """The connected broker's ``max_payload`` in bytes."""
        return int(self.nc.max_payload)

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the connection's loop."""
        if self._closed:
            raise TopicClosedError(f"the connection to {self.url} is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    def run(self, coro: Awaitable[T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the connection's loop and wait for its result in this thread.

        Raises:
            RuntimeError: called on the connection's own loop thread (it would deadlock).
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("JetStreamConnection.run called on its own loop thread")
        return self.submit(coro).result(timeout_s)

    async def arun(self, coro: Awaitable[T]) -> T:
        """Run ``coro`` on the connection's loop and await its result from another loop (shielded:
        cancelling the caller does not cancel ``coro``)."""
        return await asyncio.shield(asyncio.wrap_future(self.submit(coro)))

    def close(self) -> None:
        """Drain nothing, close the client and stop the loop thread. Idempotent."""
        if self._closed:
            return
        try:
            self.run(self.nc.close(), timeout_s=5.0)
        except Exception:
            logger.debug("closing the NATS client", exc_info=True)
        self._closed = True
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._closed = True
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), self._loop).result(5.0)
            except (concurrent.futures.TimeoutError, RuntimeError):
                logger.debug("cancelling the NATS client's tasks", exc_info=True)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()


async def _cancel_other_tasks() -> None:
    """Cancel and await every task of the running loop but this one (the client's own, a watcher's)."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _pause(backoff_s: float, deadline: float | None) -> float:
    """Sleep ``backoff_s`` (capped at the deadline); return the next, doubled, backoff."""
    remaining = remaining_s(deadline)
    await asyncio.sleep(backoff_s if remaining is None else max(0.0, min(backoff_s, remaining)))
    return min(backoff_s * 2, PUBLISH_BACKOFF_S[1])


# -- trajectories ----------------------------------------------------------------------------------


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
        self._lock = threading.Lock()
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
        return self._conn.max_payload - _HEADER_ROOM_BYTES

    def expect_no_subscribers(self) -> None:
        """Publishes with no declared subscriber are meant to be dropped: count, do not warn."""
        self._unrouted_expected = True

    # -- stream and consumers ------------------------------------------------------------------

    def declare(self, subscriber_name: str, max_size: int | None = None, full_policy: FullPolicy | None = None) -> None:
        """Create the stream (if absent) and the subscriber's durable consumer (if absent).

        Args:
            subscriber_name: the durable consumer's name, e.g. ``TRAINER_SUBSCRIBER``.
            max_size: the stream's ``max_msgs`` and the consumer's ``max_ack_pending``, >= 1;
                None keeps the stream's (``DEFAULT_MAX_SIZE`` for a new one).
            full_policy: None keeps the stream's (``block`` for a new one).

        Raises:
            ValueError: ``max_size`` < 1 or an empty name.
            TopicClosedError: the topic is closed.
            StepstreamError: the broker refused (``DeadlineExceededError`` when unreachable).
        """
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
            max_msg_size=self.max_payload_bytes + _HEADER_ROOM_BYTES,
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
            TopicClosedError: the topic is closed.
        """
        payload = self._encode(item)
        await self._conn.arun(self._publish(payload, str(item.id), timeout_s))

    def publish_blocking(self, item: Trajectory, timeout_s: float | None = None) -> None:
        """``publish`` for a thread that is not running an event loop (same errors)."""
        refuse_in_event_loop("JetStreamTrajectoryTopic.publish_blocking")
        payload = self._encode(item)
        self._call(self._publish(payload, str(item.id), timeout_s))

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

    async def _publish(self, payload: bytes, msg_id: str, timeout_s: float | None) -> None:
        deadline = deadline_after(timeout_s)
        if self._stream_settings is None:
            await self._retrying(lambda: self._ensure_stream(None, None), deadline, timeout_s)
        if not self._routed and not await self._has_consumers():  # another process may have declared them
            if not self._unrouted and not self._unrouted_expected:
                logger.warning("topic %r has no declared subscriber: publishes are dropped (declare one first)", self.name)
            self._unrouted += 1
            return
        backoff = PUBLISH_BACKOFF_S[0]
        waiting_since: float | None = None
        """When this publish began to wait: a refusal, or an attempt made while the broker was away."""
        try:
            while True:
                self._check_open()
                attempt_started = time.monotonic()
                disconnects = self._conn.disconnects
                if waiting_since is None and not self._conn.nc.is_connected:
                    waiting_since = attempt_started
                    self._blocked_publishers += 1
                why = ""
                try:
                    ack = await self._conn.js.publish(
                        self.subject, payload, timeout=self._request_timeout(deadline), headers={"Nats-Msg-Id": msg_id}
                    )
                except nats.js.errors.APIError as err:
                    if err.err_code != _STORE_FULL_CODE:
                        if not isinstance(err, _UNREACHABLE):
                            raise _broker_error(f"topic {self.name!r}: publish of {msg_id}", err) from err
                        why = f"the broker did not store it ({err.description})"
                    else:
                        why = f"the stream is full ({err.description})"
                except _UNREACHABLE as err:
                    why = f"the broker is unreachable ({type(err).__name__})"
                else:
                    if waiting_since is None and self._conn.disconnects != disconnects:
                        waiting_since = attempt_started  # buffered by the client until the broker came back
                        self._blocked_publishers += 1
                    self._published += 1
                    self._duplicates += bool(ack.duplicate)
                    return
                if waiting_since is None:
                    waiting_since = attempt_started
                    self._blocked_publishers += 1
                if expired(remaining_s(deadline)):
                    raise TopicFullError(f"topic {self.name!r}: no room for {msg_id} within timeout_s={timeout_s}: {why}")
                backoff = await _pause(backoff, deadline)
        finally:
            if waiting_since is not None:
                self._blocked_publishers -= 1
                self._blocked_seconds += time.monotonic() - waiting_since

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
        backoff = PUBLISH_BACKOFF_S[0]
        while True:
            try:
                return await call()
            except _UNREACHABLE as err:
                if expired(remaining_s(deadline)):
                    raise TopicFullError(
                        f"topic {self.name!r}: the broker {self._conn.url} did not answer within timeout_s={timeout_s}"
                    ) from err
                backoff = await _pause(backoff, deadline)

    # -- subscribing -----------------------------------------------------------------------------

    def subscribe(
        self, subscriber_name: str, max_size: int | None = None, full_policy: FullPolicy | None = None
    ) -> JetStreamSubscription:
        """Bind to the subscriber's durable consumer, declaring it (and the stream) first if needed.

        Several subscriptions of one name share its deliveries (the broker does not refuse a
        second one, unlike the in-process topic).

        Raises:
            as ``declare``.
        """
        self.declare(subscriber_name, max_size, full_policy)
        return JetStreamSubscription(self._conn, self, subscriber_name)

    def _call(self, coro: Awaitable[T]) -> T:
        try:
            return self._conn.run(coro)
        except _UNREACHABLE as err:
            raise DeadlineExceededError(f"topic {self.name!r}: the broker {self._conn.url} did not answer: {err!r}") from err
        except nats.errors.Error as err:
            raise _broker_error(f"topic {self.name!r}", err) from err

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


def _full_policy_of(discard: api.DiscardPolicy | None) -> FullPolicy:
    return FullPolicy.BLOCK if discard == api.DiscardPolicy.NEW else FullPolicy.DROP_OLDEST


def _broker_error(what: str, err: BaseException) -> StepstreamError:
    if isinstance(err, nats.js.errors.APIError):
        return ProtocolError(f"{what}: the broker refused: {err.description} (code {err.code}, err_code {err.err_code})")
    return StepstreamError(f"{what}: {err!r}")


@dataclass
class _Held:
    """A delivery taken by ``get``/``aget`` and not yet acked."""

    msg: Msg


class JetStreamSubscription:
    """A ``TrajectorySubscription`` of ``Trajectory`` bound to a durable pull consumer.

    ``get`` (a thread) and ``aget`` (a coroutine) fetch from the broker when called, in slices
    of ``FETCH_SLICE_S``, and return as soon as at least one delivery arrived. ``ack`` acks on the
    broker; ``detach`` NAKs what was taken and not acked, so the next subscription of the name gets
    it at once (flagged ``redelivered``). Use it as a context manager to detach on exit.
    """

    def __init__(self, conn: JetStreamConnection, topic: JetStreamTrajectoryTopic, subscriber_name: str) -> None:
        self._conn = conn
        self._topic = topic
        self.subscriber_name = subscriber_name
        self._where = f"{topic.name}, subscriber {subscriber_name!r}"
        self._consumer = subject_token(subscriber_name)
        self._lock = threading.Lock()
        self._buffer: deque[Msg] = deque()
        """Fetched but not yet handed out (a fetch whose caller was cancelled)."""
        self._handed: dict[int, _Held] = {}
        self._next_tag = 0
        self._detached = False
        self._received = self._delivered = self._acked = self._dropped = self._redelivered = 0
        self._fetching: asyncio.Lock | None = None
        self._psub: JetStreamContext.PullSubscription = conn.run(self._bind())
        self._last_stream_seq = self._initial_seq

    async def _bind(self) -> JetStreamContext.PullSubscription:
        self._fetching = asyncio.Lock()
        info = await self._conn.js.consumer_info(self._topic.stream_name, self._consumer)
        self._initial_seq = int(info.delivered.stream_seq or 0)
        return await self._conn.js.pull_subscribe_bind(
            self._consumer, self._topic.stream_name, pending_bytes_limit=4 * PENDING_BYTES
        )

    # -- taking ----------------------------------------------------------------------------------

    def get(self, max_items: int = DEFAULT_MAX_ITEMS, timeout_s: float | None = None) -> list[Delivery[Trajectory]]:
        """Block the calling thread until a trajectory arrives, then take up to ``max_items``.

        Returns:
            The deliveries, oldest first, in flight until acked (at most ``ACK_WAIT_S``); ``[]`` if
            ``timeout_s`` passed.

        Raises:
            TopicClosedError: detached.
            RuntimeError: it would wait on a running event loop's thread (use ``aget``).
        """
        _check_max_items(max_items)
        deadline = deadline_after(timeout_s)
        if timeout_s != 0:
            refuse_in_event_loop("JetStreamSubscription.get")
        self._check_attached()
        return self._conn.run(self._take(max_items, deadline))

    async def aget(self, max_items: int = DEFAULT_MAX_ITEMS, timeout_s: float | None = None) -> list[Delivery[Trajectory]]:
        """``get`` for a coroutine of any event loop; cancelling it loses no item.

        Raises:
            TopicClosedError: detached.
        """
        _check_max_items(max_items)
        deadline = deadline_after(timeout_s)
        self._check_attached()
        fetched = self._conn.submit(self._take(max_items, deadline))
        try:
            return await asyncio.shield(asyncio.wrap_future(fetched))
        except asyncio.CancelledError:
            # The fetch runs on; what it took goes back to the buffer for the next get.
            fetched.add_done_callback(self._give_back)
            raise

    def _give_back(self, fetched: concurrent.futures.Future[list[Delivery[Trajectory]]]) -> None:
        if fetched.cancelled() or fetched.exception() is not None:
            return
        with self._lock:
            taken = fetched.result()
            for delivery in taken:
                held = self._handed.pop(delivery.tag, None)
                if held is not None:
                    self._delivered -= 1
                    self._buffer.append(held.msg)
            self._buffer.rotate(len(taken))  # they were the oldest

    async def _take(self, max_items: int, deadline: float | None) -> list[Delivery[Trajectory]]:
        """Fetch (on the connection's loop) until a delivery arrives or the deadline passes."""
        assert self._fetching is not None
        async with self._fetching:
            first = True
            while True:
                self._check_attached()
                with self._lock:
                    taken = self._hand(max_items) if self._buffer else []
                if taken:
                    return taken
                remaining = remaining_s(deadline)
                if not first and expired(remaining):
                    return []
                first = False  # even a poll (timeout_s=0) asks the broker once
                slice_s = FETCH_SLICE_S if remaining is None else min(FETCH_SLICE_S, max(POLL_SLICE_S, remaining))
                try:
                    msgs = await self._psub.fetch(max_items, timeout=slice_s)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    msgs = []
                except (*_UNREACHABLE, nats.errors.ConnectionClosedError) as err:
                    logger.debug("%s: fetch failed (%r); retrying", self._where, err)
                    await _pause(min(slice_s, RECONNECT_WAIT_S), deadline)
                    msgs = []
                with self._lock:
                    self._buffer.extend(msgs)
                    self._received += len(msgs)

    def _hand(self, max_items: int) -> list[Delivery[Trajectory]]:
        """Decode and hand out up to ``max_items`` buffered messages (the lock is held)."""
        taken = []
        while self._buffer and len(taken) < max_items:
            msg = self._buffer.popleft()
            meta = msg.metadata
            redelivered = meta.num_delivered is not None and meta.num_delivered > 1
            sequence = meta.sequence.stream
            if not redelivered and sequence > self._last_stream_seq + 1:
                self._dropped += sequence - self._last_stream_seq - 1  # drop_oldest removed them before us
            self._last_stream_seq = max(self._last_stream_seq, sequence)
            try:
                item = Trajectory.from_proto(pb.Trajectory.FromString(msg.data))
            except Exception as err:  # a foreign or corrupt message: never redeliver it, never wedge
                logger.error("%s: stream sequence %d does not decode (%r); terminated and dropped", self._where, sequence, err)
                self._dropped += 1
                self._conn.loop.create_task(msg.term())
                continue
            tag = self._next_tag
            self._next_tag += 1
            self._handed[tag] = _Held(msg)
            self._redelivered += redelivered
            taken.append(Delivery(tag, item, redelivered))
        self._delivered += len(taken)
        return taken

    def ack(self, delivery_tags: Iterable[int]) -> int:
        """Acknowledge taken deliveries on the broker (they then leave the stream once every subscriber acked).

        Returns:
            How many of the tags were taken and not yet acked; unknown or repeated tags, and every
            tag once detached, are ignored.
        """
        with self._lock:
            if self._detached:
                return 0
            held = [h for tag in dict.fromkeys(delivery_tags) if (h := self._handed.pop(tag, None)) is not None]
            self._acked += len(held)
        if held:
            self._settle([h.msg for h in held], nak=False)
        return len(held)

    def _settle(self, msgs: list[Msg], *, nak: bool) -> None:
        async def settle() -> None:
            for msg in msgs:
                try:
                    await (msg.nak() if nak else msg.ack())
                except nats.errors.Error as err:  # lost with the connection: the broker redelivers it
                    logger.debug("%s: %s failed: %r", self._where, "nak" if nak else "ack", err)

        if threading.current_thread() is self._conn._thread:
            self._conn.loop.create_task(settle())
            return
        try:
            self._conn.run(settle(), timeout_s=REQUEST_TIMEOUT_S)
        except (concurrent.futures.TimeoutError, TopicClosedError):
            logger.warning("%s: %d acks not confirmed sent; the broker redelivers them", self._where, len(msgs))

    def detach(self) -> None:
        """NAK what was taken or buffered and not acked (redelivered at once), then unsubscribe. Idempotent."""
        with self._lock:
            if self._detached:
                return
            self._detached = True
            returned = [h.msg for h in self._handed.values()] + list(self._buffer)
            self._handed.clear()
            self._buffer.clear()
        try:
            self._settle(returned, nak=True)
            self._conn.submit(self._psub.unsubscribe())
        except TopicClosedError:
            pass
        logger.info("%s: detached; %d unacked deliveries returned", self._where, len(returned))

    def _check_attached(self) -> None:
        if self._detached:
            raise TopicClosedError(f"{self._where}: detached")

    @property
    def attached(self) -> bool:
        return not self._detached

    def stats(self) -> SubscriptionStats:
        """This subscription's counters; ``dropped`` counts the trajectories drop_oldest removed before it got them."""
        with self._lock:
            return SubscriptionStats(
                subscriber_name=self.subscriber_name,
                max_size=self._topic._stream_settings[0] if self._topic._stream_settings else DEFAULT_MAX_SIZE,
                full_policy=self._topic._stream_settings[1] if self._topic._stream_settings else FullPolicy.BLOCK,
                attached=not self._detached,
                published=self._received,
                delivered=self._delivered,
                acked=self._acked,
                dropped=self._dropped,
                redelivered=self._redelivered,
                blocked_seconds=0.0,
                depth=len(self._buffer),
                in_flight=len(self._handed),
            )

    def __enter__(self) -> JetStreamSubscription:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.detach()


def _check_max_items(max_items: int) -> None:
    if max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")


# -- policies --------------------------------------------------------------------------------------


class JetStreamPolicyTopic:
    """``policies/<behavior>`` in a KV bucket: a ``PolicySink`` and ``PolicySource`` of ``PolicyUpdate``.

    Made by ``JetStreamTopics.policies``. Readers (``follow=True``) keep the latest version in a
    local ``PolicyTopic`` fed by a watch of the key (module docstring), so ``latest``,
    ``highest_version``, ``wait_newer``, ``await_newer`` and ``add_listener`` never wait on the
    broker. ``publish`` is a compare-and-set on the broker and waits for it.
    """

    def __init__(self, conn: JetStreamConnection, behavior_name: str, *, follow: bool = True) -> None:
        self._conn = conn
        self.behavior_name = behavior_name
        token = subject_token(behavior_name)
        self.bucket = f"policies_{token}"
        self.object_bucket = f"policy_artifacts_{token}"
        self._local: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(policy_topic_name(behavior_name))
        self._follower: concurrent.futures.Future[None] | None = None
        self._wake_follower: asyncio.Event | None = None
        self.published = 0
        """Publishes accepted by the compare-and-set."""
        self.ignored = 0
        """Publishes ignored because the stored version was not below theirs."""
        self._kv: KeyValue = conn.run(self._open())
        initial = conn.run(self._read())
        if initial is not None:
            self._local.publish(initial[1], initial[0])
        if follow:
            self._follower = conn.submit(self._follow())
            conn.on_reconnect(self._poke)

    async def _open(self) -> KeyValue:
        js = self._conn.js
        try:
            return await js.key_value(self.bucket)
        except nats.js.errors.BucketNotFoundError:
            config = api.KeyValueConfig(bucket=self.bucket, history=1, storage=api.StorageType.FILE)
            return await js.create_key_value(config)

    @property
    def name(self) -> str:
        return policy_topic_name(self.behavior_name)

    @property
    def closed(self) -> bool:
        return self._local.closed

    # -- the stored value ------------------------------------------------------------------------

    async def _read(self) -> tuple[int, pb.PolicyUpdate] | None:
        entry = await self._entry()
        if entry is None or not entry.value:
            return None
        version, kind = _POLICY_HEADER.unpack_from(entry.value)
        body = entry.value[_POLICY_HEADER.size :]
        if kind == _IN_OBJECT_STORE:
            store = await self._conn.js.object_store(self.object_bucket)
            result = await store.get(body.decode())
            assert result.data is not None
            body = result.data
        return version, pb.PolicyUpdate.FromString(body)

    async def _entry(self) -> KeyValue.Entry | None:
        try:
            return await self._kv.get(_POLICY_KEY)
        except nats.js.errors.KeyNotFoundError:
            return None

    @staticmethod
    def _version_of(entry: KeyValue.Entry | None) -> int:
        if entry is None or not entry.value:
            return -1
        return int(_POLICY_HEADER.unpack_from(entry.value)[0])

    # -- PolicySink ------------------------------------------------------------------------------

    @property
    def highest_version(self) -> int:
        """The highest version known here (read at start, then followed), -1 if none."""
        return self._local.highest_version

    def stored_version(self) -> int:
        """The version on the broker now (one request), -1 if none."""
        return self._version_of(self._conn.run(self._entry()))

    def publish(self, item: pb.PolicyUpdate, version: int) -> bool:
        """Store ``item`` as ``version`` if it is above the stored one (compare-and-set).

        Returns:
            True iff it was stored.

        Raises:
            ValueError: ``version`` is negative, or ``item`` is of another behavior.
            StepstreamError: the broker refused or did not answer.
        """
        if version < 0:
            raise ValueError(f"policy topic {self.name!r}: version must be >= 0, got {version}")
        if item.behavior_name and item.behavior_name != self.behavior_name:
            raise ValueError(f"a policy of {item.behavior_name!r} given to the policy topic of {self.behavior_name!r}")
        if item.version != version:
            stamped = pb.PolicyUpdate()
            stamped.CopyFrom(item)
            stamped.version = version
            item = stamped
        try:
            accepted = self._conn.run(self._publish(item.SerializeToString(), version))
        except _UNREACHABLE as err:
            raise DeadlineExceededError(f"policy topic {self.name!r}: the broker did not answer: {err!r}") from err
        if accepted:
            self.published += 1
            if self._follower is None or version > self._local.highest_version:
                self._local.publish(item, version)
        else:
            self.ignored += 1
        return accepted

    async def _publish(self, body: bytes, version: int) -> bool:
        header = _POLICY_HEADER.pack(version, _INLINE)
        value = header + body
        object_name: str | None = None
        if len(value) > self._conn.max_payload - _HEADER_ROOM_BYTES:
            store = await self._object_store()
            object_name = f"v{version}"
            await store.put(object_name, body)
            value = _POLICY_HEADER.pack(version, _IN_OBJECT_STORE) + object_name.encode()
        while True:
            entry = await self._entry()
            stored = self._version_of(entry)
            if version <= stored:
                logger.warning("policy topic %r: version %d ignored, not above %d", self.name, version, stored)
                if object_name is not None:
                    await self._delete_object(object_name)
                return False
            try:
                if entry is None:
                    await self._kv.create(_POLICY_KEY, value)
                else:
                    await self._kv.update(_POLICY_KEY, value, last=entry.revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # another trainer wrote in between: read again
            await self._prune_objects(stored, entry)
            return True

    async def _object_store(self) -> Any:
        js = self._conn.js
        try:
            return await js.object_store(self.object_bucket)
        except nats.js.errors.BucketNotFoundError:
            return await js.create_object_store(self.object_bucket, config=api.ObjectStoreConfig(storage=api.StorageType.FILE))

    async def _prune_objects(self, replaced_version: int, replaced: KeyValue.Entry | None) -> None:
        """Delete the artifact the new version replaced, if it was in the Object Store (best effort)."""
        if replaced is None or not replaced.value:
            return
        if _POLICY_HEADER.unpack_from(replaced.value)[1] == _IN_OBJECT_STORE:
            await self._delete_object(replaced.value[_POLICY_HEADER.size :].decode())

    async def _delete_object(self, object_name: str) -> None:
        try:
            store = await self._object_store()
            await store.delete(object_name)
        except nats.errors.Error:
            logger.debug("policy topic %r: deleting artifact %r failed", self.name, object_name, exc_info=True)

    # -- following -------------------------------------------------------------------------------

    async def _poke(self) -> None:
        if self._wake_follower is not None:
            self._wake_follower.set()

    async def _follow(self) -> None:
        """Watch the key and poll it; publish every newer version into the local topic."""
        self._wake_follower = asyncio.Event()
        watcher = None
        while not self._local.closed:
            try:
                if watcher is None:
                    watcher = await self._kv.watch(_POLICY_KEY)
                try:
                    entry = await watcher.updates(timeout=POLICY_POLL_S)
                except nats.errors.TimeoutError:
                    entry = None
                if entry is None or self._wake_follower.is_set():
                    self._wake_follower.clear()
                    entry = await self._entry()  # the poll: a silent watch cannot hide a version
                if self._version_of(entry) > self._local.highest_version:
                    latest = await self._read()
                    if latest is not None and latest[0] > self._local.highest_version:
                        self._local.publish(latest[1], latest[0])
            except asyncio.CancelledError:
                raise
            except Exception as err:
                logger.debug("policy topic %r: follow failed (%r); again", self.name, err)
                watcher = None
                await asyncio.sleep(RECONNECT_WAIT_S)

    # -- PolicySource ----------------------------------------------------------------------------

    def latest(self) -> tuple[int, pb.PolicyUpdate] | None:
        return self._local.latest()

    def wait_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, pb.PolicyUpdate] | None:
        return self._local.wait_newer(than_version, timeout_s)

    async def await_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, pb.PolicyUpdate] | None:
        return await self._local.await_newer(than_version, timeout_s)

    def add_listener(
        self, callback: PolicyListener[pb.PolicyUpdate], loop: asyncio.AbstractEventLoop | None = None
    ) -> Callable[[], None]:
        return self._local.add_listener(callback, loop)

    def close(self) -> None:
        """Stop following and wake every waiter (TopicClosedError); the bucket stays. Idempotent."""
        self._local.close()
        if self._follower is not None:
            self._follower.cancel()


# -- the registry ----------------------------------------------------------------------------------


class JetStreamTopics:
    """Get-or-create the JetStream topics of each behavior, over one connection; a ``TopicRegistry`` stand-in.

    Args:
        url: ``nats://host:port`` of the broker.
        max_bytes: ``max_bytes`` of every trajectory stream this creates.
        ack_wait_s: ``ack_wait`` of every durable consumer this declares.
        follow_policies: whether ``policies()`` follows the bucket (readers: the processor); a
            trainer that only publishes passes False.
        name, token, tls, connect_timeout_s: as in ``JetStreamConnection``.
    """

    def __init__(
        self,
        url: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ack_wait_s: float = ACK_WAIT_S,
        follow_policies: bool = True,
        name: str = "stepstream",
        token: str | None = None,
        tls: Any = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.connection = JetStreamConnection(url, name=name, token=token, tls=tls, connect_timeout_s=connect_timeout_s)
        self._max_bytes = max_bytes
        self._ack_wait_s = ack_wait_s
        self._follow_policies = follow_policies
        self._lock = threading.Lock()
        self._trajectories: dict[str, JetStreamTrajectoryTopic] = {}
        self._policies: dict[str, JetStreamPolicyTopic] = {}

    def trajectories(self, behavior_name: str) -> JetStreamTrajectoryTopic:
        """The topic ``trajectories/<behavior_name>`` (its stream is created at first use)."""
        subject_token(behavior_name)
        with self._lock:
            topic = self._trajectories.get(behavior_name)
            if topic is None:
                topic = self._trajectories[behavior_name] = JetStreamTrajectoryTopic(
                    self.connection, behavior_name, self._max_bytes, self._ack_wait_s
                )
            return topic

    def policies(self, behavior_name: str) -> JetStreamPolicyTopic:
        """The topic ``policies/<behavior_name>`` (its bucket is created here if absent; one request)."""
        subject_token(behavior_name)
        with self._lock:
            topic = self._policies.get(behavior_name)
            if topic is None:
                topic = self._policies[behavior_name] = JetStreamPolicyTopic(
                    self.connection, behavior_name, follow=self._follow_policies
                )
            return topic

    def behavior_names(self) -> list[str]:
        with self._lock:
            return sorted(self._trajectories.keys() | self._policies.keys())

    def close(self) -> None:
        """Close every topic and the connection; what the broker stores stays. Idempotent."""
        with self._lock:
            topics: list[JetStreamTrajectoryTopic | JetStreamPolicyTopic] = [
                *self._trajectories.values(),
                *self._policies.values(),
            ]
        for topic in topics:
            topic.close()
        self.connection.close()

    def __enter__(self) -> JetStreamTopics:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.close()
