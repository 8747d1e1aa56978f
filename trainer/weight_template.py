"""Weight patching: new weights written straight into a converted TFLite flatbuffer.

``trainer.export``'s ``TFLiteExporter`` converts its network once per probe set, and from then on
renders each export by writing the weights into the constant buffers of the first conversion: a copy of bytes
instead of a conversion, orders of magnitude cheaper.

How the template is built (``TFLiteExporter._build_template``):

1. Every variable the traced forward captures gets probe values, three times over, each time
   followed by a full conversion: small unique values of random sign, then all values far above,
   then all far below any sane clip bound (+-1e20). Random probes also give every layer its general
   form: with the real initial weights the converter drops an all-zero bias, and the layout changes.
2. The flatbuffer is parsed with the TFLite schema bindings LiteRT ships; each inline constant
   buffer is matched by content against each variable in two layouts, as is (biases, log_std) and
   transposed (a Dense kernel [in, out] becomes FULLY_CONNECTED weights [out, in]; a Conv2D kernel
   [h, w, in, out] becomes CONV_2D filters [out, h, w, in], ``_transposed``). A buffer where
   the converter folded an elementwise clip into the constant (``clip(log_std, -20, 2)`` of a
   state-independent log_std) matches too: the small probe passes unchanged, the wide probes reveal
   the bounds, and the patch applies the same clip. A buffer where the converter folded a scalar
   factor into a kernel (a uint8 image's ``IMAGE_SCALE`` before the first conv or dense layer,
   ``trainer.encoders``) matches as ``scale * kernel``, and the patch multiplies the same way.
3. Safety: patching each probe's values into the template must reproduce that probe's conversion
   byte for byte (this catches any weight-dependent byte the slots miss, such as a constant the
   converter derived from a weight in another way); the first patched export, and every
   ``verify_every``-th after it, runs in the LiteRT interpreter against the TF forward. Buffers
   outside the flatbuffer (the offset-buffer layout of very large models) are not patched.

Anything else (a failed match, a mismatch, a variable that is not float32) makes the exporter
convert in full from then on, with one warning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

_WIDE_PROBE = 1e20  # |value| of the wide probes: beyond any clip bound a policy folds into a constant


class NotPatchableError(Exception):
    """A network's weights cannot be written into its converted flatbuffer (module notes)."""


class _Slot(NamedTuple):
    """One constant buffer that holds a variable's values."""

    variable: int  # index among the exporter's variables
    offset: int  # byte offset of the buffer's data in the flatbuffer
    transpose: bool  # the buffer holds the 2-D or 4-D variable transposed (``_transposed``)
    low: np.ndarray | None  # elementwise clip bounds folded into the buffer (buffer layout), or None
    high: np.ndarray | None
    scale: np.float32 | None = None  # a scalar factor folded into the buffer (float32 product), or None


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


def probe_sets(shapes: Sequence[tuple[int, ...]], seed: int = 0) -> list[list[np.ndarray]]:
    """Three float32 values per variable: small and unique, random sign; far above; far below."""
    rng = np.random.default_rng(seed)
    small = [rng.uniform(0.01, 0.1, s) * rng.choice([-1.0, 1.0], s) for s in shapes]
    above = [_WIDE_PROBE * rng.uniform(1.0, 2.0, s) for s in shapes]
    below = [-_WIDE_PROBE * rng.uniform(1.0, 2.0, s) for s in shapes]
    return [[np.asarray(v, np.float32) for v in values] for values in (small, above, below)]


def _transposed(x: np.ndarray) -> np.ndarray:
    """The converter's layout of a kernel: a 2-D ``[in, out]`` as ``[out, in]``; a 4-D conv ``[h, w, in, out]``
    (TF's HWIO) as ``[out, h, w, in]`` (TFLite's OHWI)."""
    return x.T if x.ndim == 2 else np.moveaxis(x, -1, 0)


def _transposed_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[::-1] if len(shape) == 2 else (shape[-1], *shape[:-1])


