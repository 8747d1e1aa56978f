"""trainer/poca.py: the lambda-return, the rewards POCA adds up, bootstrapping at early leaves, and one update."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from common.config import (
    BehaviorSettings,
    NetworkSettings,
    POCAHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    load_config,
)
from common.errors import ConfigError
from common.groups import ACTING, DONE, GroupData
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.trajectory import Trajectory, TrajectoryId
from trainer.poca import BASELINE_LOSS, GROUP_CUMULATIVE_REWARD, POCALearner, extrinsic_rewards, lambda_return
from trainer.summaries import POLICY_LOSS, VALUE_LOSS

PARAMS = BrainParameters("Walker", (ObservationSpec((2,), np.dtype(np.float32)),), ActionSpec(1, (3,)))


def settings(**hp: object) -> BehaviorSettings:
    return BehaviorSettings(
        trainer_type="poca",  # type: ignore[arg-type]
        hyperparameters=POCAHyperparameters(batch_size=8, buffer_size=16, **hp),  # type: ignore[arg-type]
        network_settings=NetworkSettings(hidden_units=16, num_layers=1),
        max_steps=1000,
    )


def test_lambda_return_by_hand() -> None:
    r = np.array([1.0, 0.0, 2.0], np.float32)
    v = np.array([0.5, 0.25, 1.0], np.float32)
    g, lam = 0.9, 0.5
    g2 = 2.0 + g * 4.0
    g1 = 0.0 + g * ((1 - lam) * 1.0 + lam * g2)
    g0 = 1.0 + g * ((1 - lam) * 0.25 + lam * g1)
    np.testing.assert_allclose(lambda_return(r, v, 4.0, g, lam), [g0, g1, g2], rtol=1e-6)
    # lambd = 0: one-step TD targets; lambd = 1: the discounted return bootstrapped at the end.
    np.testing.assert_allclose(lambda_return(r, v, 4.0, g, 0.0), [1 + g * 0.25, g * 1.0, 2 + g * 4], rtol=1e-6)
    np.testing.assert_allclose(lambda_return(r, v, 4.0, g, 1.0)[0], 1 + g * (0 + g * (2 + g * 4)), rtol=1e-6)


def _trajectory(t: int, done: bool, groupmate_done_at_end: bool, with_group: bool = True) -> Trajectory:
    rng = np.random.default_rng(t)
    group = None
    if with_group:
        status = np.full((t, 1), ACTING, np.uint8)
        if groupmate_done_at_end:
            status[-1] = DONE
        group = GroupData(
            group_rewards=np.full(t, 0.5, np.float32),
            groupmate_obs=[rng.normal(size=(t, 1, 2)).astype(np.float32)],
            groupmate_continuous_actions=rng.normal(size=(t, 1, 1)).astype(np.float32),
            groupmate_discrete_actions=rng.integers(0, 3, size=(t, 1, 1)).astype(np.int32),
            groupmate_rewards=np.full((t, 1), 2.0, np.float32),
            groupmate_status=status,
            next_groupmate_obs=[rng.normal(size=(1, 2)).astype(np.float32)],
        )
    done_flags = np.zeros(t, bool)
    done_flags[-1] = done
    return Trajectory(
        id=TrajectoryId("s", t, 0),
        behavior_name="Walker",
        obs=[rng.normal(size=(t, 2)).astype(np.float32)],
        next_obs=[rng.normal(size=2).astype(np.float32)],
        continuous_actions=rng.normal(size=(t, 1)).astype(np.float32),
        discrete_actions=rng.integers(0, 3, size=(t, 1)).astype(np.int32),
        continuous_log_probs=np.full((t, 1), -1.0, np.float32),
        discrete_log_probs=np.full((t, 1), -1.1, np.float32),
        prev_continuous_actions=np.zeros((t, 1), np.float32),
        prev_discrete_actions=np.zeros((t, 1), np.int32),
        action_mask=np.ones((t, 3), bool),
        rewards=np.full(t, 1.0, np.float32),
        done=done_flags,
        policy_versions=np.zeros(t, np.int64),
        done_reached=done,
        interrupted=False,
        group=group,
    )


def test_extrinsic_reward_adds_groupmates_and_group() -> None:
    trajectory = _trajectory(4, True, True)
    np.testing.assert_allclose(extrinsic_rewards(trajectory, 0.5), 0.5 * (1.0 + 2.0 + 0.5))
    no_group = _trajectory(4, True, True, with_group=False)
    np.testing.assert_allclose(extrinsic_rewards(no_group, 1.0), 1.0)


def test_an_agent_that_leaves_early_bootstraps_from_the_group_value() -> None:
    """Done while a groupmate acts on: the last return is reward + gamma * V(after); with the group done too: 0."""
    learner = POCALearner(PARAMS, settings(lambd=1.0), seed=1)
    leaving = _trajectory(3, True, False)
    learner.add_trajectories([leaving])
    learner._rows_of_pending()
    (early,) = learner._rows
    learner.add_trajectories([_trajectory(3, True, True)])
    learner._rows_of_pending()
    together = learner._rows[1]
    assert together["returns"][-1] == pytest.approx(together["rewards"][-1])
    assert leaving.group is not None
    after = learner.critic.value(
        leaving.next_obs[0][np.newaxis], leaving.group.next_groupmate_obs[0][np.newaxis], np.zeros((1, 1), np.float32)
    )
    value_next = float(after[0, 0])
    assert value_next != 0.0
    assert early["returns"][-1] == pytest.approx(early["rewards"][-1] + 0.99 * value_next, rel=1e-5)


def test_an_update_trains_and_reports_ml_agents_tags() -> None:
    learner = POCALearner(PARAMS, settings(), seed=1)
    before = [v.numpy().copy() for v in learner.critic.trainable_variables]
    assert (
        learner.add_trajectories([_trajectory(8, True, True), _trajectory(9, False, False), _trajectory(5, True, False)]) == 22
    )
    assert learner.ready_to_update()
    out = learner.update()
    assert {POLICY_LOSS, VALUE_LOSS, BASELINE_LOSS, GROUP_CUMULATIVE_REWARD} <= set(out)
    assert all(np.isfinite(v) for v in out.values())
    assert out[GROUP_CUMULATIVE_REWARD] == pytest.approx(8 * 0.5)  # only the episode that ended with its group
    after = learner.critic.trainable_variables
    assert any(not np.allclose(b, a.numpy()) for b, a in zip(before, after, strict=True))
    assert not learner.ready_to_update()
    update = learner.export_policy(1, learner.trainer_step)
    assert update.artifact.model and update.behavior_name == "Walker"


def test_what_poca_does_not_do_yet_is_refused_by_key() -> None:
    curiosity = BehaviorSettings(
        trainer_type="poca",  # type: ignore[arg-type]
        hyperparameters=POCAHyperparameters(),
        reward_signals={
            RewardSignalType.EXTRINSIC: RewardSignalSettings(),
            RewardSignalType.CURIOSITY: RewardSignalSettings(),
        },
    )
    with pytest.raises(ConfigError, match="reward_signals"):
        POCALearner(PARAMS, curiosity)
    with pytest.raises(ConfigError, match="shared_critic"):
        POCAHyperparameters(shared_critic=True)


CONFIG_DIR = Path(
    os.environ.get(
        "STEPSTREAM_MLAGENTS_CONFIG_DIR", Path(__file__).resolve().parents[2].parent / "shared/data/mlagents-configs"
    )
)


@pytest.mark.parametrize("name", ["DungeonEscape", "PushBlockCollab"])
def test_ml_agents_poca_example_configs_parse_and_start(name: str) -> None:
    """ML-Agents' own POCA configs, unchanged: they parse, and their learner builds, trains and exports (on vector
    observations: the Unity scenes' ray sensors)."""
    path = CONFIG_DIR / "poca" / f"{name}.yaml"
    if not path.exists():
        pytest.skip(f"ML-Agents' example configs are not at {path} (STEPSTREAM_MLAGENTS_CONFIG_DIR)")
    behavior = load_config(path).behaviors[name]
    assert behavior.trainer_type.value == "poca"
    hp = behavior.hyperparameters
    assert isinstance(hp, POCAHyperparameters) and (hp.beta, hp.buffer_size, hp.num_epoch) == (0.01, 10240, 3)
    small = dataclasses.replace(behavior, hyperparameters=dataclasses.replace(hp, batch_size=8, buffer_size=16))
    learner = POCALearner(PARAMS, small, seed=0)
    learner.add_trajectories([_trajectory(10, True, True), _trajectory(7, True, False)])
    assert learner.ready_to_update() and POLICY_LOSS in learner.update()
    assert learner.export_policy(1, learner.trainer_step).artifact.model


