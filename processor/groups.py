"""Group assembly: each experience of a grouped agent gets its groupmates' status at that step.

The processor's side of ``common.groups``, beside ``processor.assembly`` (which cuts an agent's own
trajectory and knows nothing of groups). One ``SessionGroups`` per session, made at the first
BrainInfo that carries ``group_ids``; a session that never sends them pays nothing. Rules, as
ML-Agents' ``AgentProcessor`` has them (``_add_group_status_and_obs``, ``_process_step``):

* A group is (session, group id): ids are scoped by session like agent ids, so the same id in two
  sessions names two groups. Group id 0 is no group. A group's members share one behavior: the
  first BrainInfo that uses an id binds it to its behavior for the session's life.
* At a step, a member's **status** is what ML-Agents' ``AgentStatus`` holds: the obs it acted on
  (its previous row), the action returned for it, the reward and done of this row. Only members
  with an experience at this step have one (a first sighting has none).
* An experience carries its groupmates' statuses at its step, terminal steps first: an agent done
  at this step sees every groupmate with a status at this step (done or not); an agent that goes
  on sees only the groupmates that go on, because a groupmate whose episode ended here has left the
  group (ML-Agents clears it before the ongoing steps are processed). Two deliberate differences
  from ML-Agents, whose result there depends on processing order: every done agent sees every
  other done one, and sees its ongoing groupmates' statuses at this step rather than their last.
* The group reward of an experience is the ``group_rewards`` entry of its current row.
* When a trajectory is cut (done, ``time_horizon``, or the session-end flush), its next groupmate
  observations are the current observations of the groupmates its last experience saw.
* A BrainInfo without ``group_ids`` after the first that had them: every row in no group. An
  experience from before a session's first ``group_ids`` has no groupmates and no group reward.

Storage: a group's statuses at one step are held once (``_StepStatus``: ``[K, ...]`` arrays for its
``K`` members), and each member's experience holds a reference to it and its own row; so a step
costs about ``2 O + 4 C + 4 B + 5`` bytes per grouped agent whatever the group size (``O``: one
agent's observation bytes). A trajectory's ``[T, G, ...]`` arrays are built at its cut.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.errors import ProtocolError
from common.groups import ACTING, DONE, GroupData, max_group_size
from common.specs import BrainParameters
from common.tensors import from_tensor
from common.trajectory import Trajectory
from processor.assembly import StepActions
from processor.wire import DecodedBrainInfo, TrajectorySize
from protos import pb


@dataclass(frozen=True)
class GroupInfo:
    """The group fields of one BrainInfo, checked."""

    group_ids: np.ndarray
    """int64 [N], >= 0 (0 = no group)."""
    group_rewards: np.ndarray
    """float32 [N], finite."""


def decode_groups(msg: pb.BrainInfo, agent_ids: np.ndarray, where: str, max_agents: int) -> GroupInfo | None:
    """The BrainInfo's ``group_ids`` and ``group_rewards``, checked; None when it sends neither.

    Args:
        agent_ids: int64 [N], the BrainInfo's decoded agent ids (errors name the agent).
        where: names the behavior and session in errors.
        max_agents: the most agents of one group in this BrainInfo (``SessionGroups.max_group_size``).

    Raises:
        ProtocolError: only one of the two fields, a wrong shape or dtype, a negative id, a reward that is not
            finite, or a group over ``max_agents``; the message names the agent.
    """
    has_ids, has_rewards = msg.HasField("group_ids"), msg.HasField("group_rewards")
    if not (has_ids or has_rewards):
        return None
    if has_ids != has_rewards:
        sent, missing = ("group_ids", "group_rewards") if has_ids else ("group_rewards", "group_ids")
        raise ProtocolError(f"{where}: {sent} sent without {missing}; a BrainInfo sends both or neither")
    n = len(agent_ids)
    ids = _vector(msg.group_ids, "group_ids", "iu", n, where)
    rewards = _vector(msg.group_rewards, "group_rewards", "f", n, where).astype(np.float32, copy=False)
    negative = ids < 0
    if negative.any():
        r = int(np.flatnonzero(negative)[0])
        raise ProtocolError(f"{where}: group_ids of agent {int(agent_ids[r])} is {int(ids[r])}; ids are >= 0 (0 = no group)")
    if not math.isfinite(float(rewards.sum(dtype=np.float64))):
        r = int(np.flatnonzero(~np.isfinite(rewards))[0])
        raise ProtocolError(f"{where}: group_rewards of agent {int(agent_ids[r])} is NaN or Inf")
    ids = ids.astype(np.int64, copy=False)
    grouped = np.flatnonzero(ids > 0)
    if len(grouped) > max_agents:
        values, counts = np.unique(ids[grouped], return_counts=True)
        over = counts > max_agents
        if over.any():
            group = int(values[over][0])
            r = int(np.flatnonzero(ids == group)[max_agents])
            raise ProtocolError(
                f"{where}: agent {int(agent_ids[r])} is agent {max_agents + 1} of group {group} in one BrainInfo;"
                f" at most {max_agents} agents per group for this behavior (its time_horizon and the message limit,"
                " docs/environments.md)"
            )
    return GroupInfo(ids, rewards)


def _vector(tensor: pb.Tensor, field: str, kinds: str, n: int, where: str) -> np.ndarray:
    try:
        arr = from_tensor(tensor, field)
    except ProtocolError as err:
        raise ProtocolError(f"{where}: {err}") from None
    if arr.shape != (n,) or arr.dtype.kind not in kinds:
        raise ProtocolError(f"{where}: {field} must be [{n}] of kind '{kinds}', got {arr.dtype.name} {list(arr.shape)}")
    return arr


class _StepStatus:
    """The statuses of one group's ``K`` members with an experience at one step: held once, shared by them."""

    __slots__ = ("continuous_actions", "discrete_actions", "done", "next_obs", "obs", "rewards")

    def __init__(
        self,
        obs: list[np.ndarray],
        continuous_actions: np.ndarray,
        discrete_actions: np.ndarray,
        rewards: np.ndarray,
        done: np.ndarray,
        next_obs: list[np.ndarray],
    ) -> None:
        self.obs = obs
        """One ``[K, *shape]`` per spec: what each member acted on."""
        self.continuous_actions = continuous_actions
        """float32 [K, C]."""
        self.discrete_actions = discrete_actions
        """int32 [K, B]."""
        self.rewards = rewards
        """float32 [K]: each member's own reward at the step."""
        self.done = done
        """bool [K]."""
        self.next_obs = next_obs
        """One ``[K, *shape]`` per spec: each member's current observation."""

    def seen_by(self, member: int) -> list[int]:
        """The members whose status member ``member`` sees (module docstring: terminal steps first)."""
        mine_done = bool(self.done[member])
        return [j for j in range(len(self.done)) if j != member and (mine_done or not self.done[j])]


