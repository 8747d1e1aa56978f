"""A self-play behavior's trainer loop: snapshots on their own topic, the ELO in training_status.json, --resume."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from common.config import SelfPlaySettings
from common.environment_stats import EnvironmentStat
from common.self_play import ELO_TAG
from common.topics import PolicyTopic
from protos import pb
from tests.unit.test_trainer_loop import BEHAVIOR, CountingLearner, Topics, settings, taken, trajectory

SELF_PLAY = SelfPlaySettings(save_steps=15, window=2)


def snapshots_of(
    topic: PolicyTopic[pb.PolicyUpdate], elo: dict[int, float | None] | None = None
) -> list[tuple[int, int, int]]:
    """(snapshot number, policy version, trainer step) of every snapshot published from now on; their ELO into
    ``elo`` (None: none carried)."""
    got: list[tuple[int, int, int]] = []

    def take(number: int, item: pb.PolicyUpdate) -> None:
        got.append((number, int(item.version), int(item.trainer_step)))
        if elo is not None:
            elo[number] = item.elo if item.HasField("elo") else None

    topic.add_listener(take)
    return got


def test_snapshots_every_save_steps_and_the_elo_in_the_status(tmp_path: Path) -> None:
    topics = Topics()
    snapshot_topic: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(f"snapshots/{BEHAVIOR}")
    got = snapshots_of(snapshot_topic)
    behavior = settings(max_steps=400, self_play=SELF_PLAY)
    rated = [
        dataclasses.replace(
            trajectory(k, episode_reward=1.0), environment_stats=(EnvironmentStat(ELO_TAG, 1200.0 + k, "most_recent"),)
        )
        for k in range(10)
    ]
    topics.publish(*rated)
    loop = topics.loop(CountingLearner(update_every=10), behavior, results_dir=tmp_path, snapshot_sink=snapshot_topic)
    loop.run(should_stop=taken(10))
    # The loop takes the ten trajectories (40 experiences) at once: policy 0 at step 0 and policy 1 after the update
    # at step 40, more than 15 steps past the first snapshot.
    assert got == [(1, 0, 0), (2, 1, 40)]
    assert topics.policies.highest_version == 1, "every policy still goes to the policy topic"
    status = json.loads((tmp_path / "run_logs" / "training_status.json").read_text())[BEHAVIOR]
    assert status["self_play"] == {"elo": 1209.0, "snapshots": [[1, 0], [2, 1]]}
    assert sorted(p.name for p in (tmp_path / BEHAVIOR / "snapshots").iterdir()) == ["snapshot-1.pb", "snapshot-2.pb"]

    resumed_topics = Topics()
    resumed_topic: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(f"snapshots/{BEHAVIOR}")
    elo: dict[int, float | None] = {}
    again = snapshots_of(resumed_topic, elo)
    resumed = resumed_topics.loop(
        CountingLearner(update_every=10), behavior, results_dir=tmp_path, snapshot_sink=resumed_topic, resume=True
    )
    resumed.run(should_stop=lambda r: r.policy_version >= 0)
    # The ring first, as it was, then the resumed loop's first policy as snapshot 3.
    assert [(number, version) for number, version, _ in again] == [(1, 0), (2, 1), (3, 2)]
    # Each carries the learner's ELO when it was saved (none before the first rating); the resumed loop's first, the
    # rating the run left in training_status.json.
    assert elo == {1: None, 2: 1209.0, 3: 1209.0}
    assert resumed.elo == 1209.0


def test_no_snapshots_without_self_play() -> None:
    topics = Topics()
    snapshot_topic: PolicyTopic[pb.PolicyUpdate] = PolicyTopic(f"snapshots/{BEHAVIOR}")
    got = snapshots_of(snapshot_topic)
    topics.publish(*(trajectory(k) for k in range(5)))
    loop = topics.loop(CountingLearner(update_every=10), settings(max_steps=400), snapshot_sink=snapshot_topic)
    loop.run(should_stop=taken(5))
    assert got == [] and loop.snapshots is None
