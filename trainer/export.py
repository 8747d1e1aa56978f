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

Export speed: the graph never changes between exports, only the weights, so the exporter converts
with probe weights once and then writes each export's weights straight into the flatbuffer's constant
buffers (``_WeightTemplate``): ~0.1 ms per export for a 2x64 MLP instead of a ~0.12 s conversion
(0.2-0.5 s on a loaded machine; ``benchmarks/export_speed.py``). The first ``export()`` pays for three.
Networks whose weights the converter folds in ways the template cannot replay fall back, with one
warning, to a full conversion per export (``TFLiteExporter``). Keep one ``TFLiteExporter`` per
network.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

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


# -- weight patching -----------------------------------------------------------------------------
#
# How the template is built (``TFLiteExporter._build_template``):
#
# 1. Every variable the traced forward captures gets probe values, three times over, each time
#    followed by a full conversion: small unique values of random sign, then all values far above,
#    then all far below any sane clip bound (+-1e20). Random probes also give every layer its general
#    form: with the real initial weights the converter drops an all-zero bias, and the layout changes.
# 2. The flatbuffer is parsed with the TFLite schema bindings LiteRT ships; each inline constant
#    buffer is matched by content against each variable in two layouts, as is (biases, log_std) and
#    transposed (a Dense kernel [in, out] becomes FULLY_CONNECTED weights [out, in]). A buffer where
#    the converter folded an elementwise clip into the constant (``clip(log_std, -20, 2)`` of a
#    state-independent log_std) matches too: the small probe passes unchanged, the wide probes reveal
#    the bounds, and the patch applies the same clip.
# 3. Safety: patching each probe's values into the template must reproduce that probe's conversion
#    byte for byte (this catches any weight-dependent byte the slots miss, such as a constant the
#    converter derived from a weight in another way); the first patched export, and every
#    ``verify_every``-th after it, runs in the LiteRT interpreter against the TF forward. Buffers
#    outside the flatbuffer (the offset-buffer layout of very large models) are not patched.
#
# Anything else (a failed match, a mismatch, a variable that is not float32) makes the exporter
# convert in full from then on, with one warning.

#: A patched export runs against the TF forward on the first export and then every this many.
VERIFY_EVERY = 100
_WIDE_PROBE = 1e20  # |value| of the wide probes: beyond any clip bound a policy folds into a constant
_CHECK_ROWS = 3  # rows of the fixed random observations a patched export is checked on
_CHECK_TOLERANCE = 1e-5  # atol and rtol of that check (LiteRT vs TF differ by ~1e-7 on a 2x64 MLP)


class NotPatchableError(Exception):
    """A network's weights cannot be written into its converted flatbuffer (module notes above)."""


class _Slot(NamedTuple):
    """One constant buffer that holds a variable's values."""

    variable: int  # index among the exporter's variables
    offset: int  # byte offset of the buffer's data in the flatbuffer
    transpose: bool  # the buffer holds the 2-D variable transposed
    low: np.ndarray | None  # elementwise clip bounds folded into the buffer (buffer layout), or None
    high: np.ndarray | None


def constant_buffers(model: bytes) -> list[tuple[int, int]]:
    """``(byte offset, byte length)`` of each non-empty constant buffer stored inside ``model``.

    Raises:
        NotPatchableError: some buffer lives outside the flatbuffer (offset-buffer layout or
            external buffers, used for models near or over 2 GB).
    """
    try:  # the TFLite schema bindings LiteRT ships, else TensorFlow's copy
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:  # pragma: no cover - older LiteRT wheels
        from tensorflow.lite.python import schema_py_generated as schema
    root = schema.Model.GetRootAs(model, 0)
    if hasattr(root, "ExternalBuffersLength") and root.ExternalBuffersLength():
        raise NotPatchableError("the model has external buffers")
    found = []
    for i in range(root.BuffersLength()):
        buffer = root.Buffers(i)
        if buffer.Offset() or buffer.Size():
            raise NotPatchableError(f"buffer {i} is stored outside the flatbuffer (offset-buffer layout)")
        if buffer.DataLength():
            found.append((int(buffer._tab.Vector(buffer._tab.Offset(4))), int(buffer.DataLength())))
    return found


