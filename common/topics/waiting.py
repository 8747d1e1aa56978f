"""Waiting across threads and event loops, for the in-process topics.

A topic guards its state with one ``threading.Lock``. A thread waits on a ``threading.Condition``
of that lock. A coroutine waits on a future of its own event loop, registered in a waiter set under
the lock; the waking side resolves it with ``loop.call_soon_threadsafe`` (or directly when it runs
on that loop). The futures are wake-up signals only: a woken waiter re-checks the state under the
lock, so a waiter that is cancelled or times out takes nothing and loses nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def resolve(fut: asyncio.Future[None]) -> None:
    """Resolve ``fut`` unless it is done (cancelled, timed out or already woken)."""
    if not fut.done():
        fut.set_result(None)


def wake_all(waiters: set[asyncio.Future[None]]) -> None:
    """Resolve every waiter future, from any thread, and empty the set (call it with the lock held)."""
    running = asyncio._get_running_loop()
    for fut in waiters:
        loop = fut.get_loop()
        if loop is running:
            resolve(fut)
            continue
        try:
            loop.call_soon_threadsafe(resolve, fut)
        except RuntimeError:  # that loop is closed: nobody is left to wake
            pass
    waiters.clear()


async def wait_woken(fut: asyncio.Future[None], timeout_s: float | None) -> None:
    """Wait until ``fut`` is resolved or ``timeout_s`` passes (None: no limit), whichever is first."""
    if timeout_s is None:
        await fut
        return
    handle = fut.get_loop().call_later(timeout_s, resolve, fut)
    try:
        await fut
    finally:
        handle.cancel()


def refuse_in_event_loop(what: str) -> None:
    """Raise rather than let a blocking wait stall the event loop running on this thread.

    Raises:
        RuntimeError: an event loop is running on the calling thread.
    """
    if asyncio._get_running_loop() is not None:
        raise RuntimeError(f"{what} would block the running event loop; await its async twin instead")


def deadline_after(timeout_s: float | None) -> float | None:
    """The ``time.monotonic()`` deadline ``timeout_s`` from now; None for no limit.

    Raises:
        ValueError: ``timeout_s`` is negative.
    """
    if timeout_s is None:
        return None
    if timeout_s < 0:
        raise ValueError(f"timeout_s must be >= 0 or None, got {timeout_s}")
    return time.monotonic() + timeout_s


def remaining_s(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (may be <= 0); None for no limit."""
    return None if deadline is None else deadline - time.monotonic()


def expired(remaining: float | None) -> bool:
    return remaining is not None and remaining <= 0


async def take_or_wait(
    lock: threading.Lock, take: Callable[[], list[T]], waiters: set[asyncio.Future[None]], timeout_s: float | None
) -> list[T]:
    """``take()`` under ``lock``; while it returns nothing, wait (at most ``timeout_s``) to be woken.

    The coroutine side of every "get": a producer adds items and calls ``wake_all(waiters)``. A
    woken reader takes again before returning, so a cancelled wait loses nothing. Returns ``[]``
    on timeout.
    """
    deadline = deadline_after(timeout_s)
    while True:
        with lock:
            taken = take()
            remaining = remaining_s(deadline)
            if taken or expired(remaining):
                return taken
            woken = asyncio.get_running_loop().create_future()
            waiters.add(woken)
        try:
            await wait_woken(woken, remaining)
        finally:
            with lock:
                waiters.discard(woken)
