"""``docker-compose.yml`` and the ``Dockerfile`` against the CLI and the configs (no Docker engine needed).

Every ``stepstream`` command of the stack must be a real invocation: it is run through the CLI's own
argparse parser, with the container's config path replaced by the host file mounted there. The
checks also cover what makes the stack come up and stay up: the config mounted read-only into every
service, a ``stepstream health`` healthcheck on the processor, restart policies, ``depends_on`` with
``condition: service_healthy``, one trainer per behavior of the mounted config, and an env service
that ``--scale`` can replicate. ``stepstream trainer --help`` / ``env --help`` must describe each flag.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import _build_parser
from common.config import TrainerType, load_config

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
CONTAINER_CONFIG = "/config/config.yaml"
RESTART_POLICIES = {"on-failure", "unless-stopped", "always"}


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


SERVICES: dict[str, dict[str, Any]] = _compose()["services"]
STEPSTREAM_SERVICES = sorted(name for name, service in SERVICES.items() if "entrypoint" not in service)
"""Services that run the image's ENTRYPOINT, ``stepstream``."""
BROKER = "nats"
"""The NATS JetStream broker (docker/nats_broker.py): the one service that reads no stepstream config."""


def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Container path -> (source, mode) of each short-syntax volume (``source:target[:mode]``)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *mode = volume.split(":")
        out[target] = (source, mode[0] if mode else "rw")
    return out


def _argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(arg) for arg in command]


def _host_argv(service: dict[str, Any]) -> list[str]:
    """The service's stepstream argv with the mounted config's container path replaced by the host file."""
    config_source = REPO / _mounts(service)[CONTAINER_CONFIG][0]
    return [str(config_source) if arg == CONTAINER_CONFIG else arg for arg in _argv(service["command"])]


def _parse(argv: list[str]) -> argparse.Namespace:
    try:
        return _build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse reports the error on stderr and exits 2
        pytest.fail(f"`stepstream {shlex.join(argv)}` does not parse (exit {exc.code})")


def _subparser(name: str) -> argparse.ArgumentParser:
    subparsers = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = subparsers.choices[name]
    return parser


@pytest.mark.parametrize("name", sorted(set(SERVICES) - {BROKER}))
def test_every_service_mounts_the_config_read_only(name: str) -> None:
    source, mode = _mounts(SERVICES[name]).get(CONTAINER_CONFIG, ("", ""))
    assert source, f"{name}: no volume mounted at {CONTAINER_CONFIG}"
    assert mode == "ro", f"{name}: the config is mounted {mode!r}, not read-only"
    assert (REPO / source).is_file(), f"{name}: {source} does not exist"


@pytest.mark.parametrize("name", STEPSTREAM_SERVICES)
def test_every_stepstream_command_parses(name: str) -> None:
    argv = _host_argv(SERVICES[name])
    args = _parse(argv)
    known = {option for action in _subparser(args.command)._actions for option in action.option_strings}
    abbreviated = [arg.split("=")[0] for arg in argv if arg.startswith("--") and arg.split("=")[0] not in known]
    assert not abbreviated, f"{name}: not full flag names (argparse accepts prefixes): {abbreviated}"
    assert callable(args.func)
    config = getattr(args, "config", None)
    assert config is not None and Path(config).is_file(), f"{name}: the command does not read the mounted config"
    load_config(config)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_restart_policy(name: str) -> None:
    assert SERVICES[name].get("restart") in RESTART_POLICIES, f"{name}: restart is {SERVICES[name].get('restart')!r}"


def test_the_processor_is_healthchecked_with_stepstream_health() -> None:
    processor = SERVICES["processor"]
    args = _parse(_host_argv(processor))
    assert args.command == "processor" and args.host == "0.0.0.0", "other containers must reach the processor"
    test = processor["healthcheck"]["test"]
    assert test[:3] == ["CMD", "stepstream", "health"], test
    health = _parse(test[2:])
    assert health.command == "health" and health.address.endswith(f":{args.port}"), health.address
    for key in ("interval", "timeout", "retries"):
        assert key in processor["healthcheck"], f"healthcheck.{key} missing"


