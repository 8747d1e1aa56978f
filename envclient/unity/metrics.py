"""The gateway's Prometheus metrics (``stepstream unity --metrics-port``), read at scrape time.

``stepstream_unity_stat`` is the latest value of each key Unity sent on its stats side channel
(``Academy.Instance.StatsRecorder.Add``) and ``stepstream_unity_stat_messages`` counts them;
``stepstream_unity_exchanges``, ``stepstream_unity_sessions`` and ``stepstream_unity_failed_behaviors``
count the gateway's calls, Unity sessions and behaviors refused for bad input.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics import PREFIX
from envclient.unity.side_channels import StatsValue

U = PREFIX + "unity_"


@dataclass
class UnityStats:
    """What the gateway counts; updated on the event loop, read by scrapes (plain ints and floats)."""

    exchanges: int = 0
    sessions: int = 0
    failed_behaviors: int = 0
    stats: dict[str, StatsValue] = field(default_factory=dict)
    """The latest stats-channel value per key."""
    stat_messages: dict[str, int] = field(default_factory=dict)

    def record(self, value: StatsValue) -> None:
        self.stats[value.key] = value
        self.stat_messages[value.key] = self.stat_messages.get(value.key, 0) + 1


class UnityCollector(Collector):
    """Every ``stepstream_unity_*`` metric of one or more gateways (``--num-envs``: one per build copy), summed;
    a stats key's latest value is the last copy's that has it."""

    def __init__(self, *stats: UnityStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        every = self._stats
        yield CounterMetricFamily(U + "exchanges", "Exchange calls answered.", value=sum(s.exchanges for s in every))
        yield CounterMetricFamily(
            U + "sessions", "Unity sessions initialized (Play, a build started).", value=sum(s.sessions for s in every)
        )
        yield CounterMetricFamily(
            U + "failed_behaviors",
            "Behaviors refused for bad input from Unity.",
            value=sum(s.failed_behaviors for s in every),
        )
        latest_values: dict[str, StatsValue] = {}
        messages: dict[str, int] = {}
        for s in every:
            latest_values.update(s.stats)
            for key, count in s.stat_messages.items():
                messages[key] = messages.get(key, 0) + count
        latest = GaugeMetricFamily(
            U + "stat", "Latest value of a key on Unity's stats side channel.", labels=["key", "aggregation"]
        )
        counts = CounterMetricFamily(U + "stat_messages", "Values received per stats key.", labels=["key"])
        for key, value in sorted(latest_values.items()):
            latest.add_metric([key, value.aggregation], value.value)
            counts.add_metric([key], messages[key])
        yield from (latest, counts)
