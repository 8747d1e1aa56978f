"""Policy export: a TensorFlow policy network in, a self-contained ``PolicyUpdate`` out.

The processor acts with no trainer code (docs/architecture.md, "The policy artifact"), so every policy version
travels as an inference artifact the processor runs with the LiteRT interpreter: a TFLite
flatbuffer, chosen by ``benchmarks/inference_formats.py`` (a ``tf.function`` call costs several
hundred microseconds, the TFLite interpreter a few to a few tens).

The flatbuffer follows ``common.policy_contract``, which ``processor.inference`` reads it by: one
signature, inputs ``input_name(i)`` (``obs_0``, ...) ``[N, *shape_i]`` with a dynamic ``N`` (float32; an image
uint8 or float32, as its observation, scaled inside the network),
outputs ``MEAN`` and ``LOG_STD`` float32 ``[N, C]`` and/or ``LOGITS`` float32 ``[N, sum(branches)]`` (gSDE adds
``SDE_NOISE_SCALE`` float32 ``[N, L, C]``). A recurrent policy (``memory_size`` R > 0) adds the input ``RECURRENT_IN``
and the output ``RECURRENT_OUT``, float32 ``[N, R]``: the forward is called as ``forward(obs_0, ..., memories)``.

Export speed: the graph never changes between exports, only the weights, so the exporter converts
with probe weights once and then writes each export's weights straight into the flatbuffer's constant
buffers (``trainer.weight_template``): ~0.1 ms per export for a 2x64 MLP instead of a ~0.12 s conversion
(0.2-0.5 s on a loaded machine; ``benchmarks/export_speed.py``). The first ``export()`` pays for three,
once per machine: their bytes depend only on the traced graph and the fixed probe values, so they are
kept in a cache folder (``trainer.probe_cache``) keyed by a hash of both, and a later run's first export
reads them instead of converting (a hit is checked exactly as a conversion is).
Networks whose weights the converter folds in ways the template cannot replay fall back, with one
warning, to a full conversion per export (``TFLiteExporter``). Keep one ``TFLiteExporter`` per
network.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

# Public TF has no "freeze a concrete function" API; this one has been stable since TF 2.0 and is
# what the converter itself uses on its slower SavedModel path.
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from common.policy_contract import (
    LOG_STD,
    MEAN,
    POLICY_OUTPUTS,
    RECURRENT_IN,
    RECURRENT_OUT,
    SDE_NOISE_SCALE,
    TFLITE_FORMAT,
    input_name,
)
from common.tensors import to_tensor
from protos import pb
from trainer.probe_cache import load_probes, probe_cache_dir, probe_cache_key, store_probes
from trainer.weight_template import NotPatchableError, WeightTemplate, matched_template, probe_sets

logger = logging.getLogger(__name__)


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
    if (MEAN in named) != (LOG_STD in named):
        raise ValueError(f"{MEAN!r} and {LOG_STD!r} go together; the forward returned {sorted(named)}")
    if LOG_STD in named and named[LOG_STD].shape.rank == 1:
        # A state-independent log_std (PPO's usual variable of shape [C]) becomes [N, C].
        named[LOG_STD] = tf.broadcast_to(named[LOG_STD], tf.shape(named[MEAN]))
    if SDE_NOISE_SCALE in named and (MEAN not in named or named[SDE_NOISE_SCALE].shape.rank != 3):
        raise ValueError(f"output {SDE_NOISE_SCALE!r} must be [N, L, C] beside {MEAN!r}, got {sorted(named)}")
    if RECURRENT_OUT in named and len(named) == 1:
        raise ValueError(f"output {RECURRENT_OUT!r} needs the action outputs beside it, got {sorted(named)}")
    for key, value in named.items():
        if value.shape.rank != 2 and key != SDE_NOISE_SCALE:
            raise ValueError(f"output {key!r} must be [N, width], got shape {value.shape}")
    return named


@contextlib.contextmanager
def quiet_logger(name: str) -> Iterator[None]:
    """Holds back a library logger's INFO lines during one conversion (TF's "Assets written to ...",
    tf2onnx's versions and op counts)."""
    library_logger = logging.getLogger(name)
    level = library_logger.level
    library_logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        library_logger.setLevel(level)


