"""PPO finds a far goal only with held action noise (``noise_hold_steps``): white noise averages out on a long path.

The 1-D task (``envclient.simple_env``) with ``step_size`` 0.05: the goal is 20 full moves away, in an episode
of 100 steps. At the start the policy's mean is about 0, so only the noise moves the agent. White noise of std
0.37 (``log_std_init`` -1) moves it by about 0.05 * 0.37 * sqrt(100) = 0.19 in a whole episode: it never
reaches either end, every episode returns -1, and PPO has nothing to learn from. Held for the episode, the same
noise moves it by 0.05 * 100 * 0.37 * eps = 1.85 eps: about 60% of the first episodes reach an end, half of
those the goal, and PPO learns the way. Measured 2026-12-02: 8 s here (seeds 1-3: 2-6 s); with
``noise_hold_steps`` 1 the same run ends its 6,000 steps at -1.000, every episode truncated.

MountainCarContinuous-v0 shows the same effect on the first flag (0.7k / 2.7k steps with noise held for 8 steps,
5.6k / 8.4k with white noise), though not on the time to its threshold (benchmarks/classic_control.py).
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from common.config import PPOHyperparameters
from envclient.runner import RunStats, run_env
from envclient.session import EnvSession
from envclient.simple_env import SimpleEnv
from tests.learning import harness
from tests.learning.test_ppo_learning import WINDOW, ppo_settings
from trainer.loop import TrainerResult

pytestmark = pytest.mark.learning

STEP_SIZE = 0.05
"""Position change per full move: 20 moves to an end."""
THRESHOLD = 0.5
"""Mean return of the last WINDOW episodes (best 1.06 - 19 * 0.01 = 0.87; a truncated episode returns -1.0)."""
STEP_BUDGET = 6000
"""Trainer steps (experiences taken in)."""


def far_goal(step_size: float) -> harness.EnvClient:
    """An env client of the 1-D task whose goal lies ``1 / step_size`` full moves away."""

    async def client(address: str, index: int, continuous: bool, agents: int, seed: int, stop: asyncio.Event) -> RunStats:
        env = SimpleEnv(
            agents, continuous=continuous, behavior_name=harness.BEHAVIOR, seed=seed * 1000 + index, step_size=step_size
        )
        async with EnvSession(address, f"far-goal-{index}", [env.brain_parameters]) as session:
            return await run_env(session, env, harness.BEHAVIOR, stop=stop)

    return client


far_goal_client = far_goal(STEP_SIZE)


def reached(result: TrainerResult) -> bool:
    return result.episodes >= WINDOW and result.mean_reward(WINDOW) > THRESHOLD


def test_ppo_reaches_a_far_goal_with_noise_held_for_the_episode() -> None:
    settings = ppo_settings()
    assert isinstance(settings.hyperparameters, PPOHyperparameters)
    hyperparameters = dataclasses.replace(settings.hyperparameters, log_std_init=-1.0, noise_hold_steps=100)
    run = harness.train_on_simple_env(
        dataclasses.replace(settings, hyperparameters=hyperparameters),
        continuous=True,
        seed=0,
        max_trainer_steps=STEP_BUDGET,
        should_stop=reached,
        timeout_s=240.0,
        client=far_goal_client,
    )
    result = run.trainer
    harness.assert_stopped_at_condition(result, WINDOW)
