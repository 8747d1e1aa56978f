"""trainer.ppo: GAE, the clipped losses and schedules on hand-computed numbers; the learner end to end.

Shapes: ``T`` steps of a trajectory, ``B`` rows, ``C`` continuous action size, ``M`` mask width.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from common.config import (
    ActivationType,
    BehaviorSettings,
    GAILSettings,
    NetworkSettings,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    ScheduleType,
    TrainerType,
)
from common.errors import ConfigError, NotSupportedYetError
from common.policy_contract import LOG_STD
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.trajectory import Trajectory, TrajectoryId
from processor.inference import Policy
from trainer import ppo as ppo_module
from trainer.networks import ValueNetwork, swish
from trainer.ppo import (
    ACTION_CLIP,
    ADVANTAGES,
    RETURNS,
    VALUE_ESTIMATES,
    MiniBatch,
    PPOLearner,
    action_log_probs_and_entropy,
    clipped_surrogate_loss,
    clipped_value_loss,
    decayed_value,
    gae,
    ppo_losses,
    squared_value_loss,
)
from trainer.reward_scaler import REWARD_CLIP, RewardScaler
from trainer.summaries import BETA, ENTROPY, EPSILON, EXTRINSIC_REWARD, LEARNING_RATE, POLICY_LOSS, VALUE_LOSS
from trainer.summaries import EXTRINSIC_VALUE_ESTIMATE as VALUE_ESTIMATE

OBS = 3
CONTINUOUS = ActionSpec(2)
DISCRETE = ActionSpec(0, (3, 2))
HYBRID = ActionSpec(1, (3,))


def brain(action_spec: ActionSpec) -> BrainParameters:
    return BrainParameters("Goal", (ObservationSpec((OBS,), np.dtype(np.float32)),), action_spec)


def settings(normalize: bool = True, max_steps: int = 1000, gamma: float = 0.9, **hyper: Any) -> BehaviorSettings:
    hp = {"batch_size": 8, "buffer_size": 32, "learning_rate": 1e-2, "num_epoch": 2, "lambd": 0.8, **hyper}
    return BehaviorSettings(
        hyperparameters=PPOHyperparameters(**hp),
        network_settings=NetworkSettings(normalize=normalize, hidden_units=8, num_layers=1),
        reward_signals={RewardSignalType.EXTRINSIC: RewardSignalSettings(gamma=gamma, strength=0.5)},
        max_steps=max_steps,
    )


def trajectory(
    spec: ActionSpec, steps: int, seed: int = 0, done_reached: bool = False, interrupted: bool = False
) -> Trajectory:
    """A trajectory with random obs/actions; the log-probs are placeholders (-1 per dimension)."""
    rng = np.random.default_rng(seed)
    c, b = spec.continuous_size, spec.num_branches
    mask = np.ones((steps, spec.mask_width), bool)
    if b:
        mask[::2, 0] = False  # every other step forbids option 0 of the first branch
    discrete = np.stack([rng.integers(1, size, steps) for size in spec.discrete_branches], 1) if b else np.zeros((steps, 0))
    return Trajectory(
        id=TrajectoryId("s", 0, seed),
        behavior_name="Goal",
        obs=[rng.normal(2.0, 3.0, (steps, OBS)).astype(np.float32)],
        next_obs=[rng.normal(2.0, 3.0, OBS).astype(np.float32)],
        continuous_actions=rng.normal(0.0, 2.0, (steps, c)).astype(np.float32),
        discrete_actions=discrete.astype(np.int32),
        continuous_log_probs=-np.ones((steps, c), np.float32),
        discrete_log_probs=-np.ones((steps, b), np.float32),
        prev_continuous_actions=np.zeros((steps, c), np.float32),
        prev_discrete_actions=np.zeros((steps, b), np.int32),
        action_mask=mask if b else None,
        rewards=rng.normal(size=steps).astype(np.float32),
        done=np.arange(steps) == steps - 1 if done_reached else np.zeros(steps, bool),
        policy_versions=np.zeros(steps, np.int64),
        done_reached=done_reached,
        interrupted=interrupted,
    )


# -- GAE -----------------------------------------------------------------------------------------


def test_gae_by_hand() -> None:
    rewards, values = np.array([1.0, 0.0, 2.0], np.float32), np.array([0.5, 0.2, 0.1], np.float32)
    # delta = r + 0.9 V' - V with V' = [0.2, 0.1, 0.4]: [0.68, -0.11, 2.26]; A_t = delta_t + 0.72 A_{t+1}
    a2 = 2.26
    a1 = -0.11 + 0.72 * a2
    a0 = 0.68 + 0.72 * a1
    np.testing.assert_allclose(gae(rewards, values, 0.4, gamma=0.9, lambd=0.8), [a0, a1, a2], rtol=1e-5)


def test_gae_lambda_0_is_the_one_step_td_error() -> None:
    rewards, values = np.array([1.0, -1.0, 0.5], np.float32), np.array([0.3, 0.6, -0.2], np.float32)
    expected = rewards + 0.95 * np.array([0.6, -0.2, 1.5]) - values
    np.testing.assert_allclose(gae(rewards, values, 1.5, gamma=0.95, lambd=0.0), expected, rtol=1e-5)


def test_gae_lambda_1_is_the_monte_carlo_return_minus_the_value() -> None:
    rewards, values = np.array([1.0, -1.0, 0.5], np.float32), np.array([0.3, 0.6, -0.2], np.float32)
    g2 = 0.5 + 0.95 * 1.5  # bootstrapped with next_value after the last step
    g1 = -1.0 + 0.95 * g2
    g0 = 1.0 + 0.95 * g1
    np.testing.assert_allclose(gae(rewards, values, 1.5, gamma=0.95, lambd=1.0), np.array([g0, g1, g2]) - values, rtol=1e-5)


@pytest.mark.parametrize(
    ("done_reached", "interrupted", "bootstraps"),
    [(True, False, False), (True, True, True), (False, False, True)],
    ids=["terminal-gets-0", "time-limit-bootstraps", "time-horizon-cut-bootstraps"],
)
def test_add_trajectories_bootstraps_all_but_true_terminals(done_reached: bool, interrupted: bool, bootstraps: bool) -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(), warm_up=False)
    traj = trajectory(CONTINUOUS, 5, done_reached=done_reached, interrupted=interrupted)
    assert learner.add_trajectories([traj]) == 5
    buffer = learner.update_buffer  # turns the trajectory into rows: the normaliser folds its observations in first
    values = learner._value_estimates((traj.obs[0],)).numpy()[:, 0]  # [T, K = 1]: extrinsic is the only head
    next_value = float(learner._value_estimates((traj.next_obs[0][None],)).numpy()[0, 0])
    assert abs(next_value) > 1e-4  # so a wrong choice would show
    expected = gae(traj.rewards * 0.5, values, next_value if bootstraps else 0.0, gamma=0.9, lambd=0.8)  # strength 0.5
    np.testing.assert_allclose(buffer[ADVANTAGES].data, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(buffer[VALUE_ESTIMATES].data[:, 0], values, rtol=1e-5)
    np.testing.assert_allclose(buffer[RETURNS].data[:, 0], expected + values, rtol=1e-4, atol=1e-6)


def test_trajectories_wait_for_the_update_and_become_rows_in_one_value_network_call(monkeypatch: pytest.MonkeyPatch) -> None:
    learner = PPOLearner(brain(DISCRETE), settings(buffer_size=32), warm_up=False)
    calls: list[int] = []
    estimates = learner._value_estimates

    def counted(obs: tuple[Any, ...]) -> Any:
        calls.append(len(obs[0]))
        return estimates(obs)

    monkeypatch.setattr(learner, "_value_estimates", counted)
    for seed in range(4):  # four take-ins of one 8-step trajectory each
        assert learner.add_trajectories([trajectory(DISCRETE, 8, seed=seed)]) == 8
    assert calls == [] and learner.trainer_step == 32 and learner.ready_to_update()
    learner.update()
    assert calls == [4 * 8 + 4]  # one call for the whole update: every obs, and each trajectory's next_obs
    assert not learner.ready_to_update() and learner.update_buffer.num_experiences == 0


def test_an_export_and_a_checkpoint_fold_the_waiting_trajectories_into_the_normaliser_and_the_step(tmp_path: Path) -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(), warm_up=False)
    normalizer = learner.normalizers[0]
    assert normalizer is not None
    learner.add_trajectories([trajectory(CONTINUOUS, 5)])
    assert normalizer.state()[2] == 0  # waiting for the update
    assert int(learner.step.numpy()) == 0  # the take-ins' count is added to the variable once per update
    learner.save_extra(tmp_path)  # the TF checkpoint written next holds the normaliser and the trainer step
    assert normalizer.state()[2] == 5 and int(learner.step.numpy()) == 5
    learner.add_trajectories([trajectory(CONTINUOUS, 3, seed=1)])
    update = learner.export_policy(1, 8)
    assert normalizer.state()[2] == 8 and update.artifact.normalizers[0].count == 8


# -- losses --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "advantage", "objective", "moves"),
    [
        (1.1, 1.0, 1.1, True),  # inside the clip range: r A
        (1.5, 1.0, 1.2, False),  # above 1 + eps with A > 0: capped at (1 + eps) A, no gradient
        (0.5, 1.0, 0.5, True),  # below 1 - eps with A > 0: the unclipped (worse) r A still counts
        (1.5, -1.0, -1.5, True),  # above 1 + eps with A < 0: r A, fully penalised
        (0.5, -1.0, -0.8, False),  # below 1 - eps with A < 0: capped at (1 - eps) A, no gradient
    ],
    ids=["inside", "above-positive", "below-positive", "above-negative", "below-negative"],
)
def test_clipped_surrogate_loss_by_hand(ratio: float, advantage: float, objective: float, moves: bool) -> None:
    log_probs = tf.Variable([math.log(ratio)])
    with tf.GradientTape() as tape:
        loss = clipped_surrogate_loss(log_probs, tf.constant([0.0]), tf.constant([advantage]), tf.constant(0.2))
    assert float(loss) == pytest.approx(-objective, rel=1e-5)
    assert (abs(float(tape.gradient(loss, log_probs)[0])) > 0) == moves


def test_clipped_surrogate_loss_averages_the_rows() -> None:
    log_probs = tf.math.log(tf.constant([1.1, 1.5, 0.5, 1.5, 0.5]))
    loss = clipped_surrogate_loss(log_probs, tf.zeros(5), tf.constant([1.0, 1.0, 1.0, -1.0, -1.0]), tf.constant(0.2))
    assert float(loss) == pytest.approx(-(1.1 + 1.2 + 0.5 - 1.5 - 0.8) / 5, rel=1e-5)


@pytest.mark.parametrize(
    ("value", "old_value", "target", "loss"),
    [
        (1.0, 0.0, 2.0, 1.8**2),  # moved 1.0 but clipped to 0.2: the clipped error (1.8) is larger, it wins
        (1.0, 0.0, 0.5, 0.5**2),  # overshoot: the unclipped error (0.5) beats the clipped one (0.3)
        (0.1, 0.0, 1.0, 0.9**2),  # inside the clip range: both are the same
        (-1.0, 0.0, -3.0, 2.8**2),  # the same on the negative side
    ],
    ids=["clipped-wins", "unclipped-wins", "inside", "negative"],
)
def test_clipped_value_loss_by_hand(value: float, old_value: float, target: float, loss: float) -> None:
    got = clipped_value_loss(tf.constant([value]), tf.constant([old_value]), tf.constant([target]), tf.constant(0.2))
    assert float(got) == pytest.approx(loss, rel=1e-5)


def test_masked_discrete_options_get_no_probability() -> None:
    logits = tf.constant([[0.0, 0.0, 0.0, 5.0, 1.0]])  # branches (3, 2)
    mask = tf.constant([[1.0, 0.0, 1.0, 1.0, 1.0]])  # option 1 of branch 0 forbidden

    def log_prob(actions: list[int]) -> tuple[float, float]:
        batch = MiniBatch((), tf.zeros([1, 0]), tf.constant([actions], tf.int32), mask, *[tf.zeros([1])] * 4, tf.ones([1]))
        log_p, entropy = action_log_probs_and_entropy({"logits": logits}, batch, (3, 2))
        return float(log_p[0]), float(entropy[0])

    second = np.log(np.exp(1.0) / (np.exp(5.0) + np.exp(1.0)))
    allowed, entropy = log_prob([2, 1])
    assert allowed == pytest.approx(math.log(0.5) + second, rel=1e-5)  # two options left: 1/2 each
    p = np.exp([5.0, 1.0]) / np.exp([5.0, 1.0]).sum()
    assert entropy == pytest.approx(math.log(2) - (p * np.log(p)).sum(), rel=1e-5)
    assert log_prob([1, 1])[0] < -1e8  # the masked option: probability ~0


# -- schedules -----------------------------------------------------------------------------------


def test_decayed_value_is_linear_to_the_minimum_then_holds() -> None:
    linear = [decayed_value(ScheduleType.LINEAR, 1.0, 0.1, 100, step) for step in (0, 25, 100, 500)]
    assert linear == pytest.approx([1.0, 0.775, 0.1, 0.1])
    assert decayed_value(ScheduleType.CONSTANT, 1.0, 0.1, 100, 50) == 1.0
    assert decayed_value(ScheduleType.LINEAR, 1.0, 0.1, 0, 0) == 0.1


def test_learner_schedules_follow_the_trainer_step() -> None:
    hyper: dict[str, Any] = {"learning_rate": 1e-3, "epsilon": 0.3, "beta": 1e-2}
    learner = PPOLearner(brain(CONTINUOUS), settings(max_steps=100, **hyper), warm_up=False)
    assert learner.schedules() == pytest.approx((1e-3, 0.3, 1e-2))
    learner.add_trajectories([trajectory(CONTINUOUS, 20), trajectory(CONTINUOUS, 30, seed=1)])
    assert learner.trainer_step == 50
    assert learner.schedules() == pytest.approx(((1e-3 - 1e-10) / 2 + 1e-10, 0.2, (1e-2 - 1e-5) / 2 + 1e-5))
    learner.set_step(1000)
    assert learner.schedules() == pytest.approx((1e-10, 0.1, 1e-5))
    # Beta and epsilon follow learning_rate_schedule unless set.
    constant = PPOLearner(
        brain(CONTINUOUS), settings(max_steps=100, learning_rate_schedule=ScheduleType.CONSTANT, **hyper), warm_up=False
    )
    constant.set_step(50)
    assert constant.schedules() == pytest.approx((1e-3, 0.3, 1e-2))


# -- the learner ---------------------------------------------------------------------------------


def test_the_warm_up_leaves_the_trainers_thread_free_and_the_update_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    traced = ppo_module.summed_over_minibatches

    def held(*args: Any) -> Any:  # the warm-up's trace stops here until the gate opens
        gate.wait()
        return traced(*args)

    monkeypatch.setattr(ppo_module, "summed_over_minibatches", held)
    learner = PPOLearner(brain(DISCRETE), settings(max_steps=96))
    # add_trajectories returns while the update graph's trace is held: the loop can go on taking trajectories
    assert learner.add_trajectories([trajectory(DISCRETE, 16, seed=s) for s in range(3)]) == 48
    assert learner._train_epoch.experimental_get_tracing_count() == 0 and learner.ready_to_update()
    gate.set()
    assert math.isfinite(learner.update()[POLICY_LOSS])  # waited for the warm-up, then trained on its one trace
    assert learner._train_epoch.experimental_get_tracing_count() == 1
    assert int(learner.optimizer.iterations.numpy()) == 2 * (48 // 8)


def test_the_first_export_traces_the_update_before_any_env_can_act(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer loop exports the first policy before any env acts: the trace runs there, on a CPU of its own,
    and no later call starts another."""
    learner = PPOLearner(brain(DISCRETE), settings(max_steps=96))
    learner.export_policy(0, 0)
    assert learner._train_epoch.experimental_get_tracing_count() == 1 and learner._warm_up.thread is None
    monkeypatch.setattr(threading, "Thread", None)  # a warm-up thread from here on would fail
    learner.add_trajectories([trajectory(DISCRETE, 16, seed=s) for s in range(3)])
    assert math.isfinite(learner.update()[POLICY_LOSS])
    assert learner._train_epoch.experimental_get_tracing_count() == 1


