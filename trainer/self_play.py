"""A self-play trainer's snapshots: saved every ``save_steps``, published for the processor, kept for ``--resume``.

The trainer's half of ML-Agents' ghost trainer (``common.self_play`` holds the rules, ``processor.opponents`` the
serving half). A snapshot is the policy the loop has just published (``TrainerLoop._publish``), copied with
``PolicyUpdate.snapshot`` set to its number (1, 2, ...) and published on ``snapshots/<behavior>`` keyed by that
number: it keeps its own, older, policy version, and never passes through the policy topic's latest-wins.

- The loop's first policy is a snapshot, a resumed loop's too (ML-Agents saves one as the policy is created);
  after it, one whenever the trainer's step count is more than ``save_steps`` past the last
  (``common.self_play.Every``).
- Each snapshot carries the learner's newest ELO (``PolicyUpdate.elo``; the processor computes it and sends it along
  with the trajectories as ``Self-play/ELO``), and ``training_status.json`` keeps it: a resumed loop's first
  snapshot carries the rating the run left, and a fresh processor continues the learner from it.
- The newest ``window`` are also written to ``<behavior>/snapshots/snapshot-<number>.pb`` (the serialized
  ``PolicyUpdate``), older files removed; a resumed trainer republishes them, oldest first, before its own first
  snapshot, so the processor's ring is what it was, and numbering continues above them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from common.config import SelfPlaySettings
from common.self_play import Every
from common.topics import PolicySink
from protos import pb

logger = logging.getLogger(__name__)

SNAPSHOTS_DIR = "snapshots"
"""Under ``<results>/<behavior>/``: the snapshot ring (``snapshot-<number>.pb``)."""


def resumed_elo(status_path: Path, behavior_name: str) -> float | None:
    """The learner's ELO a run left in ``training_status.json`` (``self_play.elo``); None without one."""
    try:
        entry = json.loads(status_path.read_text(encoding="utf-8")).get(behavior_name, {})
        elo = entry.get("self_play", {}).get("elo")
    except (OSError, ValueError, AttributeError):
        return None
    return float(elo) if isinstance(elo, (int, float)) else None


def snapshot_path(directory: Path, number: int) -> Path:
    return directory / f"snapshot-{number}.pb"


class SnapshotSaver:
    """Publishes (and keeps on disk) a snapshot every ``save_steps`` trainer steps (module docstring).

    Args:
        settings: the behavior's ``self_play``.
        sink: ``snapshots/<behavior>``, keyed by snapshot number.
        directory: where the ring is kept; None keeps none (no results directory).
    """

    def __init__(self, settings: SelfPlaySettings, sink: PolicySink[pb.PolicyUpdate], directory: Path | None) -> None:
        self.settings = settings
        self._sink = sink
        self._directory = directory
        self._clock = Every(settings.save_steps)
        self.number = 0
        """The newest snapshot's number (0 before the first)."""
        self.ring: list[tuple[int, int]] = []
        """(snapshot number, policy version) of the newest ``window``, oldest first."""
        self._first = True

    def resume(self, step: int) -> int:
        """Republish the ring kept on disk, oldest first, and count on from step ``step``; returns how many."""
        self._clock.last = step
        if self._directory is None or not self._directory.is_dir():
            return 0
        kept = sorted(int(p.stem[9:]) for p in self._directory.glob("snapshot-*.pb") if p.stem[9:].isdigit())
        for number in kept[-self.settings.window :]:
            update = pb.PolicyUpdate.FromString(snapshot_path(self._directory, number).read_bytes())
            self._publish(update, number)
        return len(kept[-self.settings.window :])

    def after_publish(self, update: pb.PolicyUpdate, step: int, elo: float | None = None) -> bool:
        """The loop published ``update`` at trainer step ``step``: snapshot it if one is due, carrying ``elo`` (the
        learner's newest rating, when known); returns whether."""
        if not self._first and not self._clock.due(step):
            return False
        self._first = False
        self._clock.last = step
        snapshot = pb.PolicyUpdate()
        snapshot.CopyFrom(update)
        snapshot.snapshot = self.number + 1
        if elo is not None:
            snapshot.elo = elo
        self._publish(snapshot, snapshot.snapshot)
        self._keep(snapshot)
        return True

    def _publish(self, snapshot: pb.PolicyUpdate, number: int) -> None:
        snapshot.snapshot = number
        if not self._sink.publish(snapshot, number):
            logger.warning("%s: snapshot %d refused (the processor holds a newer one)", snapshot.behavior_name, number)
        self.number = max(self.number, number)
        self.ring = [*self.ring, (number, int(snapshot.version))][-self.settings.window :]
        logger.debug("%s: snapshot %d of policy version %d published", snapshot.behavior_name, number, snapshot.version)

    def _keep(self, snapshot: pb.PolicyUpdate) -> None:
        """Write ``snapshot`` (atomically) and remove the files that fell out of the window."""
        if self._directory is None:
            return
        self._directory.mkdir(parents=True, exist_ok=True)
        path = snapshot_path(self._directory, snapshot.snapshot)
        partial = path.with_suffix(".pb.partial")
        partial.write_bytes(snapshot.SerializeToString())
        os.replace(partial, path)
        keep = {number for number, _ in self.ring}
        for old in self._directory.glob("snapshot-*.pb"):
            if old.stem[9:].isdigit() and int(old.stem[9:]) not in keep:
                old.unlink(missing_ok=True)
