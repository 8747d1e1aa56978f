"""The trainer-YAML config: ML-Agents' defaults, default_settings merging, and the strict parser's errors."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_NODES,
    ActivationType,
    BCHyperparameters,
    BehavioralCloningSettings,
    BehaviorSettings,
    ConfigKeyError,
    CuriositySettings,
    DemoActionTiming,
    EncoderType,
    EnvPathEntry,
    EnvSettings,
    GAILSettings,
    MemorySettings,
    NetworkSettings,
    NotSupportedKeyError,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    RunOptions,
    SACHyperparameters,
    ScheduleType,
    TrainerType,
    behavior_name_for_env,
    load_config,
    parse_config,
)
from common.environment_parameters import ConstantSampler
from common.errors import ConfigError, NotSupportedYetError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _behavior(settings: dict[str, Any], name: str = "CartPole", **top: Any) -> RunOptions:
    return parse_config({"behaviors": {name: settings}, **top}, "test.yaml")


def _defaults(cls: type, **required: Any) -> dict[str, Any]:
    """The defaults of ``cls``'s ML-Agents keys (``stepstream`` metadata marks the keys stepstream adds)."""
    instance = cls(**required)
    fields = [f for f in dataclasses.fields(instance) if f.name not in required and not f.metadata.get("stepstream")]
    return {f.name: getattr(instance, f.name) for f in fields}


def _stepstream_keys(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("stepstream")}


# --- defaults ---------------------------------------------------------------------------------

ML_AGENTS_DEFAULTS = [
    (
        PPOHyperparameters,
        {},
        {
            "batch_size": 1024,
            "buffer_size": 10240,
            "learning_rate": 3.0e-4,
            "learning_rate_schedule": ScheduleType.LINEAR,
            "beta": 5.0e-3,
            "epsilon": 0.2,
            "lambd": 0.95,
            "num_epoch": 3,
            "beta_schedule": None,
            "epsilon_schedule": None,
            "shared_critic": False,
        },
    ),
    (
        SACHyperparameters,
        {},
        {
            "batch_size": 128,
            "buffer_size": 50000,
            "learning_rate": 3.0e-4,
            "learning_rate_schedule": ScheduleType.CONSTANT,
            "buffer_init_steps": 0,
            "tau": 0.005,
            "steps_per_update": 1,
            "save_replay_buffer": False,
            "init_entcoef": 1.0,
            "reward_signal_steps_per_update": None,
        },
    ),
    (
        BCHyperparameters,
        {"demo_path": "x.demo"},
        {
            "demo_action_timing": DemoActionTiming.AUTO,  # stepstream's own (issue 18)
            "batch_size": 64,
            "num_epoch": 3,
            "learning_rate": 3.0e-4,
            "learning_rate_schedule": ScheduleType.CONSTANT,
        },
    ),
    (
        NetworkSettings,
        {},
        {
            "normalize": False,
            "hidden_units": 128,
            "num_layers": 2,
            "vis_encode_type": EncoderType.SIMPLE,
            "memory": None,
            "deterministic": False,
        },
    ),
    (MemorySettings, {}, {"sequence_length": 64, "memory_size": 128}),
    (RewardSignalSettings, {}, {"gamma": 0.99, "strength": 1.0, "network_settings": NetworkSettings()}),
    (
        GAILSettings,
        {"demo_path": "x.demo"},
        {
            "gamma": 0.99,
            "strength": 1.0,
            "network_settings": NetworkSettings(),
            "demo_action_timing": DemoActionTiming.AUTO,  # stepstream's own (issue 18)
            "learning_rate": 3e-4,
            "encoding_size": None,
            "use_actions": False,
            "use_vail": False,
        },
    ),
    (
        CuriositySettings,
        {},
        {"gamma": 0.99, "strength": 1.0, "network_settings": NetworkSettings(), "learning_rate": 3e-4, "encoding_size": None},
    ),
    (
        BehavioralCloningSettings,
        {"demo_path": "x.demo"},
        {
            "demo_action_timing": DemoActionTiming.AUTO,  # stepstream's own (issue 18)
            "steps": 0,
            "strength": 1.0,
            "samples_per_update": 0,
            "num_epoch": None,
            "batch_size": None,
        },
    ),
    (EnvSettings, {}, {"env_path": None, "num_envs": 1, "seed": -1}),
]


@pytest.mark.parametrize(("cls", "required", "expected"), ML_AGENTS_DEFAULTS, ids=lambda v: getattr(v, "__name__", ""))
def test_section_defaults_match_ml_agents(cls: type, required: dict[str, Any], expected: dict[str, Any]) -> None:
    assert _defaults(cls, **required) == expected


