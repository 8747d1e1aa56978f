"""Training sequences of a recurrent policy (``trainer.sequences``) by hand-computed examples, and masked losses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from common.config import (
    BCHyperparameters,
    BehaviorSettings,
    MemorySettings,
    NetworkSettings,
    NotSupportedKeyError,
    PPOHyperparameters,
    SACHyperparameters,
    TrainerType,
)
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from trainer.ppo_recurrent import SequenceBatch, masked_ppo_losses
from trainer.sequences import SEQUENCE_MASK, cut_sequences, masked_mean, masked_normalized, sequence_start_memories


def test_a_trajectory_is_cut_from_its_first_step_and_its_last_sequence_padded_at_the_end() -> None:
    rows = {
        "x": np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32),
        "a": np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]], np.int32),
        "m": np.array([[1, 0], [0, 1], [1, 1], [1, 0], [0, 1]], np.float32),
    }
    out = cut_sequences(rows, 2, {"m": 1.0})
    np.testing.assert_array_equal(out["x"], [[1, 2], [3, 4], [5, 0]])  # zeros pad
    np.testing.assert_array_equal(out["a"], [[[1, 0], [0, 1]], [[1, 1], [0, 0]], [[1, 0], [0, 0]]])
    assert out["a"].dtype == np.int32
    np.testing.assert_array_equal(out["m"][2], [[0, 1], [0, 1]])  # padding value 1: the last row itself
    np.testing.assert_array_equal(out[SEQUENCE_MASK], [[1, 1], [1, 1], [1, 0]])


@pytest.mark.parametrize(
    ("t", "length", "mask"),
    [(4, 2, [[1, 1], [1, 1]]), (3, 4, [[1, 1, 1, 0]]), (1, 3, [[1, 0, 0]]), (5, 1, [[1], [1], [1], [1], [1]])],
    ids=["exact", "one-short-sequence", "one-step", "length-1"],
)
def test_masks_mark_the_real_steps(t: int, length: int, mask: list[list[int]]) -> None:
    out = cut_sequences({"x": np.arange(1, t + 1, dtype=np.float32), "none": np.zeros((t, 0), np.float32)}, length)
    np.testing.assert_array_equal(out[SEQUENCE_MASK], mask)
    assert out["none"].shape == (len(mask), length, 0)
    np.testing.assert_array_equal(out["x"][np.asarray(mask) == 1], np.arange(1, t + 1))


def test_each_sequence_starts_from_its_first_step_s_stored_state() -> None:
    memories = np.arange(10, dtype=np.float32).reshape(5, 2)  # step t acted with [2t, 2t + 1]
    np.testing.assert_array_equal(sequence_start_memories(memories, 2), [[0, 1], [4, 5], [8, 9]])
    np.testing.assert_array_equal(sequence_start_memories(memories, 5), [[0, 1]])


def test_rows_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError, match="one length"):
        cut_sequences({"x": np.zeros(3), "y": np.zeros(2)}, 2)


def test_masked_means_leave_the_padding_out() -> None:
    values = tf.constant([1.0, 3.0, 100.0, -50.0])
    mask = tf.constant([1.0, 1.0, 0.0, 0.0])
    assert float(masked_mean(values, mask)) == 2.0
    two = tf.constant([[1.0, 5.0], [3.0, 7.0], [99.0, 99.0]])
    assert float(masked_mean(two, tf.constant([1.0, 1.0, 0.0]))) == 4.0
    assert float(masked_mean(values, tf.zeros(4))) == 0.0
    normalized = masked_normalized(values, mask).numpy()
    np.testing.assert_allclose(normalized[:2], [-1.0, 1.0], atol=1e-6)  # mean 2, std 1 over the real steps


def test_padded_steps_change_no_loss_and_get_no_gradient() -> None:
    n = 6
    mask = np.array([1, 1, 1, 1, 0, 0], np.float32)

    def batch(padding: float) -> SequenceBatch:
        noise = np.where(mask == 1, 0.0, padding).astype(np.float32)
        return SequenceBatch(
            (),
            tf.zeros([1, 2]),
            tf.zeros([n, 0]),
            tf.zeros([n, 0], tf.int32),
            tf.zeros([n, 0]),
            tf.constant(noise),  # old log-probs
            tf.constant(np.array([1.0, -1.0, 2.0, 0.5, 0, 0], np.float32) + noise),
            tf.constant((np.ones((n, 1)) + noise[:, None]).astype(np.float32)),
            tf.zeros([n, 1]),
            tf.constant(mask),
        )

    log_probs = tf.Variable(np.array([0.1, -0.2, 0.0, 0.3, 0.0, 0.0], np.float32))
    values = tf.Variable(np.zeros((n, 1), np.float32))
    results = []
    for padding in (0.0, 1e3):
        with tf.GradientTape() as tape:
            losses = masked_ppo_losses(
                log_probs, tf.ones(n), values, batch(padding), tf.constant(0.2), tf.constant(0.01), False
            )
        grads = tape.gradient(losses[0], [log_probs, values])
        results.append(([float(x) for x in losses], grads))
        np.testing.assert_array_equal(grads[0].numpy()[4:], 0.0)
        np.testing.assert_array_equal(grads[1].numpy()[4:], 0.0)
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)  # the padding's values do not matter


PARAMS = BrainParameters("B", (ObservationSpec((1,), np.dtype(np.float32)),), ActionSpec(0, (2,)))


@pytest.mark.parametrize("trainer_type", [TrainerType.SAC, TrainerType.BC])
def test_trainers_that_do_not_learn_sequences_refuse_memory(trainer_type: TrainerType) -> None:
    from trainer.registry import make_learner

    hp = SACHyperparameters() if trainer_type is TrainerType.SAC else BCHyperparameters(demo_path="x.demo")
    settings = BehaviorSettings(
        trainer_type=trainer_type,
        hyperparameters=hp,
        network_settings=NetworkSettings(memory=MemorySettings(sequence_length=8)),
    )
    with pytest.raises(NotSupportedKeyError) as info:
        make_learner(PARAMS, settings)
    assert info.value.key == "network_settings.memory"
    assert "not supported yet by trainer_type" in str(info.value)


def test_recurrent_ppo_refuses_what_it_does_not_support_yet() -> None:
    from trainer.registry import make_learner

    settings = BehaviorSettings(
        hyperparameters=PPOHyperparameters(use_sde=True),
        network_settings=NetworkSettings(memory=MemorySettings(sequence_length=8)),
    )
    with pytest.raises(NotSupportedKeyError) as info:
        make_learner(PARAMS, settings)
    assert info.value.key == "hyperparameters.use_sde"


def test_recurrent_ppo_takes_trajectories_in_as_sequences_from_their_stored_states() -> None:
    from common.trajectory import MEMORY, Trajectory, TrajectoryId
    from processor.inference import Policy
    from trainer.registry import make_learner

    settings = BehaviorSettings(
        hyperparameters=PPOHyperparameters(batch_size=4, buffer_size=5),
        network_settings=NetworkSettings(
            hidden_units=8, num_layers=1, memory=MemorySettings(memory_size=4, sequence_length=2)
        ),
    )
    learner = make_learner(PARAMS, settings)
    t = 5
    memories = np.arange(t * 4, dtype=np.float32).reshape(t, 4)
    trajectory = Trajectory(
        id=TrajectoryId("s", 1, 0),
        behavior_name="B",
        obs=[np.arange(t, dtype=np.float32).reshape(t, 1)],
        next_obs=[np.array([9.0], np.float32)],
        continuous_actions=np.zeros((t, 0), np.float32),
        discrete_actions=np.array([[0], [1], [1], [0], [1]], np.int32),
        continuous_log_probs=np.zeros((t, 0), np.float32),
        discrete_log_probs=np.full((t, 1), np.log(0.5), np.float32),
        prev_continuous_actions=np.zeros((t, 0), np.float32),
        prev_discrete_actions=np.zeros((t, 1), np.int32),
        action_mask=np.ones((t, 2), bool),
        rewards=np.array([0, 0, 0, 0, 1], np.float32),
        done=np.array([0, 0, 0, 0, 1], bool),
        policy_versions=np.zeros(t, np.int64),
        done_reached=True,
        interrupted=False,
        memories=memories,
    )
    assert learner.add_trajectories([trajectory]) == 5 and learner.ready_to_update()
    (held,) = learner._sequences  # type: ignore[attr-defined]
    np.testing.assert_array_equal(held[MEMORY], memories[[0, 2, 4]])
    np.testing.assert_array_equal(held["obs_0"][..., 0], [[0, 1], [2, 3], [4, 0]])
    np.testing.assert_array_equal(held[SEQUENCE_MASK], [[1, 1], [1, 1], [1, 0]])
    assert held["advantages"][2, 1] == 0.0 and held["advantages"][2, 0] != 0.0  # a padded step has no advantage
    summary = learner.update()
    assert np.isfinite(list(summary.values())).all() and not learner.ready_to_update()
    policy = Policy.from_update(learner.export_policy(1, 5))
    assert policy.memory_size == 4


def test_recurrent_ppo_checkpoints_and_resumes_its_networks(tmp_path: Path) -> None:
    from trainer.checkpoint import Checkpointer
    from trainer.registry import make_learner

    memory = MemorySettings(memory_size=4, sequence_length=2)
    settings = BehaviorSettings(network_settings=NetworkSettings(hidden_units=8, num_layers=1, memory=memory))
    first = make_learner(PARAMS, settings, seed=1)
    first.set_step(123)  # type: ignore[attr-defined]
    saved = first.export_policy(1, 123)
    Checkpointer(tmp_path, first, keep_checkpoints=1).save(123, 1, saved)
    assert (tmp_path / "ckpt-123.onnx").is_file()  # with recurrent_in and recurrent_out
    second = make_learner(PARAMS, settings, seed=2)
    assert Checkpointer(tmp_path, second, keep_checkpoints=1).restore_latest() == (123, 1)
    assert second.trainer_step == 123  # type: ignore[attr-defined]
    obs, memories = np.ones((1, 1), np.float32), np.full((1, 4), 0.5, np.float32)
    want = first.policy(obs, memories)  # type: ignore[attr-defined]
    got = second.policy(obs, memories)  # type: ignore[attr-defined]
    for key, value in want.items():
        np.testing.assert_array_equal(got[key].numpy(), value.numpy())
