"""Decoding the PNG-compressed image observations of ML-Agents .demo files (see ``common.demo``).

A compressed observation holds one or more PNGs back to back (3 channels each, more PNGs for more
channels). As ML-Agents does, they decode with Pillow to float32 in [0, 1], their channels are
concatenated, and then:

- with a ``compressed_channel_mapping`` (one entry per decoded channel: the observation channel it
  feeds, or -1 to drop it), each observation channel is the mean of the channels mapped to it;
- without one, a 1-channel observation is the mean of the decoded channels (grayscale), and a
  C-channel one keeps the first C decoded channels (the padding channels of the last PNG drop).

**Layout rule.** ML-Agents >= 2.0 declares images channels-first ``[C, H, W]``; older recorders
declared them channels-last ``[H, W, C]`` (``testdcvis.demo``: ``[84, 84, 3]`` for an 84x84 RGB
PNG, on which ML-Agents 1.1.0's own ``demo_to_buffer`` raises). The decoded image takes the layout
its declared shape names: ``[C, H, W]`` when the declared shape's last two dimensions are the PNG's
height and width (checked first, as ML-Agents does), else ``[H, W, C]`` when its first two are.
Either way the observation has exactly its declared shape; a PNG that fits neither is a
``DemoFormatError`` naming the declared and the decoded shapes.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from common.errors import StepstreamError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class DemoError(StepstreamError):
    """A demonstration cannot be used: the base of the .demo reader's errors."""


class DemoFormatError(DemoError):
    """A .demo file's content is malformed or inconsistent; the message names file, record and field."""


def split_pngs(data: bytes, where: str) -> list[bytes]:
    """The PNG files concatenated in ``data``, found by walking their chunks to each IEND."""
    images: list[bytes] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 8] != PNG_SIGNATURE:
            raise DemoFormatError(f"{where}: compressed data at byte {pos} is not a PNG")
        start, pos = pos, pos + 8
        while True:
            if pos + 12 > len(data):
                raise DemoFormatError(f"{where}: PNG starting at byte {start} is cut short")
            (length,) = struct.unpack_from(">I", data, pos)
            kind = data[pos + 4 : pos + 8]
            pos += 12 + length
            if kind == b"IEND":
                break
        if pos > len(data):
            raise DemoFormatError(f"{where}: PNG starting at byte {start} is cut short")
        images.append(data[start:pos])
    if not images:
        raise DemoFormatError(f"{where}: empty compressed data")
    return images


def _decode_png(png: bytes, where: str) -> np.ndarray:
    from PIL import Image  # only files with compressed images need Pillow

    try:
        with Image.open(io.BytesIO(png)) as opened:
            image = opened if opened.mode in ("L", "RGB", "RGBA") else opened.convert("RGB")
            pixels = np.asarray(image, dtype=np.float32) / np.float32(255.0)
    except (OSError, ValueError, SyntaxError) as err:
        raise DemoFormatError(f"{where}: PNG does not decode: {err}") from err
    return pixels[:, :, np.newaxis] if pixels.ndim == 2 else pixels


def _channels_first(planes: np.ndarray, mapping: list[int], channels: int | None, where: str) -> np.ndarray:
    """``planes`` ``[K, H, W]`` (the decoded channels) -> ``[C, H, W]`` by the mapping or the channel rule."""
    if mapping:
        if len(mapping) != len(planes):
            raise DemoFormatError(
                f"{where}: compressed_channel_mapping has {len(mapping)} entries for {len(planes)} decoded channels"
            )
        targets = sorted({m for m in mapping if m > -1})
        if targets != list(range(len(targets))) or not targets:
            raise DemoFormatError(f"{where}: compressed_channel_mapping {mapping} is not a valid mapping")
        return np.stack([planes[[i for i, m in enumerate(mapping) if m == t]].mean(axis=0) for t in targets])
    assert channels is not None
    if channels == 1:
        return planes.mean(axis=0, keepdims=True)
    if channels > len(planes):
        raise DemoFormatError(f"{where}: declares {channels} channels but its PNG data decodes to {len(planes)}")
    return planes[:channels]


def decode_image(data: bytes, declared: tuple[int, ...], mapping: list[int], where: str) -> np.ndarray:
    """A compressed observation, as float32 of exactly the ``declared`` shape (module docstring).

    Raises:
        DemoFormatError: the data is not PNG, does not decode, or fits neither layout of ``declared``.
    """
    hwc = np.concatenate([_decode_png(png, where) for png in split_pngs(data, where)], axis=2)
    height, width = hwc.shape[:2]
    planes = np.moveaxis(hwc, 2, 0)
    if len(declared) == 3 and declared[1:] == (height, width):
        image = _channels_first(planes, mapping, declared[0], where)
    elif len(declared) == 3 and declared[:2] == (height, width):
        image = np.moveaxis(_channels_first(planes, mapping, declared[2], where), 0, 2)
    else:
        raise DemoFormatError(
            f"{where}: declared shape {list(declared)} matches neither [C, H, W] nor [H, W, C] of its PNG data, "
            f"which decodes to {height}x{width} with {hwc.shape[2]} channels"
        )
    if image.shape != declared:
        raise DemoFormatError(f"{where}: declared shape {list(declared)} but the PNG data decodes to {list(image.shape)}")
    return np.ascontiguousarray(image, dtype=np.float32)
