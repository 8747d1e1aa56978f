"""CartPole through the real stack: ``GymVectorEnv`` -> ``run_env`` -> EnvSession -> processor -> trajectory topic.

A real exported MLP acts (sampled, unseeded). The env is recorded step by step, and every
trajectory the processor publishes is checked against what the env reported: an episode that
terminated is ``done_reached`` and not ``interrupted``; one truncated by the time limit is
``done_reached`` and ``interrupted``; each ends on the env's terminal obs with the episode's
length; and the session's close flushes the rest as interrupted, so every experience is published.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from common.trajectory import Trajectory
from envclient.gym_adapter import GymVectorEnv, from_env_path
from envclient.runner import VectorEnvWrapper, run_env
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings

NUM_ENVS = 8
ENV_STEPS = 50
MAX_EPISODE_STEPS = 14
"""Episodes end both ways: over 200 rollouts of this policy (8 copies, 50 steps) the fewest were 5
terminated and 7 truncated episodes."""
TIME_HORIZON = 8


@dataclass
class EpisodeEnd:
    terminated: bool
    truncated: bool
    terminal_obs: np.ndarray
    length: int


class RecordingGymEnv(VectorEnvWrapper):
    """A ``VectorEnv`` that forwards to a ``GymVectorEnv`` and records how each copy's episodes ended."""

    def __init__(self, env: GymVectorEnv) -> None:
        super().__init__(env)
        self.ends: dict[int, list[EpisodeEnd]] = defaultdict(list)
        self._lengths = np.zeros(env.num_agents, np.int64)

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        obs, rewards, terminated, truncated = self.env.step(continuous_actions, discrete_actions)
        ended = terminated | truncated
        self._lengths += 1
        for i in np.flatnonzero(ended):
            self.ends[int(i)].append(
                EpisodeEnd(bool(terminated[i]), bool(truncated[i]), obs[0][i].copy(), int(self._lengths[i]))
            )
        self._lengths[ended] = -1  # the next step is the auto-reset: no experience
        return obs, rewards, terminated, truncated


async def test_cartpole_trajectories_mark_terminated_and_truncated_episodes(start_processor: StartProcessor) -> None:
    env = RecordingGymEnv(
        from_env_path("gym:CartPole-v1", NUM_ENVS, seed=7, make_kwargs={"max_episode_steps": MAX_EPISODE_STEPS})
    )
    params = env.brain_parameters
    server, address = await start_processor(itest_settings(behaviors={"CartPole": BehaviorRuntime(time_horizon=TIME_HORIZON)}))
    harness = Harness(server, address)
    harness.publish_policy(params, version=1)
    session = EnvSession(address, "gym-cartpole", [params])
    await session.open()
    try:
        stats = await run_env(session, env, "CartPole", max_env_steps=ENV_STEPS)
    finally:
        await session.close()
        env.env.close()
    published = await harness.claim("CartPole")

    by_agent: dict[int, list[Trajectory]] = defaultdict(list)
    for trajectory in published:
        by_agent[trajectory.id.agent_id].append(trajectory)
    assert sorted(by_agent) == list(range(NUM_ENVS))
    ends = [end for agent_ends in env.ends.values() for end in agent_ends]
    assert any(e.terminated for e in ends) and any(e.truncated and not e.terminated for e in ends), (
        f"expected both kinds of episode end among {[(e.terminated, e.truncated, e.length) for e in ends]}"
    )
    for agent, trajectories in by_agent.items():
        done = [t for t in trajectories if t.done_reached]
        recorded = env.ends[agent]
        # Only episode ends the processor saw in a BrainInfo: the env's last step is never sent.
        assert len(done) in (len(recorded), len(recorded) - 1), f"agent {agent}: {len(done)} done vs {len(recorded)} ended"
        for t, end in zip(done, recorded, strict=False):
            label = f"agent {agent}, episode ending at length {end.length}"
            assert t.interrupted is (end.truncated and not end.terminated), f"{label}: interrupted"
            assert bool(t.done[-1]) and not t.done[:-1].any(), f"{label}: done flags"
            np.testing.assert_array_equal(t.next_obs[0], end.terminal_obs, err_msg=f"{label}: next_obs")
            assert t.episode_length == end.length and t.episode_reward == float(end.length), f"{label}: episode stats"
        for t in trajectories:
            assert (t.rewards == 1.0).all() and t.length <= TIME_HORIZON
            if not t.done_reached:  # cut at time_horizon (not interrupted), or the flush at close (interrupted)
                flushed = t is trajectories[-1] and t.length < TIME_HORIZON
                assert t.interrupted is flushed and t.episode_length is None, f"agent {agent}: a cut without done"
    assert sum(t.length for t in published) == stats.experiences, "every experience is published (the rest flushed)"
    assert sum(t.done_reached for t in published) == stats.episodes
    assert sum(t.done_reached and t.interrupted for t in published) == stats.truncated_episodes
