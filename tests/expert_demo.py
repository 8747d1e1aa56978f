"""A recorded expert demonstration of the 1-D task (``envclient.simple_env``), as a real ML-Agents ``.demo`` file.

``write_expert_demo`` rolls the scripted expert (``simple_env.expert_actions``) on one agent for ``steps``
env steps and writes one record per step with ``common.demo.encode_demo``, as ML-Agents' recorder does:
record t holds the agent info the action was chosen on (obs, the reward and done that *arrived* with
it) and that action. After a done, the next record is the new episode's first obs with reward 0 (the env's
auto-reset step, whose action it ignores); the expert's action is still recorded on every record, so every
``demo_to_buffer`` row carries the expert's choice for its obs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.demo import encode_demo
from envclient.simple_env import SimpleEnv, expert_actions
from protos import mlagents_demo_pb2 as demo_pb

DEMO_STEPS = 100
"""Records in the demonstration (the issue's 100-step expert demo)."""


def _pair(
    obs: np.ndarray, reward: float, done: bool, max_step: bool, continuous: np.ndarray, discrete: np.ndarray
) -> demo_pb.AgentInfoActionPairProto:
    pair = demo_pb.AgentInfoActionPairProto()
    info = pair.agent_info
    info.reward, info.done, info.max_step_reached = float(reward), bool(done), bool(max_step)
    observation = info.observations.add(shape=[obs.size], name="goal")
    observation.float_data.data.extend(obs.astype(np.float32).ravel().tolist())
    pair.action_info.continuous_actions.extend(continuous.ravel().tolist())
    pair.action_info.discrete_actions.extend(int(a) for a in discrete.ravel())
    return pair


def write_expert_demo(
    path: Path, continuous: bool, steps: int = DEMO_STEPS, seed: int = 0, behavior_name: str = "Simple1D"
) -> Path:
    """Writes ``steps`` records of the scripted expert on the 1-D task to ``path`` (a ``.demo`` file).

    Args:
        path: the file to write; its folder must exist.
        continuous: the action kind of the task (one continuous action, or one branch of 2).
        steps: records (env steps of the one agent).
        seed: seeds the goals.
        behavior_name: the brain name recorded.

    Returns:
        ``path``.
    """
    env = SimpleEnv(1, continuous=continuous, behavior_name=behavior_name, seed=seed)
    (obs,) = env.reset()
    reward, done, max_step = 0.0, False, False
    pairs: list[demo_pb.AgentInfoActionPairProto] = []
    returns: list[float] = []
    episode_return = 0.0
    for _ in range(steps):
        continuous_actions, discrete_actions = expert_actions(obs, continuous)
        pairs.append(_pair(obs[0], reward, done, max_step, continuous_actions[0], discrete_actions[0]))
        (obs,), rewards, terminated, truncated = env.step(continuous_actions, discrete_actions)
        reward, done, max_step = float(rewards[0]), bool(terminated[0] or truncated[0]), bool(truncated[0])
        episode_return += reward
        if done:
            returns.append(episode_return)
            episode_return = 0.0
    meta = demo_pb.DemonstrationMetaProto(api_version=1, demonstration_name="expert", number_steps=steps)
    meta.number_episodes = len(returns)
    meta.mean_reward = float(np.mean(returns)) if returns else 0.0
    brain = demo_pb.BrainParametersProto(brain_name=behavior_name, is_training=False)
    brain.action_spec.num_continuous_actions = 1 if continuous else 0
    if not continuous:
        brain.action_spec.num_discrete_actions = 1
        brain.action_spec.discrete_branch_sizes.append(2)
    path.write_bytes(encode_demo(meta, brain, pairs))
    return path
