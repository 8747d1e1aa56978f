"""Environments by ``env_path``: ``gym:<id>`` (Gymnasium) or ``simple:discrete|continuous`` (the 1-D task)."""

from __future__ import annotations

from common.config import SIMPLE_KINDS, SIMPLE_PREFIX, behavior_name_for_env
from envclient.runner import VectorEnv


def make_vector_env(env_path: str, num_envs: int, seed: int | None) -> VectorEnv:
    """The ``VectorEnv`` of an env path: ``simple:<kind>`` (``envclient.simple_env``) or ``gym:<id>``.

    Raises:
        ConfigError: a malformed path, an unknown Gymnasium id, or ``num_envs`` < 1.
        NotSupportedKeyError: another scheme.
    """
    name = behavior_name_for_env(env_path)  # validates the path
    if env_path.startswith(SIMPLE_PREFIX):
        from envclient.simple_env import SimpleEnv

        return SimpleEnv(num_envs, continuous=env_path == SIMPLE_PREFIX + SIMPLE_KINDS[1], behavior_name=name, seed=seed)
    from envclient.gym_adapter import from_env_path

    return from_env_path(env_path, num_envs, seed, name)
