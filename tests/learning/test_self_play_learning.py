"""Self-play learns Race (``tests.race_game``) through the real processor and trainer loop, both teams one policy.

One process, as ``stepstream train`` runs (``tests.race_game.train_race``): a ``ProcessorServer`` on loopback with
in-process topics, a PPO ``TrainerLoop`` in a thread (its snapshots on ``snapshots/Race``), and one client playing
32 games as two sessions, team 0 and team 1. After training, the final policy plays the scripted opponent (which a
random player loses to) and must win most episodes; and its ELO, which the processor sends along with the
trajectories, rose. The best play (always toward the coin) wins about 71% against the scripted player.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.race_game import INITIAL_ELO, play, race_settings, random_actions, scripted_actions, train_race

pytestmark = pytest.mark.learning

SEED = 1
MAX_STEPS = 24000
"""Trainer steps (the learning team's experiences taken in)."""
EVAL_EPISODES = 400
TIMEOUT_S = 85.0


def test_self_play_beats_the_scripted_opponent_and_its_elo_rises() -> None:
    rng = np.random.default_rng(SEED)
    random_results = play(random_actions(rng), scripted_actions(rng), EVAL_EPISODES, rng)
    assert (random_results < 0).mean() > 0.5, "the game's premise: random loses to the scripted player"

    run = train_race(race_settings(MAX_STEPS), SEED, TIMEOUT_S)
    loop, policy = run.loop, run.policy
    assert policy is not None

    def trained(obs: np.ndarray) -> np.ndarray:
        return policy.act([obs], None, rng).discrete_actions[:, 0]

    results = play(trained, scripted_actions(rng), EVAL_EPISODES, rng)
    won, lost = float((results > 0).mean()), float((results < 0).mean())
    elo = loop.elo
    assert loop.snapshots is not None and loop.snapshots.number >= 3
    assert won > 0.5, f"won {won:.2f}, lost {lost:.2f} against the scripted player after {loop.result.steps} steps"
    assert elo is not None and elo > INITIAL_ELO, f"ELO {elo}: {run.elo_curve}"
