"""gSDE (PPO's and SAC's ``use_sde``): the network's distribution maths, its export, the processor's held matrices
and acting.

The maths pinned here is SB3's ``StateDependentNoiseDistribution`` (``full_std``): the noise ``latent(s) @ W``,
``W ~ N(0, sigma^2)`` [L, C], has the per-state variance ``latent^2 @ sigma^2`` (+ 1e-6). PPO's (``learn_features``
False) gives only sigma, not the features, the gradient of that std; SAC's (SB3's SAC actor: ``learn_features`` True,
the mean clipped at 2) gives the features theirs too, and squashes the action with tanh.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from common.config import (
    BehaviorSettings,
    ConfigKeyError,
    NetworkSettings,
    PPOHyperparameters,
    SACHyperparameters,
    TrainerType,
)
from common.errors import ProtocolError
from common.policy_contract import LOG_STD, MEAN, SDE_EPSILON, SDE_NOISE_SCALE
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from processor.batching import InferenceBatcher
from processor.behaviors import BehaviorRuntime
from processor.exploration import HeldNoise
from processor.inference import Policy
from trainer.export import TFLiteExporter, export_tflite, make_policy_update
from trainer.networks import PolicyNetwork, WeightInit, expln
from trainer.ppo import MiniBatch, PPOLearner, action_log_probs_and_entropy
from trainer.sac import SDE_CLIP_MEAN, SACLearner, squashed_gaussian_sample
from trainer.seeding import seeded_initializers

HIDDEN, C = 8, 2
OBS = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)


def sde_network(log_std_init: float = -1.0, use_expln: bool = False) -> PolicyNetwork:
    return PolicyNetwork([3], ActionSpec(C), HIDDEN, 2, initial_log_std=log_std_init, sde=True, use_expln=use_expln)


def test_the_per_state_std_is_the_noise_matrix_variance_through_the_latent() -> None:
    net = sde_network()
    net.log_std.assign(np.random.default_rng(0).uniform(-2, 0.5, (HIDDEN, C)).astype(np.float32))
    out = net(OBS)
    latent = net.features(OBS).numpy().astype(np.float64)
    sigma = np.exp(net.log_std.numpy().astype(np.float64))
    np.testing.assert_allclose(out[LOG_STD], 0.5 * np.log(latent**2 @ sigma**2 + SDE_EPSILON), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[SDE_NOISE_SCALE], latent[:, :, None] * sigma[None], rtol=1e-5, atol=1e-7)
    assert net.log_std.shape == (HIDDEN, C) and out[MEAN].shape == (5, C)


def test_the_noise_of_held_matrices_has_the_per_state_std() -> None:
    """latent @ (sigma * E), E standard normal: per state N(0, exp(log_std)^2), the Gaussian whose log-prob is stored."""
    out = sde_network(-0.5)(OBS[:1])
    e = np.random.default_rng(2).standard_normal((20_000, HIDDEN, C))
    noise = np.einsum("lc,klc->kc", out[SDE_NOISE_SCALE].numpy()[0], e)
    np.testing.assert_allclose(noise.std(axis=0), np.exp(out[LOG_STD].numpy()[0]), rtol=0.03)


def test_only_sigma_gets_the_gradient_of_the_std_the_features_are_detached() -> None:
    net = sde_network()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(net(OBS)[LOG_STD])
    grads = dict(zip([v.name for v in net.trainable_variables], tape.gradient(loss, net.trainable_variables), strict=True))
    assert grads["log_std:0"] is not None and np.any(grads["log_std:0"].numpy() != 0)
    body = [g for name, g in grads.items() if name != "log_std:0"]
    assert all(g is None or not np.any(g.numpy()) for g in body)


@pytest.mark.parametrize(
    ("init", "low", "high"),
    [(WeightInit.PYTORCH, 0.04, 0.1), (WeightInit.ORTHOGONAL, 0.0, 0.02), (WeightInit.GLOROT, 0.0, 0.02)],
    ids=["pytorch", "orthogonal", "glorot"],
)
def test_only_nonzero_biases_keep_gsdes_noise_where_the_normalised_observations_centre(
    init: WeightInit, low: float, high: float
) -> None:
    """Why gSDE on MountainCarContinuous-v0 (PPO) needs SB3's ``ortho_init=False`` start (``orthogonal_init: false``):
    its episodes start at the normalised observations' centre, where a zero-bias body's latent, gSDE's noise scale,
    vanishes. There, with the zoo's shapes (2 observations, 2 x 64 tanh, log_std_init -3.29), SB3's actions start
    at std ~0.065 (measured in SB3); torch.nn.Linear's start gives 0.054-0.074 over six seeds, zero biases
    0.006-0.010, and never found the flag in 20k steps (benchmarks/classic_control.py's docstring)."""
    stds = []
    for seed in range(4):
        with seeded_initializers(seed):
            net = PolicyNetwork([2], ActionSpec(1), 64, 2, initial_log_std=-3.29, activation=tf.tanh, init=init, sde=True)
        centre = np.random.default_rng(seed).normal(0.0, 0.1, (256, 2)).astype(np.float32)
        stds.append(float(np.exp(net(centre)[LOG_STD].numpy()).mean()))
    assert low <= float(np.mean(stds)) <= high, stds


def test_expln_is_exp_below_zero_and_log1p_plus_one_above() -> None:
    x = tf.constant([-3.0, -0.5, 0.0, 0.5, 4.0])
    want = [math.exp(-3.0), math.exp(-0.5), 1.0, math.log1p(0.5) + 1.0, math.log1p(4.0) + 1.0]
    np.testing.assert_allclose(expln(x).numpy(), want, rtol=1e-6)
    net = sde_network(0.5, use_expln=True)
    latent = net.features(OBS).numpy().astype(np.float64)
    sigma = math.log1p(0.5) + 1.0
    np.testing.assert_allclose(net(OBS)[LOG_STD], 0.5 * np.log(latent**2 @ np.full((HIDDEN, C), sigma**2) + 1e-6), rtol=1e-5)


def test_the_tflite_export_matches_tf_and_keeps_patching_weights() -> None:
    """Every output, including the [N, L, C] scale, after a change of sigma: exported by weight patching."""
    net = sde_network()
    exporter = TFLiteExporter(tf.function(lambda x: net(x)), [(3,)], verify_every=1)
    for shift in (0.0, 0.7):
        net.log_std.assign_add(tf.fill([HIDDEN, C], shift))
        model = exporter.export()
        policy = Policy.from_update(make_policy_update("Walker", 1, 0, model, ActionSpec(C).to_proto(), [], False, 1.0))
        got, want = policy.forward([OBS]), net(OBS)
        for name in (MEAN, LOG_STD, SDE_NOISE_SCALE):
            np.testing.assert_allclose(got[name], want[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert exporter.patches_weights  # no fall-back to a full conversion per export
    assert policy.sde_latent_size == HIDDEN


def sde_policy() -> tuple[Policy, PolicyNetwork]:
    net = sde_network(-0.5)
    model = export_tflite(tf.function(lambda x: net(x)), [(3,)])
    return Policy.from_update(make_policy_update("Walker", 1, 0, model, ActionSpec(C).to_proto(), [], False, 1.0)), net


def test_acting_with_held_matrices_adds_latent_at_w_and_stores_the_gaussian_log_prob() -> None:
    policy, _ = sde_policy()
    e = np.random.default_rng(3).standard_normal((5, HIDDEN, C)).astype(np.float32)
    out = policy.act([OBS], None, np.random.default_rng(4), noise=e)
    raw = policy.forward([OBS])
    noise = np.einsum("nlc,nlc->nc", raw[SDE_NOISE_SCALE], e)
    np.testing.assert_allclose(out.continuous_actions, raw[MEAN] + noise, rtol=1e-5, atol=1e-6)
    z = noise / np.exp(raw[LOG_STD])
    want = -0.5 * z * z - raw[LOG_STD] - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(out.continuous_log_probs, want, rtol=1e-5, atol=1e-5)


def test_held_matrices_that_do_not_fit_the_policy_are_refused() -> None:
    policy, _ = sde_policy()
    with pytest.raises(ProtocolError, match="sde_noise_scale"):
        policy.act([OBS], None, np.random.default_rng(0), noise=np.zeros((5, HIDDEN + 1, C), np.float32))


def test_each_agent_holds_one_matrix_redrawn_after_hold_steps_and_freed_at_done() -> None:
    held = HeldNoise(C, 3, np.random.default_rng(0), latent_size=HIDDEN)
    ids, no_done = np.array([4, 9]), np.zeros(2, bool)
    draws = [held.draw(ids, no_done) for _ in range(4)]
    assert draws[0].shape == (2, HIDDEN, C) and draws[0].dtype == np.float32
    np.testing.assert_array_equal(draws[2], draws[0])
    assert not np.any(draws[3] == draws[0]) and not np.any(draws[0][0] == draws[0][1])
    last = held.draw(ids, np.array([True, False]))
    assert len(held) == 1  # agent 4's matrix is freed at its done
    assert not np.any(held.draw(ids, no_done)[0] == last[0])  # its next episode draws anew
    held.clear()
    assert len(held) == 0 and held.capacity == 0


def test_the_held_matrices_follow_the_latent_size_of_the_acting_policys_artifact() -> None:
    """The processor learns L from the artifact alone: a behavior's held noise reads it off its batcher's policy."""
    batcher = InferenceBatcher("Walker", deadline_ms=2.0, rng=np.random.default_rng(0))
    held = HeldNoise(C, 3, np.random.default_rng(0), policy_latent_size=batcher.sde_latent_size)
    ids, no_done = np.array([4, 9]), np.zeros(2, bool)
    assert held.draw(ids, no_done).shape == (2, C) and held.latent_size == 0  # no policy yet: a plain eps
    policy, _ = sde_policy()
    batcher.set_policy(policy)
    draws = [held.draw(ids, no_done) for _ in range(4)]
    assert held.latent_size == HIDDEN and draws[0].shape == (2, HIDDEN, C)  # drawn anew at the change
    np.testing.assert_array_equal(draws[2], draws[0])  # then held for hold_steps
    assert not np.any(draws[3] == draws[0])
    out = policy.act([OBS[:2]], None, np.random.default_rng(1), noise=draws[3])  # they fit the policy
    assert out.continuous_actions.shape == (2, C)


@pytest.mark.parametrize("trainer_type", [TrainerType.PPO, TrainerType.SAC], ids=["ppo", "sac"])
def test_the_processor_holds_matrices_for_sde_sample_freq_or_the_time_horizon(trainer_type: TrainerType) -> None:
    hyperparameters = {TrainerType.PPO: PPOHyperparameters, TrainerType.SAC: SACHyperparameters}[trainer_type]

    def runtime(**hp: object) -> BehaviorRuntime:
        settings = BehaviorSettings(
            trainer_type=trainer_type,
            hyperparameters=hyperparameters(**hp),  # type: ignore[arg-type]
            network_settings=NetworkSettings(hidden_units=32),
            time_horizon=8,
        )
        return BehaviorRuntime.from_settings(settings)

    assert (runtime(use_sde=True).noise_hold_steps, runtime(use_sde=True).sde_latent_size) == (8, 32)
    assert runtime(use_sde=True, sde_sample_freq=4).noise_hold_steps == 4
    assert (runtime().noise_hold_steps, runtime().sde_latent_size) == (1, 0)  # off by default: white noise, no state


@pytest.mark.parametrize(
    ("hyperparameters", "hp", "match"),
    [
        (PPOHyperparameters, {"sde_sample_freq": 0}, "sde_sample_freq: must be -1 or >= 1, got 0"),
        (PPOHyperparameters, {"use_sde": True, "noise_hold_steps": 4}, "noise_hold_steps: must be 1 with use_sde"),
        (SACHyperparameters, {"sde_sample_freq": 0}, "sde_sample_freq: must be -1 or >= 1, got 0"),
        (SACHyperparameters, {"log_std_init": -21.0}, r"log_std_init: must be in \[-20, 2\], got -21.0"),
    ],
    ids=["no-steps", "two-holds", "sac-no-steps", "sac-log-std"],
)
def test_sde_keys_are_checked(hyperparameters: type, hp: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigKeyError, match=match):
        hyperparameters(**hp)


def test_ppo_recomputes_the_log_prob_the_processor_stored_for_gsde_actions() -> None:
    """The learner's log-prob of actions acted with held matrices is the stored one before any update (r = 1)."""
    brain = BrainParameters("Goal", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(C))
    settings = BehaviorSettings(
        hyperparameters=PPOHyperparameters(batch_size=8, buffer_size=32, use_sde=True, log_std_init=-0.5),
        network_settings=NetworkSettings(hidden_units=HIDDEN, num_layers=2),
    )
    learner = PPOLearner(brain, settings, warm_up=False)
    assert learner.policy.log_std is not None and learner.policy.log_std.shape == (HIDDEN, C)
    policy = Policy.from_update(learner.export_policy(1, 0))
    e = np.random.default_rng(3).standard_normal((5, HIDDEN, C)).astype(np.float32)
    out = policy.act([OBS], None, np.random.default_rng(0), noise=e)
    zeros, ones = np.zeros(5, np.float32), np.ones(5, np.float32)
    batch = MiniBatch((OBS,), out.continuous_actions, np.zeros((5, 0), np.int32), None, *[zeros] * 4, ones)
    log_probs, _ = action_log_probs_and_entropy(learner.policy(learner.normalizers[0].normalize(OBS)), batch, ())
    np.testing.assert_allclose(log_probs.numpy(), out.continuous_log_probs.sum(axis=1), rtol=1e-4, atol=1e-4)


def sac_sde_learner(log_std_init: float = -0.5) -> SACLearner:
    brain = BrainParameters("Car", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(C))
    hp = SACHyperparameters(batch_size=8, buffer_size=64, use_sde=True, log_std_init=log_std_init, use_expln=True)
    network = NetworkSettings(hidden_units=HIDDEN, num_layers=2)
    return SACLearner(brain, BehaviorSettings(trainer_type=TrainerType.SAC, hyperparameters=hp, network_settings=network))


def test_sac_acts_tanh_of_latent_at_w_and_stores_the_squashed_log_prob_its_learner_computes() -> None:
    """The processor's squashed gSDE action and log-prob are the learner's maths (``squashed_gaussian_sample``) for the
    same per-state eps: what SAC's gradient step samples from is what the agents acted with."""
    learner = sac_sde_learner()
    assert learner.policy.log_std is not None and learner.policy.log_std.shape == (HIDDEN, C)
    policy = Policy.from_update(learner.export_policy(1, 0))
    assert policy.tanh_squash and policy.sde_latent_size == HIDDEN
    e = np.random.default_rng(3).standard_normal((5, HIDDEN, C)).astype(np.float32)
    out = policy.act([OBS], None, np.random.default_rng(0), noise=e)
    raw = learner.policy(OBS)  # normalize is off: the processor gives the network the raw observations
    noise = np.einsum("nlc,nlc->nc", raw[SDE_NOISE_SCALE].numpy(), e)
    want_a, want_log_p = squashed_gaussian_sample(raw[MEAN], raw[LOG_STD], noise / np.exp(raw[LOG_STD].numpy()))
    np.testing.assert_allclose(out.continuous_actions, want_a.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.continuous_log_probs, want_log_p.numpy(), rtol=1e-4, atol=1e-4)


def test_sac_sde_std_trains_the_features_and_its_mean_is_clipped() -> None:
    learner = sac_sde_learner()
    policy = learner.policy
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(policy(OBS)[LOG_STD])
    grads = tape.gradient(loss, policy.body.trainable_variables)
    assert any(g is not None and np.any(g.numpy()) for g in grads)  # learn_features, as SB3's SAC actor
    assert policy.mean_head is not None
    policy.mean_head.bias.assign(np.full(C, 50.0, np.float32))
    np.testing.assert_array_equal(policy(OBS)[MEAN].numpy(), np.full((5, C), SDE_CLIP_MEAN, np.float32))
