"""ProcessorServer: the grpc.aio server that owns the processor's lifecycle.

``start()`` binds and returns the port (port 0 picks a free one, as tests do), ``stop(grace_s)``
drains in this order, so that nothing flushed at shutdown is lost on the way:

1. new Step streams are refused (UNAVAILABLE, ``processor.interceptors.StoppingInterceptor``) and
   health says NOT_SERVING; open Step streams get ``grace_s`` to end by themselves, then their
   handlers are cancelled, and each flushes its session's partial trajectories to the topics;
2. the subscribers still attached take and ack what is queued, for as long as they keep taking or acking
   (a pause of ``DELIVERY_STALL_S`` without either ends the wait), and never longer than
   ``ServerOptions.deliver_timeout_s``;
3. only then do the topics close, which ends each Subscribe stream with OK, and the gRPC server
   stops (what is left, e.g. health watches, is cancelled after ``STREAM_END_GRACE_S``).

``serve()`` runs it until SIGTERM or SIGINT, with the garbage collector set for a server
(``configure_gc``): what start-up made is frozen out of every collection, and full collections, which
scan every live object, come a hundred times rarer (``GC_THRESHOLDS``): 10,000 behaviors opening at
once made full collections of 0.4-0.8 s, each a stall of every session.

Security (``ServerOptions.security``, built by ``common.security``): TLS when given a certificate and
key (mutual TLS when also given a CA for clients), and a shared token checked on every call by
``processor.interceptors.TokenAuthInterceptor``; plaintext and no token by default, on loopback.
Metrics (``ServerOptions.metrics_port``): a Prometheus endpoint of ``processor.metrics``, started and
stopped with the server; off by default.

The health service is exempt from the token, so it must stay cheap for anyone: ``BoundedHealthServicer``
refuses service names over ``MAX_HEALTH_SERVICE_NAME_BYTES`` and more than ``MAX_HEALTH_WATCHES``
concurrent Watch streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from common.metrics import DEFAULT_METRICS_HOST, MetricsServer, serve_metrics
from common.security import ServerSecurity
from common.topics import TopicRegistry
from processor.behaviors import BehaviorTable, ProcessorSettings
from processor.interceptors import DecodeCheckInterceptor, LogContextInterceptor, StoppingInterceptor, TokenAuthInterceptor
from processor.metrics import ProcessorCollector
from processor.opponents import SelfPlay
from processor.servicer import AgentProcessorServicer
from processor.sessions import SessionTable
from protos import stepstream_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

GC_THRESHOLDS = (700, 10, 1000)
"""The collector's generation thresholds in a serving processor (CPython's are 700, 10, 10). The young
generations keep CPython's sizes, so their collections stay a few milliseconds; a full collection, which
scans every live object (some 40 per declared behavior: 0.3-0.4 s at 10,000 behaviors), waits for 1000
middle collections instead of 10, that is some 7 million objects allocated and not freed, and, as always,
for the survivors to have grown by a quarter. Cycles die young in practice (they are collected with
the young generations); what reaches the old generation waits longer to be collected."""


def configure_gc() -> None:
    """Set the collector for a long-running server: collect once, freeze what start-up made (modules, the
    server, its configured topics: never garbage, never scanned again) and set ``GC_THRESHOLDS``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


SERVICE_NAME = "stepstream.v1.AgentProcessor"
STEP_METHOD = f"/{SERVICE_NAME}/Step"

MAX_HEALTH_SERVICE_NAME_BYTES = 256
"""Longest service name (UTF-8 bytes) a health Check or Watch may ask about; ours is 28 bytes long."""
MAX_HEALTH_WATCHES = 64
"""Concurrent health Watch streams at most; a Watch holds its stream (and its request) until the client ends it."""
STREAM_END_GRACE_S = 1.0
"""After the topics closed, how long ``stop`` lets the remaining streams end before the server cancels them."""
HANDLER_FLUSH_TIMEOUT_S = 5.0
"""After cancelling the Step handlers that outlived the grace period, how long ``stop`` waits for their flushes."""
DELIVERY_STALL_S = 1.0
"""At ``stop``, how long the delivery wait goes on while no attached subscriber takes or acks a trajectory.

The wait exists for a subscriber that is draining its queue: a trainer takes a batch, adds it to its update
buffer and acks it in milliseconds to tens of milliseconds, so a second without progress means it is not taking
(idle, hung, or in a long update) and waiting longer would only hold the stop, up to ``deliver_timeout_s``, for
nothing (an attached but idle subscriber held every stop for the whole 5 s before). What it leaves is requeued
and lost with the process, as at ``deliver_timeout_s``; a trainer that resumes takes fresh trajectories."""
_DELIVERY_POLL_S = 0.02


class BoundedHealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    """The standard asyncio health service, with its per-call state bounded for unauthenticated callers.

    Each Watch keeps its request and a condition per service name for as long as the client keeps the
    stream open, and the token does not cover the health service (``processor.interceptors``). So a name
    longer than ``MAX_HEALTH_SERVICE_NAME_BYTES`` is refused with INVALID_ARGUMENT before any state is
    made, and a Watch beyond ``MAX_HEALTH_WATCHES`` concurrent ones with RESOURCE_EXHAUSTED: what all
    watchers together hold is then at most about ``MAX_HEALTH_WATCHES`` x (one stream + the name).

    Attributes:
        watches: Watch streams open now.
        refused: Check and Watch calls refused by these bounds.
    """

    def __init__(self) -> None:
        super().__init__()
        self.watches = 0
        self.refused = 0

    def _refused(self, context: grpc.aio.ServicerContext, code: grpc.StatusCode, details: str) -> bool:
        """Set the refusal's status (the caller returns: not ``context.abort``, whose kept exception holds the request)."""
        self.refused += 1
        context.set_code(code)
        context.set_details(details)
        return True

    def _refuse_long_name(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> bool:
        size = len(request.service.encode("utf-8"))
        if size <= MAX_HEALTH_SERVICE_NAME_BYTES:
            return False
        details = f"health service name of {size} bytes; at most {MAX_HEALTH_SERVICE_NAME_BYTES}"
        return self._refused(context, grpc.StatusCode.INVALID_ARGUMENT, details)

    async def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> object:
        if self._refuse_long_name(request, context):
            return health_pb2.HealthCheckResponse()  # not sent with a status other than OK
        return await super().Check(request, context)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> None:
        if self._refuse_long_name(request, context):
            return
        if self.watches >= MAX_HEALTH_WATCHES:
            self._refused(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"{MAX_HEALTH_WATCHES} health watches are open already")
            return
        self.watches += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watches -= 1


@dataclass(frozen=True)
class ServerOptions:
    """How the server listens. Units in the names."""

    host: str = "127.0.0.1"
    """Loopback by default; binding another interface must be asked for."""
    port: int = 0
    """0 picks a free port; ``start()`` returns the real one."""
    max_message_bytes: int = 16 * 1024 * 1024
    """Larger messages are refused by gRPC itself with RESOURCE_EXHAUSTED."""
    keepalive_time_ms: int = 10_000
    """Ping an idle connection this often, so a vanished client is noticed."""
    keepalive_timeout_ms: int = 5_000
    """A ping unanswered this long closes the connection (its sessions are flushed).

    It is also gRPC's ``grpc.http2.ping_timeout_ms`` (default 60 s), the timeout of *every* ping the
    server sends: gRPC keeps one ping in flight at a time (``grpc.http2.max_inflight_pings``), so a
    BDP-probe ping that a peer stops answering (SIGSTOP, a vanished host) holds back the keepalive ping
    until it times out. With only the keepalive timeout set, a hung env client was measured to keep its
    session for 60 s; with both, for at most ``hung_peer_bound_s``.
    """
    security: ServerSecurity = field(default_factory=ServerSecurity)
    """TLS (optionally mutual) and the shared token; none of them by default."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """Interface of the Prometheus endpoint; loopback unless asked otherwise."""
    metrics_port: int | None = None
    """Port of the Prometheus endpoint; None serves none, 0 picks a free one (``ProcessorServer.metrics_port``)."""
    max_concurrent_rpcs: int = 1024
    """Calls open at once, at most; grpc.aio refuses the next with RESOURCE_EXHAUSTED ("Concurrent RPC limit
    exceeded!") until one ends, so what peers hold in flight is at most this many calls of at most
    ``max_message_bytes`` each.

    It counts every open call for its whole life: a Step stream per env-client session, a Subscribe stream per
    trainer and behavior, a health Watch (at most ``MAX_HEALTH_WATCHES``), and the short unary queries. Normal
    use needs sessions + subscribers + probes, tens to a few hundred, so 1024 leaves room, and a deployment of
    more env clients raises it. Env clients retry RESOURCE_EXHAUSTED (``envclient.reconnect``), so a flood delays
    a new session rather than ending it, and a session already open is never displaced."""
    processor_id: str | None = None
    """This processor's identity in every session and trajectory id it makes (``processor.sessions``);
    None: ``<hostname>-<pid>``. Processors publishing into one broker need distinct ones."""
    deliver_timeout_s: float = 5.0
    """At ``stop``, after the sessions are flushed: how long attached subscribers get, at most, to take and ack
    every queued trajectory before their streams end; the wait ends sooner once they pause for
    ``DELIVERY_STALL_S`` (what is left is requeued and lost with the process)."""

    @property
    def hung_peer_bound_s(self) -> float:
        """Seconds after a peer's last frame by which a hung peer (socket open, no answers) is disconnected.

        Its last frame resets the keepalive timer; the keepalive ping follows within ``keepalive_time_ms``
        (or a ping already in flight is pending) and times out after ``keepalive_timeout_ms``. Measured
        here: 5.2 s for a client stopped mid-stream, 13.3 s for one stopped after 12 s idle.
        """
        return (self.keepalive_time_ms + self.keepalive_timeout_ms) / 1000

    def grpc_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.http2.ping_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 1_000),
            ("grpc.http2.max_ping_strikes", 0),
        ]


def grpc_server(options: ServerOptions, interceptors: list[grpc.aio.ServerInterceptor]) -> grpc.aio.Server:
    """A grpc.aio server (not bound, not started) with the processor's channel options and call limit.

    ``ProcessorServer.start`` serves with it; ``benchmarks/grpc_g1.py --server echo-hardened`` too, to
    measure what this wiring costs per round trip apart from the processor's own work.
    """
    return grpc.aio.server(
        options=options.grpc_options(), interceptors=interceptors, maximum_concurrent_rpcs=options.max_concurrent_rpcs
    )


class ProcessorServer:
    """The AgentProcessor service on one port, with the standard health service beside it."""

    def __init__(
        self,
        settings: ProcessorSettings | None = None,
        options: ServerOptions | None = None,
        topics: TopicRegistry | None = None,
    ) -> None:
        self.settings = settings or ProcessorSettings()
        self.options = options or ServerOptions()
        self.topics = topics if topics is not None else TopicRegistry()
        self.behaviors = BehaviorTable(self.settings, self.topics)
        self.sessions = SessionTable(self.options.processor_id)
        self.servicer = AgentProcessorServicer(self.behaviors, self.sessions, self.options.max_message_bytes)
        broker_limit = getattr(self.topics, "max_payload_bytes", None)  # a broker's (JetStream) bounds a trajectory too
        if broker_limit is not None:
            self.servicer.max_trajectory_bytes = min(self.servicer.max_trajectory_bytes, broker_limit)
        self.health = BoundedHealthServicer()
        self._stopping = StoppingInterceptor((STEP_METHOD,))
        self._server: grpc.aio.Server | None = None
        self._metrics: MetricsServer | None = None
        security = self.options.security
        self._auth = TokenAuthInterceptor(security.token) if security.token else None
        self.port: int | None = None

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The interceptors every call passes, in order: stopping gate, log context, decode check, token (if any)."""
        interceptors: list[grpc.aio.ServerInterceptor] = [self._stopping, LogContextInterceptor(), DecodeCheckInterceptor()]
        if self._auth is not None:
            interceptors.append(self._auth)
        return interceptors

    @property
    def self_play(self) -> SelfPlay:
        """Which team learns and what the opponents act with (``processor.opponents``)."""
        return self.servicer.self_play

    @property
    def refused_calls(self) -> int:
        """Calls refused for a missing or wrong token."""
        return 0 if self._auth is None else self._auth.refused

    @property
    def metrics_port(self) -> int | None:
        """The bound port of the Prometheus endpoint; None while it is not serving."""
        return None if self._metrics is None else self._metrics.port

    async def start(self) -> int:
        """Bind and start serving (and the metrics endpoint, if asked for); returns the bound port.

        Raises:
            OSError: the address (or the metrics address) cannot be bound.
        """
        server = grpc_server(self.options, self.interceptors())
        pb_grpc.add_AgentProcessorServicer_to_server(self.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        address = f"{self.options.host}:{self.options.port}"
        credentials = self.options.security.credentials()
        port = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
        if port == 0:
            raise OSError(f"cannot bind {address}")
        self._metrics = serve_metrics(self.options.metrics_host, self.options.metrics_port, ProcessorCollector(self))
        try:
            await server.start()
        except BaseException:  # the metrics port must not outlive a server that never started
            if self._metrics is not None:
                self._metrics.stop()
                self._metrics = None
            raise
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self._server, self.port = server, port
        log.info("processor serving on %s:%d (%s)", self.options.host, port, self.options.security.describe())
        return port

    async def _set_health(self, status: int) -> None:
        for service in ("", SERVICE_NAME):
            result = self.health.set(service, status)
            if asyncio.iscoroutine(result):
                await result

    async def stop(self, grace_s: float = 5.0) -> None:
        """Drain and stop (module docstring): end the Step streams and flush them, deliver, then end the rest.

        Args:
            grace_s: how long open Step streams may go on before their handlers are cancelled (and flushed).
        """
        if self._server is None:
            return
        self._stopping.stop()
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._end_sessions(grace_s)
        await self._deliver(self.options.deliver_timeout_s)
        await self.behaviors.stop()
        self.topics.close()  # ends every Subscribe stream (OK) once its queue is drained
        await self._server.stop(STREAM_END_GRACE_S)
        self._server = None
        if self._metrics is not None:  # last: a final scrape still sees the drained counters
            self._metrics.stop()
            self._metrics = None
        log.info("processor stopped")

    async def _end_sessions(self, grace_s: float) -> None:
        """Let the Step streams end within ``grace_s``, then cancel their handlers; each flushes its session in ``finally``."""
        handlers = self.sessions.handler_tasks()
        if not handlers:
            return
        _, late = await asyncio.wait(handlers, timeout=grace_s)
        for task in late:
            task.cancel()  # the servicer ends the stream UNAVAILABLE and flushes the session
        if late:
            _, stuck = await asyncio.wait(late, timeout=HANDLER_FLUSH_TIMEOUT_S)
            if stuck:  # blocked on a full queue nobody drains: closing the topics releases them (counted unpublished)
                log.warning("%d session(s) did not finish flushing within %.1f s", len(stuck), HANDLER_FLUSH_TIMEOUT_S)

    async def _deliver(self, timeout_s: float) -> None:
        """Wait until every attached subscriber has taken and acked its queue.

        It waits while they make progress (``_delivery_progress`` moves), stops once it has not moved for
        ``DELIVERY_STALL_S``, and never waits longer than ``timeout_s``.
        """
        start = time.monotonic()
        deadline = start + timeout_s
        progress, progressed_at = self._delivery_progress(), start
        while (pending := self._undelivered()) and (now := time.monotonic()) < deadline:
            if (current := self._delivery_progress()) != progress:
                progress, progressed_at = current, now
            elif now - progressed_at >= DELIVERY_STALL_S:
                break
            await asyncio.sleep(_DELIVERY_POLL_S)
        if pending:
            log.warning(
                "stopping after %.1f s with %d trajectories not yet acked by attached subscribers",
                time.monotonic() - start,
                pending,
            )

    def _undelivered(self) -> int:
        """Trajectories queued or in flight for attached subscribers (a detached queue cannot be drained now)."""
        total = 0
        for name in self.topics.behavior_names():
            for queue in self.topics.trajectories(name).stats().subscribers.values():
                if queue.attached:
                    total += queue.depth + queue.in_flight
        return total

    def _delivery_progress(self) -> int:
        """Deliveries handed out plus acks, over every subscriber queue: it moves while anyone takes or acks."""
        return sum(
            queue.delivered + queue.acked
            for name in self.topics.behavior_names()
            for queue in self.topics.trajectories(name).stats().subscribers.values()
        )

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def serve(self, grace_s: float = 5.0, *, exit_when_finished: bool = False) -> None:
        """Start, then run until SIGTERM/SIGINT, then drain with ``grace_s``.

        With ``exit_when_finished`` it also stops, as after a signal, once every behavior has finished training
        (``BehaviorTable.all_finished``) and no session is open: the end of a stack run."""
        await self.start()
        configure_gc()
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        while not stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), _FINISHED_POLL_S)
            if exit_when_finished and not stopping.is_set() and self.behaviors.all_finished() and not len(self.sessions):
                log.info("training of every behavior finished and no session is open; stopping")
                break
        else:
            log.info("signal received; draining (grace %.1f s)", grace_s)
        await self.stop(grace_s)


_FINISHED_POLL_S = 0.5
"""How often ``serve(exit_when_finished=True)`` looks whether the run is over."""
