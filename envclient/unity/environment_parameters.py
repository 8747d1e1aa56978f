"""The EnvironmentParametersChannel messages that give Unity a parameter's sampler, in ML-Agents' byte layout.

Unity draws a sampled parameter itself, whenever the scene asks for it
(``Academy.Instance.EnvironmentParameters.GetWithDefault``), from a sampler made with the seed it is
sent; so a sampler, not a drawn value, goes on the channel (as ``mlagents-learn`` sends it). One
message per parameter, numbers little-endian, a string as an int32 byte length then ASCII:

- a constant: ``key``, int32 0 (``FLOAT``), float32 value;
- a sampler: ``key``, int32 1 (``SAMPLER``), int32 seed, int32 sampler type, then its numbers:
  uniform (0) float32 min, float32 max; gaussian (1) float32 mean, float32 st_dev;
  multirangeuniform (2) int32 count then that many float32, the intervals flattened
  ``[min0, max0, min1, max1, ...]``.

The messages are framed for the ``ENVIRONMENT_PARAMETERS`` channel by ``side_channels.frame``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from common.environment_parameters import (
    ConstantSampler,
    GaussianSampler,
    MultiRangeUniformSampler,
    Sampler,
    UniformSampler,
)
from common.errors import ConfigError
from envclient.unity.side_channels import ENVIRONMENT_PARAMETERS, FLOAT_PARAMETER, frame

SAMPLER_PARAMETER = 1
UNIFORM, GAUSSIAN, MULTIRANGEUNIFORM = range(3)
"""Unity's ``SamplerType`` codes."""


def _string(s: str) -> bytes:
    try:
        data = s.encode("ascii")
    except UnicodeEncodeError:
        raise ConfigError(f"environment_parameters.{s}: keys travel as ASCII") from None
    return struct.pack("<i", len(data)) + data


def sampler_payload(key: str, sampler: Sampler) -> bytes:
    """One EnvironmentParametersChannel payload (unframed) that sets ``key`` to ``sampler``."""
    head = _string(key)
    if isinstance(sampler, ConstantSampler):
        return head + struct.pack("<if", FLOAT_PARAMETER, sampler.value)
    if isinstance(sampler, UniformSampler):
        return head + struct.pack("<iiiff", SAMPLER_PARAMETER, sampler.seed, UNIFORM, sampler.min_value, sampler.max_value)
    if isinstance(sampler, GaussianSampler):
        return head + struct.pack("<iiiff", SAMPLER_PARAMETER, sampler.seed, GAUSSIAN, sampler.mean, sampler.st_dev)
    if isinstance(sampler, MultiRangeUniformSampler):
        flat = [value for interval in sampler.intervals for value in interval]
        return (
            head
            + struct.pack("<iiii", SAMPLER_PARAMETER, sampler.seed, MULTIRANGEUNIFORM, len(flat))
            + struct.pack(f"<{len(flat)}f", *flat)
        )
    raise TypeError(f"no EnvironmentParametersChannel encoding for {type(sampler).__name__}")


def sampler_messages(samplers: Mapping[str, Sampler]) -> bytes:
    """The framed messages that give Unity every parameter's current sampler, in key order."""
    return b"".join(frame(ENVIRONMENT_PARAMETERS, sampler_payload(key, samplers[key])) for key in sorted(samplers))
