"""Worked example: connect your own multi-agent simulator to a stepstream processor.

The simulator here is a toy: ``N`` walkers on a line, each trying to reach its own target. Agents
finish their episodes at different steps, and a finished agent is replaced by a *new* agent id, as
in many game engines. What matters is the protocol, one BrainInfo per step:

* every agent that needs a decision appears once, with its observation and the reward it got
  since its previous row;
* an agent whose episode ended appears once more with ``done=True`` and its final observation
  (and ``max_reached=True`` if a time limit ended it); the action returned for that row is
  ignored, and the id is not used again unless it starts a new episode;
* agents may skip steps (not every agent must decide every step).

Run a processor and a trainer first (or ``stepstream train``'s embedded mode for gym envs), e.g.::

    stepstream processor configs/simple_ppo.yaml --port 50051 &
    stepstream trainer configs/simple_ppo.yaml --behavior Walker ...   # a config naming Walker
    python examples/custom_simulator.py --processor 127.0.0.1:50051 --steps 1000
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import numpy as np

from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient import EnvSession

log = logging.getLogger("examples.custom_simulator")

BEHAVIOR = "Walker"
#: obs = (position, target), one continuous action = velocity in [-1, 1].
WALKER = BrainParameters(BEHAVIOR, (ObservationSpec((2,), np.dtype(np.float32)),), ActionSpec(1))
MAX_EPISODE_STEPS = 50


class Walkers:
    """The toy simulator: ``n`` agents, each replaced by a fresh id when its episode ends."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.ids = np.arange(n, dtype=np.int64)
        self.next_id = n
        self.position = np.zeros(n, np.float32)
        self.target = self.rng.uniform(-1, 1, n).astype(np.float32)
        self.age = np.zeros(n, np.int64)

    def observations(self) -> np.ndarray:
        return np.stack([self.position, self.target], axis=1)

    def apply(self, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Move every agent; returns (rewards, reached, timed_out), each [n]."""
        self.position += 0.1 * velocity[:, 0]
        self.age += 1
        distance = np.abs(self.position - self.target)
        reached = distance < 0.05
        timed_out = ~reached & (self.age >= MAX_EPISODE_STEPS)
        rewards = np.where(reached, 1.0, -0.01).astype(np.float32)
        return rewards, reached, timed_out

    def replace(self, finished: np.ndarray) -> None:
        """New agents (new ids) take the finished agents' places."""
        count = int(finished.sum())
        self.ids[finished] = np.arange(self.next_id, self.next_id + count)
        self.next_id += count
        self.position[finished] = 0.0
        self.target[finished] = self.rng.uniform(-1, 1, count)
        self.age[finished] = 0


async def run(address: str, agents: int, steps: int) -> int:
    """Drive the simulator through the processor for ``steps`` steps; returns the episodes reported done.

    Agents still running when it stops (or that finished on the very last step, whose done row is
    never sent) are flushed by the processor as interrupted partial trajectories when the session
    closes."""
    sim = Walkers(agents)
    rewards = np.zeros(agents, np.float32)
    episodes = 0
    # Rows of agents that finished last step: sent once more with done=True and their final obs.
    finished_ids = np.zeros(0, np.int64)
    finished_obs = np.zeros((0, 2), np.float32)
    finished_rewards = np.zeros(0, np.float32)
    finished_timeout = np.zeros(0, bool)
    async with EnvSession(address, "custom-simulator", [WALKER]) as session:
        for _ in range(steps):
            n_done = len(finished_ids)
            result = await session.step(
                BEHAVIOR,
                agent_ids=np.concatenate([finished_ids, sim.ids]),
                observations=[np.concatenate([finished_obs, sim.observations()])],
                rewards=np.concatenate([finished_rewards, rewards]),
                done=np.concatenate([np.ones(n_done, bool), np.zeros(agents, bool)]),
                max_reached=np.concatenate([finished_timeout, np.zeros(agents, bool)]),
            )
            episodes += n_done
            velocity = result.continuous_actions[n_done:]  # the done rows' actions are ignored
            rewards, reached, timed_out = sim.apply(velocity)
            finished = reached | timed_out
            finished_ids, finished_obs = sim.ids[finished].copy(), sim.observations()[finished]
            finished_rewards, finished_timeout = rewards[finished], timed_out[finished]
            sim.replace(finished)
            rewards = np.where(finished, 0.0, rewards).astype(np.float32)  # new agents start at 0
    log.info("%d steps, %d episodes finished", steps, episodes)
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processor", default="127.0.0.1:50051", help="processor address")
    parser.add_argument("--agents", type=int, default=16, help="agents in the simulator")
    parser.add_argument("--steps", type=int, default=1000, help="simulator steps to run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(args.processor, args.agents, args.steps))


if __name__ == "__main__":
    main()
