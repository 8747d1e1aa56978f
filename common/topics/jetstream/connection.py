"""The nats client of a process on its own event loop thread, with explicit reconnects (see the package docstring)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.protocol.parser import AUTHORIZATION_VIOLATION

from common.backoff import Backoff
from common.errors import ConfigError, DeadlineExceededError, ProtocolError, StepstreamError, TopicClosedError
from common.topics.waiting import deadline_after, expired, remaining_s

logger = logging.getLogger(__name__)

T = TypeVar("T")

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
PUBLISH_BACKOFF_S = (0.005, 0.5)
"""The first and the largest pause between retries of a refused (full) or failed request; it doubles."""
HEADER_ROOM_BYTES = 1024
"""Room left in ``max_payload`` for headers (Nats-Msg-Id, KV headers)."""

UNREACHABLE: tuple[type[BaseException], ...] = (
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

REFUSALS: tuple[type[BaseException], ...] = (nats.errors.AuthorizationError, ssl.SSLError)
"""Errors that mean "the broker refused this client" (its token, its certificate): retrying cannot fix them."""


def typed_error(err: Exception) -> Exception:
    """``err``, or the typed error it stands for: while connecting, nats-py reports the broker's ``-ERR
    'Authorization Violation'`` as a plain ``nats.errors.Error`` (once connected, its parser raises
    ``AuthorizationError``). This gives that one its type, by nats-py's own protocol constant, so that every
    check after it is by type (``REFUSALS``)."""
    if type(err) is nats.errors.Error and AUTHORIZATION_VIOLATION in str(err).lower():
        typed = nats.errors.AuthorizationError()
        typed.__cause__ = err
        return typed
    return err


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


class JetStreamConnection:
    """One nats client on a private event loop thread; any thread or loop runs calls on it.

    Args:
        url: ``nats://host:port`` (or several, comma-separated).
        name: the client name the broker shows.
        token: the broker's auth token, if it requires one.
        tls: a client ``ssl.SSLContext`` for a TLS broker.
        tls_hostname: the name to check the broker's certificate against (default: the URL's host).
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
        tls_hostname: str | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self._tls_hostname = tls_hostname
        self.disconnects = 0
        self.reconnects = 0
        self._reconnect_hooks: list[Callable[[], Awaitable[None]]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"nats/{name}", daemon=True)
        self._thread.start()
        self._closed = False
        self._closing = False
        self._refusal: BaseException | None = None
        self._hops = _Hops(self._loop)
        try:
            self.nc: Client = self.run(self._connect(url.split(","), name, token, tls, connect_timeout_s))
        except BaseException:
            self._stop_loop()
            raise
        self.js: JetStreamContext = self.nc.jetstream(timeout=REQUEST_TIMEOUT_S)

    async def _connect(self, servers: list[str], name: str, token: str | None, tls: Any, timeout_s: float) -> Client:
        """Connect, retrying an absent broker until ``timeout_s``; a refusal retrying cannot fix ends it at once.

        nats-py's ``connect`` with unbounded reconnects retries every failure of the first connect
        too, a refused token or certificate among them, reporting each to ``error_cb``: the first
        such refusal seen there ends the attempt.
        """
        deadline = deadline_after(timeout_s)
        while True:
            attempt = asyncio.ensure_future(
                nats.connect(
                    servers=servers,
                    name=name,
                    token=token,
                    tls=tls,
                    tls_hostname=self._tls_hostname,
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
            )
            try:
                while not attempt.done():
                    await asyncio.wait({attempt}, timeout=0.05)
                    if self._refusal is not None:
                        raise ConfigError(
                            f"the NATS broker at {self.url} refused the connection: {self._refusal!r} "
                            "(check --topics-token[-file] and --topics-tls-*)"
                        ) from self._refusal
                    if expired(remaining_s(deadline)):
                        raise DeadlineExceededError(f"no NATS broker answered at {self.url} within {timeout_s} s")
                return attempt.result()
            except (nats.errors.NoServersError, OSError, asyncio.TimeoutError) as err:
                if expired(remaining_s(deadline)):
                    raise DeadlineExceededError(f"no NATS broker answered at {self.url} within {timeout_s} s: {err}") from err
                await asyncio.sleep(RECONNECT_WAIT_S)
            finally:
                if not attempt.done():
                    attempt.cancel()
                    await asyncio.gather(attempt, return_exceptions=True)

    async def _disconnected(self) -> None:
        self.disconnects += 1
        if not self._closing:
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
        err = typed_error(err)
        if isinstance(err, REFUSALS):
            self._refusal = err  # the first connect gives up on it (``_connect``); later, nats-py keeps retrying
            logger.error("NATS broker %s refused this client: %r", self.url, err)
            return
        logger.debug("NATS client error: %r", err)

    def on_reconnect(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook()`` on the connection's loop after every reconnect."""
        self._reconnect_hooks.append(hook)

    @property
    def closed(self) -> bool:
        return self._closed

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
        cancelling the caller does not cancel ``coro``).

        Calls from many coroutines share the wakeups of both loops (``_Hops``): under load one
        wakeup carries a batch each way instead of one per call.
        """
        if self._closed:
            raise TopicClosedError(f"the connection to {self.url} is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._hops.put(coro, future)
        return await future

    def close(self) -> None:
        """Drain nothing, close the client and stop the loop thread. Idempotent."""
        if self._closed:
            return
        self._closing = True
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


class _Hops:
    """Coroutines sent from other event loops to run on ``loop``, their results sent back.

    A hop between loops costs a wakeup of the other loop's thread (a write to its self-pipe, then a
    wait for the GIL). ``put`` wakes ``loop`` only when no batch is already on its way, and a
    caller's loop is woken once for every result that finished meanwhile, so publishes from many
    sessions share wakeups (each of ``asyncio.run_coroutine_threadsafe`` and ``wrap_future`` has
    its own, both ways).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._incoming: list[tuple[Awaitable[Any], asyncio.Future[Any]]] = []
        self._starting = False
        self._results: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], asyncio.Task[Any]]]] = {}

    def put(self, coro: Awaitable[Any], future: asyncio.Future[Any]) -> None:
        """Run ``coro`` on ``loop``; resolve ``future`` (of the caller's loop) with its outcome."""
        with self._lock:
            self._incoming.append((coro, future))
            if self._starting:
                return
            self._starting = True
        self._loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        with self._lock:
            batch, self._incoming = self._incoming, []
            self._starting = False
        for coro, future in batch:
            task: asyncio.Task[Any] = self._loop.create_task(coro)  # type: ignore[arg-type]
            task.add_done_callback(functools.partial(self._finished, future))

    def _finished(self, future: asyncio.Future[Any], task: asyncio.Task[Any]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved here, even when the caller is gone
        caller = future.get_loop()
        with self._lock:
            results = self._results.setdefault(caller, [])
            results.append((future, task))
            if len(results) > 1:
                return  # a delivery to that loop is already on its way
        try:
            caller.call_soon_threadsafe(self._deliver, caller)
        except RuntimeError:  # the caller's loop is closed: nobody waits for these
            with self._lock:
                self._results.pop(caller, None)

    def _deliver(self, caller: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            results = self._results.pop(caller, [])
        for future, task in results:
            if future.done():  # the caller was cancelled; the call ran on
                continue
            if task.cancelled():
                future.cancel()
            elif (err := task.exception()) is not None:
                future.set_exception(err)
            else:
                future.set_result(task.result())


async def _cancel_other_tasks() -> None:
    """Cancel and await every task of the running loop but this one (the client's own, a watcher's)."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def request_backoff() -> Backoff:
    """The backoff between retries of a refused (full) or failed request: ``PUBLISH_BACKOFF_S``, doubling, no jitter."""
    return Backoff(*PUBLISH_BACKOFF_S, jitter=0.0)


async def pause(backoff: Backoff | float, deadline: float | None) -> None:
    """Sleep ``backoff``'s next delay (or a fixed one, in seconds), capped at the deadline."""
    delay_s = backoff.next_delay_s() if isinstance(backoff, Backoff) else backoff
    remaining = remaining_s(deadline)
    await asyncio.sleep(delay_s if remaining is None else max(0.0, min(delay_s, remaining)))


def broker_error(what: str, err: BaseException) -> StepstreamError:
    if isinstance(err, nats.js.errors.APIError):
        return ProtocolError(f"{what}: the broker refused: {err.description} (code {err.code}, err_code {err.err_code})")
    return StepstreamError(f"{what}: {err!r}")
