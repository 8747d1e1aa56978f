"""Small PettingZoo parallel envs of our own, with rewards known in advance (tests only).

``TwoTeams``: agents ``red_0``, ``red_1`` and ``blue_0``; an episode lasts ``EPISODE_STEPS`` steps. At step
``t`` (1, 2, ...) agent ``a`` gets reward ``reward(a, t, action)``: known to the test, which so checks that every
reward reaches the trajectories exactly once. ``red_1`` terminates at step 2 (it leaves before its team ends);
``red_0`` terminates at the last step; ``blue_0`` is truncated there (a time limit). Red agents report a group
reward of 0.5 per step in their info dicts.

``GoalLine``: the cooperative task of the POCA learning test (``tests/learning/test_poca_learning.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

EPISODE_STEPS = 4
AGENTS = ("red_0", "red_1", "blue_0")


def reward(agent: str, t: int, action: int) -> float:
    """What ``agent`` gets at step ``t`` for ``action``."""
    return AGENTS.index(agent) * 10.0 + t + 0.25 * action


class TwoTeams(ParallelEnv):
    metadata = {"name": "two_teams_v0"}  # noqa: RUF012 - PettingZoo's class attribute

    def __init__(self) -> None:
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(2)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.array([AGENTS.index(a), self.t], np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(AGENTS)
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        assert set(actions) == set(self.agents), (actions, self.agents)
        obs = self._obs()
        rewards = {a: reward(a, self.t, int(actions[a])) for a in self.agents}
        last = self.t >= EPISODE_STEPS
        terminated = {a: (a == "red_1" and self.t == 2) or (a == "red_0" and last) for a in self.agents}
        truncated = {a: a == "blue_0" and last for a in self.agents}
        infos = {a: {"group_reward": 0.5} if a.startswith("red") else {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, infos


def two_teams() -> TwoTeams:
    return TwoTeams()


class GoalLine(ParallelEnv):
    """``num_agents`` agents on a line of integers, each starting at a random point of ``[-spread, 0]``, its goal at
    ``goal``; actions left, stay, right. An agent observes its own position only.

    An agent that reaches its goal leaves (terminated) with reward 0. The only reward is the group's: 1, given
    to the agents that reach their goal at the step the last one does, once every agent has reached its own.
    After ``max_steps`` steps the agents still out are truncated. Credit assignment matters: agents start at
    different distances, so one usually finishes first and leaves before the group reward comes; it learns to
    finish only if its last step is bootstrapped from the group's value (POCA's rule for early leavers). A
    trainer that treats its leaving as terminal (independent PPO, which adds the group reward to the reward of
    the agents still there) sees finishing first as worth nothing and lingering as the way to be paid.
    """

    metadata = {"name": "goal_line_v0"}  # noqa: RUF012 - PettingZoo's class attribute

    def __init__(self, num_agents: int = 2, goal: int = 3, spread: int = 2, max_steps: int = 12) -> None:
        self.possible_agents = [f"walker_{i}" for i in range(num_agents)]
        self.goal, self.spread, self.max_steps = goal, spread, max_steps
        self.agents: list[str] = []
        self.position: dict[str, int] = {}
        self.t = 0
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-2.0, 2.0, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(3)

    def _obs(self, agents: list[str]) -> dict[str, np.ndarray]:
        return {a: np.array([self.position[a] / self.goal], np.float32) for a in agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.position = {a: int(self._rng.integers(-self.spread, 1)) for a in self.agents}
        self.t = 0
        return self._obs(self.agents), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        for a in self.agents:
            self.position[a] = max(-self.goal, self.position[a] + int(actions[a]) - 1)
        reached = {a: self.position[a] >= self.goal for a in self.agents}
        everyone = all(reached.values())
        last = self.t >= self.max_steps
        obs = self._obs(self.agents)
        rewards = dict.fromkeys(self.agents, 0.0)
        infos = {a: {"group_reward": 1.0 if everyone else 0.0} for a in self.agents}
        truncated = {a: last and not reached[a] for a in self.agents}
        self.agents = [a for a in self.agents if not (reached[a] or truncated[a])]
        return obs, rewards, reached, truncated, infos


def goal_line() -> GoalLine:
    return GoalLine()
