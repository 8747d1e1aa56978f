"""Groups of agents in a trajectory: its groupmates' status at each step, and its group reward.

An agent of a group (ML-Agents' ``SimpleMultiAgentGroup``; a PettingZoo team) acts on its own
observation; a group-aware trainer (``poca``) also reads, at each of the agent's experiences, the
status of the groupmates that had an experience at the same step: what they observed and did, the
reward they got and whether their episode ended there (ML-Agents' ``AgentStatus``), plus the reward
the whole group got. ``processor/groups.py`` assembles it; this module holds it, puts it on the wire
(``Trajectory`` fields 22-28) and answers the two questions trainers ask of it.

Shapes: ``T`` experiences, ``G`` groupmate slots (the most groupmates at any step of the
trajectory: a step with fewer leaves its last slots empty), ``G'`` groupmates after the last step,
``C`` continuous action size, ``B`` discrete branches, ``O`` the bytes of one agent's observations.

On the wire a trajectory repeats its groupmates' data per step, as ML-Agents' trajectories do:
``G * (O + 4C + 4B + 5)`` bytes per experience (obs, actions, reward, status), plus ``4`` for the
group reward and ``G' * O`` once. ``max_group_size`` caps a group so that a trajectory of
``time_horizon`` experiences still fits one message.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.errors import ProtocolError
from common.specs import BrainParameters
from common.tensors import from_tensor, to_tensor
from protos import pb

log = logging.getLogger(__name__)

EMPTY, ACTING, DONE = 0, 1, 2
"""``GroupData.groupmate_status`` values: an empty slot; a groupmate that acts on; one whose episode ended at the step."""

MAX_GROUP_AGENTS = 64
"""The most agents of one group in one BrainInfo, whatever the message limit allows (``max_group_size``)."""

_TENSOR_FRAMING_BYTES = 32
"""A generous bound on one tensor's framing (dtype, shape, length prefixes)."""


@dataclass(eq=False)
class GroupData:
    """The group side of one trajectory (module docstring for the shapes)."""

    group_rewards: np.ndarray
    """float32 ``[T]``: the reward the agent's group got after each experience."""
    groupmate_obs: list[np.ndarray]
    """One per observation spec, ``[T, G, *shape]``: what each groupmate acted on at the step."""
    groupmate_continuous_actions: np.ndarray
    """float32 ``[T, G, C]``."""
    groupmate_discrete_actions: np.ndarray
    """int32 ``[T, G, B]``."""
    groupmate_rewards: np.ndarray
    """float32 ``[T, G]``: each groupmate's own reward at the step."""
    groupmate_status: np.ndarray
    """uint8 ``[T, G]``: ``EMPTY``, ``ACTING`` or ``DONE``."""
    next_groupmate_obs: list[np.ndarray]
    """One per observation spec, ``[G', *shape]``: the groupmates' observations after the last experience."""

    @property
    def groupmates(self) -> int:
        """``G``."""
        return int(self.groupmate_status.shape[1])

    @property
    def all_groupmates_done(self) -> bool:
        """Every groupmate at the last step was done there (True with none): ML-Agents' ``all_group_dones_reached``.

        A trajectory's value bootstraps as terminal only when this holds, its own done was reached, and it
        was not interrupted: an agent that leaves before its group ends still bootstraps from the group's value.
        """
        if not len(self.groupmate_status):
            return True
        last = self.groupmate_status[-1]
        return bool(np.all(last[last != EMPTY] == DONE))

    def to_proto(self, msg: pb.Trajectory) -> None:
        """Fill ``msg``'s group fields (22-28)."""
        to_tensor(self.group_rewards, msg.group_rewards)
        for obs in self.groupmate_obs:
            to_tensor(obs, msg.groupmate_observations.add())
        to_tensor(self.groupmate_continuous_actions, msg.groupmate_continuous_actions)
        to_tensor(self.groupmate_discrete_actions, msg.groupmate_discrete_actions)
        to_tensor(self.groupmate_rewards, msg.groupmate_rewards)
        to_tensor(self.groupmate_status, msg.groupmate_status)
        for obs in self.next_groupmate_obs:
            to_tensor(obs, msg.next_groupmate_observations.add())

    @classmethod
    def from_proto(cls, msg: pb.Trajectory, obs: Sequence[np.ndarray], t: int, name: str) -> GroupData | None:
        """The group side of ``msg``, None when it has none; ``obs`` are the trajectory's own ``[T, *shape]``, ``t`` its ``T``.

        Raises:
            ProtocolError: a malformed tensor, or one whose shape disagrees with ``T``, ``G`` or the specs.
        """
        if not msg.HasField("group_rewards"):
            return None
        rewards = from_tensor(msg.group_rewards, "group_rewards")
        status = from_tensor(msg.groupmate_status, "groupmate_status")
        if rewards.shape != (t,) or status.ndim != 2 or status.shape[0] != t:
            raise ProtocolError(
                f"{name}: group_rewards {list(rewards.shape)} and groupmate_status {list(status.shape)} disagree"
            )
        g = status.shape[1]
        data = cls(
            group_rewards=rewards,
            groupmate_obs=[from_tensor(x, f"groupmate_observations[{i}]") for i, x in enumerate(msg.groupmate_observations)],
            groupmate_continuous_actions=from_tensor(msg.groupmate_continuous_actions, "groupmate_continuous_actions"),
            groupmate_discrete_actions=from_tensor(msg.groupmate_discrete_actions, "groupmate_discrete_actions"),
            groupmate_rewards=from_tensor(msg.groupmate_rewards, "groupmate_rewards"),
            groupmate_status=status,
            next_groupmate_obs=[
                from_tensor(x, f"next_groupmate_observations[{i}]") for i, x in enumerate(msg.next_groupmate_observations)
            ],
        )
        if len(data.groupmate_obs) != len(obs) or len(data.next_groupmate_obs) != len(obs):
            raise ProtocolError(f"{name}: groupmate observations do not match the {len(obs)} observations")
        shapes_ok = all(m.shape == (t, g, *o.shape[1:]) for m, o in zip(data.groupmate_obs, obs, strict=True))
        shapes_ok &= all(n.shape[1:] == o.shape[1:] for n, o in zip(data.next_groupmate_obs, obs, strict=True))
        shapes_ok &= data.groupmate_rewards.shape == (t, g)
        shapes_ok &= data.groupmate_continuous_actions.shape[:2] == (t, g) and data.groupmate_discrete_actions.shape[:2] == (
            t,
            g,
        )
        if not shapes_ok:
            raise ProtocolError(f"{name}: groupmate tensors disagree with T = {t}, G = {g} or the observation shapes")
        return data


