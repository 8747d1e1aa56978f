"""ML-Agents side channels: the framing, the engine-configuration and environment-parameters
messages the gateway sends, and the stats messages Unity sends back.

Framing (ML-Agents' ``SideChannelManager``): the ``side_channel`` bytes of one Unity message are a
series of ``[16-byte channel UUID][int32 length][payload]``; the UUID is in the byte order of C#'s
``Guid.ToByteArray`` (Python's ``uuid.UUID.bytes_le``) and every number little-endian. A string is
an int32 byte length then ASCII bytes.

Payloads:

- engine configuration (``ENGINE_CONFIGURATION``), one message per setting: an int32 type, then
  ``SCREEN_RESOLUTION`` (0) int32 width, int32 height; ``QUALITY_LEVEL`` (1) int32;
  ``TIME_SCALE`` (2) float32; ``TARGET_FRAME_RATE`` (3) int32; ``CAPTURE_FRAME_RATE`` (4) int32;
- environment parameters (``ENVIRONMENT_PARAMETERS``): string key, int32 type ``FLOAT`` (0), float32
  value (samplers, type 1, are not sent: they are not supported yet);
- stats (``STATS``, Unity to trainer): string key, float32 value, int32 aggregation
  (0 average, 1 most recent, 2 sum, 3 histogram).
"""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from common.environment_stats import AGGREGATIONS, EnvironmentStat
from common.errors import ConfigError, ProtocolError

ENGINE_CONFIGURATION = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")
TRAINING_ANALYTICS = uuid.UUID("b664a4a9-d86f-5a5f-95cb-e8353a7e8356")

SCREEN_RESOLUTION, QUALITY_LEVEL, TIME_SCALE, TARGET_FRAME_RATE, CAPTURE_FRAME_RATE = range(5)
FLOAT_PARAMETER = 0
STATS_AGGREGATIONS = AGGREGATIONS
"""Names of the stats channel's aggregation codes, in code order."""


@dataclass(frozen=True)
class EngineSettings:
    """The YAML's ``engine_settings`` (defaults as mlagents-learn's)."""

    width: int = 84
    """Window width, pixels (>= 1)."""
    height: int = 84
    """Window height, pixels (>= 1)."""
    quality_level: int = 5
    """Unity quality level index (>= 0)."""
    time_scale: float = 20.0
    """Simulation speed multiplier (> 0)."""
    target_frame_rate: int = -1
    """Frames per second Unity aims at; -1: unlimited."""
    capture_frame_rate: int = 60
    """Frames per second of fixed-step capture; 0: off."""
    no_graphics: bool = False
    """Start a launched build with ``-nographics`` (not a side-channel setting)."""

    def __post_init__(self) -> None:
        if self.width < 1 or self.height < 1:
            raise ConfigError(f"engine_settings.width/height: {self.width}x{self.height} must be positive")
        if self.quality_level < 0:
            raise ConfigError(f"engine_settings.quality_level: {self.quality_level} must be >= 0")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ConfigError(f"engine_settings.time_scale: {self.time_scale} must be a positive number")


@dataclass(frozen=True)
class UnitySettings:
    """What the gateway tells Unity: engine settings and constant environment parameters."""

    engine: EngineSettings = field(default_factory=EngineSettings)
    environment_parameters: Mapping[str, float] = field(default_factory=dict)
    """Constant float parameters by key (``Academy.Instance.EnvironmentParameters.GetWithDefault``)."""
    seed: int = -1
    """The seed Unity is initialized with (-1, mlagents-learn's default: Unity picks)."""
    num_areas: int = 1
    """Training areas Unity instantiates (communication version 1.5.0)."""

    def __post_init__(self) -> None:
        for key, value in self.environment_parameters.items():
            if not key.isascii():
                raise ConfigError(f"environment_parameters.{key}: keys travel as ASCII")
            if not math.isfinite(value):
                raise ConfigError(f"environment_parameters.{key}: {value} is not a finite number")


StatsValue = EnvironmentStat
"""One stats-channel message: what the gateway passes on in ``BrainInfo.environment_stats``."""


def _string(s: str) -> bytes:
    data = s.encode("ascii")
    return struct.pack("<i", len(data)) + data


def frame(channel: uuid.UUID, payload: bytes) -> bytes:
    """One framed message: ``[channel.bytes_le][int32 len(payload)][payload]``."""
    return channel.bytes_le + struct.pack("<i", len(payload)) + payload


def engine_messages(engine: EngineSettings) -> bytes:
    """The framed engine-configuration messages of ``engine`` (one per setting)."""
    payloads = [
        struct.pack("<iii", SCREEN_RESOLUTION, engine.width, engine.height),
        struct.pack("<ii", QUALITY_LEVEL, engine.quality_level),
        struct.pack("<if", TIME_SCALE, engine.time_scale),
        struct.pack("<ii", TARGET_FRAME_RATE, engine.target_frame_rate),
        struct.pack("<ii", CAPTURE_FRAME_RATE, engine.capture_frame_rate),
    ]
    return b"".join(frame(ENGINE_CONFIGURATION, p) for p in payloads)


def environment_parameter_messages(parameters: Mapping[str, float]) -> bytes:
    """The framed environment-parameters messages, one per constant, in key order."""
    return b"".join(
        frame(ENVIRONMENT_PARAMETERS, _string(key) + struct.pack("<if", FLOAT_PARAMETER, float(value)))
        for key, value in sorted(parameters.items())
    )


def reset_side_channel(settings: UnitySettings) -> bytes:
    """What the first RESET carries: the engine configuration, then the environment parameters."""
    return engine_messages(settings.engine) + environment_parameter_messages(settings.environment_parameters)


def split_messages(data: bytes) -> Iterator[tuple[uuid.UUID, bytes]]:
    """The ``(channel, payload)`` messages of a ``side_channel`` field.

    Raises:
        ProtocolError: a header or payload runs past the end, or a negative length.
    """
    pos = 0
    while pos < len(data):
        if pos + 20 > len(data):
            raise ProtocolError(f"side_channel: a message header at byte {pos} runs past the end ({len(data)} bytes)")
        channel = uuid.UUID(bytes_le=bytes(data[pos : pos + 16]))
        (length,) = struct.unpack_from("<i", data, pos + 16)
        start = pos + 20
        if length < 0 or start + length > len(data):
            raise ProtocolError(f"side_channel: channel {channel}'s message at byte {pos} declares {length} bytes")
        yield channel, bytes(data[start : start + length])
        pos = start + length


def parse_stats(payload: bytes) -> StatsValue:
    """One stats-channel payload.

    Raises:
        ProtocolError: a truncated payload, non-ASCII key or an unknown aggregation code.
    """
    try:
        (n,) = struct.unpack_from("<i", payload, 0)
        if n < 0 or 4 + n + 8 > len(payload):
            raise ProtocolError(f"stats side channel: a key of {n} bytes in a {len(payload)}-byte message")
        key = payload[4 : 4 + n].decode("ascii")
        value, code = struct.unpack_from("<fi", payload, 4 + n)
    except (struct.error, UnicodeDecodeError) as err:
        raise ProtocolError(f"stats side channel: malformed message ({err})") from None
    if not 0 <= code < len(STATS_AGGREGATIONS):
        raise ProtocolError(f"stats side channel: key {key!r} has the unknown aggregation code {code}")
    return StatsValue(key, float(value), STATS_AGGREGATIONS[code])
