"""Self-play's arithmetic and schedule: ELO ratings, the learning team's rotation, the swap and save clocks.

ML-Agents' ghost trainer (``mlagents/trainers/ghost/trainer.py``, ``controller.py``) in pure Python, with no
clock or random source of its own: the caller passes the step counts and a ``numpy`` generator, so every rule
is tested with hand-picked numbers. The processor (``processor.opponents``) applies them.

Words: the **learning team** acts with the behavior's current policy and only its trajectories reach the
trainer; every other team is an **opponent** and acts with a **snapshot**, a past policy the trainer saved.
Snapshots are named by the trainer's snapshot number (``PolicyUpdate.snapshot``, 1, 2, ...); ``LATEST`` (0)
names the current policy itself, pinned at the swap.

ELO (ML-Agents' rating, so that curves compare with mlagents-learn's):

- expected score of rating ``R`` against ``R_opp``: ``1 / (1 + 10^((R_opp - R) / 400))``;
- the result of an episode from the learning team's last reward plus its group reward: win (> 0) 1, draw 0.5,
  loss (< 0) 0;
- the change ``result - expected`` (K effectively 1), added to the learner's rating and taken from the
  opponent snapshot's. Against ``LATEST`` the opponent's rating is the learner's own, so the change nets to
  zero, as in ML-Agents, where both are the one last slot of ``policy_elos``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

LATEST = 0
"""The snapshot number that names the current policy (pinned when the opponents get it)."""

ELO_TAG = "Self-play/ELO"
"""The summary tag of the learner's rating (ML-Agents' own)."""


def expected_score(rating: float, opponent_rating: float) -> float:
    """The expected score (0 to 1) of a player rated ``rating`` against one rated ``opponent_rating``."""
    return 1.0 / (1.0 + 10.0 ** ((opponent_rating - rating) / 400.0))


def episode_result(reward: float, group_reward: float = 0.0) -> float:
    """The learning team's result from its last step's reward plus its group reward: 1 win, 0.5 draw, 0 loss."""
    final = reward + group_reward
    return 1.0 if final > 0 else 0.0 if final < 0 else 0.5


def elo_change(rating: float, opponent_rating: float, result: float) -> float:
    """``result - expected_score``: what the learner gains and its opponent loses (K effectively 1)."""
    return result - expected_score(rating, opponent_rating)


@dataclass
class EloRatings:
    """One behavior's ratings: the learner's and each snapshot's (by snapshot number).

    A snapshot starts at the learner's rating when it is saved (``add_snapshot``), as ML-Agents stores it.
    """

    learner: float
    """The current policy's rating."""
    window: int
    """Snapshots whose ratings are kept (the newest), >= 1."""
    snapshots: dict[int, float] = field(default_factory=dict)
    """Snapshot number -> rating, at most ``window``, oldest first."""

    def add_snapshot(self, number: int, rating: float | None = None) -> None:
        """Rate snapshot ``number`` (the learner's rating unless ``rating`` is given); the oldest beyond ``window``
        goes."""
        self.snapshots.pop(number, None)
        self.snapshots[number] = self.learner if rating is None else rating
        while len(self.snapshots) > self.window:
            del self.snapshots[next(iter(self.snapshots))]

    def opponent_rating(self, opponent: int) -> float | None:
        """The rating of ``opponent`` (``LATEST``: the learner's own); None for a snapshot no longer rated."""
        return self.learner if opponent == LATEST else self.snapshots.get(opponent)

    def record(self, opponent: int, result: float) -> float | None:
        """Apply one finished episode against ``opponent``; returns the change, None (nothing changed) when the
        opponent is a snapshot no longer rated."""
        opponent_rating = self.opponent_rating(opponent)
        if opponent_rating is None:
            return None
        change = elo_change(self.learner, opponent_rating, result)
        if opponent != LATEST:  # against LATEST the two slots are one: +change - change
            self.snapshots[opponent] -= change
            self.learner += change
        return change


def record_result(learner: EloRatings, opponents: EloRatings, opponent: int, result: float) -> float | None:
    """One finished episode of ``learner``'s current policy against snapshot ``opponent`` of ``opponents``: the same
    ratings in a symmetric game, the other behavior's in an asymmetric one (StrikersVsGoalie), where ``LATEST`` is
    that behavior's current policy and its own rating, as ML-Agents' ``GhostController`` asks the other trainer.

    Returns:
        The change added to the learner and taken from the opponent; None (nothing changed) for a snapshot no longer
        rated.
    """
    if opponents is learner:
        return learner.record(opponent, result)
    rating = opponents.opponent_rating(opponent)
    if rating is None:
        return None
    change = elo_change(learner.learner, rating, result)
    learner.learner += change
    if opponent == LATEST:
        opponents.learner -= change
    else:
        opponents.snapshots[opponent] -= change
    return change


class Every:
    """A clock that fires when a step count has moved more than ``interval`` past its last firing.

    ML-Agents' rule for all three of self-play's clocks (``get_step - last_save > steps_between_save``):
    strictly more, so with ``interval`` 100 it fires at step 101, then 202.
    """

    def __init__(self, interval: int, start: int = 0) -> None:
        self.interval = interval
        self.last = start

    def due(self, step: int) -> bool:
        """Whether ``step`` is more than ``interval`` past the last firing; if so, ``step`` becomes the last."""
        if step - self.last > self.interval:
            self.last = step
            return True
        return False


class TeamRotation:
    """The learning team, global across behaviors (ML-Agents' ``GhostController``).

    The first team seen learns first; the others queue in the order they were seen, and each change puts
    the learning team at the back and takes the next from the front.
    """

    def __init__(self) -> None:
        self.learning_team: int | None = None
        self._queue: collections.deque[int] = collections.deque()

    @property
    def teams(self) -> list[int]:
        """Every team seen, the learning team first."""
        return [] if self.learning_team is None else [self.learning_team, *self._queue]

    def add(self, team: int) -> None:
        """A team is seen (again or first): the first becomes the learning team, later ones queue."""
        if self.learning_team is None:
            self.learning_team = team
        elif team != self.learning_team and team not in self._queue:
            self._queue.append(team)

    def change(self) -> int | None:
        """The next team learns; returns it (the same team when only one is known)."""
        if self.learning_team is not None and self._queue:
            self._queue.append(self.learning_team)
            self.learning_team = self._queue.popleft()
        return self.learning_team


def choose_opponent(snapshots: list[int], play_against_latest_model_ratio: float, rng: np.random.Generator) -> int:
    """A swap's pick: ``LATEST`` with probability ``play_against_latest_model_ratio``, else a snapshot drawn
    uniformly from ``snapshots`` (``LATEST`` too when there is none yet).

    One uniform draw decides (``< 1 - ratio``: a snapshot), then one integer draw picks it, as ML-Agents draws.
    """
    if rng.uniform() < 1.0 - play_against_latest_model_ratio and snapshots:
        return snapshots[int(rng.integers(len(snapshots)))]
    return LATEST
