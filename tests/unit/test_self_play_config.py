"""``self_play``: ML-Agents' keys and defaults, refused where ML-Agents only warns (``common.config_sections``)."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import ConfigKeyError, SelfPlaySettings, parse_config


def _behavior(**settings: Any) -> dict[str, Any]:
    return {"behaviors": {"Tennis": {"max_steps": 500000, **settings}}}


def test_defaults_are_ml_agents() -> None:
    self_play = parse_config(_behavior(self_play={})).behaviors["Tennis"].self_play
    assert self_play == SelfPlaySettings()
    assert (self_play.save_steps, self_play.swap_steps, self_play.window) == (20000, 2000, 10)
    assert self_play.play_against_latest_model_ratio == 0.5
    assert self_play.initial_elo == 1200.0
    assert self_play.effective_team_change == 100000  # 5 x save_steps


def test_team_change_defaults_to_five_save_steps_and_can_be_set() -> None:
    assert parse_config(_behavior(self_play={"save_steps": 300})).behaviors["Tennis"].self_play.effective_team_change == 1500
    given = parse_config(_behavior(self_play={"save_steps": 300, "team_change": 700})).behaviors["Tennis"].self_play
    assert given.effective_team_change == 700


def test_no_self_play_block_means_none() -> None:
    assert parse_config(_behavior()).behaviors["Tennis"].self_play is None


@pytest.mark.parametrize("trainer_type", ["ppo", "sac"])
def test_ppo_and_sac_take_self_play(trainer_type: str) -> None:
    assert parse_config(_behavior(trainer_type=trainer_type, self_play={})).behaviors["Tennis"].self_play is not None


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"self_play": {"play_against_latest_model_ratio": 1.5}}, "self_play.play_against_latest_model_ratio"),
        ({"self_play": {"play_against_latest_model_ratio": -0.1}}, "self_play.play_against_latest_model_ratio"),
        ({"max_steps": 99999, "self_play": {}}, "self_play.team_change"),
        ({"max_steps": 1000, "self_play": {"save_steps": 100, "team_change": 1001}}, "self_play.team_change"),
        ({"self_play": {"save_steps": 0}}, "self_play.save_steps"),
        ({"self_play": {"swap_steps": 0}}, "self_play.swap_steps"),
        ({"self_play": {"window": 0}}, "self_play.window"),
        ({"self_play": {"team_change": 0}}, "self_play.team_change"),
        ({"self_play": {"initial_elo": float("nan")}}, "self_play.initial_elo"),
        ({"self_play": {"windw": 3}}, "self_play.windw"),
        ({"trainer_type": "bc", "hyperparameters": {"demo_path": "x.demo"}, "self_play": {}}, "self_play"),
    ],
    ids=[
        "ratio-above-1",
        "ratio-below-0",
        "default-team-change",
        "team-change",
        "save",
        "swap",
        "window",
        "team-change-0",
        "elo-nan",
        "typo",
        "bc",
    ],
)
def test_refused_with_the_dotted_key(settings: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        parse_config(_behavior(**settings), "test.yaml")
    assert info.value.key == f"behaviors.Tennis.{key}"
    assert str(info.value).startswith(f"test.yaml: behaviors.Tennis.{key}: ")


def test_team_change_equal_to_max_steps_is_accepted() -> None:
    config = _behavior(max_steps=1000, self_play={"save_steps": 100, "team_change": 1000})
    assert parse_config(config).behaviors["Tennis"].self_play.effective_team_change == 1000