_Entry = tuple["_StepStatus | None", int, float]
"""One experience's group side: (its group's statuses at the step, or None; its own row in them; group reward)."""


class _BehaviorGroups:
    """The group side of one session's agents of one behavior."""

    def __init__(self, params: BrainParameters, max_group_size: int) -> None:
        self.params = params
        self.max_group_size = max_group_size
        self._pending: dict[int, tuple[list[np.ndarray], np.ndarray, np.ndarray]] = {}
        """Agent id -> its previous row's obs (one per spec) and the continuous and discrete action returned for it."""
        self._entries: dict[int, list[_Entry]] = {}
        """Agent id -> the group side of each experience of its current segment."""

    def add(self, info: DecodedBrainInfo, groups: GroupInfo | None, actions: StepActions, cut: Sequence[Trajectory]) -> None:
        """Record one step (after ``TrajectoryAssembler.add`` took it) and fill ``cut``'s ``group``."""
        ids = info.agent_ids.tolist()
        n = len(ids)
        group_ids = groups.group_ids.tolist() if groups is not None else [0] * n
        group_rewards = groups.group_rewards.tolist() if groups is not None else [0.0] * n
        members: dict[int, list[int]] = {}
        for r, agent in enumerate(ids):
            if agent in self._pending and group_ids[r] > 0:
                members.setdefault(group_ids[r], []).append(r)
        statuses: dict[int, tuple[_StepStatus, int]] = {}
        for rows in members.values():
            status = self._status(rows, info)
            statuses.update({r: (status, k) for k, r in enumerate(rows)})
        for r, agent in enumerate(ids):
            if agent in self._pending:
                held = statuses.get(r)
                entry: _Entry = (None, 0, group_rewards[r]) if held is None else (*held, group_rewards[r])
                self._entries[agent].append(entry)
        for trajectory in cut:
            trajectory.group = self._take(trajectory)
        cont, disc = actions.continuous_actions, actions.discrete_actions
        for r, agent in enumerate(ids):
            if info.done[r]:
                self._pending.pop(agent, None)
                self._entries.pop(agent, None)
            else:
                self._pending[agent] = ([o[r].copy() for o in info.observations], cont[r].copy(), disc[r].copy())
                self._entries.setdefault(agent, [])

    def _status(self, rows: list[int], info: DecodedBrainInfo) -> _StepStatus:
        pending = [self._pending[int(info.agent_ids[r])] for r in rows]
        n_obs = len(self.params.observation_specs)
        return _StepStatus(
            obs=[np.stack([p[0][i] for p in pending]) for i in range(n_obs)],
            continuous_actions=np.stack([p[1] for p in pending]),
            discrete_actions=np.stack([p[2] for p in pending]),
            rewards=info.rewards[rows],
            done=info.done[rows],
            next_obs=[o[rows] for o in info.observations],
        )

    def flushed(self, trajectories: Sequence[Trajectory]) -> None:
        """Fill the ``group`` of trajectories the session-end flush cut; their agents are forgotten."""
        for trajectory in trajectories:
            trajectory.group = self._take(trajectory)
            self._pending.pop(trajectory.id.agent_id, None)

    def _take(self, trajectory: Trajectory) -> GroupData:
        """The group side of ``trajectory``'s experiences; its agent's segment starts again empty."""
        entries = self._entries.pop(trajectory.id.agent_id, [])
        t = trajectory.length
        assert len(entries) <= t, f"{len(entries)} group entries for a trajectory of {t} experiences"
        entries = [(None, 0, 0.0)] * (t - len(entries)) + entries  # experiences from before the first group_ids
        seen = [status.seen_by(k) if status is not None else [] for status, k, _ in entries]
        g = max((len(s) for s in seen), default=0)
        spec = self.params.action_spec
        specs = self.params.observation_specs
        data = GroupData(
            group_rewards=np.array([reward for _, _, reward in entries], dtype=np.float32),
            groupmate_obs=[np.zeros((t, g, *s.shape), s.dtype) for s in specs],
            groupmate_continuous_actions=np.zeros((t, g, spec.continuous_size), np.float32),
            groupmate_discrete_actions=np.zeros((t, g, spec.num_branches), np.int32),
            groupmate_rewards=np.zeros((t, g), np.float32),
            groupmate_status=np.zeros((t, g), np.uint8),
            next_groupmate_obs=[np.zeros((0, *s.shape), s.dtype) for s in specs],
        )
        for step, ((status, _, _), mates) in enumerate(zip(entries, seen, strict=True)):
            if status is not None and mates:
                _fill(data, step, status, mates)
        last = entries[-1][0] if t else None
        if last is not None:
            data.next_groupmate_obs = [obs[seen[-1]] for obs in last.next_obs]
        return data


