"""common/staleness.py: the one staleness rule the processor and the trainer apply."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from common.staleness import is_stale
from common.trajectory import Trajectory
from tests.unit.test_trainer_loop import trajectory


def acted_by(versions: list[int]) -> Trajectory:
    """A trajectory whose steps were acted by ``versions``, one each."""
    return dataclasses.replace(trajectory(0, length=len(versions)), policy_versions=np.array(versions, np.int64))


@pytest.mark.parametrize(
    ("versions", "newest", "lag", "stale"),
    [
        ([5, 6], 7, 2, False),  # 7 - 5 = 2: at the bound, kept
        ([4, 7], 7, 2, True),  # one step acted 3 versions behind: the whole trajectory goes
        ([7, 7], 7, 0, False),
        ([6, 7], 7, 0, True),
        ([0, 0], 10**6, None, False),  # no bound
    ],
    ids=["at-the-bound", "one-old-step", "lag-0-newest", "lag-0-older", "unbounded"],
)
def test_a_trajectory_is_stale_when_its_oldest_acting_policy_is_beyond_the_lag(
    versions: list[int], newest: int, lag: int | None, stale: bool
) -> None:
    assert is_stale(acted_by(versions), newest, lag) is stale
