"""trainer.schedules: the one linear decay agrees with each formula it replaced (SAC's and BC's learning rates,
behavioral_cloning's strength annealing) at the points a run meets; PPO's own schedules are in test_ppo."""

from __future__ import annotations

import numpy as np
import pytest

from common.config import ScheduleType
from trainer.bc_component import annealed_strength
from trainer.schedules import MIN_LEARNING_RATE, decayed_value

STEPS = (0, 1, 999, 25_000, 123_457, 299_999, 300_000, 450_000)
MAX_STEPS = 300_000


def old_sac_learning_rate(initial: float, step: int, max_steps: int) -> float:
    """``trainer.sac``'s formula before ``decayed_value`` (linear schedule, max_steps > 0)."""
    progress = min(float(step) / max_steps, 1.0)
    return initial - (initial - MIN_LEARNING_RATE) * progress


def old_bc_learning_rate(initial: float, step: int, max_steps: int) -> float:
    """``trainer.bc.linear_learning_rate`` before ``decayed_value`` (linear schedule, max_steps > 0)."""
    fraction = min(step / max_steps, 1.0)
    return max((initial - MIN_LEARNING_RATE) * (1.0 - fraction) + MIN_LEARNING_RATE, MIN_LEARNING_RATE)


def old_annealed_strength(strength: float, anneal_steps: int, step: int) -> float:
    """``trainer.bc_component.annealed_strength`` before ``decayed_value``."""
    if anneal_steps <= 0:
        return strength
    return strength * (1.0 - min(step, anneal_steps) / anneal_steps)


@pytest.mark.parametrize("initial", [3e-4, 1e-3, 7.3e-4])
def test_bc_learning_rate_and_strength_are_unchanged_exactly(initial: float) -> None:
    for step in STEPS:
        assert decayed_value(ScheduleType.LINEAR, initial, MIN_LEARNING_RATE, MAX_STEPS, step) == old_bc_learning_rate(
            initial, step, MAX_STEPS
        )
        for strength in (0.5, 1.0, 0.37):
            assert annealed_strength(strength, 1000, step) == old_annealed_strength(strength, 1000, step)
            assert annealed_strength(strength, 0, step) == strength  # steps 0: constant


@pytest.mark.parametrize("initial", [3e-4, 1e-3, 7.3e-4])
def test_sac_learning_rate_is_unchanged_in_float32_and_to_one_float64_rounding(initial: float) -> None:
    """SAC subtracted the decayed part instead of adding the minimum; the two round differently in the last bits of
    a float64 (relative to ``initial``: SAC's subtraction cancels near the end), never in the float32 the optimisers
    hold."""
    for step in STEPS:
        new = decayed_value(ScheduleType.LINEAR, initial, MIN_LEARNING_RATE, MAX_STEPS, step)
        old = old_sac_learning_rate(initial, step, MAX_STEPS)
        assert np.float32(new) == np.float32(old)
        assert new == pytest.approx(old, rel=0.0, abs=4e-16 * initial)


def test_constant_schedules_hold_the_initial_value() -> None:
    assert decayed_value(ScheduleType.CONSTANT, 3e-4, MIN_LEARNING_RATE, MAX_STEPS, 10 * MAX_STEPS) == 3e-4
    assert decayed_value(ScheduleType.CONSTANT, 3e-4, MIN_LEARNING_RATE, 0, 5) == 3e-4
