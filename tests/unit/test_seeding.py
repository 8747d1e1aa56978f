"""trainer.seeding: initial weights follow the seed alone, and seeding a learner leaves the process's generators."""

from __future__ import annotations

import random

import numpy as np
import pytest
import tensorflow as tf

from common.config import (
    BCHyperparameters,
    BehaviorSettings,
    ConfigKeyError,
    NetworkSettings,
    POCAHyperparameters,
    SACHyperparameters,
    TrainerType,
)
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from trainer.registry import learner_class
from trainer.seeding import seeded_initializers

BRAIN = BrainParameters("Goal", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(1, (2,)))
SMALL = NetworkSettings(hidden_units=8, num_layers=1)
SETTINGS = {
    TrainerType.PPO: BehaviorSettings(network_settings=SMALL),
    TrainerType.SAC: BehaviorSettings(
        trainer_type=TrainerType.SAC, hyperparameters=SACHyperparameters(), network_settings=SMALL
    ),
    TrainerType.BC: BehaviorSettings(
        trainer_type=TrainerType.BC, hyperparameters=BCHyperparameters(demo_path="unused.demo"), network_settings=SMALL
    ),
    TrainerType.POCA: BehaviorSettings(
        trainer_type=TrainerType.POCA, hyperparameters=POCAHyperparameters(), network_settings=SMALL
    ),
}


def kernel() -> np.ndarray:
    layer = tf.keras.layers.Dense(4)
    layer.build((None, 3))
    return layer.kernel.numpy()


def test_seeded_initializers_repeat_the_weights_and_restore_pythons_random() -> None:
    random.seed(123)
    expected_next = random.Random(123).random()
    with seeded_initializers(7):
        first = kernel()
    assert random.random() == expected_next  # the state from before the block, untouched by it
    with seeded_initializers(7):
        again = kernel()
    with seeded_initializers(8):
        other = kernel()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("trainer_type", list(TrainerType), ids=lambda t: t.value)
def test_every_learner_seeds_through_the_helper(trainer_type: TrainerType) -> None:
    """Same seed, same policy; and neither Python's nor numpy's global generator moves."""
    cls = learner_class(trainer_type)
    python_state = random.getstate()
    numpy_before = np.random.RandomState()
    numpy_before.set_state(np.random.get_state())
    a = cls(BRAIN, SETTINGS[trainer_type], seed=3)
    b = cls(BRAIN, SETTINGS[trainer_type], seed=3)
    assert random.getstate() == python_state
    assert np.random.random() == numpy_before.random()  # numpy's global generator did not move either
    for x, y in zip(a.policy.trainable_variables, b.policy.trainable_variables, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.mark.parametrize("trainer_type", list(TrainerType), ids=lambda t: t.value)
def test_every_learner_rejects_another_trainers_settings_naming_the_key(trainer_type: TrainerType) -> None:
    """The one error type for a setting a learner refuses: ConfigKeyError, with the dotted key."""
    other = TrainerType.SAC if trainer_type is TrainerType.PPO else TrainerType.PPO
    with pytest.raises(ConfigKeyError) as info:
        learner_class(trainer_type)(BRAIN, SETTINGS[other], seed=0)
    assert info.value.key == "hyperparameters"
