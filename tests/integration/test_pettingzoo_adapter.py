"""PettingZoo through the real server: a small parallel env of our own (``tests/pettingzoo_envs.TwoTeams``) with
known rewards, two copies (``num_envs``), behaviors and teams by the one rule, every reward and group reward
conserved exactly into the trajectories, leaving as done and truncation as interrupted."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from common.env_paths import behavior_name_for_env
from common.errors import ConfigError, NotSupportedYetError
from envclient.pettingzoo_adapter import PettingZooClient, behavior_of, from_pettingzoo_path
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings
from tests.pettingzoo_envs import EPISODE_STEPS, reward, two_teams


def test_the_rule_for_behaviors_teams_and_groups() -> None:
    assert [behavior_of(a) for a in ("adversary_0", "agent_12", "leader", "a_b_3")] == ["adversary", "agent", "leader", "a_b"]
    client = PettingZooClient(two_teams, num_envs=2, teams={"blue": 1})
    assert sorted(client.brain_parameters) == ["blue", "red"]
    assert [client.agent_id(c, a) for c in (0, 1) for a in ("red_0", "red_1", "blue_0")] == [0, 1, 2, 3, 4, 5]
    # One group per team per copy.
    assert [client.group_id(c, a) for c in (0, 1) for a in ("red_0", "red_1", "blue_0")] == [1, 1, 2, 3, 3, 4]
    overridden = PettingZooClient(two_teams, behaviors={"blue_0": "red"})
    assert list(overridden.brain_parameters) == ["red"]


def test_env_paths() -> None:
    client = from_pettingzoo_path("pettingzoo:tests.pettingzoo_envs:two_teams")
    assert sorted(client.brain_parameters) == ["blue", "red"]
    with pytest.raises(ConfigError, match="did you mean 'two_teams'"):
        from_pettingzoo_path("pettingzoo:tests.pettingzoo_envs:two_team")
    with pytest.raises(ConfigError, match="is not pettingzoo:MODULE:FUNCTION"):
        from_pettingzoo_path("pettingzoo:no colon")
    with pytest.raises(NotSupportedYetError, match="stepstream train does not host pettingzoo"):
        behavior_name_for_env("pettingzoo:tests.pettingzoo_envs:two_teams")


async def test_rewards_are_conserved_into_the_trajectories(start_processor: StartProcessor) -> None:
    client = PettingZooClient(two_teams, num_envs=2, seed=5, teams={"blue": 1})
    runtimes = {name: BehaviorRuntime(time_horizon=3) for name in client.brain_parameters}
    server, address = await start_processor(itest_settings(behaviors=runtimes))
    harness = Harness(server, address)
    for params in client.brain_parameters.values():
        harness.publish_policy(params, version=1)
    episodes = 3
    steps = episodes * (EPISODE_STEPS + 1)  # each episode's steps, and the reset step after it
    session = EnvSession(address, "pettingzoo", list(client.brain_parameters.values()))
    await session.open()
    await client.run(session, max_env_steps=steps)
    await session.close()
    trajectories = [t for name in client.brain_parameters for t in await harness.claim(name)]

    per_agent = defaultdict(list)
    for t in sorted(trajectories, key=lambda t: t.id.sequence):
        per_agent[t.id.agent_id].append(t)
    names = client.possible_agents
    for copy in (0, 1):
        for agent in names:
            mine = per_agent[client.agent_id(copy, agent)]
            # The actions the processor chose are in the trajectories: the env's reward follows from them.
            actions = np.concatenate([t.discrete_actions[:, 0] for t in mine])
            rewards = np.concatenate([t.rewards for t in mine])
            length = 2 if agent == "red_1" else EPISODE_STEPS
            assert len(rewards) == episodes * length, agent
            want = [reward(agent, k % length + 1, int(a)) for k, a in enumerate(actions)]
            np.testing.assert_array_equal(rewards, np.array(want, np.float32), err_msg=agent)
            ends = [t for t in mine if t.done_reached]
            assert len(ends) == episodes
            # Leaving is done; truncation is interrupted, not terminal.
            assert all(t.interrupted == (agent == "blue_0") for t in ends), agent
            group_rewards = np.concatenate([t.group.group_rewards for t in mine])
            np.testing.assert_array_equal(group_rewards, 0.5 if agent.startswith("red") else 0.0)
            # red_0's groupmate is red_1 while it is there (its first 2 steps of each episode); blue_0 has none.
            seen = np.concatenate([(t.group.groupmate_status != 0).sum(axis=1) for t in mine])
            if agent == "red_0":
                assert seen.tolist() == [1, 0, 0, 0] * episodes
            elif agent == "blue_0":
                assert not seen.any()