def test_stepstream_ppo_keys_default_to_sb3s_variants() -> None:
    """PPO's variants that ML-Agents' YAML cannot set: stepstream keys, defaulting to SB3's choices."""
    ppo = PPOHyperparameters()
    assert {key: getattr(ppo, key) for key in _stepstream_keys(PPOHyperparameters)} == {
        "clip_value_loss": False,
        "max_grad_norm": 0.5,
        "activation": ActivationType.TANH,
        "orthogonal_init": True,
        "proximal_clip": False,
        "normalize_reward": False,
        "log_std_init": 0.0,
        "noise_hold_steps": 1,
        "use_sde": False,
        "sde_sample_freq": -1,
        "use_expln": False,
    }
    sac = SACHyperparameters()  # gSDE's keys, with SB3's SAC default for sigma's initial log
    assert {key: getattr(sac, key) for key in _stepstream_keys(SACHyperparameters)} == {
        "activation": ActivationType.SWISH,
        "learn_entcoef": True,
        "log_std_init": -3.0,
        "use_sde": False,
        "sde_sample_freq": -1,
        "use_expln": False,
    }
    for cls in (BCHyperparameters, NetworkSettings, RewardSignalSettings, BehaviorSettings):
        assert _stepstream_keys(cls) == set(), cls


def test_stepstream_ppo_keys_parse_strictly() -> None:
    # ML-Agents' value loss, gradients and activation, with SB3's ortho_init=False start.
    variants = {"clip_value_loss": True, "max_grad_norm": None, "activation": "swish", "orthogonal_init": False}
    ppo = _behavior({"trainer_type": "ppo", "hyperparameters": variants}).behaviors["CartPole"].hyperparameters
    assert ppo == PPOHyperparameters(
        clip_value_loss=True, max_grad_norm=None, activation=ActivationType.SWISH, orthogonal_init=False
    )
    relu = (
        _behavior({"trainer_type": "ppo", "hyperparameters": {"activation": "relu", "max_grad_norm": 2}})
        .behaviors["CartPole"]
        .hyperparameters
    )
    assert isinstance(relu, PPOHyperparameters)
    assert (relu.activation, relu.max_grad_norm) == (ActivationType.RELU, 2.0)
    key = "behaviors.CartPole.hyperparameters"
    with pytest.raises(ConfigKeyError, match=rf"{key}\.max_grad_norm: must be > 0, got 0\.0"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"max_grad_norm": 0}})
    with pytest.raises(ConfigKeyError, match=rf"{key}\.activation: expected one of tanh, relu, swish, got str 'Tanh'"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"activation": "Tanh"}})
    with pytest.raises(ConfigKeyError, match=rf"{key}\.clip_value_loss: expected true or false, got str 'yes'"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"clip_value_loss": "yes"}})
    with pytest.raises(ConfigKeyError, match=rf"{key}\.orthogonal_init: expected true or false, got int 1"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"orthogonal_init": 1}})
    own = {"proximal_clip": True, "normalize_reward": True}
    parsed = _behavior({"trainer_type": "ppo", "hyperparameters": own}).behaviors["CartPole"].hyperparameters
    assert parsed == PPOHyperparameters(proximal_clip=True, normalize_reward=True)
    with pytest.raises(ConfigKeyError, match=rf"{key}\.normalize_reward: expected true or false, got str 'on'"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"normalize_reward": "on"}})
    parsed = _behavior({"trainer_type": "ppo", "hyperparameters": {"log_std_init": -1.5}}).behaviors["CartPole"]
    assert parsed.hyperparameters == PPOHyperparameters(log_std_init=-1.5)
    with pytest.raises(ConfigKeyError, match=rf"{key}\.log_std_init: must be in \[-20, 2\], got 3\.0"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"log_std_init": 3}})
    held = _behavior({"trainer_type": "ppo", "hyperparameters": {"noise_hold_steps": 8}}).behaviors["CartPole"]
    assert held.hyperparameters == PPOHyperparameters(noise_hold_steps=8) and held.noise_hold_steps == 8
    assert _behavior({"trainer_type": "sac"}).behaviors["CartPole"].noise_hold_steps == 1  # fresh noise off PPO
    with pytest.raises(ConfigKeyError, match=rf"{key}\.noise_hold_steps: must be >= 1, got 0"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"noise_hold_steps": 0}})
    with pytest.raises(ConfigKeyError, match=rf"{key}\.noise_hold_steps: expected"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"noise_hold_steps": 2.5}})
    with pytest.raises(ConfigKeyError, match=r"'max_grad_norm' is a ppo hyperparameter"):
        _behavior({"trainer_type": "sac", "hyperparameters": {"max_grad_norm": 0.5}})


def test_stepstream_sac_keys_parse_strictly() -> None:
    own = {"use_sde": True, "sde_sample_freq": 32, "log_std_init": -3.67, "use_expln": True, "activation": "relu"}
    parsed = _behavior({"trainer_type": "sac", "hyperparameters": {**own, "learn_entcoef": False}}).behaviors["CartPole"]
    assert parsed.hyperparameters == SACHyperparameters(
        use_sde=True,
        sde_sample_freq=32,
        log_std_init=-3.67,
        use_expln=True,
        activation=ActivationType.RELU,
        learn_entcoef=False,
    )
    assert (parsed.noise_hold_steps, parsed.sde_latent_size) == (32, NetworkSettings().hidden_units)
    key = "behaviors.CartPole.hyperparameters"
    with pytest.raises(ConfigKeyError, match=rf"{key}\.learn_entcoef: expected true or false, got str 'no'"):
        _behavior({"trainer_type": "sac", "hyperparameters": {"learn_entcoef": "no"}})
    with pytest.raises(ConfigKeyError, match=rf"{key}\.sde_sample_freq: must be -1 or >= 1, got 0"):
        _behavior({"trainer_type": "sac", "hyperparameters": {"sde_sample_freq": 0}})
    with pytest.raises(ConfigKeyError, match=r"'noise_hold_steps' is a ppo hyperparameter"):
        _behavior({"trainer_type": "sac", "hyperparameters": {"noise_hold_steps": 4}})