#: A patched export runs against the TF forward on the first export and then every this many.
VERIFY_EVERY = 100
_CHECK_ROWS = 3  # rows of the fixed random observations a patched export is checked on
_CHECK_TOLERANCE = 1e-5  # atol and rtol of that check (LiteRT vs TF differ by ~1e-7 on a 2x64 MLP)


def _read(variable: tf.Variable) -> np.ndarray:
    """A variable's value as numpy: the raw read op costs ~10 us, ``Variable.numpy()`` ~30 us."""
    return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype).numpy()


def _patchable_variables(concrete: Any) -> list[tf.Variable]:
    """The forward's variables in capture order, each float32 of a fixed shape, one per captured resource.

    Capture order, not ``concrete.variables``' own (which varies between traces): the probe values, and so the cached
    conversions, follow this order.

    Raises:
        NotPatchableError: a captured resource that is not a variable, or a variable of another dtype or a free shape.
    """
    captured_at = {id(t): i for i, t in enumerate(concrete.captured_inputs)}
    variables = sorted(concrete.variables, key=lambda v: captured_at.get(id(v.handle), len(captured_at)))
    captured = sum(1 for t in concrete.captured_inputs if t.dtype == tf.resource)
    if captured != len(variables):
        raise NotPatchableError(f"the forward captures {captured} resources but {len(variables)} variables")
    for v in variables:
        if v.dtype != tf.float32 or not v.shape.is_fully_defined():
            raise NotPatchableError(f"variable {v.name} is {v.dtype.name} {v.shape}, not float32 of a fixed shape")
    return variables


def _cached_template(cached: Path, probes: list[list[np.ndarray]], shapes: list[tuple[int, ...]]) -> WeightTemplate | None:
    """The template of the probe conversions cached at ``cached``; None when there are none, or they do not match
    their probes (a damaged entry, converted afresh and replaced)."""
    models = load_probes(cached, len(probes))
    if models is None:
        return None
    try:
        return matched_template(models, probes, shapes)
    except NotPatchableError as err:
        logger.warning("probe cache entry %s does not match its probes (%s); converting again", cached, err)
        return None


