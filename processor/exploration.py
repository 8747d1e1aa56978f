"""Per-agent action noise held for several steps: time-correlated exploration for continuous actions.

A continuous action is ``u = mean + std * eps`` with ``eps ~ N(0, I)`` (``processor.inference``). With
``noise_hold_steps`` k > 1 (a PPO hyperparameter) each agent keeps one ``eps`` for k of its own steps, and draws a
fresh one at its episode start: the exploration comes in pushes k steps long instead of white noise that
averages out. SB3's gSDE (Raffin et al. 2021, arXiv:2005.05719) holds its noise in the same way, for
``sde_sample_freq`` steps or one rollout; RL-Zoo's MountainCarContinuous and Pendulum PPO entries use it.

Given the state, each step's action is still ``N(mean, std)``, whatever ``eps`` the agent holds (a draw of
``eps`` is a standard normal whenever it was drawn), so the stored per-step log-prob and PPO's ratio need no
change; only the steps' independence goes.

gSDE (PPO's or SAC's ``use_sde``, ``latent_size`` L > 0, the acting policy's): each agent holds a standard-normal
matrix ``E`` [L, C] instead,
for ``sde_sample_freq`` steps (``hold_steps``), and ``processor.inference`` turns it into the noise
``latent(s) @ W`` with ``W = sigma * E`` from the artifact's ``SDE_NOISE_SCALE`` (``common.policy_contract``): the
noise is held but its size and direction follow the state, and given the state it is ``N(0, latent^2 @ sigma^2)``,
the Gaussian whose log-prob the trajectory stores. Holding ``E`` rather than ``W`` lets a new policy version's sigma
apply at once; SB3 draws ``W`` with the sigma of the rollout's start, which the policy keeps through the rollout.

Memory: one ``HeldNoise`` per (session, behavior) holds ``4 * L * C + 8`` bytes per live agent (L = 1 without
gSDE; in doubling arrays, reused); an agent's entry goes at its done and the whole object when its session ends,
so it never holds more agents than the session's assembler does (``max_agents_per_session``).

Shapes: ``N`` rows in a BrainInfo, ``C`` continuous action dimensions, ``L`` gSDE latent units, ``S`` slots
(>= live agents).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class HeldNoise:
    """The held standard-normal noise of one session's agents of one behavior.

    Not thread-safe: use it from the session's stream handler.

    Args:
        size: C, the continuous action dimensions (>= 1).
        hold_steps: k, the agent steps one draw lasts (>= 1; 1 draws fresh noise every step).
        rng: the generator the draws come from.
        latent_size: L > 0 holds gSDE's standard-normal exploration matrix [L, C] per agent; 0: an ``eps`` [C].
        policy_latent_size: where given, L is read from it at every ``draw``: the acting policy's, which the processor
            learns from the policy's artifact alone (``processor.inference.Policy.sde_latent_size``; 0 while no policy
            has arrived). When it changes, every agent draws anew at its next step.
    """

    def __init__(
        self,
        size: int,
        hold_steps: int,
        rng: np.random.Generator,
        latent_size: int = 0,
        policy_latent_size: Callable[[], int] | None = None,
    ) -> None:
        if size < 1 or hold_steps < 1 or latent_size < 0:
            raise ValueError(f"size ({size}) and hold_steps ({hold_steps}) must be >= 1, latent_size ({latent_size}) >= 0")
        self.size = size
        self.hold_steps = hold_steps
        self._policy_latent_size = policy_latent_size
        self._rng = rng
        self._slot_of: dict[int, int] = {}
        self._free: list[int] = []
        self._age = np.zeros(0, np.int64)  # [S]: steps the slot's eps has acted; hold_steps = draw anew
        self._shape_for(latent_size)

    def _shape_for(self, latent_size: int) -> None:
        """Holds draws of L = ``latent_size`` from now on: every slot's draw is zeroed and due anew."""
        self.latent_size = latent_size
        self._shape: tuple[int, ...] = (latent_size, self.size) if latent_size else (self.size,)  # one agent's draw
        self._noise = np.zeros((self.capacity, *self._shape), np.float32)  # [S, C] or [S, L, C]: each slot's held draw
        self._age[:] = self.hold_steps

    def __len__(self) -> int:
        """Live agents holding noise."""
        return len(self._slot_of)

    @property
    def capacity(self) -> int:
        """Slots allocated (live agents plus free slots)."""
        return len(self._age)

    def draw(self, agent_ids: np.ndarray, done: np.ndarray) -> np.ndarray:
        """The noise for one BrainInfo's rows, held or freshly drawn.

        An agent not held (first sighting, or back after a done) draws anew; a held one keeps its ``eps`` until
        it has acted ``hold_steps`` times with it. A done row's agent is forgotten after this call (its action is
        discarded, and its next sighting starts a new episode); an agent absent from the BrainInfo keeps its
        noise and its count.

        Args:
            agent_ids: int64 [N], unique.
            done: bool [N].

        Returns:
            eps: float32 [N, C] (gSDE: [N, L, C]), each row a standard normal draw.
        """
        if self._policy_latent_size is not None and (latent := self._policy_latent_size()) != self.latent_size:
            self._shape_for(latent)
        ids = agent_ids.tolist()
        slot_list = list(map(self._slot_of.get, ids))
        if None in slot_list:
            for r, slot in enumerate(slot_list):
                if slot is None:
                    slot_list[r] = self._slot_of[ids[r]] = self._take_slot()
        slots = np.array(slot_list, dtype=np.intp)
        redraw = slots[self._age[slots] >= self.hold_steps]
        if len(redraw):
            self._noise[redraw] = self._rng.standard_normal((len(redraw), *self._shape), dtype=np.float32)
            self._age[redraw] = 0
        eps = self._noise[slots]  # a copy (fancy indexing): later redraws do not change it
        self._age[slots] += 1
        if done.any():
            self.forget([ids[r] for r in np.flatnonzero(done).tolist()])
        return eps

    def _take_slot(self) -> int:
        if not self._free:
            old = self.capacity
            new = max(8, 2 * old)
            self._noise = np.concatenate([self._noise, np.zeros((new - old, *self._shape), np.float32)])
            self._age = np.concatenate([self._age, np.zeros(new - old, np.int64)])
            self._free = list(range(new - 1, old - 1, -1))  # lowest slot first
        slot = self._free.pop()
        self._age[slot] = self.hold_steps  # drawn at its first step
        return slot

    def forget(self, agent_ids: list[int]) -> None:
        """Free these agents' noise (ids not held are ignored)."""
        for agent_id in agent_ids:
            slot = self._slot_of.pop(agent_id, None)
            if slot is not None:
                self._free.append(slot)

    def clear(self) -> None:
        """Forget every agent and release the arrays (the session ended)."""
        self._slot_of.clear()
        self._free = []
        self._noise = np.zeros((0, *self._shape), np.float32)
        self._age = np.zeros(0, np.int64)