def groupmate_step_bytes(params: BrainParameters) -> int:
    """Wire bytes one groupmate adds to one experience: obs, float32/int32 actions, float32 reward, uint8 status."""
    spec = params.action_spec
    return sum(s.nbytes for s in params.observation_specs) + 4 * spec.continuous_size + 4 * spec.num_branches + 5


def max_group_size(params: BrainParameters, trajectory_bytes: int, time_horizon: int, max_bytes: int) -> int:
    """The most agents of one group whose members' trajectories still fit ``max_bytes``.

    Args:
        trajectory_bytes: a trajectory of ``time_horizon`` experiences without groups, at most (the processor's
            ``TrajectorySize.at_most``).

    Returns:
        ``K`` in 1..``MAX_GROUP_AGENTS``: ``K - 1`` groupmates at every step and after the last, plus the group
        reward and the seven tensors' framing, stay inside ``max_bytes``.
    """
    obs_bytes = sum(s.nbytes for s in params.observation_specs)
    fixed = trajectory_bytes + 4 * time_horizon + (5 + 2 * len(params.observation_specs)) * _TENSOR_FRAMING_BYTES
    per_groupmate = time_horizon * groupmate_step_bytes(params) + obs_bytes
    room = max_bytes - fixed
    if room < per_groupmate:
        return 1
    return min(MAX_GROUP_AGENTS, 1 + room // per_groupmate)


class WarnOnce:
    """Logs its warning the first time only, for the process (as ML-Agents' trainers warn)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: set[str] = set()

    def __call__(self, trainer_type: str) -> None:
        with self._lock:
            if trainer_type in self._done:
                return
            self._done.add(trainer_type)
        log.warning(
            "%s adds each agent's group reward to its own reward and ignores its groupmates;"
            " trainer_type: poca is the trainer for groups of agents",
            trainer_type,
        )


_warn_once = WarnOnce()


def fold_group_rewards(trajectories: Sequence, trainer_type: str, warn: WarnOnce = _warn_once) -> None:
    """For a trainer without groups (``ppo``, ``sac``): add each trajectory's group reward to its rewards, in place
    of the trajectory's ``rewards`` array (a new array; the old may be read-only), and warn once, as ML-Agents does.

    Args:
        trajectories: ``common.trajectory.Trajectory`` objects; those without group data are left alone.
        warn: warns once per trainer type (the process's own by default).
    """
    for trajectory in trajectories:
        group = trajectory.group
        if group is None:
            continue
        warn(f"trainer_type: {trainer_type}")
        trajectory.rewards = (trajectory.rewards + group.group_rewards).astype(np.float32)
