"""Train, stop, resume: step, policy version, optimiser state and SAC's replay buffer come back.

A short SAC run on the 1-D task through the real processor writes its final checkpoint (with
``save_replay_buffer``); a fresh learner restored from it must hold exactly the first learner's
state, and a resumed loop publishes its first policy above the first run's last version.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from common.topics import PolicyTopic, TrajectoryTopic
from envclient.simple_env import simple_brain_parameters
from tests.learning import harness
from tests.learning.test_sac_learning import sac_settings
from trainer.checkpoint import Checkpointer
from trainer.loop import CHECKPOINTS_DIR, TrainerLoop
from trainer.sac import SACLearner

pytestmark = pytest.mark.learning


def test_sac_resume_restores_step_version_optimiser_and_replay(tmp_path: Path) -> None:
    settings = sac_settings()
    settings = dataclasses.replace(
        settings, hyperparameters=dataclasses.replace(settings.hyperparameters, save_replay_buffer=True)
    )
    params = simple_brain_parameters(harness.BEHAVIOR, continuous=True)
    first = SACLearner(params, settings, seed=0)
    run = harness.train_on_simple_env(
        settings, continuous=True, seed=0, max_trainer_steps=300, learner=first, results_dir=tmp_path
    )
    assert run.trainer.steps >= 300 and run.trainer.updates > 0

    second = SACLearner(params, settings, seed=1)
    restored = Checkpointer(tmp_path / harness.BEHAVIOR / CHECKPOINTS_DIR, second, settings.keep_checkpoints).restore_latest()
    assert restored == (run.trainer.steps, run.trainer.policy_version)
    assert int(second.q_optimizer.iterations.numpy()) == int(first.q_optimizer.iterations.numpy()) > 0
    assert int(second.policy_optimizer.iterations.numpy()) == int(first.policy_optimizer.iterations.numpy())
    np.testing.assert_array_equal(second.log_alpha.numpy(), first.log_alpha.numpy())
    for mine, theirs in zip(second.policy.trainable_variables, first.policy.trainable_variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert second.replay.num_experiences == first.replay.num_experiences > 0
    assert sorted(second.replay) == sorted(first.replay)
    for key in first.replay:
        np.testing.assert_array_equal(second.replay[key].data, first.replay[key].data)

    # A resumed loop continues above the first run's versions and steps.
    topic: TrajectoryTopic = TrajectoryTopic("trajectories/Simple1D")
    policies: PolicyTopic = PolicyTopic("policies/Simple1D")
    loop = TrainerLoop(
        harness.BEHAVIOR,
        SACLearner(params, settings, seed=2),
        topic.subscribe("trainer"),
        policies,
        dataclasses.replace(settings, max_steps=run.trainer.steps),
        results_dir=tmp_path,
        run_started_at=0.0,
        resume=True,
    )
    result = loop.run()
    assert result.resumed_from == run.trainer.steps
    assert policies.highest_version > run.trainer.policy_version
