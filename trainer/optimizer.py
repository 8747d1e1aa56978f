"""The optimiser of every learner, reward signal and ``behavioral_cloning`` component: Adam, made in one place.

Keras 3's Adam (``tf.keras.optimizers.Adam`` is the same class). ``adam`` builds it on its variables at once, so
its slots (step count, first and second moments) exist before a checkpoint is restored into them, and a
training step's first trace does not create variables.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

KERAS_ADAM_EPSILON = 1e-7
"""Keras' default epsilon, used where a learner does not name its own (PPO's is PyTorch's 1e-8)."""


def adam(learning_rate: float, variables: Sequence[tf.Variable], epsilon: float = KERAS_ADAM_EPSILON) -> keras.optimizers.Adam:
    """An Adam optimiser with step size ``learning_rate`` (per gradient step), built for ``variables``, the list
    (in this order) its ``apply_gradients`` calls will update."""
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate, epsilon=epsilon)
    optimizer.build(list(variables))
    return optimizer