@pytest.mark.parametrize("name", [n for n in STEPSTREAM_SERVICES if n != "processor"])
def test_clients_wait_for_a_healthy_processor_and_reach_it_by_service_name(name: str) -> None:
    service = SERVICES[name]
    assert service["depends_on"]["processor"]["condition"] == "service_healthy"
    args = _parse(_host_argv(service))
    port = _parse(_host_argv(SERVICES["processor"])).port
    assert args.processor == f"processor:{port}", args.processor


def test_one_trainer_per_behavior_of_the_mounted_config() -> None:
    processor_config = _host_argv(SERVICES["processor"])[1]
    run_options = load_config(processor_config)
    behaviors = set(run_options.env_settings.behavior_names) or set(run_options.behaviors)
    trainers = [_parse(_host_argv(SERVICES[n])) for n in STEPSTREAM_SERVICES if _argv(SERVICES[n]["command"])[0] == "trainer"]
    assert sorted(t.behavior for t in trainers) == sorted(behaviors)
    for trainer_args in trainers:
        assert trainer_args.config == processor_config, "every service must read the same config"
        run_options.settings_for(trainer_args.behavior)


def test_trainers_write_to_the_results_volume_that_tensorboard_reads() -> None:
    volumes = _compose().get("volumes") or {}
    tensorboard = SERVICES["tensorboard"]
    assert tensorboard["entrypoint"] == ["tensorboard"]
    logdir = _argv(tensorboard["command"])[_argv(tensorboard["command"]).index("--logdir") + 1]
    assert _mounts(tensorboard)[logdir][0] in volumes
    for name in STEPSTREAM_SERVICES:
        args = _parse(_host_argv(SERVICES[name]))
        if args.command == "trainer":
            assert args.results_dir == logdir and _mounts(SERVICES[name])[logdir] == (_mounts(tensorboard)[logdir][0], "rw")


def test_the_env_service_can_be_scaled() -> None:
    env = SERVICES["env"]
    assert _parse(_host_argv(env)).command == "env"
    assert "container_name" not in env and "ports" not in env, "`--scale env=N` needs no fixed name and no host port"


