"""The 1-D goal task (``envclient.simple_env``) and the env-client loop that drives it (``envclient.runner``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from envclient.runner import RunStats, run_env
from envclient.session import ActionResult
from envclient.simple_env import (
    BEST_RETURN,
    MAX_EPISODE_STEPS,
    STEP_COST,
    SUCCESS_REWARD,
    SimpleEnv,
    expert_actions,
    goal_of_images,
    scripted_expert,
    simple_brain_parameters,
)


def _no_continuous(n: int) -> np.ndarray:
    return np.zeros((n, 0), np.float32)


def _discrete(choices: Sequence[int]) -> np.ndarray:
    return np.asarray(choices, np.int32).reshape(-1, 1)


def test_brain_parameters() -> None:
    discrete, continuous = simple_brain_parameters("S", False), simple_brain_parameters("S", True)
    assert discrete.observation_specs[0].shape == (1,)
    assert discrete.action_spec.continuous_size == 0 and discrete.action_spec.discrete_branches == (2,)
    assert continuous.action_spec.continuous_size == 1 and continuous.action_spec.discrete_branches == ()


def test_obs_is_the_goal_and_goals_are_seeded() -> None:
    env = SimpleEnv(64, continuous=False, seed=3)
    (obs,) = env.reset()
    assert obs.shape == (64, 1) and obs.dtype == np.float32
    assert set(np.unique(obs)) == {-1.0, 1.0}
    (again,) = SimpleEnv(64, continuous=False, seed=3).reset()
    np.testing.assert_array_equal(obs, again)


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_expert_reaches_the_goal_in_five_steps_with_the_best_return(continuous: bool) -> None:
    env = SimpleEnv(8, continuous=continuous, seed=0)
    (obs,) = env.reset()
    total = np.zeros(8)
    for step in range(5):
        (next_obs,), rewards, terminated, truncated = env.step(*expert_actions(obs, continuous))
        total += rewards
        assert not truncated.any()
        assert terminated.all() == (step == 4)
        np.testing.assert_array_equal(next_obs, obs)  # the terminal obs is still the goal
    np.testing.assert_allclose(total, BEST_RETURN, atol=1e-6)
    assert BEST_RETURN == pytest.approx(1.02)


def test_wrong_way_ends_with_the_negative_reward() -> None:
    env = SimpleEnv(1, continuous=False, seed=0)
    (obs,) = env.reset()
    wrong = _discrete([0 if obs[0, 0] > 0 else 1])
    rewards = [env.step(_no_continuous(1), wrong)[1][0] for _ in range(5)]
    np.testing.assert_allclose(rewards, [-STEP_COST] * 4 + [-SUCCESS_REWARD], atol=1e-6)


def test_continuous_actions_are_clipped_to_one() -> None:
    env = SimpleEnv(1, continuous=True, seed=0)
    (obs,) = env.reset()
    flags = [env.step(obs * 10.0, np.zeros((1, 0), np.int32))[2][0] for _ in range(5)]
    assert flags == [False] * 4 + [True]  # five steps of 0.2, however large the action


def test_truncated_after_max_episode_steps_then_autoreset() -> None:
    env = SimpleEnv(2, continuous=True, seed=1, max_episode_steps=MAX_EPISODE_STEPS)
    env.reset()
    still = np.zeros((2, 1), np.float32)
    for _ in range(MAX_EPISODE_STEPS - 1):
        _, rewards, terminated, truncated = env.step(still, np.zeros((2, 0), np.int32))
        assert not terminated.any() and not truncated.any()
        np.testing.assert_allclose(rewards, -STEP_COST)
    _, rewards, terminated, truncated = env.step(still, np.zeros((2, 0), np.int32))
    assert truncated.all() and not terminated.any()
    np.testing.assert_allclose(rewards, -STEP_COST)
    # Next-step auto-reset: the action is ignored, reward 0, no flags; the episode starts over.
    _, rewards, terminated, truncated = env.step(np.ones((2, 1), np.float32), np.zeros((2, 0), np.int32))
    np.testing.assert_array_equal(rewards, 0.0)
    assert not terminated.any() and not truncated.any()
    _, rewards, terminated, _ = env.step(still, np.zeros((2, 0), np.int32))
    np.testing.assert_allclose(rewards, -STEP_COST)


def test_autoreset_is_per_copy() -> None:
    env = SimpleEnv(2, continuous=False, seed=0)
    (obs,) = env.reset()
    right = expert_actions(obs, False)[1]
    right[1] = 1 - right[1]  # copy 1 walks the wrong way: both end after 5 steps anyway
    for _ in range(4):
        env.step(_no_continuous(2), right)
    _, _, terminated, _ = env.step(_no_continuous(2), right)
    assert terminated.all()
    _, rewards, terminated, truncated = env.step(_no_continuous(2), right)
    np.testing.assert_array_equal(rewards, [0.0, 0.0])
    assert not (terminated | truncated).any()


def test_bad_actions_raise() -> None:
    env = SimpleEnv(2, continuous=False, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="0 or 1"):
        env.step(_no_continuous(2), _discrete([0, 2]))
    with pytest.raises(ValueError, match="num_agents"):
        SimpleEnv(0, continuous=True)


# -- run_env: a recording session at the true edge (the network) --------------------------------


class _RecordingSession:
    """Answers each step with the expert's actions and records the rows it was sent."""

    def __init__(self, continuous: bool, version: int = 7) -> None:
        self.continuous = continuous
        self.version = version
        self.sent: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    async def step(
        self,
        behavior_name: str,
        agent_ids: np.ndarray,
        observations: Sequence[np.ndarray],
        rewards: np.ndarray,
        done: np.ndarray,
        max_reached: np.ndarray | None = None,
        action_mask: np.ndarray | None = None,
    ) -> ActionResult:
        assert max_reached is not None
        self.sent.append((agent_ids.copy(), observations[0].copy(), rewards.copy(), done.copy(), max_reached.copy()))
        continuous, discrete = expert_actions(observations[0], self.continuous)
        return ActionResult(continuous, discrete, self.version)


