"""``network_settings.memory``: accepted for ppo, sac and bc with ML-Agents' defaults and checks."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import ConfigKeyError, MemorySettings, parse_config


def _behavior(trainer_type: str, memory: Any, **hyperparameters: Any) -> dict[str, Any]:
    if trainer_type == "bc":
        hyperparameters.setdefault("demo_path", "x.demo")
    section = {"trainer_type": trainer_type, "network_settings": {"memory": memory}}
    if hyperparameters:
        section["hyperparameters"] = hyperparameters
    return {"behaviors": {"A": section}}


@pytest.mark.parametrize("trainer_type", ["ppo", "sac", "bc"])
def test_memory_parses_with_ml_agents_defaults(trainer_type: str) -> None:
    run = parse_config(_behavior(trainer_type, {}), "test.yaml")
    assert run.behaviors["A"].network_settings.memory == MemorySettings(memory_size=128, sequence_length=64)
    run = parse_config(_behavior(trainer_type, {"memory_size": 32, "sequence_length": 8}), "test.yaml")
    assert run.behaviors["A"].network_settings.memory == MemorySettings(memory_size=32, sequence_length=8)


@pytest.mark.parametrize(
    ("memory", "key", "detail"),
    [
        ({"memory_size": 7}, "memory_size", "must be > 0 and even, got 7"),
        ({"memory_size": 0}, "memory_size", "must be > 0 and even, got 0"),
        ({"sequence_length": 0}, "sequence_length", "must be >= 1, got 0"),
        ({"memory_sise": 8}, "memory_sise", "unknown key"),
    ],
    ids=["odd", "zero", "no-sequence", "typo"],
)
def test_memory_errors_name_the_dotted_key(memory: dict[str, Any], key: str, detail: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        parse_config(_behavior("ppo", memory), "test.yaml")
    assert info.value.key == f"behaviors.A.network_settings.memory.{key}"
    assert detail in str(info.value)


@pytest.mark.parametrize("trainer_type", ["ppo", "sac", "bc"])
def test_sequence_length_must_fit_a_minibatch(trainer_type: str) -> None:
    parse_config(_behavior(trainer_type, {"sequence_length": 32}, batch_size=32), "test.yaml")
    with pytest.raises(ConfigKeyError) as info:
        parse_config(_behavior(trainer_type, {"sequence_length": 33}, batch_size=32), "test.yaml")
    assert info.value.key == "behaviors.A.network_settings.memory.sequence_length"
    assert str(info.value) == (
        "test.yaml: behaviors.A.network_settings.memory.sequence_length: must be <= hyperparameters.batch_size (32):"
        " a minibatch holds whole sequences, got 33"
    )


def test_memory_in_default_settings_reaches_every_behavior() -> None:
    run = parse_config(
        {"default_settings": {"network_settings": {"memory": {"memory_size": 16}}}, "behaviors": {"A": {}, "B": {}}},
        "test.yaml",
    )
    assert [b.network_settings.memory for b in run.behaviors.values()] == [MemorySettings(memory_size=16)] * 2
