"""TrainerLoop with in-process topics and a tiny real learner: versions, duplicates, staleness, budget, checkpoints."""

from __future__ import annotations

import csv
import json
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import tensorflow as tf

from common.config import BehaviorSettings, SACHyperparameters, TrainerType
from common.errors import PolicyVersionError
from common.topics import MAX_POLICY_VERSION, PolicyTopic, TrajectoryTopic
from common.trajectory import Trajectory, TrajectoryId
from protos import pb
from trainer.loop import (
    CONDITION,
    EPISODE_HISTORY,
    MAX_STEPS,
    PUBLISH_ATTEMPTS,
    STOPPED,
    TOPIC_CLOSED,
    TrainerLoop,
    TrainerResult,
)

BEHAVIOR = "Walker"
SUBSCRIBER = "trainer"


class CountingLearner:
    """A real (if trivial) learner: TF variables for its step count and a weight; updates every ``update_every`` steps."""

    def __init__(self, update_every: int = 10) -> None:
        self.update_every = update_every
        self.steps = tf.Variable(0, dtype=tf.int64, name="steps")
        self.weight = tf.Variable(0.0, name="weight")
        self.pending = 0
        self.seen: list[TrajectoryId] = []

    def add_trajectories(self, trajectories: Sequence[Trajectory]) -> int:
        n = sum(t.length for t in trajectories)
        self.seen += [t.id for t in trajectories]
        self.steps.assign_add(n)
        self.pending += n
        return n

    def ready_to_update(self) -> bool:
        return self.pending >= self.update_every

    def update(self) -> Mapping[str, float]:
        self.pending = 0
        self.weight.assign_add(1.0)
        return {"Losses/Policy Loss": float(self.weight.numpy())}

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        return pb.PolicyUpdate(behavior_name=BEHAVIOR, version=version, trainer_step=trainer_step)

    def checkpoint_objects(self) -> Mapping[str, object]:
        return {"learner_steps": self.steps, "weight": self.weight}

    def save_extra(self, directory: Path) -> None:
        del directory

    def load_extra(self, directory: Path) -> None:
        del directory


def trajectory(
    sequence: int, length: int = 4, version: int = 0, episode_reward: float | None = None, agent: int = 0
) -> Trajectory:
    """A trajectory of ``length`` one-float steps, all acted by ``version``; ends an episode when a reward is given."""
    ended = episode_reward is not None
    done = np.zeros(length, bool)
    done[-1] = ended
    return Trajectory(
        id=TrajectoryId("s", agent, sequence),
        behavior_name=BEHAVIOR,
        obs=[np.zeros((length, 1), np.float32)],
        next_obs=[np.zeros(1, np.float32)],
        continuous_actions=np.zeros((length, 1), np.float32),
        discrete_actions=np.zeros((length, 0), np.int32),
        continuous_log_probs=np.zeros((length, 1), np.float32),
        discrete_log_probs=np.zeros((length, 0), np.float32),
        prev_continuous_actions=np.zeros((length, 1), np.float32),
        prev_discrete_actions=np.zeros((length, 0), np.int32),
        action_mask=None,
        rewards=np.ones(length, np.float32),
        done=done,
        policy_versions=np.full(length, version, np.int64),
        done_reached=ended,
        interrupted=False,
        episode_reward=episode_reward,
        episode_length=length if ended else None,
    )


class Topics:
    """The in-process topics of one behavior, with the trainer's queue declared."""

    def __init__(self) -> None:
        self.trajectories: TrajectoryTopic[Trajectory] = TrajectoryTopic(f"trajectories/{BEHAVIOR}")
        self.trajectories.declare(SUBSCRIBER, 64)
        self.policies: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(f"policies/{BEHAVIOR}")

    def publish(self, *items: Trajectory) -> None:
        for item in items:
            self.trajectories.publish_blocking(item, timeout_s=1.0)

    def loop(self, learner: CountingLearner, settings: BehaviorSettings, **kwargs: object) -> TrainerLoop:
        defaults: dict[str, object] = {"results_dir": None, "run_started_at": time.time(), "poll_s": 0.01}
        defaults.update(kwargs)
        subscription = self.trajectories.subscribe(SUBSCRIBER, replace=True)
        return TrainerLoop(BEHAVIOR, learner, subscription, self.policies, settings, **defaults)  # type: ignore[arg-type]


