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

**Size bounds.** A PNG of a few hundred bytes can declare gigapixels, and a file's declared
observation shapes alone size the arrays it is read into. So, before anything is decoded or
allocated, from the declarations and each PNG's ``IHDR`` header:

- a PNG may have at most ``MAX_IMAGE_PIXELS`` pixels (width x height), and its height and width
  must be the declared shape's (either layout);
- one file may hold at most ``MAX_DECODED_BYTES`` at once while it is read: its float32
  observation arrays (records x declared values x 4 bytes, charged before the first is allocated)
  plus the float32 pixels of the observation being decoded (``DecodeBudget``). The bound is per
  file: a larger recording reads as several files of one folder.

Either breach is a ``DemoFormatError`` naming the record, the sizes and the bound.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from common.errors import StepstreamError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_IMAGE_PIXELS = 2048 * 2048
"""The most pixels (width x height) one PNG of a .demo file may declare; ML-Agents' cameras are
rarely above 256 x 256, and Pillow's own bomb check (89 M pixels) comes far later."""
MAX_DECODED_BYTES = 1 << 30
"""The most bytes (1 GiB) one .demo file may hold decoded: its float32 observation arrays plus the
float32 pixels of the observation being decoded (12,600 records of 84 x 84 x 3 images fit)."""
FLOAT32_BYTES = 4
_IHDR_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 3, 6: 4}
"""Decoded channels per PNG colour type, as ``_decode_png`` converts them: gray 1, RGB 3, palette
and gray + alpha to RGB 3, RGBA 4 (16-bit gray converts to RGB: see ``png_header``)."""


class DemoError(StepstreamError):
    """A demonstration cannot be used: the base of the .demo reader's errors."""


class DemoFormatError(DemoError):
    """A .demo file's content is malformed or inconsistent; the message names file, record and field."""


