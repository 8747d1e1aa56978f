"""An environment's own statistics (a Unity build's stats side channel) on their way to the trainer's summaries.

``stepstream unity`` puts the values Unity sent since the previous step into the step's
``BrainInfo.environment_stats``; the processor holds them per behavior and attaches them to the next
trajectory it publishes for that behavior (``Trajectory.environment_stats``); the trainer adds them to
its next summary (``trainer.summaries.EnvironmentStats``). The aggregation codes are ML-Agents'
``StatsAggregationMethod``.

Stats never push a trajectory past the message limit: each trajectory carries only as many of the held
stats (oldest first) as fit in the room its size bound leaves (``processor.wire.TrajectorySize``, counted
with ``encoded_bytes``); the rest wait for the next trajectory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from common.errors import ProtocolError
from protos import pb

AGGREGATIONS = ("average", "most_recent", "sum", "histogram")
"""The aggregation names, in the order of their wire codes (0 average, 1 most recent, 2 sum, 3 histogram)."""
MAX_STATS_PER_MESSAGE = 256
"""Environment stats one BrainInfo may carry; more is refused (INVALID_ARGUMENT)."""
MAX_STATS_PER_TRAJECTORY = 4096
"""Environment stats the processor holds per behavior for its next trajectory (the oldest give way)."""
MAX_KEY_BYTES = 256
STAT_FRAMING_BYTES = 14
"""What one stat adds to an encoded ``Trajectory`` besides its key's UTF-8 bytes, at most: the field's tag (2)
and length (2), the key's tag and length (3), the float value (5) and the aggregation code (2)."""


class EnvironmentStat(NamedTuple):
    """One value an environment reported about itself."""

    key: str
    """The summary (TensorBoard) tag, as the environment sent it."""
    value: float
    aggregation: str
    """One of ``AGGREGATIONS``."""


def encoded_bytes(stat: EnvironmentStat) -> int:
    """The bytes ``stat`` adds to an encoded ``Trajectory``, at most (``STAT_FRAMING_BYTES`` and its key)."""
    return len(stat.key.encode("utf-8", "surrogatepass")) + STAT_FRAMING_BYTES


def to_protos(stats: Iterable[EnvironmentStat]) -> list[pb.EnvironmentStat]:
    """The wire form of ``stats``."""
    return [pb.EnvironmentStat(key=s.key, value=s.value, aggregation=AGGREGATIONS.index(s.aggregation)) for s in stats]


def from_protos(
    messages: Iterable[pb.EnvironmentStat], where: str, limit: int = MAX_STATS_PER_MESSAGE
) -> tuple[EnvironmentStat, ...]:
    """``messages`` checked: at most ``limit``, keys of 1..``MAX_KEY_BYTES`` bytes, finite
    values, a known aggregation code.

    Raises:
        ProtocolError: naming ``where``, the field and the offending stat.
    """
    messages = list(messages)
    if len(messages) > limit:
        raise ProtocolError(f"{where}: {len(messages)} environment_stats, more than {limit}")
    out = []
    for i, msg in enumerate(messages):
        if not 0 < len(msg.key.encode()) <= MAX_KEY_BYTES:
            raise ProtocolError(f"{where}: environment_stats[{i}].key must be 1 to {MAX_KEY_BYTES} bytes")
        if not math.isfinite(msg.value):
            raise ProtocolError(f"{where}: environment_stats[{i}] ({msg.key[:64]!r}) is {msg.value}, not finite")
        if not 0 <= msg.aggregation < len(AGGREGATIONS):
            raise ProtocolError(
                f"{where}: environment_stats[{i}] ({msg.key[:64]!r}) has aggregation {msg.aggregation}, "
                f"not 0..{len(AGGREGATIONS) - 1} ({', '.join(AGGREGATIONS)})"
            )
        out.append(EnvironmentStat(msg.key, float(msg.value), AGGREGATIONS[msg.aggregation]))
    return tuple(out)


__all__ = [
    "AGGREGATIONS",
    "MAX_STATS_PER_MESSAGE",
    "MAX_STATS_PER_TRAJECTORY",
    "STAT_FRAMING_BYTES",
    "EnvironmentStat",
    "encoded_bytes",
    "from_protos",
    "to_protos",
]