def test_a_failed_warm_up_fails_the_first_export(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*unused_args: Any) -> Any:
        raise ValueError("no graph today")

    monkeypatch.setattr(ppo_module, "summed_over_minibatches", broken)
    learner = PPOLearner(brain(DISCRETE), settings(max_steps=96))
    with pytest.raises(ValueError, match="no graph today"):
        learner.export_policy(0, 0)


def test_a_failed_warm_up_fails_the_next_update(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*unused_args: Any) -> Any:
        raise ValueError("no graph today")

    monkeypatch.setattr(ppo_module, "summed_over_minibatches", broken)
    learner = PPOLearner(brain(DISCRETE), settings(max_steps=96))
    learner.add_trajectories([trajectory(DISCRETE, 16, seed=s) for s in range(3)])
    with pytest.raises(ValueError, match="no graph today"):
        learner.update()


@pytest.mark.parametrize("spec", [CONTINUOUS, DISCRETE], ids=["continuous", "discrete"])
def test_update_trains_both_networks_and_reports_ml_agents_tags(spec: ActionSpec) -> None:
    learner = PPOLearner(brain(spec), settings(max_steps=96))  # warms up at its first trajectories
    assert learner._train_epoch.experimental_get_tracing_count() == 0  # nothing traced before a first export or trajectory
    assert int(learner.optimizer.iterations.numpy()) == 0 and learner.update_buffer.num_experiences == 0
    before = [v.numpy().copy() for v in (*learner.policy.trainable_variables, *learner.value.trainable_variables)]
    learner.add_trajectories([trajectory(spec, 16, seed=s, done_reached=s == 1) for s in range(3)])  # 48 rows
    learner._warm_up.wait()  # without an export first, the warm-up runs in a thread of its own (test above)
    assert learner._train_epoch.experimental_get_tracing_count() == 1  # warmed up: traced, but nothing trained yet
    assert int(learner.optimizer.iterations.numpy()) == 0
    assert learner.ready_to_update()
    metrics = learner.update()
    assert set(metrics) == {POLICY_LOSS, VALUE_LOSS, ENTROPY, LEARNING_RATE, EPSILON, BETA, VALUE_ESTIMATE, EXTRINSIC_REWARD}
    assert all(math.isfinite(v) for v in metrics.values())
    # The schedules are read at the step the buffer was filled to (48 of max_steps 96: half way).
    assert metrics[LEARNING_RATE] == pytest.approx(0.5e-2 + 0.5e-10) == float(learner.optimizer.learning_rate.numpy())
    assert (metrics[EPSILON], metrics[BETA]) == pytest.approx((0.15, (5e-3 + 1e-5) / 2))
    after = [v.numpy() for v in (*learner.policy.trainable_variables, *learner.value.trainable_variables)]
    changed = [not np.array_equal(a, b) for a, b in zip(before, after, strict=True)]
    assert all(changed), changed
    assert int(learner.optimizer.iterations.numpy()) == 2 * (48 // 8)  # num_epoch x full minibatches
    assert learner.update_buffer.num_experiences == 0 and not learner.ready_to_update()
    # Another update with another buffer length runs the same traced step, with the rate scheduled at its step (85 of
    # 96; the rate is assigned only when it changes).
    learner.add_trajectories([trajectory(spec, 37, seed=7)])
    rate = learner.update()[LEARNING_RATE]
    assert rate == pytest.approx(1e-2 * 11 / 96 + 1e-10 * 85 / 96) == float(learner.optimizer.learning_rate.numpy())
    assert learner._train_epoch.experimental_get_tracing_count() == 1


def test_first_ratio_is_one_for_what_the_exported_policy_sampled() -> None:
    """The processor's stored log-probs equal the learner's own before any update (r = 1)."""
    learner = PPOLearner(brain(HYBRID), settings(), warm_up=False)
    learner.add_trajectories([trajectory(HYBRID, 40)])  # moves the normaliser away from (0, 1)
    policy = Policy.from_update(learner.export_policy(1, 40))
    traj = trajectory(HYBRID, 16, seed=3)
    out = policy.act(traj.obs, traj.action_mask, np.random.default_rng(0))
    mask = traj.action_mask.astype(np.float32)  # type: ignore[union-attr]
    zeros, ones = np.zeros(16, np.float32), np.ones(16, np.float32)
    batch = MiniBatch((traj.obs[0],), out.continuous_actions, out.discrete_actions, mask, *[zeros] * 4, ones)
    outputs = learner.policy(learner.normalizers[0].normalize(traj.obs[0]))
    log_probs, _ = action_log_probs_and_entropy(outputs, batch, (3,))
    stored = out.continuous_log_probs.sum(axis=1) + out.discrete_log_probs.sum(axis=1)
    np.testing.assert_allclose(log_probs.numpy(), stored, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "raw"])
