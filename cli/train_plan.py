"""What one ``stepstream train`` run does, decided before anything starts: its options, its mode and its plan.

``load_train_config`` reads the config (with ``--env``, ``--num-envs``, ``--seed`` and ``--max-steps`` over it) and
the Unity build it names, if any; ``plan_train``, a pure function, turns the options and that config into a frozen
``TrainPlan``: the mode, the services, the envs stepped in this process and the trainers. ``cli.train`` runs it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from cli.flags import MetricsEndpoint
from cli.run_config import EnvFlags, check_bare_gym_id, load_run_options, offline_behaviors, with_max_steps
from cli.run_overrides import with_deterministic, with_initialize_from
from cli.unity_train import UnityLaunch, unity_launch, without_env_path
from common.config import RunOptions, load_config
from common.errors import ConfigError

LOOPBACK = ("127.0.0.1", 0)
"""The embedded processor's address: loopback, on a free port, so the env clients take the very path remote ones do."""


@dataclass(frozen=True)
class TrainOptions:
    """The ``train`` subcommand's flags (``mlagents-learn``'s names)."""

    config: Path
    run_id: str = "ppo"
    results_dir: Path = Path("results")
    resume: bool = False
    force: bool = False
    inference: bool = False
    env_flags: EnvFlags = field(default_factory=EnvFlags)
    """``--env``, ``--num-envs`` and ``--seed`` over the config's ``env_settings``."""
    max_steps: int | None = None
    """``--max-steps``: every behavior's max_steps (agent steps); None keeps the config's."""
    deterministic: bool = False
    """``--deterministic``: every behavior acts with its distribution's mode (``cli.run_overrides``)."""
    initialize_from: str | None = None
    """``--initialize-from RUN_ID``: every behavior without an ``init_path`` starts from that run (``cli.run_overrides``)."""
    progress: bool = True
    metrics: MetricsEndpoint = field(default_factory=MetricsEndpoint)
    """The run's one Prometheus endpoint (processor and trainers); no port serves none, 0 picks one."""
    serve: tuple[str, int] | None = None
    """``--serve HOST:PORT``: serve SDK env clients there instead of stepping ``env_settings.env_path``."""


class Mode(enum.Enum):
    """Where a run's experience comes from."""

    ONLINE = "online"
    """The ``env_path`` entries' envs, stepped in this process; a trainer per behavior learns from them."""
    INFERENCE = "inference"
    """The same envs, each behavior acting with its newest checkpoint's policy (``--inference``); nothing trains."""
    OFFLINE = "offline"
    """No env: only ``bc`` behaviors, each training from its ``demo_path``; no processor starts."""
    UNITY = "unity"
    """Unity builds (``--env`` or ``env_path`` naming one) or the Editor declare the behaviors (``--inference`` too)."""
    SERVE = "serve"
    """SDK env clients connecting to ``--serve HOST:PORT`` declare the behaviors (``--inference`` too)."""


@dataclass(frozen=True)
class TrainPlan:
    """One ``stepstream train`` run, decided from its options and config alone (``plan_train``)."""

    options: TrainOptions
    run_options: RunOptions
    """The config with the flags over it."""
    mode: Mode
    unity: UnityLaunch | None
    """``Mode.UNITY``: the build launched, or the Editor waited for (``env_path`` None)."""
    processor: tuple[str, int] | None
    """The processor's ``(host, port)`` (port 0: a free one); None when none starts (``Mode.OFFLINE``)."""
    envs: tuple[str, ...]
    """The behaviors whose ``env_path`` entries this process steps, in ``env_path`` order."""
    online: tuple[str, ...]
    """The configured behaviors that learn from envs (every one but ``offline_behaviors``)."""
    offline: tuple[str, ...]
    """The ``bc`` behaviors no env hosts, each trained from its demos in a thread (none with ``--inference``)."""
    checked: tuple[str, ...]
    """The behaviors whose inputs (demos, checkpoints to resume or act with) are checked before the run starts."""

    @property
    def inference(self) -> bool:
        """Whether the behaviors act with their saved policies instead of training."""
        return self.options.inference

    @property
    def trainers(self) -> tuple[str, ...]:
        """The behaviors whose trainers are known before Unity or an SDK client declares any: the envs' (unless
        ``--inference``), then the offline ones."""
        return (*(() if self.inference else self.envs), *self.offline)

    @property
    def probe_envs(self) -> bool:
        """Whether ``--resume`` checks the envs' specs against the run's (one copy of each made): only where this
        process steps them."""
        return self.mode in (Mode.ONLINE, Mode.INFERENCE)

    @property
    def checks_env_override(self) -> bool:
        """Whether ``--env`` / ``--num-envs`` are checked against the config's envs: not for Unity, nor with
        ``--inference``, where the saved policy is checked against the env instead."""
        return self.mode is not Mode.UNITY and not self.inference


