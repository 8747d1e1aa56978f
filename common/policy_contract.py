"""The policy contract: what the trainer's exporter and the processor's inference both rely on.

A policy crosses from trainer to processor as a ``PolicyUpdate`` whose ``InferenceArtifact`` holds
a model the processor runs with no trainer code (``trainer.export`` writes it,
``processor.inference`` reads it). The message's fields are fixed by ``protos/stepstream.proto``;
what the model inside must look like, and the arithmetic both sides must do identically around
it, is fixed here, once, and both sides import it.

Shapes: ``N`` agent rows, ``C`` continuous action dimensions, ``M = sum(branches)`` logits.

The model (``format`` ``TFLITE_FORMAT``):

* one signature; its inputs are named ``input_name(i)`` (``obs_0``, ``obs_1``, ...), one per
  observation, each ``[N, *shape_i]`` with a dynamic ``N``: float32 for a vector ``[size]``, and
  for an image ``[H, W, C]`` (``is_image_shape``, channels last) the observation's own dtype,
  uint8 or float32. Vector inputs are *normalised* observations: when the update carries
  normaliser state, the processor applies ``clip((obs - mean) / sqrt(variance +
  NORMALIZATION_EPSILON), -NORMALIZATION_CLIP, NORMALIZATION_CLIP)`` first, and the trainer trains
  the network on the same transform. ``InferenceArtifact.normalizers`` holds one state per
  *vector* observation, in observation order: images are never normalised. A uint8 image enters
  the model as it came off the wire and the model itself scales it by ``IMAGE_SCALE`` into [0, 1]
  (ML-Agents scales pixels to [0, 1] before its encoders); a float32 image is taken as it is,
  already in [0, 1]. The trainer's networks take the same raw images, so TF and the artifact agree.
* its outputs, by name: ``MEAN`` and ``LOG_STD``, float32 ``[N, C]``, together or not at all
  (continuous actions, Gaussian ``N(mean, exp(log_std))``); ``LOGITS``, float32 ``[N, M]``
  (discrete actions, branches side by side, unmasked); with gSDE (PPO's ``use_sde``), also
  ``SDE_NOISE_SCALE``, float32 ``[N, L, C]``: ``latent_j(s) * sigma_jc``, the policy's last hidden layer
  (``L`` units) times the exploration matrix's std. The exploration noise of a held standard-normal
  matrix ``E`` ``[L, C]`` is then ``noise_c = sum_j scale[j, c] * E[j, c]`` (``latent(s) @ W`` with
  ``W = sigma * E ~ N(0, sigma^2)``), and ``LOG_STD`` is its marginal given the state:
  ``0.5 * log(sum_j scale[j, c]^2 + SDE_EPSILON)``. The exporter writes no others, the processor
  reads no others.

The arithmetic around the model, whose stored log-probs a trainer recomputes and must match:

* discrete: masked options get the logit ``MASKED_LOGIT`` before the log-softmax;
* continuous in squash mode (``InferenceArtifact.tanh_squash``): the log-prob of ``a = tanh(u)``
  adds ``-log(1 - a^2 + TANH_LOG_EPSILON)`` per dimension, computed in float64 from the float32 ``a``.

The ONNX model Unity runs (``trainer.onnx_export`` writes it; ML-Agents 1.1.0's model contract,
``MODEL_API_VERSION`` 3, opset ``ONNX_OPSET``): inputs ``input_name(i)`` float32 ``[batch, *shape_i]``
of *raw* observations (the normaliser is inside the graph), an image as float32 ``[batch, C, H, W]``
in [0, 1] (``onnx_input_shape``: ML-Agents' ``ModelSerializer`` exports images channels first, as
Sentis feeds them, and its encoders skip their NHWC-to-NCHW permute while exporting) and, with discrete actions,
``ACTION_MASKS`` float32 ``[batch, M]`` (1 = allowed); outputs, in ``ONNX_OUTPUTS`` order, those of
the action spec: the constants ``VERSION_NUMBER`` and ``MEMORY_SIZE`` float32 ``[1]``; continuous:
``CONTINUOUS_ACTIONS`` (sampled) and ``DETERMINISTIC_CONTINUOUS_ACTIONS`` float32 ``[batch, C]``,
env actions, and ``CONTINUOUS_ACTION_OUTPUT_SHAPE`` float32 ``[1]`` = ``[C]``; discrete:
``DISCRETE_ACTIONS`` (sampled) and ``DETERMINISTIC_DISCRETE_ACTIONS`` int64 ``[batch, B]``, and
``DISCRETE_ACTION_OUTPUT_SHAPE`` float32 ``[1, B]`` = the branch sizes.

A recurrent policy (``InferenceArtifact.memory_size`` ``R`` > 0, ML-Agents' ``memory_size``: an LSTM's h and c
concatenated, ``[h | c]``, ``R / 2`` units each) also takes ``RECURRENT_IN`` float32 ``[N, R]``, each row's state
(zeros at an agent's first step of an episode), and returns ``RECURRENT_OUT`` float32 ``[N, R]``, its next state,
which the processor holds per agent and feeds back at that agent's next step. The names are ML-Agents'
(``TensorNames.cs``); the ONNX model's are ``[batch, 1, R]``.

Extending the contract: a new artifact format adds its format name beside ``TFLITE_FORMAT``, here,
so that exporter and runtime again share one copy.
This module imports nothing, so either side, and any tool between them, may import it.
"""