def test_behavior_defaults_match_ml_agents() -> None:
    settings = _behavior({}).behaviors["CartPole"]
    assert settings.trainer_type is TrainerType.PPO
    assert settings.hyperparameters == PPOHyperparameters()
    assert settings.network_settings == NetworkSettings()
    assert settings.reward_signals == {RewardSignalType.EXTRINSIC: RewardSignalSettings()}
    assert settings.behavioral_cloning is None
    expected = {"max_steps": 500000, "time_horizon": 64, "summary_freq": 50000, "checkpoint_interval": 500000}
    assert {key: getattr(settings, key) for key in expected} == expected
    assert settings.keep_checkpoints == 5
    assert settings == BehaviorSettings()


def test_derived_values_are_properties() -> None:
    ppo = PPOHyperparameters(batch_size=64, buffer_size=256, learning_rate_schedule=ScheduleType.CONSTANT)
    assert ppo.num_minibatches == 4
    assert ppo.effective_beta_schedule is ScheduleType.CONSTANT
    assert ppo.effective_epsilon_schedule is ScheduleType.CONSTANT
    assert PPOHyperparameters(beta_schedule=ScheduleType.CONSTANT).effective_beta_schedule is ScheduleType.CONSTANT
    assert SACHyperparameters(steps_per_update=4).effective_reward_signal_steps_per_update == 4
    assert SACHyperparameters(reward_signal_steps_per_update=2).effective_reward_signal_steps_per_update == 2


def test_schedules_follow_learning_rate_schedule_when_parsed() -> None:
    hp = _behavior({"trainer_type": "ppo", "hyperparameters": {"learning_rate_schedule": "constant"}})
    ppo = hp.behaviors["CartPole"].hyperparameters
    assert isinstance(ppo, PPOHyperparameters)
    assert (ppo.effective_beta_schedule, ppo.effective_epsilon_schedule) == (ScheduleType.CONSTANT, ScheduleType.CONSTANT)


@pytest.mark.parametrize(
    ("settings", "lag"),
    [
        ({"trainer_type": "ppo"}, 2),
        ({"trainer_type": "sac"}, None),
        ({"trainer_type": "bc", "hyperparameters": {"demo_path": "d.demo"}}, None),
        ({"trainer_type": "sac", "max_policy_lag": 5}, 5),
        ({"trainer_type": "ppo", "max_policy_lag": 0}, 0),
    ],
    ids=["ppo", "sac", "bc", "sac-set", "ppo-zero"],
)
def test_effective_max_policy_lag(settings: dict[str, Any], lag: int | None) -> None:
    assert _behavior(settings).behaviors["CartPole"].effective_max_policy_lag == lag


def test_bc_trainer_reads_demo_path() -> None:
    settings = _behavior({"trainer_type": "bc", "hyperparameters": {"demo_path": "demos/x.demo"}}).behaviors["CartPole"]
    assert settings.demo_path == "demos/x.demo"
    assert BehaviorSettings().demo_path is None


@pytest.mark.parametrize(
    ("settings", "queue"),
    [
        ({"trainer_type": "ppo"}, 160),  # one update buffer: ceil(10240 / 64)
        ({"trainer_type": "ppo", "time_horizon": 1000, "hyperparameters": {"buffer_size": 2050}}, 3),
        ({"trainer_type": "ppo", "hyperparameters": {"buffer_size": 64, "batch_size": 64}}, 2),
        ({"trainer_type": "sac", "time_horizon": 8, "hyperparameters": {"batch_size": 100}}, 13),  # one minibatch
        ({"trainer_type": "sac"}, 4),  # ceil(128 / 64) = 2, at least 4
        ({"trainer_type": "bc", "hyperparameters": {"demo_path": "demos/x.demo"}}, None),
        ({"trainer_type": "ppo", "max_queued_trajectories": 2}, 2),  # the key overrules the derived 160
        ({"trainer_type": "sac", "max_queued_trajectories": 64}, 64),
        ({"trainer_type": "bc", "hyperparameters": {"demo_path": "demos/x.demo"}, "max_queued_trajectories": 1}, 1),
    ],
    ids=[
        "ppo",
        "ppo-rounds-up",
        "ppo-at-least-2",
        "sac",
        "sac-at-least-4",
        "bc-processor-default",
        "ppo-key",
        "sac-key",
        "bc-key",
    ],
)
def test_trajectory_queue_size_follows_the_trainer_type(settings: dict[str, Any], queue: int | None) -> None:
    assert _behavior(settings).behaviors["CartPole"].trajectory_queue_size == queue


