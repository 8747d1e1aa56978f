"""``stepstream train``'s plan (``cli.train_plan``): each mode decided from the options and the config alone, nothing
started."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cli.run_config import EnvFlags
from cli.train_plan import LOOPBACK, Mode, TrainOptions, load_train_config, plan_train
from cli.unity_train import UnityLaunch
from common.config import parse_config
from common.errors import ConfigError

CONFIG = Path("c.yaml")
BEHAVIORS = {
    "3DBall": {"trainer_type": "sac"},
    "Basic": {},
    "Cloned": {"trainer_type": "bc", "hyperparameters": {"demo_path": "x.demo"}},
}
ENVS = {"env_path": [{"env": "gym:Pendulum-v1", "behavior": "3DBall"}, {"env": "gym:CartPole-v1", "behavior": "Basic"}]}
WITH_ENVS = parse_config({"behaviors": BEHAVIORS, "env_settings": ENVS})
NO_ENV = parse_config({"behaviors": BEHAVIORS})
ONLY_BC = parse_config({"behaviors": {"Cloned": BEHAVIORS["Cloned"]}})


def options(**flags: object) -> TrainOptions:
    return dataclasses.replace(TrainOptions(CONFIG), **flags)  # type: ignore[arg-type]


def test_online_steps_the_env_path_envs_and_trains_them_and_the_offline_bc() -> None:
    plan = plan_train(options(), WITH_ENVS)
    assert plan.mode is Mode.ONLINE
    assert (plan.processor, plan.unity) == (LOOPBACK, None)
    assert plan.envs == ("3DBall", "Basic")
    assert (plan.online, plan.offline) == (("3DBall", "Basic"), ("Cloned",))
    assert plan.trainers == ("3DBall", "Basic", "Cloned")
    assert plan.checked == ("3DBall", "Basic", "Cloned")
    assert plan.probe_envs and plan.checks_env_override


def test_inference_acts_on_the_envs_and_trains_nothing() -> None:
    plan = plan_train(options(inference=True), WITH_ENVS)
    assert plan.mode is Mode.INFERENCE and plan.inference
    assert (plan.processor, plan.envs) == (LOOPBACK, ("3DBall", "Basic"))
    assert (plan.offline, plan.trainers) == ((), ())
    assert plan.checked == ("3DBall", "Basic")
    assert plan.probe_envs and not plan.checks_env_override


def test_offline_bc_alone_starts_no_processor() -> None:
    plan = plan_train(options(), ONLY_BC)
    assert plan.mode is Mode.OFFLINE
    assert (plan.processor, plan.unity, plan.envs) == (None, None, ())
    assert plan.trainers == plan.checked == ("Cloned",)


def test_no_env_and_no_offline_bc_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"c\.yaml: env_settings\.env_path is required .* only a bc behavior"):
        plan_train(options(), parse_config({"behaviors": {}}))


@pytest.mark.parametrize("inference", [False, True])
def test_online_behaviors_without_an_env_wait_for_the_editor(inference: bool) -> None:
    plan = plan_train(options(inference=inference), NO_ENV)
    assert plan.mode is Mode.UNITY
    assert plan.unity == UnityLaunch(CONFIG)  # env_path None: the Editor
    assert (plan.processor, plan.envs) == (LOOPBACK, ())
    assert plan.checked == (() if inference else ("3DBall", "Basic", "Cloned"))
    assert plan.offline == (() if inference else ("Cloned",))
    assert not plan.probe_envs and not plan.checks_env_override


def test_inference_with_only_bc_waits_for_the_editor_too() -> None:
    plan = plan_train(options(inference=True), ONLY_BC)
    assert (plan.mode, plan.unity) == (Mode.UNITY, UnityLaunch(CONFIG))


def test_a_unity_build_is_launched() -> None:
    build = UnityLaunch(CONFIG, "builds/3DBall.x86_64", num_envs=2)
    plan = plan_train(options(), NO_ENV, build)
    assert (plan.mode, plan.unity, plan.processor) == (Mode.UNITY, build, LOOPBACK)
    assert plan.trainers == ("Cloned",)  # the others start as Unity declares them


@pytest.mark.parametrize("inference", [False, True])
def test_serve_takes_sdk_clients_on_its_address(inference: bool) -> None:
    plan = plan_train(options(serve=("0.0.0.0", 5100), inference=inference), NO_ENV)
    assert (plan.mode, plan.unity) == (Mode.SERVE, None)
    assert (plan.processor, plan.envs) == (("0.0.0.0", 5100), ())
    assert plan.checked == (() if inference else ("3DBall", "Basic", "Cloned"))
    assert not plan.probe_envs
    assert plan.checks_env_override is not inference


def test_the_plan_is_frozen() -> None:
    plan = plan_train(options(), WITH_ENVS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.mode = Mode.SERVE  # type: ignore[misc]


def test_loading_a_config_that_names_a_build(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("behaviors:\n  3DBall: {}\nenv_settings:\n  env_path: builds/3DBall.x86_64\n  num_envs: 2\n")
    run_options, build = load_train_config(TrainOptions(config, env_flags=EnvFlags(seed=3), max_steps=100))
    assert build == UnityLaunch(config, "builds/3DBall.x86_64", 2)
    assert run_options.env_settings.env_paths == ()  # Unity declares the behaviors
    assert (run_options.env_settings.seed, run_options.behaviors["3DBall"].max_steps) == (3, 100)
    run_options, build = load_train_config(
        TrainOptions(config, env_flags=EnvFlags(env="gym:CartPole-v1"), initialize_from="earlier")
    )
    assert build is None and run_options.env_settings.env_paths == ("gym:CartPole-v1",)
    assert run_options.behaviors["3DBall"].init_path == str(Path("results") / "earlier" / "3DBall")


def test_serve_refuses_env_flags(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("behaviors:\n  3DBall: {}\n")
    with pytest.raises(ConfigError, match="--serve: the env clients bring their own envs"):
        load_train_config(TrainOptions(config, serve=("127.0.0.1", 0), env_flags=EnvFlags(num_envs=2)))