def test_the_dockerfile_runs_stepstream() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.MULTILINE)
    assert re.search(r"^RUN pip install \.", dockerfile, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["stepstream"\]$', dockerfile, re.MULTILINE)
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".venv" in ignored and "results" in ignored


@pytest.mark.parametrize("command", ["trainer", "env"])
def test_service_help_describes_every_flag(command: str) -> None:
    parser = _subparser(command)
    for action in parser._actions:
        assert action.help and action.help.strip(), f"stepstream {command}: {action.option_strings or action.dest} has no help"
    assert parser.description


@pytest.mark.parametrize("path", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_every_example_config_parses(path: str) -> None:
    run_options = load_config(REPO / "configs" / path)
    # An offline bc config (every behavior cloned from its demo_path, no env) is the one kind without envs.
    offline = all(s.trainer_type is TrainerType.BC and s.demo_path for s in run_options.behaviors.values())
    assert run_options.env_settings.env_paths or offline, "an example config runs its own envs or trains offline"


# -- Compose v1 (docker-compose 1.29, Debian 12's package) and v2 ----------------------------------------------

COMPOSE_FILES = ("docker-compose.yml", "docker-compose.secure.yml", "docker-compose.grpc-topics.yml")
V1_TOP_LEVEL_KEYS = {"version", "services", "networks", "volumes", "secrets", "configs"}
"""The top-level properties of docker-compose 1.29's ``compose/config/compose_spec.json`` (besides ``^x-``
extensions; ``additionalProperties: false``): no ``name``, which Compose v2 added later."""
V1_SERVICE_KEYS = set(
    "blkio_config build cap_add cap_drop cgroup_parent command configs container_name cpu_count cpu_percent cpu_period"
    " cpu_quota cpu_rt_period cpu_rt_runtime cpu_shares cpus cpuset credential_spec depends_on deploy device_cgroup_rules"
    " devices dns dns_opt dns_search domainname entrypoint env_file environment expose extends external_links extra_hosts"
    " group_add healthcheck hostname image init ipc isolation labels links logging mac_address mem_limit mem_reservation"
    " mem_swappiness memswap_limit network_mode networks oom_kill_disable oom_score_adj pid pids_limit platform ports"
    " privileged profiles pull_policy read_only restart runtime scale secrets security_opt shm_size stdin_open"
    " stop_grace_period stop_signal storage_opt sysctls tmpfs tty ulimits user userns_mode volumes volumes_from"
    " working_dir".split()
)
"""The service properties of that schema (``definitions.service``, also ``additionalProperties: false``)."""
V1_HEALTHCHECK_KEYS = {"disable", "interval", "retries", "start_period", "test", "timeout"}
V1_DEPENDS_ON_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / name).read_text(encoding="utf-8"))  # resolves the `<<` merge keys, as Compose does
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_fits_docker_compose_1_29s_schema(name: str) -> None:
    data = _load(name)
    unknown = {key for key in data if not key.startswith("x-")} - V1_TOP_LEVEL_KEYS
    assert not unknown, f"{name}: top-level {sorted(unknown)} refused by docker-compose 1.29"
    # Without `version` 1.29 reads a file that has `services` as the Compose Specification (as v2 does); with
    # one, every file of a `-f a -f b` stack must carry the same. Compose v2 calls `version` obsolete: none at all.
    assert "version" not in data and isinstance(data.get("services"), dict), f"{name}: no `version`, and a `services` map"
    for service_name, service in data["services"].items():
        unknown = {key for key in service if not key.startswith("x-")} - V1_SERVICE_KEYS
        assert not unknown, f"{name}: services.{service_name}: {sorted(unknown)} unknown to docker-compose 1.29"
        assert set(service.get("healthcheck", {})) <= V1_HEALTHCHECK_KEYS, f"{name}: services.{service_name}.healthcheck"
        for dependency in (service.get("depends_on") or {}).values() if isinstance(service.get("depends_on"), dict) else ():
            assert dependency.get("condition") in V1_DEPENDS_ON_CONDITIONS, f"{name}: services.{service_name}.depends_on"


def _compose_commands() -> list[list[str]]:
    """The Compose binaries on this machine: ``docker-compose`` (v1) and ``docker compose`` (v2), where present."""
    commands = []
    if shutil.which("docker-compose"):
        commands.append(["docker-compose"])
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        commands.append(["docker", "compose"])
    return commands


@pytest.mark.parametrize(
    "files",
    [COMPOSE_FILES[:1], COMPOSE_FILES[:2], (COMPOSE_FILES[0], COMPOSE_FILES[2])],
    ids=["stack", "stack+secure", "stack+grpc-topics"],
)
def test_compose_binaries_accept_the_files(files: tuple[str, ...]) -> None:
    commands = _compose_commands()
    if not commands:
        pytest.skip(
            "neither docker-compose (v1) nor the docker compose plugin (v2) is installed; the schema test above covers v1"
        )
    for command in commands:
        argv = [*command, *(arg for f in files for arg in ("-f", f)), "config", "-q"]
        result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"`{shlex.join(argv)}` refused the files:\n{result.stderr}"


def test_a_finished_run_ends_the_stack() -> None:
    """`up` returns when training is done: the processor exits 0 once every behavior finished, and nothing
    without an end (TensorBoard) runs by default."""
    processor = SERVICES["processor"]
    assert _parse(_host_argv(processor)).exit_when_finished
    for name in STEPSTREAM_SERVICES:  # exit 0 at the end of the run must stay down
        assert SERVICES[name]["restart"] == "on-failure", f"{name}: restart {SERVICES[name]['restart']!r} restarts an exit 0"
    broker = SERVICES[BROKER]
    idle_exit_s = float(_argv(broker["command"])[_argv(broker["command"]).index("--idle-exit-s") + 1])
    assert idle_exit_s > 0 and broker["restart"] == "on-failure", "the broker must stop once the run's clients are gone"
    endless = [n for n in SERVICES if n not in {*STEPSTREAM_SERVICES, BROKER} and not SERVICES[n].get("profiles")]
    assert not endless, f"{endless} would keep `docker compose up` running after training: put them in a profile"