def test_export_policy_matches_the_policy_network(normalize: bool) -> None:
    learner = PPOLearner(brain(HYBRID), settings(normalize=normalize), warm_up=False)
    learner.add_trajectories([trajectory(HYBRID, 32)])
    rng = np.random.default_rng(0)
    for variable in learner.policy.trainable_variables:  # weights far from the small initial heads
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype(np.float32))
    update = learner.export_policy(version=3, trainer_step=32)
    assert (update.behavior_name, update.version, update.trainer_step) == ("Goal", 3, 32)
    assert (update.artifact.tanh_squash, update.artifact.clip) == (False, ACTION_CLIP)
    assert (update.artifact.action_spec.continuous_size, list(update.artifact.action_spec.discrete_branches)) == (1, [3])
    assert len(update.artifact.normalizers) == (1 if normalize else 0)
    obs = np.random.default_rng(5).normal(2.0, 3.0, (6, OBS)).astype(np.float32)
    got = Policy.from_update(update).forward([obs])
    normalized = learner.normalizers[0].normalize(obs) if normalize else obs
    expected = learner.policy(tf.constant(normalized))
    for key in ("mean", "log_std", "logits"):
        np.testing.assert_allclose(got[key], expected[key].numpy(), rtol=1e-5, atol=1e-5)


