"""The grammar of an env path: ``gym:<id>`` (Gymnasium), ``python:MODULE:FUNCTION`` (any Gymnasium env
factory: wrappers, your own env) or ``simple:<kind>`` (the built-in 1-D task).

It belongs to no YAML schema: the config (``env_settings.env_path``), the CLI (``--env``) and the
env clients (``envclient.envs``) all read env paths, so the grammar lives here, below all of them.
Errors are plain ``ConfigError`` / ``NotSupportedYetError`` about the path itself; the config
parser adds the dotted key.
"""

from __future__ import annotations

import re

from common.errors import ConfigError, NotSupportedYetError
from common.messages import bounded_repr

GYM_PREFIX = "gym:"
# Gymnasium's own env-id grammar: [namespace/]name[-vN].
_GYM_ID = re.compile(r"^(?:(?P<namespace>[\w:-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?$")
PYTHON_PREFIX = "python:"
"""``python:MODULE:FUNCTION``: ``FUNCTION()`` of the imported ``MODULE`` makes one Gymnasium env per copy."""
_PYTHON_PATH = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<function>[A-Za-z_]\w*)$")
PETTINGZOO_PREFIX = "pettingzoo:"
"""``pettingzoo:MODULE:FUNCTION``: ``FUNCTION()`` makes one PettingZoo parallel env per copy
(``envclient.pettingzoo_adapter``)."""
SIMPLE_PREFIX = "simple:"
"""The built-in 1-D goal task (``envclient.simple_env``): ``simple:discrete`` or ``simple:continuous``."""
SIMPLE_KINDS = ("discrete", "continuous")
"""The action kinds of ``simple:<kind>``."""
SIMPLE_BEHAVIOR = "Simple1D"
"""The behavior name of a ``simple:`` env path."""


def parse_python_path(env_path: str) -> tuple[str, str]:
    """``(module, function)`` of ``python:MODULE:FUNCTION`` (a dotted module path and a name); nothing is imported.

    Raises:
        ConfigError: not of that form; the message quotes the path.
    """
    match = _PYTHON_PATH.match(env_path[len(PYTHON_PREFIX) :]) if env_path.startswith(PYTHON_PREFIX) else None
    if match is None:
        raise ConfigError(
            f"{bounded_repr(env_path)} is not python:MODULE:FUNCTION (a dotted module and a function that makes one"
            " Gymnasium env, e.g. python:my_envs.pixels:make_env)"
        )
    return match.group("module"), match.group("function")


def parse_pettingzoo_path(env_path: str) -> tuple[str, str]:
    """``(module, function)`` of ``pettingzoo:MODULE:FUNCTION``; nothing is imported.

    Raises:
        ConfigError: not of that form; the message quotes the path.
    """
    match = _PYTHON_PATH.match(env_path[len(PETTINGZOO_PREFIX) :]) if env_path.startswith(PETTINGZOO_PREFIX) else None
    if match is None:
        raise ConfigError(
            f"{bounded_repr(env_path)} is not pettingzoo:MODULE:FUNCTION (a dotted module and a function that makes one"
            " PettingZoo parallel env, e.g. pettingzoo:mpe2.simple_spread_v3:parallel_env)"
        )
    return match.group("module"), match.group("function")


def behavior_name_for_env(env_path: str) -> str:
    """The default behavior name of an env path: for ``gym:<id>``, the id without namespace and version.

    Args:
        env_path: ``gym:<id>``, e.g. ``gym:CartPole-v1`` or ``gym:ALE/Pong-v5``;
            ``python:MODULE:FUNCTION`` (behavior ``FUNCTION``); or the built-in 1-D task,
            ``simple:discrete`` / ``simple:continuous`` (behavior ``Simple1D``).

    Returns:
        The behavior name, e.g. ``CartPole``, ``Pong``, ``make_env`` or ``Simple1D``.

    Raises:
        NotSupportedYetError: ``env_path`` is none of ``gym:``, ``python:`` or ``simple:`` (an
            ML-Agents Unity build path).
        ConfigError: the id after ``gym:`` is not a Gymnasium env id, a ``python:`` path is not
            ``python:MODULE:FUNCTION``, or the kind after ``simple:`` is not one of ``SIMPLE_KINDS``.
    """
    if env_path.startswith(PYTHON_PREFIX):
        return parse_python_path(env_path)[1]
    if env_path.startswith(PETTINGZOO_PREFIX):
        parse_pettingzoo_path(env_path)
        raise NotSupportedYetError(
            f"{bounded_repr(env_path)}: a PettingZoo env hosts a behavior per agent-name prefix; stepstream train does"
            " not host pettingzoo: env paths yet, run envclient.pettingzoo_adapter's client against a processor"
        )
    if env_path.startswith(SIMPLE_PREFIX):
        kind = env_path[len(SIMPLE_PREFIX) :]
        if kind not in SIMPLE_KINDS:
            choices = " or ".join(SIMPLE_PREFIX + k for k in SIMPLE_KINDS)
            raise ConfigError(f"{bounded_repr(env_path)}: the built-in 1-D task is {choices}")
        return SIMPLE_BEHAVIOR
    if not env_path.startswith(GYM_PREFIX):
        raise NotSupportedYetError(
            f"{bounded_repr(env_path)} is not supported yet: only gym:<id>, python:MODULE:FUNCTION, simple:discrete or"
            " simple:continuous"
            " (or no env_path, for external env clients)"
        )
    match = _GYM_ID.match(env_path[len(GYM_PREFIX) :])
    if match is None:
        raise ConfigError(f"{bounded_repr(env_path)} is not gym:<id> with a Gymnasium id like CartPole-v1")
    return match.group("name")
