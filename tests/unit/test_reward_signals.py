"""trainer.reward_signals and trainer.bc_component: the maths by hand, curiosity's novelty, GAIL's discriminator,
the summary tags PPO and SAC report with them, and checkpoints that carry their networks.

Shapes: ``N`` experiences. The demonstrations are real ``.demo`` files of the 1-D task (``tests.expert_demo``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from common.config import (
    BehavioralCloningSettings,
    BehaviorSettings,
    CuriositySettings,
    GAILSettings,
    NetworkSettings,
    NotSupportedKeyError,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    TrainerType,
)
from common.demo import DemoSpecMismatchError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.trajectory import Trajectory, TrajectoryId
from envclient.simple_env import simple_brain_parameters
from tests.expert_demo import write_expert_demo
from trainer.bc_component import annealed_strength
from trainer.checkpoint import Checkpointer
from trainer.ppo import PPOLearner
from trainer.reward_signals import CuriositySignal, GAILSignal, SignalBatch
from trainer.reward_signals.base import action_features
from trainer.reward_signals.curiosity import forward_errors
from trainer.reward_signals.gail import discriminator_loss, gail_rewards, gradient_penalty
from trainer.sac import SACLearner
from trainer.summaries import (
    BC_STRENGTH,
    CURIOSITY_FORWARD_LOSS,
    CURIOSITY_INVERSE_LOSS,
    CURIOSITY_REWARD,
    CURIOSITY_VALUE_ESTIMATE,
    EXTRINSIC_REWARD,
    GAIL_EXPERT_ESTIMATE,
    GAIL_LOSS,
    GAIL_POLICY_ESTIMATE,
    GAIL_REWARD,
    GAIL_VALUE_ESTIMATE,
    PRETRAINING_LOSS,
)

BEHAVIOR = "Simple1D"
SMALL = NetworkSettings(hidden_units=16, num_layers=1)
GAIL_STEPS = 600
"""Discriminator steps: ML-Agents' gradient penalty (weight 10) slows D down; at 300 the discrete case was not there."""


