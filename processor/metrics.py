"""The processor's Prometheus metrics, read at scrape time from the counters it keeps anyway.

``ProcessorCollector`` reads, per behavior, ``Behavior.counters`` (trajectories and experiences
published, flushed, dropped), ``InferenceBatcher.counters`` (rows, requests, passes, and the
rows-per-pass and requests-per-pass histograms), the policy topic (versions) and the trajectory
topic's subscriber queues (depth, in flight, capacity, drops, blocked time); and the session table.
It never touches the per-step path (``common.metrics``). Every name is listed in ``docs/operations.md``
("Metrics").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from common.metrics import PREFIX, histogram_from_counts
from common.topics import TopicRegistry
from processor.behaviors import Behavior, BehaviorTable, ProcessorSettings
from processor.opponents import SelfPlay
from processor.sessions import SessionTable

P = PREFIX + "processor_"


class CollectedProcessor(Protocol):
    """What the collector reads of a processor (``processor.server.ProcessorServer`` has it all).

    A protocol, so this module does not import the server that starts it.
    """

    @property
    def settings(self) -> ProcessorSettings: ...

    @property
    def behaviors(self) -> BehaviorTable: ...

    @property
    def topics(self) -> TopicRegistry[Any]: ...

    @property
    def sessions(self) -> SessionTable: ...

    @property
    def refused_calls(self) -> int:
        """Calls refused for a missing or wrong token."""
        ...

    @property
    def self_play(self) -> SelfPlay:
        """Which team learns and what the opponents act with (``processor.opponents``)."""
        ...


def _counter(name: str, doc: str, labels: tuple[str, ...] = ("behavior",)) -> CounterMetricFamily:
    return CounterMetricFamily(P + name, doc, labels=list(labels))


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ("behavior",)) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, labels=list(labels))


class ProcessorCollector(Collector):
    """Every ``stepstream_processor_*`` metric of one ``ProcessorServer``."""

    def __init__(self, server: CollectedProcessor) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        behaviors = self._server.behaviors.values()
        yield from self._behavior_metrics(behaviors)
        yield from self._inference_metrics(behaviors)
        yield from self._queue_metrics(sorted(set(self._server.settings.behaviors) | {b.name for b in behaviors}))
        yield from self._session_metrics()
        yield from self_play_metrics(self._server.self_play)

    def _behavior_metrics(self, behaviors: list[Behavior]) -> Iterator[Metric]:
        published_t = _counter("trajectories_published", "Trajectories published on trajectories/<behavior>.")
        published_x = _counter("experiences_published", "Experiences (agent steps) in the published trajectories.")
        flushed_t = _counter("trajectories_flushed", "Partial trajectories flushed as interrupted when their session ended.")
        flushed_x = _counter("experiences_flushed", "Experiences in the flushed trajectories.")
        labels = ("behavior", "reason")
        dropped_t = _counter(
            "trajectories_dropped",
            "Trajectories not published or delivered: stale (max_policy_lag), unpublished, undeliverable.",
            labels,
        )
        dropped_x = _counter("experiences_dropped", "Experiences in the dropped trajectories.", labels)
        doubt_help = "whose publish failed unanswered: the broker may have stored them (neither published nor dropped)."
        doubt_t = _counter("trajectories_in_doubt", "Trajectories " + doubt_help)
        doubt_x = _counter("experiences_in_doubt", "Experiences in trajectories " + doubt_help)
        version = _gauge("policy_version", "Highest policy version published for the behavior (-1: none yet).")
        acting = _gauge("acting_policy_version", "Policy version inference acts with (-1: none yet).")
        lag = _gauge("policy_lag", "Versions between the newest published policy and the one inference acts with.")
        updates = _counter("policy_updates", "Policy versions accepted on policies/<behavior>.")
        ignored = _counter("policy_updates_ignored", "Policy versions ignored for not being above the highest.")
        active = _gauge("behavior_sessions", "Live sessions that declared the behavior.")
        for behavior in behaviors:
            name, c = [behavior.name], behavior.counters
            published_t.add_metric(name, c.published_trajectories)
            published_x.add_metric(name, c.published_experiences)
            flushed_t.add_metric(name, c.flushed_trajectories)
            flushed_x.add_metric(name, c.flushed_experiences)
            dropped_t.add_metric([behavior.name, "stale"], c.stale_dropped_trajectories)
            dropped_x.add_metric([behavior.name, "stale"], c.stale_dropped_experiences)
            dropped_t.add_metric([behavior.name, "unpublished"], c.unpublished_trajectories)
            dropped_x.add_metric([behavior.name, "unpublished"], c.unpublished_experiences)
            dropped_t.add_metric([behavior.name, "undeliverable"], c.undeliverable_trajectories)
            dropped_x.add_metric([behavior.name, "undeliverable"], c.undeliverable_experiences)
            doubt_t.add_metric(name, c.in_doubt_trajectories)
            doubt_x.add_metric(name, c.in_doubt_experiences)
            highest = behavior.policies.highest_version
            policy = behavior.batcher.policy
            acting_version = -1 if policy is None else int(policy.version)
            version.add_metric(name, highest)
            acting.add_metric(name, acting_version)
            lag.add_metric(name, max(0, highest - acting_version) if acting_version >= 0 else 0)
            updates.add_metric(name, behavior.policies.published)
            ignored.add_metric(name, behavior.policies.ignored)
            active.add_metric(name, behavior.active_sessions)
        yield from (published_t, published_x, flushed_t, flushed_x, dropped_t, dropped_x, doubt_t, doubt_x)
        yield from (version, acting, lag, updates, ignored, active)

    def _inference_metrics(self, behaviors: list[Behavior]) -> Iterator[Metric]:
        steps = _counter("agent_steps", "Agent rows acted on by inference (agent steps received); rate() = agent-steps/s.")
        requests = _counter("inference_requests", "BrainInfos answered by inference.")
        passes = _counter("inference_passes", "Batched inference forward passes run.")
        failed = _counter("inference_failed_passes", "Forward passes whose policy call raised.")
        timeouts = _counter("first_policy_timeouts", "BrainInfos that gave up waiting for the behavior's first policy.")
        latency = HistogramMetricFamily(P + "inference_seconds", "Duration of one forward pass.", labels=["behavior"])
        for behavior in behaviors:
            name, c = [behavior.name], behavior.batcher.counters
            steps.add_metric(name, c.rows)
            requests.add_metric(name, c.requests)
            passes.add_metric(name, c.forward_passes)
            failed.add_metric(name, c.failed_passes)
            timeouts.add_metric(name, c.first_policy_timeouts)
            counts = list(c.pass_seconds_counts)
            cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
            labels = [*(repr(float(b)) for b in c.pass_seconds_buckets), "+Inf"]
            latency.add_metric(name, list(zip(labels, cumulative, strict=True)), c.pass_seconds_sum)
        yield from (steps, requests, passes, failed, timeouts)
        yield histogram_from_counts(
            P + "inference_batch_rows",
            "Agent rows per forward pass.",
            ["behavior"],
            (([b.name], b.batcher.counters.rows_per_pass) for b in behaviors),
        )
        yield histogram_from_counts(
            P + "inference_batch_requests",
            "BrainInfos (requests) per forward pass.",
            ["behavior"],
            (([b.name], b.batcher.counters.requests_per_pass) for b in behaviors),
        )
        yield latency

    def _queue_metrics(self, behavior_names: list[str]) -> Iterator[Metric]:
        """The trajectory topics of the configured and the declared behaviors (their topics exist already)."""
        labels = ("behavior", "subscriber")
        depth = _gauge("queue_depth", "Trajectories queued for the subscriber, not yet delivered.", labels)
        in_flight = _gauge("queue_in_flight", "Trajectories delivered to the subscriber, not yet acknowledged.", labels)
        capacity = _gauge("queue_capacity", "Capacity of the subscriber queue (queued + in flight).", labels)
        dropped = _counter("queue_dropped", "Trajectories the subscriber queue let go unacknowledged (drop_oldest).", labels)
        attached = _gauge("queue_attached", "1 while a subscriber (a trainer) is attached to the queue.", labels)
        released = _gauge(
            "queue_released", "1 while a block queue no longer holds back publishers: its subscriber is gone too long.", labels
        )
        blocked = _counter("publish_blocked_seconds", "Seconds sessions waited for room on a full topic (backpressure).")
        waiting = _gauge("blocked_publishers", "Sessions waiting for room on a full topic right now.")
        for behavior_name in behavior_names:
            stats = self._server.topics.trajectories(behavior_name).stats()
            blocked.add_metric([behavior_name], stats.blocked_seconds)
            waiting.add_metric([behavior_name], stats.blocked_publishers)
            for subscriber, s in stats.subscribers.items():
                key = [behavior_name, subscriber]
                depth.add_metric(key, s.depth)
                in_flight.add_metric(key, s.in_flight)
                capacity.add_metric(key, s.max_size)
                dropped.add_metric(key, s.dropped)
                attached.add_metric(key, int(s.attached))
                released.add_metric(key, int(s.released))
        yield from (depth, in_flight, capacity, dropped, attached, released, blocked, waiting)

    def _session_metrics(self) -> Iterator[Metric]:
        sessions = self._server.sessions
        live = GaugeMetricFamily(P + "sessions", "Live env-client sessions (Step streams).")
        live.add_metric([], len(sessions))
        opened = CounterMetricFamily(P + "sessions_opened", "Sessions opened (Hellos accepted).")
        opened.add_metric([], sessions.opened)
        closed = CounterMetricFamily(P + "sessions_closed", "Sessions ended and flushed.")
        closed.add_metric([], sessions.closed)
        replaced = CounterMetricFamily(P + "sessions_replaced", "Sessions replaced by a newer Hello with their client id.")
        replaced.add_metric([], sessions.replaced)
        refused = CounterMetricFamily(P + "calls_unauthenticated", "Calls refused for a missing or wrong token.")
        refused.add_metric([], self._server.refused_calls)
        yield from (live, opened, closed, replaced, refused)


def self_play_metrics(self_play: SelfPlay) -> Iterator[Metric]:
    """``stepstream_self_play_*``: the self-play behaviors' counters (``processor.opponents.OpponentCounters``), their
    ELO and the learning team; nothing without self-play."""
    if not self_play.behaviors:
        return
    name = "stepstream_self_play_"

    def counter(key: str, doc: str) -> CounterMetricFamily:
        return CounterMetricFamily(name + key, doc, labels=["behavior"])

    opponent_x = counter("opponent_experiences", "Agent rows acted for opponent teams (counted, never published).")
    swaps = counter("swaps", "Opponent picks made (a swap or a team change, one per opponent team).")
    changes = counter("team_changes", "Learning-team changes this behavior's count set off.")
    cuts = counter("cuts", "Trajectories cut as interrupted because their team stopped learning.")
    snapshots = counter("snapshots", "Snapshots taken in.")
    elo = GaugeMetricFamily(name + "elo", "The learner's ELO rating.", labels=["behavior"])
    for behavior, opponents in sorted(self_play.behaviors.items()):
        c = opponents.counters
        opponent_x.add_metric([behavior], c.opponent_experiences)
        swaps.add_metric([behavior], c.swaps)
        changes.add_metric([behavior], c.team_changes)
        cuts.add_metric([behavior], c.cuts)
        snapshots.add_metric([behavior], c.snapshots)
        elo.add_metric([behavior], opponents.ratings.learner)
    team = GaugeMetricFamily(name + "learning_team", "The learning team, global across behaviors (-1: none yet).")
    team.add_metric([], -1 if self_play.learning_team is None else self_play.learning_team)
    yield from (opponent_x, swaps, changes, cuts, snapshots, elo, team)