def _replay_experiences(sent: list[tuple[np.ndarray, ...]]) -> tuple[int, list[float]]:
    """Experiences and episode returns, recounted per agent from the rows sent (one agent at a time)."""
    experiences, returns = 0, []
    n = len(sent[0][0])
    for agent in range(n):
        first, total = True, 0.0
        for _, _, rewards, done, _ in sent:
            if not first:
                experiences += 1
                total += float(rewards[agent])
            if done[agent] and not first:
                returns.append(total)
                total = 0.0
            first = bool(done[agent])
    return experiences, returns


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
async def test_run_env_counts_what_the_rows_imply(continuous: bool) -> None:
    env = SimpleEnv(3, continuous=continuous, seed=2)
    session = _RecordingSession(continuous)
    stats = await run_env(session, env, "Simple1D", max_env_steps=20)  # type: ignore[arg-type]
    assert isinstance(stats, RunStats)
    assert stats.env_steps == 20 and stats.rows == 60
    # Episodes of 5 experiences, each followed by a first sighting: steps 0, 6, 12, 18 start episodes.
    assert stats.first_sightings == 3 * 4
    assert stats.experiences == 60 - 12
    assert stats.episodes == 3 * 3 and stats.truncated_episodes == 0
    np.testing.assert_allclose(stats.episode_returns, BEST_RETURN, atol=1e-6)
    assert stats.episode_lengths == [5] * 9
    assert stats.policy_versions == [7] * 20
    experiences, returns = _replay_experiences(session.sent)
    assert experiences == stats.experiences
    assert sorted(returns) == pytest.approx(sorted(stats.episode_returns))
    # The same ids throughout; a done row comes before the id's first sighting of the next episode.
    for ids, *_ in session.sent:
        np.testing.assert_array_equal(ids, [0, 1, 2])
    assert session.sent[5][3].all() and not session.sent[6][3].any()