def load_train_config(options: TrainOptions) -> tuple[RunOptions, UnityLaunch | None]:
    """The run's settings (the config and its flags) and the Unity build ``--env`` or ``env_path`` names, if any.

    Raises:
        ConfigError: a bare Gymnasium id for ``--env``, ``--env`` / ``--num-envs`` with ``--serve``, or a config error.
    """
    flags = options.env_flags
    check_bare_gym_id(flags.env)
    if options.serve is not None:  # SDK clients declare the behaviors: no env_path is stepped
        if flags.env is not None or flags.num_envs is not None:
            raise ConfigError("--serve: the env clients bring their own envs; --env and --num-envs do not apply")
        build = None
    else:  # a build is launched with the gateway (cli.unity_train), not stepped as an env_path
        build = unity_launch(options.config, flags.env, flags.num_envs)
    if options.serve is not None or build is not None:
        run_options = load_config(options.config, overrides=without_env_path(flags.seed))
    else:
        run_options = load_run_options(options.config, flags)
    run_options = with_max_steps(run_options, options.max_steps)
    run_options = with_deterministic(run_options, options.deterministic)
    return with_initialize_from(run_options, options.results_dir, options.initialize_from), build


def plan_train(options: TrainOptions, run_options: RunOptions, build: UnityLaunch | None = None) -> TrainPlan:
    """The plan of a run: which mode, which services, which envs and which trainers. Starts and reads nothing.

    Args:
        options: the ``train`` flags.
        run_options: the config with the flags over it (``load_train_config``).
        build: the Unity build ``--env`` or ``env_path`` names (``load_train_config``), if any.

    Raises:
        ConfigError: no env, no Unity and no ``--serve``, and no ``bc`` behavior with demos to train from alone.
    """
    offline = offline_behaviors(run_options)
    online = tuple(n for n in run_options.behaviors if n not in offline)
    envs = tuple(run_options.env_settings.behavior_names) if run_options.env_settings.env_paths else ()
    unity = _unity(options, build, envs, online, offline)
    mode = _mode(options, unity, envs)
    return TrainPlan(
        options=options,
        run_options=run_options,
        mode=mode,
        unity=unity,
        processor=None if mode is Mode.OFFLINE else (options.serve or LOOPBACK),
        envs=envs,
        online=online,
        offline=() if options.inference else tuple(offline),
        checked=_checked(options, mode, envs, online, offline),
    )


def _unity(
    options: TrainOptions, build: UnityLaunch | None, envs: tuple[str, ...], online: tuple[str, ...], offline: list[str]
) -> UnityLaunch | None:
    """The build, else the Editor when something must act and nothing else provides envs, as mlagents-learn waits
    for it: an online behavior, or ``--inference`` (where a ``bc`` behavior acts too).

    Raises:
        ConfigError: nothing provides envs and no ``bc`` behavior trains from its demos alone.
    """
    if build is not None or options.serve is not None or envs:
        return build
    if online or options.inference:
        return UnityLaunch(options.config)
    if not offline:
        raise ConfigError(
            f"{options.config}: env_settings.env_path is required for `stepstream train` (or pass --env); "
            "only a bc behavior with a demo_path trains without one"
        )
    return None


def _mode(options: TrainOptions, unity: UnityLaunch | None, envs: tuple[str, ...]) -> Mode:
    if options.serve is not None:
        return Mode.SERVE
    if unity is not None:
        return Mode.UNITY
    if not envs:
        return Mode.OFFLINE
    return Mode.INFERENCE if options.inference else Mode.ONLINE


def _checked(
    options: TrainOptions, mode: Mode, envs: tuple[str, ...], online: tuple[str, ...], offline: list[str]
) -> tuple[str, ...]:
    """The behaviors checked before the start: the envs' and the offline ones (not with ``--inference``, where they
    do not train); where Unity or SDK clients declare them, every configured one, but none with ``--inference``
    (one declared without a checkpoint is refused then, by name)."""
    if mode in (Mode.UNITY, Mode.SERVE):
        return () if options.inference else (*online, *offline)
    return (*envs, *(() if options.inference else offline))
