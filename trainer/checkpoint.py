"""Checkpoints of one behavior's learner: TensorFlow state, extra state, and a small JSON record.

A checkpoint taken at ``step`` (agent steps) in ``directory`` is:

* ``ckpt-<step>.index`` / ``.data-*``: a ``tf.train.Checkpoint`` of ``learner.checkpoint_objects()``
  plus the ``step`` and policy ``version`` counters (``Checkpoint.write``: no TensorFlow
  ``checkpoint`` state file is written or needed; the records below say which checkpoints exist);
* ``ckpt-<step>.policy.pb``: the serialized ``PolicyUpdate`` published at that point, when given
  (a self-contained inference artifact, for ``--inference``);
* ``ckpt-<step>.json``: ``{"step", "version", "wall_time", "path"}``, the checkpoint's **commit
  record**. It is written last, atomically (a temporary file renamed over it), after the
  TensorFlow files and the policy are on disk; a checkpoint without it is incomplete.
* ``ckpt-<step>.onnx``: the policy as the ONNX model Unity runs (``trainer.onnx_export``), written
  after the commit (it is derived, not needed to restore), and the same bytes at ``onnx_path``
  (``<run>/<behavior>.onnx``, where ML-Agents puts the newest model) when given;
* ``extra-<step>/``: whatever ``learner.save_extra`` writes there (SAC's replay buffer). Extra
  state is kept for the newest checkpoint only, as ML-Agents keeps its replay buffer (copies per
  checkpoint would multiply the largest file by ``keep_checkpoints``). It is written *before* the
  TF checkpoint, and the older ``extra-*`` folders are removed only after the commit record.

So a process killed at any moment (SIGKILL included) leaves the previous checkpoint complete, with
the extra state of its own step. Older checkpoints beyond ``keep_checkpoints``, and the leftovers of
an unfinished save, are deleted after each commit (the record first, so a kill while pruning never
leaves a record without its data).

Restoring (``restore_latest``) takes the newest checkpoint that is complete: its record readable
and every tensor of its TensorFlow data readable. A newer one that is not (a save killed before its
record, a data file cut short, a missing ``.index``) is skipped with one WARNING that names it and
says why; restoring then falls back to the next newest. Where the fallback lands on a checkpoint
older than the newest extra state, that extra state is not used (SAC resumes with an empty replay
buffer, and a WARNING says so). With checkpoints present but none complete it is a ``ConfigError``.
Checkpoints of earlier layouts (a ``tf.train.CheckpointManager`` state file, extra state in
``directory`` itself) still restore.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from common.errors import ConfigError
from protos import pb
from trainer.learner import Learner
from trainer.onnx_export import policy_to_onnx

logger = logging.getLogger(__name__)

_RESERVED = ("step", "version")
PREFIX = "ckpt-"
RECORD_SUFFIX = ".json"
POLICY_SUFFIX = ".policy.pb"
_REASON_CHARS = 200
"""A skipped checkpoint's reason is cut to this many characters (TensorFlow's messages run long)."""


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
    """Saves and restores one learner's checkpoints in ``directory`` (module docstring).

    Args:
        directory: created if absent; one behavior's checkpoints only.
        learner: provides ``checkpoint_objects()``, ``save_extra`` and ``load_extra``.
        keep_checkpoints: newest checkpoints kept on disk, >= 1.
        onnx_path: where the newest checkpoint's ONNX model is also written, if anywhere.

    Raises:
        ValueError: ``keep_checkpoints`` < 1, or the learner names an object ``step`` or ``version``.
    """

    def __init__(self, directory: Path, learner: Learner, keep_checkpoints: int, onnx_path: Path | None = None) -> None:
        if keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {keep_checkpoints}")
        objects = dict(learner.checkpoint_objects())
        clash = sorted(set(objects) & set(_RESERVED))
        if clash:
            raise ValueError(f"learner checkpoint objects may not be named {clash}: the checkpointer uses them")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_checkpoints = keep_checkpoints
        self._learner = learner
        self._onnx_path = onnx_path
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._version = tf.Variable(-1, dtype=tf.int64, trainable=False, name="version")
        self._checkpoint = tf.train.Checkpoint(**objects, step=self._step, version=self._version)
        self._skipped: set[int] = set()
        """Steps ``restore_latest`` found incomplete: not listed, and deleted by the next save."""

    def _prefix(self, step: int) -> Path:
        return self.directory / f"{PREFIX}{step}"

    def save(self, step: int, version: int, policy: pb.PolicyUpdate | None = None) -> CheckpointInfo:
        """Write a checkpoint at ``step``, commit it, and prune the oldest beyond ``keep_checkpoints``.

        Args:
            step: agent steps the learner has taken in; names the files.
            version: the newest policy version published.
            policy: the PolicyUpdate of that version, saved beside the checkpoint.

        Returns:
            What was written.
        """
        started = time.monotonic()
        prefix = self._prefix(step)
        record = Path(f"{prefix}{RECORD_SUFFIX}")
        record.unlink(missing_ok=True)  # a checkpoint of the same step is overwritten: uncommitted first
        self._step.assign(step)
        self._version.assign(version)
        extra = self._extra_dir(step)
        extra.mkdir(parents=True, exist_ok=True)
        self._learner.save_extra(extra)
        path = self._checkpoint.write(str(prefix))
        if policy is not None:
            _write_atomically(Path(f"{prefix}{POLICY_SUFFIX}"), policy.SerializeToString())
        info = CheckpointInfo(step=step, version=version, path=path, wall_time=time.time())
        data = {"step": step, "version": version, "wall_time": info.wall_time, "path": path}
        _write_atomically(record, json.dumps(data).encode("utf-8"))  # the commit
        self._skipped.discard(step)
        if policy is not None:
            self._write_onnx(policy, Path(f"{prefix}.onnx"))
        self._prune(keep_extra=extra)
        logger.info(
            "checkpoint %s saved (step %d, policy version %d) in %.2f s", path, step, version, time.monotonic() - started
        )
        return info

    def _write_onnx(self, policy: pb.PolicyUpdate, path: Path) -> None:
        """The checkpoint's ONNX model, and the same at ``onnx_path``. A failure is logged, not raised: the
        checkpoint itself is committed and training goes on (``stepstream export`` can retry from it)."""
        try:
            data = policy_to_onnx(policy).SerializeToString()
            _write_atomically(path, data)
            if self._onnx_path is not None:
                _write_atomically(self._onnx_path, data)
        except (ValueError, OSError) as err:
            logger.error("checkpoint %s: no ONNX model written: %s", path, err)

    def _extra_dir(self, step: int) -> Path:
        return self.directory / f"extra-{step}"

    def _prune(self, keep_extra: Path) -> None:
        """Keep the newest ``keep_checkpoints`` committed checkpoints and ``keep_extra``; delete the rest."""
        committed = [s for s in self._steps() if self._record(s) is not None and s not in self._skipped]
        kept = set(committed[-self.keep_checkpoints :])
        for step in self._steps():
            if step not in kept:
                Path(f"{self._prefix(step)}{RECORD_SUFFIX}").unlink(missing_ok=True)  # uncommit before deleting data
                for file in self.directory.glob(f"{PREFIX}{step}.*"):
                    file.unlink(missing_ok=True)
                self._skipped.discard(step)
        for leftover in self.directory.glob(f"{PREFIX}*_temp*"):  # TensorFlow's temporary files of a killed write
            shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        for folder in self.directory.glob("extra-*"):
            if folder != keep_extra and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)

    def _steps(self) -> list[int]:
        """Steps of every checkpoint with any file in the directory (complete or not), ascending."""
        steps = set()
        for file in self.directory.glob(f"{PREFIX}*"):
            digits = file.name.removeprefix(PREFIX).split(".", 1)[0]
            if digits.isdigit() and file.is_file():
                steps.add(int(digits))
        return sorted(steps)

    def _record(self, step: int) -> CheckpointInfo | None:
        """The commit record of ``step``, or None when it is missing or unreadable."""
        try:
            data = json.loads(Path(f"{self._prefix(step)}{RECORD_SUFFIX}").read_text(encoding="utf-8"))
            return CheckpointInfo(int(data["step"]), int(data["version"]), str(self._prefix(step)), float(data["wall_time"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _incomplete(self, step: int) -> str | None:
        """Why the checkpoint of ``step`` cannot be restored, or None when it is complete."""
        prefix = self._prefix(step)
        record = self._record(step)
        if record is None:
            return f"no readable {prefix.name}{RECORD_SUFFIX} record (its save did not finish)"
        if record.step != step:
            return f"its record names step {record.step}"
        if not Path(f"{prefix}.index").is_file():
            return f"no {prefix.name}.index file"
        try:  # read every tensor before touching the learner: a cut data file fails here, not halfway through a restore
            reader = tf.train.load_checkpoint(str(prefix))
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
        except (tf.errors.OpError, IndexError, ValueError, OSError) as err:  # IndexError: TF's "Read less bytes"
            reason = " ".join(str(err).split())[:_REASON_CHARS]
            return f"its TensorFlow data cannot be read ({type(err).__name__}: {reason})"
        return None

    def restore_latest(self, *, extra: bool = True) -> tuple[int, int] | None:
        """Restore the newest complete checkpoint into the learner (and, with ``extra``, its extra state); module
        docstring.

        Returns:
            ``(step, version)`` it was taken at, or None when the directory holds no checkpoint.

        Raises:
            ConfigError: checkpoints exist, but none is complete.
            AssertionError: (from TF) the checkpoint does not match the learner's objects, e.g.
                other network sizes; resuming with other settings is not possible.
        """
        skipped = []
        for step in reversed(self._steps()):
            reason = self._incomplete(step)
            if reason is not None:
                logger.warning("skipping checkpoint %s: %s", self._prefix(step), reason)
                self._skipped.add(step)
                skipped.append(f"{self._prefix(step).name}: {reason}")
                continue
            return self._restore(step, extra)
        if skipped:
            raise ConfigError(f"{self.directory}: no complete checkpoint to restore ({'; '.join(skipped)})")
        return None

    def _restore(self, step: int, extra: bool = True) -> tuple[int, int]:
        path = str(self._prefix(step))
        status = self._checkpoint.read(path)  # write's counterpart: no save_counter
        # Every object that exists now must be in the checkpoint; optimizer slots created later
        # are restored when they are created (deferred restoration).
        status.assert_existing_objects_matched()
        step, version = int(self._step.numpy()), int(self._version.numpy())
        if extra:
            self._restore_extra(path, step)
        logger.info("restored %s (step %d, policy version %d)", path, step, version)
        return step, version

    def _restore_extra(self, path: str, step: int) -> None:
        extra = self._extra_dir(step)
        if not extra.is_dir() and any(any(folder.iterdir()) for folder in self.directory.glob("extra-*") if folder.is_dir()):
            logger.warning("%s: its extra state (replay buffer) was kept for a newer checkpoint only; not restored", path)
        self._learner.load_extra(extra if extra.is_dir() else self.directory)

    def checkpoints(self) -> list[CheckpointInfo]:
        """The committed checkpoints, oldest first (from their JSON records)."""
        infos = []
        for step in self._steps():
            record = self._record(step)
            if record is not None and step not in self._skipped:
                infos.append(record)
        return infos


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a kill leaves the old file or the new one, never a part."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
