"""Trajectory assembly: BrainInfo rows in, Trajectories out, by docs/architecture.md's rules.

One ``TrajectoryAssembler`` serves one (session, behavior). Rules, as ML-Agents established them:

* An agent's identity is (session, behavior, agent id); this object is per session and behavior.
* The first sighting of an agent produces no experience; it only records the obs (and the action
  the processor returned for it).
* An experience pairs the agent's *previous* row (obs, action mask, and the action, log-probs and
  policy version returned for it) with the *current* row's reward, done and max_reached.
  ``prev_action`` is the action before that one, zeros at an episode's first experience.
* A trajectory is cut when the agent is done or when it reaches ``time_horizon`` experiences;
  ``next_obs`` is the current obs (the terminal obs on done).
* max_reached comes only with done: cut and cleared like any done, but marked ``interrupted``.
* After done the agent's state is cleared and the action returned for the done row is discarded;
  the same id in a later BrainInfo is a first sighting.
* An agent absent from a BrainInfo keeps its state.
* ``flush()`` (session end) publishes every partial trajectory as interrupted, with ``next_obs``
  the last obs seen; the pending last row, which has no reward yet, is not an experience.

Why slots instead of one ProcessingBuffer entry per agent: per-agent Python work on every step
would cap throughput at a few hundred thousand agent-steps/s. Each agent instead owns a slot (a
row) in preallocated ``[K, time_horizon, ...]`` arrays, and every step is a handful of vectorised
scatters over all agents of the BrainInfo; Python only loops over the agents whose trajectory is
cut. With few rows per BrainInfo numpy's per-call overhead dominates, so the slot state is packed
into one float32 and one int64 matrix (columns named in ``_Layout``): an experience is two row
copies, remembering a row two row writes. Shapes: ``N`` rows in a BrainInfo, ``K`` slots,
``H`` = time_horizon, ``C``/``B``/``M`` as in ``common.trajectory``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from common.specs import BrainParameters
from common.trajectory import Trajectory, TrajectoryId
from processor.wire import DecodedBrainInfo

_MIN_SLOTS = 8


class StepActions(NamedTuple):
    """What the processor returned for one BrainInfo, as the trajectory stores it."""

    continuous_actions: np.ndarray
    """float32 [N, C]: the value whose log-prob is given (see processor.inference)."""
    discrete_actions: np.ndarray
    """int32 [N, B]."""
    continuous_log_probs: np.ndarray
    """float32 [N, C]."""
    discrete_log_probs: np.ndarray
    """float32 [N, B]."""
    policy_version: int


class AssemblyCounters:
    """Running totals of one assembler, in agent experiences unless named otherwise."""

    __slots__ = ("experiences", "flushed_experiences", "flushed_trajectories", "trajectories")

    def __init__(self) -> None:
        self.experiences = 0
        self.trajectories = 0
        self.flushed_experiences = 0
        self.flushed_trajectories = 0


class _Layout:
    """Column slices of the packed slot matrices, the one place that names them.

    float32 columns, ``[K, F]`` for the pending row and ``[K, H, F]`` for the trajectory:
        obs[i]  the flattened observation i (``obs`` is one slice per observation spec)
        cont    continuous action returned for the row      [C]
        clp     its log-probs                               [C]
        dlp     the discrete log-probs                      [B]
        pcont   prev continuous action (zeros at episode start) [C]
        rew     trajectory: the step's reward; pending: unused  [1]
    int64 columns, ``[K, I]`` pending and ``[K, H, I]`` trajectory (cast back on cut):
        disc    discrete action returned for the row        [B]
        pdisc   prev discrete action                        [B]
        mask    action mask (1 = allowed)                   [M]
        ver     policy version of the returned action       [1]
        flag    pending: has_last (a row is pending); trajectory: done   [1]
    The pending row's columns are the trajectory step's columns, so an experience is a row copy
    plus the current row's reward and done.
    """

    def __init__(self, params: BrainParameters) -> None:
        spec = params.action_spec
        c, b, m = spec.continuous_size, spec.num_branches, spec.mask_width
        self.obs_shapes = [tuple(s.shape) for s in params.observation_specs]
        self.obs: list[slice] = []
        at = 0
        for shape in self.obs_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            self.obs.append(slice(at, at + size))
            at += size
        self.cont, at = slice(at, at + c), at + c
        self.clp, at = slice(at, at + c), at + c
        self.dlp, at = slice(at, at + b), at + b
        self.pcont, at = slice(at, at + c), at + c
        self.rew, at = at, at + 1
        self.float_width = at
        self.disc, at = slice(0, b), b
        self.pdisc, at = slice(at, at + b), at + b
        self.mask, at = slice(at, at + m), at + m
        self.ver, at = at, at + 1
        self.flag, at = at, at + 1
        self.int_width = at


class TrajectoryAssembler:
    """Assembles the trajectories of one session's agents of one behavior."""

    # Slot arrays, first axis K (see _Layout for the columns).
    pend_f: np.ndarray
    """float32 [K, F]: the agent's previous row and what the processor returned for it."""
    pend_i: np.ndarray
    """int64 [K, I]: likewise; column ``flag`` is has_last."""
    traj_f: np.ndarray
    """float32 [K, H, F]: the trajectory being built."""
    traj_i: np.ndarray
    """int64 [K, H, I]: likewise; column ``flag`` is done."""
    length: np.ndarray
    """int64 [K]: steps in the trajectory being built."""
    ep_length: np.ndarray
    """int64 [K]: experiences in the episode so far."""
    ep_reward: np.ndarray
    """float64 [K]: reward of the episode so far."""

    def __init__(self, params: BrainParameters, session_id: str, time_horizon: int) -> None:
        if time_horizon < 1:
            raise ValueError(f"time_horizon must be >= 1, got {time_horizon}")
        self.params = params
        self.session_id = session_id
        self.time_horizon = time_horizon
        self.counters = AssemblyCounters()
        self._sequence = 0
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []
        self._capacity = 0
        self._cols = _Layout(params)
        self._allocate(_MIN_SLOTS)

    # -- storage ---------------------------------------------------------------------------------

    def _allocate(self, capacity: int) -> None:
        """(Re)allocate every slot array for ``capacity`` slots, keeping the existing slots."""
        cols, h = self._cols, self.time_horizon
        layout: dict[str, tuple[tuple[int, ...], type]] = {
            "pend_f": ((cols.float_width,), np.float32),
            "pend_i": ((cols.int_width,), np.int64),
            "traj_f": ((h, cols.float_width), np.float32),
            "traj_i": ((h, cols.int_width), np.int64),
            "length": ((), np.int64),
            "ep_length": ((), np.int64),
            "ep_reward": ((), np.float64),
        }
        old = self._capacity
        for name, (shape, dtype) in layout.items():
            grown: np.ndarray = np.zeros((capacity, *shape), dtype=dtype)
            if old:
                grown[:old] = getattr(self, name)
            setattr(self, name, grown)
        self._free.extend(range(capacity - 1, old - 1, -1))
        self._capacity = capacity

    def _slot(self, agent_id: int) -> int:
        slot = self._slot_of.get(agent_id)
        if slot is None:
            if not self._free:
                self._allocate(2 * self._capacity)
            slot = self._slot_of[agent_id] = self._free.pop()
        return slot

    def _release(self, slot: int, agent_id: int) -> None:
        # A free slot's pending row is all zeros: has_last False, and the action that becomes the
        # next occupant's first prev_action is zeros.
        self.pend_f[slot] = 0.0
        self.pend_i[slot] = 0
        self.length[slot] = 0
        self.ep_reward[slot] = 0.0
        self.ep_length[slot] = 0
        del self._slot_of[agent_id]
        self._free.append(slot)

    @property
    def live_agents(self) -> int:
        """Agents with state held (seen since their last done)."""
        return len(self._slot_of)

    # -- the rules -------------------------------------------------------------------------------

    def add(self, info: DecodedBrainInfo, actions: StepActions) -> list[Trajectory]:
        """Take one step's rows and the actions returned for them; return the trajectories cut."""
        ids = info.agent_ids
        id_list = ids.tolist()
        get = self._slot_of.get
        slot_list: list[int] = [get(a, -1) for a in id_list]
        if -1 in slot_list:
            slot_list = [self._slot(a) for a in id_list]
        slots = np.array(slot_list, dtype=np.intp)
        has_last = self.pend_i[slots, self._cols.flag]
        cut: list[Trajectory] = []
        if has_last.all():
            # Every row continues an agent (the usual step): no row selection needed.
            lengths = self._append_experiences(slots, info.rewards, info.done)
            ends = np.flatnonzero(info.done | (lengths >= self.time_horizon))
        else:
            rows = np.flatnonzero(has_last)
            ends = rows[:0]
            if len(rows):
                done = info.done[rows]
                lengths = self._append_experiences(slots[rows], info.rewards[rows], done)
                ends = rows[done | (lengths >= self.time_horizon)]
        if len(ends):
            cut = [self._cut(slot_list[r], id_list[r], info, r) for r in ends.tolist()]
        self._remember(slots, info, actions)
        if info.done.any():
            for r in np.flatnonzero(info.done).tolist():
                self._release(slot_list[r], id_list[r])
        return cut

    def _append_experiences(self, s: np.ndarray, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Write one experience for each slot ``s`` (with these rows' rewards and done) at its next
        step; return the slots' new lengths."""
        cols = self._cols
        pos = self.length[s]
        row_f = self.pend_f[s]
        row_f[:, cols.rew] = rewards
        self.traj_f[s, pos] = row_f
        row_i = self.pend_i[s]
        row_i[:, cols.flag] = done
        self.traj_i[s, pos] = row_i
        lengths: np.ndarray = pos + 1
        self.length[s] = lengths
        self.ep_reward[s] += rewards
        self.ep_length[s] += 1
        self.counters.experiences += len(s)
        return lengths

    def _remember(self, slots: np.ndarray, info: DecodedBrainInfo, actions: StepActions) -> None:
        """Record the rows of agents that go on (not done) as their pending previous row."""
        cols = self._cols
        obs, mask = info.observations, info.action_mask
        cont, disc = actions.continuous_actions, actions.discrete_actions
        clp, dlp = actions.continuous_log_probs, actions.discrete_log_probs
        s = slots
        if info.done.any():
            live = np.flatnonzero(~info.done)
            if not len(live):
                return
            s = slots[live]
            obs = [o[live] for o in obs]
            mask = None if mask is None else mask[live]
            cont, disc, clp, dlp = cont[live], disc[live], clp[live], dlp[live]
        n = len(s)
        if not n:
            return
        row_f = np.empty((n, cols.float_width), dtype=np.float32)
        for sl, o in zip(cols.obs, obs, strict=True):
            row_f[:, sl] = o.reshape(n, -1)
        row_f[:, cols.cont] = cont
        row_f[:, cols.clp] = clp
        row_f[:, cols.dlp] = dlp
        # prev_action of the next experience is the action of this one: zeros at episode start
        # (a free slot's pending row is zeros, see _release).
        row_f[:, cols.pcont] = self.pend_f[s, cols.cont]
        row_f[:, cols.rew] = 0.0
        row_i = np.empty((n, cols.int_width), dtype=np.int64)
        row_i[:, cols.disc] = disc
        row_i[:, cols.pdisc] = self.pend_i[s, cols.disc]
        row_i[:, cols.mask] = 1 if mask is None else mask
        row_i[:, cols.ver] = actions.policy_version
        row_i[:, cols.flag] = 1
        self.pend_f[s] = row_f
        self.pend_i[s] = row_i

    def _cut(self, slot: int, agent_id: int, info: DecodedBrainInfo | None, row: int) -> Trajectory:
        """Copy slot ``slot``'s steps into a Trajectory and start a new one in the slot.

        ``info`` None means a flush: next_obs is the last obs seen and the segment is interrupted.
        """
        cols = self._cols
        t = int(self.length[slot])
        if info is None:
            pend = self.pend_f[slot]
            next_obs = [pend[sl].reshape(shape).copy() for sl, shape in zip(cols.obs, cols.obs_shapes, strict=True)]
            done_reached, interrupted = False, True
        else:
            next_obs = [o[row].copy() for o in info.observations]
            done_reached = bool(info.done[row])
            interrupted = done_reached and bool(info.max_reached[row])
        steps_f = self.traj_f[slot, :t]
        steps_i = self.traj_i[slot, :t]
        trajectory = Trajectory(
            id=TrajectoryId(self.session_id, agent_id, self._sequence),
            behavior_name=self.params.behavior_name,
            obs=[steps_f[:, sl].reshape(t, *shape).copy() for sl, shape in zip(cols.obs, cols.obs_shapes, strict=True)],
            next_obs=next_obs,
            continuous_actions=steps_f[:, cols.cont].copy(),
            discrete_actions=steps_i[:, cols.disc].astype(np.int32),
            continuous_log_probs=steps_f[:, cols.clp].copy(),
            discrete_log_probs=steps_f[:, cols.dlp].copy(),
            prev_continuous_actions=steps_f[:, cols.pcont].copy(),
            prev_discrete_actions=steps_i[:, cols.pdisc].astype(np.int32),
            action_mask=steps_i[:, cols.mask].astype(np.bool_) if self.params.action_spec.num_branches else None,
            rewards=steps_f[:, cols.rew].copy(),
            done=steps_i[:, cols.flag].astype(np.bool_),
            policy_versions=steps_i[:, cols.ver].copy(),
            done_reached=done_reached,
            interrupted=interrupted,
            episode_reward=float(self.ep_reward[slot]) if done_reached else None,
            episode_length=int(self.ep_length[slot]) if done_reached else None,
        )
        self._sequence += 1
        self.length[slot] = 0
        self.counters.trajectories += 1
        return trajectory

    def flush(self) -> list[Trajectory]:
        """End the session: every partial trajectory, as interrupted; then forget every agent."""
        flushed = []
        for agent_id, slot in list(self._slot_of.items()):
            if self.length[slot] > 0:
                trajectory = self._cut(slot, agent_id, None, -1)
                self.counters.flushed_experiences += trajectory.length
                self.counters.flushed_trajectories += 1
                flushed.append(trajectory)
            self._release(slot, agent_id)
        return flushed
