"""Self-play's ELO arithmetic and schedule against hand-computed cases (``common.self_play``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from common.self_play import (
    LATEST,
    EloRatings,
    Every,
    TeamRotation,
    choose_opponent,
    elo_change,
    episode_result,
    expected_score,
    record_result,
)


class ScriptedRandom:
    """A random source that returns the draws it was given: ``uniform()`` then ``integers(n)``."""

    def __init__(self, uniforms: list[float], integers: list[int]) -> None:
        self.uniforms, self.ints, self.asked = list(uniforms), list(integers), []

    def uniform(self) -> float:
        return self.uniforms.pop(0)

    def integers(self, n: int) -> int:
        self.asked.append(n)
        return self.ints.pop(0)


@pytest.mark.parametrize(
    ("rating", "opponent", "expected"),
    [(1200.0, 1200.0, 0.5), (1400.0, 1200.0, 0.7597469266), (1200.0, 1400.0, 0.2402530734), (1600.0, 1200.0, 1 / 1.1)],
    ids=["equal", "200-above", "200-below", "400-above"],
)
def test_expected_score(rating: float, opponent: float, expected: float) -> None:
    # 10^(-200/400) = 0.316227766 and 1 / 1.316227766 = 0.759746927; 400 above: 1 / (1 + 10^-1)
    assert expected_score(rating, opponent) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    ("reward", "group_reward", "result"),
    [(1.0, 0.0, 1.0), (0.0, 0.0, 0.5), (-1.0, 0.0, 0.0), (0.0, 1.0, 1.0), (0.5, -1.0, 0.0), (0.001, 0.0, 1.0)],
    ids=["win", "draw", "loss", "goal-as-group-reward", "group-loss-outweighs", "small-win"],
)
def test_episode_result_from_last_reward_plus_group_reward(reward: float, group_reward: float, result: float) -> None:
    assert episode_result(reward, group_reward) == result


def test_elo_change_is_result_minus_expected() -> None:
    assert elo_change(1200.0, 1200.0, 1.0) == pytest.approx(0.5)
    assert elo_change(1400.0, 1200.0, 0.0) == pytest.approx(-0.7597469266)
    assert elo_change(1200.0, 1400.0, 0.5) == pytest.approx(0.5 - 0.2402530734)


def test_ratings_move_learner_and_snapshot_in_opposite_directions() -> None:
    ratings = EloRatings(learner=1200.0, window=10)
    ratings.add_snapshot(1)
    assert ratings.record(1, 1.0) == pytest.approx(0.5)
    assert (ratings.learner, ratings.snapshots[1]) == (pytest.approx(1200.5), pytest.approx(1199.5))
    # 1 / (1 + 10^(-1/400)) = 1 / 1.99426007 = 0.50143911
    assert ratings.record(1, 0.0) == pytest.approx(-0.50143911, abs=1e-8)
    assert ratings.learner == pytest.approx(1200.5 - 0.50143911, abs=1e-8)
    assert ratings.snapshots[1] == pytest.approx(1199.5 + 0.50143911, abs=1e-8)
    assert ratings.learner + ratings.snapshots[1] == pytest.approx(2400.0)  # a zero-sum exchange


def test_a_snapshot_starts_at_the_learners_rating_and_the_ring_keeps_window() -> None:
    ratings = EloRatings(learner=1250.0, window=2)
    for number in (1, 2, 3):
        ratings.add_snapshot(number)
    assert ratings.snapshots == {2: 1250.0, 3: 1250.0}
    assert ratings.record(1, 1.0) is None and ratings.learner == 1250.0  # dropped from the window: unrated


def test_against_latest_the_change_nets_to_zero() -> None:
    ratings = EloRatings(learner=1300.0, window=3)
    assert ratings.record(LATEST, 1.0) == pytest.approx(0.5)
    assert ratings.learner == 1300.0


def test_an_asymmetric_result_moves_the_other_behaviors_rating() -> None:
    strikers, goalies = EloRatings(learner=1200.0, window=3), EloRatings(learner=1300.0, window=3)
    goalies.add_snapshot(4, 1250.0)
    # 1 / (1 + 10^(50/400)) = 1 / (1 + 1.333521) = 0.428537: a win gains 0.571463
    assert record_result(strikers, goalies, 4, 1.0) == pytest.approx(0.571463, abs=1e-6)
    assert strikers.learner == pytest.approx(1200.571463, abs=1e-6)
    assert goalies.snapshots[4] == pytest.approx(1249.428537, abs=1e-6) and goalies.learner == 1300.0
    # against the goalies' current policy: their own rating, 1300; 1 / (1 + 10^(99.428537/400)) = 1 / 2.772436 = 0.360693
    assert record_result(strikers, goalies, LATEST, 0.5) == pytest.approx(0.5 - 0.360693, abs=1e-5)
    assert goalies.learner == pytest.approx(1300.0 - (0.5 - 0.360693), abs=1e-5)
    assert record_result(strikers, goalies, 9, 1.0) is None  # no such snapshot


def test_every_fires_strictly_more_than_interval_after_the_last() -> None:
    clock = Every(100)
    assert [step for step in (50, 100, 101, 150, 201, 202, 500) if clock.due(step)] == [101, 202, 500]


def test_team_rotation_first_seen_learns_then_cycles() -> None:
    rotation = TeamRotation()
    assert rotation.change() is None
    for team in (1, 0, 1, 2, 0):
        rotation.add(team)
    assert rotation.learning_team == 1 and rotation.teams == [1, 0, 2]
    assert [rotation.change() for _ in range(4)] == [0, 2, 1, 0]


def test_team_rotation_of_one_team_keeps_it() -> None:
    rotation = TeamRotation()
    rotation.add(3)
    assert rotation.change() == 3


@pytest.mark.parametrize(
    ("ratio", "uniforms", "integers", "expected", "asked"),
    [
        (0.5, [0.7], [], LATEST, []),  # 0.7 >= 1 - 0.5: the latest
        (0.5, [0.2], [2], 13, [3]),  # 0.2 < 0.5: the third of three
        (1.0, [0.0], [], LATEST, []),  # ratio 1: always the latest
        (0.0, [0.999], [0], 11, [3]),  # ratio 0: always the window
    ],
    ids=["latest", "window", "ratio-1", "ratio-0"],
)
def test_choose_opponent(ratio: float, uniforms: list[float], integers: list[int], expected: int, asked: list[int]) -> None:
    rng: Any = ScriptedRandom(uniforms, integers)
    assert choose_opponent([11, 12, 13], ratio, rng) == expected
    assert rng.asked == asked


def test_choose_opponent_before_any_snapshot_is_latest() -> None:
    rng: Any = ScriptedRandom([0.0], [])
    assert choose_opponent([], 0.0, rng) == LATEST


def test_choose_opponent_frequency_follows_the_ratio() -> None:
    rng = np.random.default_rng(0)
    picks = [choose_opponent([1, 2], 0.3, rng) for _ in range(4000)]
    assert picks.count(LATEST) / len(picks) == pytest.approx(0.3, abs=0.03)