def settings(**fields: object) -> BehaviorSettings:
    return BehaviorSettings(**fields)  # type: ignore[arg-type]


def taken(count: int) -> object:
    """A should_stop that holds once ``count`` trajectories were taken in or dropped."""
    return lambda r: r.trajectories + r.duplicates + r.stale_trajectories >= count


def test_first_policy_is_published_at_start_above_the_highest() -> None:
    topics = Topics()
    topics.policies.publish(pb.PolicyUpdate(version=7), 7)  # e.g. a previous trainer's
    loop = topics.loop(CountingLearner(), settings(max_steps=0))
    result = loop.run()
    assert result.stopped_by == MAX_STEPS
    assert topics.policies.highest_version == 8 and result.policy_version == 8
    latest = topics.policies.latest()
    assert latest is not None and latest[1].version == 8 and latest[1].trainer_step == 0


def test_updates_publish_consecutive_versions_and_stop_at_max_steps() -> None:
    topics = Topics()
    topics.publish(*[trajectory(i, length=4) for i in range(10)])
    learner = CountingLearner(update_every=8)
    result = topics.loop(learner, settings(max_steps=20), max_items=2).run()
    assert result.stopped_by == MAX_STEPS
    assert result.steps == 20 == int(learner.steps.numpy())
    assert result.updates == 2  # at 8 and 16 steps; the last 4 do not make an update
    assert result.policy_version == 2 == topics.policies.highest_version


def test_the_step_budget_takes_only_what_it_needs_and_leaves_the_rest_unacked() -> None:
    topics = Topics()
    topics.publish(*[trajectory(i, length=4) for i in range(10)])
    learner = CountingLearner(update_every=100)
    loop = topics.loop(learner, settings(max_steps=10))  # one get delivers all 10
    result = loop.run()
    assert result.steps == 12 and result.trajectories == 3  # the third crosses the budget
    queue = topics.trajectories.stats().subscribers[SUBSCRIBER]
    assert queue.acked == 3 and queue.in_flight == 7
    # The next subscriber of the queue (a resumed trainer) gets the 7 untaken trajectories.
    again = topics.trajectories.subscribe(SUBSCRIBER, replace=True)
    assert [d.item.id.sequence for d in again.get(timeout_s=0)] == list(range(3, 10))


def test_duplicates_are_dropped_by_id() -> None:
    topics = Topics()
    first = trajectory(1, episode_reward=2.0)
    topics.publish(first, trajectory(2), trajectory(1, episode_reward=2.0))  # a redelivery of 1
    learner = CountingLearner()
    result = topics.loop(learner, settings()).run(should_stop=taken(3))
    assert result.stopped_by == CONDITION
    assert result.duplicates == 1 and result.trajectories == 2
    assert learner.seen == [first.id, trajectory(2).id]
    assert result.episode_rewards == [2.0]  # the duplicate's episode is not counted twice


def test_stale_trajectories_are_dropped_and_counted() -> None:
    topics = Topics()
    topics.policies.publish(pb.PolicyUpdate(version=5), 5)  # the loop starts at version 6
    topics.publish(
        trajectory(1, version=4, episode_reward=-1.0),  # 6 - 4 > 1: stale, but its episode happened
        trajectory(2, version=5),  # 6 - 5 = 1: kept
        trajectory(3, version=6, length=3),
    )
    learner = CountingLearner(update_every=100)
    result = topics.loop(learner, settings(max_policy_lag=1)).run(should_stop=taken(3))
    assert result.stale_trajectories == 1 and result.stale_experiences == 4
    assert result.trajectories == 2 and result.steps == 7
    assert learner.seen == [trajectory(2).id, trajectory(3).id]
    assert result.episode_rewards == [-1.0] and result.episode_policy_versions == [4]


