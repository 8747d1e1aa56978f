"""Self-play learns Race (``tests.race_game``) through the real processor and trainer loop, both teams one policy.

One process, as ``stepstream train`` runs: a ``ProcessorServer`` on loopback with in-process topics, a PPO
``TrainerLoop`` in a thread (its snapshots on ``snapshots/Race``), and one client playing ``GAMES`` games as two
sessions, team 0 and team 1. After training, the final policy plays the scripted opponent (which a random player
loses to) and must win most episodes; and its ELO, which the processor sends along with the trajectories, rose.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from common.config import (
    BehaviorSettings,
    NetworkSettings,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    ScheduleType,
    SelfPlaySettings,
)
from common.topics import TRAINER_SUBSCRIBER
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.inference import Policy
from processor.server import ProcessorServer, ServerOptions
from tests.race_game import BEHAVIOR, PARAMS, play, play_as_two_teams, random_actions, scripted_actions
from trainer.loop import TrainerLoop, configure_tf_threads
from trainer.registry import make_learner

pytestmark = pytest.mark.learning

SEED = 1
GAMES = 32
MAX_STEPS = 24000
"""Trainer steps (the learning team's experiences taken in)."""
EVAL_EPISODES = 400
TIMEOUT_S = 85.0


def race_settings() -> BehaviorSettings:
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
        max_steps=MAX_STEPS,
        self_play=SelfPlaySettings(save_steps=2000, team_change=8000, swap_steps=1000, window=5),
    )


async def _train(settings: BehaviorSettings) -> tuple[TrainerLoop, Policy]:
    configure_tf_threads()
    server = ProcessorServer(
        ProcessorSettings(behaviors={BEHAVIOR: BehaviorRuntime.from_settings(settings)}, strict=True, seed=SEED),
        ServerOptions(port=0),
    )
    port = await server.start()
    topics = server.topics
    loop = TrainerLoop(
        BEHAVIOR,
        make_learner(PARAMS, settings, SEED),
        topics.trajectories(BEHAVIOR).subscribe(TRAINER_SUBSCRIBER),
        topics.policies(BEHAVIOR),
        settings,
        results_dir=None,
        run_started_at=time.time(),
        seed=SEED,
        poll_s=0.05,
        snapshot_sink=topics.snapshots(BEHAVIOR),
    )
    trainer_stop, env_stop = threading.Event(), asyncio.Event()
    trainer = asyncio.ensure_future(asyncio.to_thread(loop.run, trainer_stop))
    client = asyncio.ensure_future(play_as_two_teams(f"127.0.0.1:{port}", GAMES, SEED, env_stop))
    try:
        done, _ = await asyncio.wait([trainer, client], timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        assert trainer in done, f"the trainer did not finish within {TIMEOUT_S} s (at step {loop.result.steps})"
        trainer.result()
    finally:
        trainer_stop.set()
        await asyncio.gather(trainer, return_exceptions=True)
        topics.trajectories(BEHAVIOR).remove(TRAINER_SUBSCRIBER)
        env_stop.set()
        await asyncio.wait([client], timeout=10.0)
        await server.stop(1.0)
    latest = topics.policies(BEHAVIOR).latest()
    assert latest is not None
    return loop, Policy.from_update(latest[1])


def test_self_play_beats_the_scripted_opponent_and_its_elo_rises() -> None:
    rng = np.random.default_rng(SEED)
    random_results = play(random_actions(rng), scripted_actions(rng), EVAL_EPISODES, rng)
    assert (random_results < 0).mean() > 0.5, "the game's premise: random loses to the scripted player"

    loop, policy = asyncio.run(_train(race_settings()))

    def trained(obs: np.ndarray) -> np.ndarray:
        return policy.act([obs], None, rng).discrete_actions[:, 0]

    results = play(trained, scripted_actions(rng), EVAL_EPISODES, rng)
    won, lost = float((results > 0).mean()), float((results < 0).mean())
    elo = loop.elo
    assert loop.snapshots is not None and loop.snapshots.number >= 3
    assert won > 0.5, f"won {won:.2f}, lost {lost:.2f} against the scripted player after {loop.result.steps} steps"
    assert elo is not None and elo > race_settings().self_play.initial_elo, f"ELO {elo}"  # type: ignore[union-attr]
