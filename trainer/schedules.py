"""Hyperparameter schedules over a run's agent steps: ML-Agents' ``DecayedValue`` (``ModelUtils.DecayedValue``).

The one linear-decay formula of the trainers. PPO reads its learning rate, epsilon and beta off ``decayed_value``;
SAC (``trainer.sac``) and BC (``trainer.bc``) their learning rates; ``behavioral_cloning`` (``trainer.bc_component``)
its annealed strength, which falls to 0 at ``behavioral_cloning.steps``.

A schedule with no horizon (``max_steps`` 0) sits at its minimum. No learner trains at ``max_steps`` 0 (the loop
stops before the first update), so only the strength annealing meets the case, and it asks for a constant there.
"""

from __future__ import annotations

from common.config import ScheduleType

MIN_LEARNING_RATE = 1e-10
"""Where a linear learning-rate schedule ends at ``max_steps``, and the rate at or below which ``behavioral_cloning``
stops stepping (ML-Agents' value for both)."""


def decayed_value(schedule: ScheduleType, initial: float, minimum: float, max_steps: int, step: int) -> float:
    """ML-Agents' ``DecayedValue``: ``initial`` throughout, or linear from ``initial`` at step 0 to ``minimum``
    at ``max_steps`` (agent steps) and held there: ``(initial - minimum) * (1 - min(step, max_steps) / max_steps) + minimum``.
    """
    if schedule == ScheduleType.CONSTANT:
        return initial
    if max_steps <= 0:
        return minimum
    progress = min(step, max_steps) / max_steps
    return (initial - minimum) * (1.0 - progress) + minimum