def test_the_processor_sizes_the_trainers_queue_by_max_queued_trajectories() -> None:
    from processor.behaviors import BehaviorRuntime

    minigrid = load_config(CONFIGS / "minigrid_ppo.yaml").behaviors["MiniGridEmpty5x5"]
    assert minigrid.max_queued_trajectories == 2  # T3: its envs wait while the trainer updates (the config's notes)
    assert BehaviorRuntime.from_settings(minigrid).trajectory_queue_size == 2
    assert load_config(CONFIGS / "cartpole_ppo.yaml").behaviors["CartPole"].trajectory_queue_size == 32  # derived


# --- default_settings ---------------------------------------------------------------------------

DEFAULTS = {
    "trainer_type": "ppo",
    "hyperparameters": {"batch_size": 128, "buffer_size": 1280, "lambd": 0.9},
    "network_settings": {"hidden_units": 32, "normalize": True},
    "reward_signals": {"extrinsic": {"gamma": 0.9}},
    "max_steps": 1000,
}


def test_default_settings_deep_merge_behavior_keys_win() -> None:
    own = {
        "hyperparameters": {"lambd": 0.7},
        "network_settings": {"hidden_units": 16},
        "reward_signals": {"extrinsic": {"strength": 2.0}},
    }
    options = parse_config({"default_settings": DEFAULTS, "behaviors": {"CartPole": own}})
    settings = options.behaviors["CartPole"]
    assert settings.hyperparameters == PPOHyperparameters(batch_size=128, buffer_size=1280, lambd=0.7)
    assert settings.network_settings == NetworkSettings(hidden_units=16, normalize=True)
    assert settings.reward_signals[RewardSignalType.EXTRINSIC] == RewardSignalSettings(gamma=0.9, strength=2.0)
    assert settings.max_steps == 1000


def test_deprecated_encoding_size_sets_the_signal_network_width() -> None:
    signals = {
        "curiosity": {"encoding_size": 64},
        "gail": {"demo_path": "d.demo", "encoding_size": 32, "network_settings": {}},
    }
    settings = _behavior({"reward_signals": signals}).behaviors["CartPole"]
    assert settings.reward_signals[RewardSignalType.CURIOSITY].network_settings.hidden_units == 64
    assert settings.reward_signals[RewardSignalType.GAIL].network_settings.hidden_units == 128  # network_settings wins


def test_default_settings_keep_extrinsic_under_a_behavior_adding_a_signal() -> None:
    default = {"trainer_type": "ppo"}
    own = {"reward_signals": {"curiosity": {"strength": 0.02}}}
    settings = parse_config({"default_settings": default, "behaviors": {"A": own}}).behaviors["A"]
    assert set(settings.reward_signals) == {RewardSignalType.EXTRINSIC, RewardSignalType.CURIOSITY}


def test_trainer_type_switch_resets_hyperparameters() -> None:
    own = {"trainer_type": "sac", "hyperparameters": {"tau": 0.01}}
    settings = parse_config({"default_settings": DEFAULTS, "behaviors": {"Pendulum": own}}).behaviors["Pendulum"]
    assert settings.trainer_type is TrainerType.SAC
    assert settings.hyperparameters == SACHyperparameters(tau=0.01)
    assert settings.network_settings.hidden_units == 32  # other sections still merge


def test_default_settings_cover_env_behaviors_and_unknown_names() -> None:
    options = parse_config({"default_settings": DEFAULTS, "env_settings": {"env_path": "gym:CartPole-v1"}})
    assert options.default_settings is not None
    assert options.behaviors == {"CartPole": options.default_settings}
    assert options.settings_for("Other") == options.default_settings
    with pytest.raises(ConfigKeyError) as info:
        parse_config({"behaviors": {"A": {}}}).settings_for("B")
    assert info.value.key == "behaviors.B"


# --- errors -------------------------------------------------------------------------------------


