"""Worked example: connect your own multi-agent simulator, with two behaviors, to stepstream.

The simulator here is a toy: agents on a line, each trying to reach its own target. Half of them are
``Walker`` agents (one continuous action, a velocity in [-1, 1]); the others are ``Stepper`` agents (one
discrete branch of 3 choices: left, stay, right; "stay" masked out while the target is far). Agents finish
their episodes at different steps, and a finished agent is replaced by a *new* agent id, as in many game
engines. What matters is the protocol, one BrainInfo per behavior per step, both on one session:

* every agent that needs a decision appears once, with its observation and the reward it got since its
  previous row (an agent's first row has none: its reward is not used);
* an agent whose episode ended appears once more with ``done=True`` and its final observation (and
  ``max_reached=True`` if a time limit ended it); the action returned for that row is ignored, and the
  processor frees what it held for the agent: this is also how an agent leaves for good;
* agents may skip steps (one left out keeps its state);
* the two behaviors' steps run concurrently (``asyncio.gather``); the session takes them in turn;
* training ends with ``TrainingFinishedError`` at a step: every behavior reached its ``max_steps``.

Run it against ``stepstream train``, which serves SDK clients with ``--serve`` and ends when training does::

    stepstream train examples/custom_simulator.yaml --serve 50051 &
    python examples/custom_simulator.py --processor 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import numpy as np

from envclient import ActionResult, ActionSpec, BrainParameters, EnvSession, ObservationSpec, TrainingFinishedError

log = logging.getLogger("examples.custom_simulator")

BEHAVIOR = "Walker"
STEPPER = "Stepper"
#: obs = (position, target); Walker: one continuous action = velocity in [-1, 1].
WALKER = BrainParameters(BEHAVIOR, (ObservationSpec((2,)),), ActionSpec.continuous(1))
#: Stepper: one branch of 3 choices, velocity -1, 0 or +1.
STEPPER_PARAMS = BrainParameters(STEPPER, (ObservationSpec((2,)),), ActionSpec.discrete(3))
MAX_EPISODE_STEPS = 50
FAR = 0.5
"""A Stepper farther than this from its target may not stay (its mask forbids choice 1)."""


class Walkers:
    """The toy simulator of one behavior: ``n`` agents, each replaced by a fresh id when its episode ends."""

    def __init__(self, n: int, seed: int = 0, first_id: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.ids = np.arange(first_id, first_id + n, dtype=np.int64)
        self.next_id = first_id + n
        self.position = np.zeros(n, np.float32)
        self.target = self.rng.uniform(-1, 1, n).astype(np.float32)
        self.age = np.zeros(n, np.int64)

    def observations(self) -> np.ndarray:
        return np.stack([self.position, self.target], axis=1)

    def apply(self, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Move every agent by ``velocity`` [n]; returns (rewards, reached, timed_out), each [n]."""
        self.position += 0.1 * velocity
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


class Group:
    """One behavior's agents and the rows of its next BrainInfo: the live agents, after last step's finished ones."""

    def __init__(self, params: BrainParameters, sim: Walkers) -> None:
        self.params = params
        self.sim = sim
        n = len(sim.ids)
        self.rewards = np.zeros(n, np.float32)
        self.episodes = 0
        # Rows of agents that finished last step: sent once more with done=True and their final obs.
        self.finished_ids = np.zeros(0, np.int64)
        self.finished_obs = np.zeros((0, 2), np.float32)
        self.finished_rewards = np.zeros(0, np.float32)
        self.finished_timeout = np.zeros(0, bool)

    def step(self, session: EnvSession) -> asyncio.Future[ActionResult]:
        """Send this behavior's BrainInfo; its actions come back in the future."""
        n_done, n = len(self.finished_ids), len(self.sim.ids)
        obs = np.concatenate([self.finished_obs, self.sim.observations()])
        mask = None
        if self.params.action_spec.discrete_branches:
            mask = np.ones((n_done + n, 3), bool)
            mask[:, 1] = np.abs(obs[:, 0] - obs[:, 1]) <= FAR  # "stay" only near the target
        return asyncio.ensure_future(
            session.step(
                self.params.behavior_name,
                agent_ids=np.concatenate([self.finished_ids, self.sim.ids]),
                observations=[obs],
                rewards=np.concatenate([self.finished_rewards, self.rewards]),
                done=np.concatenate([np.ones(n_done, bool), np.zeros(n, bool)]),
                max_reached=np.concatenate([self.finished_timeout, np.zeros(n, bool)]),
                action_mask=mask,
            )
        )

    def apply(self, result: ActionResult) -> None:
        """Act on the live agents' actions (the done rows' are ignored) and prepare the next rows."""
        n_done = len(self.finished_ids)
        self.episodes += n_done
        if self.params.action_spec.discrete_branches:
            velocity = result.discrete_actions[n_done:, 0].astype(np.float32) - 1.0  # 0, 1, 2 -> -1, 0, +1
        else:
            velocity = result.continuous_actions[n_done:, 0]
        sim = self.sim
        rewards, reached, timed_out = sim.apply(velocity)
        finished = reached | timed_out
        self.finished_ids, self.finished_obs = sim.ids[finished].copy(), sim.observations()[finished]
        self.finished_rewards, self.finished_timeout = rewards[finished], timed_out[finished]
        sim.replace(finished)
        self.rewards = np.where(finished, 0.0, rewards).astype(np.float32)  # a new agent's first row: no reward


async def run(address: str, agents: int, steps: int | None = None) -> dict[str, int]:
    """Drive both behaviors through one session for ``steps`` steps, or until training finishes (None);
    returns the episodes reported done per behavior.

    Agents still running when it stops (or that finished on the very last step, whose done row is
    never sent) are flushed by the processor as interrupted partial trajectories when the session
    closes."""
    groups = [Group(WALKER, Walkers(agents, seed=0)), Group(STEPPER_PARAMS, Walkers(agents, seed=1, first_id=10**6))]
    taken = 0
    async with EnvSession(address, "custom-simulator", [g.params for g in groups]) as session:
        try:
            while steps is None or taken < steps:
                results = await asyncio.gather(*(g.step(session) for g in groups))
                for group, result in zip(groups, results, strict=True):
                    group.apply(result)
                taken += 1
        except TrainingFinishedError:
            log.info("training finished: every behavior reached its max_steps")
    episodes = {g.params.behavior_name: g.episodes for g in groups}
    log.info("%d steps, episodes finished: %s", taken, episodes)
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processor", default="127.0.0.1:50051", help="the address `stepstream train --serve` serves")
    parser.add_argument("--agents", type=int, default=16, help="agents per behavior")
    parser.add_argument("--steps", type=int, help="simulator steps to run (default: until training finishes)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(args.processor, args.agents, args.steps))


if __name__ == "__main__":
    main()
