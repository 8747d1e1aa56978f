"""The staleness rule (docs/architecture.md, "Staleness and versions"), applied by the processor before it publishes
a trajectory and again by the trainer as it takes one in.

``max_policy_lag`` bounds how many policy versions behind the newest one the policy that acted may be: a trajectory
is stale when *any* of its steps was acted by an older one. Both sides apply the one rule, so what the processor lets
through the trainer keeps unless a newer policy came out meanwhile.
"""

from __future__ import annotations

from common.trajectory import Trajectory


def is_stale(trajectory: Trajectory, newest_version: int, max_policy_lag: int | None) -> bool:
    """Whether ``trajectory``'s oldest acting policy is more than ``max_policy_lag`` versions behind ``newest_version``
    (None: no bound, never stale)."""
    return max_policy_lag is not None and newest_version - trajectory.oldest_policy_version > max_policy_lag