def test_checkpoint_round_trip_restores_weights_optimizer_and_step(tmp_path: Path) -> None:
    source = PPOLearner(brain(DISCRETE), settings(), seed=1, warm_up=False)
    source.add_trajectories([trajectory(DISCRETE, 32)])
    source.update()
    path = tf.train.Checkpoint(**source.checkpoint_objects()).save(str(tmp_path / "ckpt"))
    target = PPOLearner(brain(DISCRETE), settings(), seed=2, warm_up=False)
    tf.train.Checkpoint(**target.checkpoint_objects()).restore(path).assert_existing_objects_matched()
    for a, b in zip(source.policy.trainable_variables, target.policy.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(source.value.trainable_variables, target.value.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(target.optimizer.iterations.numpy()) == int(source.optimizer.iterations.numpy()) == 8
    assert target.trainer_step == 32
    np.testing.assert_array_equal(target.normalizers[0].mean.numpy(), source.normalizers[0].mean.numpy())
    assert "step" not in source.checkpoint_objects()  # the Checkpointer reserves it


def test_seeds_make_the_initial_weights_repeatable() -> None:
    a, b = (PPOLearner(brain(CONTINUOUS), settings(), seed=4, warm_up=False) for _ in range(2))
    for x, y in zip(a.policy.trainable_variables, b.policy.trainable_variables, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_rejects_what_it_cannot_train() -> None:
    sac = BehaviorSettings(trainer_type=TrainerType.SAC, hyperparameters=SACHyperparameters())
    with pytest.raises(ConfigError, match="PPO hyperparameters"):
        PPOLearner(brain(CONTINUOUS), sac)
    curious = {RewardSignalType.EXTRINSIC: RewardSignalSettings(), RewardSignalType.CURIOSITY: RewardSignalSettings()}
    with pytest.raises(NotSupportedYetError, match=r"reward_signals\.curiosity"):  # curiosity needs CuriositySettings
        PPOLearner(brain(CONTINUOUS), BehaviorSettings(reward_signals=curious))
    vail = {RewardSignalType.GAIL: GAILSettings(demo_path="unused.demo", use_vail=True)}
    with pytest.raises(NotSupportedYetError, match=r"reward_signals\.gail\.use_vail"):
        PPOLearner(brain(CONTINUOUS), BehaviorSettings(reward_signals=vail))


# -- the variants: stepstream settings (clip_value_loss, max_grad_norm, activation, orthogonal_init) -----


def one_minibatch(learner: PPOLearner, spec: ActionSpec, rows: int = 16) -> MiniBatch:
    """The learner's first ``rows`` update-buffer rows, with old values 1 below the current estimates: far outside
    epsilon, so that clipping the value loss changes it."""
    learner.add_trajectories([trajectory(spec, rows, seed=3)])
    full = MiniBatch.from_buffer(learner.update_buffer, 1, spec.discrete_branches)
    values = learner._values(full.obs).numpy()
    return full._replace(old_values=values - 1.0)


@pytest.mark.parametrize("clip", [True, False], ids=["clipped", "plain"])
def test_clip_value_loss_picks_the_value_loss_of_the_step(clip: bool) -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(clip_value_loss=clip), warm_up=False)
    batch = one_minibatch(learner, CONTINUOUS)
    values = learner._values(batch.obs)
    epsilon = tf.constant(0.2)
    clipped = float(clipped_value_loss(values, batch.old_values, batch.returns, epsilon))
    plain = float(squared_value_loss(values, batch.returns))
    assert clipped > plain + 0.1  # V_clip = V_old + 0.2 sits 0.8 below V: the clipped loss is the larger
    losses = learner._gradient_step(batch, epsilon, tf.constant(0.0))
    assert float(losses.value) == pytest.approx(clipped if clip else plain, rel=1e-6)


@pytest.mark.parametrize("max_grad_norm", [0.05, None], ids=["clipped", "unclipped"])
def test_max_grad_norm_bounds_the_applied_gradient(max_grad_norm: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = PPOLearner(brain(HYBRID), settings(max_grad_norm=max_grad_norm), warm_up=False)
    batch = one_minibatch(learner, HYBRID)
    applied: list[float] = []
    apply = ppo_module.apply_adam

    def recording(optimizer: Any, gradients: Any, variables: Any) -> None:
        applied.append(float(tf.linalg.global_norm(list(gradients))))
        apply(optimizer, gradients, variables)

    monkeypatch.setattr(ppo_module, "apply_adam", recording)
    with tf.GradientTape() as tape:  # the raw gradient of the same loss, for comparison
        outputs = learner.policy(*learner._normalized(batch.obs))
        log_probs, entropy = action_log_probs_and_entropy(outputs, batch, (3,))
        values = learner._values(batch.obs)
        total = ppo_losses(log_probs, entropy, values, batch, tf.constant(0.2), tf.constant(1e-2), False).total
    raw = float(tf.linalg.global_norm(tape.gradient(total, learner._variables)))
    assert raw > 0.2  # far above the clip of 0.05
    learner._gradient_step(batch, tf.constant(0.2), tf.constant(1e-2))
    assert applied == [pytest.approx(0.05 if max_grad_norm else raw, rel=1e-5)]


@pytest.mark.parametrize(
    ("activation", "function"),
    [(ActivationType.TANH, tf.tanh), (ActivationType.RELU, tf.nn.relu), (ActivationType.SWISH, swish)],
    ids=["tanh", "relu", "swish"],
)
def test_activation_is_the_hidden_layers_of_both_networks(activation: ActivationType, function: Any) -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(activation=activation), warm_up=False)
    x = tf.constant(np.random.default_rng(0).normal(size=(5, OBS)).astype(np.float32))
    for body in (learner.policy.body, learner.value.body):
        (layer,) = body.layers
        assert layer.activation is function
        np.testing.assert_allclose(body(x).numpy(), function(x @ layer.kernel + layer.bias).numpy(), rtol=1e-6)


@pytest.mark.parametrize("log_std_init", [0.0, -2.0], ids=["default", "narrow"])
def test_log_std_init_is_the_gaussians_initial_log_std(log_std_init: float) -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(log_std_init=log_std_init), warm_up=False)
    x = tf.zeros([4, OBS])
    np.testing.assert_allclose(learner.policy(x)[LOG_STD].numpy(), np.full([4, 2], log_std_init, np.float32))


@pytest.mark.parametrize("orthogonal", [True, False], ids=["orthogonal", "pytorch"])
def test_orthogonal_init_gives_sb3s_gains_or_pytorchs_own_start(orthogonal: bool) -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(orthogonal_init=orthogonal), warm_up=False)
    hidden = learner.policy.body.layers[0]  # [3, 8]: orthogonal rows
    mean_head = learner.policy.mean_head  # [8, 2]: orthogonal columns
    value_head = learner.value.head  # [8, 1]
    assert mean_head is not None and isinstance(learner.value, ValueNetwork)
    gram = hidden.kernel.numpy() @ hidden.kernel.numpy().T
    if orthogonal:  # gains sqrt(2) hidden, 0.01 policy head, 1 value head (SB3's MlpPolicy), zero biases
        np.testing.assert_allclose(gram, 2.0 * np.eye(OBS), atol=1e-5)
        np.testing.assert_allclose(mean_head.kernel.numpy().T @ mean_head.kernel.numpy(), 1e-4 * np.eye(2), atol=1e-9)
        assert float(np.linalg.norm(value_head.kernel.numpy())) == pytest.approx(1.0, rel=1e-5)
        assert not any(np.any(layer.bias.numpy()) for layer in (hidden, mean_head, value_head))
    else:  # SB3's ortho_init=False: torch.nn.Linear's kernels and biases, uniform in +-1/sqrt(fan_in), heads too
        assert not np.allclose(gram, np.diag(np.diag(gram)), atol=1e-3)
        for layer, fan_in in ((hidden, OBS), (mean_head, 8), (value_head, 8)):
            bound = 1.0 / math.sqrt(fan_in)
            for weights in (layer.kernel.numpy(), layer.bias.numpy()):
                assert np.all(weights != 0) and np.abs(weights).max() <= bound
        assert np.abs(hidden.kernel.numpy()).max() > 0.5 / math.sqrt(OBS)  # PyTorch's bound, not a narrower one


