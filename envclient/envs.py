"""Environments by env path: ``gym:<id>`` (Gymnasium), ``python:MODULE:FUNCTION`` (a Gymnasium env factory)
or ``simple:discrete|continuous`` (the 1-D task).

The env clients read no YAML: the CLI turns ``env_settings`` and its flags into one
:class:`VectorEnvSettings` per env, and :func:`open_vector_envs` builds them and closes them again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from common.env_paths import PYTHON_PREFIX, SIMPLE_KINDS, SIMPLE_PREFIX, behavior_name_for_env
from envclient.runner import VectorEnv


@dataclass(frozen=True)
class VectorEnvSettings:
    """One environment to build: ``num_envs`` copies of ``env_path``, declared as ``behavior_name``."""

    env_path: str
    """``gym:<id>``, ``python:MODULE:FUNCTION`` or ``simple:<discrete|continuous>``."""
    behavior_name: str
    """The name its BrainParameters declare."""
    num_envs: int = 1
    """Copies (agents) stepped together; >= 1."""
    seed: int | None = None
    """Seed of copy 0 (copy ``i`` gets ``seed + i``); None draws fresh entropy."""


def make_vector_env(settings: VectorEnvSettings) -> VectorEnv:
    """The ``VectorEnv`` of ``settings``: ``simple:<kind>`` (``envclient.simple_env``), ``python:MODULE:FUNCTION``
    or ``gym:<id>`` (``envclient.gym_adapter``).

    Raises:
        ConfigError: a malformed path, an unknown Gymnasium id, a ``python:`` factory that does not
            load or make an env (naming its module and function), or ``num_envs`` < 1.
        NotSupportedYetError: another scheme.
    """
    env_path = settings.env_path
    behavior_name_for_env(env_path)  # validates the path
    if env_path.startswith(SIMPLE_PREFIX):
        from envclient.simple_env import SimpleEnv

        continuous = env_path == SIMPLE_PREFIX + SIMPLE_KINDS[1]
        return SimpleEnv(settings.num_envs, continuous=continuous, behavior_name=settings.behavior_name, seed=settings.seed)
    if env_path.startswith(PYTHON_PREFIX):
        from envclient.gym_adapter import from_python_path

        return from_python_path(env_path, settings.num_envs, settings.seed, settings.behavior_name)
    from envclient.gym_adapter import from_env_path

    return from_env_path(env_path, settings.num_envs, settings.seed, settings.behavior_name)


def close_vector_env(env: VectorEnv) -> None:
    """Close ``env`` if it holds resources (Gymnasium envs do; the 1-D task holds none)."""
    close = getattr(env, "close", None)
    if close is not None:
        close()


@contextlib.contextmanager
def open_vector_envs(settings: Sequence[VectorEnvSettings]) -> Iterator[dict[str, VectorEnv]]:
    """Build every env of ``settings`` (by behavior name), and close each on the way out, even when one fails.

    Raises:
        ConfigError, NotSupportedYetError: as ``make_vector_env``; the envs built before it are closed.
    """
    envs: dict[str, VectorEnv] = {}
    try:
        for entry in settings:
            envs[entry.behavior_name] = make_vector_env(entry)
        yield envs
    finally:
        for env in envs.values():
            close_vector_env(env)