def _probe_sets(shapes: Sequence[tuple[int, ...]], seed: int = 0) -> list[list[np.ndarray]]:
    """Three float32 values per variable: small and unique, random sign; far above; far below."""
    rng = np.random.default_rng(seed)
    small = [rng.uniform(0.01, 0.1, s) * rng.choice([-1.0, 1.0], s) for s in shapes]
    above = [_WIDE_PROBE * rng.uniform(1.0, 2.0, s) for s in shapes]
    below = [-_WIDE_PROBE * rng.uniform(1.0, 2.0, s) for s in shapes]
    return [[np.asarray(v, np.float32) for v in values] for values in (small, above, below)]


def _fit(variable: int, offset: int, transpose: bool, seen: list[np.ndarray], probes: list[np.ndarray]) -> _Slot | None:
    """The slot when a buffer's contents ``seen`` (per probe) are ``clip(probe, low, high)``, else None.

    The small probe must pass through at least partly (a buffer unrelated to the variable never
    equals its random values); the wide ones give the bounds, infinite where they pass unclipped.
    """
    wanted = [(p.T if transpose else p).reshape(-1) for p in probes]
    if not np.any(seen[0] == wanted[0]):
        return None
    high = np.where(seen[1] == wanted[1], np.inf, seen[1]).astype(np.float32)
    low = np.where(seen[2] == wanted[2], -np.inf, seen[2]).astype(np.float32)
    if not all(np.array_equal(s, np.clip(w, low, high)) for s, w in zip(seen, wanted, strict=True)):
        return None
    if np.isinf(low).all() and np.isinf(high).all():
        return _Slot(variable, offset, transpose, None, None)
    shape = probes[0].T.shape if transpose else probes[0].shape
    return _Slot(variable, offset, transpose, low.reshape(shape), high.reshape(shape))


