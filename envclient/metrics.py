"""The env client's Prometheus metrics (``stepstream env --metrics-port``), read at scrape time.

``EnvCollector`` reads the counters each ``ReconnectingEnvClient`` keeps anyway (reconnects,
sessions, whether one is open) and its env's step and episode counts; nothing is added to the step
loop. Names are listed in ``docs/operations.md`` ("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics import PREFIX
from envclient.reconnect import ReconnectingEnvClient

E = PREFIX + "env_"


class EnvCollector(Collector):
    """Every ``stepstream_env_*`` metric of the env clients of one process, labelled by behavior and client id."""

    def __init__(self, clients: Sequence[ReconnectingEnvClient]) -> None:
        self._clients = list(clients)

    def collect(self) -> Iterator[Metric]:
        labels = ["behavior", "client_id"]
        reconnects = CounterMetricFamily(
            E + "reconnects", "Sessions that failed to open or ended by a retryable status.", labels=labels
        )
        sessions = CounterMetricFamily(E + "sessions", "Sessions opened with the processor (Hellos accepted).", labels=labels)
        connected = GaugeMetricFamily(E + "connected", "1 while a session with the processor is open.", labels=labels)
        steps = CounterMetricFamily(E + "steps", "Env steps (BrainInfos) sent, across sessions.", labels=labels)
        episodes = CounterMetricFamily(
            E + "episodes", "Episodes finished (terminated or truncated), across sessions.", labels=labels
        )
        for client in self._clients:
            key = [client.behavior_name, client.client_id]
            reconnects.add_metric(key, client.retries)
            sessions.add_metric(key, client.sessions)
            connected.add_metric(key, int(client.connected))
            steps.add_metric(key, client.env.steps)
            episodes.add_metric(key, client.env.episodes)
        yield from (reconnects, sessions, connected, steps, episodes)