def test_a_checkpoint_restores_actor_and_critic(tmp_path: Path) -> None:
    import tensorflow as tf

    learner = POCALearner(PARAMS, settings(), seed=1)
    learner.add_trajectories([_trajectory(9, True, True), _trajectory(8, True, False)])
    learner.update()
    path = tf.train.Checkpoint(**learner.checkpoint_objects()).write(str(tmp_path / "ckpt"))
    other = POCALearner(PARAMS, settings(), seed=2)
    tf.train.Checkpoint(**other.checkpoint_objects()).read(path).assert_existing_objects_matched()
    for a, b in zip(learner.critic.trainable_variables, other.critic.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(learner.policy.trainable_variables, other.policy.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert other.trainer_step == learner.trainer_step == 17
    assert float(other.critic.max_agents.numpy()) == 2.0


def test_the_exported_policy_is_the_actor_alone_with_ppos_onnx_contract() -> None:
    """The ONNX model Unity runs comes from the artifact as PPO's does: inputs are the agent's own observations,
    and its deterministic action is the actor's mean (clip mode, clip 1)."""
    import onnxruntime as ort

    from trainer.onnx_export import policy_to_onnx

    continuous = BrainParameters("Walker", (ObservationSpec((2,), np.dtype(np.float32)),), ActionSpec(2))
    learner = POCALearner(continuous, settings(), seed=3)
    update = learner.export_policy(1, 0)
    assert update.artifact.clip == 1.0 and not update.artifact.tanh_squash and not update.artifact.normalizers
    model = policy_to_onnx(update)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    obs = np.array([[0.5, -0.25]], np.float32)
    names = [i.name for i in session.get_inputs()]
    assert len(names) == 1  # the actor alone: no groupmate inputs
    outputs = {o.name: v for o, v in zip(session.get_outputs(), session.run(None, {names[0]: obs}), strict=True)}
    mean = learner.policy(obs)["mean"].numpy()
    np.testing.assert_allclose(outputs["deterministic_continuous_actions"], np.clip(mean, -1, 1), rtol=1e-4, atol=1e-5)
