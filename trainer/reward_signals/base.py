"""What every reward signal shares: the batch it reads, the role it plays, the extrinsic signal, demo rows.

A *reward signal* turns experiences into one reward per experience (ML-Agents' ``BaseRewardProvider``).
``extrinsic`` passes the env's reward through; ``gail`` and ``curiosity`` (sibling modules) compute theirs
with networks of their own, trained by ``update`` on minibatches of the learner's experiences. Every
signal's reward is already multiplied by its ``strength``; a learner sums or separately discounts them.

Shapes: ``N`` experiences, ``C`` continuous action size, ``nB`` discrete branches, ``M = sum(branches)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.config import DemoActionTiming, RewardSignalSettings
from common.demo import demo_to_buffer
from common.policy_contract import is_image_shape
from common.specs import ActionSpec, BrainParameters
from trainer.encoders import as_observation_dtype
from trainer.summaries import EXTRINSIC_REWARD, EXTRINSIC_VALUE_ESTIMATE


class SignalBatch(NamedTuple):
    """``N`` experiences as a reward signal reads them (numpy, one row per experience).

    ``obs`` / ``next_obs``: one [N, size_i] float32 per vector observation and one [N, H, W, C] per image (uint8 or
    float32, as its spec), raw (not normalised), before and after the action; ``continuous_actions`` float32
    [N, C], the *env's* action (clipped or squashed into [-1, 1], as demonstrations record it); ``discrete_actions``
    int32 [N, nB]; ``done`` float32 [N], 1 where the episode ended after the action; ``rewards`` float32 [N], the env's
    reward (unscaled).
    """

    # numpy arrays from a learner; tf.Tensor (or tf.TensorSpec, in ``batch_signature``) inside a graph
    obs: tuple[Any, ...]
    next_obs: tuple[Any, ...]
    continuous_actions: Any
    discrete_actions: Any
    done: Any
    rewards: Any

    @property
    def size(self) -> int:
        return len(self.rewards)

    @classmethod
    def from_rows(cls, rows: Mapping[str, np.ndarray], n_obs: int) -> SignalBatch:
        """From update-buffer columns (``common.trajectory`` / ``common.demo`` keys) of equal length.

        Continuous actions are clipped to [-1, 1]: PPO stores the raw Gaussian sample, whose env copy is clipped.
        """
        f32 = np.float32

        def observation(key: str) -> np.ndarray:
            x = np.asarray(rows[key])
            return x if x.ndim == 4 else np.asarray(x, f32).reshape(len(x), -1)  # an image keeps its shape and dtype

        return cls(
            tuple(observation(tr.obs_key(i)) for i in range(n_obs)),
            tuple(observation(tr.next_obs_key(i)) for i in range(n_obs)),
            np.clip(np.asarray(rows[tr.CONTINUOUS_ACTIONS], f32), -1.0, 1.0),
            np.asarray(rows[tr.DISCRETE_ACTIONS], np.int32),
            np.asarray(rows[tr.DONE], f32),
            np.asarray(rows[tr.REWARDS], f32),
        )

    @classmethod
    def from_buffer(cls, buffer: AgentBuffer, n_obs: int) -> SignalBatch:
        """Every row of ``buffer`` (PPO's update buffer, a minibatch sampled from SAC's replay buffer): ``from_rows``."""
        return cls.from_rows({key: field.data for key, field in buffer.items()}, n_obs)

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[tr.Trajectory], n_obs: int, transitions: bool = True) -> SignalBatch:
        """Every experience of ``trajectories``, in order; without ``transitions`` only the rewards (the rest empty:
        all the extrinsic signal reads, and much cheaper)."""
        if not transitions:
            return cls((), (), None, None, None, np.concatenate([t.rewards for t in trajectories]).astype(np.float32))
        rows = [t.to_rows() for t in trajectories]
        keys = [tr.obs_key(i) for i in range(n_obs)] + [tr.next_obs_key(i) for i in range(n_obs)]
        keys += [tr.CONTINUOUS_ACTIONS, tr.DISCRETE_ACTIONS, tr.DONE, tr.REWARDS]
        return cls.from_rows({key: np.concatenate([r[key] for r in rows]) for key in keys}, n_obs)

    def take(self, index: np.ndarray) -> SignalBatch:
        """The rows at ``index`` (int [K])."""
        return SignalBatch(
            tuple(o[index] for o in self.obs),
            tuple(o[index] for o in self.next_obs),
            self.continuous_actions[index],
            self.discrete_actions[index],
            self.done[index],
            self.rewards[index],
        )


class RewardSignal(Protocol):
    """One entry of ``reward_signals``.

    Attributes:
        name: the YAML key (``extrinsic``, ``gail``, ``curiosity``).
        gamma: its discount per agent step (PPO gives each signal its own value head and returns).
        strength: the multiplier already applied by ``rewards``.
        ignore_done: bootstrap even after a true terminal (ML-Agents' ``ignore_done``; curiosity's is True).
        reward_tag: the summary tag of its mean reward per agent step.
        value_tag: the summary tag of its mean value estimate (PPO).
    """

    name: str
    gamma: float
    strength: float
    ignore_done: bool
    reward_tag: str
    value_tag: str

    def rewards(self, batch: SignalBatch) -> np.ndarray:
        """float32 [N]: this signal's reward per experience, times ``strength``."""
        ...

    def update(self, batch: SignalBatch) -> dict[str, float]:
        """One gradient step of the signal's own networks on ``batch``; its summaries ({} for extrinsic)."""
        ...

    def checkpoint_objects(self) -> dict[str, object]:
        """Trackable networks and optimisers to checkpoint ({} for extrinsic)."""
        ...


