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

Recurrent state (a policy with ``memory_size`` R > 0, ``common.policy_contract``): each agent's state lives in
its slot (``RECURRENT_STATE``, the buffer's ``agent_state``), so it follows the agent's identity rules above:
``memories()`` gives zeros for an agent not held (a first sighting, or back after done), the state returned for a
row becomes the agent's next one unless the row is done, an absent agent keeps it, and it is freed with the slot
(done, flush, the session's end). Every experience records the state its action was chosen with (the ``MEMORY``
field of the pending row, like the action), so a trainer can start a sequence anywhere from the stored state. A
policy whose R differs from the one the states hold (a first recurrent policy, or a swap to another size) resets
them: the session's partial trajectories of the behavior are flushed as interrupted, as at a session end, and
every agent starts afresh with zeros; steps acted with one memory size never share a trajectory with another's.
A swap that keeps R keeps every state (the new version goes on from the old version's states, as ML-Agents' does).

The store is a ``processor.processing_buffer.ProcessingBuffer`` (ML-Agents' noun for it), vectorised: its fields
are the Trajectory's per-step arrays under their update-buffer keys (``common.trajectory``); each
agent's *pending* row is its previous row plus what the processor returned for it, laid out as a
step, so an experience is that row with the current row's reward, appended for all agents of a
BrainInfo in one scatter per storage plane (``ProcessingBuffer.append_pending``). The pending rows
taken out for it are then overwritten in place with the current rows, their action columns shifted
to prev_action first, and put back: one gather and two scatters per plane per step. The episode
totals move only at cuts (they hold the episode's earlier trajectories). Python only loops over new
agents and over the agents whose trajectory is cut; per-agent Python work on every step would cap
throughput at a few hundred thousand agent-steps/s. Every agent the store holds has a pending row
(one done at its first sighting is never stored), so an agent continues exactly when the store
already holds it.

Memory (the ProcessingBuffer's model; ``chunk_rows`` = 8): a live agent holding ``r`` steps takes
``W + 150 + ceil(r / 8) * (8 * W + 16)`` bytes, ``r`` <= ``time_horizon``, up to twice that at a
session's peak (doubling growth, reused, freed at session end). With ``O`` observation bytes (4
per float32 value, 1 per uint8 pixel: an 84x84x3 camera is 21,168), ``C`` continuous dimensions,
``B`` branches and ``M`` mask columns, one step is ``W = O + 4 * (3C + B + 1) + 8B + 8 + M``
bytes: obs, action, log-probs, previous action and reward (float32), the discrete choices and
previous choices (int32), the policy version (int64) and the mask (bool); ``done`` is not stored,
only a trajectory's last step can be done. A recurrent policy adds ``4 * R`` bytes to ``W`` (the state each
step acted with) and ``4 * R`` of held state per agent: with ML-Agents' default R = 128 and ``time_horizon``
64, at most ``512 * (64 + 2)`` = 33,792 bytes of memories per live agent, on top of the rest.
So storage grows with the steps an agent really holds
(an image agent seen once costs one pending frame, not ``time_horizon`` frames). A cut
Trajectory's per-step arrays are views of one fresh block per dtype holding exactly its steps
(rounded up to whole chunks), so a queued trajectory of ``T`` steps holds about ``T * W`` bytes
plus ``O`` for ``next_obs`` and ~1.5 KB of Python objects. An image's ``T`` frames and its
``next_obs`` are copied once more, into one ``[T + 1, H, W, C]`` block (``Trajectory.obs_frames``),
so that ``next_obs`` rows are views of it rather than a second copy of every frame.

Shapes: ``N`` rows in a BrainInfo, ``C``/``B``/``M`` as in ``common.trajectory``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from typing import Any, NamedTuple, cast

import numpy as np

from common.errors import ResourceLimitError
from common.specs import BrainParameters
from common.trajectory import (
    ACTION_MASK,
    CONTINUOUS_ACTIONS,
    CONTINUOUS_LOG_PROBS,
    DISCRETE_ACTIONS,
    DISCRETE_LOG_PROBS,
    MEMORY,
    POLICY_VERSION,
    PREV_CONTINUOUS_ACTIONS,
    PREV_DISCRETE_ACTIONS,
    REWARDS,
    Trajectory,
    TrajectoryId,
    frames_block,
    obs_key,
)
from processor.processing_buffer import ProcessingBuffer, ProcessingField
from processor.wire import DecodedBrainInfo

FLUSH_BATCH_AGENTS = 256
"""Agents per batch of ``flush_batches``: a few ms of work, so a caller can yield between batches."""
EPISODE_REWARD = "episode_reward"
EPISODE_LENGTH = "episode_length"
RECURRENT_STATE = "recurrent_state"
"""Agent state of a recurrent policy: float32 [R], the state the agent's next step acts with."""


_TRAJECTORY_KEYS = (
    CONTINUOUS_ACTIONS,
    DISCRETE_ACTIONS,
    CONTINUOUS_LOG_PROBS,
    DISCRETE_LOG_PROBS,
    PREV_CONTINUOUS_ACTIONS,
    PREV_DISCRETE_ACTIONS,
    ACTION_MASK,
    REWARDS,
    POLICY_VERSION,
    MEMORY,
)
"""The Trajectory's per-step arrays besides obs and done, as _cut builds them."""


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
    memories: np.ndarray | None = None
    """float32 [N, R]: the recurrent state each row acted with (``TrajectoryAssembler.memories`` or zeros); None
    for a policy without memory."""
    next_memories: np.ndarray | None = None
    """float32 [N, R]: the state the policy returned for each row, the agent's next one; None without memory."""


class AssemblyCounters:
    """Running totals of one assembler, in agent experiences unless named otherwise."""

    __slots__ = ("experiences", "flushed_experiences", "flushed_trajectories", "trajectories")

    def __init__(self) -> None:
        self.experiences = 0
        self.trajectories = 0
        self.flushed_experiences = 0
        self.flushed_trajectories = 0


class AgentBudget:
    """The live agents one session may hold, shared by the assemblers of its behaviors."""

    __slots__ = ("limit", "live")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the agent limit must be >= 1, got {limit}")
        self.limit = limit
        self.live = 0


def step_fields(params: BrainParameters, memory_size: int = 0) -> dict[str, ProcessingField]:
    """The ProcessingBuffer fields of one step of ``params``' trajectories (keys of ``common.trajectory``);
    ``memory_size`` R: the width of the ``MEMORY`` field (0: none, it takes no storage)."""
    spec = params.action_spec
    c, b = (spec.continuous_size,), (spec.num_branches,)
    fields = {obs_key(i): ProcessingField(tuple(s.shape), s.dtype) for i, s in enumerate(params.observation_specs)}
    fields |= {
        CONTINUOUS_ACTIONS: ProcessingField(c, np.float32),
        CONTINUOUS_LOG_PROBS: ProcessingField(c, np.float32),
        DISCRETE_LOG_PROBS: ProcessingField(b, np.float32),
        PREV_CONTINUOUS_ACTIONS: ProcessingField(c, np.float32),
        REWARDS: ProcessingField((), np.float32),
        DISCRETE_ACTIONS: ProcessingField(b, np.int32),
        PREV_DISCRETE_ACTIONS: ProcessingField(b, np.int32),
        POLICY_VERSION: ProcessingField((), np.int64),
        ACTION_MASK: ProcessingField((spec.mask_width,), np.bool_, padding_value=1.0),
        MEMORY: ProcessingField((memory_size,), np.float32),
    }
    return fields


class TrajectoryAssembler:
    """Assembles the trajectories of one session's agents of one behavior."""

    buffer: ProcessingBuffer
    """Every live agent's steps, pending row and episode totals."""

    def __init__(self, params: BrainParameters, session_id: str, time_horizon: int, budget: AgentBudget | None = None) -> None:
        if time_horizon < 1:
            raise ValueError(f"time_horizon must be >= 1, got {time_horizon}")
        self.params = params
        self.session_id = session_id
        self.time_horizon = time_horizon
        self.budget = budget
        self.counters = AssemblyCounters()
        self._sequence = 0
        self._build(0)

    def _build(self, memory_size: int) -> None:
        """A new, empty store for steps whose recurrent state is ``memory_size`` floats (0: none)."""
        self.memory_size = memory_size
        state: dict[str, tuple[tuple[int, ...], Any]] = {EPISODE_REWARD: ((), np.float64), EPISODE_LENGTH: ((), np.int64)}
        if memory_size:
            state[RECURRENT_STATE] = ((memory_size,), np.float32)
        self.buffer = ProcessingBuffer(step_fields(self.params, memory_size), agent_state=state)
        params = self.params
        cols = self.buffer.columns
        self._obs = [(cols[obs_key(i)], tuple(s.shape)) for i, s in enumerate(params.observation_specs)]
        self._images = frozenset(i for i, s in enumerate(params.observation_specs) if s.is_image)
        self._reward = cols[REWARDS]
        self._has_discrete = params.action_spec.num_branches > 0
        remembered = (CONTINUOUS_ACTIONS, CONTINUOUS_LOG_PROBS, DISCRETE_LOG_PROBS, DISCRETE_ACTIONS)
        self._remembered = [cols[key] for key in (*remembered, POLICY_VERSION, ACTION_MASK, MEMORY)]
        # (plane, prev-action columns, action columns): a field and its previous value share a dtype, so a plane.
        self._prev_actions = [
            (cols[prev][0], cols[prev][1], cols[key][1])
            for prev, key in ((PREV_CONTINUOUS_ACTIONS, CONTINUOUS_ACTIONS), (PREV_DISCRETE_ACTIONS, DISCRETE_ACTIONS))
            if cols[prev][0] >= 0
        ]
        # What _cut copies out of a step's packed rows, per Trajectory field in _TRAJECTORY_KEYS'
        # order: (plane or -1, the columns, or the column of a scalar field, row shape, dtype).
        self._fields = []
        for key in _TRAJECTORY_KEYS:
            spec, (p, columns) = self.buffer.fields[key], cols[key]
            index: slice | int = columns.start if spec.shape == () else columns
            self._fields.append((p, index, spec.shape, spec.dtype))

    @property
    def live_agents(self) -> int:
        """Agents with state held (seen since their last done)."""
        return len(self.buffer)

    # -- the rules -------------------------------------------------------------------------------

    def memories(self, agent_ids: np.ndarray) -> np.ndarray | None:
        """The recurrent state each row's agent acts with next: float32 [N, R], zeros for an agent not held (a first
        sighting, or back after done); None while the store holds no states (R = 0)."""
        if not self.memory_size:
            return None
        ids = agent_ids.tolist()
        # dict.get with a default, mapped in C: -1 for an agent not held.
        slots = np.fromiter(map(self.buffer.slot_of.get, ids, itertools.repeat(-1, len(ids))), np.intp, len(ids))
        held = self.buffer.state[RECURRENT_STATE].take(np.maximum(slots, 0), axis=0)
        held[slots < 0] = 0.0
        return held

    def add(self, info: DecodedBrainInfo, actions: StepActions) -> list[Trajectory]:
        """Take one step's rows and the actions returned for them; return the trajectories cut.

        A policy of another memory size than the states held first ends every partial trajectory (module
        docstring, "Recurrent state"): those come back too, counted as flushed.

        Raises:
            ResourceLimitError: the BrainInfo's new agents would take the session past its budget;
                nothing changed.
        """
        memory_size = 0 if actions.memories is None else actions.memories.shape[1]
        if memory_size != self.memory_size:
            flushed = self.flush()
            self._build(memory_size)
            return flushed + self._add(info, actions)
        return self._add(info, actions)

    def _add(self, info: DecodedBrainInfo, actions: StepActions) -> list[Trajectory]:
        buffer = self.buffer
        id_list = info.agent_ids.tolist()
        slot_list: list[int | None] = list(map(buffer.slot_of.get, id_list))
        has_last: np.ndarray | None = None
        if None in slot_list:
            new = [r for r, slot in enumerate(slot_list) if slot is None]
            self._admit(len(new))
            for r, slot in zip(new, buffer.add_agents([id_list[r] for r in new]), strict=True):
                slot_list[r] = slot
            has_last = np.ones(len(id_list), dtype=bool)  # every agent held has a pending row
            has_last[new] = False
        held = cast(list[int], slot_list)  # every row has a slot now
        slots = np.array(held, dtype=np.intp)
        cut: list[Trajectory] = []
        if has_last is None:
            # Every row continues an agent (the usual step): no row selection, and the pending rows
            # taken out of the store become this step's pending rows.
            lengths, previous = self._append_experiences(slots, info.rewards)
            # ndarray.nonzero, not np.flatnonzero: no Python-level numpy wrapper per step.
            ends = (info.done | (lengths >= self.time_horizon)).nonzero()[0]
        else:
            # A new agent's pending row is zeros (see _release): its first prev_action is zeros.
            previous = [pending.take(slots, axis=0) for pending in buffer.pending]
            rows = np.flatnonzero(has_last)
            ends = rows[:0]
            if len(rows):
                done = info.done[rows]
                lengths, _ = self._append_experiences(slots[rows], info.rewards[rows])
                ends = rows[done | (lengths >= self.time_horizon)]
        if len(ends):
            cut = [self._cut(held[r], id_list[r], info, r) for r in ends.tolist()]
        if info.done.any():
            done_ids = [id_list[r] for r in info.done.nonzero()[0].tolist()]
            self._remember(slots, info, actions, previous, ~info.done)
            self._release(done_ids)
        else:
            self._remember(slots, info, actions, previous, None)
        return cut

    def _admit(self, new_agents: int) -> None:
        budget = self.budget
        if budget is None:
            return
        if budget.live + new_agents > budget.limit:
            raise ResourceLimitError(
                f"session {self.session_id}: a BrainInfo of behavior '{self.params.behavior_name}' brings {new_agents}"
                f" new agents to the {budget.live} the session holds; at most {budget.limit} live agents per session"
                " (max_agents_per_session)"
            )
        budget.live += new_agents

    def _release(self, agent_ids: list[int]) -> None:
        # A removed agent's pending row is all zeros: the action that becomes a returning id's
        # first prev_action is zeros.
        self.buffer.remove(agent_ids)
        if self.budget is not None:
            self.budget.live -= len(agent_ids)

    def _append_experiences(self, s: np.ndarray, rewards: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Append one experience for each slot ``s`` (its pending row with these rows' rewards);
        return the slots' new lengths and their pending rows as they were (packed, fresh arrays)."""
        buffer = self.buffer
        lengths, previous = buffer.append_pending(s, self._reward, rewards)
        # The episode totals move at cuts only (_cut): they count the episode's earlier trajectories.
        self.counters.experiences += len(s)
        return lengths, previous

    def _remember(
        self,
        slots: np.ndarray,
        info: DecodedBrainInfo,
        actions: StepActions,
        previous: list[np.ndarray],
        live: np.ndarray | None,
    ) -> None:
        """Record the rows of agents that go on as their pending previous row.

        ``previous`` holds each row's pending row before this step (packed, plane p ``[N, w_p]``,
        the caller's fresh arrays): it becomes the new pending row in place, so its action columns
        give prev_action without another gather. ``live`` (bool [N]) marks the rows that go on,
        None for all of them.
        """
        obs, mask = info.observations, info.action_mask
        cont, disc = actions.continuous_actions, actions.discrete_actions
        clp, dlp = actions.continuous_log_probs, actions.discrete_log_probs
        memories, next_memories = actions.memories, actions.next_memories
        s, rows = slots, previous
        if live is not None:
            kept = live.nonzero()[0]
            if not len(kept):
                return
            s, rows = slots[kept], [plane[kept] for plane in previous]
            obs = [o[kept] for o in obs]
            mask = None if mask is None else mask[kept]
            cont, disc, clp, dlp = cont[kept], disc[kept], clp[kept], dlp[kept]
            if memories is not None and next_memories is not None:
                memories, next_memories = memories[kept], next_memories[kept]
        n = len(s)
        if not n:
            return
        # prev_action of the next experience is the action of this one (in the row before it is
        # overwritten): zeros at episode start, since a new agent's pending row is zeros.
        for p, to, source in self._prev_actions:
            rows[p][:, to] = rows[p][:, source]
        for ((p, columns), _), o in zip(self._obs, obs, strict=True):
            rows[p][:, columns] = o.reshape(n, -1)
        # The reward column is left as it is: the row's reward is the next row's, set when the row
        # becomes an experience (ProcessingBuffer.append_pending).
        values = (cont, clp, dlp, disc, actions.policy_version, True if mask is None else mask, memories)
        for (p, columns), value in zip(self._remembered, values, strict=True):
            if p >= 0:
                rows[p][:, columns] = value
        self.buffer.set_pending(s, rows)
        if self.memory_size:  # the state the agent's next step acts with
            self.buffer.state[RECURRENT_STATE][s] = next_memories

    def _cut(self, slot: int, agent_id: int, info: DecodedBrainInfo | None, row: int) -> Trajectory:
        """Take slot ``slot``'s steps as a Trajectory; the agent goes on with none.

        ``info`` None means a flush: next_obs is the last obs seen and the segment is interrupted.
        """
        buffer = self.buffer
        steps = buffer.take(slot)
        t = len(steps[0])
        if info is None:
            pending = buffer.pending
            last = [pending[p][slot, columns].reshape(shape) for (p, columns), shape in self._obs]
            done_reached, interrupted = False, True
        else:
            last = [o[row] for o in info.observations]
            done_reached = bool(info.done[row])
            interrupted = done_reached and bool(info.max_reached[row])
        obs = [steps[p][:, columns].reshape(t, *shape) for (p, columns), shape in self._obs]
        next_obs = [n if i in self._images else n.copy() for i, n in enumerate(last)]
        frames: dict[int, np.ndarray] = {}
        for i in self._images:
            # An image's T + 1 frames in one block, each once: next_obs rows become a view (to_rows).
            frames[i], (obs[i], next_obs[i]) = frames_block(obs[i], last[i])

        # Views of the steps' own fresh block (one per storage plane), not copies: the block holds
        # exactly this trajectory, and a copy per field cost W1 a tenth of its throughput.
        views = [self._no_values(t, shape, dtype) if p < 0 else steps[p][:, index] for p, index, shape, dtype in self._fields]
        # Only an episode's last experience is done, and it ends the trajectory: done is not stored.
        done = np.zeros(t, dtype=bool)
        done[-1] = done_reached
        # The episode so far: its earlier trajectories' totals (the slot's state) and this one's; not
        # at a flush, after which the agent is forgotten (a flush of 60,000 agents pays no sum each).
        episode_reward, episode_length = 0.0, 0
        if info is not None:
            state = buffer.state
            episode_reward = float(state[EPISODE_REWARD][slot]) + float(views[7].sum(dtype=np.float64))
            episode_length = int(state[EPISODE_LENGTH][slot]) + t
            if not done_reached:  # the episode goes on
                state[EPISODE_REWARD][slot], state[EPISODE_LENGTH][slot] = episode_reward, episode_length
        trajectory = Trajectory(
            id=TrajectoryId(self.session_id, agent_id, self._sequence),
            behavior_name=self.params.behavior_name,
            obs=obs,
            next_obs=next_obs,
            continuous_actions=views[0],
            discrete_actions=views[1],
            continuous_log_probs=views[2],
            discrete_log_probs=views[3],
            prev_continuous_actions=views[4],
            prev_discrete_actions=views[5],
            action_mask=views[6] if self._has_discrete else None,
            rewards=views[7],
            done=done,
            policy_versions=views[8],
            done_reached=done_reached,
            interrupted=interrupted,
            episode_reward=episode_reward if done_reached else None,
            episode_length=episode_length if done_reached else None,
            obs_frames=frames,
            memories=views[9] if self.memory_size else None,
        )
        self._sequence += 1
        self.counters.trajectories += 1
        return trajectory

    @staticmethod
    @functools.lru_cache(maxsize=1024)
    def _no_values(t: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """``[t, *shape]`` for a field with no values per row (no discrete branches, say): one read-only array per size."""
        empty = np.zeros((t, *shape), dtype)
        empty.flags.writeable = False
        return empty

    def flush_batches(self, agents_per_batch: int = FLUSH_BATCH_AGENTS) -> Iterator[list[Trajectory]]:
        """End the session, ``agents_per_batch`` agents at a time: each batch's partial trajectories (as
        interrupted), after which those agents are forgotten. A caller may yield between batches."""
        agent_ids = cast(list[int], list(self.buffer.slot_of))  # the assembler's agent ids are ints
        for start in range(0, len(agent_ids), agents_per_batch):
            batch = agent_ids[start : start + agents_per_batch]
            flushed = []
            for agent_id in batch:
                slot = self.buffer.slot_of[agent_id]
                if self.buffer.lengths[slot] > 0:
                    trajectory = self._cut(slot, agent_id, None, -1)
                    self.counters.flushed_experiences += trajectory.length
                    self.counters.flushed_trajectories += 1
                    flushed.append(trajectory)
            self._release(batch)
            yield flushed

    def flush(self) -> list[Trajectory]:
        """End the session: every partial trajectory, as interrupted; then forget every agent."""
        return [trajectory for batch in self.flush_batches() for trajectory in batch]
