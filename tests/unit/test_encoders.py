"""trainer.encoders: ML-Agents' five visual encoders (output shapes, layer structure, minimum resolutions), the
observation encoder that concatenates vectors and cameras, and the uint8 scaling rule of common.policy_contract.

Shapes: ``B`` rows, ``H, W, C`` an image, ``F`` the encoders' output features.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from common.config import ConfigKeyError, EncoderType
from common.policy_contract import IMAGE_SCALE, onnx_input_shape
from common.specs import ObservationSpec
from trainer.encoders import (
    MIN_RESOLUTION,
    ObservationEncoder,
    as_observation_dtype,
    observation_encoder,
    visual_encoder,
)

F = 12
UINT8 = np.dtype(np.uint8)
FLOAT32 = np.dtype(np.float32)


def image(height: int, width: int, channels: int = 3, dtype: np.dtype = UINT8, name: str = "") -> ObservationSpec:
    return ObservationSpec((height, width, channels), dtype, name)


def test_min_resolutions_are_ml_agents() -> None:
    """ML-Agents' ``ModelUtils.MIN_RESOLUTION_FOR_ENCODER``, one entry per encoder type."""
    assert MIN_RESOLUTION == {
        EncoderType.FULLY_CONNECTED: 1,
        EncoderType.MATCH3: 5,
        EncoderType.SIMPLE: 20,
        EncoderType.NATURE_CNN: 36,
        EncoderType.RESNET: 15,
    }


@pytest.mark.parametrize("encoder_type", list(EncoderType), ids=[e.value for e in EncoderType])
@pytest.mark.parametrize("extra", [0, 7], ids=["square", "wide"])
def test_each_encoder_gives_f_features_from_its_minimum_side_up(encoder_type: EncoderType, extra: int) -> None:
    side = MIN_RESOLUTION[encoder_type]
    for shape in ((side, side + extra, 3), (side + 9, side + extra, 1)):
        encoder = ObservationEncoder([image(*shape)], encoder_type, F)
        out = encoder([tf.zeros([2, *shape], tf.uint8)])
        assert out.shape == (2, F) and out.dtype == tf.float32
        assert encoder.output_size == F


@pytest.mark.parametrize("encoder_type", list(EncoderType), ids=[e.value for e in EncoderType])
def test_below_the_minimum_side_is_a_config_error_naming_key_observation_and_minimum(encoder_type: EncoderType) -> None:
    side = MIN_RESOLUTION[encoder_type]
    for shape in ((side - 1, side + 3, 3), (side + 3, side - 1, 3)):
        specs = [ObservationSpec((4,), FLOAT32), image(*shape, name="camera")]
        with pytest.raises(ConfigKeyError) as info:
            ObservationEncoder(specs, encoder_type, F, behavior_name="Grid")
        assert info.value.key == "behaviors.Grid.network_settings.vis_encode_type"
        message = str(info.value)
        assert f"{encoder_type.value!r} needs images of at least {side}x{side}" in message
        assert f"observation 1 ('camera') is {shape[0]}x{shape[1]}" in message


def test_the_error_lists_the_encoders_that_fit() -> None:
    with pytest.raises(ConfigKeyError, match=r"these fit: fully_connected, match3, resnet\)"):
        observation_encoder([image(19, 19)], EncoderType.SIMPLE, F, "Grid", "policy_encoder")


def _layers(encoder_type: EncoderType) -> list[tuple[str, tuple[int, ...], tuple[int, ...], int]]:
    """(kind, kernel, strides, filters or units) of each conv/pool/dense layer, residual blocks as 'block'."""
    model = visual_encoder(encoder_type, F, "probe")
    model.build((None, 40, 40, 3))
    out = []
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv2D):
            out.append(("conv", tuple(layer.kernel_size), tuple(layer.strides), layer.filters))
        elif isinstance(layer, tf.keras.layers.MaxPool2D):
            out.append(("pool", tuple(layer.pool_size), tuple(layer.strides), 0))
        elif isinstance(layer, tf.keras.layers.Dense):
            out.append(("dense", (), (), layer.units))
        elif type(layer).__name__ == "_ResidualBlock":
            out.append(("block", (3, 3), (1, 1), layer.conv_a.filters))
    return out


