"""Trajectory: one agent's segment of experiences, as the processor publishes it.

Words:
    experience: one step of one agent: the obs it saw, the action the policy took, and the reward
        and done that followed.
    trajectory: ``T`` consecutive experiences of one agent, cut when the agent is done or the
        segment reaches ``time_horizon``; ``next_obs`` is the obs after the last experience.
    episode: an agent's experiences from its first sighting to done; one or more trajectories.

Shapes: ``T`` experiences, ``C`` continuous action size, ``B`` discrete branches,
``M = sum(branches)`` action-mask width.

Update-buffer rows (``to_rows``, ``trajectories_to_rows``), one per experience, for
``AgentBuffer.extend_rows``. This module imports no buffer code (the processor, which makes
trajectories, never loads h5py):

=========================== ================== ==============================================
key                         dtype [per row]    meaning
=========================== ================== ==============================================
``obs_{i}``                 spec dtype [*s_i]  observation i the action was chosen on
``next_obs_{i}``            spec dtype [*s_i]  observation i after the action (``next_obs`` last)
``continuous_actions``      float32 [C]        the sampled (unclipped) continuous action
``discrete_actions``        int32 [B]          the sampled branch choices
``continuous_log_probs``    float32 [C]        log-prob of each continuous dimension
``discrete_log_probs``      float32 [B]        log-prob of each branch choice
``prev_continuous_actions`` float32 [C]        the previous action (zeros at episode start)
``prev_discrete_actions``   int32 [B]          the previous choices (zeros at episode start)
``action_mask``             float32 [M]        1 = allowed; only when B > 0; padding value 1
``rewards``                 float32 []         reward received after the action
``done``                    bool []            the episode ended after this action
``interrupted``             bool []            ... by a time limit or a flush (last row only)
``policy_version``          int64 []           the policy version that chose the action
``memory``                  float32 [R]        the recurrent state the action was chosen with;
                                               only for a recurrent policy (R = memory_size)
=========================== ================== ==============================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.environment_stats import MAX_STATS_PER_TRAJECTORY, EnvironmentStat, from_protos, to_protos
from common.errors import ProtocolError
from common.groups import GroupData
from common.tensors import from_tensor, to_tensor
from protos import pb

CONTINUOUS_ACTIONS = "continuous_actions"
DISCRETE_ACTIONS = "discrete_actions"
CONTINUOUS_LOG_PROBS = "continuous_log_probs"
DISCRETE_LOG_PROBS = "discrete_log_probs"
PREV_CONTINUOUS_ACTIONS = "prev_continuous_actions"
PREV_DISCRETE_ACTIONS = "prev_discrete_actions"
ACTION_MASK = "action_mask"
REWARDS = "rewards"
DONE = "done"
INTERRUPTED = "interrupted"
POLICY_VERSION = "policy_version"
MEMORY = "memory"


def obs_key(index: int) -> str:
    """Row key of observation ``index``."""
    return f"obs_{index}"


def next_obs_key(index: int) -> str:
    """Row key of the observation after the action, for observation ``index``."""
    return f"next_obs_{index}"


@dataclass(frozen=True, order=True)
class TrajectoryId:
    """Unique over every session of a behavior: (session, agent, sequence number)."""

    session_id: str
    agent_id: int
    sequence: int

    def __str__(self) -> str:
        return f"{self.session_id}/{self.agent_id}/{self.sequence}"


@dataclass(eq=False)
class Trajectory:
    """One agent's segment of ``T`` experiences (see the module docstring for the words)."""

    id: TrajectoryId
    behavior_name: str
    obs: list[np.ndarray]
    """One array per observation spec, ``[T, *shape]``."""
    next_obs: list[np.ndarray]
    """One array per observation spec, ``[*shape]``: the obs after the last experience."""
    continuous_actions: np.ndarray
    """float32 ``[T, C]``."""
    discrete_actions: np.ndarray
    """int32 ``[T, B]``."""
    continuous_log_probs: np.ndarray
    """float32 ``[T, C]``."""
    discrete_log_probs: np.ndarray
    """float32 ``[T, B]``."""
    prev_continuous_actions: np.ndarray
    """float32 ``[T, C]``; zeros on an episode's first experience."""
    prev_discrete_actions: np.ndarray
    """int32 ``[T, B]``; zeros on an episode's first experience."""
    action_mask: np.ndarray | None
    """bool ``[T, M]`` (True = allowed), None when there are no discrete branches."""
    rewards: np.ndarray
    """float32 ``[T]``."""
    done: np.ndarray
    """bool ``[T]``; only the last can be True."""
    policy_versions: np.ndarray
    """int64 ``[T]``: the version that chose each action."""
    done_reached: bool
    """The last experience ended the episode."""
    interrupted: bool
    """Ended by a time limit (max_reached) or flushed at session end: bootstrap from ``next_obs``."""
    episode_reward: float | None = None
    """Cumulative reward of the whole episode; set only on the segment that ends it."""
    episode_length: int | None = None
    """Experiences in the whole episode; set only on the segment that ends it."""
    environment_stats: tuple[EnvironmentStat, ...] = ()
    """The env's own statistics the processor received for this behavior since its previous published
    trajectory (``common.environment_stats``); the trainer adds them to its summaries."""
    memories: np.ndarray | None = None
    """float32 ``[T, R]``: the recurrent state each action was chosen with (``R`` = memory_size); None without
    memory."""
    group: GroupData | None = None
    """The agent's groupmates at each step and its group reward (``common.groups``); None when its session sent no
    groups for the behavior. Not in ``to_rows``: a group-aware trainer reads it itself."""
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Not on the wire; free for a trainer's own per-step arrays (values, advantages)."""
    obs_frames: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    """Not on the wire: observation index -> one block ``[T + 1, *shape]`` of which ``obs[i]`` (its first
    ``T``) and ``next_obs[i]`` (its last) are views. Images are held so (by the assembler and by
    ``from_proto``): each frame is stored once, and ``next_obs`` rows (``frames``) are a view, not a copy."""

    @property
    def length(self) -> int:
        """``T``, the number of experiences."""
        return len(self.rewards)

    @property
    def episode_ended(self) -> bool:
        return self.episode_length is not None

    @property
    def newest_policy_version(self) -> int:
        return int(self.policy_versions.max()) if self.length else -1

    @property
    def oldest_policy_version(self) -> int:
        return int(self.policy_versions.min()) if self.length else -1

    # -- rows ------------------------------------------------------------------------------------

    def frames(self, index: int) -> np.ndarray:
        """Observation ``index`` at every step and after the last: ``[T + 1, *shape]``, ``obs`` then ``next_obs``.

        A view of ``obs_frames[index]`` when the trajectory holds one (images), else one new array.
        """
        block = self.obs_frames.get(index)
        if block is not None:
            return block
        return np.concatenate([self.obs[index], self.next_obs[index][np.newaxis]])

    def to_rows(self) -> dict[str, np.ndarray]:
        """The update-buffer rows of this trajectory, ``[T, ...]`` per key (module docstring).

        ``next_obs_{i}`` rows are ``frames(i)[1:]``: a view for an observation held in ``obs_frames``.
        """
        t = self.length
        rows: dict[str, np.ndarray] = {}
        for i, obs in enumerate(self.obs):
            rows[obs_key(i)] = obs
            # Row j's next obs is obs j+1; the last row's is next_obs. No rows at all when T = 0.
            rows[next_obs_key(i)] = self.frames(i)[1:] if t else obs[:0]
        rows[CONTINUOUS_ACTIONS] = self.continuous_actions
        rows[DISCRETE_ACTIONS] = self.discrete_actions
        rows[CONTINUOUS_LOG_PROBS] = self.continuous_log_probs
        rows[DISCRETE_LOG_PROBS] = self.discrete_log_probs
        rows[PREV_CONTINUOUS_ACTIONS] = self.prev_continuous_actions
        rows[PREV_DISCRETE_ACTIONS] = self.prev_discrete_actions
        if self.action_mask is not None:
            rows[ACTION_MASK] = self.action_mask.astype(np.float32)
        rows[REWARDS] = self.rewards
        rows[DONE] = self.done
        interrupted = np.zeros(t, dtype=bool)
        if t:
            interrupted[-1] = self.interrupted
        rows[INTERRUPTED] = interrupted
        rows[POLICY_VERSION] = self.policy_versions
        if self.memories is not None:
            rows[MEMORY] = self.memories
        rows.update(self.extras)
        return rows

    # -- wire ------------------------------------------------------------------------------------

    def to_proto(self) -> pb.Trajectory:
        msg = pb.Trajectory(behavior_name=self.behavior_name, done_reached=self.done_reached, interrupted=self.interrupted)
        msg.id.session_id = self.id.session_id
        msg.id.agent_id = self.id.agent_id
        msg.id.sequence = self.id.sequence
        for obs in self.obs:
            to_tensor(obs, msg.observations.add())
        for next_obs in self.next_obs:
            to_tensor(next_obs, msg.next_observations.add())
        to_tensor(self.continuous_actions, msg.continuous_actions)
        to_tensor(self.discrete_actions, msg.discrete_actions)
        to_tensor(self.continuous_log_probs, msg.continuous_log_probs)
        to_tensor(self.discrete_log_probs, msg.discrete_log_probs)
        to_tensor(self.prev_continuous_actions, msg.prev_continuous_actions)
        to_tensor(self.prev_discrete_actions, msg.prev_discrete_actions)
        if self.action_mask is not None:
            to_tensor(self.action_mask, msg.action_mask)
        to_tensor(self.rewards, msg.rewards)
        to_tensor(self.done, msg.done)
        to_tensor(self.policy_versions, msg.policy_versions)
        if self.episode_length is not None:
            msg.episode_ended = True
            msg.episode_reward = float(self.episode_reward or 0.0)
            msg.episode_length = self.episode_length
        if self.environment_stats:
            msg.environment_stats.extend(to_protos(self.environment_stats))
        if self.memories is not None:
            to_tensor(self.memories, msg.memories)
        if self.group is not None:
            self.group.to_proto(msg)
        return msg

    @classmethod
    def from_proto(cls, msg: pb.Trajectory) -> Trajectory:
        """Decode and check that every per-step tensor has the same ``T``.

        Raises:
            ProtocolError: a malformed tensor, or per-step tensors of different lengths.
        """
        name = f"trajectory {msg.id.session_id}/{msg.id.agent_id}/{msg.id.sequence}"
        per_step: dict[str, Any] = {  # Any: mypy would match a dict[str, ndarray] to ``extras`` too
            "continuous_actions": from_tensor(msg.continuous_actions, "continuous_actions"),
            "discrete_actions": from_tensor(msg.discrete_actions, "discrete_actions"),
            "continuous_log_probs": from_tensor(msg.continuous_log_probs, "continuous_log_probs"),
            "discrete_log_probs": from_tensor(msg.discrete_log_probs, "discrete_log_probs"),
            "prev_continuous_actions": from_tensor(msg.prev_continuous_actions, "prev_continuous_actions"),
            "prev_discrete_actions": from_tensor(msg.prev_discrete_actions, "prev_discrete_actions"),
            "rewards": from_tensor(msg.rewards, "rewards"),
            "done": from_tensor(msg.done, "done"),
            "policy_versions": from_tensor(msg.policy_versions, "policy_versions"),
        }
        obs = [from_tensor(t, f"observations[{i}]") for i, t in enumerate(msg.observations)]
        next_obs = [from_tensor(t, f"next_observations[{i}]") for i, t in enumerate(msg.next_observations)]
        obs_frames: dict[int, np.ndarray] = {}
        mask = from_tensor(msg.action_mask, "action_mask") if msg.HasField("action_mask") else None
        lengths = {k: (v.shape[0] if v.ndim else -1) for k, v in per_step.items()}
        lengths.update({f"observations[{i}]": (o.shape[0] if o.ndim else -1) for i, o in enumerate(obs)})
        if mask is not None:
            lengths["action_mask"] = mask.shape[0] if mask.ndim else -1
        memories = _memories_of(msg, name)
        if memories is not None:
            lengths["memories"] = memories.shape[0] if memories.ndim == 2 else -1
        if len(set(lengths.values())) != 1 or -1 in lengths.values():
            raise ProtocolError(f"{name}: per-step tensors disagree on the number of steps (-1: a scalar): {lengths}")
        if len(next_obs) != len(obs):
            raise ProtocolError(f"{name}: {len(obs)} observations but {len(next_obs)} next_observations")
        for i, (o, n) in enumerate(zip(obs, next_obs, strict=True)):
            if n.shape != o.shape[1:]:
                raise ProtocolError(f"{name}: next_observations[{i}] has shape {list(n.shape)}, not {list(o.shape[1:])}")
            if o.ndim == 4:
                # An image: one block of T + 1 frames now (one copy, of bytes the message holds anyway),
                # so its next_obs rows are a view later, not a second copy of every frame.
                obs_frames[i], (obs[i], next_obs[i]) = frames_block(o, n)
        return cls(
            id=TrajectoryId(msg.id.session_id, msg.id.agent_id, msg.id.sequence),
            behavior_name=msg.behavior_name,
            obs=obs,
            next_obs=next_obs,
            action_mask=mask,
            done_reached=msg.done_reached,
            interrupted=msg.interrupted,
            episode_reward=msg.episode_reward if msg.episode_ended else None,
            episode_length=msg.episode_length if msg.episode_ended else None,
            obs_frames=obs_frames,
            memories=memories,
            environment_stats=from_protos(msg.environment_stats, name, MAX_STATS_PER_TRAJECTORY),
            group=GroupData.from_proto(msg, obs, len(per_step["rewards"]), name),
            **per_step,
        )


