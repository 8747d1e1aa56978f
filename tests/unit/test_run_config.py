"""The CLI's one home for the run's settings (``cli.run_config``): flags over env_settings, behavior selection,
the seed rule, and the typed settings envclient takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.run_config import (
    EMBEDDED_SEED_STRIDE,
    EnvFlags,
    env_seed,
    load_run_options,
    offline_behaviors,
    select_behaviors,
    vector_env_settings,
    with_max_steps,
)
from common.config import parse_config
from common.errors import ConfigError
from envclient.envs import VectorEnvSettings

TWO = {
    "behaviors": {
        "3DBall": {"trainer_type": "sac"},
        "Basic": {},
        "Cloned": {"trainer_type": "bc", "hyperparameters": {"demo_path": "x.demo"}},
    },
    "env_settings": {
        "env_path": [{"env": "gym:Pendulum-v1", "behavior": "3DBall"}, {"env": "gym:CartPole-v1", "behavior": "Basic"}],
        "num_envs": 3,
        "seed": 5,
    },
}


def test_flags_override_env_settings(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("behaviors:\n  Simple1D: {}\nenv_settings:\n  env_path: simple:discrete\n", encoding="utf-8")
    assert EnvFlags().overrides() is None
    options = load_run_options(config, EnvFlags(env="simple:continuous", num_envs=2, seed=9))
    assert options.env_settings.env_paths == ("simple:continuous",)
    assert (options.env_settings.num_envs, options.env_settings.seed) == (2, 9)


def test_behavior_selection() -> None:
    options = parse_config(TWO)
    assert select_behaviors(Path("c.yaml"), options, "env") == ["3DBall", "Basic"]
    assert select_behaviors(Path("c.yaml"), options, "env", "Basic") == ["Basic"]
    with pytest.raises(ConfigError, match=r"--behavior Nope: not in env_settings\.env_path \(behaviors: 3DBall, Basic\)"):
        select_behaviors(Path("c.yaml"), options, "env", "Nope")
    with pytest.raises(ConfigError, match=r"several behaviors .* choose one with --behavior"):
        select_behaviors(Path("c.yaml"), options, "record", single=True)
    with pytest.raises(ConfigError, match="env_path is required for `stepstream env`"):
        select_behaviors(Path("c.yaml"), parse_config({"behaviors": {"A": {}}}), "env")
    assert offline_behaviors(options) == ["Cloned"]


def test_the_seed_rule() -> None:
    assert env_seed(-1, 0) is None and env_seed(-1, 2, "client") is None  # negative: fresh entropy
    assert env_seed(7, 0) == 7 and env_seed(7, 2) == 7 + 2 * EMBEDDED_SEED_STRIDE  # train and record
    stack = env_seed(7, 0, "env-0")
    assert stack is not None and stack == env_seed(7, 0, "env-0") and stack != env_seed(7, 0, "env-1")  # replicas differ
    assert 0 <= stack < 2**31


def test_envclient_gets_typed_settings() -> None:
    options = parse_config(TWO)
    assert vector_env_settings(options, ["Basic", "3DBall"], 5) == [
        VectorEnvSettings("gym:CartPole-v1", "Basic", 3, 5 + EMBEDDED_SEED_STRIDE),
        VectorEnvSettings("gym:Pendulum-v1", "3DBall", 3, 5),
    ]


def test_max_steps_override_reaches_every_behavior() -> None:
    options = with_max_steps(parse_config({**TWO, "default_settings": {"max_steps": 10}}), 300)
    assert {s.max_steps for s in options.behaviors.values()} == {300}
    assert options.default_settings is not None and options.default_settings.max_steps == 300
