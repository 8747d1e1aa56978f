"""Attention over a variable number of entities: ML-Agents' entity embeddings and residual self-attention.

Used by ``trainer/poca.py``'s critic, whose entities are a group's agents (however many are alive), and
meant for any network whose input is a set: the entities' order does not matter and absent ones
(masked) change nothing. The design is ML-Agents' (``torch_entities/attention.py``, after Vaswani et
al. 2017, "Attention Is All You Need", arXiv:1706.03762, and Baker et al. 2019's multi-agent
hide-and-seek):

* ``EntityEmbedding``: one dense layer with swish, applied to every entity alike (``[B, E, F] -> [B, E, H]``).
* ``ResidualSelfAttention``: layer-normalise the entities, multi-head scaled dot-product attention among
  them (an absent entity is never attended to), a dense output projection added back to its input (the
  residual), layer-normalise again, then the mean over present entities: one ``[B, H]`` per row.

Masks are float32 ``[B, E]``, 1 = **absent** (ML-Agents' convention: its masks come from NaN observations).
A row with no entity present pools to zeros. Layer norms have no learned scale or offset, as ML-Agents'.

Shapes: ``B`` rows, ``E`` entities (slots), ``F`` features per entity, ``H`` embedding size.
"""

from __future__ import annotations

import math

import tensorflow as tf

from trainer.networks import swish

LAYER_NORM_EPSILON = 1e-5
POOLING_EPSILON = 1e-7
MASKED_SCORE = -1e9
"""The attention score of an absent entity before the softmax: its weight is 0."""


def layer_norm(x: tf.Tensor) -> tf.Tensor:
    """Normalise the last axis to zero mean and unit variance (no learned scale or offset)."""
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) / tf.sqrt(variance + LAYER_NORM_EPSILON)


def _kernel(embedding_size: int) -> tf.keras.initializers.Initializer:
    """ML-Agents' initialisation of its attention layers: normal kernels of std ``sqrt(0.125 / H)``."""
    return tf.keras.initializers.RandomNormal(stddev=math.sqrt(0.125 / embedding_size))


class EntityEmbedding(tf.Module):
    """Each entity's features ``[B, E, F]`` -> an embedding ``[B, E, H]`` by one shared dense layer and swish."""

    def __init__(self, features: int, embedding_size: int, name: str = "entity_embedding") -> None:
        super().__init__(name=name)
        self.features = features
        self.embedding_size = embedding_size
        with self.name_scope:
            self.dense = tf.keras.layers.Dense(embedding_size, kernel_initializer=_kernel(embedding_size))
            self.dense.build((None, features))

    def __call__(self, entities: tf.Tensor) -> tf.Tensor:
        return swish(self.dense(entities))

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every weight: ``tf.Module``'s own walk does not see Keras 3 weights (``trainer.networks.PolicyNetwork``)."""
        return tuple(self.dense.trainable_variables)


def multi_head_attention(query: tf.Tensor, key: tf.Tensor, value: tf.Tensor, absent: tf.Tensor, num_heads: int) -> tf.Tensor:
    """Scaled dot-product attention in ``num_heads`` heads; an absent key gets no weight.

    Args:
        query, key, value: float32 ``[B, E, H]``, ``H`` divisible by ``num_heads``.
        absent: float32 ``[B, E]``, 1 where the entity is absent.

    Returns:
        float32 ``[B, E, H]``: per entity, the weighted values of the present ones, heads concatenated.
    """
    b, e = tf.shape(query)[0], tf.shape(query)[1]
    h = query.shape[-1]
    d = h // num_heads

    def heads(x: tf.Tensor) -> tf.Tensor:  # [B, E, H] -> [B, heads, E, d]
        return tf.transpose(tf.reshape(x, [b, e, num_heads, d]), [0, 2, 1, 3])

    scores = tf.matmul(heads(query), heads(key), transpose_b=True) / math.sqrt(d)  # [B, heads, E, E]
    masked = absent[:, tf.newaxis, tf.newaxis, :]
    scores = scores * (1.0 - masked) + MASKED_SCORE * masked
    weights = tf.nn.softmax(scores, axis=-1)
    out = tf.matmul(weights, heads(value))  # [B, heads, E, d]
    return tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [b, e, h])


def masked_mean(x: tf.Tensor, absent: tf.Tensor) -> tf.Tensor:
    """Mean over the present entities: ``[B, E, H]`` -> ``[B, H]``; zeros for a row with none."""
    present = 1.0 - absent
    total = tf.reduce_sum(x * present[:, :, tf.newaxis], axis=1)
    return total / (tf.reduce_sum(present, axis=1, keepdims=True) + POOLING_EPSILON)


class ResidualSelfAttention(tf.Module):
    """Self-attention among entity embeddings with a residual connection, pooled to one vector per row."""

    def __init__(self, embedding_size: int, num_heads: int = 4, name: str = "residual_self_attention") -> None:
        super().__init__(name=name)
        if embedding_size % num_heads:
            raise ValueError(f"embedding_size {embedding_size} is not divisible by num_heads {num_heads}")
        self.embedding_size = embedding_size
        self.num_heads = num_heads
        init = _kernel(embedding_size)
        with self.name_scope:
            self.query, self.key, self.value, self.output = (
                tf.keras.layers.Dense(embedding_size, kernel_initializer=init, name=n)
                for n in ("query", "key", "value", "out")
            )
            for layer in (self.query, self.key, self.value, self.output):
                layer.build((None, embedding_size))

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every weight (Keras 3 weights are invisible to ``tf.Module``'s walk)."""
        return tuple(w for layer in (self.query, self.key, self.value, self.output) for w in layer.trainable_variables)

    def __call__(self, entities: tf.Tensor, absent: tf.Tensor) -> tf.Tensor:
        """``entities`` float32 ``[B, E, H]``, ``absent`` float32 ``[B, E]`` (1 = absent) -> ``[B, H]``."""
        x = layer_norm(entities)
        attended = multi_head_attention(self.query(x), self.key(x), self.value(x), absent, self.num_heads)
        out = layer_norm(self.output(attended) + x)
        return masked_mean(out, absent)
