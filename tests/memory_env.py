"""A 1-D memory task for recurrent learning tests: the goal is shown on an episode's first step only.

Each of ``N`` copies draws a goal ``g`` in {-1, +1} per episode. The observation (float32 ``[N, 1]``) is ``g`` on the
episode's first step and 0 after it. The agent acts on ``steps`` steps (one discrete branch of 2: 0 is -1, 1 is +1);
only the last one counts: the episode then terminates with reward 1 if that action is ``g``, else 0. Every other step
gives 0. So a policy that remembers the first observation returns 1, and one without memory, which sees 0 at the
decision, returns 0.5 at best (chance). ML-Agents' ``MemoryEnvironment`` in its test code has the idea.

Auto-reset is Gymnasium's next-step mode, as ``envclient.simple_env.SimpleEnv`` (``envclient.runner.VectorEnv``).
"""

from __future__ import annotations

import numpy as np

from common.specs import ActionSpec, BrainParameters, ObservationSpec


class MemoryEnv:
    """``N`` copies of the memory task (module docstring); ``steps`` >= 2 actions per episode."""

    def __init__(self, num_agents: int, *, behavior_name: str, seed: int, steps: int = 3) -> None:
        if steps < 2:
            raise ValueError(f"steps must be >= 2 (the goal must be remembered), got {steps}")
        self.steps = steps
        self._params = BrainParameters(behavior_name, (ObservationSpec((1,), np.dtype(np.float32)),), ActionSpec(0, (2,)))
        self._rng = np.random.default_rng(seed)
        self._n = num_agents
        self._goal = np.zeros(num_agents, np.float32)
        self._t = np.zeros(num_agents, np.int64)
        self._needs_reset = np.ones(num_agents, bool)

    @property
    def num_agents(self) -> int:
        return self._n

    @property
    def brain_parameters(self) -> BrainParameters:
        return self._params

    def reset(self) -> list[np.ndarray]:
        self._reset(np.ones(self._n, bool))
        return self._observations()

    def _reset(self, which: np.ndarray) -> None:
        self._goal[which] = self._rng.choice(np.array([-1.0, 1.0], np.float32), size=int(which.sum()))
        self._t[which] = 0
        self._needs_reset[which] = False

    def _observations(self) -> list[np.ndarray]:
        return [np.where(self._t == 0, self._goal, 0.0).astype(np.float32).reshape(-1, 1)]

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        del continuous_actions
        resetting = self._needs_reset.copy()
        active = ~resetting
        self._reset(resetting)
        self._t[active] += 1
        decided = active & (self._t >= self.steps)
        chosen = np.where(np.asarray(discrete_actions).reshape(self._n) == 1, 1.0, -1.0)
        rewards = np.where(decided & (chosen == self._goal), 1.0, 0.0).astype(np.float32)
        self._needs_reset = decided
        return self._observations(), rewards, decided, np.zeros(self._n, bool)
