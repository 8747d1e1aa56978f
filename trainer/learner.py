"""The role every algorithm plays for the trainer loop (Acme's actor / learner split).

The loop (``trainer.loop``) owns the I/O: it takes trajectories from the topic, drops duplicates,
counts steps, decides when to publish and checkpoint, and writes summaries. A ``Learner`` owns
the maths: its networks, optimiser, update buffer and the conversion of its policy into the
inference artifact the processor runs. ``trainer/ppo.py``, ``sac.py`` and ``bc.py`` each hold
one Learner, readable top to bottom.

Words: a *step* is one agent experience (one row of an update buffer); an *update* is one call of
``update``, which may run many gradient steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from common.trajectory import Trajectory
from protos import pb


class Learner(Protocol):
    """One behavior's algorithm state; used from one thread only."""

    def add_trajectories(self, trajectories: Sequence[Trajectory]) -> int:
        """Turn trajectories into update-buffer rows.

        Returns:
            The experiences taken in (the loop's step budget counts these).
        """
        ...

    def ready_to_update(self) -> bool:
        """Whether ``update`` has enough data (PPO: buffer_size reached; SAC: init steps and ratio)."""
        ...

    def update(self) -> Mapping[str, float]:
        """Train on the update buffer; returns summaries keyed by ML-Agents' tag names
        (``Losses/Policy Loss``, ``Policy/Learning Rate``, ...)."""
        ...

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        """The current policy as a self-contained PolicyUpdate (``trainer.export``)."""
        ...

    def checkpoint_objects(self) -> Mapping[str, object]:
        """Trackable TF objects (networks, optimisers, normaliser, counters) for ``tf.train.Checkpoint``."""
        ...

    def save_extra(self, directory: Path) -> None:
        """Save state a TF checkpoint does not hold (SAC's replay buffer as HDF5); may do nothing."""
        ...

    def load_extra(self, directory: Path) -> None:
        """Restore what ``save_extra`` wrote; a missing file is not an error."""
        ...
