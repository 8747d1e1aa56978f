"""Env factories for ``env_path: python:tests.python_envs:<function>`` in the tests."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

NOT_A_FUNCTION = 5


class Pixels(gymnasium.Env[Any, Any]):
    """A uint8 [4, 5, 3] image whose pixels are the step count; two discrete actions; 3-step episodes."""

    observation_space = spaces.Box(0, 255, (4, 5, 3), np.uint8)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.full((4, 5, 3), self.t, np.uint8), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.full((4, 5, 3), self.t, np.uint8), 1.0, self.t >= 3, False, {}


def pixels() -> gymnasium.Env[Any, Any]:
    """A wrapped env, as users build them: ``Pixels`` under a time limit."""
    return gymnasium.wrappers.TimeLimit(Pixels(), max_episode_steps=50)


def raises() -> gymnasium.Env[Any, Any]:
    raise RuntimeError("no display available")


def not_an_env() -> int:
    return 3


class Parameterized(gymnasium.Env[Any, Any]):
    """Reads the environment parameter ``difficulty`` from ``reset(options=...)``; 5-step episodes of reward 1 per step.

    Its observation is the difficulty it was reset with (-1 without one); every reset's options are appended to
    ``RESETS`` (in-process vectorization), so a test sees what the env was given.
    """

    observation_space = spaces.Box(-10.0, 10.0, (1,), np.float32)
    action_space = spaces.Discrete(2)
    RESETS: list[dict[str, Any]] = []  # noqa: RUF012 (a test's record, shared by the copies)

    def __init__(self) -> None:
        self.t = 0
        self.difficulty = -1.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.RESETS.append(dict(options or {}))
        self.t = 0
        self.difficulty = float((options or {}).get("difficulty", -1.0))
        return np.array([self.difficulty], np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([self.difficulty], np.float32), 1.0, self.t >= 5, False, {}


def parameterized() -> gymnasium.Env[Any, Any]:
    return Parameterized()
