"""PPO learns the 1-D task (``envclient.simple_env``) through ``stepstream unity``'s gateway.

Each env client is a gateway on port 0 in front of the real processor and a fake Unity
(``tests.unity_fake``) that wraps a ``SimpleEnv`` as Unity would: one agent info per copy and step,
a done copy's terminal info gets no action, and its next episode comes with a new agent id (a real player keeps
the id, ``tests.unity_player``; the processor takes either). Same
settings, threshold and step budget as ``test_ppo_learning``.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from envclient.runner import RunStats
from envclient.simple_env import SimpleEnv
from envclient.unity.gateway import GatewayServer, GatewaySettings
from tests.learning import harness
from tests.learning.test_ppo_learning import QUEUE_SIZE, STEP_BUDGET, WINDOW, ppo_settings, reached
from tests.unity_fake import FakeUnity, agent_info, brain_proto

pytestmark = pytest.mark.learning


async def unity_client(address: str, index: int, continuous: bool, agents: int, seed: int, stop: asyncio.Event) -> RunStats:
    """One gateway and a fake Unity around ``agents`` copies of the 1-D task, stepped until ``stop``."""
    env = SimpleEnv(agents, continuous=continuous, behavior_name=harness.BEHAVIOR, seed=seed * 1000 + index)
    action_spec = env.brain_parameters.action_spec
    gateway = GatewayServer(GatewaySettings(processor=address, client_id=f"unity-{index}"), port=0)
    unity = FakeUnity(f"127.0.0.1:{await gateway.start()}")
    unity.brains[harness.BEHAVIOR] = brain_proto(harness.BEHAVIOR, action_spec.continuous_size, action_spec.discrete_branches)
    stats = RunStats()
    ids = np.arange(agents)
    (obs,) = env.reset()
    rewards, done, truncated = np.zeros(agents, np.float32), np.zeros(agents, bool), np.zeros(agents, bool)
    await unity.start()
    try:
        while not stop.is_set():
            infos = [
                agent_info(int(ids[i]), [obs[i].tolist()], float(rewards[i]), bool(done[i]), bool(truncated[i]))
                for i in range(agents)
            ]
            reply = await unity.step({harness.BEHAVIOR: infos})
            assert reply.header.status == 200, reply.header.message
            continuous_actions = np.zeros((agents, action_spec.continuous_size), np.float32)
            discrete_actions = np.zeros((agents, action_spec.num_branches), np.int32)
            for i, action in zip(
                np.flatnonzero(~done), reply.unity_input.rl_input.agent_actions[harness.BEHAVIOR].value, strict=True
            ):
                continuous_actions[i] = action.continuous_actions
                discrete_actions[i] = action.discrete_actions
            stats.env_steps += 1
            stats.rows += agents
            stats.episodes += int(done.sum())
            ids[done] = ids.max() + 1 + np.arange(int(done.sum()))  # a new id per episode (valid, if not what Unity does)
            stats.first_sightings += int(done.sum()) + (agents if stats.env_steps == 1 else 0)
            (obs,), rewards, terminated, truncated = env.step(continuous_actions, discrete_actions)
            done = terminated | truncated
    finally:
        await unity.stop()
        await gateway.stop()
    return stats


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_ppo_reaches_the_goal_through_the_gateway(continuous: bool) -> None:
    budget = STEP_BUDGET[continuous]
    run = harness.train_on_simple_env(
        ppo_settings(),
        continuous=continuous,
        seed=0,
        max_trainer_steps=budget,
        should_stop=reached,
        timeout_s=240.0,
        client=unity_client,
    )
    result = run.trainer
    harness.assert_stopped_at_condition(result, WINDOW)
    assert result.steps <= budget + QUEUE_SIZE * 64 and result.updates >= 2