@pytest.fixture(params=[False, True], ids=["discrete", "continuous"])
def continuous(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def gail_settings(demo: Path, **fields: object) -> GAILSettings:
    values: dict[str, object] = {"use_actions": True, "learning_rate": 3e-3, "network_settings": SMALL, **fields}
    return GAILSettings(demo_path=str(demo), **values)  # type: ignore[arg-type]


def random_batch(n: int, continuous: bool, seed: int = 0) -> SignalBatch:
    """``N`` transitions of a uniformly random policy on the 1-D task (goal obs, a random move, never done)."""
    rng = np.random.default_rng(seed)
    obs = rng.choice(np.array([-1.0, 1.0], np.float32), size=(n, 1))
    c = rng.uniform(-1, 1, (n, 1)).astype(np.float32) if continuous else np.zeros((n, 0), np.float32)
    d = np.zeros((n, 0), np.int32) if continuous else rng.integers(0, 2, (n, 1)).astype(np.int32)
    return SignalBatch((obs,), (obs.copy(),), c, d, np.zeros(n, np.float32), np.zeros(n, np.float32))


# -- the maths by hand ---------------------------------------------------------------------------


def test_gail_loss_reward_and_penalty_by_hand() -> None:
    expert, policy = tf.constant([0.9, 0.6]), tf.constant([0.2, 0.5])
    expected = -np.mean([math.log(0.9) + math.log(0.8), math.log(0.6) + math.log(0.5)])
    assert float(discriminator_loss(expert, policy)) == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(gail_rewards(policy).numpy(), [-math.log(0.8), -math.log(0.5)], rtol=1e-5)
    # ||(3, 4)|| = 5 -> (5 - 1)^2 = 16; ||0|| = 0 -> (0 - 1)^2 = 1 (the epsilon keeps the norm's gradient finite)
    assert float(gradient_penalty(tf.constant([[3.0, 4.0], [0.0, 0.0]]))) == pytest.approx((16 + 1) / 2, rel=1e-3)


def test_curiosity_forward_error_by_hand() -> None:
    np.testing.assert_allclose(forward_errors(tf.constant([[1.0, 2.0]]), tf.constant([[0.0, 0.0]])).numpy(), [2.5])


def test_behavioral_cloning_strength_anneals_linearly_to_zero() -> None:
    assert annealed_strength(0.5, 0, 10_000) == 0.5  # steps 0: constant
    assert annealed_strength(0.5, 100, 25) == pytest.approx(0.375)
    assert annealed_strength(0.5, 100, 100) == 0.0 and annealed_strength(0.5, 100, 500) == 0.0


# -- GAIL ----------------------------------------------------------------------------------------


def test_gail_discriminator_learns_to_tell_the_expert_from_a_random_policy(tmp_path: Path, continuous: bool) -> None:
    demo = write_expert_demo(tmp_path / "expert.demo", continuous)
    gail = GAILSignal(gail_settings(demo), simple_brain_parameters(BEHAVIOR, continuous), seed=0)
    agent = random_batch(400, continuous)
    # Half the random moves go the expert's way (the same transitions as the expert's): the wrong-way half is
    # what D can learn to tell apart.
    moves = agent.continuous_actions[:, 0] if continuous else agent.discrete_actions[:, 0] - 0.5
    wrong = agent.take(np.flatnonzero(np.sign(moves) != agent.obs[0][:, 0]))
    rng = np.random.default_rng(1)
    before = gail.estimate(gail.expert).mean() - gail.estimate(wrong).mean()
    for _ in range(GAIL_STEPS):
        stats = gail.update(agent.take(rng.integers(0, agent.size, 32)))
    assert set(stats) == {GAIL_LOSS, GAIL_POLICY_ESTIMATE, GAIL_EXPERT_ESTIMATE}
    after = gail.estimate(gail.expert).mean() - gail.estimate(wrong).mean()
    assert after > max(0.1, before + 0.1), (before, after)
    assert gail.estimate(gail.expert).mean() > gail.estimate(agent).mean()
    # The reward follows D: expert-like transitions earn more than the random policy's.
    assert gail.rewards(gail.expert).mean() > gail.rewards(wrong).mean()


def test_gail_refuses_vail_and_a_demo_of_another_spec(tmp_path: Path) -> None:
    demo = write_expert_demo(tmp_path / "expert.demo", continuous=False)
    with pytest.raises(NotSupportedKeyError, match=r"reward_signals\.gail\.use_vail"):
        GAILSignal(gail_settings(demo, use_vail=True), simple_brain_parameters(BEHAVIOR, False))
    with pytest.raises(DemoSpecMismatchError, match="actions"):
        GAILSignal(gail_settings(demo), simple_brain_parameters(BEHAVIOR, True))


def test_gail_normalize_folds_expert_rows_into_its_normaliser_and_feeds_d_normalised_observations(
    tmp_path: Path, continuous: bool
) -> None:
    demo = write_expert_demo(tmp_path / "expert.demo", continuous)
    params = simple_brain_parameters(BEHAVIOR, continuous)
    normalized = dataclasses.replace(SMALL, normalize=True)
    gail = GAILSignal(gail_settings(demo, network_settings=normalized), params, seed=0)
    normalizer = gail.discriminator.normalizer
    assert normalizer is not None and normalizer.mean.shape == (1,)  # the observation only, not action or done
    agent = random_batch(64, continuous)
    for _ in range(10):
        gail.update(agent)
    # ML-Agents' GAILRewardProvider.update folds each expert minibatch (as many rows as the agent's) in.
    assert int(normalizer.count.numpy()) == 10 * agent.size
    expert_obs = gail.expert.obs[0][:, 0]
    assert float(normalizer.mean.numpy()[0]) == pytest.approx(expert_obs.mean(), abs=0.2)
    assert float(normalizer.variance.numpy()[0]) == pytest.approx(expert_obs.var(), abs=0.3)
    # D sees clip((obs - mean) / sqrt(var + 1e-8), -5, 5) beside the raw action features and done flag.
    normalizer.mean.assign([3.0])
    normalizer.variance.assign([4.0])
    obs = np.clip((agent.obs[0] - 3.0) / np.sqrt(4.0 + 1e-8), -5.0, 5.0)
    features = action_features(agent.continuous_actions, agent.discrete_actions, params.action_spec)
    x = tf.concat([obs, features, agent.done[:, None]], axis=1)
    d = gail.discriminator
    expected = tf.sigmoid(d.head(d.body(x))[:, 0]).numpy()
    np.testing.assert_allclose(gail.estimate(agent), expected, rtol=1e-5, atol=1e-6)
    raw = tf.concat([agent.obs[0], features, agent.done[:, None]], axis=1)
    assert not np.allclose(gail.estimate(agent), tf.sigmoid(d.head(d.body(raw))[:, 0]).numpy(), atol=1e-4)
    # The statistics travel with the signal's checkpoint.
    tf.train.Checkpoint(**gail.checkpoint_objects()).write(str(tmp_path / "ckpt"))
    restored = GAILSignal(gail_settings(demo, network_settings=normalized), params, seed=1)
    tf.train.Checkpoint(**restored.checkpoint_objects()).read(str(tmp_path / "ckpt")).assert_consumed()
    assert restored.discriminator.normalizer is not None
    for a, b in zip(normalizer.state(), restored.discriminator.normalizer.state(), strict=True):
        np.testing.assert_array_equal(a, b)


# -- curiosity -------------------------------------------------------------------------------------


def test_curiosity_reward_falls_as_a_state_is_revisited_and_stays_high_for_novel_ones() -> None:
    params = BrainParameters(BEHAVIOR, (ObservationSpec((4,), np.dtype(np.float32)),), ActionSpec(0, (3,)))
    curiosity = CuriositySignal(CuriositySettings(learning_rate=1e-3, network_settings=SMALL), params)
    rng = np.random.default_rng(0)
    n = 32

    def transitions(center: float) -> SignalBatch:
        """Transitions around one state: obs near ``center``, action 1, which moves the first feature by +0.5."""
        obs = (center + 0.05 * rng.normal(size=(n, 4))).astype(np.float32)
        next_obs = obs + np.array([0.5, 0, 0, 0], np.float32)
        return SignalBatch(
            (obs,), (next_obs,), np.zeros((n, 0), np.float32), np.ones((n, 1), np.int32), np.zeros(n), np.zeros(n)
        )

    visited, novel = transitions(1.0), transitions(-3.0)
    rewards = [curiosity.rewards(visited).mean()]
    for visit in range(60):
        stats = curiosity.update(transitions(1.0))
        if visit % 20 == 19:
            rewards.append(curiosity.rewards(visited).mean())
    assert set(stats) == {CURIOSITY_FORWARD_LOSS, CURIOSITY_INVERSE_LOSS}
    assert rewards[-1] < 0.2 * rewards[0] and rewards[2] < rewards[1], rewards  # falls with every revisit round
    assert curiosity.rewards(novel).mean() > 5 * rewards[-1], (curiosity.rewards(novel).mean(), rewards)


# -- in the learners: summaries and checkpoints -----------------------------------------------------


def trajectory(continuous: bool, steps: int, seed: int) -> Trajectory:
    """A random 1-D-task trajectory ending at a terminal."""
    batch = random_batch(steps, continuous, seed)
    c, d = batch.continuous_actions, batch.discrete_actions
    return Trajectory(
        id=TrajectoryId("s", 0, seed),
        behavior_name=BEHAVIOR,
        obs=[batch.obs[0]],
        next_obs=[batch.obs[0][-1]],
        continuous_actions=c,
        discrete_actions=d,
        continuous_log_probs=-np.ones_like(c),
        discrete_log_probs=-np.ones(d.shape, np.float32),
        prev_continuous_actions=np.zeros_like(c),
        prev_discrete_actions=np.zeros_like(d),
        action_mask=None if continuous else np.ones((steps, 2), bool),
        rewards=np.full(steps, -0.01, np.float32),
        done=np.arange(steps) == steps - 1,
        policy_versions=np.zeros(steps, np.int64),
        done_reached=True,
        interrupted=False,
    )


def with_signals(settings: BehaviorSettings, demo: Path) -> BehaviorSettings:
    signals = {
        RewardSignalType.EXTRINSIC: RewardSignalSettings(),
        RewardSignalType.GAIL: gail_settings(demo, strength=0.1, gamma=0.9),
        RewardSignalType.CURIOSITY: CuriositySettings(strength=0.02, network_settings=SMALL),
    }
    cloning = BehavioralCloningSettings(demo_path=str(demo), strength=0.5, steps=1000)
    return dataclasses.replace(settings, reward_signals=signals, behavioral_cloning=cloning)


def ppo_settings(demo: Path) -> BehaviorSettings:
    hyper = PPOHyperparameters(batch_size=8, buffer_size=32, num_epoch=2)
    return with_signals(BehaviorSettings(hyperparameters=hyper, network_settings=SMALL), demo)


def sac_settings(demo: Path) -> BehaviorSettings:
    hyper = SACHyperparameters(batch_size=8, buffer_size=200, buffer_init_steps=0)
    return with_signals(BehaviorSettings(trainer_type=TrainerType.SAC, hyperparameters=hyper, network_settings=SMALL), demo)


LEARNER_DEMO_STEPS = 40
"""Demo records for the learner cases: what they check (tags, cloning passes per gradient step, checkpoints) needs
a few expert episodes, not the discriminator test's 100; each SAC gradient step runs a cloning pass over all of them."""
PPO_ROWS = 32
"""PPO's buffer_size: one update of 2 epochs of 4 minibatches."""
SAC_ROWS = 16
"""Replay rows for the SAC cases: batch_size 8 leaves 8 gradient steps (each with a signal and a cloning update)."""


def learner_demo(directory: Path, continuous: bool) -> Path:
    return write_expert_demo(directory / "expert.demo", continuous, steps=LEARNER_DEMO_STEPS)


def trajectories(continuous: bool, rows: int) -> list[Trajectory]:
    """``rows`` experiences as trajectories of 8 steps, each ending at a terminal."""
    return [trajectory(continuous, 8, seed) for seed in range(rows // 8)]


class Updated(NamedTuple):
    """A learner with every signal and cloning, seed 0, after one update on ``trajectories(continuous, rows)``."""

    continuous: bool
    demo: Path
    learner: PPOLearner | SACLearner
    returns_shape: tuple[int, ...]
    """PPO: the update buffer's ``returns`` before the update (SAC: empty)."""
    ready: bool
    """Whether the learner was ready to update once its rows were in."""
    metrics: Mapping[str, float]


def updated(algorithm: str, continuous: bool, directory: Path) -> Updated:
    demo = learner_demo(directory, continuous)
    params = simple_brain_parameters(BEHAVIOR, continuous)
    learner: PPOLearner | SACLearner
    if algorithm == "ppo":
        learner = PPOLearner(params, ppo_settings(demo), seed=0, warm_up=False)
        learner.add_trajectories(trajectories(continuous, PPO_ROWS))
        returns_shape = learner.update_buffer["returns"].data.shape
    else:
        learner = SACLearner(params, sac_settings(demo), seed=0, jit_compile=False)
        learner.add_trajectories(trajectories(continuous, SAC_ROWS))
        returns_shape = ()
    ready = learner.ready_to_update()
    return Updated(continuous, demo, learner, returns_shape, ready, learner.update())


Learners = Callable[[str, bool], Updated]


@pytest.fixture(scope="module")
def learners(tmp_path_factory: pytest.TempPathFactory) -> Learners:
    """``updated(algorithm, continuous)``, built once per module: building a learner with GAIL, curiosity and
    cloning and tracing its update is most of these cases' cost. The tests only read the learner after its one
    update (a checkpoint save reads it too)."""
    built: dict[tuple[str, bool], Updated] = {}

    def get(algorithm: str, continuous: bool) -> Updated:
        if (algorithm, continuous) not in built:
            directory = tmp_path_factory.mktemp(f"{algorithm}-demo")
            built[algorithm, continuous] = updated(algorithm, continuous, directory)
        return built[algorithm, continuous]

    return get


SIGNAL_TAGS = {GAIL_LOSS, GAIL_POLICY_ESTIMATE, GAIL_EXPERT_ESTIMATE, GAIL_REWARD, CURIOSITY_FORWARD_LOSS}
SIGNAL_TAGS |= {CURIOSITY_INVERSE_LOSS, CURIOSITY_REWARD, PRETRAINING_LOSS, BC_STRENGTH}


def test_ppo_reports_every_signal_and_cloning_tag_and_keeps_one_value_head_per_signal(
    learners: Learners, continuous: bool
) -> None:
    ppo_updated = learners("ppo", continuous)
    learner, metrics = ppo_updated.learner, ppo_updated.metrics
    assert [s.name for s in learner.signals] == ["extrinsic", "gail", "curiosity"]
    assert ppo_updated.returns_shape == (PPO_ROWS, 3)  # a value target per signal
    assert SIGNAL_TAGS | {EXTRINSIC_REWARD, GAIL_VALUE_ESTIMATE, CURIOSITY_VALUE_ESTIMATE} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    assert metrics[BC_STRENGTH] == pytest.approx(0.5 * (1 - PPO_ROWS / 1000))
    assert metrics[GAIL_REWARD] > 0 and metrics[EXTRINSIC_REWARD] == pytest.approx(-0.01)


def test_sac_reports_every_signal_and_cloning_tag(learners: Learners, continuous: bool) -> None:
    metrics = learners("sac", continuous).metrics
    assert SIGNAL_TAGS | {"Losses/Q1 Loss", "Losses/Policy Loss"} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())


def test_sac_runs_behavioral_cloning_after_every_gradient_step(learners: Learners, continuous: bool) -> None:
    """As ML-Agents' off-policy trainer: one cloning pass per SAC gradient step, however many one update call runs."""
    sac_updated = learners("sac", continuous)
    learner = sac_updated.learner
    assert isinstance(learner, SACLearner) and learner.bc is not None and sac_updated.ready
    gradient_steps = int(learner.policy_optimizer.iterations.numpy())
    assert gradient_steps == SAC_ROWS - 8  # the experiences after the first batch_size rows, at steps_per_update 1
    cloning_steps_per_pass = learner.bc.num_demonstrations // learner.bc.batch_size
    assert int(learner.bc.optimizer.iterations.numpy()) == gradient_steps * cloning_steps_per_pass


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_checkpoints_round_trip_the_signal_networks_and_optimisers(tmp_path: Path, algorithm: str, learners: Learners) -> None:
    source_updated = learners(algorithm, False)
    params = simple_brain_parameters(BEHAVIOR, False)
    source = source_updated.learner  # updated once: every signal and cloning optimiser has stepped
    Checkpointer(tmp_path / "a", source, keep_checkpoints=1).save(step=32, version=1)
    target: PPOLearner | SACLearner
    if algorithm == "ppo":
        target = PPOLearner(params, ppo_settings(source_updated.demo), seed=1, warm_up=False)
    else:
        target = SACLearner(params, sac_settings(source_updated.demo), seed=1, jit_compile=False)
    assert Checkpointer(tmp_path / "a", target, keep_checkpoints=1).restore_latest() == (32, 1)
    objects, restored = source.checkpoint_objects(), target.checkpoint_objects()
    for name in ("gail_discriminator", "curiosity_model"):
        for a, b in zip(objects[name].trainable_variables, restored[name].trainable_variables, strict=True):  # type: ignore[attr-defined]
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for name in ("gail_optimizer", "curiosity_optimizer", "bc_optimizer"):
        iterations = int(objects[name].iterations.numpy())  # type: ignore[attr-defined]
        assert iterations > 0 and int(restored[name].iterations.numpy()) == iterations  # type: ignore[attr-defined]