def find_slots(models: Sequence[bytes], probes: Sequence[Sequence[np.ndarray]]) -> list[_Slot]:
    """Where each variable's values lie in the conversions ``models`` of the probe sets ``probes``.

    Raises:
        NotPatchableError: the conversions differ in layout, or a buffer matches two variables.
    """
    if len({len(m) for m in models}) != 1:
        raise NotPatchableError("the probe conversions differ in size")
    buffers = constant_buffers(models[0])
    slots = []
    for offset, length in buffers:
        seen = [np.frombuffer(m, "<f4", length // 4, offset) for m in models] if length % 4 == 0 else []
        found = [
            slot
            for i, value in enumerate(probes[0])
            if seen and value.size == length // 4
            for transpose in ((False, True) if value.ndim == 2 and min(value.shape) > 1 else (False,))
            if (slot := _fit(i, offset, transpose, seen, [p[i] for p in probes])) is not None
        ]
        if len(found) > 1:
            raise NotPatchableError(f"the buffer at byte {offset} matches {len(found)} variables")
        slots.extend(found)
    return slots


def _read(variable: tf.Variable) -> np.ndarray:
    """A variable's value as numpy: the raw read op costs ~10 us, ``Variable.numpy()`` ~30 us."""
    return tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype).numpy()


class _WeightTemplate:
    """A converted flatbuffer and the slots its weights go in; ``render`` writes new weights."""

    def __init__(self, model: bytes, slots: Sequence[_Slot], shapes: Sequence[tuple[int, ...]]) -> None:
        self.shapes = list(shapes)
        self._work = bytearray(model)  # every slot is rewritten on each render, so one copy serves all
        self._writes: list[tuple[int, np.ndarray, bool, np.ndarray | None, np.ndarray | None]] = []
        for slot in slots:
            shape = self.shapes[slot.variable][::-1] if slot.transpose else self.shapes[slot.variable]
            view = np.frombuffer(self._work, "<f4", math.prod(shape), slot.offset).reshape(shape)
            self._writes.append((slot.variable, view, slot.transpose, slot.low, slot.high))

    @property
    def slots(self) -> int:
        """How many constant buffers are rewritten per render."""
        return len(self._writes)

    def render(self, values: Sequence[np.ndarray]) -> bytes:
        """The flatbuffer with ``values`` (one float32 array per variable, in its own shape) patched in.

        Raises:
            NotPatchableError: a value's shape differs from the variable's at template time.
        """
        for value, shape in zip(values, self.shapes, strict=True):
            if value.shape != shape:
                raise NotPatchableError(f"a variable changed shape: {value.shape} != {shape}")
        for variable, view, transpose, low, high in self._writes:
            value = values[variable].T if transpose else values[variable]
            if low is None:
                view[...] = value
            else:
                np.clip(value, low, high, out=view)
        return bytes(self._work)


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
        self._patching = patch_weights
        self._verify_every = max(int(verify_every), 0)
        self._since_check = 0
        self._template: _WeightTemplate | None = None
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
        with _quiet_tensorflow_info():
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

    def _build_template(self, concrete: Any) -> _WeightTemplate:
        """Converts with three probe sets, finds the slots and checks them (module notes)."""
        variables = list(concrete.variables)
        captured = sum(1 for t in concrete.captured_inputs if t.dtype == tf.resource)
        if captured != len(variables):
            raise NotPatchableError(f"the forward captures {captured} resources but {len(variables)} variables")
        for v in variables:
            if v.dtype != tf.float32 or not v.shape.is_fully_defined():
                raise NotPatchableError(f"variable {v.name} is {v.dtype.name} {v.shape}, not float32 of a fixed shape")
        shapes = [tuple(int(d) for d in v.shape) for v in variables]
        saved = [v.numpy() for v in variables]
        probes = _probe_sets(shapes)
        models = []
        try:
            for values in probes:
                for v, value in zip(variables, values, strict=True):
                    v.assign(value)
                models.append(self._convert(concrete))
        finally:
            for v, value in zip(variables, saved, strict=True):
                v.assign(value)
        template = _WeightTemplate(models[0], find_slots(models, probes), shapes)
        for i, (values, model) in enumerate(zip(probes, models, strict=True)):
            if template.render(values) != model:
                raise NotPatchableError(f"patching probe {i} does not reproduce its conversion (a weight folded otherwise?)")
        logger.info("TFLite export: weights of %d variables patched into %d buffers", len(variables), template.slots)
        self._variables = variables
        return template

    def _check(self, model: bytes) -> str | None:
        """None when ``model`` matches the TF forward on fixed random observations, else why not."""
        from ai_edge_litert.interpreter import Interpreter

        rng = np.random.default_rng(1)
        inputs = [rng.standard_normal((_CHECK_ROWS, *shape)).astype(np.float32) for shape in self.observation_shapes]
        with tf.device("/CPU:0"):  # on a GPU, TF32 matmuls would differ from LiteRT by ~1e-3
            expected = {k: np.asarray(v) for k, v in self._serve(*inputs).items()}
        try:
            runner = Interpreter(model_content=model, num_threads=1).get_signature_runner()
            got = runner(**{input_name(i): x for i, x in enumerate(inputs)})
        except Exception as err:  # the runtime rejects the patched bytes
            return f"LiteRT cannot run the patched model: {err}"
        for name, want in expected.items():
            have = got.get(name)
            tol = _CHECK_TOLERANCE
            if have is None or have.shape != want.shape or not np.allclose(have, want, rtol=tol, atol=tol, equal_nan=True):
                error = np.max(np.abs(have - want)) if have is not None and have.shape == want.shape else "shape"
                return f"output {name!r} of the patched model differs from the TF forward ({error})"
        return None


def export_tflite(forward: Callable[..., Any], observation_shapes: Sequence[Sequence[int]]) -> bytes:
    """One-off export of a policy network to a TFLite flatbuffer: one full conversion, no template.

    Args:
        forward: the policy network (see ``TFLiteExporter.__init__``).
        observation_shapes: the shape of each observation without the agent axis.

    Returns:
        The flatbuffer: inputs ``obs_i`` float32 ``[N, *shape_i]``; outputs ``"mean"``,
        ``"log_std"`` float32 ``[N, C]`` and/or ``"logits"`` float32 ``[N, sum(branches)]``.
    """
    return TFLiteExporter(forward, observation_shapes, patch_weights=False).export()


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
