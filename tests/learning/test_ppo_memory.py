"""PPO with memory learns the 1-D memory task (``tests.memory_env``); without memory it stays at chance.

The goal is shown on an episode's first step only and judged at its third: a policy that remembers returns 1, one
that cannot returns 0.5 (chance). Both runs take the same settings, seed and step budget through the real processor
(which holds each agent's recurrent state) and trainer loop, each stopping early once its last 200 episodes average
0.95 (as the other learning tests stop at their threshold); the test logs and checks both.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from common.config import (
    BehaviorSettings,
    MemorySettings,
    NetworkSettings,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    ScheduleType,
)
from envclient.runner import RunStats, run_env
from envclient.session import EnvSession
from tests.learning import harness
from tests.memory_env import MemoryEnv
from trainer.loop import TrainerResult

pytestmark = pytest.mark.learning
logger = logging.getLogger(__name__)

STEP_BUDGET = 30_000
"""Trainer steps of a run at most; a run stops earlier once its last WINDOW episodes average STOP_AT."""
STOP_AT = 0.95
WINDOW = 200
"""Episodes the final score averages over (at chance its standard error is 0.035)."""
CHANCE = 0.5


def settings(memory: bool) -> BehaviorSettings:
    return BehaviorSettings(
        hyperparameters=PPOHyperparameters(
            batch_size=64,
            buffer_size=256,
            learning_rate=5e-3,
            learning_rate_schedule=ScheduleType.CONSTANT,
            beta=1e-3,
            epsilon=0.2,
            lambd=0.95,
            num_epoch=8,
        ),
        network_settings=NetworkSettings(
            hidden_units=32, num_layers=1, memory=MemorySettings(memory_size=16, sequence_length=4) if memory else None
        ),
        reward_signals={RewardSignalType.EXTRINSIC: RewardSignalSettings(gamma=0.99)},
        time_horizon=8,
        summary_freq=100_000,
    )


async def _memory_client(address: str, index: int, continuous: bool, agents: int, seed: int, stop: asyncio.Event) -> RunStats:
    del continuous  # the task is discrete
    env = MemoryEnv(agents, behavior_name=harness.BEHAVIOR, seed=seed * 1000 + index)
    async with EnvSession(address, f"memory-env-{index}", [env.brain_parameters]) as session:
        return await run_env(session, env, harness.BEHAVIOR, stop=stop)


def reached(result: TrainerResult) -> bool:
    return result.episodes >= WINDOW and result.mean_reward(WINDOW) > STOP_AT


def final_score(memory: bool, seed: int = 0) -> tuple[float, int]:
    """The mean return of the run's last WINDOW episodes, and the trainer steps it took."""
    run = harness.train_on_simple_env(
        settings(memory),
        continuous=False,
        seed=seed,
        max_trainer_steps=STEP_BUDGET,
        should_stop=reached,
        client=_memory_client,
        timeout_s=120.0,
    )
    rewards = np.asarray(run.episode_rewards[-WINDOW:])
    return float(rewards.mean()), run.trainer.steps


def test_ppo_with_memory_remembers_the_goal_and_without_memory_stays_at_chance() -> None:
    with_memory, memory_steps = final_score(memory=True)
    without, plain_steps = final_score(memory=False)
    logger.warning(
        "memory task, last %d episodes: with memory %.3f after %d steps, without %.3f after %d (chance 0.5)",
        WINDOW, with_memory, memory_steps, without, plain_steps,
    )  # fmt: skip
    assert with_memory > 0.9, f"with memory: {with_memory:.3f} after {memory_steps} steps"
    assert abs(without - CHANCE) < 0.15, f"without memory: {without:.3f} after {plain_steps} steps"
    assert plain_steps >= STEP_BUDGET  # never near the goal: it spent its whole budget
