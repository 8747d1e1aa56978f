"""Policy export: a TensorFlow policy network in, a self-contained ``PolicyUpdate`` out.

The processor acts with no trainer code (ARCHITECTURE.md, "Layout"), so every policy version
travels as an inference artifact the processor runs with the LiteRT interpreter: a TFLite
flatbuffer, chosen by ``benchmarks/inference_formats.py`` (a ``tf.function`` call costs several
hundred microseconds, the TFLite interpreter a few to a few tens).

The flatbuffer's contract (read by ``processor.inference``):

* one signature; its inputs are named ``obs_0``, ``obs_1``, ... (observation ``i``), each float32
  ``[N, *shape]`` with a dynamic batch axis ``N`` (the processor normalises observations itself
  when the update carries normaliser state);
* its outputs, by name: ``"mean"`` and ``"log_std"``, float32 ``[N, C]`` (continuous actions), and
  ``"logits"``, float32 ``[N, sum(branches)]`` (discrete actions, branches side by side,
  unmasked).

Export speed: the weights are frozen into constants and only the frozen graph is converted
(no SavedModel with variables in between). A 2x64 MLP converts in about 0.1 s on the build
machine; keep one ``TFLiteExporter`` per network so ``export()`` does not retrace it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

# Public TF has no "freeze a concrete function" API; this one has been stable since TF 2.0 and is
# what the converter itself uses on its slower SavedModel path.
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from protos import pb
from protos.tensors import to_tensor

logger = logging.getLogger(__name__)

#: The artifact format ``export_tflite`` produces (``InferenceArtifact.format``).
TFLITE_FORMAT = "tflite"
#: The output names an artifact may carry; anything else the forward returns is dropped.
POLICY_OUTPUTS = ("mean", "log_std", "logits")


def input_name(index: int) -> str:
    """The signature input name of observation ``index``: ``obs_0``, ``obs_1``, ..."""
    return f"obs_{index}"


def _call_forward(forward: Callable[..., Any], observations: list[tf.Tensor]) -> Any:
    """Calls ``forward`` the way its kind expects: a Keras model takes one input or a list."""
    if isinstance(forward, keras.Model):
        return forward(observations[0] if len(observations) == 1 else observations)
    return forward(*observations)


def _policy_outputs(outputs: Any, forward: Callable[..., Any]) -> dict[str, tf.Tensor]:
    """The named policy outputs of one forward call, with a state-independent log_std broadcast."""
    if isinstance(outputs, (list, tuple)) and hasattr(forward, "output_names"):
        outputs = dict(zip(forward.output_names, outputs, strict=True))
    if not isinstance(outputs, Mapping):
        raise ValueError(f"the policy forward must return a mapping with keys among {POLICY_OUTPUTS}, got {type(outputs)}")
    named = {k: tf.convert_to_tensor(v, tf.float32) for k, v in outputs.items() if k in POLICY_OUTPUTS}
    if not named:
        raise ValueError(f"the policy forward returned {sorted(outputs)}; none of {POLICY_OUTPUTS}")
    if ("mean" in named) != ("log_std" in named):
        raise ValueError(f"'mean' and 'log_std' go together; the forward returned {sorted(named)}")
    if "log_std" in named and named["log_std"].shape.rank == 1:
        # A state-independent log_std (PPO's usual variable of shape [C]) becomes [N, C].
        named["log_std"] = tf.broadcast_to(named["log_std"], tf.shape(named["mean"]))
    for key, value in named.items():
        if value.shape.rank != 2:
            raise ValueError(f"output {key!r} must be [N, width], got shape {value.shape}")
    return named


@contextlib.contextmanager
def _quiet_tensorflow_info() -> Iterator[None]:
    """Holds back TF's per-conversion INFO lines ("Assets written to ...") during one export."""
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    tf_logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        tf_logger.setLevel(level)


