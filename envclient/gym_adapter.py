"""Gymnasium environments as a ``VectorEnv``: ``env_path: gym:<id>`` with ``num_envs`` seeded copies.

``GymVectorEnv`` wraps ``num_envs`` copies of ``gymnasium.make(id)`` in a
``gymnasium.vector.SyncVectorEnv`` with Gymnasium's **next-step auto-reset**
(``AutoresetMode.NEXT_STEP``, the 1.x default): after a copy reports terminated or truncated, the
next ``step`` ignores its action and returns its reset obs with reward 0 and both flags False,
which is exactly the ``envclient.runner.VectorEnv`` contract. ``run_env`` turns the flags into the
wire's ``done = terminated | truncated`` and ``max_reached = truncated & ~terminated`` (a copy
that reports both is terminated: done without max_reached).

Spaces map to BrainParameters as follows (anything else raises ``NotSupportedYetError`` naming
the env id and the space):

================================== =================================================================
Gymnasium space                    stepstream
================================== =================================================================
obs ``Box`` rank 0-2               one float32 vector observation of ``prod(shape)`` (row-major)
obs ``Box`` rank 3 of uint8        an image: one uint8 ``[H, W, C]`` observation, passed through as is
obs ``Box`` rank 3 of floats       an image: one float32 ``[H, W, C]`` observation
obs ``Box`` rank >= 4              refused (stack frames into the channels, ``[H, W, k * C]``)
obs ``Discrete(n, start)``         one-hot float32 ``[n]`` of ``obs - start``
obs ``MultiDiscrete(nvec, start)`` concatenated one-hots, float32 ``[sum(nvec)]`` (nvec flattened)
obs ``MultiBinary(shape)``         float32 0/1 vector of ``prod(shape)``
act ``Discrete(n, start)``         one branch of ``n``; the env gets ``choice + start``
act ``MultiDiscrete(nvec, start)`` one branch per element of the flattened ``nvec``; ``+ start``
act ``MultiBinary(shape)``         one branch of 2 per element of the flattened shape
act ``Box`` of floats              ``C = prod(shape)`` continuous; see below
================================== =================================================================

Continuous actions arrive in [-1, 1] (``processor.inference``: PPO's ``clip(u, -1, 1)``, BC's
``clip(u, -3, 3) / 3``, SAC's ``tanh``). Each dimension with finite bounds is rescaled linearly, ``-1 -> low``,
``+1 -> high``, then clipped to ``[low, high]``; a dimension with an infinite bound gets the
[-1, 1] action unscaled (there is no range to map onto), clipped to its finite bound if it has one.

Why ``SyncVectorEnv``: with ``AsyncVectorEnv`` (one subprocess per copy) the pipe and shared-memory
round trips cost several times what a cheap env's step does (``docs/benchmarks.md``, one-off
measurements). ``vectorization="async"`` remains available for expensive simulators. (Gymnasium's
numpy-native ``CartPoleVectorEnv`` is cheaper still, but only a few classic-control ids have one; the
generic path keeps one behaviour for every id.)

Shapes: ``N`` copies (agents), ``C`` continuous action size, ``B`` discrete branches, ``D`` the
flattened observation size.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from common.env_paths import GYM_PREFIX, behavior_name_for_env, parse_python_path
from common.errors import ConfigError, NotSupportedYetError
from common.specs import ActionSpec, BrainParameters, ObservationSpec

logger = logging.getLogger(__name__)

Vectorization = Literal["sync", "async"]
ObsConverter = Callable[[np.ndarray], np.ndarray]
"""Batched env observations ``[N, *space.shape]`` -> float32 ``[N, D]`` (an image: uint8 or float32 ``[N, H, W, C]``)."""

_SUPPORTED_ACTIONS = "Box of floats, Discrete, MultiDiscrete or MultiBinary"
_SUPPORTED_OBSERVATIONS = "Box of rank 0-2, an image Box [H, W, C] of uint8 or floats, Discrete, MultiDiscrete or MultiBinary"


def _not_supported(env_path: str, what: str, space: spaces.Space[Any], detail: str) -> NotSupportedYetError:
    return NotSupportedYetError(f"{env_path}: {what} space {space} is not supported yet: {detail}")


# -- observations ---------------------------------------------------------------------------------


def _one_hot_converter(nvec: np.ndarray, start: np.ndarray) -> ObsConverter:
    """One-hots of each element of ``[N, *nvec.shape]`` integer obs, concatenated: float32 ``[N, sum(nvec)]``."""
    flat_n, flat_start = nvec.reshape(-1).astype(np.int64), start.reshape(-1).astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(flat_n)[:-1])) - flat_start
    width = int(flat_n.sum())

    def convert(obs: np.ndarray) -> np.ndarray:
        values = np.asarray(obs, np.int64).reshape(len(obs), -1)
        out = np.zeros((len(values), width), np.float32)
        np.put_along_axis(out, values + offsets, 1.0, axis=1)
        return out

    return convert


def _observation_adapter(env_path: str, space: spaces.Space[Any]) -> tuple[ObservationSpec, ObsConverter]:
    """The ObservationSpec of a single copy's observation space and the batch converter to it.

    Raises:
        NotSupportedYetError: a Box of rank >= 4, an image Box of integers other than uint8, or a
            space outside the module table.
    """
    if isinstance(space, spaces.Box):
        if len(space.shape) == 3:
            return _image_adapter(env_path, space)
        if len(space.shape) > 3:
            raise _not_supported(
                env_path, "observation", space, f"rank {len(space.shape)}; an image is [H, W, C] (stack frames into channels)"
            )
        size = math.prod(space.shape)
        if size < 1:
            raise _not_supported(env_path, "observation", space, "it has no elements")
        return ObservationSpec((size,), np.dtype(np.float32), "obs"), _flat_float32(size)
    if isinstance(space, spaces.Discrete):
        return ObservationSpec((int(space.n),), np.dtype(np.float32), "obs"), _one_hot_converter(
            np.array([space.n]), np.array([space.start])
        )
    if isinstance(space, spaces.MultiDiscrete):
        width = int(np.sum(space.nvec))
        return ObservationSpec((width,), np.dtype(np.float32), "obs"), _one_hot_converter(space.nvec, space.start)
    if isinstance(space, spaces.MultiBinary):
        size = math.prod(space.shape)
        return ObservationSpec((size,), np.dtype(np.float32), "obs"), _flat_float32(size)
    raise _not_supported(env_path, "observation", space, f"use {_SUPPORTED_OBSERVATIONS}")


def _image_adapter(env_path: str, space: spaces.Box) -> tuple[ObservationSpec, ObsConverter]:
    """A rank-3 Box as an image ``[H, W, C]``: uint8 passes through, floats become float32."""
    shape = tuple(int(d) for d in space.shape)
    if min(shape) < 1:
        raise _not_supported(env_path, "observation", space, "an image needs positive [H, W, C]")
    dtype: np.dtype[Any]
    if space.dtype == np.uint8:
        dtype = np.dtype(np.uint8)
    elif np.issubdtype(space.dtype, np.floating):
        dtype = np.dtype(np.float32)
    else:
        raise _not_supported(env_path, "observation", space, f"an image of {space.dtype}; images are uint8 or floats")

    def convert(obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, dtype).reshape(len(obs), *shape)

    return ObservationSpec(shape, dtype, "obs"), convert


def _flat_float32(size: int) -> ObsConverter:
    def convert(obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, np.float32).reshape(len(obs), size)

    return convert


# -- actions --------------------------------------------------------------------------------------


class _BoxActions:
    """[-1, 1] continuous actions ``[N, C]`` -> the Box's ``[N, *shape]`` (module docstring)."""

    def __init__(self, space: spaces.Box) -> None:
        self.shape = space.shape
        self.dtype = space.dtype
        self.low = np.asarray(space.low, np.float64).reshape(-1)
        self.high = np.asarray(space.high, np.float64).reshape(-1)
        finite = np.isfinite(self.low) & np.isfinite(self.high)
        low, high = np.where(finite, self.low, -1.0), np.where(finite, self.high, 1.0)
        self.half_range = (high - low) / 2.0  # 1 where a bound is infinite: the action passes through
        self.center = (high + low) / 2.0  # 0 there
        self.spec = ActionSpec(len(self.low))

    def to_env(self, continuous: np.ndarray, discrete: np.ndarray, n: int) -> np.ndarray:
        actions = np.asarray(continuous, np.float64)
        if actions.shape != (n, self.spec.continuous_size):
            raise ValueError(f"continuous_actions must be [{n}, {self.spec.continuous_size}], got {list(actions.shape)}")
        scaled = np.clip(actions, -1.0, 1.0) * self.half_range + self.center
        return np.clip(scaled, self.low, self.high).astype(self.dtype).reshape(n, *self.shape)


