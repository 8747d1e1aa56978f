"""MA-POCA against independent PPO on mpe2's ``simple_spread`` (PettingZoo parallel API, 3 agents), reward fully
shared (``local_ratio=0``): the cooperative setting of the MAPPO paper (Yu et al. 2022, arXiv:2103.01955).

Each run trains the one behavior (``agent``: one group per env copy) through the whole pipeline in one process
(``tests/learning/multiagent_harness.py``): ``--num-envs`` copies in one session, the real processor, the trainer
loop, for ``--steps`` agent experiences, with the same settings for both trainers but ``trainer_type``. An episode
lasts ``max_cycles`` = 25 steps (truncated: interrupted). Figures: per run, the mean over the last 100 episodes
of the episode return (the shared reward summed over an episode, as one agent sees it); per trainer, the median
over seeds. A random policy's return on the same envs is measured too.

Needs mpe2 (``pip install mpe2``). usage: multiagent.py [--steps 60000] [--seeds 0 1 2] [--num-envs 16]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from typing import Any

import numpy as np

from common.config import BehaviorSettings, NetworkSettings, POCAHyperparameters, PPOHyperparameters, TrainerType
from tests.learning.multiagent_harness import train_pettingzoo

log = logging.getLogger("benchmarks.multiagent")
BEHAVIOR = "agent"
WINDOW = 100


def make_env() -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(N=3, local_ratio=0.0, max_cycles=25, continuous_actions=False)


def settings(trainer: TrainerType, steps: int) -> BehaviorSettings:
    common: dict[str, Any] = dict(batch_size=512, buffer_size=4096, learning_rate=1e-3, beta=0.01, num_epoch=4, lambd=0.95)
    hp = POCAHyperparameters(**common) if trainer is TrainerType.POCA else PPOHyperparameters(**common)
    return BehaviorSettings(
        trainer_type=trainer,
        hyperparameters=hp,
        network_settings=NetworkSettings(hidden_units=64, num_layers=2),
        max_steps=steps,
        time_horizon=25,
        summary_freq=steps,
        max_queued_trajectories=4096 // 25,
    )


def final_return(episode_returns: dict[str, list[float]]) -> float:
    """Mean over the last ``WINDOW`` episodes of ``agent_0``'s return (every agent's is the same: the reward is shared)."""
    returns = episode_returns.get("agent_0", [])
    return float(np.mean(returns[-WINDOW:])) if returns else float("nan")


def random_return(episodes: int = 200, seed: int = 0) -> float:
    env = make_env()
    rng = np.random.default_rng(seed)
    totals = []
    for k in range(episodes):
        env.reset(seed=seed + k)
        total = 0.0
        while env.agents:
            actions = {a: int(rng.integers(5)) for a in env.agents}
            _, rewards, _, _, _ = env.step(actions)
            total += float(rewards.get("agent_0", 0.0))
        totals.append(total)
    return float(np.mean(totals))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60_000, help="agent experiences per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-envs", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out: dict[str, Any] = {"benchmark": "multiagent_simple_spread", "agent_steps": args.steps, "seeds": args.seeds}
    for trainer in (TrainerType.POCA, TrainerType.PPO):
        finals, seconds = [], []
        for seed in args.seeds:
            stats, wall = train_pettingzoo(
                make_env, BEHAVIOR, settings(trainer, args.steps), seed=seed, num_envs=args.num_envs, timeout_s=3600
            )
            finals.append(final_return(stats.episode_returns))
            seconds.append(wall)
            log.info("%s seed %d: final return %.2f in %.0f s", trainer.value, seed, finals[-1], wall)
        out[f"{trainer.value}_final_return"] = round(statistics.median(finals), 3)
        out[f"{trainer.value}_final_returns"] = [round(f, 3) for f in finals]
        out[f"{trainer.value}_seconds"] = round(sum(seconds), 1)
    out["random_return"] = round(random_return(), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