class DecodeBudget:
    """The bytes one .demo file holds decoded, against ``MAX_DECODED_BYTES`` (module docstring)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_DECODED_BYTES if limit is None else limit
        self.used = 0
        """Bytes held for the rest of the read (the observation arrays)."""

    def charge(self, nbytes: int, what: str, where: str) -> None:
        """Count ``nbytes`` held from now on, before they are allocated.

        Raises:
            DemoFormatError: the file would pass ``limit``; the message names ``what`` and the sizes.
        """
        self.check(nbytes, what, where)
        self.used += nbytes

    def check(self, nbytes: int, what: str, where: str) -> None:
        """Refuse ``nbytes`` more held for a moment (an observation's PNGs while they decode).

        Raises:
            DemoFormatError: ``used + nbytes`` would pass ``limit``.
        """
        if self.used + nbytes > self.limit:
            raise DemoFormatError(
                f"{where}: {what} decodes to {nbytes} bytes, which with the {self.used} bytes held is over "
                f"the {self.limit} bytes a .demo file may decode to (MAX_DECODED_BYTES): does not fit in memory"
            )


def png_header(png: bytes, where: str) -> tuple[int, int, int]:
    """(height, width, decoded channels) from a PNG's ``IHDR`` chunk, without decoding it.

    Raises:
        DemoFormatError: the PNG does not start with an ``IHDR`` chunk.
    """
    if len(png) < 8 + 8 + 13 or png[12:16] != b"IHDR" or struct.unpack_from(">I", png, 8)[0] != 13:
        raise DemoFormatError(f"{where}: PNG does not start with an IHDR header")
    width, height, depth, colour = struct.unpack_from(">IIBB", png, 16)
    channels = 3 if colour == 0 and depth > 8 else _IHDR_CHANNELS.get(colour, 4)
    return height, width, channels


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
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
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


def _check_headers(pngs: list[bytes], declared: tuple[int, ...], where: str, budget: DecodeBudget | None) -> None:
    """Refuse, before decoding, PNGs over ``MAX_IMAGE_PIXELS``, not of ``declared``'s size, or over the budget."""
    headers = [png_header(png, where) for png in pngs]
    for i, (height, width, _) in enumerate(headers):
        if height * width > MAX_IMAGE_PIXELS:
            raise DemoFormatError(
                f"{where}: PNG {i} declares {width}x{height} pixels, over the {MAX_IMAGE_PIXELS} one image may have "
                "(MAX_IMAGE_PIXELS)"
            )
    height, width = headers[0][:2]
    channels = sum(h[2] for h in headers)
    if len(declared) != 3 or (height, width) not in (declared[1:], declared[:2]):
        raise DemoFormatError(
            f"{where}: declared shape {list(declared)} matches neither [C, H, W] nor [H, W, C] of its PNG data, "
            f"which decodes to {height}x{width} with {channels} channels"
        )
    if any(h[:2] != (height, width) for h in headers):
        raise DemoFormatError(f"{where}: its PNGs differ in size: {[f'{h[0]}x{h[1]}' for h in headers]}")
    if budget is not None:
        budget.check(height * width * channels * FLOAT32_BYTES, f"its PNG data ({height}x{width}x{channels})", where)


def decode_image(
    data: bytes, declared: tuple[int, ...], mapping: list[int], where: str, budget: DecodeBudget | None = None
) -> np.ndarray:
    """A compressed observation, as float32 of exactly the ``declared`` shape (module docstring).

    Args:
        data: one or more PNG files back to back.
        declared: the observation's declared shape, ``[C, H, W]`` or ``[H, W, C]``.
        mapping: ``compressed_channel_mapping`` (empty: the channel rule).
        where: file, record and observation, for messages.
        budget: the file's decode budget, checked against the PNGs' decoded bytes before they decode.

    Raises:
        DemoFormatError: the data is not PNG, is over a size bound (module docstring), does not
            decode, or fits neither layout of ``declared``.
    """
    pngs = split_pngs(data, where)
    _check_headers(pngs, declared, where, budget)
    hwc = np.concatenate([_decode_png(png, where) for png in pngs], axis=2)
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


# -- images on the wire (BrainInfo) ---------------------------------------------------------------


def decode_hwc(
    data: bytes, shape: tuple[int, int, int], mapping: list[int], where: str, max_decoded_bytes: int, *, as_uint8: bool = False
) -> np.ndarray:
    """One agent's PNG-compressed image observation of a BrainInfo, as float32 in [0, 1] ``[H, W, C]`` (or, with
    ``as_uint8``, its pixels: uint8, channels averaged by a mapping rounded to the nearest).

    The wire's images are channels last, so unlike ``decode_image`` there is no layout to guess.
    Before anything is decoded, from the PNG headers: each must give the spec's height and width;
    their decoded channels must be as many as the mapping's entries or, without one, the PNGs at most
    ``ceil(C / 3)``; and all of them together at most ``max_decoded_bytes`` channels x pixels. So a
    small message cannot expand past what the spec allows.

    Args:
        data: one or more PNG files back to back.
        shape: the spec's ``(H, W, C)``.
        mapping: ``compressed_channel_mapping`` (empty: the channel rule of the module docstring).
        where: the behavior, field and agent, for messages.
        max_decoded_bytes: the most channels x pixels the PNGs may decode to.

    Raises:
        DemoFormatError: not PNG, cut short, another size, too many channels, a bad mapping, or
            data that does not decode; the message starts with ``where``.
    """
    channels = shape[2]
    pngs = split_pngs(data, where)
    decoded_channels = _check_wire_pngs(pngs, shape, mapping, where, max_decoded_bytes)
    if as_uint8 and not mapping and (channels > 1 or decoded_channels == 1):
        # The common case, the pixels themselves: no float round trip (3x faster at 84x84x3).
        pixels = np.concatenate([_decode_png_uint8(png, where) for png in pngs], axis=2)[:, :, :channels]
        return _of_shape(pixels, shape, where)
    hwc = np.concatenate([_decode_png(png, where) for png in pngs], axis=2)
    image = _of_shape(np.moveaxis(_channels_first(np.moveaxis(hwc, 2, 0), mapping, channels, where), 0, 2), shape, where)
    return np.rint(image * 255.0).astype(np.uint8) if as_uint8 else image


def _check_wire_pngs(
    pngs: list[bytes], shape: tuple[int, int, int], mapping: list[int], where: str, max_decoded_bytes: int
) -> int:
    """Refuse, from their headers alone, PNGs of another size than ``shape``'s, with more decoded channels than the
    mapping maps (or, without one, more PNGs than the channels need), or decoding to over ``max_decoded_bytes``
    channel values (``decode_hwc``).

    Returns:
        The channels the PNGs decode to, together.
    """
    height, width, channels = shape
    headers = [png_header(png, where) for png in pngs]
    for i, (h, w, _) in enumerate(headers):
        if (h, w) != (height, width):
            raise DemoFormatError(
                f"{where}: PNG {i} is {w}x{h} pixels; the spec declares {width}x{height} ([H, W, C] {list(shape)})"
            )
    decoded_channels = sum(h[2] for h in headers)
    if mapping and len(mapping) != decoded_channels:
        raise DemoFormatError(
            f"{where}: compressed_channel_mapping has {len(mapping)} entries for {decoded_channels} decoded channels"
        )
    most_pngs = max(1, -(-channels // 3))
    if not mapping and len(pngs) > most_pngs:
        raise DemoFormatError(
            f"{where}: {len(pngs)} PNGs for {channels} channels; at most {most_pngs} without a"
            " compressed_channel_mapping (3 channels each)"
        )
    decoded = decoded_channels * height * width
    if decoded > max_decoded_bytes:
        raise DemoFormatError(
            f"{where}: its {len(pngs)} PNGs decode to {decoded:,} channel values, over the {max_decoded_bytes:,} allowed"
        )
    return decoded_channels


def _of_shape(image: np.ndarray, shape: tuple[int, int, int], where: str) -> np.ndarray:
    """``image`` itself, refused unless it has the spec's ``shape``."""
    if image.shape != shape:
        raise DemoFormatError(f"{where}: the PNG data decodes to {list(image.shape)}, the spec declares {list(shape)}")
    return image


def _decode_png_uint8(png: bytes, where: str) -> np.ndarray:
    """``_decode_png`` without the scaling: uint8 ``[H, W, K]``."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(png)) as opened:
            image = opened if opened.mode in ("L", "RGB", "RGBA") else opened.convert("RGB")
            pixels = np.asarray(image, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        raise DemoFormatError(f"{where}: PNG does not decode: {err}") from err
    return pixels[:, :, np.newaxis] if pixels.ndim == 2 else pixels


def encode_pngs(image: np.ndarray) -> bytes:
    """A uint8 ``[H, W, C]`` image as Unity compresses one: PNGs of 3 channels back to back (1 channel: one
    grayscale PNG), the last padded with zero channels; ``decode_hwc`` gives it back (divided by 255)."""
    from PIL import Image

    pixels = np.asarray(image, dtype=np.uint8)
    height, width, channels = pixels.shape
    out = io.BytesIO()
    if channels == 1:
        Image.fromarray(pixels[:, :, 0], "L").save(out, format="PNG")
        return out.getvalue()
    for start in range(0, channels, 3):
        part = np.zeros((height, width, 3), np.uint8)
        part[:, :, : min(3, channels - start)] = pixels[:, :, start : start + 3]
        Image.fromarray(part, "RGB").save(out, format="PNG")
    return out.getvalue()