def test_unknown_key_names_the_dotted_path_with_a_did_you_mean() -> None:
    with pytest.raises(ConfigKeyError) as info:
        _behavior({"trainer_type": "ppo", "hyperparameters": {"lamd": 0.9}})
    assert info.value.key == "behaviors.CartPole.hyperparameters.lamd"
    assert str(info.value) == "test.yaml: behaviors.CartPole.hyperparameters.lamd: unknown key (did you mean 'lambd'?)"


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"behaviours": {}}, "behaviours"),
        ({"behaviors": {"A": {"time_horizn": 3}}}, "behaviors.A.time_horizn"),
        ({"behaviors": {"A": {"trainer_type": "ppo", "hyperparameters": {"tau": 0.1}}}}, "behaviors.A.hyperparameters.tau"),
        ({"behaviors": {"A": {"reward_signals": {"extrinsc": {}}}}}, "behaviors.A.reward_signals.extrinsc"),
        ({"behaviors": {"A": {"trainer_type": "offline_bc"}}}, "behaviors.A.trainer_type"),
        ({"env_settings": {"num_env": 2}}, "env_settings.num_env"),
        ({"engine_settings": {"time_scal": 20}}, "engine_settings.time_scal"),
        (
            {"behaviors": {"A": {"network_settings": {"goal_conditioning_type": "hyperr"}}}},
            "behaviors.A.network_settings.goal_conditioning_type",
        ),
        ({"behaviors": {"A": {"hyperparameters": {"batch_size": 32}}}}, "behaviors.A.hyperparameters"),
        ({"behaviors": {"A": {"trainer_type": "bc"}}}, "behaviors.A.hyperparameters.demo_path"),
        ({"env_settings": {"env_path": "gym:"}}, "env_settings.env_path"),
    ],
    ids=[
        "top",
        "behavior",
        "other-trainer",
        "signal",
        "offline_bc",
        "env",
        "ignored-section",
        "choice",
        "no-type",
        "missing",
        "gym-id",
    ],
)
def test_invalid_keys_raise_config_error_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        parse_config(config, "test.yaml")
    assert info.value.key == key
    assert str(info.value).startswith(f"test.yaml: {key}: ")


def test_hints_name_the_likely_fix() -> None:
    with pytest.raises(ConfigKeyError, match=r"'tau' is a sac hyperparameter"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"tau": 0.1}})
    with pytest.raises(ConfigKeyError, match=r"did you mean 'bc'\?"):
        _behavior({"trainer_type": "offline_bc"})


@pytest.mark.parametrize(
    ("hyperparameters", "key", "expected"),
    [
        ({"batch_size": "big"}, "batch_size", "expected an integer, got str 'big'"),
        ({"batch_size": 64.5}, "batch_size", "expected an integer, got float 64.5"),
        ({"batch_size": True}, "batch_size", "expected an integer, got bool True"),
        ({"learning_rate": [1]}, "learning_rate", "expected a finite number, got list [1]"),
        ({"learning_rate_schedule": "cosine"}, "learning_rate_schedule", "expected one of constant, linear, got str 'cosine'"),
    ],
)
def test_wrong_type_names_path_expected_type_and_value(hyperparameters: dict[str, Any], key: str, expected: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        _behavior({"trainer_type": "ppo", "hyperparameters": hyperparameters})
    assert str(info.value) == f"test.yaml: behaviors.CartPole.hyperparameters.{key}: {expected}"


def test_numbers_written_as_yaml_strings_are_read_as_ml_agents_reads_them() -> None:
    # PyYAML reads 5.0e5 and 1e-3 (no signed exponent) as strings; ML-Agents accepts them.
    options = parse_config(
        yaml.safe_load(
            "behaviors:\n  A:\n    trainer_type: ppo\n    max_steps: 5.0e5\n    hyperparameters:\n      learning_rate: 1e-3\n"
        )
    )
    settings = options.behaviors["A"]
    assert settings.max_steps == 500000
    assert settings.hyperparameters.learning_rate == pytest.approx(1e-3)


@pytest.mark.parametrize(
    ("settings", "key", "value"),
    [
        ({"trainer_type": "ppo", "hyperparameters": {"lambd": 1.5}}, "hyperparameters.lambd", "1.5"),
        ({"trainer_type": "ppo", "hyperparameters": {"batch_size": 0}}, "hyperparameters.batch_size", "0"),
        ({"trainer_type": "sac", "hyperparameters": {"tau": 0.0}}, "hyperparameters.tau", "0.0"),
        ({"reward_signals": {"extrinsic": {"gamma": 1.0}}}, "reward_signals.extrinsic.gamma", "1.0"),
        ({"time_horizon": 0}, "time_horizon", "0"),
        ({"max_policy_lag": -1}, "max_policy_lag", "-1"),
        ({"max_queued_trajectories": 0}, "max_queued_trajectories", "0"),
        ({"network_settings": {"hidden_units": 0}}, "network_settings.hidden_units", "0"),
        ({"reward_signals": {}}, "reward_signals", "none"),
    ],
)
def test_range_errors_give_the_value(settings: dict[str, Any], key: str, value: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        _behavior(settings)
    assert info.value.key == f"behaviors.CartPole.{key}"
    assert str(info.value).endswith(value)


def test_direct_construction_is_range_checked() -> None:
    with pytest.raises(ConfigKeyError) as info:
        PPOHyperparameters(lambd=-0.1)
    assert (info.value.key, str(info.value)) == ("lambd", "lambd: must be in [0, 1], got -0.1")
    with pytest.raises(ConfigKeyError, match="does not fit trainer_type 'sac'"):
        BehaviorSettings(trainer_type=TrainerType.SAC)


def test_risky_settings_log_a_warning_with_the_numbers(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="common.config"):
        _behavior({"trainer_type": "ppo", "hyperparameters": {"batch_size": 64, "buffer_size": 1000}})
        _behavior({"trainer_type": "ppo", "hyperparameters": {"batch_size": 2048, "buffer_size": 1024}})
    messages = [record.getMessage() for record in caplog.records]
    assert (
        "buffer_size 1000 is not a multiple of batch_size 64: 15 minibatches per epoch, 40 experiences left out" in messages[0]
    )
    assert "batch_size 2048 > buffer_size 1024" in messages[1]


def test_ignored_keys_are_accepted_and_named_in_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    config = {
        "behaviors": {
            "A": {"threaded": True, "even_checkpoints": False, "network_settings": {"goal_conditioning_type": "none"}}
        },
        "env_settings": {"base_port": 5005, "num_areas": 2, "timeout_wait": 60, "max_lifetime_restarts": 3},
        "torch_settings": {"device": "cpu"},
        "checkpoint_settings": {"run_id": "x", "resume": False},
        "engine_settings": {"time_scale": 20, "no_graphics": True},
        "debug": False,
    }
    with caplog.at_level(logging.INFO, logger="common.config"):
        parse_config(config, "test.yaml")
    ignored, unity = (record.getMessage() for record in caplog.records)
    for name in (
        "behaviors.A.threaded",
        "behaviors.A.even_checkpoints",
        "behaviors.A.network_settings.goal_conditioning_type",
        "env_settings.num_areas",
        "env_settings.timeout_wait",
        "torch_settings",
        "checkpoint_settings",
        "debug",
    ):
        assert name in ignored
    assert ignored.startswith("test.yaml: ignoring")
    # What a Unity build reads (the launcher, the engine side channel) is named apart, never as ignored.
    for name in ("env_settings.base_port", "env_settings.max_lifetime_restarts", "engine_settings"):
        assert name in unity and name not in ignored
    assert unity.startswith("test.yaml: settings only a Unity build uses")


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (
            {"behaviors": {"A": {"reward_signals": {"curiosity": {"network_settings": {"memory": {}}}}}}},
            "behaviors.A.reward_signals.curiosity.network_settings.memory",
        ),
        ({"env_settings": {"env_path": "Builds/3DBall.x86_64"}}, "env_settings.env_path"),
        (
            {"default_settings": {"reward_signals": {"curiosity": {"network_settings": {"memory": {}}}}}},
            "default_settings.reward_signals.curiosity.network_settings.memory",
        ),
    ],
    ids=[
        "signal-memory",
        "unity-build",
        "in-default",
    ],
)
def test_not_supported_yet_names_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(NotSupportedYetError) as info:
        parse_config(config, "test.yaml")
    assert isinstance(info.value, NotSupportedKeyError)
    assert not isinstance(info.value, ConfigError)
    assert info.value.key == key
    assert str(info.value).startswith(f"test.yaml: {key}: ") and "not supported yet" in str(info.value)


