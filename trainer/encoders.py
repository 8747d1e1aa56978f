"""Observation encoders: ML-Agents' visual encoders (``network_settings.vis_encode_type``) and the encoder that
turns one agent's observations, vectors and cameras, into the one feature row the MLP body reads.

Shapes: ``B`` rows, ``H, W, C`` an image's height, width and channels (channels last, as on the wire),
``F`` an encoder's output features (``hidden_units``).

Each visual encoder has ML-Agents' layer structure (``mlagents.trainers.torch_entities.encoders``; the
smallest side each accepts is ML-Agents' ``ModelUtils.MIN_RESOLUTION_FOR_ENCODER``, ``MIN_RESOLUTION``):

* ``simple``: conv 16 8x8 stride 4, conv 32 4x4 stride 2, dense F; leaky ReLU after each. Min side 20.
* ``nature_cnn`` (Mnih et al. 2015, the DQN network): conv 32 8x8/4, conv 64 4x4/2, conv 64 3x3/1, dense F;
  leaky ReLU after each. Min side 36.
* ``resnet`` (Espeholt et al. 2018, IMPALA): three stacks of 16, 32, 32 channels, each a 3x3 conv (same
  padding), a 3x3 max-pool of stride 2 (no padding) and two residual blocks ``x + conv(swish(conv(swish(x))))``;
  then swish, dense F, ReLU. Min side 15.
* ``match3`` (King's Candy Crush network): conv 35 3x3/1, conv 144 3x3/1, dense F; leaky ReLU after each.
  Min side 5.
* ``fully_connected``: the flattened image, dense F, leaky ReLU. Min side 1.

Leaky ReLUs have PyTorch's slope 0.01; every dense layer's kernel is He-normal times 1.41 (ML-Agents'
``KaimingHeNormal`` with ``kernel_gain=1.41``), conv kernels PyTorch's default (uniform, bound 1/sqrt(fan_in)).
The flatten order is NHWC's rather than ML-Agents' NCHW one: the same set of features, permuted, so
nothing learnable differs.

``ObservationEncoder`` is ML-Agents' ``ObservationEncoder``: per observation, a vector passes through as it is
(already normalised by the learner or the processor: normalisation applies to vectors only) and an image goes
through its own visual encoder after a uint8 one is scaled into [0, 1] (``common.policy_contract.IMAGE_SCALE``);
the results are concatenated in observation order. With vectors only it holds no weights and is the plain
concatenation networks used before images.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from common.config import ConfigKeyError, EncoderType
from common.policy_contract import IMAGE_SCALE, is_image_shape
from common.specs import ObservationSpec

#: ML-Agents' smallest image side (height and width) each encoder accepts.
MIN_RESOLUTION: dict[EncoderType, int] = {
    EncoderType.FULLY_CONNECTED: 1,
    EncoderType.MATCH3: 5,
    EncoderType.SIMPLE: 20,
    EncoderType.NATURE_CNN: 36,
    EncoderType.RESNET: 15,
}

LEAKY_RELU_SLOPE = 0.01  # PyTorch's nn.LeakyReLU default, which ML-Agents' encoders use
_DENSE_GAIN = 1.41  # ML-Agents' kernel_gain for the encoders' dense layer ("ReLU gain")


def leaky_relu(x: tf.Tensor) -> tf.Tensor:
    """Leaky ReLU with PyTorch's slope (Keras' own default is 0.3).

    TensorFlow logs "remapper failed: ... fanout '.../LeakyRelu/LeakyReluGrad' exist for missing node
    '.../conv2d/BiasAdd'" once per training graph with a conv encoder: Grappler's remapper fuses Conv2D + BiasAdd +
    LeakyRelu into one op, but the backward pass's LeakyReluGrad reads the BiasAdd output it removed, so the pass
    is dropped for that graph (forward-only graphs, with no LeakyReluGrad, are not affected). Harmless for speed: written as
    ``tf.maximum(x, 0.01 * x)`` (no LeakyRelu op, no message) a T3 update took the same CPU time (``docs/benchmarks.md``,
    one-off measurements).
    """
    return tf.nn.leaky_relu(x, alpha=LEAKY_RELU_SLOPE)


def _swish(x: tf.Tensor) -> tf.Tensor:
    return x * tf.sigmoid(x)  # written out, as trainer.networks.swish (TFLite keeps the signature)


def _dense_kernel() -> tf.keras.initializers.Initializer:
    # He normal (std sqrt(2 / fan_in)), untruncated as torch's kaiming_normal_, times the gain.
    return tf.keras.initializers.VarianceScaling(2.0 * _DENSE_GAIN**2, "fan_in", "untruncated_normal")


def _conv_kernel() -> tf.keras.initializers.Initializer:
    # PyTorch's Conv2d default: kaiming_uniform(a=sqrt(5)), i.e. uniform with bound 1 / sqrt(fan_in).
    return tf.keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


def _conv(filters: int, size: int, stride: int, padding: str = "valid") -> tf.keras.layers.Conv2D:
    return tf.keras.layers.Conv2D(filters, size, stride, padding=padding, kernel_initializer=_conv_kernel())


def _dense(units: int, activation: Callable[[tf.Tensor], tf.Tensor]) -> tf.keras.layers.Dense:
    return tf.keras.layers.Dense(units, activation=activation, kernel_initializer=_dense_kernel())


class _ResidualBlock(tf.keras.layers.Layer):
    """``x + conv(swish(conv(swish(x))))``, both convs 3x3, same padding, ``channels`` out."""

    def __init__(self, channels: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.conv_a = _conv(channels, 3, 1, "same")
        self.conv_b = _conv(channels, 3, 1, "same")

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        self.conv_a.build(input_shape)
        self.conv_b.build(input_shape)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return x + self.conv_b(_swish(self.conv_a(_swish(x))))


def visual_encoder(encoder_type: EncoderType, output_size: int, name: str) -> tf.keras.Sequential:
    """The layers of one visual encoder (module docstring): float32 ``[B, H, W, C]`` in [0, 1] -> ``[B, F]``."""
    flatten = tf.keras.layers.Flatten()
    layers: list[tf.keras.layers.Layer]
    if encoder_type is EncoderType.SIMPLE:
        layers = [_conv(16, 8, 4), _act(leaky_relu), _conv(32, 4, 2), _act(leaky_relu), flatten]
        layers.append(_dense(output_size, leaky_relu))
    elif encoder_type is EncoderType.NATURE_CNN:
        layers = [_conv(32, 8, 4), _act(leaky_relu), _conv(64, 4, 2), _act(leaky_relu), _conv(64, 3, 1), _act(leaky_relu)]
        layers += [flatten, _dense(output_size, leaky_relu)]
    elif encoder_type is EncoderType.RESNET:
        layers = []
        for channels in (16, 32, 32):
            layers += [_conv(channels, 3, 1, "same"), tf.keras.layers.MaxPool2D(3, 2, padding="valid")]
            layers += [_ResidualBlock(channels), _ResidualBlock(channels)]
        layers += [_act(_swish), flatten, _dense(output_size, tf.nn.relu)]
    elif encoder_type is EncoderType.MATCH3:
        layers = [_conv(35, 3, 1), _act(leaky_relu), _conv(144, 3, 1), _act(leaky_relu), flatten]
        layers.append(_dense(output_size, leaky_relu))
    elif encoder_type is EncoderType.FULLY_CONNECTED:
        layers = [flatten, _dense(output_size, leaky_relu)]
    else:  # pragma: no cover - EncoderType is closed
        raise AssertionError(encoder_type)
    return tf.keras.Sequential(layers, name=name)


def _act(fn: Callable[[tf.Tensor], tf.Tensor]) -> tf.keras.layers.Activation:
    return tf.keras.layers.Activation(fn)


def check_resolution(spec: ObservationSpec, index: int, encoder_type: EncoderType, behavior_name: str) -> None:
    """Refuses an image smaller than ``encoder_type`` accepts.

    Raises:
        ConfigKeyError: on ``behaviors.<name>.network_settings.vis_encode_type``, naming the observation,
            its size and the minimum side.
    """
    minimum = MIN_RESOLUTION[encoder_type]
    height, width = spec.shape[0], spec.shape[1]
    if height < minimum or width < minimum:
        label = f" ({spec.name!r})" if spec.name else ""
        detail = (
            f"{encoder_type.value!r} needs images of at least {minimum}x{minimum} (height x width), but observation "
            f"{index}{label} is {height}x{width}; choose another encoder ({_fitting(height, width)}) or a larger image"
        )
        raise ConfigKeyError(f"behaviors.{behavior_name}.network_settings.vis_encode_type", detail)


def _fitting(height: int, width: int) -> str:
    fits = [t.value for t, side in MIN_RESOLUTION.items() if min(height, width) >= side]
    return "these fit: " + ", ".join(fits) if fits else "none fits"


class ObservationEncoder(tf.Module):
    """One agent's observations -> one feature row (module docstring): ``[B, output_size]``."""

    def __init__(
        self,
        observation_specs: Sequence[ObservationSpec],
        encoder_type: EncoderType,
        hidden_units: int,
        behavior_name: str = "",
        name: str = "encoder",
    ) -> None:
        """Builds a visual encoder of ``hidden_units`` outputs for each image observation.

        Raises:
            ConfigKeyError: an image smaller than ``encoder_type``'s minimum (``check_resolution``).
        """
        super().__init__(name=name)
        self.observation_specs = tuple(observation_specs)
        self._visual: list[tf.keras.Sequential | None] = []
        sizes = []
        for i, spec in enumerate(self.observation_specs):
            if is_image_shape(spec.shape):
                check_resolution(spec, i, encoder_type, behavior_name)
                encoder = visual_encoder(encoder_type, hidden_units, f"{name}_visual_{i}")
                encoder.build((None, *spec.shape))
                self._visual.append(encoder)
                sizes.append(hidden_units)
            else:
                self._visual.append(None)
                sizes.append(int(math.prod(spec.shape)))
        self.output_size = int(sum(sizes))

    @property
    def has_images(self) -> bool:
        return any(encoder is not None for encoder in self._visual)

    def __call__(self, observations: Sequence[tf.Tensor]) -> tf.Tensor:
        """``observations``: one ``[B, *shape_i]`` per observation (vectors float32 and already normalised, images
        uint8 or float32 as they came) -> float32 ``[B, output_size]``."""
        parts = []
        for x, encoder in zip(observations, self._visual, strict=True):
            if encoder is None:
                parts.append(x)
                continue
            parts.append(encoder(scaled_image(x)))
        return parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every weight of the visual encoders (Keras 3 weights are invisible to ``tf.Module``'s walk)."""
        return tuple(w for encoder in self._visual if encoder is not None for w in encoder.trainable_variables)

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        return self.trainable_variables


def image_observation_dtypes(observation_specs: Sequence[ObservationSpec]) -> list[np.dtype]:
    """The dtype each observation enters the networks and the artifact with: float32 vectors, images their own."""
    return [np.dtype(s.dtype) if is_image_shape(s.shape) else np.dtype(np.float32) for s in observation_specs]


def observation_encoder(
    observation_specs: Sequence[ObservationSpec], encoder_type: EncoderType, hidden_units: int, behavior_name: str, name: str
) -> ObservationEncoder | None:
    """A network's own ``ObservationEncoder`` when some observation is an image; None with vectors only (the
    networks then concatenate them, and hold exactly the weights they held before images).

    Raises:
        ConfigKeyError: an image smaller than ``encoder_type``'s minimum (``check_resolution``).
    """
    if not any(is_image_shape(spec.shape) for spec in observation_specs):
        return None
    return ObservationEncoder(observation_specs, encoder_type, hidden_units, behavior_name, name)


def as_observation_dtype(rows: np.ndarray, spec: ObservationSpec) -> np.ndarray:
    """Observation rows ``[K, *shape]`` in the dtype ``spec`` declares. Demonstrations decode their PNG images to
    float32 in [0, 1] (``common.demo_images``); a behavior whose camera sends uint8 gets them back as the uint8
    ``round(x / IMAGE_SCALE)`` (exact: the PNG's values are k / 255), so expert and agent rows agree."""
    want = np.dtype(spec.dtype) if is_image_shape(spec.shape) else np.dtype(np.float32)
    if rows.dtype == want:
        return rows
    if want == np.uint8:
        return np.clip(np.rint(np.asarray(rows, np.float64) / IMAGE_SCALE), 0, 255).astype(np.uint8)
    return np.asarray(rows, want)


def scaled_image(x: tf.Tensor) -> tf.Tensor:
    """A uint8 image tensor as float32 in [0, 1] (times ``IMAGE_SCALE``); any other tensor as float32."""
    if x.dtype == tf.uint8:
        return tf.cast(x, tf.float32) * IMAGE_SCALE
    return tf.cast(x, tf.float32)