class TFLiteExporter:
    """Exports one policy network to TFLite, again and again as its weights change.

    The wrapper ``tf.function`` is traced once, on the first ``export()``, which also builds the
    weight template (module notes, "weight patching"); later exports read the variables and patch
    them in. Not thread-safe, and not to run alongside training of the same network: building the
    template assigns probe values to the network's variables for three conversions (and restores them).
    """

    def __init__(
        self,
        forward: Callable[..., Any],
        observation_shapes: Sequence[Sequence[int]],
        *,
        patch_weights: bool = True,
        verify_every: int = VERIFY_EVERY,
        observation_dtypes: Sequence[Any] | None = None,
        memory_size: int = 0,
    ) -> None:
        """Prepares the export of ``forward``.

        Args:
            forward: a ``tf.function``/callable taking one float32 tensor ``[N, *shape]`` per
                observation (``forward(obs_0, obs_1, ...)``), or a Keras model (called with its
                single input, or with the list of its inputs). It returns a mapping (or a Keras
                model's list, named by ``output_names``) with ``"mean"`` and ``"log_std"``
                (``[N, C]``; ``log_std`` may also be ``[C]``) and/or ``"logits"``
                (``[N, sum(branches)]``). Other keys (a value head) are dropped.
            observation_shapes: the shape of each observation without the agent axis.
            patch_weights: patch new weights into a template (default) rather than convert in full
                on every export.
            verify_every: check every this many patched exports against the TF forward (the first
                always; 0 for the first only).
            observation_dtypes: each input's dtype (``common.policy_contract``: float32, or uint8 for a uint8
                image); default float32 for all.
            memory_size: R > 0 for a recurrent policy: ``forward`` takes the states ``[N, R]`` after the
                observations and returns ``RECURRENT_OUT`` ``[N, R]`` beside the action outputs.
        """
        if not observation_shapes:
            raise ValueError("a policy needs at least one observation")
        self.observation_shapes = [tuple(int(d) for d in shape) for shape in observation_shapes]
        dtypes = observation_dtypes if observation_dtypes is not None else [np.float32] * len(self.observation_shapes)
        self.observation_dtypes = [np.dtype(d) for d in dtypes]
        if len(self.observation_dtypes) != len(self.observation_shapes):
            raise ValueError(f"{len(self.observation_dtypes)} dtypes for {len(self.observation_shapes)} observations")
        specs = [
            tf.TensorSpec([None, *shape], tf.as_dtype(dtype), name=input_name(i))
            for i, (shape, dtype) in enumerate(zip(self.observation_shapes, self.observation_dtypes, strict=True))
        ]
        self.memory_size = int(memory_size)
        if self.memory_size:
            specs.append(tf.TensorSpec([None, self.memory_size], tf.float32, name=RECURRENT_IN))
        self._forward = forward

        @tf.function(input_signature=specs, autograph=False)
        def serve(*observations: tf.Tensor) -> dict[str, tf.Tensor]:
            return _policy_outputs(_call_forward(forward, list(observations)), forward)

        self._serve = serve
        self._specs = specs
        self._patching = patch_weights
        self._verify_every = max(int(verify_every), 0)
        self._since_check = 0
        self._template: WeightTemplate | None = None
        self._variables: list[tf.Variable] = []
        self._concrete: Any = None  # the traced ``serve``, kept: looking it up costs ~50 us

    @property
    def patches_weights(self) -> bool:
        """Whether exports patch weights into a template (False once it fell back to full conversion)."""
        return self._patching

    def export(self) -> bytes:
        """The TFLite flatbuffer of the network's current weights.

        Raises:
            ValueError: the forward's outputs do not follow the contract above.
            tf.errors.OpError / ConverterError: the graph uses an op outside TFLite's builtins.
        """
        start = time.perf_counter()
        if self._concrete is None:
            self._concrete = self._serve.get_concrete_function()
        concrete = self._concrete
        model = self._patched(concrete) if self._patching else None
        how = "patched"
        if model is None:
            model, how = self._convert(concrete), "converted"
        logger.debug("exported to TFLite (%s): %d bytes in %.6f s", how, len(model), time.perf_counter() - start)
        return model

    def _convert(self, concrete: Any) -> bytes:
        """A full conversion of ``concrete`` (the traced ``serve``) with the current weights frozen in."""
        frozen = convert_variables_to_constants_v2(concrete)
        names = sorted(concrete.structured_outputs)  # dict outputs flatten in sorted key order

        # The frozen function returns a flat list; this wrapper gives the signature its names back.
        @tf.function(input_signature=self._specs, autograph=False)
        def signature(*observations: tf.Tensor) -> dict[str, tf.Tensor]:
            return dict(zip(names, frozen(*observations), strict=True))

        converter = tf.lite.TFLiteConverter.from_concrete_functions([signature.get_concrete_function()], tf.Module())
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        with quiet_logger("tensorflow"):
            return bytes(converter.convert())

    def _patched(self, concrete: Any) -> bytes | None:
        """The export by weight patching, or None after falling back (then the caller converts)."""
        first = self._template is None
        try:
            if self._template is None:
                self._template = self._build_template(concrete)
            model = self._template.render([_read(v) for v in self._variables])
        except Exception as err:  # probing, parsing or matching failed: full conversion is always correct
            self._fall_back(f"{type(err).__name__}: {err}")
            return None
        self._since_check += 1
        if first or (self._verify_every and self._since_check >= self._verify_every):
            self._since_check = 0
            mismatch = self._check(model)
            if mismatch is not None:
                self._fall_back(mismatch)
                return None
        return model

    def _fall_back(self, reason: str) -> None:
        """Convert in full from now on (warned once: the exporter never patches again)."""
        logger.warning("TFLite export falls back to full conversion on every export (~0.1 s each): %s", reason)
        self._patching = False
        self._template = None

    def _build_template(self, concrete: Any) -> WeightTemplate:
        """Converts with three probe sets (or reads their conversions from the probe cache), finds the slots and
        checks them (module notes)."""
        variables = _patchable_variables(concrete)
        shapes = [tuple(int(d) for d in v.shape) for v in variables]
        probes = probe_sets(shapes)
        cache = probe_cache_dir()
        cached = cache / f"{probe_cache_key(concrete, shapes)}.npz" if cache is not None else None
        template = None if cached is None else _cached_template(cached, probes, shapes)
        if template is None:
            models = self._convert_probes(concrete, variables, probes)
            template = matched_template(models, probes, shapes)
            if cached is not None:
                store_probes(cached, models)
        logger.info("TFLite export: weights of %d variables patched into %d buffers", len(variables), template.slots)
        self._variables = variables
        return template

    def _convert_probes(self, concrete: Any, variables: list[tf.Variable], probes: list[list[np.ndarray]]) -> list[bytes]:
        """One full conversion per probe set, the variables restored after."""
        saved = [v.numpy() for v in variables]
        models = []
        try:
            for values in probes:
                for v, value in zip(variables, values, strict=True):
                    v.assign(value)
                models.append(self._convert(concrete))
        finally:
            for v, value in zip(variables, saved, strict=True):
                v.assign(value)
        return models

    def _check(self, model: bytes) -> str | None:
        """None when ``model`` matches the TF forward on fixed random observations, else why not."""
        from ai_edge_litert.interpreter import Interpreter

        rng = np.random.default_rng(1)
        inputs = [
            rng.integers(0, 256, (_CHECK_ROWS, *shape)).astype(dtype)
            if dtype == np.uint8
            else rng.standard_normal((_CHECK_ROWS, *shape)).astype(np.float32)
            for shape, dtype in zip(self.observation_shapes, self.observation_dtypes, strict=True)
        ]
        feeds = {input_name(i): x for i, x in enumerate(inputs)}
        if self.memory_size:
            inputs.append(rng.standard_normal((_CHECK_ROWS, self.memory_size)).astype(np.float32))
            feeds[RECURRENT_IN] = inputs[-1]
        with tf.device("/CPU:0"):  # on a GPU, TF32 matmuls would differ from LiteRT by ~1e-3
            expected = {k: np.asarray(v) for k, v in self._serve(*inputs).items()}
        try:
            runner = Interpreter(model_content=model, num_threads=1).get_signature_runner()
            got = runner(**feeds)
        except Exception as err:  # the runtime rejects the patched bytes
            return f"LiteRT cannot run the patched model: {err}"
        for name, want in expected.items():
            have = got.get(name)
            tol = _CHECK_TOLERANCE
            if have is None or have.shape != want.shape or not np.allclose(have, want, rtol=tol, atol=tol, equal_nan=True):
                error = np.max(np.abs(have - want)) if have is not None and have.shape == want.shape else "shape"
                return f"output {name!r} of the patched model differs from the TF forward ({error})"
        return None


