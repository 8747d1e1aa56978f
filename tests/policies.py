"""Real policies for tests: a Keras MLP exported with ``trainer.export`` (not a fake).

Building a TF model and converting it to TFLite takes a fraction of a second, and many tests need
one, so models and their flatbuffers are cached for the test session by everything except the
version; ``build_mlp_policy_update`` then wraps the cached bytes into a fresh message.

Shapes: ``N`` agent rows, ``C`` continuous dimensions, ``M = sum(branches)`` logits.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from common.policy_contract import LOG_STD, LOGITS, MEAN, input_name
from protos import pb

if TYPE_CHECKING:
    import keras

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ActionKey = tuple[int, tuple[int, ...]]
ShapesKey = tuple[tuple[int, ...], ...]


def _action_key(action_spec: pb.ActionSpec) -> ActionKey:
    return int(action_spec.continuous_size), tuple(int(b) for b in action_spec.discrete_branches)


def _shapes_key(obs_shapes: Sequence[Sequence[int]]) -> ShapesKey:
    return tuple(tuple(int(d) for d in shape) for shape in obs_shapes)


@functools.lru_cache(maxsize=64)
def build_mlp_model(obs_shapes: ShapesKey, action: ActionKey, seed: int, hidden: int = 64, layers: int = 2) -> keras.Model:
    """A Keras MLP policy: the observations concatenated, ``layers`` x ``hidden`` tanh units, and heads.

    Args:
        obs_shapes: the observation shapes: vectors ``(size,)`` or images ``(H, W, C)`` (flattened).
        action: ``(C, branches)``.
        seed: seeds every initializer, so equal arguments build equal weights.

    Returns:
        A ``keras.Model`` taking one float32 [N, size] input per observation and returning a dict
        with ``"mean"``, ``"log_std"`` [N, C] when C > 0 and ``"logits"`` [N, M] when branches exist.
    """
    import keras

    continuous_size, branches = action
    inputs = [keras.Input(shape, name=input_name(i)) for i, shape in enumerate(obs_shapes)]
    # An image input [H, W, C] is flattened: this test policy needs no encoder, only every pixel to count.
    flat = [x if len(shape) == 1 else keras.layers.Flatten()(x) for x, shape in zip(inputs, obs_shapes, strict=True)]
    h = flat[0] if len(flat) == 1 else keras.layers.Concatenate()(flat)
    seeds = iter(range(seed * 100, seed * 100 + 100))

    def dense(units: int, activation: str | None = None) -> keras.layers.Dense:
        return keras.layers.Dense(
            units, activation=activation, kernel_initializer=keras.initializers.GlorotUniform(next(seeds))
        )

    for _ in range(layers):
        h = dense(hidden, "tanh")(h)
    outputs: dict[str, keras.KerasTensor] = {}
    if continuous_size:
        outputs[MEAN] = dense(continuous_size)(h)
        outputs[LOG_STD] = dense(continuous_size)(h)
    if branches:
        outputs[LOGITS] = dense(sum(branches))(h)
    return keras.Model(inputs[0] if len(inputs) == 1 else inputs, outputs)


@functools.lru_cache(maxsize=64)
def mlp_model_bytes(obs_shapes: ShapesKey, action: ActionKey, seed: int, hidden: int = 64, layers: int = 2) -> bytes:
    """The TFLite flatbuffer of ``build_mlp_model(...)`` (cached)."""
    from trainer.export import export_tflite

    return export_tflite(build_mlp_model(obs_shapes, action, seed, hidden, layers), obs_shapes)


def build_mlp_policy_update(
    behavior_name: str,
    obs_shapes: Sequence[Sequence[int]],
    action_spec: pb.ActionSpec,
    version: int,
    seed: int,
    hidden: int = 64,
    layers: int = 2,
    tanh_squash: bool = False,
    normalizers: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
    clip: float = 3.0,
) -> pb.PolicyUpdate:
    """A ``PolicyUpdate`` of a real exported MLP (see ``build_mlp_model``).

    Args:
        behavior_name: the behavior.
        obs_shapes: one ``(size,)`` per vector observation.
        action_spec: C continuous dimensions and/or discrete branch sizes.
        version: the policy version to stamp; the model is shared by every version.
        seed: the weights' seed.
        hidden, layers: the MLP's width and depth.
        tanh_squash, clip: continuous action mode (see ``processor.inference``).
        normalizers: ``(mean, variance)`` float32 ``[size]`` per observation, or None.
    """
    from trainer.export import make_policy_update, normalizer_state

    shapes, action = _shapes_key(obs_shapes), _action_key(action_spec)
    model_bytes = mlp_model_bytes(shapes, action, seed, hidden, layers)
    states = [normalizer_state(mean, variance, 1) for mean, variance in normalizers or ()]
    return make_policy_update(behavior_name, version, 0, model_bytes, action_spec, states, tanh_squash, clip)
