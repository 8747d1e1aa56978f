"""Training sequences of a recurrent policy: trajectories cut into sequences, padded at the end, and masked.

ML-Agents' rule (``AgentBufferField.get_batch(training_length=L)``, its corrected padding): each trajectory of ``T``
experiences is cut, from its first step, into ``ceil(T / L)`` sequences of ``L`` steps; the last is padded *at its
end* with rows of the field's ``padding_value`` times the last real row, so every sequence starts on a real step, whose
stored state (``common.trajectory.MEMORY``, the state that step's action was chosen with) starts the unroll. A mask,
1 on real steps and 0 on padding, takes the padding out of every loss (``masked_mean``). Sequences never span two
trajectories, so a sequence never crosses an episode's end either (a trajectory ends at done).

Shapes: ``T`` experiences of one trajectory, ``L`` = sequence_length, ``S`` sequences, ``R`` = memory_size.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from common.buffer import AgentBufferField

SEQUENCE_MASK = "sequence_mask"
"""Key of the float32 [S, L] mask among ``cut_sequences``' fields: 1 on real steps, 0 on padding."""


def cut_sequences(
    rows: Mapping[str, np.ndarray], length: int, padding_values: Mapping[str, float] | None = None
) -> dict[str, np.ndarray]:
    """One trajectory's rows as sequences of ``length`` steps, the last padded at its end.

    Args:
        rows: per key ``[T, ...]``, every key the same ``T`` >= 1.
        length: ``L`` >= 1.
        padding_values: per key, what the last row is multiplied by to pad (default 0: zero rows; an action mask
            pads with 1, every option allowed).

    Returns:
        Per key ``[S, L, ...]`` with ``S = ceil(T / L)``, plus ``SEQUENCE_MASK`` float32 ``[S, L]``.
    """
    padding_values = padding_values or {}
    lengths = {len(v) for v in rows.values()}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(f"rows must share one length T >= 1, got {sorted(lengths)}")
    (t,) = lengths
    count = -(-t // length)
    out: dict[str, np.ndarray] = {}
    for key, value in {**rows, SEQUENCE_MASK: np.ones(t, np.float32)}.items():
        field = AgentBufferField(padding_values.get(key, 0.0))
        field.extend(value)
        batch = field.get_batch(training_length=length, sequential=True)
        out[key] = batch.reshape(count, length, *batch.shape[1:])
    return out


def sequence_start_memories(memories: np.ndarray, length: int) -> np.ndarray:
    """float32 [S, R]: the stored state of each sequence's first step, from a trajectory's ``memories`` [T, R]."""
    return np.ascontiguousarray(memories[::length], np.float32)


def masked_mean(values: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """The mean of ``values`` [N] (or [N, K]: over both axes) over the rows where ``mask`` [N] is 1; 0 if none is."""
    mask = tf.cast(mask, values.dtype)
    if values.shape.rank == 2:
        mask = mask[:, tf.newaxis] * tf.ones_like(values)
    return tf.reduce_sum(values * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def masked_normalized(values: tf.Tensor, mask: tf.Tensor, epsilon: float = 1e-10) -> tf.Tensor:
    """``(x - mean) / (std + epsilon)`` of ``values`` [N] with mean and std over the real rows only (``mask`` [N])."""
    mean = masked_mean(values, mask)
    std = tf.sqrt(masked_mean(tf.square(values - mean), mask))
    return (values - mean) / (std + epsilon)