def _fill(data: GroupData, step: int, status: _StepStatus, mates: list[int]) -> None:
    """Write the statuses of members ``mates`` into the first ``len(mates)`` slots of ``data``'s row ``step``."""
    m = len(mates)
    for i, obs in enumerate(status.obs):
        data.groupmate_obs[i][step, :m] = obs[mates]
    data.groupmate_continuous_actions[step, :m] = status.continuous_actions[mates]
    data.groupmate_discrete_actions[step, :m] = status.discrete_actions[mates]
    data.groupmate_rewards[step, :m] = status.rewards[mates]
    data.groupmate_status[step, :m] = np.where(status.done[mates], DONE, ACTING)


class SessionGroups:
    """The group side of one session, over its behaviors (module docstring)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._behaviors: dict[str, _BehaviorGroups] = {}
        self._owner: dict[int, str] = {}
        """Group id -> the behavior its members have."""

    def decode(
        self, msg: pb.BrainInfo, info: DecodedBrainInfo, params: BrainParameters, time_horizon: int, max_bytes: int
    ) -> GroupInfo | None:
        """Check the BrainInfo's group fields (``decode_groups``) and that each group keeps to one behavior.

        Raises:
            ProtocolError: names the agent; nothing is recorded.
        """
        behavior = self._behaviors.get(params.behavior_name)
        if behavior is None:
            bound = TrajectorySize.of(params).at_most(time_horizon)
            behavior = _BehaviorGroups(params, max_group_size(params, bound, time_horizon, max_bytes))
        where = f"behavior '{params.behavior_name}' (session {self.session_id})"
        groups = decode_groups(msg, info.agent_ids, where, behavior.max_group_size)
        if groups is None:
            return None
        for r in np.flatnonzero(groups.group_ids > 0).tolist():
            owner = self._owner.get(int(groups.group_ids[r]), params.behavior_name)
            if owner != params.behavior_name:
                raise ProtocolError(
                    f"{where}: agent {int(info.agent_ids[r])} is in group {int(groups.group_ids[r])}, whose members have"
                    f" behavior '{owner}' in this session; a group's members share one behavior"
                )
        self._behaviors.setdefault(params.behavior_name, behavior)
        for g in np.unique(groups.group_ids[groups.group_ids > 0]).tolist():
            self._owner.setdefault(int(g), params.behavior_name)
        return groups

    def active(self, behavior_name: str) -> bool:
        """The session sent ``group_ids`` for the behavior at least once."""
        return behavior_name in self._behaviors

    def add(
        self,
        behavior_name: str,
        info: DecodedBrainInfo,
        groups: GroupInfo | None,
        actions: StepActions,
        cut: Sequence[Trajectory],
    ) -> None:
        """Record a step the behavior's ``TrajectoryAssembler`` took; fills the ``group`` of ``cut``."""
        self._behaviors[behavior_name].add(info, groups, actions, cut)

    def flushed(self, behavior_name: str, trajectories: Sequence[Trajectory]) -> None:
        """Fill the ``group`` of the session-end flush's trajectories of the behavior."""
        behavior = self._behaviors.get(behavior_name)
        if behavior is not None:
            behavior.flushed(trajectories)