def test_unbounded_lag_keeps_old_trajectories() -> None:
    topics = Topics()
    topics.policies.publish(pb.PolicyUpdate(version=50), 50)
    topics.publish(trajectory(1, version=0))
    sac = settings(trainer_type=TrainerType.SAC, hyperparameters=SACHyperparameters())
    assert sac.effective_max_policy_lag is None
    result = topics.loop(CountingLearner(), sac).run(should_stop=taken(1))
    assert result.stale_trajectories == 0 and result.trajectories == 1


def test_stop_event_and_topic_close_end_the_loop() -> None:
    topics = Topics()
    stop = threading.Event()
    stop.set()
    assert topics.loop(CountingLearner(), settings()).run(stop).stopped_by == STOPPED
    loop = topics.loop(CountingLearner(), settings())
    topics.trajectories.close()
    assert loop.run().stopped_by == TOPIC_CLOSED


def test_a_refused_version_jumps_above_the_sink() -> None:
    topics = Topics()

    class RacingLearner(CountingLearner):
        def update(self) -> Mapping[str, float]:
            topics.policies.publish(pb.PolicyUpdate(version=40), 40)  # someone else went higher meanwhile
            return super().update()

    learner = RacingLearner(update_every=4)
    topics.publish(trajectory(1))
    result = topics.loop(learner, settings()).run(should_stop=lambda r: r.updates >= 1)
    assert result.policy_version == 41 == topics.policies.highest_version


def test_a_publisher_that_takes_every_version_first_never_stops_the_loop() -> None:
    """Each version the loop tries, another publisher took first: the loop trains on and publishes later."""
    topics = Topics()
    racing = {"left": 2 * PUBLISH_ATTEMPTS}

    class Stealing:
        def __init__(self, inner: PolicyTopic[pb.PolicyUpdate]) -> None:
            self.inner = inner

        @property
        def highest_version(self) -> int:
            return self.inner.highest_version

        def publish(self, item: pb.PolicyUpdate, version: int) -> bool:
            if racing["left"] > 0:
                racing["left"] -= 1
                self.inner.publish(pb.PolicyUpdate(version=version), version)  # the stranger's, first
            return self.inner.publish(item, version)

    learner = CountingLearner(update_every=4)
    topics.publish(*[trajectory(i, version=2 * PUBLISH_ATTEMPTS) for i in range(4)])  # acted by the stranger's
    subscription = topics.trajectories.subscribe(SUBSCRIBER, replace=True)
    loop = TrainerLoop(
        BEHAVIOR, learner, subscription, Stealing(topics.policies), settings(), results_dir=None,
        run_started_at=time.time(), poll_s=0.01, max_items=1,
    )  # fmt: skip
    # Its first policy and its first update's are taken; the second update's is published.
    result = loop.run(should_stop=lambda r: r.updates >= 2)
    assert result.updates == 2 and racing["left"] == 0
    assert result.policy_version == topics.policies.highest_version == 2 * PUBLISH_ATTEMPTS  # 0 to 9 were taken


def test_a_version_past_the_bound_is_refused_before_anything_is_exported() -> None:
    """At the bound, the next version is refused with one clear error (not an int64 overflow in the export)."""
    topics = Topics()
    topics.policies.publish(pb.PolicyUpdate(version=MAX_POLICY_VERSION), MAX_POLICY_VERSION)

    class Exporting(CountingLearner):
        exported: ClassVar[list[int]] = []

        def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
            self.exported.append(version)
            return super().export_policy(version, trainer_step)

    learner = Exporting()
    with pytest.raises(PolicyVersionError, match=rf"next policy version, {MAX_POLICY_VERSION + 1}, would pass"):
        topics.loop(learner, settings(max_steps=0)).run()
    assert learner.exported == [] and topics.policies.highest_version == MAX_POLICY_VERSION

    # One below the bound still runs: the first version is the bound itself.
    topics = Topics()
    topics.policies.publish(pb.PolicyUpdate(version=MAX_POLICY_VERSION - 1), MAX_POLICY_VERSION - 1)
    assert topics.loop(CountingLearner(), settings(max_steps=0)).run().policy_version == MAX_POLICY_VERSION


