"""The topics of every behavior, created on first use."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from common.topics.memory import TrajectoryTopic
from common.topics.policy import PolicyTopic

if TYPE_CHECKING:
    from common.trajectory import Trajectory

P = TypeVar("P")


def trajectory_topic_name(behavior_name: str) -> str:
    return f"trajectories/{behavior_name}"


def policy_topic_name(behavior_name: str) -> str:
    return f"policies/{behavior_name}"


def snapshot_topic_name(behavior_name: str) -> str:
    return f"snapshots/{behavior_name}"


class TopicRegistry(Generic[P]):
    """Get-or-create the two in-process topics of each behavior; thread-safe.

    ``P`` is the policy payload type (in practice ``PolicyUpdate``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trajectories: dict[str, TrajectoryTopic[Trajectory]] = {}
        self._policies: dict[str, PolicyTopic[P]] = {}
        self._snapshots: dict[str, PolicyTopic[P]] = {}

    def trajectories(self, behavior_name: str) -> TrajectoryTopic[Trajectory]:
        """The topic ``trajectories/<behavior_name>``.

        Raises:
            ValueError: ``behavior_name`` is empty.
        """
        _check_behavior_name(behavior_name)
        with self._lock:
            topic = self._trajectories.get(behavior_name)
            if topic is None:
                topic = self._trajectories[behavior_name] = TrajectoryTopic(trajectory_topic_name(behavior_name))
            return topic

    def policies(self, behavior_name: str) -> PolicyTopic[P]:
        """The topic ``policies/<behavior_name>``.

        Raises:
            ValueError: ``behavior_name`` is empty.
        """
        _check_behavior_name(behavior_name)
        with self._lock:
            topic = self._policies.get(behavior_name)
            if topic is None:
                topic = self._policies[behavior_name] = PolicyTopic(policy_topic_name(behavior_name))
            return topic

    def snapshots(self, behavior_name: str) -> PolicyTopic[P]:
        """The topic ``snapshots/<behavior_name>``: a self-play trainer's snapshots, keyed by snapshot number
        (``PolicyUpdate.snapshot``), not by policy version, so that a snapshot of an older version is served
        (``common.self_play``). Its readers take every snapshot by a listener (``PolicyTopic.add_listener``).

        Raises:
            ValueError: ``behavior_name`` is empty.
        """
        _check_behavior_name(behavior_name)
        with self._lock:
            topic = self._snapshots.get(behavior_name)
            if topic is None:
                topic = self._snapshots[behavior_name] = PolicyTopic(snapshot_topic_name(behavior_name))
            return topic

    def discard(self, behavior_name: str) -> int | None:
        """Forget and close both topics of ``behavior_name``, unless a subscriber is attached to its trajectories.

        For a behavior the processor no longer knows: what it held is freed. A later lookup creates
        new, empty topics.

        Returns:
            How many trajectories (queued or in flight) were dropped with the topic; None if it was kept
            because a subscriber is attached (or the behavior has no topics).
        """
        with self._lock:
            trajectories = self._trajectories.get(behavior_name)
            if trajectories is None and behavior_name not in self._policies:
                return None
            stats = trajectories.stats() if trajectories is not None else None
            if stats is not None and any(s.attached for s in stats.subscribers.values()):
                return None
            self._trajectories.pop(behavior_name, None)
            policies = self._policies.pop(behavior_name, None)
            snapshots = self._snapshots.pop(behavior_name, None)
        for topic in (trajectories, policies, snapshots):
            if topic is not None:
                topic.close()
        return 0 if stats is None else sum(s.depth + s.in_flight for s in stats.subscribers.values())

    def behavior_names(self) -> list[str]:
        """Every behavior with at least one topic, sorted."""
        with self._lock:
            return sorted(self._trajectories.keys() | self._policies.keys())

    def close(self) -> None:
        """Close every topic (waking their waiters); later lookups still return the closed topics."""
        with self._lock:
            topics: list[TrajectoryTopic[Any] | PolicyTopic[Any]] = [
                *self._trajectories.values(),
                *self._policies.values(),
                *self._snapshots.values(),
            ]
        for topic in topics:
            topic.close()


def _check_behavior_name(behavior_name: str) -> None:
    if not behavior_name:
        raise ValueError("behavior_name must not be empty")
