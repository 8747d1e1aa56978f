"""PPO learns from trajectories an older policy took (policy lag), as asynchronous collection delivers them.

Issue 15: on Acrobot-v1 (configs/acrobot_ppo.yaml) PPO trailed SB3 with the same settings. The env clients keep
acting while the trainer updates, so most rows of an update come from the policy one or more versions back; PPO's
ratio pi / pi_behaviour then starts off 1 and clipping drops much of their gradient. ``proximal_clip`` (decoupled
PPO, ``trainer.ppo.PPOLearner._proximal``) centres the clip on the policy at the update's start instead.

Here the lag is forced: the processor queues many trajectories (``LAGGED_QUEUE``) and drops none
(``max_policy_lag`` far above the versions a run makes), on the 1-D goal task with the settings of
test_ppo_learning.py, and each update's rows go through ``_proximal`` (some with weights below 1). The 1-D task
is too easy to show the gap itself (seeds 0-1 reached 0.9 in 2426 / 2016 steps with proximal_clip, 1502 / 1850
without, 2026-12-01): this pins that the decoupled update learns from lagged rows; the Acrobot figures are in
benchmarks/classic_control.py's docstring.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.learning import harness
from tests.learning.test_ppo_learning import WINDOW, ppo_settings, reached

pytestmark = pytest.mark.learning

LAGGED_QUEUE = 32
"""Trajectories the processor queues before env clients wait: ~16x the PPO default of 2 here."""
NEVER_STALE = 1000
"""max_policy_lag above any version a run reaches: nothing dropped, every lagged row trains."""
STEP_BUDGET = 3000
"""Trainer steps: test_ppo_learning.py's budget."""


def test_ppo_reaches_the_goal_from_lagged_trajectories() -> None:
    base = ppo_settings()
    proximal = dataclasses.replace(base.hyperparameters, proximal_clip=True)
    settings = dataclasses.replace(base, hyperparameters=proximal, max_policy_lag=NEVER_STALE)
    run = harness.train_on_simple_env(
        settings,
        continuous=False,
        seed=0,
        max_trainer_steps=STEP_BUDGET,
        should_stop=reached,
        trajectory_queue_size=LAGGED_QUEUE,
        timeout_s=240.0,
    )
    result = run.trainer
    harness.assert_stopped_at_condition(result, WINDOW)
