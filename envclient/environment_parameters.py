"""Environment parameters into Gymnasium and ``python:`` envs: a value drawn at each episode reset, via ``reset(options=...)``.

The processor sends its current samplers on the Step stream (``EnvSession.environment_parameters``,
a ``common.environment_parameters.ReceivedParameters``). Each copy of a ``GymVectorEnv`` is wrapped
in :class:`EnvironmentParametersWrapper`, which, at every reset of its env (the first one and every
auto-reset after an episode), draws one value per parameter (``ParameterDraws``: seeded with the
sampler's seed and the copy's index) and passes them as ``options``, a flat mapping of parameter name
to float, merged over any options the caller gave. An env reads what it knows
(``options.get("wall_height", 1.0)``) and ignores the rest; Gymnasium's classic-control envs already
read ``low`` and ``high`` this way. A lesson change takes effect at each copy's next reset, so within
one episode; one with ``require_reset`` makes ``envclient.runner.run_env`` end every episode and reset every copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium

from common.environment_parameters import ParameterDraws, ReceivedParameters


class EnvironmentParametersWrapper(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Passes the current environment parameters to the wrapped env's ``reset(options=...)``.

    Args:
        env: one copy.
        source: returns what the env client received last (looked up at each reset, so a session bound after the
            env was made is seen).
        env_index: the copy's index, which seeds its draws with each sampler's seed.
    """

    def __init__(self, env: gymnasium.Env[Any, Any], source: Callable[[], ReceivedParameters], env_index: int) -> None:
        super().__init__(env)
        self._source = source
        self._draws = ParameterDraws(env_index)
        self.last_values: dict[str, float] = {}
        """The values of the latest reset (empty before parameters arrive)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self._draws.set_samplers(self._source().samplers)
        self.last_values = self._draws.draw()
        if self.last_values:
            options = {**(options or {}), **self.last_values}
        return self.env.reset(seed=seed, options=options)


def with_environment_parameters(
    make: Callable[[], gymnasium.Env[Any, Any]], source: Callable[[], ReceivedParameters], env_index: int
) -> gymnasium.Env[Any, Any]:
    """``make()`` wrapped in :class:`EnvironmentParametersWrapper` (a picklable factory for one copy)."""
    return EnvironmentParametersWrapper(make(), source, env_index)
