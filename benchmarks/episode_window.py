"""The figures both sides of ``benchmarks/classic_control.py`` read off a run's finished episodes.

Standard library only: the peer, ``benchmarks/classic_control_sb3.py``, imports this in the SB3 environment (the
repository root on ``sys.path``, stepstream not installed), so the two sides compute each figure the same way.

* ``final``: the mean return of the last ``WINDOW`` finished episodes at the end of the budget.
* ``solve_steps``: the steps at which that mean first reached the threshold (the issue's time to solve).
* ``held``: of the windows that end in the budget's second half (one after each episode), the fraction whose mean is
  at or above the threshold. Why: the first crossing says nothing of what follows. On MountainCar-v0 the peer's
  crossings are touches during its early climb, and its mean stays below the threshold afterwards; ``held`` tells a
  touch from a solve (``docs/benchmarks.md``).
"""

from __future__ import annotations

import collections

WINDOW = 20
"""Finished episodes averaged, both for the final figure and for the threshold."""


class EpisodeWindow:
    """The last ``WINDOW`` returns of one run, fed one finished episode at a time, in the order they finished."""

    def __init__(self, threshold: float, budget: int, window: int = WINDOW) -> None:
        """``budget``: the run's steps; windows ending at or after ``held_from``, its second half, count towards
        ``held``."""
        self.threshold = threshold
        self.held_from = budget // 2
        self.window = window
        self.returns: collections.deque[float] = collections.deque(maxlen=window)
        self.solve_steps: int | None = None
        self._late = 0
        self._held = 0

    def add(self, episode_return: float, steps: int) -> bool:
        """One finished episode, ``steps`` the run's step count when it finished; True if its window is the first
        full one at or above the threshold (the run's solve)."""
        self.returns.append(episode_return)
        if len(self.returns) < self.window:
            return False
        mean = sum(self.returns) / self.window
        if steps >= self.held_from:
            self._late += 1
            self._held += mean >= self.threshold
        if self.solve_steps is None and mean >= self.threshold:
            self.solve_steps = steps
            return True
        return False

    @property
    def mean(self) -> float | None:
        """The mean of the window (of the episodes so far while it is not yet full); None before any episode."""
        return sum(self.returns) / len(self.returns) if self.returns else None

    @property
    def held(self) -> float | None:
        """The fraction of full windows ending at or after ``held_from`` at or above the threshold; None if none did."""
        return self._held / self._late if self._late else None
