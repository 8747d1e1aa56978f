"""RND (``trainer.reward_signals.rnd``): the error by hand, the reward falls on seen states and stays high on new
ones, the target never moves, and it trains inside PPO and SAC under ML-Agents' tags."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from common.config import (
    BehaviorSettings,
    NetworkSettings,
    NotSupportedKeyError,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    RNDSettings,
    SACHyperparameters,
    TrainerType,
    parse_config,
)
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from trainer.reward_signals import RNDSignal, SignalBatch, make_reward_signals
from trainer.reward_signals.rnd import prediction_errors
from trainer.summaries import RND_LOSS, RND_REWARD, RND_VALUE_ESTIMATE

SMALL = NetworkSettings(hidden_units=16, num_layers=2)
PARAMS = BrainParameters("Explorer", (ObservationSpec((4,), np.dtype(np.float32)),), ActionSpec(0, (3,)))


def _batch(center: float, n: int = 32, seed: int = 0) -> SignalBatch:
    rng = np.random.default_rng(seed)
    obs = (center + 0.05 * rng.normal(size=(n, 4))).astype(np.float32)
    zeros = np.zeros(n, np.float32)
    return SignalBatch((obs,), (obs,), np.zeros((n, 0), np.float32), np.ones((n, 1), np.int32), zeros, zeros)


def test_prediction_error_by_hand() -> None:
    errors = prediction_errors(tf.constant([[1.0, 2.0], [0.0, 0.0]]), tf.constant([[0.0, 0.0], [3.0, 4.0]]))
    np.testing.assert_allclose(errors.numpy(), [5.0, 25.0])


def test_reward_falls_on_seen_states_and_stays_high_on_new_ones() -> None:
    tf.keras.utils.set_random_seed(0)
    rnd = RNDSignal(RNDSettings(learning_rate=1e-3, network_settings=SMALL), PARAMS)
    seen, novel = _batch(1.0), _batch(-3.0, seed=1)
    before_seen, before_novel = rnd.rewards(seen).mean(), rnd.rewards(novel).mean()
    target = [w.numpy().copy() for w in rnd.target.trainable_variables]
    for visit in range(200):
        stats = rnd.update(_batch(1.0, seed=100 + visit))
    assert set(stats) == {RND_LOSS}
    after_seen, after_novel = rnd.rewards(seen).mean(), rnd.rewards(novel).mean()
    assert after_seen < 0.1 * before_seen, (before_seen, after_seen)
    assert after_novel > 10 * after_seen, (after_novel, after_seen)
    assert after_novel > 0.3 * before_novel, (before_novel, after_novel)  # new states keep most of their reward
    for before, now in zip(target, rnd.target.trainable_variables, strict=True):
        np.testing.assert_array_equal(before, now.numpy())  # the target is never trained


def test_strength_scales_the_reward_and_done_is_ignored() -> None:
    tf.keras.utils.set_random_seed(1)
    weak = RNDSignal(RNDSettings(strength=0.01, network_settings=SMALL), PARAMS)
    raw = np.asarray(weak._errors(_batch(0.0)))
    np.testing.assert_allclose(weak.rewards(_batch(0.0)), 0.01 * raw, rtol=1e-6)
    assert weak.ignore_done and (weak.reward_tag, weak.value_tag) == (RND_REWARD, RND_VALUE_ESTIMATE)


def test_mlagents_keys_parse_and_normalize_is_refused() -> None:
    rnd = {"gamma": 0.99, "strength": 0.01, "network_settings": {"hidden_units": 64, "num_layers": 3}, "learning_rate": 1e-4}
    options = parse_config({"behaviors": {"Pyramids": {"reward_signals": {"extrinsic": {}, "rnd": rnd}}}})
    settings = options.behaviors["Pyramids"].reward_signals[RewardSignalType.RND]
    assert settings == RNDSettings(gamma=0.99, strength=0.01, network_settings=NetworkSettings(hidden_units=64, num_layers=3))
    assert RNDSettings().learning_rate == 1e-4  # ML-Agents' default
    with pytest.raises(NotSupportedKeyError, match=r"reward_signals\.rnd\.network_settings\.normalize"):
        make_reward_signals(PARAMS, {RewardSignalType.RND: RNDSettings(network_settings=NetworkSettings(normalize=True))})


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_rnd_trains_in_the_learners_under_mlagents_tags(algorithm: str) -> None:
    from tests.unit.test_reward_signals import BEHAVIOR, simple_brain_parameters, trajectories
    from trainer.ppo import PPOLearner
    from trainer.sac import SACLearner

    signals = {
        RewardSignalType.EXTRINSIC: RewardSignalSettings(),
        RewardSignalType.RND: RNDSettings(strength=0.5, network_settings=SMALL),
    }
    params = simple_brain_parameters(BEHAVIOR, False)
    learner: PPOLearner | SACLearner
    if algorithm == "ppo":
        hyper = PPOHyperparameters(batch_size=8, buffer_size=32, num_epoch=2)
        settings = BehaviorSettings(hyperparameters=hyper, network_settings=SMALL, reward_signals=signals)
        learner = PPOLearner(params, settings, seed=0, warm_up=False)
        learner.add_trajectories(trajectories(False, 32))
    else:
        sac = SACHyperparameters(batch_size=8, buffer_size=200)
        settings = BehaviorSettings(
            trainer_type=TrainerType.SAC, hyperparameters=sac, network_settings=SMALL, reward_signals=signals
        )
        learner = SACLearner(params, settings, seed=0, jit_compile=False)
        learner.add_trajectories(trajectories(False, 16))
    assert learner.ready_to_update()
    metrics = learner.update()
    assert RND_LOSS in metrics and RND_REWARD in metrics, sorted(metrics)
    if algorithm == "ppo":
        assert RND_VALUE_ESTIMATE in metrics, sorted(metrics)
