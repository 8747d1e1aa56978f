"""Self-play on Race (``tests.race_game``): the ELO curve and the final policy's win rates, per seed.

Each seed trains PPO with ``self_play`` in one process (``tests.race_game.train_race``: the real processor on
loopback, the trainer loop in a thread, 32 games played as two teams), then plays ``--episodes`` games of the final
policy (as player 0) against a uniformly random player, the scripted player (which random loses to), and each
snapshot the processor still holds. Per seed it logs the ELO curve (sampled) and the three win rates; the last line
is one JSON object:

* ``elo_rises``: true when the final ELO is above the initial one in every seed;
* ``win_vs_random``, ``win_vs_scripted``, ``win_vs_snapshots``: fractions of episodes won, median over seeds;
* ``seeds``: the per-seed figures.

The best play (always toward the coin) wins about 71% against the scripted player and about 80% against random;
a draw counts as not won.

Usage: ``python -m benchmarks.self_play --seeds 3``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics

import numpy as np

from common.config import (
    BehaviorSettings,
    NetworkSettings,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    ScheduleType,
    SelfPlaySettings,
)
from processor.inference import Policy
from tests.race_game import Player, play, random_actions, scripted_actions, train_race

log = logging.getLogger("benchmarks.self_play")
INITIAL_ELO = 1200.0


def settings(max_steps: int) -> BehaviorSettings:
    """The learning test's settings (``tests/learning/test_self_play_learning.py``), with ``max_steps``."""
    return BehaviorSettings(
        hyperparameters=PPOHyperparameters(
            batch_size=128,
            buffer_size=1024,
            learning_rate=3e-3,
            learning_rate_schedule=ScheduleType.CONSTANT,
            beta=5e-3,
            num_epoch=3,
        ),
        network_settings=NetworkSettings(hidden_units=32, num_layers=1),
        reward_signals={RewardSignalType.EXTRINSIC: RewardSignalSettings(gamma=0.95)},
        time_horizon=32,
        summary_freq=4000,
        max_steps=max_steps,
        self_play=SelfPlaySettings(save_steps=2000, team_change=8000, swap_steps=1000, window=5, initial_elo=INITIAL_ELO),
    )


def player(policy: Policy, rng: np.random.Generator) -> Player:
    return lambda obs: policy.act([obs], None, rng).discrete_actions[:, 0]


def win_rate(first: Player, second: Player, episodes: int, rng: np.random.Generator) -> float:
    return float((play(first, second, episodes, rng) > 0).mean())


def run_seed(seed: int, max_steps: int, episodes: int, timeout_s: float) -> dict[str, object]:
    run = train_race(settings(max_steps), seed, timeout_s)
    assert run.policy is not None
    rng = np.random.default_rng(10_000 + seed)
    final = player(run.policy, rng)
    against_snapshots = [win_rate(final, player(p, rng), episodes, rng) for p in run.snapshots.values()]
    elo = run.loop.elo
    return {
        "seed": seed,
        "steps": run.loop.result.steps,
        "elo_final": elo,
        "elo_curve": [(steps, round(value, 1)) for steps, value in run.elo_curve[:: max(1, len(run.elo_curve) // 12)]],
        "win_vs_random": win_rate(final, random_actions(rng), episodes, rng),
        "win_vs_scripted": win_rate(final, scripted_actions(rng), episodes, rng),
        "win_vs_snapshots": float(np.mean(against_snapshots)) if against_snapshots else None,
        "snapshots": len(against_snapshots),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=24000)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)
    per_seed = []
    for seed in range(args.seeds):
        figures = run_seed(seed, args.max_steps, args.episodes, args.timeout_s)
        log.info("seed %d: %s", seed, json.dumps(figures))
        per_seed.append(figures)

    def median(key: str) -> float | None:
        values = [float(f[key]) for f in per_seed if f[key] is not None]  # type: ignore[arg-type]
        return statistics.median(values) if values else None

    elo_rises = all(f["elo_final"] is not None and float(f["elo_final"]) > INITIAL_ELO for f in per_seed)  # type: ignore[arg-type]
    summary = {
        "elo_rises": elo_rises,
        "win_vs_random": median("win_vs_random"),
        "win_vs_scripted": median("win_vs_scripted"),
        "win_vs_snapshots": median("win_vs_snapshots"),
        "seeds": per_seed,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