def _fit(variable: int, offset: int, transpose: bool, seen: list[np.ndarray], probes: list[np.ndarray]) -> _Slot | None:
    """The slot when a buffer's contents ``seen`` (per probe) are ``clip(probe, low, high)``, else None.

    The small probe must pass through at least partly (a buffer unrelated to the variable never
    equals its random values); the wide ones give the bounds, infinite where they pass unclipped.
    """
    wanted = [(_transposed(p) if transpose else p).reshape(-1) for p in probes]
    if not np.any(seen[0] == wanted[0]):
        return _fit_scaled(variable, offset, transpose, seen, wanted)
    high = np.where(seen[1] == wanted[1], np.inf, seen[1]).astype(np.float32)
    low = np.where(seen[2] == wanted[2], -np.inf, seen[2]).astype(np.float32)
    if not all(np.array_equal(s, np.clip(w, low, high)) for s, w in zip(seen, wanted, strict=True)):
        return None
    if np.isinf(low).all() and np.isinf(high).all():
        return _Slot(variable, offset, transpose, None, None)
    shape = _transposed(probes[0]).shape if transpose else probes[0].shape
    return _Slot(variable, offset, transpose, low.reshape(shape), high.reshape(shape))


def _fit_scaled(variable: int, offset: int, transpose: bool, seen: list[np.ndarray], wanted: list[np.ndarray]) -> _Slot | None:
    """The slot when every probe's buffer is exactly ``float32(scale * wanted)`` for one scalar, else None."""
    nonzero = np.flatnonzero(wanted[0])
    if nonzero.size == 0:
        return None
    scale = np.float32(seen[0][nonzero[0]] / wanted[0][nonzero[0]])
    if not np.isfinite(scale) or scale == 0:
        return None
    if not all(np.array_equal(s, np.multiply(w, scale, dtype=np.float32)) for s, w in zip(seen, wanted, strict=True)):
        return None
    return _Slot(variable, offset, transpose, None, None, scale)


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
            for transpose in ((False, True) if value.ndim in (2, 4) and min(value.shape[-2:]) > 1 else (False,))
            if (slot := _fit(i, offset, transpose, seen, [p[i] for p in probes])) is not None
        ]
        if len(found) > 1:
            raise NotPatchableError(f"the buffer at byte {offset} matches {len(found)} variables")
        slots.extend(found)
    return slots


class WeightTemplate:
    """A converted flatbuffer and the slots its weights go in; ``render`` writes new weights."""

    def __init__(self, model: bytes, slots: Sequence[_Slot], shapes: Sequence[tuple[int, ...]]) -> None:
        self.shapes = list(shapes)
        self._work = bytearray(model)  # every slot is rewritten on each render, so one copy serves all
        self._writes: list[tuple[int, np.ndarray, bool, np.ndarray | None, np.ndarray | None, np.float32 | None]] = []
        for slot in slots:
            shape = _transposed_shape(self.shapes[slot.variable]) if slot.transpose else self.shapes[slot.variable]
            view = np.frombuffer(self._work, "<f4", math.prod(shape), slot.offset).reshape(shape)
            self._writes.append((slot.variable, view, slot.transpose, slot.low, slot.high, slot.scale))

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
        for variable, view, transpose, low, high, scale in self._writes:
            value = _transposed(values[variable]) if transpose else values[variable]
            if scale is not None:
                np.multiply(value, scale, out=view, dtype=np.float32)
            elif low is None:
                view[...] = value
            else:
                np.clip(value, low, high, out=view)
        return bytes(self._work)


def matched_template(
    models: Sequence[bytes], probes: Sequence[Sequence[np.ndarray]], shapes: Sequence[tuple[int, ...]]
) -> WeightTemplate:
    """The template of the probe conversions ``models``, checked to reproduce each byte for byte."""
    template = WeightTemplate(models[0], find_slots(models, probes), shapes)
    for i, (values, model) in enumerate(zip(probes, models, strict=True)):
        if template.render(values) != model:
            raise NotPatchableError(f"patching probe {i} does not reproduce its conversion (a weight folded otherwise?)")
    return template
