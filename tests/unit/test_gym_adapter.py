"""The Gymnasium adapter (``envclient.gym_adapter``): spaces, rescaling, flags, next-step auto-reset, errors.

Besides CartPole-v1 and Pendulum-v1, a tiny scripted env (registered here as
``StepstreamTest/Scripted-v0``) takes its spaces and its termination step as ``make`` kwargs; its
Box observation is the step count within the episode (0 after a reset), so auto-resets show.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv

from common.env_paths import behavior_name_for_env
from common.errors import ConfigError, NotSupportedYetError
from common.specs import ActionSpec
from envclient.envs import VectorEnvSettings, close_vector_env, make_vector_env
from envclient.gym_adapter import GymVectorEnv, from_env_path
from envclient.runner import run_env
from envclient.session import ActionResult

SCRIPTED = "StepstreamTest/Scripted-v0"
FLOATS = spaces.Box(-np.inf, np.inf, (2,), np.float32)
TWO_CHOICES = spaces.Discrete(2)


class ScriptedEnv(gymnasium.Env[Any, Any]):
    """Observation: the step count ``t`` in the episode; reward ``t``; terminated once ``t == terminate_at``."""

    def __init__(
        self,
        observation_space: spaces.Space[Any] = FLOATS,
        action_space: spaces.Space[Any] = TWO_CHOICES,
        terminate_at: int | None = None,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.terminate_at = terminate_at
        self.t = 0
        self.actions: list[np.ndarray] = []

    def _obs(self) -> Any:
        space = self.observation_space
        if isinstance(space, spaces.Discrete):
            return np.int64(space.start + self.t % int(space.n))
        if isinstance(space, spaces.MultiDiscrete):
            return (space.start + self.t % space.nvec).astype(space.dtype)
        if isinstance(space, spaces.MultiBinary):
            return np.full(space.shape, self.t % 2, space.dtype)
        if isinstance(space, spaces.Box):
            return np.full(space.shape, self.t, space.dtype)
        return space.sample()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.actions.append(np.array(action, copy=True))
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), float(self.t), terminated, False, {}


if SCRIPTED not in gymnasium.registry:
    gymnasium.register(SCRIPTED, entry_point=ScriptedEnv)  # type: ignore[arg-type]


def scripted(num_envs: int = 1, **make_kwargs: Any) -> GymVectorEnv:
    return GymVectorEnv(SCRIPTED, num_envs, seed=0, make_kwargs=make_kwargs)


def unwrapped(env: GymVectorEnv) -> list[Any]:
    """Each copy's innermost env (the adapter's default vectorization is in-process)."""
    assert isinstance(env.vector_env, SyncVectorEnv)
    return [e.unwrapped for e in env.vector_env.envs]


def copies(env: GymVectorEnv) -> list[ScriptedEnv]:
    return unwrapped(env)


def no_continuous(n: int) -> np.ndarray:
    return np.zeros((n, 0), np.float32)


def no_discrete(n: int) -> np.ndarray:
    return np.zeros((n, 0), np.int32)


# -- spaces ---------------------------------------------------------------------------------------


def test_cartpole_is_one_branch_of_two_with_float32_vectors() -> None:
    with from_env_path("gym:CartPole-v1", 3, seed=1) as env:
        params = env.brain_parameters
        assert params.behavior_name == "CartPole" and env.num_agents == 3
        assert params.action_spec == ActionSpec(0, (2,))
        assert [(s.shape, s.dtype) for s in params.observation_specs] == [((4,), np.dtype(np.float32))]
        (obs,) = env.reset()
        assert obs.dtype == np.float32 and obs.shape == (3, 4)
        assert len({tuple(row) for row in obs}) == 3, "copies are seeded differently"
        (obs2,), rewards, terminated, truncated = env.step(no_continuous(3), np.array([[0], [1], [1]], np.int32))
        assert obs2.dtype == np.float32 and obs2.shape == (3, 4)
        assert rewards.dtype == np.float32 and rewards.tolist() == [1.0, 1.0, 1.0]
        assert terminated.dtype == bool and truncated.dtype == bool and not (terminated | truncated).any()
        with pytest.raises(ValueError, match=r"\[3, 1\]"):
            env.step(no_continuous(3), np.zeros((3, 2), np.int32))
        with pytest.raises(ValueError, match="outside branches"):
            env.step(no_continuous(3), np.array([[0], [2], [1]], np.int32))


def test_the_seed_makes_runs_repeat() -> None:
    def first_obs(seed: int | None) -> np.ndarray:
        with from_env_path("gym:CartPole-v1", 2, seed=seed) as env:
            return env.reset()[0]

    np.testing.assert_array_equal(first_obs(5), first_obs(5))
    assert not np.array_equal(first_obs(5), first_obs(6))
    assert first_obs(-1).shape == (2, 4)  # the config's seed -1: fresh entropy


def test_behavior_name_defaults_to_the_id_without_namespace_and_version() -> None:
    with scripted() as env:
        assert env.brain_parameters.behavior_name == "Scripted"
    with from_env_path("gym:CartPole-v1", 1, seed=0, behavior_name="Pole") as env:
        assert env.brain_parameters.behavior_name == "Pole"


def test_pendulum_rescales_minus_one_one_to_its_torque_bounds() -> None:
    actions = np.array([[-1.0], [-0.5], [0.0], [0.5], [1.0], [1.5], [-7.0]], np.float32)
    with from_env_path("gym:Pendulum-v1", len(actions), seed=0) as env:
        assert env.brain_parameters.action_spec == ActionSpec(1)
        assert env.brain_parameters.observation_specs[0].shape == (3,)
        env.reset()
        env.step(actions, no_discrete(len(actions)))
        torques = [float(e.last_u) for e in unwrapped(env)]
    np.testing.assert_allclose(torques, [-2.0, -1.0, 0.0, 1.0, 2.0, 2.0, -2.0], atol=1e-6)


def test_infinite_bounds_pass_through_unscaled_and_finite_ones_still_clip() -> None:
    box = spaces.Box(np.array([-np.inf, 0.0, -1.0]), np.array([np.inf, 10.0, np.inf]), dtype=np.float64)
    with scripted(2, action_space=box) as env:
        assert env.brain_parameters.action_spec == ActionSpec(3)
        env.reset()
        env.step(np.array([[0.5, 0.5, 0.25], [-1.0, -1.0, -1.0]], np.float32), no_discrete(2))
        received = [c.actions[0] for c in copies(env)]
    np.testing.assert_allclose(received, [[0.5, 7.5, 0.25], [-1.0, 0.0, -1.0]])
    assert received[0].dtype == np.float64


def test_a_rank_two_box_action_is_flattened_and_restored() -> None:
    with scripted(1, action_space=spaces.Box(-2.0, 2.0, (2, 2), np.float32)) as env:
        assert env.brain_parameters.action_spec == ActionSpec(4)
        env.reset()
        env.step(np.array([[-1.0, 0.0, 0.5, 1.0]], np.float32), no_discrete(1))
        np.testing.assert_allclose(copies(env)[0].actions[0], [[-2.0, 0.0], [1.0, 2.0]])


def test_discrete_start_offsets_are_added_back() -> None:
    with scripted(2, action_space=spaces.Discrete(3, start=5)) as env:
        assert env.brain_parameters.action_spec == ActionSpec(0, (3,))
        env.reset()
        env.step(no_continuous(2), np.array([[0], [2]], np.int32))
        assert [int(c.actions[0]) for c in copies(env)] == [5, 7]


def test_multi_discrete_actions_are_branches_with_their_starts() -> None:
    space = spaces.MultiDiscrete(np.array([[3, 4], [2, 5]]), start=np.array([[1, -2], [0, 10]]))
    with scripted(2, action_space=space) as env:
        assert env.brain_parameters.action_spec == ActionSpec(0, (3, 4, 2, 5))
        env.reset()
        env.step(no_continuous(2), np.array([[2, 3, 1, 4], [0, 0, 0, 0]], np.int32))
        received = [c.actions[0] for c in copies(env)]
    np.testing.assert_array_equal(received[0], [[3, 1], [1, 14]])
    np.testing.assert_array_equal(received[1], [[1, -2], [0, 10]])
    with scripted(1, action_space=space) as env, pytest.raises(ValueError, match="outside branches"):
        env.reset()
        env.step(no_continuous(1), np.array([[3, 0, 0, 0]], np.int32))


def test_multi_binary_actions_are_branches_of_two() -> None:
    with scripted(1, action_space=spaces.MultiBinary(3)) as env:
        assert env.brain_parameters.action_spec == ActionSpec(0, (2, 2, 2))
        env.reset()
        env.step(no_continuous(1), np.array([[1, 0, 1]], np.int32))
        np.testing.assert_array_equal(copies(env)[0].actions[0], [1, 0, 1])


@pytest.mark.parametrize(
    ("space", "width", "first_rows"),
    [
        (spaces.Discrete(3, start=-1), 3, [[1, 0, 0], [0, 1, 0]]),
        (spaces.MultiDiscrete([2, 3]), 5, [[1, 0, 1, 0, 0], [0, 1, 0, 1, 0]]),
        (spaces.MultiBinary(2), 2, [[0, 0], [1, 1]]),
        (spaces.Box(-np.inf, np.inf, (2, 3), np.float64), 6, [[0] * 6, [1] * 6]),
        (spaces.Box(-np.inf, np.inf, (), np.float32), 1, [[0], [1]]),
    ],
    ids=["discrete-one-hot", "multi-discrete-one-hots", "multi-binary", "box-rank-2", "box-scalar"],
)
def test_observations_become_one_float32_vector(
    space: spaces.Space[Any], width: int, first_rows: Sequence[Sequence[int]]
) -> None:
    with scripted(1, observation_space=space) as env:
        assert [s.shape for s in env.brain_parameters.observation_specs] == [(width,)]
        (reset_obs,) = env.reset()
        (step_obs,), *_ = env.step(no_continuous(1), np.zeros((1, 1), np.int32))
    for got, want in zip((reset_obs, step_obs), first_rows, strict=True):
        assert got.dtype == np.float32 and got.shape == (1, width)
        np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"action_space": spaces.Dict({"a": spaces.Discrete(2)})}, "action space Dict"),
        ({"action_space": spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))}, "action space Tuple"),
        ({"action_space": spaces.Text(5)}, "action space Text"),
        ({"action_space": spaces.Box(0, 3, (2,), np.int64)}, "action space Box.*int64.*only float Boxes"),
        ({"observation_space": spaces.Tuple((FLOATS, FLOATS))}, "observation space Tuple"),
        ({"observation_space": spaces.Box(0, 255, (2, 8, 8, 3), np.uint8)}, "rank 4; an image is \\[H, W, C\\]"),
        ({"observation_space": spaces.Box(0, 255, (8, 8, 3), np.int64)}, "an image of int64; images are uint8 or floats"),
    ],
    ids=["dict", "tuple", "text", "int-box", "tuple-obs", "rank-4-box", "int64-image"],
)
def test_unsupported_spaces_name_the_env_and_the_space(kwargs: dict[str, Any], match: str) -> None:
    space = next(iter(kwargs.values()))
    with pytest.raises(NotSupportedYetError, match=match) as caught:
        scripted(1, **kwargs)
    assert f"gym:{SCRIPTED}" in str(caught.value) and str(space) in str(caught.value)


@pytest.mark.parametrize(("dtype", "sent"), [(np.uint8, np.uint8), (np.float64, np.float32)], ids=["uint8", "float64"])
def test_an_image_box_passes_through_as_an_image(dtype: type, sent: type) -> None:
    space = spaces.Box(0, 255, (6, 4, 3), dtype)
    with scripted(2, observation_space=space) as env:
        (spec,) = env.brain_parameters.observation_specs
        assert spec.shape == (6, 4, 3) and spec.dtype == sent and spec.is_image
        (reset_obs,) = env.reset()
        (step_obs,), *_ = env.step(no_continuous(2), np.zeros((2, 1), np.int32))
    assert reset_obs.dtype == sent and reset_obs.shape == (2, 6, 4, 3)
    np.testing.assert_array_equal(reset_obs, np.zeros((2, 6, 4, 3), sent), strict=True)
    np.testing.assert_array_equal(step_obs, np.ones((2, 6, 4, 3), sent), strict=True)


@pytest.mark.parametrize(
    ("env_path", "match"),
    [
        ("CartPole-v1", "'CartPole-v1' is not a gym:<id> path"),
        ("unity:builds/3DBall", "'unity:builds/3DBall' is not a gym:<id> path"),
        ("gym:", "names no Gymnasium id"),
        ("gym:NoSuchEnv-v0", "gym:NoSuchEnv-v0 is not a registered Gymnasium environment"),
        ("gym:CartPole-v99", "gym:CartPole-v99 is not a registered Gymnasium environment"),
    ],
)
def test_bad_env_paths_are_config_errors_naming_them(env_path: str, match: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(match)):
        from_env_path(env_path, 1, seed=0)


def test_num_envs_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="num_envs"):
        from_env_path("gym:CartPole-v1", 0, seed=0)


# -- flags and auto-reset ---------------------------------------------------------------------------


def test_next_step_autoreset_ignores_the_action_and_returns_the_reset_obs() -> None:
    with scripted(2, terminate_at=2) as env:
        (obs,) = env.reset()
        assert obs[:, 0].tolist() == [0, 0]
        seen = []
        for k in range(5):
            (obs,), rewards, terminated, truncated = env.step(no_continuous(2), np.full((2, 1), k % 2, np.int32))
            seen.append((obs[:, 0].tolist(), rewards.tolist(), terminated.tolist(), truncated.tolist()))
        received = [[int(a) for a in c.actions] for c in copies(env)]
    assert seen == [
        ([1, 1], [1, 1], [False, False], [False, False]),
        ([2, 2], [2, 2], [True, True], [False, False]),  # the terminal obs
        ([0, 0], [0, 0], [False, False], [False, False]),  # the reset obs, reward 0, the action ignored
        ([1, 1], [1, 1], [False, False], [False, False]),
        ([2, 2], [2, 2], [True, True], [False, False]),
    ]
    assert received == [[0, 1, 1, 0]] * 2, "the action of step 2 (the reset) never reached the env"


class _ZeroActionSession:
    """Answers every step with choice 0 and records ``(done, max_reached)`` of every row sent."""

    def __init__(self) -> None:
        self.flags: list[tuple[list[bool], list[bool]]] = []

    async def step(
        self,
        behavior_name: str,
        agent_ids: np.ndarray,
        observations: Sequence[np.ndarray],
        rewards: np.ndarray,
        done: np.ndarray,
        max_reached: np.ndarray | None = None,
    ) -> ActionResult:
        assert max_reached is not None and observations[0].dtype == np.float32 and rewards.dtype == np.float32
        self.flags.append((done.tolist(), max_reached.tolist()))
        n = len(agent_ids)
        return ActionResult(no_continuous(n), np.zeros((n, 1), np.int32), 1)


@pytest.mark.parametrize(
    ("make_kwargs", "ends_with"),
    [
        ({"terminate_at": 3}, "terminated"),
        ({"max_episode_steps": 3}, "truncated"),
        ({"terminate_at": 3, "max_episode_steps": 3}, "both"),
    ],
)
async def test_terminated_is_done_and_truncated_is_done_plus_max_reached(make_kwargs: dict[str, Any], ends_with: str) -> None:
    with scripted(2, **make_kwargs) as env:
        session = _ZeroActionSession()
        stats = await run_env(session, env, "Scripted", max_env_steps=9)  # type: ignore[arg-type]
    max_reached = ends_with == "truncated"  # terminated wins when both
    ending = ([True, True], [max_reached, max_reached])
    quiet = ([False, False], [False, False])
    # Rows: first sighting, 3 experiences (the third ends the episode), then the reset row, ...
    assert session.flags == [quiet, quiet, quiet, ending, quiet, quiet, quiet, ending, quiet]
    assert stats.episodes == 4 and stats.truncated_episodes == (4 if max_reached else 0)
    assert stats.episode_lengths == [3] * 4 and stats.episode_returns == [6.0] * 4


async def test_cartpole_runs_through_run_env() -> None:
    with from_env_path("gym:CartPole-v1", 4, seed=0, make_kwargs={"max_episode_steps": 5}) as env:
        stats = await run_env(_ZeroActionSession(), env, "CartPole", max_env_steps=13)  # type: ignore[arg-type]
    # Always pushing left, CartPole outlives 5 steps: every episode is truncated after 5 experiences.
    assert stats.rows == 52 and stats.episodes == 8 and stats.truncated_episodes == 8
    assert stats.episode_lengths == [5] * 8 and stats.episode_returns == [5.0] * 8


# -- python:MODULE:FUNCTION ----------------------------------------------------------------------


def test_a_python_factory_env_steps_as_a_behavior_named_for_the_function() -> None:
    env = make_vector_env(VectorEnvSettings("python:tests.python_envs:pixels", "pixels", num_envs=2, seed=0))
    try:
        assert isinstance(env, GymVectorEnv) and env.env_path == "python:tests.python_envs:pixels"
        (spec,) = env.brain_parameters.observation_specs
        assert env.brain_parameters.behavior_name == "pixels"
        assert spec.shape == (4, 5, 3) and spec.dtype == np.uint8
        (obs,) = env.reset()
        (obs,), rewards, terminated, _ = env.step(no_continuous(2), np.zeros((2, 1), np.int32))
        assert not terminated.any()
        np.testing.assert_array_equal(obs, np.ones((2, 4, 5, 3), np.uint8), strict=True)
        np.testing.assert_array_equal(rewards, [1.0, 1.0])
    finally:
        close_vector_env(env)
    assert behavior_name_for_env("python:tests.python_envs:pixels") == "pixels"


@pytest.mark.parametrize(
    ("env_path", "parts"),
    [
        ("python:tests.no_such_module:pixels", ("module 'tests.no_such_module' does not import", "ModuleNotFoundError")),
        ("python:tests.python_envs:pixel", ("module 'tests.python_envs' has no function 'pixel'", "did you mean 'pixels'")),
        ("python:tests.python_envs:NOT_A_FUNCTION", ("'NOT_A_FUNCTION' of module 'tests.python_envs' is a int",)),
        (
            "python:tests.python_envs:raises",
            ("function 'raises' of module 'tests.python_envs' raised RuntimeError: no display",),
        ),
        ("python:tests.python_envs:not_an_env", ("function 'not_an_env' of module 'tests.python_envs' returned a int",)),
        ("python:tests.python_envs", ("is not python:MODULE:FUNCTION",)),
        ("python:tests/python_envs.py:pixels", ("is not python:MODULE:FUNCTION",)),
    ],
    ids=["no_module", "no_function", "not_callable", "factory_raises", "not_an_env", "no_function_part", "a_file_path"],
)
def test_a_bad_python_factory_names_the_module_and_the_function(env_path: str, parts: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as caught:
        make_vector_env(VectorEnvSettings(env_path, "b"))
    for part in parts:
        assert part in str(caught.value), f"{part!r} not in {str(caught.value)!r}"