def test_layer_structure_is_ml_agents() -> None:
    """The conv stacks of ML-Agents' encoders.py: kernel, stride and channels of each layer, then a dense of F."""
    assert _layers(EncoderType.SIMPLE) == [("conv", (8, 8), (4, 4), 16), ("conv", (4, 4), (2, 2), 32), ("dense", (), (), F)]
    assert _layers(EncoderType.NATURE_CNN) == [
        ("conv", (8, 8), (4, 4), 32),
        ("conv", (4, 4), (2, 2), 64),
        ("conv", (3, 3), (1, 1), 64),
        ("dense", (), (), F),
    ]
    assert _layers(EncoderType.MATCH3) == [("conv", (3, 3), (1, 1), 35), ("conv", (3, 3), (1, 1), 144), ("dense", (), (), F)]
    assert _layers(EncoderType.FULLY_CONNECTED) == [("dense", (), (), F)]
    stack = [("conv", (3, 3), (1, 1)), ("pool", (3, 3), (2, 2)), ("block", (3, 3), (1, 1)), ("block", (3, 3), (1, 1))]
    expected = [(*layer, channels if layer[0] != "pool" else 0) for channels in (16, 32, 32) for layer in stack]
    assert _layers(EncoderType.RESNET) == [*expected, ("dense", (), (), F)]


def test_vectors_and_cameras_are_encoded_and_concatenated_in_observation_order() -> None:
    specs = [ObservationSpec((3,), FLOAT32), image(20, 24), ObservationSpec((2,), FLOAT32), image(21, 20, 1, FLOAT32)]
    encoder = ObservationEncoder(specs, EncoderType.SIMPLE, F)
    assert encoder.output_size == 3 + F + 2 + F
    rng = np.random.default_rng(0)
    vector_a, vector_b = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32)
    camera = rng.integers(0, 256, (4, 20, 24, 3)).astype(np.uint8)
    depth = rng.random((4, 21, 20, 1)).astype(np.float32)
    out = encoder([tf.constant(vector_a), tf.constant(camera), tf.constant(vector_b), tf.constant(depth)]).numpy()
    np.testing.assert_array_equal(out[:, :3], vector_a)  # vectors pass through, in place
    np.testing.assert_array_equal(out[:, 3 + F : 3 + F + 2], vector_b)
    visual = encoder._visual
    assert visual[0] is None and visual[2] is None and visual[1] is not None and visual[3] is not None
    np.testing.assert_allclose(out[:, 3 : 3 + F], visual[1](camera.astype(np.float32) * np.float32(IMAGE_SCALE)), atol=1e-6)
    np.testing.assert_allclose(out[:, 3 + F + 2 :], visual[3](depth), atol=1e-6)  # a float32 image is not rescaled


def test_a_uint8_frame_reads_as_the_same_frame_scaled_to_0_1() -> None:
    encoder = ObservationEncoder([image(36, 36)], EncoderType.NATURE_CNN, F)
    frame = np.random.default_rng(1).integers(0, 256, (3, 36, 36, 3)).astype(np.uint8)
    from_uint8 = encoder([tf.constant(frame)]).numpy()
    camera = encoder._visual[0]
    assert camera is not None
    from_float = camera(frame.astype(np.float32) / 255.0).numpy()
    np.testing.assert_allclose(from_uint8, from_float, rtol=1e-5, atol=1e-6)


def test_vectors_only_need_no_encoder() -> None:
    specs = [ObservationSpec((3,), FLOAT32), ObservationSpec((2,), FLOAT32)]
    assert observation_encoder(specs, EncoderType.NATURE_CNN, F, "A", "policy_encoder") is None


def test_every_encoder_weight_is_trainable_and_checkpointed(tmp_path: Path) -> None:
    encoder = ObservationEncoder([image(15, 15), image(20, 20)], EncoderType.RESNET, F)
    # resnet: per stack a conv and two blocks of two convs (kernel + bias each), then the dense: 2 * (3 * 5 * 2 + 2)
    assert len(encoder.trainable_variables) == 2 * (3 * 5 * 2 + 2)
    saved = [v.numpy() for v in encoder.trainable_variables]
    path = tf.train.Checkpoint(encoder=encoder).save(str(tmp_path / "ckpt"))
    for v in encoder.trainable_variables:
        v.assign(tf.zeros_like(v))
    tf.train.Checkpoint(encoder=encoder).restore(path).assert_consumed()
    for v, value in zip(encoder.trainable_variables, saved, strict=True):
        np.testing.assert_array_equal(v.numpy(), value)


def test_demonstrated_float_frames_become_the_cameras_uint8() -> None:
    """Demo PNGs decode to k / 255 in float32; a uint8 camera's rows get exactly k back."""
    k = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    demo = k.astype(np.float32) / np.float32(255.0)
    np.testing.assert_array_equal(as_observation_dtype(demo, image(16, 16, 1)), k)
    assert as_observation_dtype(demo, image(16, 16, 1, FLOAT32)) is demo
    assert as_observation_dtype(np.zeros((2, 3), np.float64), ObservationSpec((3,), FLOAT32)).dtype == np.float32


def test_onnx_boundary_is_channels_first() -> None:
    assert onnx_input_shape((84, 64, 3)) == (3, 84, 64)
    assert onnx_input_shape((5,)) == (5,)
