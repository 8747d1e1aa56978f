"""Scraping a stepstream metrics endpoint in tests, and the metrics the documentation lists.

``Scrapes`` keeps every scrape of one endpoint, so a test can ask whether a metric *moved*: some
sample of it took two different values over the run (for a histogram, its ``_count``). Counters are
named as exposed (``..._total``); ``documented`` reads the "Metrics" tables of ``docs/operations.md``.
"""

from __future__ import annotations

import math
import re
import urllib.request
from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
SCRAPE_TIMEOUT_S = 5.0

Sample = tuple[str, tuple[tuple[str, str], ...]]
"""(sample name, sorted labels)."""


def documented(prefix: str) -> dict[str, str]:
    """Metric name -> type of every "Metrics" table row of ``docs/operations.md`` whose name starts with ``prefix``."""
    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(stepstream_[a-z_]+)` \| (counter|gauge|histogram) \|", section, re.MULTILINE)
    return {name: kind for name, kind in rows if name.startswith(prefix)}


def scrape(url: str) -> dict[Sample, float]:
    """One scrape: every sample's value."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
        text = reply.read().decode("utf-8")
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return out


class Scrapes:
    """Every scrape of the endpoint at ``url`` so far."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.history: list[dict[Sample, float]] = []

    def take(self) -> dict[Sample, float]:
        latest = scrape(self.url)
        self.history.append(latest)
        return latest

    def value(self, name: str, **labels: str) -> float | None:
        """The latest value of the first sample of ``name`` whose labels include ``labels``."""
        if not self.history:
            return None
        for (sample, sample_labels), value in self.history[-1].items():
            if sample == name and set(labels.items()) <= set(sample_labels):
                return value
        return None

    @staticmethod
    def sample_name(metric: str, kind: str) -> str:
        """The sample whose value tells whether ``metric`` moved: a histogram's ``_count``, else itself."""
        return metric + "_count" if kind == "histogram" else metric

    def present(self, metric: str, kind: str) -> bool:
        name = self.sample_name(metric, kind)
        return any(sample == name for scraped in self.history for sample, _ in scraped)

    def moved(self, metric: str, kind: str) -> bool:
        """Some sample of ``metric`` took two different values across the scrapes.

        A counter's (or histogram's) sample missing from a scrape counts as 0 there, since its label set
        appears on its first event; a gauge's counts as no value.
        """
        name = self.sample_name(metric, kind)
        keys = {key for scraped in self.history for key in scraped if key[0] == name}
        seen: dict[Sample, set[float | str]] = defaultdict(set)
        for scraped in self.history:
            for key in keys:
                value = scraped.get(key, 0.0 if kind != "gauge" else None)  # a counter not yet exported is at 0
                if value is not None:
                    seen[key].add("nan" if math.isnan(value) else value)  # NaN != NaN: it would always "move"
        return any(len(values) > 1 for values in seen.values())
