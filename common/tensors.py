"""numpy <-> ``Tensor`` message: raw little-endian bytes plus dtype and shape.

It lives here, above ``protos``, because decoding raises ``common.errors.ProtocolError`` (which the
servicer maps to a status code): ``protos`` holds only the generated code and imports nothing of ours.

No per-element loops: encoding is one ``tobytes``, decoding one ``np.frombuffer``, so the cost is a
single memory copy (or none) whatever the tensor's size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from common.errors import ProtocolError
from protos import stepstream_pb2 as pb

_TO_WIRE: dict[np.dtype, int] = {
    np.dtype("float32"): pb.FLOAT32,
    np.dtype("float64"): pb.FLOAT64,
    np.dtype("float16"): pb.FLOAT16,
    np.dtype("int8"): pb.INT8,
    np.dtype("int16"): pb.INT16,
    np.dtype("int32"): pb.INT32,
    np.dtype("int64"): pb.INT64,
    np.dtype("uint8"): pb.UINT8,
    np.dtype("uint16"): pb.UINT16,
    np.dtype("uint32"): pb.UINT32,
    np.dtype("uint64"): pb.UINT64,
    np.dtype("bool"): pb.BOOL,
}
_FROM_WIRE: dict[int, np.dtype] = {code: dtype.newbyteorder("<") for dtype, code in _TO_WIRE.items()}

#: Every dtype the wire can carry.
SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(_TO_WIRE)


def dtype_to_wire(dtype: np.dtype | type | str) -> int:
    """The ``DType`` enum value of a numpy dtype; raises ``ProtocolError`` for unsupported ones."""
    key = np.dtype(dtype).newbyteorder("=")
    try:
        return _TO_WIRE[key]
    except KeyError:
        raise ProtocolError(f"dtype {key} cannot travel on the wire (supported: {', '.join(map(str, _TO_WIRE))})") from None


def dtype_from_wire(code: int) -> np.dtype:
    """The numpy dtype (little-endian) of a ``DType`` enum value."""
    try:
        return _FROM_WIRE[code]
    except KeyError:
        raise ProtocolError(f"unknown dtype code {code}") from None


def to_tensor(array: np.ndarray | float | int | bool, out: pb.Tensor | None = None) -> pb.Tensor:
    """Encode an array as a ``Tensor`` message.

    Args:
        array: any array (or scalar) of a supported dtype; non-contiguous or big-endian arrays
            are copied into C-order little-endian first.
        out: an existing message to fill (e.g. a sub-message field) instead of a new one.

    Returns:
        ``out`` or a new ``Tensor``.
    """
    arr = np.asarray(array)
    code = dtype_to_wire(arr.dtype)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    msg = pb.Tensor() if out is None else out
    msg.dtype = code  # type: ignore[assignment]
    del msg.shape[:]
    msg.shape.extend(arr.shape)
    msg.data = np.ascontiguousarray(arr).tobytes()
    return msg


def from_tensor(msg: pb.Tensor, field: str = "tensor") -> np.ndarray:
    """Decode a ``Tensor`` message without copying.

    Args:
        msg: the message.
        field: the field's name, used in error messages (``"observations[0]"``).

    Returns:
        A read-only array of ``msg.shape`` viewing ``msg.data``.

    Raises:
        ProtocolError: unknown dtype, a negative dimension, a byte length that does not match
            shape and dtype, or a shape numpy cannot hold (too many dimensions, too large).
    """
    try:
        dtype = dtype_from_wire(msg.dtype)
    except ProtocolError as err:
        raise ProtocolError(f"{field}: {err}") from None
    shape = tuple(msg.shape)
    if any(d < 0 for d in shape):
        raise ProtocolError(f"{field}: negative dimension in shape {list(shape)}")
    expected = math.prod(shape) * dtype.itemsize
    data = msg.data  # each read of a bytes field builds a new bytes object: read it once
    if len(data) != expected:
        raise ProtocolError(
            f"{field}: {len(data)} bytes do not match shape {list(shape)} of {dtype.name} ({expected} bytes expected)"
        )
    try:
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    except ValueError as err:  # more than numpy's 64 dimensions, or an empty shape too big for numpy ([0, 2**62, 2**62])
        raise ProtocolError(f"{field}: shape {list(shape)} is not a valid array shape: {err}") from None


def to_png_tensor(
    pngs: Sequence[bytes],
    shape: Sequence[int],
    dtype: np.dtype | type | str = np.uint8,
    channel_mapping: Sequence[int] = (),
    out: pb.Tensor | None = None,
) -> pb.Tensor:
    """A PNG-compressed image observation of a BrainInfo (see ``Tensor`` in ``protos/stepstream.proto``).

    Args:
        pngs: per agent row, its image as one or more PNG files back to back
            (``common.demo_images.encode_pngs`` makes them from uint8 ``[H, W, C]``).
        shape: the decoded array's shape ``[N, H, W, C]``.
        dtype: the spec's dtype: uint8 (the pixels) or float32 (the pixels / 255).
        channel_mapping: ML-Agents' ``compressed_channel_mapping``; empty for the channel rule.
        out: an existing message to fill instead of a new one.
    """
    msg = pb.Tensor() if out is None else out
    msg.dtype = dtype_to_wire(dtype)  # type: ignore[assignment]
    del msg.shape[:]
    msg.shape.extend(int(d) for d in shape)
    msg.data = b""
    del msg.png[:]
    msg.png.extend(pngs)
    del msg.compressed_channel_mapping[:]
    msg.compressed_channel_mapping.extend(int(m) for m in channel_mapping)
    return msg
