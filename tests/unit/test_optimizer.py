"""``trainer.optimizer.apply_adam``: Keras' Adam step, made with fused kernels."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from trainer.optimizer import adam, apply_adam


def _variables(seed: int) -> list[tf.Variable]:
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.normal(size=shape).astype(np.float32)) for shape in ((3, 4), (4,), (2,))]


def test_apply_adam_makes_keras_adams_step_into_the_same_slots() -> None:
    """Five steps of each, from the same start, with the same gradients (the last variable never gets one) and a new
    learning rate from the fourth on: the variables, both moments and the step count agree, so a checkpoint of either
    restores into the other."""
    keras_vars, fused_vars = _variables(0), _variables(0)
    keras_adam = adam(3e-2, keras_vars, epsilon=1e-8)
    fused_adam = adam(3e-2, fused_vars, epsilon=1e-8)
    rng = np.random.default_rng(1)

    @tf.function(autograph=False)  # as PPO's update graph calls it: inside a traced function
    def fused_step(gradients: list[tf.Tensor]) -> None:
        apply_adam(fused_adam, [*gradients, None], fused_vars)

    for step in range(5):
        if step == 3:  # a schedule's new rate, assigned between steps, reaches the traced step
            keras_adam.learning_rate.assign(1e-1)
            fused_adam.learning_rate.assign(1e-1)
        gradients = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in keras_vars[:2]]
        keras_adam.apply_gradients(zip(gradients, keras_vars[:2], strict=True))
        fused_step(gradients)
    for a, b in zip(keras_vars, fused_vars, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    for slots in ("_momentums", "_velocities"):
        for a, b in zip(getattr(keras_adam, slots), getattr(fused_adam, slots), strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
    assert int(fused_adam.iterations.numpy()) == int(keras_adam.iterations.numpy()) == 5
    np.testing.assert_array_equal(fused_vars[2].numpy(), _variables(0)[2].numpy())  # no gradient: untouched


def test_apply_adam_refuses_variables_the_optimizer_was_not_built_for() -> None:
    variables = _variables(0)
    optimizer = adam(1e-3, variables[:2])
    with pytest.raises(ValueError, match="built for 2 variables, given 3"):
        apply_adam(optimizer, [tf.zeros_like(v) for v in variables], variables)
