"""Race: a small symmetric two-player game for self-play tests, and the client that plays it as two teams.

``G`` games at once. Cells ``0..LENGTH``; player 0 starts at 0, player 1 at ``LENGTH``; a coin lies on a cell in
between, drawn per episode. Each step both move at once, one cell left, none or one right (actions 0, 1, 2). Who
reaches the coin first wins (+1, the other -1); both at once, or nobody within ``MAX_STEPS``, is a draw (0).

Each player sees the game from its own side (player 1's cells mirrored, ``x -> LENGTH - x``, and its actions too),
so one policy plays both: ``[own, other, coin] / LENGTH``, float32 [G, 3].

A uniformly random player loses to the scripted one (``scripted_actions``: toward the coin 40% of the time, else it
stays), about 31% won to 65% lost; one that always walks toward the coin (``toward_actions``) beats it in about 71%
of the episodes and loses 26%.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

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
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_tensor
from common.topics import TRAINER_SUBSCRIBER
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.inference import Policy
from processor.server import ProcessorServer, ServerOptions
from protos import pb
from trainer.loop import TrainerLoop, configure_tf_threads
from trainer.registry import make_learner

LENGTH = 10
MAX_STEPS = 20
BEHAVIOR = "Race"
PARAMS = BrainParameters(BEHAVIOR, (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(0, (3,)))

Player = Callable[[np.ndarray], np.ndarray]
"""Observations float32 [G, 3] (own view) -> actions int [G] in {0, 1, 2}."""


class RaceGames:
    """``games`` independent games (module docstring)."""

    def __init__(self, games: int, rng: np.random.Generator) -> None:
        self.rng = rng
        self.pos = np.zeros((2, games), np.int64)
        self.coin = np.zeros(games, np.int64)
        self.t = np.zeros(games, np.int64)
        self.reset(np.ones(games, bool))

    def reset(self, which: np.ndarray) -> None:
        self.pos[0, which], self.pos[1, which], self.t[which] = 0, LENGTH, 0
        self.coin[which] = self.rng.integers(1, LENGTH, size=int(which.sum()))

    def observe(self, player: int) -> np.ndarray:
        """float32 [G, 3]: ``[own, other, coin] / LENGTH`` from ``player``'s side."""
        own, other, coin = self.pos[player], self.pos[1 - player], self.coin
        if player == 1:
            own, other, coin = LENGTH - own, LENGTH - other, LENGTH - coin
        return (np.stack([own, other, coin], axis=1) / LENGTH).astype(np.float32)

    def step(self, actions: tuple[np.ndarray, np.ndarray], which: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Move the games ``which`` (bool [G]); returns player 0's reward float32 [G], done and timed-out bool [G]."""
        for player, sign in ((0, 1), (1, -1)):
            moved = np.clip(self.pos[player] + sign * (np.asarray(actions[player]) - 1), 0, LENGTH)
            self.pos[player] = np.where(which, moved, self.pos[player])
        self.t += which
        got = self.pos == self.coin  # [2, G]
        reward = np.where(which, got[0].astype(np.float32) - got[1], 0.0).astype(np.float32)
        timed_out = which & ~got.any(axis=0) & (self.t >= MAX_STEPS)
        done = which & (got.any(axis=0) | timed_out)
        return reward, done, timed_out


INITIAL_ELO = 1200.0


def race_settings(max_steps: int) -> BehaviorSettings:
    """PPO with self-play for Race, as the learning test and ``benchmarks/self_play.py`` train it."""
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


def random_actions(rng: np.random.Generator) -> Player:
    return lambda obs: rng.integers(0, 3, size=len(obs))


def toward_actions(obs: np.ndarray) -> np.ndarray:
    """The best play: always toward the coin."""
    return np.sign(obs[:, 2] - obs[:, 0]).astype(np.int64) + 1


def scripted_actions(rng: np.random.Generator) -> Player:
    """Toward the coin with probability 0.4, else stay."""

    def act(obs: np.ndarray) -> np.ndarray:
        return np.where(rng.uniform(size=len(obs)) < 0.4, toward_actions(obs), 1)

    return act


def play(first: Player, second: Player, episodes: int, rng: np.random.Generator) -> np.ndarray:
    """``episodes`` games of ``first`` (player 0) against ``second``; returns player 0's results float32 [episodes]."""
    games = RaceGames(episodes, rng)
    results = np.zeros(episodes, np.float32)
    live = np.ones(episodes, bool)
    while live.any():
        reward, done, _ = games.step((first(games.observe(0)), second(games.observe(1))), live)
        results += reward
        live &= ~done
    return results


def brain_info(obs: np.ndarray, reward: np.ndarray, done: np.ndarray, timed_out: np.ndarray) -> pb.BrainInfo:
    msg = pb.BrainInfo(behavior_name=BEHAVIOR)
    to_tensor(np.arange(len(obs), dtype=np.int64), msg.agent_ids)
    to_tensor(obs, msg.observations.add())
    to_tensor(reward.astype(np.float32), msg.rewards)
    to_tensor(done, msg.done)
    to_tensor(timed_out, msg.max_reached)
    return msg


async def play_as_two_teams(
    address: str, games: int, seed: int, stop: asyncio.Event, progress: list[int] | None = None
) -> tuple[int, int]:
    """Play ``games`` games through the processor, player 0 as team 0's session and player 1 as team 1's, until
    ``stop``; returns the episodes finished and the rounds played (each a BrainInfo of ``games`` rows per team), the
    rounds also live in ``progress[0]`` when given. A game that ended is reset after its done row was sent (the answer to
    that row is not used), so its next row starts the new episode."""
    games_ = RaceGames(games, np.random.default_rng(seed))
    reward = np.zeros(games, np.float32)
    done = timed_out = np.zeros(games, bool)
    episodes = rounds = 0
    async with (
        EnvSession(address, "race-0", [PARAMS], team_ids={BEHAVIOR: 0}) as team0,
        EnvSession(address, "race-1", [PARAMS], team_ids={BEHAVIOR: 1}) as team1,
    ):
        while not stop.is_set():
            answers = await asyncio.gather(
                team0.send(brain_info(games_.observe(0), reward, done, timed_out)),
                team1.send(brain_info(games_.observe(1), -reward, done, timed_out)),
            )
            episodes += int(done.sum())
            rounds += 1
            if progress is not None:
                progress[0] = rounds
            games_.reset(done)
            acting = ~done
            reward, done, timed_out = games_.step(
                (answers[0].discrete_actions[:, 0], answers[1].discrete_actions[:, 0]), acting
            )
    return episodes, rounds


@dataclass
class RaceRun:
    """What one ``train_race`` left: the trainer loop, its final policy, the ELO curve and the processor's snapshots."""

    loop: TrainerLoop
    policy: Policy | None = None
    elo_curve: list[tuple[int, float]] = field(default_factory=list)
    """(trainer steps, the newest ELO the trainer had seen), sampled every 0.25 s."""
    snapshots: dict[int, Policy] = field(default_factory=dict)
    """The processor's snapshots at the end (number -> policy)."""


def train_race(settings: BehaviorSettings, seed: int, timeout_s: float, games: int = 32) -> RaceRun:
    """Train ``settings`` (with ``self_play``) on Race in one process: the real processor on loopback, the trainer loop
    in a thread, ``games`` games played as two teams; until the trainer's ``max_steps``."""
    return asyncio.run(_train(settings, seed, games, timeout_s))


async def _train(settings: BehaviorSettings, seed: int, games: int, timeout_s: float) -> RaceRun:
    configure_tf_threads()
    server = ProcessorServer(
        ProcessorSettings(behaviors={BEHAVIOR: BehaviorRuntime.from_settings(settings)}, strict=True, seed=seed),
        ServerOptions(port=0),
    )
    port = await server.start()
    topics = server.topics
    loop = TrainerLoop(
        BEHAVIOR,
        make_learner(PARAMS, settings, seed),
        topics.trajectories(BEHAVIOR).subscribe(TRAINER_SUBSCRIBER),
        topics.policies(BEHAVIOR),
        settings,
        results_dir=None,
        run_started_at=time.time(),
        seed=seed,
        poll_s=0.05,
        snapshot_sink=topics.snapshots(BEHAVIOR),
    )
    run = RaceRun(loop)
    trainer_stop, env_stop = threading.Event(), asyncio.Event()
    trainer = asyncio.ensure_future(asyncio.to_thread(loop.run, trainer_stop))
    client = asyncio.ensure_future(play_as_two_teams(f"127.0.0.1:{port}", games, seed, env_stop))

    async def watch() -> None:  # the ELO curve, as the trainer sees it
        while True:
            if loop.elo is not None and (not run.elo_curve or run.elo_curve[-1] != (loop.result.steps, loop.elo)):
                run.elo_curve.append((loop.result.steps, loop.elo))
            await asyncio.sleep(0.25)

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait([trainer, client], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        assert trainer in done, f"the trainer did not finish within {timeout_s} s (at step {loop.result.steps})"
        trainer.result()
        opponents = server.servicer.self_play.behaviors.get(BEHAVIOR)
        run.snapshots = {} if opponents is None else dict(opponents.snapshots)
    finally:
        watcher.cancel()
        trainer_stop.set()
        await asyncio.gather(trainer, return_exceptions=True)
        topics.trajectories(BEHAVIOR).remove(TRAINER_SUBSCRIBER)
        env_stop.set()
        await asyncio.wait([client], timeout=10.0)
        await server.stop(1.0)
    latest = topics.policies(BEHAVIOR).latest()
    assert latest is not None
    run.policy = Policy.from_update(latest[1])
    return run
