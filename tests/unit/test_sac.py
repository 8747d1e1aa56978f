"""trainer.sac: the maths against hand formulas and the processor, replay rules, update ratio, export, state."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

import processor.inference as inference
from common.config import (
    ActivationType,
    BehaviorSettings,
    ConfigKeyError,
    GAILSettings,
    NetworkSettings,
    NotSupportedKeyError,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    ScheduleType,
    TrainerType,
)
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.trajectory import DONE, REWARDS, Trajectory, TrajectoryId
from processor.inference import Policy
from trainer.networks import swish
from trainer.sac import (
    TANH_LOG_EPSILON,
    SACBatch,
    SACLearner,
    polyak_average,
    soft_q_target,
    soft_state_value,
    squashed_gaussian_sample,
)

F32 = np.dtype(np.float32)
OBS = (ObservationSpec((3,), F32), ObservationSpec((2,), F32))
CONTINUOUS = BrainParameters("Walker", OBS, ActionSpec(2))
DISCRETE = BrainParameters("Chooser", OBS, ActionSpec(0, (3, 2)))
HYBRID = BrainParameters("Both", OBS, ActionSpec(1, (3,)))
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def sac_settings(normalize: bool = False, **hyper: object) -> BehaviorSettings:
    values: dict[str, object] = {"batch_size": 8, "buffer_size": 1000, "buffer_init_steps": 0, **hyper}
    return BehaviorSettings(
        trainer_type=TrainerType.SAC,
        hyperparameters=SACHyperparameters(**values),  # type: ignore[arg-type]
        network_settings=NetworkSettings(hidden_units=16, num_layers=2, normalize=normalize),
    )


def make_learner(brain: BrainParameters, settings: BehaviorSettings, seed: int = 0) -> SACLearner:
    """Without XLA: compiling costs more than the few gradient steps a unit test runs."""
    return SACLearner(brain, settings, seed=seed, jit_compile=False)


def make_trajectory(
    brain: BrainParameters,
    length: int,
    seed: int = 0,
    done: bool = False,
    interrupted: bool = False,
    rewards: np.ndarray | None = None,
    masked: bool = False,
) -> Trajectory:
    """A trajectory of random rows; ``masked`` forbids option 0 of every branch on every step."""
    rng = np.random.default_rng(seed)
    spec = brain.action_spec
    c, branches = spec.continuous_size, spec.discrete_branches
    mask = np.ones((length, spec.mask_width), bool) if branches else None
    if mask is not None and masked:
        mask[:, np.cumsum((0, *branches[:-1]))] = False
    discrete = np.stack([rng.integers(1 if masked else 0, n, length) for n in branches], axis=1) if branches else None
    done_flags = np.zeros(length, bool)
    done_flags[-1] = done
    return Trajectory(
        id=TrajectoryId("session", 0, seed),
        behavior_name=brain.behavior_name,
        obs=[rng.standard_normal((length, *o.shape)).astype(np.float32) for o in brain.observation_specs],
        next_obs=[rng.standard_normal(o.shape).astype(np.float32) for o in brain.observation_specs],
        continuous_actions=np.tanh(rng.standard_normal((length, c))).astype(np.float32),
        discrete_actions=np.zeros((length, 0), np.int32) if discrete is None else discrete.astype(np.int32),
        continuous_log_probs=np.zeros((length, c), np.float32),
        discrete_log_probs=np.zeros((length, len(branches)), np.float32),
        prev_continuous_actions=np.zeros((length, c), np.float32),
        prev_discrete_actions=np.zeros((length, len(branches)), np.int32),
        action_mask=mask,
        rewards=rng.standard_normal(length).astype(np.float32) if rewards is None else rewards.astype(np.float32),
        done=done_flags,
        policy_versions=np.zeros(length, np.int64),
        done_reached=done,
        interrupted=interrupted,
    )


class Updated(NamedTuple):
    learner: SACLearner
    before: dict[str, np.ndarray]
    """``variables_of`` the learner before its update."""
    metrics: Mapping[str, float]


@pytest.fixture(scope="module")
def continuous_updated() -> Updated:
    """A continuous learner with normalisation, updated once on 40 rows (32 gradient steps)."""
    learner = make_learner(CONTINUOUS, sac_settings(normalize=True, init_entcoef=0.5), seed=3)
    learner.add_trajectories([make_trajectory(CONTINUOUS, 40, seed=1, done=True)])
    before = variables_of(learner)
    return Updated(learner, before, learner.update())


@pytest.fixture
def continuous_learner(continuous_updated: Updated) -> SACLearner:
    return continuous_updated.learner


def variables_of(learner: SACLearner) -> dict[str, np.ndarray]:
    """Every variable reachable from the checkpoint objects, by object path (optimiser slots included)."""
    values = {}
    for name, obj in learner.checkpoint_objects().items():
        if isinstance(obj, tf.random.Generator):
            variables = [obj.state]
        elif isinstance(obj, tf.Variable):
            variables = [obj]
        else:
            variables = list(obj.variables)  # type: ignore[attr-defined]
        for i, v in enumerate(variables):
            values[f"{name}/{i}"] = np.array(v.numpy())
    return values


# -- the maths ---------------------------------------------------------------------------------


def test_tanh_correction_matches_the_processor_formula() -> None:
    assert TANH_LOG_EPSILON == inference.TANH_LOG_EPSILON
    mean = np.array([[0.0, 1.5, -3.0, 0.2, 4.0, -0.5]], np.float32)
    log_std = np.array([[0.0, -1.0, 0.5, -2.0, 1.0, 0.3]], np.float32)
    noise = np.array([[0.3, -1.2, 2.0, 0.0, 6.0, -9.0]], np.float32)  # the last two saturate tanh
    actions, log_probs = (t.numpy() for t in squashed_gaussian_sample(mean, log_std, noise))
    u = mean + np.exp(log_std) * noise
    a = np.tanh(u.astype(np.float64)).astype(np.float32)  # the correctly rounded action
    a64 = a.astype(np.float64)  # processor.inference: 1 - a^2 in float64 from the float32 action
    expected = -0.5 * noise.astype(np.float64) ** 2 - log_std - HALF_LOG_2PI - np.log(1 - a64 * a64 + 1e-6)
    np.testing.assert_array_equal(actions, a)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4, atol=1e-4)


def test_log_probs_agree_with_what_the_processor_stores(continuous_learner: SACLearner) -> None:
    policy = Policy.from_update(continuous_learner.export_policy(1, 0))
    obs = [np.random.default_rng(5).standard_normal((64, *o.shape)).astype(np.float32) for o in OBS]
    acted = policy.act(obs, None, np.random.default_rng(11))
    outputs = policy.forward(obs)
    noise = np.random.default_rng(11).standard_normal(outputs["mean"].shape, dtype=np.float32)  # the processor's draw
    actions, log_probs = squashed_gaussian_sample(outputs["mean"], outputs["log_std"], noise)
    np.testing.assert_allclose(acted.continuous_actions, actions.numpy(), atol=1e-6)
    np.testing.assert_allclose(acted.continuous_log_probs, log_probs.numpy(), rtol=1e-4, atol=1e-4)


def test_soft_value_and_target_by_hand() -> None:
    # One row, branches of 2 and 1 options; alpha_b = (0.5, 2.0), alpha_c = 0.1, two continuous dims.
    q = np.array([[1.0, 3.0, 5.0]], np.float32)
    probs = np.array([[0.25, 0.75, 1.0]], np.float32)
    g = np.array([[1, 0], [1, 0], [0, 1]], np.float32)
    log_probs = np.log(probs)
    continuous = np.array([[-0.5, 0.2]], np.float32)
    value = soft_state_value(q, probs, log_probs, continuous, g, 0.1, np.array([0.5, 2.0], np.float32)).numpy()
    entropy_0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    expected = (0.25 * 1 + 0.75 * 3 + 5) / 2 + 0.5 * entropy_0 - 0.1 * (-0.3)
    np.testing.assert_allclose(value, [expected], rtol=1e-6)
    target = soft_q_target(
        np.array([1.0, 1.0], np.float32), np.array([0.0, 1.0], np.float32), np.array([2.0, 2.0], np.float32), 0.9
    )
    np.testing.assert_allclose(target.numpy(), np.array([1.0 + 0.9 * 2.0, 1.0]))


def test_polyak_average_and_the_target_update(continuous_learner: SACLearner) -> None:
    online, target = np.array([1.0, 3.0], np.float32), np.array([5.0, -1.0], np.float32)
    np.testing.assert_allclose(np.asarray(polyak_average(online, target, 0.25)), np.array([4.0, 0.0]))
    learner, tau = continuous_learner, continuous_learner.settings.hyperparameters.tau
    targets_before = [v.numpy().copy() for v in learner._target_vars]
    learner.add_trajectories([make_trajectory(CONTINUOUS, 1, seed=2)])  # one experience: one gradient step
    iterations = int(learner.q_optimizer.iterations.numpy())
    learner.update()
    assert int(learner.q_optimizer.iterations.numpy()) == iterations + 1
    for online, target, before in zip(learner._q_vars, learner._target_vars, targets_before, strict=True):
        np.testing.assert_allclose(target.numpy(), tau * online.numpy() + (1 - tau) * before, rtol=1e-5, atol=1e-7)


# -- replay rows and the update ratio --------------------------------------------------------


def test_true_terminal_is_done_and_interrupted_last_step_is_not() -> None:
    learner = make_learner(CONTINUOUS, sac_settings(), seed=0)
    trajectories = [
        make_trajectory(CONTINUOUS, 3, seed=1, done=True),  # terminated
        make_trajectory(CONTINUOUS, 3, seed=2, done=True, interrupted=True),  # max_reached
        make_trajectory(CONTINUOUS, 2, seed=3, interrupted=True),  # flushed at session end
        make_trajectory(CONTINUOUS, 2, seed=4),  # time_horizon cut
    ]
    assert learner.add_trajectories(trajectories) == 10
    np.testing.assert_array_equal(learner.replay[DONE].data, [0, 0, 1, 0, 0, 0, 0, 0, 0, 0])


def test_rewards_are_scaled_by_the_extrinsic_strength() -> None:
    base = sac_settings()
    signals = {RewardSignalType.EXTRINSIC: RewardSignalSettings(strength=0.5)}
    settings = BehaviorSettings(
        trainer_type=TrainerType.SAC,
        hyperparameters=base.hyperparameters,
        network_settings=base.network_settings,
        reward_signals=signals,
    )
    learner = make_learner(CONTINUOUS, settings)
    learner.add_trajectories([make_trajectory(CONTINUOUS, 3, rewards=np.array([2.0, -4.0, 1.0]))])
    np.testing.assert_array_equal(learner.replay[REWARDS].data, [1.0, -2.0, 0.5])


def test_an_over_full_replay_buffer_keeps_its_newest_80_percent() -> None:
    learner = make_learner(CONTINUOUS, sac_settings(buffer_size=10), seed=0)
    learner.add_trajectories([make_trajectory(CONTINUOUS, 6, rewards=np.arange(6.0))])
    learner.add_trajectories([make_trajectory(CONTINUOUS, 4, rewards=np.arange(6.0, 10.0))])
    assert learner.replay.num_experiences == 10  # at capacity: nothing dropped yet
    assert learner.add_trajectories([make_trajectory(CONTINUOUS, 2, rewards=np.arange(10.0, 12.0))]) == 2
    np.testing.assert_array_equal(learner.replay[REWARDS].data, np.arange(4.0, 12.0))
    assert int(learner.steps.numpy()) == 12


def test_ready_to_update_waits_for_buffer_init_steps_then_follows_steps_per_update() -> None:
    learner = make_learner(CONTINUOUS, sac_settings(batch_size=4, buffer_init_steps=20, steps_per_update=2.0), seed=0)
    batch_sizes: list[int] = []

    def counting_step(batch: SACBatch) -> dict[str, tf.Tensor]:  # the ratio is under test, not the maths
        batch_sizes.append(len(batch.rewards))
        return {"Losses/Q1 Loss": tf.constant(0.0)}

    learner._gradient_step = counting_step  # type: ignore[assignment,method-assign]
    learner.add_trajectories([make_trajectory(CONTINUOUS, 20, seed=1)])
    assert not learner.ready_to_update()  # warm-up rows in, nothing earned yet
    assert learner.update() == {}
    learner.add_trajectories([make_trajectory(CONTINUOUS, 1, seed=2)])
    assert not learner.ready_to_update()  # half a gradient step earned
    learner.add_trajectories([make_trajectory(CONTINUOUS, 1, seed=3)])
    assert learner.ready_to_update()
    assert set(learner.update()) == {"Losses/Q1 Loss", "Policy/Learning Rate", "Policy/Extrinsic Reward"}
    assert batch_sizes == [4]
    assert not learner.ready_to_update()
    learner.add_trajectories([make_trajectory(CONTINUOUS, 11, seed=4)])  # 5.5 steps' worth: 5 now, 0.5 kept
    learner.update()
    assert batch_sizes == [4] * 6
    assert float(learner.update_credit.numpy()) == pytest.approx(1.0)
    learner.add_trajectories([make_trajectory(CONTINUOUS, 1, seed=5)])  # the kept half and a new half
    learner.update()
    assert len(batch_sizes) == 7 and float(learner.update_credit.numpy()) == pytest.approx(0.0)


def test_linear_learning_rate_decays_over_max_steps() -> None:
    settings = dataclasses.replace(sac_settings(learning_rate_schedule=ScheduleType.LINEAR), max_steps=100)
    learner = make_learner(CONTINUOUS, settings)
    learner._gradient_step = lambda batch: {"Losses/Q1 Loss": tf.constant(0.0)}  # type: ignore[assignment,method-assign]
    learner.add_trajectories([make_trajectory(CONTINUOUS, 25, seed=1)])
    assert learner.update()["Policy/Learning Rate"] == pytest.approx(3e-4 * 0.75)
    assert float(learner.q_optimizer.learning_rate.numpy()) == pytest.approx(3e-4 * 0.75)


def test_settings_the_sac_learner_cannot_honour_are_refused() -> None:
    base = sac_settings()
    vail = {
        RewardSignalType.GAIL: GAILSettings(demo_path="demo", use_vail=True),
        RewardSignalType.EXTRINSIC: RewardSignalSettings(),
    }
    with pytest.raises(NotSupportedKeyError, match=r"reward_signals\.gail\.use_vail"):
        make_learner(CONTINUOUS, dataclasses.replace(base, reward_signals=vail))
    with pytest.raises(ConfigKeyError, match="reward_signals"):
        make_learner(CONTINUOUS, dataclasses.replace(base, reward_signals={}))
    with pytest.raises(ConfigKeyError, match=r"hyperparameters\.buffer_size"):
        make_learner(CONTINUOUS, sac_settings(batch_size=64, buffer_size=32))


def test_warm_up_needs_a_full_batch_too() -> None:
    learner = make_learner(DISCRETE, sac_settings(batch_size=16, buffer_init_steps=4), seed=0)
    learner.add_trajectories([make_trajectory(DISCRETE, 15, seed=1)])
    assert not learner.ready_to_update()
    learner.add_trajectories([make_trajectory(DISCRETE, 3, seed=2)])  # 16 rows reached, then 2 more
    assert float(learner.update_credit.numpy()) == 2.0 and learner.ready_to_update()


# -- updates and export ------------------------------------------------------------------------

EXPECTED_KEYS = {
    "Losses/Q1 Loss",
    "Losses/Q2 Loss",
    "Losses/Policy Loss",
    "Losses/Entropy Coefficient Loss",
    "Policy/Entropy",
    "Policy/Entropy Coeff",
    "Policy/Learning Rate",
    "Policy/Extrinsic Reward",  # ML-Agents' tag; SAC's sampled minibatches' mean (trainer.summaries.EXTRINSIC_REWARD)
}


def check_update(
    learner: SACLearner, before: Mapping[str, np.ndarray], metrics: Mapping[str, float], frozen_kinds: tuple[int, ...] = ()
) -> None:
    """Every network and entropy coefficient moved (but those of ``frozen_kinds``), and the metric keys are ML-Agents'."""
    spec = learner.brain_parameters.action_spec
    extra = ({"Policy/Continuous Entropy Coeff"} if spec.continuous_size else set()) | (
        {"Policy/Discrete Entropy Coeff"} if spec.discrete_branches else set()
    )
    assert set(metrics) == EXPECTED_KEYS | extra
    assert all(np.isfinite(v) for v in metrics.values())
    assert metrics["Policy/Learning Rate"] == pytest.approx(3e-4)
    after = variables_of(learner)
    for prefix in ("policy", "q1", "q2", "target_q1", "target_q2"):
        assert any(not np.array_equal(before[k], after[k]) for k in before if k.startswith(prefix + "/")), prefix
    kinds = int(spec.continuous_size > 0) + len(spec.discrete_branches)  # [continuous, branch 0, ...]
    assert learner.log_alpha.shape == (kinds,)
    moved = ~np.isclose(learner.log_alpha.numpy(), math.log(0.5), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(moved, [k not in frozen_kinds for k in range(kinds)])


def test_one_continuous_update_changes_every_network_and_reports_metrics(continuous_updated: Updated) -> None:
    check_update(*continuous_updated)


# Masked, branch 1 of DISCRETE (2 options) has one allowed option: no entropy to tune, its coefficient stays.
@pytest.mark.parametrize(
    ("brain", "jit_compile", "frozen_kinds"),
    [(DISCRETE, True, (1,)), (HYBRID, False, ())],
    ids=["discrete-masked-xla", "hybrid-masked"],
)
def test_one_masked_update_changes_every_network_and_reports_metrics(
    brain: BrainParameters, jit_compile: bool, frozen_kinds: tuple[int, ...]
) -> None:
    learner = SACLearner(brain, sac_settings(init_entcoef=0.5), seed=1, jit_compile=jit_compile)
    learner.add_trajectories([make_trajectory(brain, 12, seed=2, done=True, masked=True)])
    before = variables_of(learner)
    check_update(learner, before, learner.update(), frozen_kinds)
    assert int(learner.q_optimizer.iterations.numpy()) == 4  # 12 rows, batch 8: 4 earned


@pytest.mark.parametrize(
    ("activation", "function"), [(None, swish), (ActivationType.RELU, tf.nn.relu)], ids=["default-swish", "relu"]
)
def test_activation_is_the_hidden_layers_of_the_policy_and_every_critic(
    activation: ActivationType | None, function: object
) -> None:
    """SAC's ``activation`` (stepstream's key; swish, ML-Agents', unless set: SB3's SAC uses relu)."""
    hyper = {} if activation is None else {"activation": activation}
    learner = make_learner(CONTINUOUS, sac_settings(**hyper))
    for network in (learner.policy, learner.q1, learner.q2, learner.target_q1, learner.target_q2):
        assert [layer.activation for layer in network.body.layers] == [function, function]


@pytest.mark.parametrize("use_sde", [False, True], ids=["white-noise", "gsde"])
def test_a_fixed_entropy_coefficient_stays_while_every_network_trains(use_sde: bool) -> None:
    """``learn_entcoef: false`` (SB3's fixed ``ent_coef``): the networks update, the coefficients do not."""
    learner = make_learner(HYBRID, sac_settings(init_entcoef=0.5, learn_entcoef=False, use_sde=use_sde), seed=1)
    learner.add_trajectories([make_trajectory(HYBRID, 12, seed=2, done=True)])
    before = variables_of(learner)
    check_update(learner, before, learner.update(), frozen_kinds=(0, 1))


@pytest.mark.parametrize("brain", [CONTINUOUS, HYBRID], ids=["continuous-normalized", "hybrid"])
def test_export_loads_in_the_processor_and_matches_the_network(brain: BrainParameters) -> None:
    learner = make_learner(brain, sac_settings(normalize=True), seed=4)
    learner.add_trajectories([make_trajectory(brain, 30, seed=5)])  # moves the normaliser off (0, 1)
    update = learner.export_policy(7, 30)
    assert (update.version, update.trainer_step, update.artifact.tanh_squash) == (7, 30, True)
    assert list(update.artifact.action_spec.discrete_branches) == list(brain.action_spec.discrete_branches)
    assert len(update.artifact.normalizers) == len(OBS)
    policy = Policy.from_update(update)
    obs = [np.random.default_rng(6).standard_normal((5, *o.shape)).astype(np.float32) * 3 for o in OBS]
    processed = policy.forward(obs)
    expected = learner.policy(*(n.normalize(o) for n, o in zip(learner.normalizers, obs, strict=True)))
    assert set(processed) == set(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(processed[key], value.numpy(), rtol=1e-4, atol=1e-5)


# -- saved state -------------------------------------------------------------------------------


def test_replay_buffer_round_trips_through_save_and_load_extra(tmp_path: Path) -> None:
    learner = make_learner(DISCRETE, sac_settings(save_replay_buffer=True), seed=0)
    learner.add_trajectories(
        [make_trajectory(DISCRETE, 9, seed=1, done=True, masked=True), make_trajectory(DISCRETE, 4, seed=2)]
    )
    learner.save_extra(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay_buffer.hdf5"]
    restored = make_learner(DISCRETE, sac_settings(save_replay_buffer=True), seed=1)
    restored.load_extra(tmp_path)
    assert restored.replay.num_experiences == 13
    assert sorted(restored.replay) == sorted(learner.replay)
    for key in learner.replay:
        np.testing.assert_array_equal(restored.replay[key].data, learner.replay[key].data)
        assert restored.replay[key].data.dtype == learner.replay[key].data.dtype
    fresh = make_learner(DISCRETE, sac_settings(save_replay_buffer=True), seed=1)
    fresh.load_extra(tmp_path / "missing")  # not an error
    assert fresh.replay.num_experiences == 0


def test_without_save_replay_buffer_nothing_is_written(tmp_path: Path) -> None:
    learner = make_learner(CONTINUOUS, sac_settings(), seed=0)
    learner.add_trajectories([make_trajectory(CONTINUOUS, 3)])
    learner.save_extra(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_round_trip(continuous_learner: SACLearner, tmp_path: Path) -> None:
    source = continuous_learner
    path = tf.train.Checkpoint(**source.checkpoint_objects()).save(str(tmp_path / "ckpt"))
    restored = make_learner(CONTINUOUS, sac_settings(normalize=True), seed=99)
    assert not np.allclose(restored.policy.trainable_variables[0].numpy(), source.policy.trainable_variables[0].numpy())
    status = tf.train.Checkpoint(**restored.checkpoint_objects()).restore(path)
    status.assert_existing_objects_matched()
    expected, actual = variables_of(source), variables_of(restored)
    assert expected.keys() == actual.keys()
    for key in expected:
        np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)
    assert int(restored.q_optimizer.iterations.numpy()) == int(source.q_optimizer.iterations.numpy()) > 0
    np.testing.assert_array_equal(restored.log_alpha.numpy(), source.log_alpha.numpy())
    assert source.log_alpha.numpy()[0] != pytest.approx(math.log(0.5))  # it did move before the save
    assert int(restored.steps.numpy()) == int(source.steps.numpy())


def test_same_seed_same_networks_different_seed_different() -> None:
    a, b, c = (make_learner(DISCRETE, sac_settings(), seed=s) for s in (5, 5, 6))
    first = a.q1.trainable_variables[0].numpy()
    np.testing.assert_array_equal(first, b.q1.trainable_variables[0].numpy())
    assert not np.array_equal(first, c.q1.trainable_variables[0].numpy())


def test_the_gradient_step_is_traced_beside_the_first_take_in_and_the_update_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm-up (trainer.warm_up) traces the gradient step in a thread of its own while the replay buffer fills;
    the update then runs on that one trace, and a failed trace fails the update."""
    learner = make_learner(CONTINUOUS, sac_settings(batch_size=4))
    assert learner._gradient_step.experimental_get_tracing_count() == 0
    learner.add_trajectories([make_trajectory(CONTINUOUS, 8, seed=1)])
    assert learner.ready_to_update()
    assert math.isfinite(learner.update()["Losses/Q1 Loss"])
    assert learner._gradient_step.experimental_get_tracing_count() == 1 and learner._warm_up.thread is None

    broken = make_learner(CONTINUOUS, sac_settings(batch_size=4))

    def fails(*unused_args: object) -> None:
        raise ValueError("no graph today")

    monkeypatch.setattr(broken._warm_up, "_trace", fails)
    broken.add_trajectories([make_trajectory(CONTINUOUS, 8, seed=1)])
    with pytest.raises(ValueError, match="no graph today"):
        broken.update()