from __future__ import annotations

#: ``InferenceArtifact.format`` of a TFLite flatbuffer, the one format exported and run today.
TFLITE_FORMAT = "tflite"

#: ML-Agents' ``.onnx`` for Unity (module docstring): the input names beside ``input_name``, the
#: output names, the model API version (ML-Agents 2.0's, ``SimpleActor.MODEL_EXPORT_VERSION``) and the opset.
ACTION_MASKS = "action_masks"
VERSION_NUMBER = "version_number"
MEMORY_SIZE = "memory_size"
CONTINUOUS_ACTIONS = "continuous_actions"
CONTINUOUS_ACTION_OUTPUT_SHAPE = "continuous_action_output_shape"
DETERMINISTIC_CONTINUOUS_ACTIONS = "deterministic_continuous_actions"
DISCRETE_ACTIONS = "discrete_actions"
DISCRETE_ACTION_OUTPUT_SHAPE = "discrete_action_output_shape"
DETERMINISTIC_DISCRETE_ACTIONS = "deterministic_discrete_actions"
#: Every ONNX output name, in the order ML-Agents' exporter writes them (those of the action spec).
ONNX_OUTPUTS = (
    VERSION_NUMBER,
    MEMORY_SIZE,
    CONTINUOUS_ACTIONS,
    CONTINUOUS_ACTION_OUTPUT_SHAPE,
    DETERMINISTIC_CONTINUOUS_ACTIONS,
    DISCRETE_ACTIONS,
    DISCRETE_ACTION_OUTPUT_SHAPE,
    DETERMINISTIC_DISCRETE_ACTIONS,
)
MODEL_API_VERSION = 3
ONNX_OPSET = 9
#: The name of the dynamic first axis of every batched input and output.
ONNX_BATCH_AXIS = "batch"
#: What ML-Agents' graph subtracts from masked logits (``logits * mask - 1e8 * (1 - mask)``).
ONNX_MASKED_LOGIT_OFFSET = 1e8

#: Output names: the Gaussian's mean and log standard deviation (continuous), the logits (discrete).
MEAN = "mean"
LOG_STD = "log_std"
LOGITS = "logits"
#: gSDE's per-state noise scale ``[N, L, C]`` (module docstring), beside ``MEAN`` and ``LOG_STD``.
SDE_NOISE_SCALE = "sde_noise_scale"
#: A recurrent policy's state in and out, float32 ``[N, R]`` (module docstring).
RECURRENT_IN = "recurrent_in"
RECURRENT_OUT = "recurrent_out"
#: Every output name a model may carry.
POLICY_OUTPUTS = (MEAN, LOG_STD, LOGITS, SDE_NOISE_SCALE, RECURRENT_OUT)
#: Added to gSDE's variance before its square root (SB3's ``StateDependentNoiseDistribution.epsilon``), so a
#: state whose latent features are all 0 still has a finite log-prob.
SDE_EPSILON = 1e-6

#: ML-Agents' observation normalisation: the epsilon under the square root, and the clip bound.
NORMALIZATION_EPSILON = 1e-8
NORMALIZATION_CLIP = 5.0

#: The logit masked discrete options get before the log-softmax (probability ~0, log-prob finite).
MASKED_LOGIT = -1e9

#: Added inside the log of the tanh correction, so a saturated tanh (``a^2`` rounds to 1) stays finite.
TANH_LOG_EPSILON = 1e-6


#: The factor a uint8 image is multiplied by, inside the network, to bring it into [0, 1].
IMAGE_SCALE = 1.0 / 255.0


def is_image_shape(shape: tuple[int, ...]) -> bool:
    """Whether an observation of ``shape`` (no agent axis) is an image ``[H, W, C]`` (else a vector ``[size]``)."""
    return len(shape) == 3


def onnx_input_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """An observation's shape at the ONNX model's boundary: images ``[H, W, C]`` become ``[C, H, W]``."""
    if is_image_shape(shape):
        height, width, channels = shape
        return (channels, height, width)
    return tuple(shape)


def input_name(index: int) -> str:
    """The model's input name for observation ``index``: ``obs_0``, ``obs_1``, ..."""
    return f"obs_{index}"
