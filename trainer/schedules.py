"""Hyperparameter schedules over a run's agent steps: ML-Agents' ``DecayedValue`` (``ModelUtils.DecayedValue``).

``trainer.ppo`` reads its learning rate, epsilon and beta off ``decayed_value``. SAC's linear learning rate
(``trainer.sac``), BC's (``trainer.bc``) and behavioral_cloning's strength (``trainer.bc_component``) keep
formulas of their own: the same line, but rounded differently, and SAC and BC hold the initial value when
``max_steps`` is 0 where ``decayed_value`` gives the minimum.
"""

from __future__ import annotations

from common.config import ScheduleType


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
