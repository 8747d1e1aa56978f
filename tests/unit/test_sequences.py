"""Training sequences of a recurrent policy (``trainer.sequences``) by hand-computed examples, and masked losses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _trajectory(t: int, memories: np.ndarray, done: bool, agent_id: int = 1, sequence: int = 0, start: int = 0) -> Any:
    """A trajectory of ``t`` steps of the 1-obs, 2-option behavior; obs ``start, start + 1, ...``; reward 1 at the end."""
    from common.trajectory import Trajectory, TrajectoryId

    return Trajectory(
        id=TrajectoryId("s", agent_id, sequence),
        behavior_name="B",
        obs=[np.arange(start, start + t, dtype=np.float32).reshape(t, 1)],
        next_obs=[np.array([start + t], np.float32)],
        continuous_actions=np.zeros((t, 0), np.float32),
        discrete_actions=(np.arange(t) % 2).reshape(t, 1).astype(np.int32),
        continuous_log_probs=np.zeros((t, 0), np.float32),
        discrete_log_probs=np.full((t, 1), np.log(0.5), np.float32),
        prev_continuous_actions=np.zeros((t, 0), np.float32),
        prev_discrete_actions=np.zeros((t, 1), np.int32),
        action_mask=np.ones((t, 2), bool),
        rewards=np.eye(1, t, t - 1, dtype=np.float32)[0],
        done=np.eye(1, t, t - 1, dtype=bool)[0] & done,
        policy_versions=np.zeros(t, np.int64),
        done_reached=done,
        interrupted=False,
        memories=memories,
    )


def test_recurrent_ppo_takes_trajectories_in_as_sequences_from_their_stored_states() -> None:
    from common.trajectory import MEMORY
    from processor.inference import Policy
    from trainer.registry import make_learner

    settings = BehaviorSettings(
        hyperparameters=PPOHyperparameters(batch_size=4, buffer_size=5),
        network_settings=NetworkSettings(
            hidden_units=8, num_layers=1, memory=MemorySettings(memory_size=4, sequence_length=2)
        ),
    )
    learner = make_learner(PARAMS, settings)
    memories = np.arange(5 * 4, dtype=np.float32).reshape(5, 4)
    trajectory = _trajectory(5, memories, done=True)
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


def test_agent_waves_take_each_agent_s_trajectories_in_order() -> None:
    from trainer.ppo_recurrent import agent_waves

    memories = np.zeros((2, 4), np.float32)
    batch = [_trajectory(2, memories, False, agent_id=a, sequence=q) for a, q in [(1, 0), (2, 1), (1, 2), (1, 3), (3, 4)]]
    assert agent_waves(batch) == [[0, 1, 4], [2], [3]]


def test_the_critic_s_state_carries_across_cuts_and_resets_at_done() -> None:
    from trainer.ppo_recurrent import CRITIC_MEMORY
    from trainer.registry import make_learner

    memory = MemorySettings(memory_size=4, sequence_length=2)
    settings = BehaviorSettings(network_settings=NetworkSettings(hidden_units=8, num_layers=1, memory=memory))
    zeros = np.zeros((3, 4), np.float32)
    first, second = _trajectory(3, zeros, False, sequence=0), _trajectory(3, zeros, True, sequence=1, start=3)
    together = make_learner(PARAMS, settings, seed=1)
    together.add_trajectories([first, second])
    apart = make_learner(PARAMS, settings, seed=1)
    apart.add_trajectories([first])
    held = apart._critic_states  # type: ignore[attr-defined]
    assert list(held) == [("s", 1)] and np.abs(held[("s", 1)]).max() > 0
    carried = held[("s", 1)].copy()
    value = apart.value  # type: ignore[attr-defined]
    state = tf.zeros([1, 4])
    for x in first.obs[0]:  # the critic stepped over the first trajectory's three experiences, from zeros
        _, state = value.lstm.step(value.body(x[None]), state)
    np.testing.assert_allclose(carried, state.numpy()[0], atol=1e-6)
    apart.add_trajectories([second])
    assert not held  # done: the next episode starts from zeros
    for a, b in zip(together._sequences, apart._sequences, strict=True):  # type: ignore[attr-defined]
        np.testing.assert_allclose(a[CRITIC_MEMORY], b[CRITIC_MEMORY], atol=1e-6)
    starts = apart._sequences[1][CRITIC_MEMORY]  # type: ignore[attr-defined]
    np.testing.assert_array_equal(apart._sequences[0][CRITIC_MEMORY][0], 0.0)  # type: ignore[attr-defined]
    np.testing.assert_allclose(starts[0], carried, atol=1e-6)  # the second trajectory goes on from the first
    assert np.abs(starts[1] - starts[0]).max() > 0  # its second sequence starts where its first ended


def test_a_flushed_trajectory_frees_its_agent_s_critic_state() -> None:
    """Interrupted without done is the processor's flush at a session end: that agent never continues."""
    import dataclasses

    from trainer.registry import make_learner

    memory = MemorySettings(memory_size=4, sequence_length=2)
    settings = BehaviorSettings(network_settings=NetworkSettings(hidden_units=8, num_layers=1, memory=memory))
    learner = make_learner(PARAMS, settings)
    zeros = np.zeros((3, 4), np.float32)
    learner.add_trajectories([_trajectory(3, zeros, False, agent_id=1), _trajectory(3, zeros, False, agent_id=2)])
    assert sorted(learner._critic_states) == [("s", 1), ("s", 2)]  # type: ignore[attr-defined]
    flushed = dataclasses.replace(_trajectory(3, zeros, False, agent_id=1, sequence=2), interrupted=True)
    learner.add_trajectories([flushed])
    assert sorted(learner._critic_states) == [("s", 2)]  # type: ignore[attr-defined]