def test_shared_critic_is_ml_agents_ppo_key() -> None:
    """``hyperparameters.shared_critic`` (ML-Agents' PPOSettings, default false) parses, for PPO only."""
    options = _behavior({"trainer_type": "ppo", "hyperparameters": {"shared_critic": True}})
    hp = options.behaviors["CartPole"].hyperparameters
    assert isinstance(hp, PPOHyperparameters) and hp.shared_critic is True
    assert "shared_critic" not in _stepstream_keys(PPOHyperparameters)
    with pytest.raises(ConfigKeyError, match=r"behaviors\.CartPole\.hyperparameters\.shared_critic"):
        _behavior({"trainer_type": "sac", "hyperparameters": {"shared_critic": True}})


@pytest.mark.parametrize("encoder", [e.value for e in EncoderType])
def test_every_vis_encode_type_parses(encoder: str) -> None:
    """ML-Agents' five encoders are settings now (their minimum image sides are checked by the trainers)."""
    options = parse_config({"behaviors": {"A": {"network_settings": {"vis_encode_type": encoder}}}}, "test.yaml")
    assert options.behaviors["A"].network_settings.vis_encode_type is EncoderType(encoder)


def test_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("behaviors:\n  CartPole:\n    trainer_type: ppo\n    hyperparameters:\n      lamd: 0.9\n")
    with pytest.raises(
        ConfigKeyError, match=rf"^{re.escape(str(path))}: behaviors\.CartPole\.hyperparameters\.lamd: unknown key"
    ):
        load_config(path)
    path.write_text("behaviors: [unclosed\n")
    with pytest.raises(ConfigKeyError, match=rf"^{re.escape(str(path))}: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigKeyError, match=r"missing\.yaml: cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_errors_survive_pickling() -> None:
    error = ConfigKeyError("behaviors.A.x", "unknown key", "f.yaml")
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.key, str(again)) == (ConfigKeyError, "behaviors.A.x", str(error))


# --- env_settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_path", "name"),
    [
        ("gym:CartPole-v1", "CartPole"),
        ("gym:Pendulum-v1", "Pendulum"),
        ("gym:ALE/Pong-v5", "Pong"),
        ("gym:MyEnv", "MyEnv"),
        ("python:my_envs.pixels:make_minigrid", "make_minigrid"),
    ],
)
def test_behavior_name_for_env(env_path: str, name: str) -> None:
    assert behavior_name_for_env(env_path) == name


