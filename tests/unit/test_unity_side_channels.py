"""The gateway's side channels and the YAML settings behind them (``envclient.unity.side_channels``, ``cli.unity``)."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from pathlib import Path

import pytest

from cli.unity import _ENGINE_TYPES, unity_settings_from_yaml
from common.errors import ConfigError, ProtocolError
from envclient.unity import side_channels as sc

MLAGENTS_RESET_HEX = (
    "2c3451e97e4fea11b238784f4387d1f70c000000000000005400000054000000"
    "2c3451e97e4fea11b238784f4387d1f7080000000100000005000000"
    "2c3451e97e4fea11b238784f4387d1f708000000020000000000a041"
    "2c3451e97e4fea11b238784f4387d1f70800000003000000ffffffff"
    "2c3451e97e4fea11b238784f4387d1f708000000040000003c000000"
    "1e894c530f81ea11a9d08224858604000d0000000100000061000000000000c03f"
    "1e894c530f81ea11a9d08224858604000d000000010000006200000000000000c0"
)
"""What ML-Agents 1.1.0's side-channel manager writes for ``EngineConfig(84, 84, 5, 20.0, -1, 60)`` then
``set_float_parameter("a", 1.5)`` and ``("b", -2.0)`` (generated once with mlagents_envs)."""


def test_the_reset_side_channel_is_byte_for_byte_mlagents() -> None:
    settings = sc.UnitySettings(environment_parameters={"b": -2.0, "a": 1.5})
    assert sc.reset_side_channel(settings).hex() == MLAGENTS_RESET_HEX


def test_split_messages_reads_back_what_frame_writes() -> None:
    data = sc.frame(sc.STATS, b"abc") + sc.frame(sc.ENGINE_CONFIGURATION, b"")
    assert list(sc.split_messages(data)) == [(sc.STATS, b"abc"), (sc.ENGINE_CONFIGURATION, b"")]
    assert sc.STATS.bytes_le == data[:16]  # C#'s Guid.ToByteArray order, not the RFC order


# A fixed channel id, not uuid4(): pytest-xdist's workers must collect the same parameters.
TRUNCATED = uuid.UUID("6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d").bytes_le + struct.pack("<i", 5) + b"abc"


@pytest.mark.parametrize("data", [b"\x00" * 19, TRUNCATED], ids=["short-header", "short-payload"])
def test_split_messages_refuses_a_truncated_message(data: bytes) -> None:
    with pytest.raises(ProtocolError, match="side_channel"):
        list(sc.split_messages(data))


def test_parse_stats() -> None:
    payload = struct.pack("<i", 8) + b"Reward/x" + struct.pack("<fi", 2.5, 1)
    assert sc.parse_stats(payload) == sc.StatsValue("Reward/x", 2.5, "most_recent")
    with pytest.raises(ProtocolError, match="unknown aggregation code 9"):
        sc.parse_stats(struct.pack("<i", 1) + b"k" + struct.pack("<fi", 1.0, 9))


def test_engine_types_cover_the_settings() -> None:
    assert set(_ENGINE_TYPES) == {f.name for f in dataclasses.fields(sc.EngineSettings)}


def test_yaml_settings(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "behaviors: {}\nengine_settings: {time_scale: 7, width: 640, no_graphics: true, no_graphics_monitor: false}\n"
        "environment_parameters: {gravity: 9.5, size: {value: 2}}\n"
    )
    settings = unity_settings_from_yaml(path, seed=3)
    assert settings.engine == sc.EngineSettings(time_scale=7.0, width=640, no_graphics=True)
    assert dict(settings.environment_parameters) == {"gravity": 9.5, "size": 2.0}
    assert settings.seed == 3
    assert unity_settings_from_yaml(None) == sc.UnitySettings()


def test_samplers_and_curricula_are_left_to_the_processor(tmp_path: Path) -> None:
    """The gateway sends constants at reset; samplers and curricula come from the processor, over the Step stream."""
    path = tmp_path / "run.yaml"
    sampler = "{sampler_type: uniform, sampler_parameters: {min_value: 1}}"
    path.write_text(f"environment_parameters: {{g: 9.5, s: {sampler}, c: {{curriculum: []}}}}\n")
    assert dict(unity_settings_from_yaml(path).environment_parameters) == {"g": 9.5}


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("engine_settings: {time_scal: 2}", ConfigError, "engine_settings.time_scal: unknown key"),
        ("engine_settings: {width: wide}", ConfigError, "engine_settings.width: expected int"),
        ("engine_settings: {time_scale: 0}", ConfigError, "engine_settings.time_scale: 0"),
        ("environment_parameters: {g: {min: 1}}", ConfigError, "environment_parameters.g: expected a number, a sampler"),
        ("environment_parameters: {g: high}", ConfigError, "environment_parameters.g: expected a number"),
    ],
)
def test_yaml_settings_errors_name_the_key(tmp_path: Path, text: str, error: type[Exception], match: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(error, match=match):
        unity_settings_from_yaml(path)
