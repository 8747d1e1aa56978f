"""A self-play trainer's snapshots (``trainer.self_play``): every ``save_steps``, a ring of ``window``, resumed."""

from __future__ import annotations

from pathlib import Path

from common.config import SelfPlaySettings
from common.topics.policy import PolicyTopic
from protos import pb
from trainer.self_play import SnapshotSaver

SETTINGS = SelfPlaySettings(save_steps=100, window=3)


def update(version: int, step: int) -> pb.PolicyUpdate:
    return pb.PolicyUpdate(behavior_name="Duel", version=version, trainer_step=step)


def taken(topic: PolicyTopic[pb.PolicyUpdate]) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    topic.add_listener(lambda number, item: got.append((number, int(item.version))))
    return got


def test_first_policy_then_every_save_steps_with_its_own_version(tmp_path: Path) -> None:
    topic: PolicyTopic[pb.PolicyUpdate] = PolicyTopic("snapshots/Duel")
    got = taken(topic)
    saver = SnapshotSaver(SETTINGS, topic, tmp_path)
    # (version, trainer step) of each published policy: a snapshot at the first, then > 100 steps past the last
    updates = [update(v, s) for v, s in [(7, 0), (8, 60), (9, 100), (10, 101), (11, 150), (12, 202)]]
    saved = [saver.after_publish(u, u.trainer_step) for u in updates]
    assert saved == [True, False, False, True, False, True]
    assert got == [(1, 7), (2, 10), (3, 12)]  # keyed by number, each keeping its policy version
    assert all(u.snapshot == 0 for u in updates), "the loop's own updates are not marked"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snapshot-1.pb", "snapshot-2.pb", "snapshot-3.pb"]


def test_the_ring_keeps_window_on_disk(tmp_path: Path) -> None:
    saver = SnapshotSaver(SETTINGS, PolicyTopic("snapshots/Duel"), tmp_path)
    for k in range(5):
        saver.after_publish(update(k, 101 * k), 101 * k)
    assert saver.ring == [(3, 2), (4, 3), (5, 4)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snapshot-3.pb", "snapshot-4.pb", "snapshot-5.pb"]


def test_resume_republishes_the_ring_and_numbers_on(tmp_path: Path) -> None:
    first = SnapshotSaver(SETTINGS, PolicyTopic("snapshots/Duel"), tmp_path)
    for k in range(4):
        first.after_publish(update(k, 101 * k), 101 * k)
    topic: PolicyTopic[pb.PolicyUpdate] = PolicyTopic("snapshots/Duel")  # a new processor: an empty topic
    got = taken(topic)
    resumed = SnapshotSaver(SETTINGS, topic, tmp_path)
    assert resumed.resume(step=303) == 3
    assert got == [(2, 1), (3, 2), (4, 3)] and resumed.ring == first.ring
    assert resumed.after_publish(update(9, 350), 350) is True  # a resumed loop's first policy is a snapshot too
    assert got[-1] == (5, 9)
    assert resumed.after_publish(update(10, 450), 450) is False  # 100 past the last save: not more
    assert resumed.after_publish(update(11, 451), 451) is True
    assert resumed.ring == [(4, 3), (5, 9), (6, 11)]