class ExtrinsicSignal:
    """The env's own reward, times ``strength``."""

    name = "extrinsic"
    ignore_done = False
    reward_tag = EXTRINSIC_REWARD
    value_tag = EXTRINSIC_VALUE_ESTIMATE

    def __init__(self, settings: RewardSignalSettings) -> None:
        self.gamma, self.strength = settings.gamma, settings.strength

    def rewards(self, batch: SignalBatch) -> np.ndarray:
        return batch.rewards * np.float32(self.strength)

    def update(self, batch: SignalBatch) -> dict[str, float]:
        del batch
        return {}

    def checkpoint_objects(self) -> dict[str, object]:
        return {}


def update_signals(signals: Sequence[RewardSignal], batches: Iterable[SignalBatch]) -> dict[str, float]:
    """One ``update`` of every signal on each batch in turn; returns each summary's mean over the batches."""
    stats: dict[str, list[float]] = {}
    for batch in batches:
        for signal in signals:
            for key, value in signal.update(batch).items():
                stats.setdefault(key, []).append(value)
    return {key: float(np.mean(values)) for key, values in stats.items()}


def add_signal_rewards(signals: Sequence[RewardSignal], columns: dict[str, np.ndarray], n_obs: int) -> dict[str, float]:
    """Adds each signal's reward (times its strength), by the signals' current networks, to ``columns``' ``rewards``
    (float32 [N]; the other columns are read as ``SignalBatch.from_rows`` reads them); returns each signal's mean
    reward under its ``reward_tag``. SAC's way: one summed reward, recomputed on every sampled minibatch."""
    if not signals:
        return {}
    batch, means = SignalBatch.from_rows(columns, n_obs), {}
    for signal in signals:
        rewards = signal.rewards(batch)
        columns[tr.REWARDS] = columns[tr.REWARDS] + rewards
        means[signal.reward_tag] = float(np.mean(rewards))
    return means


def signal_checkpoint_objects(signals: Sequence[RewardSignal]) -> dict[str, object]:
    """The signals' networks and optimisers under ``<signal>_<key>`` (e.g. ``gail_discriminator``): the names a
    learner's ``checkpoint_objects`` gives them."""
    objects: dict[str, object] = {}
    for signal in signals:
        objects.update({f"{signal.name}_{key}": value for key, value in signal.checkpoint_objects().items()})
    return objects


def expert_rows(
    demo_path: str, brain_parameters: BrainParameters, action_timing: DemoActionTiming = DemoActionTiming.AUTO
) -> AgentBuffer:
    """The demonstration's update-buffer rows (``common.demo.demo_to_buffer``, sequence length 1), paired by
    ``action_timing`` (the section's ``demo_action_timing``: which record holds an obs's action).

    ``demo_path`` is resolved as given, relative to the working directory, as ML-Agents resolves it.

    Raises:
        DemoError: a missing or malformed file, or one whose spec differs from ``brain_parameters``.
    """
    _, buffer = demo_to_buffer(Path(demo_path), 1, expected_spec=brain_parameters, action_timing=action_timing)
    for i, spec in enumerate(brain_parameters.observation_specs):  # demo images are float32; a uint8 camera's are not
        for key in (tr.obs_key(i), tr.next_obs_key(i)):
            if key in buffer:
                buffer[key].set(as_observation_dtype(buffer[key].data, spec))
    return buffer


def action_features(continuous: tf.Tensor, discrete: tf.Tensor, spec: ActionSpec) -> tf.Tensor:
    """float32 [N, C + M]: the continuous action beside one one-hot per branch (ML-Agents' ``ActionFlattener``)."""
    parts = [continuous] + [tf.one_hot(discrete[:, b], n) for b, n in enumerate(spec.discrete_branches)]
    return tf.concat(parts, axis=1)


def batch_signature(brain_parameters: BrainParameters) -> SignalBatch:
    """A ``SignalBatch`` of ``tf.TensorSpec`` with a free leading axis: one trace for a signal's life."""
    spec = brain_parameters.action_spec
    obs = tuple(
        tf.TensorSpec([None, *o.shape], o.dtype) if is_image_shape(o.shape) else tf.TensorSpec([None, int(np.prod(o.shape))])
        for o in brain_parameters.observation_specs
    )
    rows = tf.TensorSpec([None], tf.float32)
    continuous = tf.TensorSpec([None, spec.continuous_size], tf.float32)
    return SignalBatch(obs, obs, continuous, tf.TensorSpec([None, spec.num_branches], tf.int32), rows, rows)
