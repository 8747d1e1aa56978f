"""SAC finds a far goal only with gSDE's held exploration (``use_sde``): white noise averages out on a long path.

The 1-D task (``envclient.simple_env``) with ``step_size`` 0.02: either end is 50 full moves away, in an episode of
100 steps. SAC's own Gaussian starts at std 1 around a mean near 0, and its tanh-squashed white noise moves the agent
by about 0.02 * 0.63 * sqrt(100) = 0.13 in a whole episode: it never reaches an end, every episode returns -1.0, and
the critics learn nothing that tells the sides apart. With gSDE the noise is ``latent(s) @ W``; the observation (the
goal's side) is constant through an episode, so a matrix held for the episode (``sde_sample_freq`` 100) pushes one
way throughout, as SB3's SAC with gSDE explores MountainCarContinuous-v0. That is what our SAC lacked there
(benchmarks/classic_control.py: with white noise it never found the flag in 50k steps).

Measured 2026-12-07 (``/tmp`` driver around this test's harness call, threshold 0: more goals than failures): with
gSDE seed 0 passed it at 1,667 / 1,710 / 1,628 steps in three runs, seeds 1-3 at 3,430 / 2,285 / 5,635; without
(``use_sde`` false, the same settings), seeds 0 and 1 ended their 6,000 steps at -1.000, every episode truncated.
"""

from __future__ import annotations

import dataclasses

import pytest

from common.config import SACHyperparameters
from tests.learning import harness
from tests.learning.test_ppo_exploration import far_goal
from tests.learning.test_sac_learning import WINDOW, sac_settings
from trainer.loop import TrainerResult

pytestmark = pytest.mark.learning

STEP_SIZE = 0.02
"""Position change per full move: 50 moves to an end, in an episode of 100 steps."""
THRESHOLD = 0.0
"""Mean return of the last WINDOW episodes: above 0, more of them reached the goal (+1.06 less the step costs) than
failed (-1.0 truncated, -1.06 at the wrong end)."""
STEP_BUDGET = 6000
"""Trainer steps (experiences taken in): about 3.5x what seed 0 took in three runs."""


def reached(result: TrainerResult) -> bool:
    return result.episodes >= WINDOW and result.mean_reward(WINDOW) > THRESHOLD


def test_sac_reaches_a_far_goal_with_gsde() -> None:
    settings = sac_settings()
    assert isinstance(settings.hyperparameters, SACHyperparameters)
    hyperparameters = dataclasses.replace(settings.hyperparameters, use_sde=True, sde_sample_freq=100, log_std_init=0.0)
    run = harness.train_on_simple_env(
        dataclasses.replace(settings, hyperparameters=hyperparameters),
        continuous=True,
        seed=0,
        max_trainer_steps=STEP_BUDGET,
        num_envs=2,
        agents_per_env=2,
        should_stop=reached,
        timeout_s=240.0,
        client=far_goal(STEP_SIZE),
    )
    result = run.trainer
    harness.assert_stopped_at_condition(result, WINDOW)
