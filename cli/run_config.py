"""The run's settings from the YAML plus flags, once for every command (``train``, ``trainer``, ``env``, ``record``).

* :class:`EnvFlags` and :func:`load_run_options`: ``--env``, ``--num-envs`` and ``--seed`` over ``env_settings``;
* :func:`select_behaviors`: which ``env_path`` entries a command hosts (all, one by ``--behavior``, or the only one);
* :func:`resolve_seed` and :func:`env_seed`: the seed rule. A negative seed means "pick one": the
  run's seed is drawn once (``resolve_seed``), and an env with a negative seed draws fresh entropy;
* :func:`vector_env_settings`: the typed settings ``envclient`` takes (it reads no YAML);
* :func:`offline_behaviors`: the ``bc`` behaviors that no env hosts, which train from their demos alone;
* :func:`check_inputs`: every env id and demonstration path, checked before anything slow (TensorFlow) starts.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.config import ConfigKeyError, RunOptions, TrainerType, load_config
from common.demo import demo_files
from common.demo_images import DemoError
from common.env_paths import GYM_PREFIX, PYTHON_PREFIX, SIMPLE_PREFIX
from common.errors import ConfigError
from common.specs import BrainParameters
from envclient.envs import VectorEnvSettings

EMBEDDED_SEED_STRIDE = 1000
"""``stepstream train`` seeds env_path entry ``i`` with ``seed + i * this`` (its copies take ``+ 0 .. N-1``)."""


@dataclass(frozen=True)
class EnvFlags:
    """The flags over ``env_settings``; None keeps the config's value."""

    env: str | None = None
    """``--env``: replaces ``env_settings.env_path`` (``gym:<id>``)."""
    num_envs: int | None = None
    """``--num-envs``: copies per env_path entry."""
    seed: int | None = None
    """``--seed``: the run's seed (negative: random)."""

    def overrides(self) -> dict[str, Any] | None:
        """The ``overrides`` mapping of ``load_config``; None when no flag is set."""
        env: dict[str, Any] = {}
        if self.env is not None:
            env["env_path"] = self.env
        if self.num_envs is not None:
            env["num_envs"] = self.num_envs
        if self.seed is not None:
            env["seed"] = self.seed
        return {"env_settings": env} if env else None


def load_run_options(config: Path, flags: EnvFlags | None = None) -> RunOptions:
    """The config at ``config`` with ``flags`` applied over its ``env_settings``.

    Raises:
        ConfigError: as ``common.config.load_config`` (a flag's bad value names its ``env_settings`` key).
    """
    return load_config(config, overrides=None if flags is None else flags.overrides())


def with_max_steps(run_options: RunOptions, max_steps: int | None) -> RunOptions:
    """``run_options`` with every behavior's (and ``default_settings``') ``max_steps`` replaced; None keeps them.

    ``train --max-steps``: a short run of any config (a smoke test) without editing the file.
    """
    if max_steps is None:
        return run_options
    behaviors = {name: dataclasses.replace(s, max_steps=max_steps) for name, s in run_options.behaviors.items()}
    default = run_options.default_settings
    return dataclasses.replace(
        run_options,
        behaviors=behaviors,
        default_settings=None if default is None else dataclasses.replace(default, max_steps=max_steps),
    )


def select_behaviors(
    config: Path, run_options: RunOptions, command: str, behavior: str | None = None, *, single: bool = False
) -> list[str]:
    """The behaviors whose ``env_path`` entries ``stepstream COMMAND`` hosts, in ``env_path`` order.

    Args:
        config: the config file, for messages.
        run_options: its options.
        command: the subcommand, for messages.
        behavior: ``--behavior``: only this one; None: every entry (or, with ``single``, the only one).
        single: the command hosts exactly one behavior.

    Raises:
        ConfigError: no ``env_path``, ``behavior`` names none of its behaviors, or ``single`` with
            several entries and no ``behavior``.
    """
    hosted = list(run_options.env_settings.behavior_names)
    if not hosted:
        raise ConfigError(f"{config}: env_settings.env_path is required for `stepstream {command}`")
    if behavior is not None:
        if behavior not in hosted:
            raise ConfigError(f"--behavior {behavior}: not in env_settings.env_path (behaviors: {', '.join(hosted)})")
        return [behavior]
    if single and len(hosted) > 1:
        raise ConfigError(f"{config}: several behaviors ({', '.join(hosted)}); choose one with --behavior")
    return hosted


def resolve_seed(seed: int) -> int:
    """``seed`` itself, or a random one when it is negative (the config's ``seed: -1``)."""
    return seed if seed >= 0 else int.from_bytes(os.urandom(2), "little")


def env_seed(seed: int, index: int, client_id: str | None = None) -> int | None:
    """The seed of env_path entry ``index``; None (fresh entropy) when ``seed`` < 0.

    Args:
        seed: the run's seed.
        index: the entry's position in ``env_path``.
        client_id: a stack env client's id, mixed in so that scaled replicas get different episodes
            (an explicit ``--client-id`` keeps a run reproducible); None in ``train`` and ``record``:
            ``seed + index * EMBEDDED_SEED_STRIDE``.
    """
    if seed < 0:
        return None
    if client_id is None:
        return seed + EMBEDDED_SEED_STRIDE * index
    state = np.random.SeedSequence([seed, zlib.crc32(client_id.encode()), index]).generate_state(1)[0]
    return int(state) >> 1  # < 2**31, so gym's seed + copy index stays in range