def test_a_python_env_path_parses_without_importing_and_a_malformed_one_names_the_key() -> None:
    options = parse_config(
        {"behaviors": {"make_env": {}}, "env_settings": {"env_path": "python:no_such_package.envs:make_env"}}
    )
    assert options.env_settings.env_paths == ("python:no_such_package.envs:make_env",)
    with pytest.raises(ConfigError) as info:
        parse_config({"behaviors": {"A": {}}, "env_settings": {"env_path": "python:envs.py"}})
    assert "env_settings.env_path" in str(info.value) and "is not python:MODULE:FUNCTION" in str(info.value)


def test_env_path_string_and_list() -> None:
    one = parse_config({"behaviors": {"CartPole": {}}, "env_settings": {"env_path": "gym:CartPole-v1", "num_envs": 4}})
    assert one.env_settings.env_paths == ("gym:CartPole-v1",)
    assert one.env_settings.num_envs == 4
    two = parse_config(
        {
            "behaviors": {"CartPole": {}, "Pendulum": {"trainer_type": "sac"}},
            "env_settings": {"env_path": ["gym:CartPole-v1", "gym:Pendulum-v1"]},
        }
    )
    assert two.env_settings.env_path == ("gym:CartPole-v1", "gym:Pendulum-v1")
    assert two.env_settings.behavior_names == {"CartPole": "gym:CartPole-v1", "Pendulum": "gym:Pendulum-v1"}


@pytest.mark.parametrize(
    ("env_settings", "detail"),
    [
        ({"env_path": "gym:CartPole-v1"}, "behavior 'CartPole' (from 'gym:CartPole-v1') has no entry under behaviors"),
        ({"env_path": ["gym:CartPole-v0", "gym:CartPole-v1"]}, "both give behavior 'CartPole'"),
        ({"env_path": []}, "is an empty list"),
        ({"num_envs": 2}, "must be 1 when env_path is not set, got 2"),
        ({"env_path": 3}, "expected a str or a mapping or a list, got int 3"),
        (
            {"env_path": [{"env": "gym:CartPole-v1", "behavior": "A"}, {"env": "gym:Pendulum-v1", "behavior": "A"}]},
            "give behavior 'A'",
        ),
        (
            {"env_path": {"env": "gym:CartPole-v1", "behaviour": "A"}},
            "env_path.behaviour: unknown key (did you mean 'behavior'?)",
        ),
    ],
)
def test_env_settings_errors(env_settings: dict[str, Any], detail: str) -> None:
    # Two behaviors, so that no single env is given the only behavior's name.
    with pytest.raises(ConfigKeyError, match=re.escape(detail)):
        parse_config({"behaviors": {"Other": {}, "Another": {}}, "env_settings": env_settings})


def test_one_env_and_one_behavior_trains_that_behavior_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    config = {"behaviors": {"3DBall": {"trainer_type": "sac"}}, "env_settings": {"env_path": "gym:Pendulum-v1"}}
    with caplog.at_level(logging.INFO, logger="common.config"):
        options = parse_config(config, "3DBall.yaml")
    assert options.env_settings.behavior_names == {"3DBall": "gym:Pendulum-v1"}
    assert options.env_settings.entries == (EnvPathEntry(env="gym:Pendulum-v1", behavior="3DBall"),)
    lines = [r.getMessage() for r in caplog.records if "trains on" in r.getMessage()]
    assert lines == [
        "3DBall.yaml: behavior '3DBall' trains on gym:Pendulum-v1 (one env, one behavior; its own name would be 'Pendulum')"
    ]
    again = parse_config(yaml.safe_load(yaml.safe_dump(options.to_dict())))
    assert again.to_dict() == options.to_dict()  # configuration.yaml holds the mapped entry


def test_env_path_entries_name_their_behaviors() -> None:
    config = {
        "behaviors": {"3DBall": {"trainer_type": "sac"}, "Basic": {}},
        "env_settings": {
            "env_path": [{"env": "gym:Pendulum-v1", "behavior": "3DBall"}, {"env": "gym:CartPole-v1", "behavior": "Basic"}]
        },
    }
    options = parse_config(config)
    assert options.env_settings.behavior_names == {"3DBall": "gym:Pendulum-v1", "Basic": "gym:CartPole-v1"}
    assert options.env_settings.env_paths == ("gym:Pendulum-v1", "gym:CartPole-v1")
    assert parse_config(yaml.safe_load(yaml.safe_dump(options.to_dict()))).to_dict() == options.to_dict()
    unmapped = {"behaviors": {"3DBall": {}, "Basic": {}}, "env_settings": {"env_path": ["gym:Pendulum-v1", "gym:CartPole-v1"]}}
    with pytest.raises(ConfigKeyError, match=r"behavior 'Pendulum' .* has no entry under behaviors"):
        parse_config(unmapped)  # several behaviors: only explicit entries map them


