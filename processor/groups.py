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

Storage (``_RowLog``): every row of the behavior's BrainInfos since the first ``group_ids`` is held once, in
growing arrays addressed by a global row number: its obs, the action returned for it, reward, done, group,
group reward, the agent's previous row, and the rows of the groupmates its experience sees (computed per
BrainInfo, vectorised, ``_mates``). An experience is a row with a previous row; a groupmate's status is its row
(reward, done) and its previous row (what it acted on). A cut walks the agent's rows back ``T`` steps and
gathers the ``[T, G, ...]`` arrays in a few numpy calls. When the log fills, the rows no live segment can read
(further back than ``time_horizon`` rows of any live agent, and the rows its groupmates acted on) are dropped,
and the arrays double: a row costs about ``O + 4 C + 4 B + 8 W + 30`` bytes (``O``: one agent's observation
bytes, ``W``: the widest group less one), shared by every groupmate that reads it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
    if ids.dtype.kind == "u" and len(ids) and int(ids.max()) > np.iinfo(np.int64).max:
        r = int(np.argmax(ids))
        raise ProtocolError(f"{where}: group_ids of agent {int(agent_ids[r])} is {int(ids[r])}, over 2^63 - 1")
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


class _RowLog:
    """Every row of one session's behavior since its first ``group_ids``, held once, addressed by a global row
    number ``g`` (index ``g - offset``; the oldest rows no segment needs are dropped as it fills).

    Per row: its obs (the next obs of its experience), the action returned for it, its reward, done, group id and
    group reward, ``prev`` (the agent's previous row, -1 at a first sighting: that row and its action are what the
    experience at this row acted on), and ``mates`` (the rows of the groupmates its experience sees, -1 padded).
    """

    def __init__(self, params: BrainParameters) -> None:
        spec = params.action_spec
        self.planes: dict[str, np.ndarray] = {
            **{f"obs_{i}": np.zeros((0, *o.shape), o.dtype) for i, o in enumerate(params.observation_specs)},
            "cont": np.zeros((0, spec.continuous_size), np.float32),
            "disc": np.zeros((0, spec.num_branches), np.int32),
            "reward": np.zeros(0, np.float32),
            "done": np.zeros(0, bool),
            "group": np.zeros(0, np.int64),
            "group_reward": np.zeros(0, np.float32),
            "prev": np.zeros(0, np.int64),
            "mates": np.zeros((0, 0), np.int64),
        }
        self.n_obs = len(params.observation_specs)
        self.prev_list: list[int] = []
        """``prev`` of each row as a Python list: walking a chain reads it faster than the array."""
        self.offset = 0
        """The global number of index 0."""
        self.size = 0

    @property
    def end(self) -> int:
        """The global number the next row gets."""
        return self.offset + self.size

    def append(self, columns: dict[str, np.ndarray], keep_from: Callable[[], int]) -> None:
        """Append ``n`` rows (one array per plane, ``mates`` of any width); ``keep_from()`` gives the oldest global
        row still needed, asked when the log is full."""
        n = len(columns["prev"])
        capacity = len(self.planes["prev"])
        width = max(self.planes["mates"].shape[1], columns["mates"].shape[1])
        if self.size + n > capacity or width > self.planes["mates"].shape[1]:
            self._regrow(n, width, keep_from() if self.size + n > capacity else self.offset)
        at = slice(self.size, self.size + n)
        for key, value in columns.items():
            if key == "mates":
                self.planes[key][at] = -1
                self.planes[key][at, : value.shape[1]] = value
            else:
                self.planes[key][at] = value
        self.prev_list.extend(columns["prev"].tolist())
        self.size += n

    def _regrow(self, n: int, width: int, keep_from: int) -> None:
        """Drop the rows before ``keep_from``; room for ``n`` more (doubling); ``mates`` at least ``width`` wide."""
        drop = max(0, min(keep_from, self.end) - self.offset)
        kept = self.size - drop
        capacity = max(2 * (kept + n), 256)
        for key, plane in self.planes.items():
            shape = (capacity, max(width, plane.shape[1])) if key == "mates" else (capacity, *plane.shape[1:])
            grown = np.full(shape, -1, plane.dtype) if key == "mates" else np.zeros(shape, plane.dtype)
            if key == "mates":
                grown[:kept, : plane.shape[1]] = plane[drop : self.size]
            else:
                grown[:kept] = plane[drop : self.size]
            self.planes[key] = grown
        del self.prev_list[:drop]
        self.offset += drop
        self.size = kept

    def take(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Plane ``key`` at global rows ``rows`` (any shape)."""
        return self.planes[key][rows - self.offset]


def _mates(group: np.ndarray, done: np.ndarray, seeing: np.ndarray) -> np.ndarray:
    """For each row of one BrainInfo, the rows of the groupmates its experience sees: int64 ``[N, W]``, -1 padded.

    Args:
        group: int64 [N], 0 = no group.
        done: bool [N].
        seeing: bool [N], the rows with an experience in a group (the only ones that see or are seen).
    """
    n = len(group)
    rows = np.flatnonzero(seeing)
    if not len(rows):
        return np.full((n, 0), -1, np.int64)
    order = rows[np.argsort(group[rows], kind="stable")]
    sorted_groups = group[order]
    first = np.empty(len(order), bool)
    first[0] = True
    np.not_equal(sorted_groups[1:], sorted_groups[:-1], out=first[1:])
    which = np.cumsum(first) - 1  # per row of ``order``: its group's number
    starts = np.flatnonzero(first)
    position = np.arange(len(order)) - starts[which]
    width = int(position.max()) + 1
    members = np.full((len(starts), width), -1, np.int64)  # members[k, j]: the j-th row of the k-th group
    members[which, position] = order
    candidates = members[which]  # [len(order), width]
    valid = (candidates >= 0) & (candidates != order[:, np.newaxis])
    # Terminal steps first: a row that goes on does not see the groupmates whose episode ended at this step.
    valid &= done[order][:, np.newaxis] | ~done[candidates]  # candidates of -1 read the last row: masked already
    # The valid ones first, in row order: each to the slot its rank among the row's valid ones gives.
    at_row, at_column = valid.nonzero()
    slot = np.cumsum(valid, axis=1)[at_row, at_column] - 1
    out = np.full((n, width - 1), -1, np.int64)
    out[order[at_row], slot] = candidates[at_row, at_column]
    return out


class _BehaviorGroups:
    """The group side of one session's agents of one behavior, vectorised over each BrainInfo's rows."""

    def __init__(self, params: BrainParameters, max_group_size: int, time_horizon: int) -> None:
        self.params = params
        self.max_group_size = max_group_size
        self.time_horizon = time_horizon
        self.log = _RowLog(params)
        self._last: dict[int, int] = {}
        """Agent id -> its last row (global number), for every agent whose episode goes on."""

    def add(self, info: DecodedBrainInfo, groups: GroupInfo | None, actions: StepActions, cut: Sequence[Trajectory]) -> None:
        """Record one step (after ``TrajectoryAssembler.add`` took it) and fill ``cut``'s ``group``."""
        ids = info.agent_ids.tolist()
        n = len(ids)
        base = self.log.end
        prev = np.fromiter(map(self._last.get, ids, [-1] * n), np.int64, n)
        group = groups.group_ids if groups is not None else np.zeros(n, np.int64)
        seeing = (prev >= 0) & (group > 0)
        mates = _mates(group, info.done, seeing)
        columns = {f"obs_{i}": o for i, o in enumerate(info.observations)}
        columns |= {
            "cont": actions.continuous_actions,
            "disc": actions.discrete_actions,
            "reward": info.rewards,
            "done": info.done,
            "group": group,
            "group_reward": groups.group_rewards if groups is not None else np.zeros(n, np.float32),
            "prev": prev,
            "mates": np.where(mates >= 0, mates + base, -1),
        }
        self.log.append(columns, self._keep_from)
        rows = base + np.arange(n)
        for r in info.done.nonzero()[0].tolist():
            self._last.pop(ids[r], None)
        live = ~info.done
        self._last.update(zip(info.agent_ids[live].tolist(), rows[live].tolist(), strict=True))
        if cut:
            row_of = dict(zip(ids, rows.tolist(), strict=True))
            self._take(cut, [row_of[t.id.agent_id] for t in cut])

    def _keep_from(self) -> int:
        """The oldest row a live segment may still read: walk each live agent back ``time_horizon`` rows, and take
        the previous rows of the groupmates those rows saw."""
        if not self._last:
            return self.log.end
        pointer = np.fromiter(self._last.values(), np.int64, len(self._last))
        oldest = int(pointer.min())
        for _ in range(self.time_horizon + 1):
            pointer = pointer[pointer >= self.log.offset]
            if not len(pointer):
                break
            oldest = min(oldest, int(pointer.min()))
            mates = self.log.take("mates", pointer)
            seen = mates[mates >= 0]
            if len(seen):
                mate_prev = self.log.take("prev", seen)
                mate_prev = mate_prev[mate_prev >= 0]
                if len(mate_prev):
                    oldest = min(oldest, int(mate_prev.min()))
            pointer = self.log.take("prev", pointer)
        return oldest

    def flushed(self, trajectories: Sequence[Trajectory]) -> None:
        """Fill the ``group`` of trajectories the session-end flush cut; their agents are forgotten."""
        self._take(trajectories, [self._last.pop(t.id.agent_id) for t in trajectories])

    def _chain(self, last: int, t: int) -> np.ndarray:
        """The rows of an agent's last ``t`` experiences ending at row ``last``, oldest first; fewer when its rows
        before the behavior's first ``group_ids`` are not in the log."""
        chain: list[int] = []
        row = last
        prev = self.log.prev_list
        offset = self.log.offset
        while len(chain) < t and row >= offset:
            before = prev[row - offset]
            if before < 0:
                break
            chain.append(row)
            row = before
        return np.array(chain[::-1], np.int64)

    def _take(self, trajectories: Sequence[Trajectory], lasts: Sequence[int]) -> None:
        """Fill the ``group`` of ``trajectories`` (the last experience of each at its row in ``lasts``): one gather
        per plane for all of them, then each one's ``[T, G, ...]`` arrays."""
        if not trajectories:
            return
        log, specs, spec = self.log, self.params.observation_specs, self.params.action_spec
        chains = [self._chain(last, t.length) for t, last in zip(trajectories, lasts, strict=True)]
        rows = np.concatenate(chains)
        mates = log.take("mates", rows)
        present = mates >= 0
        counts = present.sum(axis=1)
        seen = mates[present]  # every groupmate row, trajectory by trajectory, step by step
        acted_on = log.take("prev", seen)
        planes = [(log.take(f"obs_{i}", acted_on), s.shape, s.dtype) for i, s in enumerate(specs)]
        planes.append((log.take("cont", acted_on), (spec.continuous_size,), np.dtype(np.float32)))
        planes.append((log.take("disc", acted_on), (spec.num_branches,), np.dtype(np.int32)))
        planes.append((log.take("reward", seen), (), np.dtype(np.float32)))
        planes.append((np.where(log.take("done", seen), DONE, ACTING).astype(np.uint8), (), np.dtype(np.uint8)))
        group_rewards = log.take("group_reward", rows)
        r0 = s0 = 0
        for trajectory, chain in zip(trajectories, chains, strict=True):
            n, t = len(chain), trajectory.length
            pad = t - n  # experiences from before the first group_ids: no groupmates
            g = int(counts[r0 : r0 + n].max()) if n else 0
            k = int(counts[r0 : r0 + n].sum())
            where = np.zeros((t, g), bool)
            where[pad:] = present[r0 : r0 + n, :g]
            arrays = []
            for values, shape, dtype in planes:
                out = np.zeros((t, g, *shape), dtype)
                out[where] = values[s0 : s0 + k]
                arrays.append(out)
            last_mates = mates[r0 + n - 1][present[r0 + n - 1]] if n else np.zeros(0, np.int64)
            *obs, continuous, discrete, rewards, status = arrays
            trajectory.group = GroupData(
                group_rewards=np.concatenate([np.zeros(pad, np.float32), group_rewards[r0 : r0 + n]]),
                groupmate_obs=obs,
                groupmate_continuous_actions=continuous,
                groupmate_discrete_actions=discrete,
                groupmate_rewards=rewards,
                groupmate_status=status,
                next_groupmate_obs=[log.take(f"obs_{i}", last_mates) for i in range(len(specs))],
            )
            r0, s0 = r0 + n, s0 + k


def _new_behavior(params: BrainParameters, time_horizon: int, max_bytes: int) -> _BehaviorGroups:
    bound = TrajectorySize.of(params).at_most(time_horizon)
    return _BehaviorGroups(params, max_group_size(params, bound, time_horizon, max_bytes), time_horizon)


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
        behavior = self._behaviors.get(params.behavior_name) or _new_behavior(params, time_horizon, max_bytes)
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

    def start(self, params: BrainParameters, time_horizon: int, max_bytes: int) -> None:
        """Start the behavior's group side now (``decode`` does at the first BrainInfo with ``group_ids``)."""
        self._behaviors.setdefault(params.behavior_name, _new_behavior(params, time_horizon, max_bytes))

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