class TFLiteExporter:
    """Converts one policy network to TFLite, again and again as its weights change.

    The wrapper ``tf.function`` is traced once, on the first ``export()``; each export then only
    freezes the current weights and converts.
    """

    def __init__(self, forward: Callable[..., Any], observation_shapes: Sequence[Sequence[int]]) -> None:
        """Prepares the export of ``forward``.

        Args:
            forward: a ``tf.function``/callable taking one float32 tensor ``[N, *shape]`` per
                observation (``forward(obs_0, obs_1, ...)``), or a Keras model (called with its
                single input, or with the list of its inputs). It returns a mapping (or a Keras
                model's list, named by ``output_names``) with ``"mean"`` and ``"log_std"``
                (``[N, C]``; ``log_std`` may also be ``[C]``) and/or ``"logits"``
                (``[N, sum(branches)]``). Other keys (a value head) are dropped.
            observation_shapes: the shape of each observation without the agent axis.
        """
        if not observation_shapes:
            raise ValueError("a policy needs at least one observation")
        self.observation_shapes = [tuple(int(d) for d in shape) for shape in observation_shapes]
        specs = [
            tf.TensorSpec([None, *shape], tf.float32, name=input_name(i)) for i, shape in enumerate(self.observation_shapes)
        ]
        self._forward = forward

        @tf.function(input_signature=specs, autograph=False)
        def serve(*observations: tf.Tensor) -> dict[str, tf.Tensor]:
            return _policy_outputs(_call_forward(forward, list(observations)), forward)

        self._serve = serve
        self._specs = specs

    def export(self) -> bytes:
        """The TFLite flatbuffer of the network's current weights.

        Raises:
            ValueError: the forward's outputs do not follow the contract above.
            tf.errors.OpError / ConverterError: the graph uses an op outside TFLite's builtins.
        """
        start = time.perf_counter()
        concrete = self._serve.get_concrete_function()
        frozen = convert_variables_to_constants_v2(concrete)
        names = sorted(concrete.structured_outputs)  # dict outputs flatten in sorted key order

        # The frozen function returns a flat list; this wrapper gives the signature its names back.
        @tf.function(input_signature=self._specs, autograph=False)
        def signature(*observations: tf.Tensor) -> dict[str, tf.Tensor]:
            return dict(zip(names, frozen(*observations), strict=True))

        converter = tf.lite.TFLiteConverter.from_concrete_functions([signature.get_concrete_function()], tf.Module())
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        with _quiet_tensorflow_info():
            model = bytes(converter.convert())
        logger.debug("exported %s to TFLite: %d bytes in %.3f s", sorted(names), len(model), time.perf_counter() - start)
        return model


def export_tflite(forward: Callable[..., Any], observation_shapes: Sequence[Sequence[int]]) -> bytes:
    """One-off export of a policy network to a TFLite flatbuffer (see ``TFLiteExporter``).

    Args:
        forward: the policy network (see ``TFLiteExporter.__init__``).
        observation_shapes: the shape of each observation without the agent axis.

    Returns:
        The flatbuffer: inputs ``obs_i`` float32 ``[N, *shape_i]``; outputs ``"mean"``,
        ``"log_std"`` float32 ``[N, C]`` and/or ``"logits"`` float32 ``[N, sum(branches)]``.
    """
    return TFLiteExporter(forward, observation_shapes).export()


def normalizer_state(mean: np.ndarray, variance: np.ndarray, count: int) -> pb.NormalizerState:
    """One observation's running statistics, as the processor applies them.

    Args:
        mean: float32 ``[*shape]``.
        variance: float32 ``[*shape]``, the population variance (not a sum of squares).
        count: the observations the statistics cover.
    """
    msg = pb.NormalizerState(count=int(count))
    to_tensor(np.asarray(mean, np.float32), out=msg.mean)
    to_tensor(np.asarray(variance, np.float32), out=msg.variance)
    return msg


def make_policy_update(
    behavior_name: str,
    version: int,
    trainer_step: int,
    model_bytes: bytes,
    action_spec: pb.ActionSpec,
    normalizers: Sequence[pb.NormalizerState] = (),
    tanh_squash: bool = False,
    clip: float = 3.0,
) -> pb.PolicyUpdate:
    """Wraps an exported model into the ``PolicyUpdate`` the processor swaps in.

    Args:
        behavior_name: the behavior this policy acts for.
        version: the policy version; versions only go up.
        trainer_step: agent experiences the trainer had consumed.
        model_bytes: the TFLite flatbuffer from ``export_tflite``.
        action_spec: the behavior's action spec (C continuous dimensions, discrete branch sizes).
        normalizers: one ``normalizer_state`` per observation when normalisation is on, else none.
        tanh_squash: continuous actions are ``tanh`` of the Gaussian sample (SAC); otherwise the
            sample is clipped to ``[-clip, clip]`` for the env (PPO).
        clip: the clip bound in clip mode (> 0; ``inf`` for none).

    Returns:
        The update message.

    Raises:
        ValueError: an empty model, a negative version, or a non-positive clip in clip mode.
    """
    if not model_bytes:
        raise ValueError("model_bytes is empty")
    if version < 0:
        raise ValueError(f"version {version} is negative")
    if action_spec.continuous_size > 0 and not tanh_squash and not clip > 0:
        raise ValueError(f"clip must be > 0 in clip mode, got {clip}")
    artifact = pb.InferenceArtifact(format=TFLITE_FORMAT, model=model_bytes, tanh_squash=tanh_squash, clip=clip)
    artifact.action_spec.CopyFrom(action_spec)
    artifact.normalizers.extend(normalizers)
    return pb.PolicyUpdate(behavior_name=behavior_name, version=version, trainer_step=trainer_step, artifact=artifact)