def test_output_path_of_older_releases_is_accepted_as_ignored(caplog: pytest.LogCaptureFixture) -> None:
    config = {"behaviors": {"PushBlock": {"output_path": "default", "threaded": True, "summary_freq": 60000}}}
    with caplog.at_level(logging.INFO, logger="common.config"):
        options = parse_config(config, "old.yaml")
    assert options.behaviors["PushBlock"].summary_freq == 60000
    assert any("behaviors.PushBlock.output_path" in r.getMessage() and "ignoring" in r.getMessage() for r in caplog.records)


def test_plain_environment_parameters_are_constants() -> None:
    config = {"behaviors": {"A": {}}, "environment_parameters": {"mass": 1.0, "gravity": 9.81}}
    options = parse_config(config, "p.yaml")
    values = {name: p.lessons[0].value for name, p in options.environment_parameters.items()}
    assert values == {"mass": ConstantSampler(value=1.0), "gravity": ConstantSampler(value=9.81)}
    assert options.to_dict()["environment_parameters"] == {"mass": 1.0, "gravity": 9.81}
    assert parse_config(options.to_dict()).environment_parameters == options.environment_parameters
    with pytest.raises(ConfigKeyError, match=r"environment_parameters\.mass: expected a finite number"):
        parse_config({"environment_parameters": {"mass": "heavy"}})


def test_overrides_merge_over_the_file() -> None:
    options = parse_config({"behaviors": {"A": {}}}, overrides={"env_settings": {"seed": 7}})
    assert options.env_settings.seed == 7


# --- the shipped configs and the resolved configuration.yaml ---------------------------------------


@pytest.mark.parametrize("name", ["cartpole_ppo.yaml", "pendulum_sac.yaml", "multi_behavior.yaml", "minigrid_ppo.yaml"])
def test_shipped_configs_load_and_round_trip(name: str) -> None:
    options = load_config(CONFIGS / name)
    assert set(options.behaviors) == set(options.env_settings.behavior_names)
    resolved = options.to_dict()
    again = parse_config(yaml.safe_load(yaml.safe_dump(resolved)), "configuration.yaml")
    assert again.to_dict() == resolved
    for behavior, settings in options.behaviors.items():
        assert again.behaviors[behavior].effective_max_policy_lag == settings.effective_max_policy_lag


def test_shipped_configs_hold_the_intended_algorithms() -> None:
    cartpole = load_config(CONFIGS / "cartpole_ppo.yaml").behaviors["CartPole"]
    assert cartpole.trainer_type is TrainerType.PPO and cartpole.max_steps == 100000
    multi = load_config(CONFIGS / "multi_behavior.yaml")
    assert multi.behaviors["Pendulum"].trainer_type is TrainerType.SAC
    assert multi.behaviors["Pendulum"].hyperparameters == SACHyperparameters(
        batch_size=256, buffer_size=50000, buffer_init_steps=100, learning_rate=1e-3
    )
    assert multi.behaviors["CartPole"].network_settings.hidden_units == 64


def test_to_dict_writes_derived_values_and_round_trips_exactly_when_explicit() -> None:
    options = parse_config({"default_settings": DEFAULTS, "behaviors": {"A": {}, "B": {"trainer_type": "sac"}}})
    resolved = options.to_dict()
    assert resolved["behaviors"]["A"]["max_policy_lag"] == 2
    assert resolved["behaviors"]["A"]["hyperparameters"]["beta_schedule"] == "linear"
    assert resolved["behaviors"]["B"]["hyperparameters"]["reward_signal_steps_per_update"] == 1.0
    again = parse_config(resolved)
    assert again.to_dict() == resolved
    assert parse_config(again.to_dict()) == again
    assert pickle.loads(pickle.dumps(again)) == again


# --- hostile files: bounded size, bounded alias expansion, bounded messages -------------------------


def test_an_alias_bomb_is_refused_by_its_expanded_size(tmp_path: Path) -> None:
    lines = ["a0: &a0 [" + ",".join(["x"] * 9) + "]"] + [
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)
    ]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\nbehaviors:\n  A:\n    max_steps: *a8\n", encoding="utf-8")
    with pytest.raises(ConfigKeyError, match=f"expand to more than {MAX_CONFIG_NODES} nodes"):
        load_config(path)
    path.write_text("a: &a [1, 2]\nbehaviors:\n  A:\n    max_steps: 5\n    summary_freq: 5\nb: [*a, *a]\n", encoding="utf-8")
    with pytest.raises(ConfigKeyError, match=r"^.*: a: unknown key"):  # a few aliases are fine: the next error is the key
        load_config(path)


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("behaviors: {}\n" + "#" * MAX_CONFIG_BYTES, encoding="utf-8")
    with pytest.raises(ConfigKeyError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        load_config(path)


def test_messages_quote_values_bounded() -> None:
    with pytest.raises(ConfigKeyError) as info:
        parse_config({"behaviors": {"A": {"max_steps": "z" * 100_000}}})
    assert len(str(info.value)) < 300 and "(100000 chars)" in str(info.value)
    with pytest.raises(ConfigKeyError) as info:
        parse_config({"behaviors": {"A": {"k" * 100_000: 1}}})
    assert len(str(info.value)) < 300 and info.value.key.startswith("behaviors.A.'kkk")
