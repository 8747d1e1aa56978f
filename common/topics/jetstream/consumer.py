"""A durable pull consumer of a trajectory stream, as a ``TrajectorySubscription`` (see the package docstring)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api

from common.errors import TopicClosedError
from common.topics.base import Delivery, FullPolicy, SubscriptionStats
from common.topics.jetstream.connection import (
    PENDING_BYTES,
    RECONNECT_WAIT_S,
    REQUEST_TIMEOUT_S,
    UNREACHABLE,
    JetStreamConnection,
    pause,
    subject_token,
)
from common.topics.memory import DEFAULT_MAX_ITEMS, DEFAULT_MAX_SIZE
from common.topics.waiting import deadline_after, expired, refuse_in_event_loop, remaining_s
from common.trajectory import Trajectory
from protos import pb

logger = logging.getLogger(__name__)

FETCH_SLICE_S = 1.0
"""A pull request lives at most this long, so one lost with a restarted broker is re-issued (nats.py#504)."""
POLL_SLICE_S = 0.1
"""The shortest pull request: what a poll (``get(timeout_s=0)``) waits when nothing is stored."""
_FETCH_RETRYABLE: tuple[type[BaseException], ...] = (*UNREACHABLE, nats.errors.ConnectionClosedError)


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

    def __init__(
        self,
        conn: JetStreamConnection,
        stream_name: str,
        topic_name: str,
        subscriber_name: str,
        stream_settings: Callable[[], tuple[int, FullPolicy] | None],
    ) -> None:
        self._conn = conn
        self._stream_name = stream_name
        self._stream_settings = stream_settings
        self.subscriber_name = subscriber_name
        self._where = f"{topic_name}, subscriber {subscriber_name!r}"
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
        info = await self._conn.js.consumer_info(self._stream_name, self._consumer)
        self._initial_seq = int(info.delivered.stream_seq or 0)
        return await self._conn.js.pull_subscribe_bind(
            self._consumer, self._stream_name, pending_bytes_limit=4 * PENDING_BYTES
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
                    msgs = await self._pull(max_items, slice_s)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    msgs = []
                except _FETCH_RETRYABLE as err:
                    logger.debug("%s: fetch failed (%r); retrying", self._where, err)
                    await pause(min(slice_s, RECONNECT_WAIT_S), deadline)
                    msgs = []
                with self._lock:
                    self._buffer.extend(msgs)
                    self._received += len(msgs)

    async def _pull(self, batch: int, timeout_s: float) -> list[Msg]:
        """Up to ``batch`` messages of the consumer: what is already delivered here, else one pull request's.

        ``PullSubscription.fetch`` waits for each message of a batch with ``next_msg`` (two tasks, a
        timer and a uuid per message: a fifth of this thread's CPU per trajectory); here only the first
        is awaited and the rest of the batch, already delivered, is taken from the subscription's queue
        as it is. A request's messages that arrive after it returned stay in that queue for the next call
        (and ``detach`` returns them). Each call with nothing delivered issues a new request that expires
        within ``timeout_s``, so one lost with a restarted broker is re-issued (nats.py#504).

        It reads the ``PullSubscription``'s request subject and queue (``_nms``, ``_deliver``,
        ``_sub._pending_queue``: nats-py 2.15 to 2.16 name them so; the role tests run through here).
        """
        sub = self._psub._sub
        msgs = self._delivered_already(sub, batch)
        if msgs:
            return msgs
        # expires a little before the wait ends (as fetch does), so the broker ends the request, not the wait
        request = {"batch": batch, "expires": max(1_000_000, int(timeout_s * 1e9) - 100_000)}
        await self._conn.nc.publish(self._psub._nms, json.dumps(request).encode(), self._psub._deliver)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                msg = await asyncio.wait_for(sub._pending_queue.get(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                return []
            sub._pending_size -= len(msg.data)
            if self._processable(msg):
                return [msg, *self._delivered_already(sub, batch - 1)]

    def _delivered_already(self, sub: Subscription, most: int) -> list[Msg]:
        """Up to ``most`` messages waiting in ``sub``'s queue, status messages skipped."""
        msgs: list[Msg] = []
        queue = sub._pending_queue
        while len(msgs) < most and not queue.empty():
            msg = queue.get_nowait()
            sub._pending_size -= len(msg.data)
            if self._processable(msg):
                msgs.append(msg)
        return msgs

    @staticmethod
    def _processable(msg: Msg) -> bool:
        """A message of the stream; False for the broker's status messages (no messages, request expired,
        heartbeat); a status that is an error is raised (``APIError``), as ``fetch`` does."""
        status = JetStreamContext.is_status_msg(msg)
        if not status:
            return True
        if status == api.StatusCode.CONTROL_MESSAGE:
            return False
        return JetStreamContext._is_processable_msg(status, msg)  # False for a temporary status

    def _hand(self, max_items: int) -> list[Delivery[Trajectory]]:
        """Decode and hand out up to ``max_items`` buffered messages (the lock is held)."""
        taken: list[Delivery[Trajectory]] = []
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

        Returns once the broker has received the acks (one round trip), unless the connection is down:
        then they are lost, and the broker delivers those trajectories again after ``ack_wait``.

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

    def _settle(self, msgs: list[Msg], *, nak: bool, and_delivered: bool = False) -> None:
        """Ack (or NAK) ``msgs`` and wait until the broker has them; ``and_delivered``: NAK too what a pull
        request delivered here after its call returned (``_pull``), still in the subscription's queue."""

        async def settle() -> None:
            if and_delivered:
                try:
                    msgs.extend(self._delivered_already(self._psub._sub, self._psub._sub._pending_queue.qsize()))
                except nats.errors.Error as err:  # an error status among them: the rest come again after ack_wait
                    logger.debug("%s: draining delivered messages: %r", self._where, err)
            for msg in msgs:
                try:
                    await (msg.nak() if nak else msg.ack())
                except nats.errors.Error as err:  # lost with the connection: the broker redelivers it
                    logger.debug("%s: %s failed: %r", self._where, "nak" if nak else "ack", err)
            try:
                # A ping behind the acks: once it is answered the broker has them, so an ack that returned
                # is not lost with this process (a killed trainer's acked trajectories never come again).
                await self._conn.nc.flush(timeout=REQUEST_TIMEOUT_S)  # type: ignore[arg-type]
            except (nats.errors.Error, asyncio.TimeoutError) as err:
                logger.debug("%s: flushing %d settlements failed: %r", self._where, len(msgs), err)

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
            self._settle(returned, nak=True, and_delivered=True)
            self._conn.submit(self._psub.unsubscribe())
        except TopicClosedError:
            pass
        logger.info("%s: detached; %d unacked deliveries returned", self._where, len(returned))

    def _check_attached(self) -> None:
        if self._detached:
            raise TopicClosedError(f"{self._where}: detached")
        if self._conn.closed:
            raise TopicClosedError(f"{self._where}: the connection to {self._conn.url} is closed")

    @property
    def attached(self) -> bool:
        return not self._detached

    def stats(self) -> SubscriptionStats:
        """This subscription's counters; ``dropped`` counts the trajectories drop_oldest removed before it got them."""
        max_size, full_policy = self._stream_settings() or (DEFAULT_MAX_SIZE, FullPolicy.BLOCK)
        with self._lock:
            return SubscriptionStats(
                subscriber_name=self.subscriber_name,
                max_size=max_size,
                full_policy=full_policy,
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