def export_tflite(
    forward: Callable[..., Any],
    observation_shapes: Sequence[Sequence[int]],
    observation_dtypes: Sequence[Any] | None = None,
    memory_size: int = 0,
) -> bytes:
    """One-off export of a policy network to a TFLite flatbuffer: one full conversion, no template.

    Args:
        forward: the policy network (see ``TFLiteExporter.__init__``).
        observation_shapes: the shape of each observation without the agent axis.
        observation_dtypes: each input's dtype (default float32; uint8 for a uint8 image).
        memory_size: R > 0 for a recurrent policy (``TFLiteExporter``).

    Returns:
        The flatbuffer: inputs ``obs_i`` ``[N, *shape_i]`` of those dtypes; outputs ``"mean"``,
        ``"log_std"`` float32 ``[N, C]`` and/or ``"logits"`` float32 ``[N, sum(branches)]``.
    """
    exporter = TFLiteExporter(
        forward, observation_shapes, patch_weights=False, observation_dtypes=observation_dtypes, memory_size=memory_size
    )
    return exporter.export()


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
    memory_size: int = 0,
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
        memory_size: R, the recurrent state's width of a model exported with it (0: feed-forward).

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
    artifact = pb.InferenceArtifact(
        format=TFLITE_FORMAT, model=model_bytes, tanh_squash=tanh_squash, clip=clip, memory_size=memory_size
    )
    artifact.action_spec.CopyFrom(action_spec)
    artifact.normalizers.extend(normalizers)
    return pb.PolicyUpdate(behavior_name=behavior_name, version=version, trainer_step=trainer_step, artifact=artifact)