def test_checkpoints_summaries_and_resume(tmp_path: Path) -> None:
    topics = Topics()
    topics.publish(*[trajectory(i, length=5, episode_reward=float(i)) for i in range(8)])
    config = settings(max_steps=40, checkpoint_interval=10, keep_checkpoints=2, summary_freq=20, max_policy_lag=100)
    started = time.time()
    learner = CountingLearner(update_every=10)
    # One trajectory per get, so the checkpoint intervals are crossed one at a time.
    result = topics.loop(learner, config, results_dir=tmp_path, run_started_at=started, max_items=1).run()
    assert result.stopped_by == MAX_STEPS and result.steps == 40
    assert result.checkpoints == [10, 20, 30, 40]
    behavior_dir = tmp_path / BEHAVIOR
    kept = sorted(
        int(p.name.removeprefix("ckpt-").removesuffix(".index")) for p in (behavior_dir / "checkpoints").glob("ckpt-*.index")
    )
    assert kept == [30, 40]

    rows = list(csv.DictReader((behavior_dir / "episodes.csv").open()))
    assert [float(r["episode_reward"]) for r in rows] == [float(i) for i in range(8)]
    assert [int(r["episode_length"]) for r in rows] == [5] * 8
    assert all(0 <= float(r["wall_seconds"]) <= time.time() - started + 1 for r in rows)
    assert list(behavior_dir.glob("events.out.tfevents.*"))

    status = json.loads((tmp_path / "run_logs" / "training_status.json").read_text())[BEHAVIOR]
    assert status["steps"] == 40 and status["episodes"] == 8 and status["policy_version"] == result.policy_version
    assert status["mean_reward"] == pytest.approx(3.5)
    assert [c["steps"] for c in status["checkpoints"]] == [30, 40]

    # A resumed trainer restores step and learner state, and publishes above both its checkpoint
    # and the processor's highest version.
    topics.policies.publish(pb.PolicyUpdate(version=100), 100)
    learner = CountingLearner()
    resumed = topics.loop(learner, settings(max_steps=40), results_dir=tmp_path, resume=True).run()
    assert resumed.resumed_from == 40 and resumed.steps == 40 and resumed.stopped_by == MAX_STEPS
    assert int(learner.steps.numpy()) == 40 and float(learner.weight.numpy()) == result.updates
    assert resumed.policy_version == 101
    assert resumed.checkpoints == []  # nothing new to save at the same step


def test_result_helpers() -> None:
    result = TrainerResult("B")
    for reward in (1.0, 2.0, 3.0):
        result.add_episode(reward, length=5, version=0)
    assert result.episodes == 3 and result.mean_reward() == 2.0 and result.mean_reward(last=1) == 3.0


def test_trainer_result_keeps_a_bounded_episode_history() -> None:
    result = TrainerResult("B")
    total = 5 * EPISODE_HISTORY
    for i in range(total):
        result.add_episode(float(i), length=i, version=i)
    assert result.episodes == total
    assert EPISODE_HISTORY <= len(result.episode_rewards) <= 2 * EPISODE_HISTORY
    assert (
        result.episode_rewards[-1] == total - 1
        and result.episode_lengths[-1] == result.episode_policy_versions[-1] == total - 1
    )
    assert result.mean_reward(last=2) == total - 1.5
    assert np.isnan(TrainerResult("B").mean_reward())


def test_registry_maps_trainer_types_to_learners() -> None:
    from trainer.bc import BCLearner
    from trainer.registry import learner_class

    assert learner_class(TrainerType.BC) is BCLearner
    assert learner_class(TrainerType.PPO).__name__ == "PPOLearner"
    assert learner_class(TrainerType.SAC).__name__ == "SACLearner"