async def test_run_env_marks_truncation_as_max_reached() -> None:
    env = SimpleEnv(2, continuous=True, seed=0, max_episode_steps=3)

    class Still(_RecordingSession):
        async def step(self, *args: object, **kwargs: object) -> ActionResult:
            await super().step(*args, **kwargs)  # type: ignore[arg-type]
            return ActionResult(np.zeros((2, 1), np.float32), np.zeros((2, 0), np.int32), 0)

    session = Still(True)
    stats = await run_env(session, env, "Simple1D", max_env_steps=5)  # type: ignore[arg-type]
    done, max_reached = session.sent[3][3], session.sent[3][4]
    assert done.all() and max_reached.all()
    assert stats.truncated_episodes == stats.episodes == 2
    np.testing.assert_allclose(stats.episode_returns, -3 * STEP_COST, atol=1e-6)


async def test_run_env_stops_on_the_event() -> None:
    stop = asyncio.Event()
    env = SimpleEnv(1, continuous=False, seed=0)

    class StopAfterThree(_RecordingSession):
        async def step(self, *args: object, **kwargs: object) -> ActionResult:
            if len(self.sent) == 2:
                stop.set()
            return await super().step(*args, **kwargs)  # type: ignore[arg-type]

    stats = await run_env(StopAfterThree(False), env, "Simple1D", stop=stop)  # type: ignore[arg-type]
    assert stats.env_steps == 3
    with pytest.raises(ValueError, match="never ends"):
        await run_env(StopAfterThree(False), env, "Simple1D")  # type: ignore[arg-type]


# -- image mode ----------------------------------------------------------------------------------


def test_image_mode_declares_only_a_uint8_image() -> None:
    params = SimpleEnv(2, continuous=False, image_shape=(6, 10, 3)).brain_parameters
    (spec,) = params.observation_specs
    assert spec.shape == (6, 10, 3) and spec.dtype == np.uint8 and spec.is_image
    assert params.action_spec.discrete_branches == (2,)


def test_image_shows_the_goal_half_and_the_position_column() -> None:
    env = SimpleEnv(2, continuous=False, seed=1, image_shape=(3, 6, 2))
    env.reset()
    env._goal[:] = [1.0, -1.0]  # right for copy 0, left for copy 1
    (images,), *_ = env.step(_no_continuous(2), _discrete([1, 1]))  # both move right to 0.2
    assert images.shape == (2, 3, 6, 2) and images.dtype == np.uint8
    # Position 0.2 -> column round(0.6 * 5) = 3; the goal's half (columns 3-5 or 0-2) is 255.
    np.testing.assert_array_equal(images[0, 0, :, 0], [0, 0, 0, 128, 255, 255])
    np.testing.assert_array_equal(images[1, 0, :, 0], [255, 255, 255, 128, 0, 0])
    assert (images == images[:, :1, :, :1]).all(), "every row and channel alike"
    np.testing.assert_array_equal(goal_of_images(images), [[1.0], [-1.0]])


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_image_mode_keeps_the_rewards_and_dones(continuous: bool) -> None:
    """The scripted expert, reading the goal off the image, earns the vector task's best return in five steps."""
    env = SimpleEnv(8, continuous=continuous, seed=0, image_shape=(4, 8, 1))
    vector = SimpleEnv(8, continuous=continuous, seed=0)
    (obs,) = env.reset()
    (goal,) = vector.reset()
    np.testing.assert_array_equal(goal_of_images(obs), goal)
    total = np.zeros(8)
    for step in range(5):
        actions = scripted_expert([obs], env.brain_parameters.action_spec)
        (obs,), rewards, terminated, truncated = env.step(*actions)
        _, vector_rewards, vector_terminated, _ = vector.step(*actions)
        np.testing.assert_array_equal(rewards, vector_rewards)
        np.testing.assert_array_equal(terminated, vector_terminated)
        total += rewards
        assert terminated.all() == (step == 4) and not truncated.any()
    np.testing.assert_allclose(total, BEST_RETURN, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 1, 3), (4, 4), (0, 4, 3)])
def test_bad_image_shape_raises(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="image_shape"):
        SimpleEnv(1, continuous=False, image_shape=shape)  # type: ignore[arg-type]
