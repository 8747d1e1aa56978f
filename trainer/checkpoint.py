"""Checkpoints of one behavior's learner: TensorFlow state, extra state, and a small JSON record.

A checkpoint taken at ``step`` (agent steps) in ``directory`` is:

* ``ckpt-<step>.index`` / ``.data-*``: a ``tf.train.Checkpoint`` of ``learner.checkpoint_objects()``
  plus the ``step`` and policy ``version`` counters, managed by ``tf.train.CheckpointManager``
  (which keeps the newest ``keep_checkpoints`` and its ``checkpoint`` state file);
* ``ckpt-<step>.json``: ``{"step", "version", "wall_time", "path"}`` (deleted with its checkpoint);
* ``ckpt-<step>.policy.pb``: the serialized ``PolicyUpdate`` published at that point, when given
  (a self-contained inference artifact, for ``--inference``);
* ``extra-<step>/``: whatever ``learner.save_extra`` writes there (SAC's replay buffer). Extra
  state is kept for the newest checkpoint only, as ML-Agents keeps its replay buffer (copies per
  checkpoint would multiply the largest file by ``keep_checkpoints``). It is written *before* the
  TF checkpoint and the older ``extra-*`` folders are removed only after it, so a process killed
  at any moment leaves the newest complete checkpoint with the extra state of its own step.
  (Checkpoints of an earlier layout, with the extra state in ``directory`` itself, still restore.)
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from protos import pb
from trainer.learner import Learner

logger = logging.getLogger(__name__)

_RESERVED = ("step", "version")


@dataclass(frozen=True)
class CheckpointInfo:
    """One kept checkpoint."""

    step: int
    """Agent steps the learner had taken in."""
    version: int
    """The newest policy version published when it was taken."""
    path: str
    """The TF checkpoint prefix (``.../ckpt-<step>``)."""
    wall_time: float
    """Epoch seconds when it was written."""


class Checkpointer:
    """Saves and restores one learner's checkpoints in ``directory``.

    Args:
        directory: created if absent; one behavior's checkpoints only.
        learner: provides ``checkpoint_objects()``, ``save_extra`` and ``load_extra``.
        keep_checkpoints: newest checkpoints kept on disk, >= 1.

    Raises:
        ValueError: ``keep_checkpoints`` < 1, or the learner names an object ``step`` or ``version``.
    """

    def __init__(self, directory: Path, learner: Learner, keep_checkpoints: int) -> None:
        if keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {keep_checkpoints}")
        objects = dict(learner.checkpoint_objects())
        clash = sorted(set(objects) & set(_RESERVED))
        if clash:
            raise ValueError(f"learner checkpoint objects may not be named {clash}: the checkpointer uses them")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._learner = learner
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._version = tf.Variable(-1, dtype=tf.int64, trainable=False, name="version")
        self._checkpoint = tf.train.Checkpoint(**objects, step=self._step, version=self._version)
        self._manager = tf.train.CheckpointManager(self._checkpoint, str(self.directory), max_to_keep=keep_checkpoints)

    def save(self, step: int, version: int, policy: pb.PolicyUpdate | None = None) -> CheckpointInfo:
        """Write a checkpoint at ``step`` and prune the oldest beyond ``keep_checkpoints``.

        Args:
            step: agent steps the learner has taken in; names the files.
            version: the newest policy version published.
            policy: the PolicyUpdate of that version, saved beside the checkpoint.

        Returns:
            What was written.
        """
        started = time.monotonic()
        self._step.assign(step)
        self._version.assign(version)
        extra = self._extra_dir(step)
        extra.mkdir(parents=True, exist_ok=True)
        self._learner.save_extra(extra)
        path = self._manager.save(checkpoint_number=step)
        self._prune_extras(keep=extra)
        info = CheckpointInfo(step=step, version=version, path=path, wall_time=time.time())
        Path(path + ".json").write_text(
            json.dumps({"step": step, "version": version, "wall_time": info.wall_time, "path": path}), encoding="utf-8"
        )
        if policy is not None:
            Path(path + ".policy.pb").write_bytes(policy.SerializeToString())
        self._prune_sidecars()
        logger.info(
            "checkpoint %s saved (step %d, policy version %d) in %.2f s", path, step, version, time.monotonic() - started
        )
        return info

    def _extra_dir(self, step: int) -> Path:
        return self.directory / f"extra-{step}"

    def _prune_extras(self, keep: Path) -> None:
        """Delete every ``extra-*`` folder but ``keep`` (the newest checkpoint's)."""
        for folder in self.directory.glob("extra-*"):
            if folder != keep and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)

    def _prune_sidecars(self) -> None:
        """Delete the JSON and policy files of checkpoints the manager no longer keeps."""
        kept = {Path(p).name for p in self._manager.checkpoints}
        for sidecar in [*self.directory.glob("ckpt-*.json"), *self.directory.glob("ckpt-*.policy.pb")]:
            prefix = sidecar.name.removesuffix(".json").removesuffix(".policy.pb")
            if prefix not in kept:
                sidecar.unlink(missing_ok=True)

    def restore_latest(self) -> tuple[int, int] | None:
        """Restore the newest checkpoint into the learner (and its extra state).

        Returns:
            ``(step, version)`` it was taken at, or None when there is none.

        Raises:
            AssertionError: (from TF) the checkpoint does not match the learner's objects, e.g.
                other network sizes; resuming with other settings is not possible.
        """
        path = self._manager.latest_checkpoint
        if path is None:
            return None
        status = self._checkpoint.restore(path)
        # Every object that exists now must be in the checkpoint; optimizer slots created later
        # are restored when they are created (deferred restoration).
        status.assert_existing_objects_matched()
        step, version = int(self._step.numpy()), int(self._version.numpy())
        extra = self._extra_dir(step)
        self._learner.load_extra(extra if extra.is_dir() else self.directory)
        logger.info("restored %s (step %d, policy version %d)", path, step, version)
        return step, version

    def checkpoints(self) -> list[CheckpointInfo]:
        """The kept checkpoints, oldest first (from their JSON records)."""
        infos = []
        for path in self._manager.checkpoints:
            record = Path(path + ".json")
            try:
                data = json.loads(record.read_text(encoding="utf-8"))
                infos.append(CheckpointInfo(int(data["step"]), int(data["version"]), path, float(data["wall_time"])))
            except (OSError, ValueError, KeyError):
                logger.warning("checkpoint %s has no readable %s", path, record.name)
        return infos
