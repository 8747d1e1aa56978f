"""trainer/attention.py: entity embeddings and residual self-attention over a variable number of entities."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from trainer.attention import EntityEmbedding, ResidualSelfAttention, masked_mean, multi_head_attention


def _setup(seed: int = 0) -> tuple[EntityEmbedding, ResidualSelfAttention, np.ndarray]:
    tf.random.set_seed(seed)
    embed = EntityEmbedding(features=5, embedding_size=16)
    attention = ResidualSelfAttention(16, num_heads=4)
    entities = np.random.default_rng(seed).normal(size=(3, 4, 5)).astype(np.float32)
    return embed, attention, entities


def test_shapes() -> None:
    embed, attention, entities = _setup()
    absent = np.zeros((3, 4), np.float32)
    assert embed(entities).shape == (3, 4, 16)
    assert attention(embed(entities), absent).shape == (3, 16)


def test_order_of_entities_does_not_matter() -> None:
    embed, attention, entities = _setup()
    absent = np.array([[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 0]], np.float32)
    permutation = [2, 0, 3, 1]
    a = attention(embed(entities), absent).numpy()
    b = attention(embed(entities[:, permutation]), absent[:, permutation]).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_absent_entities_change_nothing() -> None:
    """An absent slot's contents, and the number of absent slots, leave the output as it is."""
    embed, attention, entities = _setup()
    absent = np.array([[0, 0, 1, 1]] * 3, np.float32)
    garbage = entities.copy()
    garbage[:, 2:] = 1e3
    a = attention(embed(entities), absent).numpy()
    b = attention(embed(garbage), absent).numpy()
    c = attention(embed(entities[:, :2]), absent[:, :2]).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_present_entities_matter() -> None:
    embed, attention, entities = _setup()
    absent = np.zeros((3, 4), np.float32)
    changed = entities.copy()
    changed[:, 1] += 1.0
    assert not np.allclose(attention(embed(entities), absent), attention(embed(changed), absent))


def test_attention_weights_skip_absent_keys() -> None:
    """With identical queries and keys the weights are uniform over the present keys: the output is their mean."""
    values = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    zeros = np.zeros((1, 3, 4), np.float32)
    absent = np.array([[0, 0, 1]], np.float32)
    out = multi_head_attention(zeros, zeros, values, absent, num_heads=2).numpy()
    np.testing.assert_allclose(out[0, 0], values[0, :2].mean(axis=0), rtol=1e-6)


def test_masked_mean_of_no_entity_is_zero() -> None:
    x = np.ones((2, 3, 4), np.float32)
    absent = np.array([[1, 1, 1], [0, 1, 1]], np.float32)
    np.testing.assert_allclose(masked_mean(x, absent).numpy(), [[0] * 4, [1] * 4], atol=1e-6)


def test_heads_must_divide_the_embedding() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        ResidualSelfAttention(10, num_heads=4)


def test_every_weight_is_trainable_and_visible() -> None:
    embed, attention, _ = _setup()
    assert len(embed.trainable_variables) == 2 and len(attention.trainable_variables) == 8
