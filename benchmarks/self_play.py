"""Self-play on Race (``tests.race_game``): the ELO curve and the final policy's win rates, per seed.

Each seed trains PPO with ``self_play`` in one process (``tests.race_game.train_race``: the real processor on
loopback, the trainer loop in a thread, 32 games played as two teams), then plays ``--episodes`` games of the final
policy (as player 0) against a uniformly random player, the scripted player (which random loses to), and each
snapshot the processor still holds. Per seed it logs the ELO curve (sampled) and the three win rates; the last line
is one JSON object:

* ``elo_rises``: true when the final ELO is above the initial one in every seed;
* ``win_vs_random``, ``win_vs_scripted``, ``win_vs_snapshots``: fractions of episodes won, median over seeds;
* ``agent_rows_per_s_one_policy`` / ``_two_policies`` and ``self_play_overhead`` (1 - two / one): the Race client's
  throughput through the processor with fixed policies, both teams acting with one policy (no ``self_play``), then
  the opponents with a snapshot (two policies, one pass each), ``--overhead-s`` seconds each after a 1 s warm-up,
  alternating, three times each (medians);
* ``seeds``: the per-seed figures.

The best play (always toward the coin) wins about 71% against the scripted player and about 80% against random;
a draw counts as not won.

Usage: ``python -m benchmarks.self_play --seeds 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import statistics
import time

import numpy as np

from common.config import (
    SelfPlaySettings,
)
from common.topics import TRAINER_SUBSCRIBER
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.inference import Policy
from processor.server import ProcessorServer, ServerOptions
from tests.race_game import (
    BEHAVIOR,
    INITIAL_ELO,
    PARAMS,
    Player,
    play,
    play_as_two_teams,
    race_settings,
    random_actions,
    scripted_actions,
    train_race,
)
from trainer.registry import make_learner

log = logging.getLogger("benchmarks.self_play")


def player(policy: Policy, rng: np.random.Generator) -> Player:
    return lambda obs: policy.act([obs], None, rng).discrete_actions[:, 0]


def win_rate(first: Player, second: Player, episodes: int, rng: np.random.Generator) -> float:
    return float((play(first, second, episodes, rng) > 0).mean())


def run_seed(seed: int, max_steps: int, episodes: int, timeout_s: float) -> dict[str, object]:
    run = train_race(race_settings(max_steps), seed, timeout_s)
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


async def _throughput(self_play: bool, seconds: float, games: int, seed: int) -> float:
    """Agent rows per second (both teams) of the Race client through a processor serving fixed policies: with
    ``self_play`` the opponents act with a snapshot (two policies in use), without it both teams with one."""
    behavior = race_settings(10**6)
    runtime = BehaviorRuntime.from_settings(behavior)
    snapshot_settings = SelfPlaySettings(play_against_latest_model_ratio=0.0, swap_steps=10**9, team_change=10**6)
    runtime = dataclasses.replace(runtime, self_play=snapshot_settings if self_play else None)
    server = ProcessorServer(ProcessorSettings(behaviors={BEHAVIOR: runtime}, strict=True, seed=seed), ServerOptions(port=0))
    port = await server.start()
    learner = make_learner(PARAMS, behavior, seed)
    server.topics.policies(BEHAVIOR).publish(learner.export_policy(1, 0), 1)
    if self_play:
        snapshot = learner.export_policy(0, 0)
        snapshot.snapshot = 1
        server.topics.snapshots(BEHAVIOR).publish(snapshot, 1)
    subscription = server.topics.trajectories(BEHAVIOR).subscribe(TRAINER_SUBSCRIBER)

    async def drain() -> None:
        while True:
            deliveries = await subscription.aget(timeout_s=0.05)
            subscription.ack(d.tag for d in deliveries)

    drainer = asyncio.ensure_future(drain())
    stop, progress = asyncio.Event(), [0]
    client = asyncio.ensure_future(play_as_two_teams(f"127.0.0.1:{port}", games, seed, stop, progress))
    await asyncio.sleep(1.0)  # warm-up
    first, started = progress[0], time.perf_counter()
    await asyncio.sleep(seconds)
    rounds, elapsed = progress[0] - first, time.perf_counter() - started
    stop.set()
    await asyncio.wait([client], timeout=10.0)
    drainer.cancel()
    await server.stop(1.0)
    return rounds * 2 * games / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=24000)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--overhead-s", type=float, default=10.0, help="seconds measured per arm (0: skip)")
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

    elo_rises = bool(per_seed) and all(f["elo_final"] is not None and float(f["elo_final"]) > INITIAL_ELO for f in per_seed)  # type: ignore[arg-type]
    one = two = None
    if args.overhead_s > 0:  # the arms alternate, three times each, against a shared machine's drift: medians
        arms: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(3):
            for self_play in (False, True):
                arms[self_play].append(asyncio.run(_throughput(self_play, args.overhead_s, 32, 0)))
        one, two = statistics.median(arms[False]), statistics.median(arms[True])
        log.info("throughput (agent rows/s): one policy %s, two policies %s", arms[False], arms[True])
    summary = {
        "elo_rises": elo_rises,
        "win_vs_random": median("win_vs_random"),
        "win_vs_scripted": median("win_vs_scripted"),
        "win_vs_snapshots": median("win_vs_snapshots"),
        "agent_rows_per_s_one_policy": one,
        "agent_rows_per_s_two_policies": two,
        "self_play_overhead": None if not one or two is None else 1.0 - two / one,
        "seeds": per_seed,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
