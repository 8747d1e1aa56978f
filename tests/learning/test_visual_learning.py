"""The 1-D goal task seen through a camera only (``SimpleEnv``'s image mode: uint8 ``[H, W, C]``, no vector), as
ML-Agents' own visual tests learn it: PPO with ``simple`` and ``nature_cnn`` encoders (each also with
``shared_critic``), SAC and BC, through the real
processor and trainer loop, at the thresholds and budgets of the vector tests (``test_ppo_learning``,
``test_sac_learning``, ``test_bc_learning``).

The frames are each encoder's smallest (ML-Agents' minimum side: 20 for ``simple``, 36 for ``nature_cnn``), one
channel: the goal's half bright, the agent's column grey. The configs are the vector tests' own, with
``vis_encode_type`` set.
"""

from __future__ import annotations

import dataclasses

import pytest

from common.config import BehaviorSettings, EncoderType
from envclient.simple_env import BEST_RETURN, simple_brain_parameters
from tests.learning import harness
from tests.learning.test_bc_learning import EPISODES as BC_EPISODES
from tests.learning.test_bc_learning import THRESHOLD as BC_THRESHOLD
from tests.learning.test_bc_learning import bc_settings
from tests.learning.test_ppo_learning import QUEUE_SIZE as PPO_QUEUE_SIZE
from tests.learning.test_ppo_learning import STEP_BUDGET as PPO_STEP_BUDGET
from tests.learning.test_ppo_learning import WINDOW, ppo_settings, reached
from tests.learning.test_sac_learning import TIME_HORIZON as SAC_TIME_HORIZON
from tests.learning.test_sac_learning import sac_settings
from trainer.bc import BCLearner
from trainer.encoders import MIN_RESOLUTION
from trainer.summaries import CLONING_LOSS

pytestmark = pytest.mark.learning


def frame(encoder: EncoderType) -> tuple[int, int, int]:
    side = MIN_RESOLUTION[encoder]
    return (side, side, 1)


def with_encoder(settings: BehaviorSettings, encoder: EncoderType) -> BehaviorSettings:
    network = dataclasses.replace(settings.network_settings, vis_encode_type=encoder)
    return dataclasses.replace(settings, network_settings=network)


def with_shared_critic(settings: BehaviorSettings, shared_critic: bool) -> BehaviorSettings:
    hyperparameters = dataclasses.replace(settings.hyperparameters, shared_critic=shared_critic)
    return dataclasses.replace(settings, hyperparameters=hyperparameters)


@pytest.mark.parametrize(
    ("encoder", "shared_critic"),
    [
        pytest.param(EncoderType.SIMPLE, False, id="simple"),
        pytest.param(EncoderType.NATURE_CNN, False, id="nature_cnn"),
        pytest.param(EncoderType.SIMPLE, True, id="simple-shared_critic"),
        pytest.param(EncoderType.NATURE_CNN, True, id="nature_cnn-shared_critic"),
    ],
)
def test_ppo_learns_from_pixels(encoder: EncoderType, shared_critic: bool) -> None:
    """Each encoder, with the critic's own networks (ML-Agents' default) and with ``shared_critic``."""
    budget = PPO_STEP_BUDGET[False]
    run = harness.train_on_simple_env(
        with_shared_critic(with_encoder(ppo_settings(), encoder), shared_critic),
        continuous=False,
        seed=0,
        max_trainer_steps=budget,
        should_stop=reached,
        timeout_s=600.0,
        image_shape=frame(encoder),
    )
    result = run.trainer
    last = harness.assert_stopped_at_condition(result, WINDOW)
    assert result.steps <= budget + PPO_QUEUE_SIZE * 64 and result.updates >= 2
    assert (last <= BEST_RETURN + 1e-6).all()


SAC_PIXEL_STEP_BUDGET = 3000
"""SAC's budget from pixels: at the vector test's budget at the time (1,000 steps) each variant missed the threshold in
one of two full-suite runs (last-20 means of 0.18 and -0.15 at 1,000 steps), so three times that, as PPO's pixel budget is;
the threshold is the vector test's, and a run stops as soon as it reaches it."""


# Reliable since the policy reads Q1's encoder (trainer/sac.py, POLICY_ENCODER). With a CNN of its own, 3 of 14
# runs of the two variants missed the threshold (2026-12-02; 1 of 5 in a logged rerun, where the critics fitted,
# loss ~0 and Q spread ~1, while the policy stayed near a return of 0); with Q1's encoder, 10 of 10 runs of this
# test passed both variants (load 4.8-6.5).
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_sac_learns_from_pixels(continuous: bool) -> None:
    run = harness.train_on_simple_env(
        with_encoder(sac_settings(), EncoderType.SIMPLE),
        continuous=continuous,
        seed=0,
        max_trainer_steps=SAC_PIXEL_STEP_BUDGET,
        num_envs=2,
        agents_per_env=2,
        should_stop=reached,
        timeout_s=600.0,
        image_shape=frame(EncoderType.SIMPLE),
    )
    result = run.trainer
    last = harness.assert_stopped_at_condition(result, WINDOW)
    assert result.steps <= SAC_PIXEL_STEP_BUDGET + SAC_TIME_HORIZON and result.updates >= 2
    assert (last <= BEST_RETURN + 1e-6).all()


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_bc_clones_the_expert_from_pixels(continuous: bool) -> None:
    image_shape = frame(EncoderType.SIMPLE)
    settings = with_encoder(bc_settings(), EncoderType.SIMPLE)
    learner = BCLearner(simple_brain_parameters(harness.BEHAVIOR, continuous, image_shape), settings, seed=0)
    assert learner.load_rows(harness.collect_expert_rows(continuous, 0, image_shape=image_shape)) > 400
    losses = [learner.update()[CLONING_LOSS] for _ in range(8)]
    assert losses[-1] < losses[0]
    run = harness.train_on_simple_env(
        settings,
        continuous=continuous,
        seed=0,
        learner=learner,
        num_envs=1,
        agents_per_env=BC_EPISODES,
        should_stop=lambda result: result.episodes >= BC_EPISODES,
        timeout_s=300.0,
        image_shape=image_shape,
    )
    rewards = run.episode_rewards[:BC_EPISODES]
    assert len(rewards) == BC_EPISODES
    assert sum(rewards) / BC_EPISODES > BC_THRESHOLD, rewards
    assert max(rewards) <= BEST_RETURN + 1e-6
