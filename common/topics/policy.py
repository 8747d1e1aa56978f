"""In-process policy topic: latest-wins by version, published from a thread, read from anywhere."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from common.errors import TopicClosedError
from common.topics.base import MAX_POLICY_VERSION
from common.topics.waiting import deadline_after, expired, refuse_in_event_loop, remaining_s, wait_woken, wake_all
from protos import pb

logger = logging.getLogger(__name__)

T = TypeVar("T")

PolicyListener = Callable[[int, T], None]
"""Called with (version, item) for every accepted publish."""


class PolicyTopic(Generic[T]):
    """The newest policy version of one behavior and its item (in practice a ``PolicyUpdate``).

    Versions only go up: ``publish`` accepts a version above every earlier one and ignores (and
    counts, and logs) an older or equal one, so a trainer resuming from a checkpoint must continue
    above ``highest_version``. Any thread may publish; readers learn of a new version by polling
    ``latest``, by waiting (``wait_newer`` in a thread, ``await_newer`` in a coroutine), or through a
    listener that runs on their own event loop (``add_listener``). ``close`` wakes every waiter with
    ``TopicClosedError``.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._newer = threading.Condition(self._lock)
        self._latest: tuple[int, T] | None = None
        self._async_waiters: set[asyncio.Future[None]] = set()
        self._listeners: list[tuple[PolicyListener[T], asyncio.AbstractEventLoop | None]] = []
        self._closed = False
        self.published = 0
        """Publishes accepted."""
        self.ignored = 0
        """Publishes ignored because their version was not above ``highest_version``."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def highest_version(self) -> int:
        """The highest version accepted so far, -1 if none."""
        latest = self._latest  # one atomic read; no lock needed
        return -1 if latest is None else latest[0]

    def latest(self) -> tuple[int, T] | None:
        """(highest version, its item), None before the first publish."""
        return self._latest

    def publish(self, item: T, version: int) -> bool:
        """Make ``item`` the latest policy if ``version`` is above every earlier one.

        Listeners without a loop run here, in the publisher's thread, after the lock is released;
        their exceptions are logged, not raised.

        Returns:
            True iff the version was accepted.

        Raises:
            ValueError: ``version`` is negative or above ``MAX_POLICY_VERSION``.
            TopicClosedError: the topic is closed.
        """
        if not 0 <= version <= MAX_POLICY_VERSION:
            raise ValueError(f"policy topic {self._name!r}: version must be in [0, {MAX_POLICY_VERSION}], got {version}")
        with self._lock:
            if self._closed:
                raise TopicClosedError(f"policy topic {self._name!r} is closed")
            highest = self.highest_version
            if version <= highest:
                self.ignored += 1
                logger.warning("policy topic %r: version %d ignored, not above %d", self._name, version, highest)
                return False
            self._latest = (version, item)
            self.published += 1
            self._newer.notify_all()
            wake_all(self._async_waiters)
            listeners = list(self._listeners)
        for callback, loop in listeners:
            self._notify(callback, loop, version, item)
        return True

    def _notify(self, callback: PolicyListener[T], loop: asyncio.AbstractEventLoop | None, version: int, item: T) -> None:
        try:
            if loop is None:
                callback(version, item)
            else:
                loop.call_soon_threadsafe(callback, version, item)
        except Exception:
            logger.exception("policy topic %r: listener %r failed on version %d", self._name, callback, version)

    def add_listener(self, callback: PolicyListener[T], loop: asyncio.AbstractEventLoop | None = None) -> Callable[[], None]:
        """Call ``callback(version, item)`` on every accepted publish, in order.

        Args:
            callback: must not block; with a ``loop`` it runs there (``call_soon_threadsafe``),
                otherwise in the publisher's thread.
            loop: the event loop to run it on, e.g. the processor's, to swap its inference policy.

        Returns:
            A function that removes the listener.
        """
        entry = (callback, loop)
        with self._lock:
            self._listeners.append(entry)

        def remove() -> None:
            with self._lock:
                if entry in self._listeners:
                    self._listeners.remove(entry)

        return remove

    def wait_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, T] | None:
        """Block the calling thread until a version above ``than_version`` exists.

        Returns:
            (version, item) of the latest, or None if ``timeout_s`` passed first.

        Raises:
            TopicClosedError: the topic is closed and has nothing newer.
            RuntimeError: it would wait on a running event loop's thread (use ``await_newer``).
        """
        deadline = deadline_after(timeout_s)
        with self._lock:
            while True:
                latest = self._newer_than(than_version)
                remaining = remaining_s(deadline)
                if latest is not None or expired(remaining):
                    return latest
                refuse_in_event_loop("PolicyTopic.wait_newer")
                self._newer.wait(remaining)

    async def await_newer(self, than_version: int, timeout_s: float | None = None) -> tuple[int, T] | None:
        """``wait_newer`` for a coroutine of any event loop.

        Raises:
            TopicClosedError: the topic is closed and has nothing newer.
        """
        deadline = deadline_after(timeout_s)
        while True:
            with self._lock:
                latest = self._newer_than(than_version)
                remaining = remaining_s(deadline)
                if latest is not None or expired(remaining):
                    return latest
                woken = asyncio.get_running_loop().create_future()
                self._async_waiters.add(woken)
            try:
                await wait_woken(woken, remaining)
            finally:
                with self._lock:
                    self._async_waiters.discard(woken)

    def _newer_than(self, than_version: int) -> tuple[int, T] | None:
        latest = self._latest
        if latest is not None and latest[0] > than_version:
            return latest
        if self._closed:
            raise TopicClosedError(f"policy topic {self._name!r} is closed")
        return None

    def close(self) -> None:
        """Refuse further publishes; wake every waiter (they raise TopicClosedError). Idempotent."""
        with self._lock:
            self._closed = True
            self._newer.notify_all()
            wake_all(self._async_waiters)


def stamped_with_version(item: pb.PolicyUpdate, version: int) -> pb.PolicyUpdate:
    """``item`` as published at ``version``: itself when it already carries it, else a stamped copy (the
    caller's message is never changed)."""
    if item.version == version:
        return item
    stamped = pb.PolicyUpdate()
    stamped.CopyFrom(item)
    stamped.version = version
    return stamped
