"""SAC learns the 1-D goal task (``envclient.simple_env``) through the real processor and trainer loop.

The config follows ML-Agents' own SAC test config (``tests/dummy_config.py``: batch 8-32, learning
rate 5e-3 constant, tau 0.01, 100 warm-up steps, one small layer), tuned by measurement on this
harness: init_entcoef 0.02 (0.1 and 0.05 reached the threshold 150-200 steps later on average, with
a tail past 1000), time_horizon 8 and 2 envs x 2 agents (fewer agents in parallel act on a fresher
policy per experience). Over 18 continuous runs (seeds 0-13, 0 and 1 repeated) the threshold came
after 409-791 trainer steps (mean 600); over 18 discrete runs after 283-420 (mean 320).

Backpressure: SAC's processor default queue (1024 trajectories) lets the env clients outrun the
trainer; the 1000-step budget then bought 2 updates and every run failed. A queue of 4 trajectories
makes the clients wait for the trainer, so the policy that acts is at most a few trajectories old.
"""

from __future__ import annotations

import pytest

from common.config import (
    BehaviorSettings,
    NetworkSettings,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    ScheduleType,
    TrainerType,
)
from envclient.simple_env import BEST_RETURN
from tests.learning import harness
from trainer.loop import TrainerResult

pytestmark = pytest.mark.learning

THRESHOLD = 0.9
"""Mean return of the last WINDOW episodes (best 1.02; walking the wrong way returns -1.10)."""
WINDOW = 20
STEP_BUDGET = 1500
"""Trainer steps (experiences taken in) to reach THRESHOLD, for both action kinds. 1,000 until 2026-12-02: a
continuous seed-1 run then missed it at load 8-9 (last-20 mean 0.386 at 1,000 steps), and seed 0 reached the
threshold after 556-858 steps over 9 quiet runs (seeds 0-9: 401-858), so 1,500 leaves room for load without
changing what a pass means (runs stop at the threshold)."""
TIME_HORIZON = 8
QUEUE_SIZE = 4
"""Trajectories the processor queues for the trainer before env clients wait: SAC's default,
max(4, batch 32 / horizon 8) (``BehaviorRuntime.from_settings``)."""


def sac_settings() -> BehaviorSettings:
    return BehaviorSettings(
        trainer_type=TrainerType.SAC,
        hyperparameters=SACHyperparameters(
            batch_size=32,
            buffer_size=2000,
            buffer_init_steps=100,
            learning_rate=5e-3,
            learning_rate_schedule=ScheduleType.CONSTANT,
            tau=0.01,
            steps_per_update=1.0,
            init_entcoef=0.02,
        ),
        network_settings=NetworkSettings(hidden_units=32, num_layers=1),
        reward_signals={RewardSignalType.EXTRINSIC: RewardSignalSettings(gamma=0.99)},
        time_horizon=TIME_HORIZON,
        summary_freq=1000,
    )


def reached(result: TrainerResult) -> bool:
    return result.episodes >= WINDOW and result.mean_reward(WINDOW) > THRESHOLD


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_sac_reaches_the_goal(continuous: bool, seed: int) -> None:
    run = harness.train_on_simple_env(
        sac_settings(),
        continuous=continuous,
        seed=seed,
        max_trainer_steps=STEP_BUDGET,
        num_envs=2,
        agents_per_env=2,
        should_stop=reached,
        timeout_s=240.0,
    )
    result = run.trainer
    last = harness.assert_stopped_at_condition(result, WINDOW)
    assert result.steps <= STEP_BUDGET + TIME_HORIZON and result.updates >= 2  # the loop overshoots by one trajectory at most
    assert (last <= BEST_RETURN + 1e-6).all()


def test_sac_queue_default_is_the_one_this_config_learns_with() -> None:
    from processor.behaviors import BehaviorRuntime

    assert BehaviorRuntime.from_settings(sac_settings()).trajectory_queue_size == QUEUE_SIZE
