"""The trainer loop of one behavior: experiences in, policy versions out.

``TrainerLoop.run`` owns the I/O around a ``Learner`` (``trainer.learner``) and blocks its thread:
the main thread of a trainer process, or a thread of its own in embedded mode and tests. Never the
processor's event loop: an update would stall inference. Every learner runs in this one loop (PPO,
SAC and online BC on trajectories, offline BC on demonstrations), fed by one of two sources:

* a ``TrajectorySubscription`` to ``trajectories/<behavior>`` (steps 1-4 below);
* an ``ExperienceFeed``, a source that hands the learner its data itself: offline BC's
  demonstration passes (``trainer.offline.DemonstrationPasses``). Each iteration it feeds at most
  what is left of ``max_steps``, so the run ends exactly at ``max_steps``; it has no episodes,
  acks, duplicates or staleness.

One iteration:

1. ``subscription.get(max_items, poll_s)`` takes up to ``max_items`` trajectories (waits at most
   ``poll_s`` so a stop request is seen promptly); a feed instead gives the learner its next
   update's data (``ExperienceFeed.feed``);
2. redelivered duplicates are dropped by ``Trajectory.id`` (``common.topics.Deduplicator``);
3. trajectories staler than ``settings.effective_max_policy_lag`` are dropped and counted: those
   whose ``oldest_policy_version`` is more than the lag below the newest version this loop
   published;
4. the rest go to ``learner.add_trajectories``, whose return value (experiences) advances the
   step count, and the deliveries are acknowledged. Near ``max_steps`` only what the budget needs
   is taken (overshoot: at most one trajectory); the rest stays unacknowledged, for a resumed
   trainer. Episode statistics are read from the trajectories that end an episode (stale ones
   included: the episode happened);
5. when ``learner.ready_to_update()``: ``update()``, then the next policy version is exported and
   published;
6. summaries every ``summary_freq`` steps, checkpoints every ``checkpoint_interval`` steps.

It stops at ``max_steps``, when ``stop`` is set, when ``should_stop(result)`` holds, when the topic
closes, or on Ctrl-C (KeyboardInterrupt in the thread running it), and then writes a final
summary and checkpoint, and a ``ReportingLearner``'s report (BC's ``bc_metrics.json``).

Versions (docs/architecture.md, "Staleness and versions"): at start the loop publishes a first policy
at ``max(policy_sink.highest_version, resumed version) + 1``, so the processor can act at once and
a resumed trainer always continues above anything the processor has seen. Every later version is
one higher; should the sink refuse one (another publisher went higher), the loop jumps above the
sink's highest and republishes. No version passes ``MAX_POLICY_VERSION`` (2**53): a loop whose next
version would raises ``PolicyVersionError`` before it exports anything (the CLI prints one line).

Resume (``resume=True``): the newest complete checkpoint (``trainer.checkpoint``; an incomplete or
damaged newer one is skipped with a WARNING) gives the step, the version and the learner's state.
With no checkpoint at all the run starts at step 0, and a WARNING says so.

TensorFlow threads: call ``configure_tf_threads()`` once per process before TensorFlow runs its
first op (see its docstring for the measurements behind the defaults).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from common.config import BehaviorSettings
from common.errors import PolicyVersionError, TopicClosedError
from common.staleness import is_stale
from common.topics import MAX_POLICY_VERSION, Deduplicator, Delivery, PolicySink, TrajectorySubscription
from common.trajectory import Trajectory
from protos import pb
from trainer.checkpoint import Checkpointer
from trainer.learner import Learner
from trainer.summaries import (
    DUPLICATE_TRAJECTORIES,
    MEAN_REWARD_WINDOW,
    POLICY_VERSION,
    STALE_TRAJECTORIES,
    UPDATE_SECONDS,
    EnvironmentStats,
    EpisodeRecord,
    MetricsWriter,
    PeriodStats,
    Summaries,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_ITEMS = 256
"""Trajectories taken per ``get``."""
DEFAULT_POLL_S = 0.1
"""Longest wait of one ``get``: how soon a stop request is noticed."""
CHECKPOINTS_DIR = "checkpoints"
"""Folder of the default checkpointer under ``results/<run-id>/<behavior>/``."""
EPISODE_HISTORY = 10 * MEAN_REWARD_WINDOW
"""Finished episodes ``TrainerResult`` keeps at least (rewards, lengths, versions); older ones are dropped."""
TF_INTRA_OP_THREADS = 1
TF_INTER_OP_THREADS = 1

# Why the loop stopped (``TrainerResult.stopped_by``).
MAX_STEPS = "max_steps"
STOPPED = "stop"
CONDITION = "condition"
TOPIC_CLOSED = "topic_closed"
INTERRUPTED = "interrupted"


@runtime_checkable
class ReportingLearner(Protocol):
    """A learner with a final report file (BC's ``bc_metrics.json``), written when the loop finishes."""

    def write_report(self, directory: Path) -> Path:
        """Write the report into the behavior's results folder ``directory``; returns its path."""
        ...


@runtime_checkable
class ExperienceFeed(Protocol):
    """A source that feeds the learner itself instead of a trajectory topic (offline BC's demonstration passes).

    It has no episodes, acknowledgements, duplicates or staleness; the loop only counts what it feeds.
    """

    kind: str
    """What the loop's start and stop lines call the trainer (``"offline BC"``)."""

    def feed(self, budget: int) -> int:
        """Give the learner its next update's data, at most ``budget`` (> 0) experiences; returns how many."""
        ...


def configure_tf_threads(intra_op: int = TF_INTRA_OP_THREADS, inter_op: int = TF_INTER_OP_THREADS) -> bool:
    """Size TensorFlow's thread pools for this process; call before TensorFlow runs anything.

    Default: one intra-op and one inter-op thread. In embedded mode the processor's event loop, the env
    clients and other trainers want the same cores; these minibatches are too small for intra-op
    parallelism to pay for its synchronisation, and a second pool thread only competes with everything
    else on the box. One update was fastest at 1 / 1 (``docs/benchmarks.md``, one-off measurements).

    Returns:
        True if set; False if TensorFlow was already initialised (then nothing changes, and a
        debug line says so).
    """
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        logger.debug(
            "TensorFlow already initialised: thread pools stay at intra %d, inter %d",
            tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads(),
        )
        return False
    return True


def _append_bounded(history: list[Any], value: Any) -> None:
    history.append(value)
    if len(history) > 2 * EPISODE_HISTORY:  # trimmed in bulk: a del per episode would cost O(history)
        del history[:-EPISODE_HISTORY]


@dataclass
class TrainerResult:
    """What one ``TrainerLoop.run`` did. Steps are agent experiences taken in by the learner."""

    behavior_name: str
    steps: int = 0
    """Experiences the learner took in (resumed steps included)."""
    updates: int = 0
    policy_version: int = -1
    """The newest version published."""
    trajectories: int = 0
    """Trajectories given to the learner."""
    duplicates: int = 0
    """Redelivered trajectories dropped."""
    stale_trajectories: int = 0
    """Trajectories dropped by max_policy_lag."""
    stale_experiences: int = 0
    episodes: int = 0
    """Episodes finished in this run, read from the trajectories that end them."""
    resumed_episodes: int = 0
    """Episodes the run resumed from had finished (``episodes.csv`` up to its checkpoint's step)."""
    episode_rewards: list[float] = field(default_factory=list)
    """Cumulative reward of the newest finished episodes (at least ``EPISODE_HISTORY``), in the order
    taken in; older ones are dropped, so a run of hours holds bounded memory (``episodes.csv`` has all)."""
    episode_lengths: list[int] = field(default_factory=list)
    episode_policy_versions: list[int] = field(default_factory=list)
    """The version that acted on each of those episodes' last step."""
    checkpoints: list[int] = field(default_factory=list)
    """Steps at which checkpoints were saved by this run."""
    resumed_from: int | None = None
    """The step of the checkpoint this run resumed from."""
    stopped_by: str = ""
    """MAX_STEPS, STOPPED, CONDITION, TOPIC_CLOSED or INTERRUPTED; empty while running."""
    wall_seconds: float = 0.0

    def add_episode(self, reward: float, length: int, version: int) -> None:
        self.episodes += 1
        _append_bounded(self.episode_rewards, reward)
        _append_bounded(self.episode_lengths, length)
        _append_bounded(self.episode_policy_versions, version)

    def mean_reward(self, last: int = MEAN_REWARD_WINDOW) -> float:
        """Mean of the last ``last`` episode rewards; NaN with none."""
        window = self.episode_rewards[-last:]
        return sum(window) / len(window) if window else math.nan


class TrainerLoop:
    """Runs one behavior's learner against its trajectory subscription and policy sink (module docstring).

    Args:
        behavior_name: the behavior trained.
        learner: the algorithm; used from ``run``'s thread only.
        source: the trainer's subscription to ``trajectories/<behavior>``, or an ``ExperienceFeed``.
        policy_sink: ``policies/<behavior>``.
        settings: the behavior's settings (max_steps, summary_freq, checkpoint_interval,
            keep_checkpoints, max_policy_lag).
        results_dir: ``results/<run-id>``; None writes no files (and checkpoints only with an
            explicit ``checkpointer``).
        run_started_at: epoch seconds at the start of the run's first process.
        checkpointer: where checkpoints go; None makes one in
            ``results_dir/<behavior>/checkpoints`` when ``results_dir`` is set.
        seed: recorded in the start line; learners seed themselves at construction.
        resume: restore the newest checkpoint before starting.
        max_items: trajectories taken per ``get``.
        poll_s: longest wait of one ``get``.
        writers: extra metric sinks (besides the console and TensorBoard).
    """

    def __init__(
        self,
        behavior_name: str,
        learner: Learner,
        source: TrajectorySubscription[Trajectory] | ExperienceFeed,
        policy_sink: PolicySink[pb.PolicyUpdate],
        settings: BehaviorSettings,
        *,
        results_dir: Path | None,
        run_started_at: float,
        checkpointer: Checkpointer | None = None,
        seed: int = 0,
        resume: bool = False,
        max_items: int = DEFAULT_MAX_ITEMS,
        poll_s: float = DEFAULT_POLL_S,
        writers: Iterable[MetricsWriter] = (),
    ) -> None:
        self.behavior_name = behavior_name
        self.learner = learner
        self.settings = settings
        self._feed = source if isinstance(source, ExperienceFeed) else None
        self._subscription = None if isinstance(source, ExperienceFeed) else source
        self._kind = "trainer" if self._feed is None else self._feed.kind
        self._sink = policy_sink
        self._seed = seed
        self._resume = resume
        self._max_items = max_items
        self._poll_s = poll_s
        if checkpointer is None and results_dir is not None:
            checkpointer = Checkpointer(
                results_dir / behavior_name / CHECKPOINTS_DIR,
                learner,
                settings.keep_checkpoints,
                onnx_path=results_dir / f"{behavior_name}.onnx",  # the newest policy for Unity, where ML-Agents puts it
            )
        self.checkpointer = checkpointer
        self.summaries = Summaries(behavior_name, results_dir, run_started_at, writers)
        self._behavior_dir = None if results_dir is None else results_dir / behavior_name
        self.result = TrainerResult(behavior_name)
        """Live while running (read it from another thread only for monitoring)."""
        self._dedup: Deduplicator[Any] = Deduplicator(_dedup_capacity(self._subscription))
        self._version = -1
        self._last_policy: pb.PolicyUpdate | None = None
        self._period = PeriodStats(0)
        self.environment_stats = EnvironmentStats()
        """What the environment reports itself (Unity's stats channel, ``stepstream train``): into each summary."""
        self._next_summary = settings.summary_freq
        self._next_checkpoint = settings.checkpoint_interval
        self._checkpointed_step: int | None = None
        self._summarized_step: int | None = None

    # -- the loop ------------------------------------------------------------------------------

    def run(
        self, stop: threading.Event | None = None, *, should_stop: Callable[[TrainerResult], bool] | None = None
    ) -> TrainerResult:
        """Train until a stop condition (module docstring); blocks the calling thread.

        Args:
            stop: set it from another thread to stop after the current iteration.
            should_stop: called with the live result after each iteration; True stops (tests).

        Returns:
            The result, with ``stopped_by`` set.

        Raises:
            Whatever the learner or the topics raise, other than ``TopicClosedError``; the
            summaries are closed first, and no checkpoint is written for a failed run.
        """
        started = time.monotonic()
        result = self.result
        try:
            self._start()
            while not result.stopped_by:
                result.stopped_by = self._iterate(stop, should_stop)
        except KeyboardInterrupt:
            result.stopped_by = INTERRUPTED
            logger.info("%s: interrupted; saving a checkpoint", self.behavior_name)
        except BaseException:
            result.wall_seconds = time.monotonic() - started
            self.summaries.close()
            raise
        result.wall_seconds = time.monotonic() - started
        try:
            self._finish()
        finally:
            self.summaries.close()
        return result

    def _iterate(self, stop: threading.Event | None, should_stop: Callable[[TrainerResult], bool] | None) -> str:
        """One iteration; returns why to stop, or "" to go on."""
        # The condition first: an iteration's take-in can reach it and the budget together (one poll may bring
        # many trajectories), and the run did reach it.
        if should_stop is not None and should_stop(self.result):
            return CONDITION
        if self.result.steps >= self.settings.max_steps:
            return MAX_STEPS
        if stop is not None and stop.is_set():
            return STOPPED
        if self._feed is not None:
            self.result.steps += self._feed.feed(self.settings.max_steps - self.result.steps)
        else:
            assert self._subscription is not None
            try:
                deliveries = self._subscription.get(self._max_items, self._poll_s)
            except TopicClosedError:
                return TOPIC_CLOSED
            if deliveries:
                self._take_in(self._subscription, deliveries)
        if self.learner.ready_to_update():
            self._update()
        if self.result.steps >= self._next_summary:
            self._summarize()
        if self.result.steps >= self._next_checkpoint:
            self._checkpoint()
        return ""

    def _start(self) -> None:
        resumed_version = -1
        if self._resume and self.checkpointer is not None:
            restored = self.checkpointer.restore_latest()
            if restored is not None:
                self.result.steps, resumed_version = restored
                self.result.resumed_from = self._checkpointed_step = restored[0]
                self._resume_episodes(restored[0])
            else:
                logger.warning(
                    "%s: --resume found no checkpoint in %s; starting at step 0",
                    self.behavior_name,
                    self.checkpointer.directory,
                )
        steps = self.result.steps
        self._period = PeriodStats(steps)
        self._next_summary = next_multiple(steps, self.settings.summary_freq)
        self._next_checkpoint = next_multiple(steps, self.settings.checkpoint_interval)
        self._version = max(self._sink.highest_version, resumed_version)
        self._publish()
        logger.info(
            "%s: %s started at step %d with policy version %d (max_steps %d, max_policy_lag %s, seed %d)",
            self.behavior_name,
            self._kind,
            steps,
            self._version,
            self.settings.max_steps,
            self.settings.effective_max_policy_lag,
            self._seed,
        )

    def _finish(self) -> None:
        result = self.result
        if result.steps != self._summarized_step or self._period.rewards:
            self._summarize()
        if self.checkpointer is not None and self._checkpointed_step != result.steps:
            self._checkpoint()
        if self._behavior_dir is not None and isinstance(self.learner, ReportingLearner):
            self.learner.write_report(self._behavior_dir)
        logger.info(
            "%s: %s stopped (%s) at step %d, policy version %d, %d updates, %d episodes; "
            "%d stale and %d duplicate trajectories dropped",
            self.behavior_name,
            self._kind,
            result.stopped_by,
            result.steps,
            self._version,
            result.updates,
            result.episodes,
            result.stale_trajectories,
            result.duplicates,
        )

    # -- steps of an iteration -------------------------------------------------------------------

    def _take_in(self, subscription: TrajectorySubscription[Trajectory], deliveries: Sequence[Delivery[Trajectory]]) -> None:
        """Drop duplicates and stale trajectories, feed the rest to the learner, ack them, record episodes.

        Only what fits the step budget is taken: once the fresh experiences reach ``max_steps``
        (the trajectory that crosses it included), the remaining deliveries are left unacked, so
        the subscription gives them to the next subscriber (a resumed trainer) instead of losing them.
        """
        result = self.result
        lag = self.settings.effective_max_policy_lag
        budget = self.settings.max_steps - result.steps
        fresh: list[Trajectory] = []
        ended: list[Trajectory] = []
        tags: list[int] = []
        for delivery in deliveries:
            if budget <= 0:
                break
            tags.append(delivery.tag)
            trajectory = delivery.item
            if self._dedup.seen(trajectory.id):
                result.duplicates += 1
                continue
            for stat in trajectory.environment_stats:  # the env's own values (Unity's stats channel), stale or not
                self.environment_stats.add(stat.key, stat.value, stat.aggregation)
            if trajectory.episode_ended:
                ended.append(trajectory)
            if is_stale(trajectory, self._version, lag):
                result.stale_trajectories += 1
                result.stale_experiences += trajectory.length
                continue
            fresh.append(trajectory)
            budget -= trajectory.length
            self._period.lags.append(float(self._version - trajectory.newest_policy_version))
        if fresh:
            result.steps += self.learner.add_trajectories(fresh)
            result.trajectories += len(fresh)
        subscription.ack(tags)
        if ended:
            self._record_episodes(ended)

    def _record_episodes(self, ended: Sequence[Trajectory]) -> None:
        result = self.result
        wall_seconds = self.summaries.wall_seconds()
        records = []
        for trajectory in ended:
            reward, length = float(trajectory.episode_reward or 0.0), int(trajectory.episode_length or 0)
            version = int(trajectory.policy_versions[-1]) if trajectory.length else -1  # acted on the last step
            records.append(EpisodeRecord(result.steps, wall_seconds, reward, length, version))
            result.add_episode(reward, length, version)
            self._period.rewards.append(reward)
            self._period.lengths.append(length)
        self.summaries.record_episodes(records)

    def _update(self) -> None:
        started = time.monotonic()
        metrics = dict(self.learner.update())
        self.result.updates += 1
        self._publish()
        metrics[UPDATE_SECONDS] = time.monotonic() - started
        self._period.add_learner_metrics(metrics)

    def _publish(self) -> None:
        """Export and publish the next version; jump above the sink's highest if it refuses."""
        version = self._checked(self._version + 1)
        update = self.learner.export_policy(version, self.result.steps)
        if not self._sink.publish(update, version):
            version = self._checked(self._sink.highest_version + 1)
            logger.warning(
                "%s: policy version %d refused by the sink; publishing as %d", self.behavior_name, version - 1, version
            )
            update = self.learner.export_policy(version, self.result.steps)
            if not self._sink.publish(update, version):
                raise RuntimeError(f"{self.behavior_name}: policy sink refused version {version} twice")
        self._version = self.result.policy_version = version
        self._last_policy = update

    def _checked(self, version: int) -> int:
        """``version``, if it is at most ``MAX_POLICY_VERSION``; else ``PolicyVersionError``."""
        if version > MAX_POLICY_VERSION:
            raise PolicyVersionError(
                f"{self.behavior_name}: the next policy version, {version}, would pass the highest allowed "
                f"({MAX_POLICY_VERSION} = 2**53): the policy topic or the checkpoint already holds version {version - 1}; "
                "restart the processor, or train a new run (another --run-id)"
            )
        return version

    def _summarize(self) -> None:
        result = self.result
        metrics = self._period.summary(result.steps)
        environment, histograms = self.environment_stats.take_period()
        metrics.update(environment)
        metrics[POLICY_VERSION] = float(self._version)
        metrics[STALE_TRAJECTORIES] = float(result.stale_trajectories)
        metrics[DUPLICATE_TRAJECTORIES] = float(result.duplicates)
        self.summaries.write(metrics, result.steps)
        if histograms:
            self.summaries.write_histograms(histograms, result.steps)
        self._summarized_step = result.steps
        self._write_status()
        self._period = PeriodStats(result.steps)
        self._next_summary = next_multiple(result.steps, self.settings.summary_freq)

    def _checkpoint(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.save(self.result.steps, self._version, self._last_policy)
            self.result.checkpoints.append(self.result.steps)
            self._checkpointed_step = self.result.steps
            self._write_status()
        self._next_checkpoint = next_multiple(self.result.steps, self.settings.checkpoint_interval)

    def _resume_episodes(self, step: int) -> None:
        """Carry the finished episodes up to ``step`` over: their count and the reward history behind
        ``mean_reward``, so training_status.json and the summaries go on where the run left off."""
        past = self.summaries.past_episodes(step)
        self.result.resumed_episodes = len(past)
        kept = past[-EPISODE_HISTORY:]
        self.result.episode_rewards.extend(r.episode_reward for r in kept)
        self.result.episode_lengths.extend(r.episode_length for r in kept)
        self.result.episode_policy_versions.extend(r.policy_version for r in kept)

    def _write_status(self) -> None:
        result = self.result
        mean_reward = result.mean_reward()
        checkpoints = [] if self.checkpointer is None else self.checkpointer.checkpoints()
        self.summaries.update_status(
            {
                "steps": result.steps,
                "episodes": result.resumed_episodes + result.episodes,
                "mean_reward": None if math.isnan(mean_reward) else mean_reward,
                "wall_seconds": round(self.summaries.wall_seconds(), 3),
                "policy_version": self._version,
                "updates": result.updates,
                "checkpoints": [
                    {"steps": c.step, "policy_version": c.version, "path": c.path, "wall_time": c.wall_time}
                    for c in checkpoints
                ],
            }
        )


def next_multiple(step: int, interval: int) -> int:
    """The first multiple of ``interval`` above ``step``."""
    return (step // interval + 1) * interval


def _dedup_capacity(subscription: TrajectorySubscription[Trajectory] | None) -> int:
    """A few times the queue's capacity (``Deduplicator``'s rule), at least 4096."""
    if subscription is None:  # a feed: nothing is redelivered
        return 1
    try:
        return max(4 * subscription.stats().max_size, 4096)
    except Exception:  # a transport without stats
        return 4096
