"""SAC's replay buffer: the layout of its rows, the minibatches a gradient step reads, and its file.

The replay buffer is an ``AgentBuffer`` with one row per experience, under the keys ``obs_i``, ``next_obs_i``
(observation i; ``common.trajectory``) and the other field names of ``SACBatch``; ``trainer.sac`` fills it
(``SACLearner.add_trajectories``) and samples it. With ``save_replay_buffer: true`` it is saved beside each
checkpoint: ``trainer.checkpoint`` hands the learner's ``save_extra`` / ``load_extra`` the ``extra-<step>/``
folder, where the buffer is ``REPLAY_BUFFER_FILE`` (``AgentBuffer.save_to_file``'s HDF5, as ML-Agents' ``.hdf5``).

Shapes: ``B`` minibatch rows, ``C`` continuous dimensions, ``nB`` branches, ``M = sum(branches)``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.specs import ActionSpec
from trainer.reward_signals import RewardSignal, SignalBatch, update_signals

logger = logging.getLogger(__name__)

NEXT_ACTION_MASK = "next_action_mask"
REPLAY_BUFFER_FILE = "replay_buffer.hdf5"


class SACBatch(NamedTuple):
    """One minibatch of ``B`` replay rows (module docstring); rewards are already times the extrinsic strength."""

    obs: tuple[Any, ...]  # float32 [B, size_i] per observation
    next_obs: tuple[Any, ...]  # float32 [B, size_i] per observation: the obs after the action
    continuous_actions: Any  # float32 [B, C], squashed
    discrete_actions: Any  # int32 [B, nB]
    action_mask: Any  # float32 [B, M], 1 = allowed
    next_action_mask: Any  # float32 [B, M], the mask at next_obs (all ones where unknown)
    rewards: Any  # float32 [B]
    done: Any  # float32 [B], 1 on a true terminal only

    @classmethod
    def signature(cls, obs_sizes: Sequence[int], action_spec: ActionSpec) -> SACBatch:
        """``tf.TensorSpec`` of every field, for minibatches of any size: a gradient step's input signature."""

        def rows(width: int, dtype: tf.DType = tf.float32) -> tf.TensorSpec:
            return tf.TensorSpec([None, width], dtype)

        obs, mask, vec = tuple(rows(size) for size in obs_sizes), rows(action_spec.mask_width), tf.TensorSpec([None])
        continuous, discrete = rows(action_spec.continuous_size), rows(len(action_spec.discrete_branches), tf.int32)
        return cls(obs, obs, continuous, discrete, mask, mask, vec, vec)

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray], rows: slice, n_obs: int) -> SACBatch:
        """The ``rows`` of sampled replay columns (``AgentBuffer`` field data by key)."""
        obs, next_obs = (tuple(columns[key(i)][rows] for i in range(n_obs)) for key in (tr.obs_key, tr.next_obs_key))
        keys = (tr.CONTINUOUS_ACTIONS, tr.DISCRETE_ACTIONS, tr.ACTION_MASK, NEXT_ACTION_MASK, tr.REWARDS, tr.DONE)
        return cls(obs, next_obs, *(columns[key][rows] for key in keys))


def train_signals(
    replay: AgentBuffer, signals: Sequence[RewardSignal], steps: int, batch_size: int, n_obs: int, rng: np.random.Generator
) -> dict[str, float]:
    """One ``update`` of every signal on each of ``steps`` minibatches of ``batch_size`` rows sampled from ``replay``
    (with replacement, as ML-Agents); returns each summary's mean over them."""
    sampled = (replay.sample_mini_batch(batch_size, rng=rng) for _ in range(steps))
    return update_signals(signals, (SignalBatch.from_buffer(rows, n_obs) for rows in sampled))


def save_replay_buffer(replay: AgentBuffer, directory: Path) -> None:
    """Writes ``replay`` to ``directory / REPLAY_BUFFER_FILE``, creating ``directory`` if needed."""
    directory.mkdir(parents=True, exist_ok=True)
    path, partial = directory / REPLAY_BUFFER_FILE, directory / f"{REPLAY_BUFFER_FILE}.partial"
    replay.save_to_file(str(partial))
    os.replace(partial, path)  # a crash mid-save leaves the previous file whole


def load_replay_buffer(replay: AgentBuffer, directory: Path) -> None:
    """Replaces ``replay``'s rows with ``directory / REPLAY_BUFFER_FILE``; a missing file is logged, not an error.

    Raises:
        BufferException: the file exists but is not an AgentBuffer file.
    """
    if not (path := directory / REPLAY_BUFFER_FILE).exists():
        logger.info("no replay buffer at %s; SAC starts with an empty one", path)
        return
    replay.load_from_file(str(path))
