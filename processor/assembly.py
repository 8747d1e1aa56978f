"""Trajectory assembly: BrainInfo rows in, Trajectories out, by ARCHITECTURE.md's rules.

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
cut. Shapes: ``N`` rows in a BrainInfo, ``K`` slots, ``H`` = time_horizon, ``C``/``B``/``M`` as
in ``common.trajectory``.
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


class TrajectoryAssembler:
    """Assembles the trajectories of one session's agents of one behavior."""

    # Slot arrays, first axis K (see _allocate for the rest of each shape).
    has_last: np.ndarray
    last_mask: np.ndarray
    last_cont: np.ndarray
    last_disc: np.ndarray
    last_clp: np.ndarray
    last_dlp: np.ndarray
    last_version: np.ndarray
    prev_cont: np.ndarray
    prev_disc: np.ndarray
    t_mask: np.ndarray
    t_cont: np.ndarray
    t_disc: np.ndarray
    t_clp: np.ndarray
    t_dlp: np.ndarray
    t_pcont: np.ndarray
    t_pdisc: np.ndarray
    t_rew: np.ndarray
    t_done: np.ndarray
    t_ver: np.ndarray
    length: np.ndarray
    ep_reward: np.ndarray
    ep_length: np.ndarray

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
        self.last_obs: list[np.ndarray] = []
        self.t_obs: list[np.ndarray] = []
        self._allocate(_MIN_SLOTS)

    # -- storage ---------------------------------------------------------------------------------

    def _allocate(self, capacity: int) -> None:
        """(Re)allocate every slot array for ``capacity`` slots, keeping the existing slots."""
        spec = self.params.action_spec
        c, b, m, h = spec.continuous_size, spec.num_branches, spec.mask_width, self.time_horizon
        obs_shapes = [s.shape for s in self.params.observation_specs]
        layout: dict[str, tuple[tuple[int, ...], type]] = {
            # Pending state: the agent's previous row and what the processor returned for it.
            "has_last": ((), np.bool_),
            "last_mask": ((m,), np.bool_),
            "last_cont": ((c,), np.float32),
            "last_disc": ((b,), np.int32),
            "last_clp": ((c,), np.float32),
            "last_dlp": ((b,), np.float32),
            "last_version": ((), np.int64),
            "prev_cont": ((c,), np.float32),
            "prev_disc": ((b,), np.int32),
            # The trajectory being built: H steps per slot.
            "t_mask": ((h, m), np.bool_),
            "t_cont": ((h, c), np.float32),
            "t_disc": ((h, b), np.int32),
            "t_clp": ((h, c), np.float32),
            "t_dlp": ((h, b), np.float32),
            "t_pcont": ((h, c), np.float32),
            "t_pdisc": ((h, b), np.int32),
            "t_rew": ((h,), np.float32),
            "t_done": ((h,), np.bool_),
            "t_ver": ((h,), np.int64),
            "length": ((), np.int64),
            "ep_reward": ((), np.float64),
            "ep_length": ((), np.int64),
        }
        old = self._capacity

        def grow(current: np.ndarray | None, shape: tuple[int, ...], dtype: type) -> np.ndarray:
            grown: np.ndarray = np.zeros((capacity, *shape), dtype=dtype)
            if current is not None:
                grown[:old] = current
            return grown

        for name, (shape, dtype) in layout.items():
            setattr(self, name, grow(getattr(self, name) if old else None, shape, dtype))
        self.last_obs = [grow(self.last_obs[i] if old else None, shape, np.float32) for i, shape in enumerate(obs_shapes)]
        self.t_obs = [grow(self.t_obs[i] if old else None, (h, *shape), np.float32) for i, shape in enumerate(obs_shapes)]
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
        self.has_last[slot] = False
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
        slots = np.fromiter((self._slot(a) for a in ids.tolist()), dtype=np.intp, count=len(ids))
        rows = np.flatnonzero(self.has_last[slots])
        cut: list[Trajectory] = []
        if len(rows):
            s = slots[rows]
            self._append_experiences(s, rows, info)
            ends = rows[info.done[rows] | (self.length[s] >= self.time_horizon)]
            cut = [self._cut(int(slots[r]), int(ids[r]), info, int(r)) for r in ends]
        self._remember(slots, info, actions)
        for r in np.flatnonzero(info.done):
            self._release(int(slots[r]), int(ids[r]))
        return cut

    def _append_experiences(self, s: np.ndarray, rows: np.ndarray, info: DecodedBrainInfo) -> None:
        """Write one experience for each slot ``s`` (rows ``rows`` of ``info``) at its next step."""
        pos = self.length[s]
        for t_obs, last_obs in zip(self.t_obs, self.last_obs, strict=True):
            t_obs[s, pos] = last_obs[s]
        self.t_mask[s, pos] = self.last_mask[s]
        self.t_cont[s, pos] = self.last_cont[s]
        self.t_disc[s, pos] = self.last_disc[s]
        self.t_clp[s, pos] = self.last_clp[s]
        self.t_dlp[s, pos] = self.last_dlp[s]
        self.t_pcont[s, pos] = self.prev_cont[s]
        self.t_pdisc[s, pos] = self.prev_disc[s]
        self.t_ver[s, pos] = self.last_version[s]
        rewards = info.rewards[rows]
        self.t_rew[s, pos] = rewards
        self.t_done[s, pos] = info.done[rows]
        self.length[s] += 1
        self.ep_reward[s] += rewards
        self.ep_length[s] += 1
        self.counters.experiences += len(s)

    def _remember(self, slots: np.ndarray, info: DecodedBrainInfo, actions: StepActions) -> None:
        """Record the rows of agents that go on (not done) as their pending previous row."""
        live = np.flatnonzero(~info.done)
        if not len(live):
            return
        s = slots[live]
        carried = self.has_last[s][:, np.newaxis]
        # prev_action of the next experience is the action of this one: zeros at episode start.
        self.prev_cont[s] = np.where(carried, self.last_cont[s], 0.0)
        self.prev_disc[s] = np.where(carried, self.last_disc[s], 0)
        for last_obs, obs in zip(self.last_obs, info.observations, strict=True):
            last_obs[s] = obs[live]
        self.last_mask[s] = True if info.action_mask is None else info.action_mask[live]
        self.last_cont[s] = actions.continuous_actions[live]
        self.last_disc[s] = actions.discrete_actions[live]
        self.last_clp[s] = actions.continuous_log_probs[live]
        self.last_dlp[s] = actions.discrete_log_probs[live]
        self.last_version[s] = actions.policy_version
        self.has_last[s] = True

    def _cut(self, slot: int, agent_id: int, info: DecodedBrainInfo | None, row: int) -> Trajectory:
        """Copy slot ``slot``'s steps into a Trajectory and start a new one in the slot.

        ``info`` None means a flush: next_obs is the last obs seen and the segment is interrupted.
        """
        t = int(self.length[slot])
        if info is None:
            next_obs = [last_obs[slot].copy() for last_obs in self.last_obs]
            done_reached, interrupted = False, True
        else:
            next_obs = [o[row].copy() for o in info.observations]
            done_reached = bool(info.done[row])
            interrupted = done_reached and bool(info.max_reached[row])
        trajectory = Trajectory(
            id=TrajectoryId(self.session_id, agent_id, self._sequence),
            behavior_name=self.params.behavior_name,
            obs=[t_obs[slot, :t].copy() for t_obs in self.t_obs],
            next_obs=next_obs,
            continuous_actions=self.t_cont[slot, :t].copy(),
            discrete_actions=self.t_disc[slot, :t].copy(),
            continuous_log_probs=self.t_clp[slot, :t].copy(),
            discrete_log_probs=self.t_dlp[slot, :t].copy(),
            prev_continuous_actions=self.t_pcont[slot, :t].copy(),
            prev_discrete_actions=self.t_pdisc[slot, :t].copy(),
            action_mask=self.t_mask[slot, :t].copy() if self.params.action_spec.num_branches else None,
            rewards=self.t_rew[slot, :t].copy(),
            done=self.t_done[slot, :t].copy(),
            policy_versions=self.t_ver[slot, :t].copy(),
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