def _memories_of(msg: pb.Trajectory, name: str) -> np.ndarray | None:
    """The message's ``memories`` (float32), or None when it has none."""
    if not msg.HasField("memories"):
        return None
    memories = from_tensor(msg.memories, "memories")
    if memories.dtype != np.float32:
        raise ProtocolError(f"{name}: memories are {memories.dtype.name}, not float32")
    return memories


def frames_block(obs: np.ndarray, next_obs: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """One block ``[T + 1, *shape]`` holding ``obs`` ``[T, *shape]`` then ``next_obs`` ``[*shape]``, and its two views.

    Returns:
        ``(block, (block[:T], block[T]))``: what ``Trajectory.obs_frames``, ``obs`` and ``next_obs`` hold.
    """
    t = len(obs)
    block = np.empty((t + 1, *next_obs.shape), next_obs.dtype)
    block[:t] = obs
    block[t] = next_obs
    return block, (block[:t], block[t])


def trajectories_to_rows(trajectories: Iterable[Trajectory]) -> dict[str, np.ndarray]:
    """The rows of many trajectories concatenated, ready for one ``AgentBuffer.extend_rows``.

    Every trajectory must have the same row keys (one behavior's trajectories do).
    """
    per_key: dict[str, list[np.ndarray]] = {}
    for trajectory in trajectories:
        for key, value in trajectory.to_rows().items():
            per_key.setdefault(key, []).append(value)
    return {key: np.concatenate(values) for key, values in per_key.items()}