# -- proximal_clip (decoupled PPO) and normalize_reward -----------------------------------------------------------


@pytest.mark.parametrize("proximal", [True, False], ids=["proximal", "behaviour"])
def test_proximal_clip_centres_the_ratio_on_the_update_start(proximal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows an older policy took (placeholder log-probs, -1 per dimension): with proximal_clip the update's
    old log-probs are the current policy's and the advantages carry min(1, pi_prox / pi_behaviour)."""
    learner = PPOLearner(brain(HYBRID), settings(proximal_clip=proximal), warm_up=False)
    learner.add_trajectories([trajectory(HYBRID, 32, seed=4)])
    rows = MiniBatch.from_buffer(learner.update_buffer, 1, HYBRID.discrete_branches)
    np.testing.assert_array_equal(rows.weights, np.ones(32, np.float32))
    current = learner._log_probs(rows).numpy()
    assert np.abs(current - rows.old_log_probs).max() > 0.1  # the rows are off-policy
    seen: list[MiniBatch] = []
    minibatches = ppo_module.epoch_minibatches

    def recording(*args: Any) -> Any:
        seen.append(args[-1])
        return minibatches(*args)

    monkeypatch.setattr(ppo_module, "epoch_minibatches", recording)
    learner.update()
    (trained,) = seen
    if proximal:
        np.testing.assert_allclose(trained.old_log_probs, current, rtol=1e-5)
        expected = np.minimum(1.0, np.exp(current - rows.old_log_probs))
        np.testing.assert_allclose(trained.weights, expected, rtol=1e-5)
        assert trained.weights.min() < 1.0
    else:
        np.testing.assert_array_equal(trained.old_log_probs, rows.old_log_probs)
        np.testing.assert_array_equal(trained.weights, np.ones(32, np.float32))


def test_weights_scale_the_normalised_advantages_in_the_policy_loss() -> None:
    learner = PPOLearner(brain(CONTINUOUS), settings(), warm_up=False)
    batch = one_minibatch(learner, CONTINUOUS)
    outputs = learner.policy(*learner._normalized(batch.obs))
    log_probs, entropy = action_log_probs_and_entropy(outputs, batch, ())
    values = learner._values(batch.obs)
    eps, beta = tf.constant(0.2), tf.constant(0.0)
    full = ppo_losses(log_probs, entropy, values, batch, eps, beta, False).policy
    halved = ppo_losses(log_probs, entropy, values, batch._replace(weights=batch.weights * 0.5), eps, beta, False).policy
    assert float(halved) == pytest.approx(0.5 * float(full), rel=1e-5)


def test_reward_scaler_divides_by_the_std_of_each_agents_discounted_return() -> None:
    """-1 per step, two agents, one trajectory cut in two: the running return carries over the cut, restarts
    after the episode's end, and the scale is SB3 VecNormalize's 1 / sqrt(var(G) + 1e-8)."""
    scaler = RewardScaler(gamma=0.5)
    a1 = trajectory(DISCRETE, 2, seed=0)  # agent ("s", 0): continues in a2
    a2 = trajectory(DISCRETE, 2, seed=0, done_reached=True)
    other = Trajectory(**{**a1.__dict__, "id": TrajectoryId("s", 1, 0)})
    ones = -np.ones(2, np.float32)
    first = scaler.scale([a1, other], np.concatenate([ones, ones]))
    g1 = np.array([-1.0, -1.5, -1.0, -1.5])
    np.testing.assert_allclose(first, -1.0 / np.sqrt(g1.var() + 1e-8), rtol=1e-6)
    scaler.scale([a2], ones)  # G goes on: -1.75, -1.875; then the episode ends
    g = np.concatenate([g1, [-1.75, -1.875]])
    assert float(scaler.var.numpy()) == pytest.approx(g.var(), rel=1e-9)
    assert float(scaler.count.numpy()) == 6
    scaler.scale([a1], ones)  # restarted at 0 after done: -1, -1.5 again
    np.testing.assert_allclose(float(scaler.mean.numpy()), np.concatenate([g, [-1.0, -1.5]]).mean(), rtol=1e-9)
    tiny = RewardScaler(gamma=0.0)
    np.testing.assert_allclose(tiny.scale([a1], np.array([5.0, 5.0], np.float32)), [REWARD_CLIP, REWARD_CLIP])


@pytest.mark.parametrize("normalize_reward", [True, False], ids=["scaled", "raw"])
def test_normalize_reward_scales_only_the_extrinsic_rewards_the_returns_see(normalize_reward: bool) -> None:
    learner = PPOLearner(brain(DISCRETE), settings(normalize_reward=normalize_reward), warm_up=False)
    traj = trajectory(DISCRETE, 16, seed=5)
    learner.add_trajectories([traj])
    rewards = learner.update_buffer["signal_rewards"].data[:, 0]
    raw = traj.rewards * np.float32(0.5)  # strength 0.5
    if normalize_reward:
        returns = np.zeros(16)
        running = 0.0
        for t, r in enumerate(raw):
            running = running * 0.9 + float(r)
            returns[t] = running
        np.testing.assert_allclose(rewards, np.clip(raw / np.sqrt(returns.var() + 1e-8), -10, 10), rtol=1e-5)
        assert "reward_scaler_var" in learner.checkpoint_objects()
    else:
        np.testing.assert_array_equal(rewards, raw)
        assert not any(key.startswith("reward_scaler") for key in learner.checkpoint_objects())
