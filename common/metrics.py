"""The Prometheus endpoint of a stepstream process, and helpers for collectors that read counters at scrape time.

Every metric of the processor, the trainers and the env clients is produced by a *custom collector*
(``processor.metrics``, ``trainer.metrics``, ``envclient.metrics``) that reads counters the code keeps
anyway (``BatcherCounters``, ``BehaviorCounters``, topic stats, ``TrainerResult``) when Prometheus
scrapes, in the HTTP server's thread. Nothing is added to the per-step path: a step costs the same
whether or not anyone scrapes. Reads are of plain ints and of dicts copied in one C-level call, which
the GIL makes atomic enough for monitoring (a scrape may see one counter a step ahead of another).

``MetricsServer`` serves one ``CollectorRegistry`` over HTTP at ``/metrics``, bound to ``127.0.0.1``
unless another host is asked for. ``docs/operations.md`` ("Metrics") lists every metric.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

DEFAULT_METRICS_HOST = "127.0.0.1"
"""Loopback by default; exposing the endpoint must be asked for (``--metrics-host 0.0.0.0``)."""
PREFIX = "stepstream_"
SIZE_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
"""Upper bounds of histograms of rows or requests per inference pass (``max_batch_rows`` defaults to 4096)."""


def new_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry of ``collectors`` plus the standard ``process_*`` (RSS, CPU, fds) and ``python_info`` metrics.

    A registry per process role, not the global one, so tests can run several processors in one process.
    """
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    for collector in collectors:
        registry.register(collector)
    return registry


def histogram_from_counts(
    name: str,
    documentation: str,
    labels: Sequence[str],
    series: Iterable[tuple[Sequence[str], Mapping[int, int] | Mapping[float, int]]],
    bounds: Sequence[float] = SIZE_BUCKETS,
) -> HistogramMetricFamily:
    """A histogram family from exact value -> count maps (one per label set), bucketed at ``bounds``.

    Args:
        series: ``(label values, {observed value: times observed})`` per label set; e.g.
            ``BatcherCounters.rows_per_pass``. Each map is copied first (a C-level call, so a
            concurrent update on the event loop cannot interleave).
    """
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    for label_values, counts in series:
        snapshot = dict(counts)
        cumulative = [0] * (len(bounds) + 1)
        total = 0.0
        for value, count in snapshot.items():
            total += float(value) * count
            slot = next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))
            cumulative[slot] += count
        running = 0
        buckets: list[tuple[str, float]] = []
        for bound, count in zip([*map(_bound_label, bounds), "+Inf"], cumulative, strict=True):
            running += count
            buckets.append((bound, running))
        family.add_metric(list(label_values), buckets, total)
    return family


def _bound_label(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


class MetricsServer:
    """``/metrics`` of one registry over HTTP, in a daemon thread; ``start`` returns the bound port."""

    def __init__(self, registry: CollectorRegistry, host: str = DEFAULT_METRICS_HOST, port: int = 0) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        """Bind and serve; returns the port (``port`` 0 picks a free one).

        Raises:
            OSError: the address cannot be bound.
        """
        self._httpd, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        self.port = int(self._httpd.server_port)
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return self.port

    def stop(self) -> None:
        """Stop serving and release the port. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None


def serve_metrics(host: str, port: int | None, *collectors: Collector) -> MetricsServer | None:
    """Start a ``MetricsServer`` of ``collectors`` on ``host:port``; None (no endpoint) when ``port`` is None."""
    if port is None:
        return None
    server = MetricsServer(new_registry(*collectors), host, port)
    server.start()
    return server