def vector_env_settings(
    run_options: RunOptions, behaviors: Sequence[str], seed: int, client_id: str | None = None
) -> list[VectorEnvSettings]:
    """What ``envclient.envs.open_vector_envs`` builds for ``behaviors`` (see ``env_seed`` for ``seed`` and ``client_id``)."""
    settings = run_options.env_settings
    hosted = settings.behavior_names
    order = list(hosted)
    return [
        VectorEnvSettings(hosted[name], name, settings.num_envs, env_seed(seed, order.index(name), client_id))
        for name in behaviors
    ]


def offline_behaviors(run_options: RunOptions) -> list[str]:
    """The ``bc`` behaviors under ``behaviors`` that no ``env_path`` entry hosts: they train from their demos alone."""
    hosted = run_options.env_settings.behavior_names
    return [n for n, s in run_options.behaviors.items() if s.trainer_type is TrainerType.BC and n not in hosted]


def check_inputs(config: Path, run_options: RunOptions, behaviors: Iterable[str], *, env_ids: bool = True) -> None:
    """Check every Gymnasium id and ``python:`` factory (its module imported, its function found) of ``env_path``
    (unless not ``env_ids``) and every demonstration path of
    ``behaviors``, in seconds, before anything slow (TensorFlow's import, a results folder) starts.

    A stack trainer passes ``env_ids=False``: its envs run elsewhere, where their ids may be registered
    by packages its own image lacks.

    Raises:
        ConfigError: an unknown Gymnasium id (with the closest registered one), or a ``demo_path`` that
            is missing or holds no ``.demo`` file (the message names its dotted key).
    """
    from envclient.gym_adapter import check_registered, load_env_factory

    for env_path in run_options.env_settings.env_paths if env_ids else ():
        if env_path.startswith(GYM_PREFIX):
            check_registered(env_path[len(GYM_PREFIX) :])
        elif env_path.startswith(PYTHON_PREFIX):
            load_env_factory(env_path)  # imports the module: a missing module or function is named now
    for name in behaviors:
        for key, path in run_options.settings_for(name).demo_paths().items():
            try:
                demo_files(path)
            except DemoError as err:
                raise ConfigKeyError(f"behaviors.{name}.{key}", str(err), str(config)) from None


def describe_spec(params: BrainParameters) -> str:
    """A behavior's spec in words: ``observations float32[4], actions discrete [2]``."""
    observations = ", ".join(f"{np.dtype(o.dtype).name}{list(o.shape)}" for o in params.observation_specs)
    action = params.action_spec
    kinds = [f"continuous {action.continuous_size}"] if action.continuous_size else []
    kinds += [f"discrete {list(action.discrete_branches)}"] if action.discrete_branches else []
    return f"observations {observations}, actions {' + '.join(kinds)}"


def same_spec(a: BrainParameters, b: BrainParameters) -> bool:
    """Whether two behaviors take the same observations (shapes and dtypes) and act alike; names aside."""
    shapes = [(tuple(o.shape), np.dtype(o.dtype)) for o in a.observation_specs]
    return shapes == [(tuple(o.shape), np.dtype(o.dtype)) for o in b.observation_specs] and a.action_spec == b.action_spec


def env_specs(run_options: RunOptions, behaviors: Sequence[str]) -> dict[str, BrainParameters]:
    """The ``BrainParameters`` each of ``behaviors``' ``env_path`` entries declares, from one copy made and closed.

    No TensorFlow: a spec mistake is refused in the seconds before it loads.
    """
    from envclient.envs import close_vector_env, make_vector_env

    specs = {}
    for settings in vector_env_settings(run_options, behaviors, 0):
        env = make_vector_env(dataclasses.replace(settings, num_envs=1))
        try:
            specs[settings.behavior_name] = env.brain_parameters
        finally:
            close_vector_env(env)
    return specs


def check_env_override(config: Path, flags: EnvFlags, run_options: RunOptions) -> None:
    """Refuse ``--env`` that replaces the config's one ``env_path`` with an env of another spec.

    The config's behavior (named for, and tuned on, its own env) would otherwise train on the other env under its
    name: the CartPole config with ``--env gym:Pendulum-v1`` trains "CartPole" on Pendulum.

    Raises:
        ConfigError: both envs build and their observations or actions differ; the message names both specs.
    """
    if flags.env is None:
        return
    written = load_config(config)
    paths = written.env_settings.env_paths
    if len(paths) != 1 or paths == run_options.env_settings.env_paths:
        return
    (name,) = run_options.env_settings.behavior_names
    (old_name,) = written.env_settings.behavior_names
    old = env_specs(written, [old_name])[old_name]
    new = env_specs(run_options, [name])[name]
    if not same_spec(old, new):
        raise ConfigError(
            f"--env {flags.env}: {describe_spec(new)}; {config} was written for {paths[0]} ({describe_spec(old)}), "
            f"behavior {old_name!r}: train it with a config for this env (or one naming it under env_path)"
        )


def check_bare_gym_id(env: str | None) -> None:
    """Refuse ``--env ID`` where ID is a registered Gymnasium id, not a file: the ``gym:`` prefix was left out.

    Otherwise the value is taken for a Unity build, which is looked for only after TensorFlow loads.

    Raises:
        ConfigError: naming ``gym:ID``.
    """
    if env is None or env.startswith((GYM_PREFIX, PYTHON_PREFIX, SIMPLE_PREFIX)) or Path(env).exists():
        return
    from envclient.gym_adapter import is_registered

    if is_registered(env):
        raise ConfigError(f"--env {env}: no such Unity build; it is a Gymnasium id: did you mean --env {GYM_PREFIX}{env}?")
