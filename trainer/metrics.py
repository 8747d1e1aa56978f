"""A trainer's Prometheus metrics (``stepstream trainer --metrics-port``), read at scrape time.

``TrainerCollector`` reads the live ``TrainerResult`` of the behavior's current ``TrainerLoop`` (which
the loop documents as readable from another thread for monitoring) and its subscription's stats;
nothing is added to the loop. A trainer service runs a new loop after each reconnect: ``attach`` the
new one, and the per-run totals of the earlier loops are carried over, so counters never go back.
Names are listed in ``docs/operations.md`` ("Metrics").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics import PREFIX
from common.topics import SubscriptionStats, TrajectorySubscription
from common.trajectory import Trajectory
from trainer.loop import TrainerLoop, TrainerResult

T = PREFIX + "trainer_"


@dataclass
class _Totals:
    """Counts of loops that have ended, summed (a loop's ``TrainerResult`` counts from zero)."""

    experiences: int = 0
    updates: int = 0
    trajectories: int = 0
    duplicates: int = 0
    stale_trajectories: int = 0
    stale_experiences: int = 0
    episodes: int = 0

    def add(self, result: TrainerResult) -> None:
        self.experiences += _experiences(result)
        self.updates += result.updates
        self.trajectories += result.trajectories
        self.duplicates += result.duplicates
        self.stale_trajectories += result.stale_trajectories
        self.stale_experiences += result.stale_experiences
        self.episodes += result.episodes


def _experiences(result: TrainerResult) -> int:
    """Experiences this loop took in (its steps minus the checkpoint's it resumed from)."""
    return result.steps - (result.resumed_from or 0)


class TrainerCollector(Collector):
    """Every ``stepstream_trainer_*`` metric of one behavior's trainer.

    Args:
        behavior_name: the behavior trained (the ``behavior`` label).
    """

    def __init__(self, behavior_name: str) -> None:
        self.behavior_name = behavior_name
        self.reconnects = 0
        """Times the trainer lost the processor and subscribed again (the trainer service counts them)."""
        self._lock = threading.Lock()
        self._loop: TrainerLoop | None = None
        self._subscription: TrajectorySubscription[Trajectory] | None = None
        self._ended = _Totals()

    def attach(self, loop: TrainerLoop, subscription: TrajectorySubscription[Trajectory]) -> None:
        """Report ``loop`` (and its ``subscription``) from now on; the previous loop's totals carry over."""
        with self._lock:
            if self._loop is not None:
                self._ended.add(self._loop.result)
            self._loop, self._subscription = loop, subscription

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            loop, subscription, ended = self._loop, self._subscription, _Totals(**vars(self._ended))
        if loop is not None:
            ended.add(loop.result)
        result = loop.result if loop is not None else TrainerResult(self.behavior_name)
        stats = _stats(subscription)
        name = [self.behavior_name]

        def counter(metric: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(T + metric, doc, labels=["behavior"])
            family.add_metric(name, value)
            return family

        def gauge(metric: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(T + metric, doc, labels=["behavior"])
            family.add_metric(name, value)
            return family

        yield counter("experiences", "Experiences (agent steps) taken in by the learner in this process.", ended.experiences)
        yield gauge("step", "The learner's step count (experiences), resumed steps included.", result.steps)
        yield counter("updates", "Learner updates (each publishes a policy version).", ended.updates)
        yield gauge(
            "policy_version", "The newest policy version this trainer published (-1: none yet).", result.policy_version
        )
        yield counter("trajectories", "Trajectories given to the learner.", ended.trajectories)
        doc = "Trajectories dropped: duplicate (redelivered) or stale (max_policy_lag)."
        dropped = CounterMetricFamily(T + "trajectories_dropped", doc, labels=["behavior", "reason"])
        dropped.add_metric([self.behavior_name, "duplicate"], ended.duplicates)
        dropped.add_metric([self.behavior_name, "stale"], ended.stale_trajectories)
        yield dropped
        yield counter("episodes", "Episodes finished, read from the trajectories that end them.", ended.episodes)
        yield gauge("mean_reward", "Mean reward of the last 100 episodes (NaN before the first).", result.mean_reward())
        depth = stats.depth if stats else 0
        yield gauge("queue_depth", "Trajectories received from the processor and buffered, not yet taken.", depth)
        yield gauge("queue_in_flight", "Trajectories taken, not yet acknowledged.", stats.in_flight if stats else 0)
        yield counter("reconnects", "Times the trainer lost the processor and subscribed again.", self.reconnects)


def _stats(subscription: TrajectorySubscription[Trajectory] | None) -> SubscriptionStats | None:
    if subscription is None:
        return None
    try:
        return subscription.stats()
    except Exception:  # a transport without stats; monitoring must not fail the scrape
        return None
