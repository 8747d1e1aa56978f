"""POCA against independent PPO on a cooperative task where credit assignment matters (``tests.pettingzoo_envs.GoalLine``).

The reward comes only as a group reward when every agent has reached its own goal; agents that finish first
leave before it comes. The whole pipeline runs: ``GoalLine`` copies through ``envclient.pettingzoo_adapter`` (one
group per copy), the real processor (group assembly), and the trainer loop with ``trainer_type: poca`` or
``ppo`` (which adds the group reward to the reward of each agent still there). Fixed seeds; the budget is
``BUDGET_STEPS`` agent experiences, well under 60 s per run on two cores.
"""

from __future__ import annotations

import numpy as np
import pytest

from common.config import BehaviorSettings, NetworkSettings, POCAHyperparameters, PPOHyperparameters, TrainerType
from tests.learning.multiagent_harness import train_pettingzoo
from tests.pettingzoo_envs import GoalLine

pytestmark = pytest.mark.learning

BEHAVIOR = "walker"
BUDGET_STEPS = 36_000
THRESHOLD = 0.8
"""POCA's success rate (group episodes that got the group reward) over the last ``WINDOW`` group episodes."""
MARGIN = 0.3
"""PPO stays below ``THRESHOLD - MARGIN``."""
WINDOW = 200
NUM_ENVS = 32


def behavior_settings(trainer: TrainerType) -> BehaviorSettings:
    common = dict(
        batch_size=256, buffer_size=1024, learning_rate=3e-3, beta=0.01, num_epoch=3, learning_rate_schedule="constant"
    )
    hp = POCAHyperparameters(**common) if trainer is TrainerType.POCA else PPOHyperparameters(**common)  # type: ignore[arg-type]
    return BehaviorSettings(
        trainer_type=trainer,
        hyperparameters=hp,
        network_settings=NetworkSettings(hidden_units=32, num_layers=2),
        max_steps=BUDGET_STEPS,
        time_horizon=64,
        summary_freq=BUDGET_STEPS,
        max_queued_trajectories=256,  # about one buffer of these short trajectories (BehaviorSettings.trajectory_queue_size)
    )


def train_on_goal_line(trainer: TrainerType, seed: int) -> tuple[list[float], float]:
    """(each group episode's group return, in order; wall seconds) of one run."""
    stats, seconds = train_pettingzoo(
        GoalLine, BEHAVIOR, behavior_settings(trainer), seed=seed, num_envs=NUM_ENVS, timeout_s=120
    )
    return stats.group_returns, seconds


def test_poca_learns_to_finish_where_independent_ppo_does_not() -> None:
    poca, poca_s = train_on_goal_line(TrainerType.POCA, seed=1)
    ppo, ppo_s = train_on_goal_line(TrainerType.PPO, seed=1)
    poca_rate, ppo_rate = float(np.mean(poca[-WINDOW:])), float(np.mean(ppo[-WINDOW:]))
    message = (
        f"success over the last {WINDOW} group episodes: poca {poca_rate:.2f} ({len(poca)} episodes, {poca_s:.0f} s),"
        f" ppo {ppo_rate:.2f} ({len(ppo)} episodes, {ppo_s:.0f} s)"
    )
    assert poca_rate >= THRESHOLD, message
    assert ppo_rate < THRESHOLD - MARGIN, message
