"""SAC's replay buffer on disk: the file saved beside each checkpoint with ``save_replay_buffer: true``.

A noun of its own, apart from ``trainer.sac``'s maths: the file format and its atomic replacement. The rows (their
layout is ``trainer.sac.SACBatch``'s) are an ``AgentBuffer``; ``trainer.checkpoint`` hands the learner's
``save_extra`` / ``load_extra`` the ``extra-<step>/`` folder, where the buffer is ``REPLAY_BUFFER_FILE``
(``AgentBuffer.save_to_file``'s HDF5, as ML-Agents' ``.hdf5``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from common.buffer import AgentBuffer

logger = logging.getLogger(__name__)

REPLAY_BUFFER_FILE = "replay_buffer.hdf5"


def save_replay_buffer(replay: AgentBuffer, directory: Path) -> None:
    """Writes ``replay`` to ``directory / REPLAY_BUFFER_FILE``, creating ``directory`` if needed."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / REPLAY_BUFFER_FILE
    partial = directory / f"{REPLAY_BUFFER_FILE}.partial"
    replay.save_to_file(str(partial))
    os.replace(partial, path)  # a crash mid-save leaves the previous file whole


def load_replay_buffer(replay: AgentBuffer, directory: Path) -> None:
    """Replaces ``replay``'s rows with ``directory / REPLAY_BUFFER_FILE``; a missing file is logged, not an error.

    Raises:
        BufferException: the file exists but is not an AgentBuffer file.
    """
    path = directory / REPLAY_BUFFER_FILE
    if not path.exists():
        logger.info("no replay buffer at %s; SAC starts with an empty one", path)
        return
    replay.load_from_file(str(path))
