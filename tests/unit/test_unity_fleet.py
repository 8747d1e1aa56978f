"""ML-Agents' restart quota of a Unity build copy (``envclient.unity.fleet.RestartQuota``), on a fake clock."""

from __future__ import annotations

from pathlib import Path

from envclient.unity.fleet import BuildFleet, RestartPolicy, RestartQuota
from envclient.unity.gateway import GatewaySettings
from envclient.unity.launcher import LaunchSettings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _restart_while_allowed(quota: RestartQuota, clock: Clock, step_s: float, attempts: int) -> int:
    for _ in range(attempts):
        if not quota.allows():
            break
        quota.record()
        clock.now += step_s
    return quota.restarts


def test_lifetime_limit_counts_every_restart_of_the_run() -> None:
    clock = Clock()
    quota = RestartQuota(RestartPolicy(max_lifetime_restarts=3, restarts_rate_limit_n=-1), clock)
    assert _restart_while_allowed(quota, clock, 0.0, 10) == 3


def test_rate_limit_allows_n_restarts_per_period_and_frees_them_as_the_window_moves() -> None:
    clock = Clock()
    quota = RestartQuota(
        RestartPolicy(max_lifetime_restarts=-1, restarts_rate_limit_n=2, restarts_rate_limit_period_s=60), clock
    )
    assert _restart_while_allowed(quota, clock, 1.0, 10) == 2  # two crashes a second apart: the third is refused
    clock.now += 57.0  # 1059: the first restart (at 1000) is still within the last 60 s
    assert not quota.allows()
    clock.now += 2.0  # 1061: it has left the window, the second (1001) has not
    assert quota.allows()


def test_mlagents_defaults_one_restart_a_minute_ten_in_all() -> None:
    clock = Clock()
    quota = RestartQuota(RestartPolicy(), clock)
    assert _restart_while_allowed(quota, clock, 61.0, 100) == 10
    assert quota.restarts == 10 and not quota.allows()


def test_copies_listen_on_consecutive_ports_from_the_base_port(tmp_path: Path) -> None:
    exe = tmp_path / "Ball.x86_64"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    fleet = BuildFleet(
        GatewaySettings(processor="127.0.0.1:1"), LaunchSettings(str(tmp_path / "Ball")), num_envs=3, base_port=6005
    )
    assert [g.port for g in fleet.gateways] == [6005, 6006, 6007]
    assert [b.settings.worker_id for b in fleet.builds] == [0, 1, 2]  # Player-<worker>.log each
    assert [g.gateway.settings.client_id for g in fleet.gateways] == ["unity-0", "unity-1", "unity-2"]


def _config(tmp_path: Path, env_settings: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(f"behaviors:\n  Walker: {{trainer_type: ppo}}\nenv_settings:\n{env_settings}")
    return path


def test_the_yaml_env_path_names_the_build_with_its_num_envs_and_flags_come_first(tmp_path: Path) -> None:
    from cli.unity_train import UnityLaunch, unity_launch

    config = _config(tmp_path, "  env_path: builds/Game\n  num_envs: 3\n")
    assert unity_launch(config, None, None) == UnityLaunch(config, "builds/Game", 3)
    assert unity_launch(config, None, 2) == UnityLaunch(config, "builds/Game", 2)  # --num-envs over the YAML's
    assert unity_launch(config, "Other.x86_64", None) == UnityLaunch(config, "Other.x86_64", 3)  # --env over env_path
    for not_a_build in ("gym:CartPole-v1", "python:my.envs:make", "simple:discrete"):
        assert unity_launch(config, not_a_build, None) is None
    assert unity_launch(_config(tmp_path, "  env_path: gym:CartPole-v1\n"), None, None) is None
    assert unity_launch(_config(tmp_path, "  seed: 1\n"), None, None) is None


def test_a_build_in_an_env_path_list_or_a_bad_num_envs_is_refused_naming_the_key(tmp_path: Path) -> None:
    import pytest

    from cli.unity_train import unity_launch
    from common.errors import ConfigError, NotSupportedYetError

    with pytest.raises(NotSupportedYetError, match=r"env_settings.env_path: the Unity build 'Game' in a list"):
        unity_launch(_config(tmp_path, "  env_path: [gym:CartPole-v1, Game]\n"), None, None)
    with pytest.raises(ConfigError, match=r"env_settings.num_envs: expected an integer >= 1, got 0"):
        unity_launch(_config(tmp_path, "  env_path: Game\n  num_envs: 0\n"), None, None)
