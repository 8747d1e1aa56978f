"""ProcessorServer: the grpc.aio server that owns the processor's lifecycle.

``start()`` binds and returns the port (port 0 picks a free one, as tests do), ``stop(grace_s)``
drains: new streams are refused, in-flight steps are answered, every session's partial
trajectories are flushed to the topics, and only then do the topics close. ``serve()`` runs it
until SIGTERM or SIGINT.

Security (``ServerOptions.security``, built by ``common.security``): TLS when given a certificate and
key (mutual TLS when also given a CA for clients), and a shared token checked on every call by
``processor.interceptors.TokenAuthInterceptor``; plaintext and no token by default, on loopback.
Metrics (``ServerOptions.metrics_port``): a Prometheus endpoint of ``processor.metrics``, started and
stopped with the server; off by default.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from common.metrics import DEFAULT_METRICS_HOST, MetricsServer, serve_metrics
from common.security import ServerSecurity
from common.topics import TopicRegistry
from processor.behaviors import BehaviorTable, ProcessorSettings
from processor.interceptors import DecodeCheckInterceptor, LogContextInterceptor, TokenAuthInterceptor
from processor.metrics import ProcessorCollector
from processor.servicer import AgentProcessorServicer
from processor.sessions import SessionTable
from protos import stepstream_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = "stepstream.v1.AgentProcessor"


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
    """A ping unanswered this long closes the connection (its sessions are flushed)."""
    security: ServerSecurity = field(default_factory=ServerSecurity)
    """TLS (optionally mutual) and the shared token; none of them by default."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """Interface of the Prometheus endpoint; loopback unless asked otherwise."""
    metrics_port: int | None = None
    """Port of the Prometheus endpoint; None serves none, 0 picks a free one (``ProcessorServer.metrics_port``)."""

    def grpc_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", 1_000),
            ("grpc.http2.max_ping_strikes", 0),
        ]


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
        self.sessions = SessionTable()
        self.servicer = AgentProcessorServicer(self.behaviors, self.sessions, self.options.max_message_bytes)
        broker_limit = getattr(self.topics, "max_payload_bytes", None)  # a broker's (JetStream) bounds a trajectory too
        if broker_limit is not None:
            self.servicer.max_trajectory_bytes = min(self.servicer.max_trajectory_bytes, broker_limit)
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._metrics: MetricsServer | None = None
        security = self.options.security
        self._auth = TokenAuthInterceptor(security.token) if security.token else None
        self.port: int | None = None

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
        interceptors: list[grpc.aio.ServerInterceptor] = [LogContextInterceptor(), DecodeCheckInterceptor()]
        if self._auth is not None:
            interceptors.append(self._auth)
        server = grpc.aio.server(options=self.options.grpc_options(), interceptors=interceptors)
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
        """Drain and stop: answer what is in flight, flush sessions, then close the topics."""
        if self._server is None:
            return
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        handlers = self.sessions.handler_tasks()
        # Stream handlers flush their sessions in `finally` as the server cancels them; wait for
        # those flushes to reach the topics before the topics close.
        await self._server.stop(grace_s)
        if handlers:
            _, late = await asyncio.wait(handlers, timeout=grace_s)
            if late:
                log.warning("%d session(s) did not finish flushing within %.1f s", len(late), grace_s)
        await self.behaviors.stop()
        self.topics.close()
        self._server = None
        if self._metrics is not None:  # last: a final scrape still sees the drained counters
            self._metrics.stop()
            self._metrics = None
        log.info("processor stopped")

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def serve(self, grace_s: float = 5.0) -> None:
        """Start, then run until SIGTERM/SIGINT, then drain with ``grace_s``."""
        await self.start()
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        log.info("signal received; draining (grace %.1f s)", grace_s)
        await self.stop(grace_s)