class _DiscreteActions:
    """Branch choices ``[N, B]`` in ``[0, branch)`` -> the env's ``[N, *shape]`` values (``choice + start``)."""

    def __init__(self, branches: np.ndarray, start: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.branches = branches.reshape(-1).astype(np.int64)
        self.start = start.reshape(-1).astype(np.int64)
        self.shape = shape
        self.dtype = dtype
        self.spec = ActionSpec(0, tuple(int(b) for b in self.branches))

    def to_env(self, continuous: np.ndarray, discrete: np.ndarray, n: int) -> np.ndarray:
        choices = np.asarray(discrete)
        if choices.shape != (n, len(self.branches)):
            raise ValueError(f"discrete_actions must be [{n}, {len(self.branches)}], got {list(choices.shape)}")
        if np.any((choices < 0) | (choices >= self.branches)):
            raise ValueError(f"discrete actions outside branches {self.spec.discrete_branches}: {choices.tolist()}")
        return (choices + self.start).astype(self.dtype).reshape(n, *self.shape)


def _action_adapter(env_path: str, space: spaces.Space[Any]) -> _BoxActions | _DiscreteActions:
    """The action mapping of a single copy's action space.

    Raises:
        NotSupportedYetError: a Box of integers, an empty space, or a space outside the module table.
    """
    if isinstance(space, spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            raise _not_supported(env_path, "action", space, f"a Box of {space.dtype} (only float Boxes are continuous)")
        if math.prod(space.shape) < 1:
            raise _not_supported(env_path, "action", space, "it has no elements")
        return _BoxActions(space)
    if isinstance(space, spaces.Discrete):
        return _DiscreteActions(np.array([space.n]), np.array([space.start]), (), space.dtype)
    if isinstance(space, spaces.MultiDiscrete):
        if space.nvec.size < 1:
            raise _not_supported(env_path, "action", space, "it has no elements")
        return _DiscreteActions(space.nvec, space.start, space.shape, space.dtype)
    if isinstance(space, spaces.MultiBinary):
        size = math.prod(space.shape)
        if size < 1:
            raise _not_supported(env_path, "action", space, "it has no elements")
        return _DiscreteActions(np.full(size, 2), np.zeros(size, np.int64), space.shape, space.dtype)
    raise _not_supported(env_path, "action", space, f"use {_SUPPORTED_ACTIONS}")


# -- the vector env -------------------------------------------------------------------------------


def check_registered(env_id: str) -> None:
    """Raise ConfigError naming ``env_id`` (with the closest registered id) when Gymnasium's registry does not know it.

    Cheap (no env is made), so the CLI checks every id before anything slow starts.
    """
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as exc:
        close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"env_path: gym:{env_id} is not a registered Gymnasium environment: unknown Gymnasium id{hint}"
        ) from exc


def is_registered(env_id: str) -> bool:
    """Whether Gymnasium's registry knows ``env_id`` (no env is made)."""
    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error:
        return False
    return True


class GymVectorEnv:
    """``num_envs`` seeded copies of a Gymnasium env, next-step auto-reset; implements ``envclient.runner.VectorEnv``.

    Args:
        env_id: a registered Gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: ``N`` >= 1 copies, each one agent of the behavior.
        seed: copy ``i`` is seeded with ``seed + i`` at the first ``reset``; None or negative
            draws fresh entropy (the config's ``seed: -1``).
        behavior_name: the name in the BrainParameters; None: ``behavior_name_for_env`` (the id
            without namespace and version, ``CartPole-v1`` -> ``CartPole``).
        make_kwargs: extra ``gymnasium.make`` keyword arguments for every copy (e.g.
            ``max_episode_steps``).
        env_fn: makes one copy instead of ``gymnasium.make(env_id)`` (``python:MODULE:FUNCTION``,
            ``load_env_factory``); ``env_id`` is then that env path, for names and messages.
        vectorization: ``"sync"`` (in-process, the default: fastest for cheap envs, see the
            module docstring) or ``"async"`` (one subprocess per copy).

    Raises:
        ConfigError: ``num_envs`` < 1, an unknown id, or an env that cannot be made.
        NotSupportedYetError: an observation or action space outside the module table.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None = None,
        behavior_name: str | None = None,
        *,
        make_kwargs: Mapping[str, Any] | None = None,
        vectorization: Vectorization = "sync",
        env_fn: Callable[[], gymnasium.Env[Any, Any]] | None = None,
    ) -> None:
        if num_envs < 1:
            raise ConfigError(f"env_settings.num_envs: must be >= 1, got {num_envs}")
        if vectorization not in ("sync", "async"):
            raise ValueError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
        if env_fn is None:
            check_registered(env_id)
            make: Callable[[], Any] = functools.partial(gymnasium.make, env_id, **dict(make_kwargs or {}))
            self.env_path = GYM_PREFIX + env_id
        else:
            make, self.env_path = env_fn, env_id
        self.env_id = env_id
        self._seed = seed if seed is not None and seed >= 0 else None
        self._needs_seed = True
        vector_cls = SyncVectorEnv if vectorization == "sync" else AsyncVectorEnv
        try:
            self._env: SyncVectorEnv | AsyncVectorEnv = vector_cls([make] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP)
        except (gymnasium.error.Error, ImportError) as exc:
            raise ConfigError(f"env_path: {self.env_path} could not be made: {exc}") from exc
        try:
            obs_spec, self._convert_obs = _observation_adapter(self.env_path, self._env.single_observation_space)
            self._actions = _action_adapter(self.env_path, self._env.single_action_space)
        except NotSupportedYetError:
            self._env.close()
            raise
        name = behavior_name if behavior_name is not None else behavior_name_for_env(self.env_path)
        self._params = BrainParameters(name, (obs_spec,), self._actions.spec)
        self._n = num_envs
        logger.debug(
            "%s x %d (%s, seed %s) as behavior %r: obs %s -> %s, actions %s -> %s",
            *(self.env_path, num_envs, vectorization, self._seed, name, self._env.single_observation_space, obs_spec.shape),
            *(self._env.single_action_space, self._actions.spec),
        )

    @property
    def num_agents(self) -> int:
        """``N``: the number of copies."""
        return self._n

    @property
    def brain_parameters(self) -> BrainParameters:
        """One observation spec (float32 ``[D]``, or an image ``[H, W, C]``) and the action spec of the module table."""
        return self._params

    @property
    def vector_env(self) -> SyncVectorEnv | AsyncVectorEnv:
        """The wrapped Gymnasium vector env (its ``single_*_space`` are the copy's spaces)."""
        return self._env

    def reset(self) -> list[np.ndarray]:
        """Start every copy (seeded on the first call only); returns ``[obs float32 [N, D]]`` (an image: ``[N, H, W, C]``)."""
        seed, self._needs_seed = (self._seed if self._needs_seed else None), False
        obs, _ = self._env.reset(seed=seed)
        return [self._convert_obs(obs)]

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """Advance every copy one step.

        Args:
            continuous_actions: float32 ``[N, C]`` in [-1, 1] (``C`` = 0 columns for a discrete env).
            discrete_actions: int ``[N, B]`` branch choices (``B`` = 0 columns for a Box env).

        Returns:
            ``(obs, rewards, terminated, truncated)``: ``[float32 [N, D]]`` (an image: ``[N, H, W, C]``), float32 ``[N]``, bool
            ``[N]``, bool ``[N]``. A copy that ended an episode on the previous step is reset
            instead (its action ignored): reset obs, reward 0, neither flag.

        Raises:
            ValueError: an action array of the wrong shape, or a branch choice out of range.
        """
        actions = self._actions.to_env(continuous_actions, discrete_actions, self._n)
        obs, rewards, terminated, truncated, _ = self._env.step(actions)
        return (
            [self._convert_obs(obs)],
            np.asarray(rewards, np.float32),
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
        )

    def close(self) -> None:
        """Close every copy (and, for ``"async"``, its subprocess)."""
        self._env.close()

    def __enter__(self) -> GymVectorEnv:
        return self

    def __exit__(self, *unused_exc: object) -> None:
        self.close()


def from_env_path(
    env_path: str,
    num_envs: int,
    seed: int | None,
    behavior_name: str | None = None,
    **kwargs: Any,
) -> GymVectorEnv:
    """A ``GymVectorEnv`` for a config's ``env_path``.

    Args:
        env_path: ``gym:<id>``, e.g. ``gym:CartPole-v1``.
        num_envs: copies, >= 1.
        seed: see ``GymVectorEnv``.
        behavior_name: None: the id without namespace and version (``behavior_name_for_env``).
        **kwargs: ``make_kwargs`` / ``vectorization``, passed to ``GymVectorEnv``.

    Raises:
        ConfigError: not a ``gym:`` path, a malformed or unknown id, or ``num_envs`` < 1.
        NotSupportedYetError: the env's spaces (see ``GymVectorEnv``).
    """
    if not env_path.startswith(GYM_PREFIX):
        raise ConfigError(f"env_path: {env_path!r} is not a gym:<id> path (e.g. gym:CartPole-v1); no other kind is supported")
    env_id = env_path[len(GYM_PREFIX) :].strip()
    if not env_id:
        raise ConfigError(f"env_path: {env_path!r} names no Gymnasium id (e.g. gym:CartPole-v1)")
    if behavior_name is None:
        behavior_name = behavior_name_for_env(GYM_PREFIX + env_id)
    return GymVectorEnv(env_id, num_envs, seed, behavior_name, **kwargs)


def load_env_factory(env_path: str) -> Callable[[], gymnasium.Env[Any, Any]]:
    """The env factory of ``python:MODULE:FUNCTION``: ``FUNCTION`` of the imported ``MODULE``, which makes one
    Gymnasium env per call (with any wrappers: pixels, frame stacking), checked to return one.

    Raises:
        ConfigError: a malformed path, a module that does not import (with its error), no such
            function in it (with the closest names), or a value that is not callable; each names
            the module and the function.
    """
    module_name, function_name = parse_python_path(env_path)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any failure to import is a config error naming it
        raise ConfigError(
            f"env_path: {env_path}: module '{module_name}' does not import: {type(exc).__name__}: {exc}"
        ) from exc
    function = getattr(module, function_name, None)
    if function is None:
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(function_name, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"env_path: {env_path}: module '{module_name}' has no function '{function_name}'{hint}")
    if not callable(function):
        raise ConfigError(
            f"env_path: {env_path}: '{function_name}' of module '{module_name}' is a {type(function).__name__}, not a function"
        )

    def make() -> gymnasium.Env[Any, Any]:
        try:
            env = function()
        except Exception as exc:  # the user's factory: its failure is reported with its name
            raise ConfigError(
                f"env_path: {env_path}: function '{function_name}' of module '{module_name}' raised"
                f" {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(env, gymnasium.Env):
            raise ConfigError(
                f"env_path: {env_path}: function '{function_name}' of module '{module_name}' returned a"
                f" {type(env).__name__}, not a gymnasium.Env"
            )
        return env

    return make


def from_python_path(
    env_path: str, num_envs: int, seed: int | None, behavior_name: str | None = None, **kwargs: Any
) -> GymVectorEnv:
    """A ``GymVectorEnv`` of ``num_envs`` envs made by ``python:MODULE:FUNCTION`` (``load_env_factory``).

    Raises:
        ConfigError: as ``load_env_factory``, or ``num_envs`` < 1.
        NotSupportedYetError: the env's spaces (see ``GymVectorEnv``).
    """
    factory = load_env_factory(env_path)
    return GymVectorEnv(env_path, num_envs, seed, behavior_name, env_fn=factory, **kwargs)
