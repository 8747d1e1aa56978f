"""PPO's update buffer: the rows ``trainer.ppo`` appends per trajectory, and the minibatches an update reads.

ML-Agents' ``update_buffer`` of its PPO trainer: an ``AgentBuffer`` with one row per experience taken in since
the last update (cleared after it: PPO is on-policy). A row holds the trajectory's own fields (observations,
actions, the processor's log-probs, the action mask: ``common.trajectory`` keys), what PPO computed for it (the
columns below), and, when a reward signal has networks of its own, the transition its updates read (next
observation, done, env reward). An update reads the rows as ``MiniBatch`` fields. No maths here: the values,
GAE, returns and losses are ``trainer.ppo``'s.

Speed: the whole update is one call of one graph (every epoch's shuffled minibatches stacked by
``epoch_minibatches``, looped with ``tf.while_loop`` by ``summed_over_minibatches``), traced without autograph.
On the 2-core machine, CartPole's update (256 rows, 20 epochs, 2x64) takes ~12 ms instead of ~53 ms for one
call per epoch plus an ``AgentBuffer.shuffle`` each, and the warm-up trace ~0.3 s instead of ~0.9 s.

Shapes: ``N`` rows, ``B`` rows of a minibatch, ``S`` minibatches of an update, ``C`` continuous action
dimensions, ``nB`` discrete branches, ``M = sum(branches)``, ``K`` reward signals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.specs import ActionSpec
from trainer.reward_signals import RewardSignal, SignalBatch, update_signals

#: Update-buffer keys PPO adds to the trajectory's own (``common.trajectory``): float32 [N] advantages (summed over
#: signals), and [N, K] returns, value estimates and strength-scaled rewards, a column per reward signal.
ADVANTAGES, RETURNS, VALUE_ESTIMATES, SIGNAL_REWARDS = "advantages", "returns", "value_estimates", "signal_rewards"


class MiniBatch(NamedTuple):
    """``B`` update-buffer rows: a whole shuffled buffer (one epoch) or one minibatch; numpy in, tensors inside.

    ``obs``: one float32 [B, size_i] per observation, raw (normalised inside the step);
    ``continuous_actions`` float32 [B, C]; ``discrete_actions`` int32 [B, nB]; ``action_mask``
    float32 [B, M], 1 = allowed ([B, 0] with no branches); ``old_log_probs`` float32 [B], the
    processor's log-probs summed over dimensions and branches; ``advantages`` float32 [B] (summed over the
    signals); ``returns`` (value targets: each signal's advantages + old values) and ``old_values`` (V when
    the trajectory was added) float32 [B, K], a column per reward signal.
    """

    obs: tuple[tf.Tensor, ...]
    continuous_actions: tf.Tensor
    discrete_actions: tf.Tensor
    action_mask: tf.Tensor
    old_log_probs: tf.Tensor
    advantages: tf.Tensor
    returns: tf.Tensor
    old_values: tf.Tensor

    @classmethod
    def from_buffer(cls, buffer: AgentBuffer, n_obs: int, branches: Sequence[int]) -> MiniBatch:
        """Every row of ``buffer``, as numpy; ``branches``: the action's (with none, the rows have no action mask)."""
        obs = tuple(buffer[tr.obs_key(i)].data for i in range(n_obs))
        actions = buffer[tr.CONTINUOUS_ACTIONS].data, buffer[tr.DISCRETE_ACTIONS].data
        mask = buffer[tr.ACTION_MASK].data if branches else np.zeros((buffer.num_experiences, 0), np.float32)
        old_log_probs = buffer[tr.CONTINUOUS_LOG_PROBS].data.sum(axis=1) + buffer[tr.DISCRETE_LOG_PROBS].data.sum(axis=1)
        targets = buffer[ADVANTAGES].data, buffer[RETURNS].data, buffer[VALUE_ESTIMATES].data
        return cls(obs, *actions, mask, old_log_probs.astype(np.float32), *targets)

    @classmethod
    def stacked_signature(cls, obs_specs: tuple[tf.TensorSpec, ...], action_spec: ActionSpec, signals: int) -> MiniBatch:
        """``tf.TensorSpec`` of every field of ``S`` stacked minibatches (``[S, B, ...]``), for any S and B, given the
        observations' ``[None, size_i]`` specs: an update graph's input signature."""
        rows, heads = tf.TensorSpec([None], tf.float32), tf.TensorSpec([None, signals])
        continuous, mask = tf.TensorSpec([None, action_spec.continuous_size]), tf.TensorSpec([None, action_spec.mask_width])
        discrete = tf.TensorSpec([None, action_spec.num_branches], tf.int32)
        batch_spec = cls(obs_specs, continuous, discrete, mask, rows, rows, heads, heads)
        stacked: MiniBatch = tf.nest.map_structure(lambda spec: tf.TensorSpec([None, *spec.shape], spec.dtype), batch_spec)
        return stacked


def observations(trajectories: Sequence[tr.Trajectory], n_obs: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(obs, next_obs) per observation i: float32 [N, size_i], every experience of ``trajectories`` in order, and
    float32 [len(trajectories), size_i], the observation after each trajectory's last experience."""
    obs = [np.concatenate([t.obs[i] for t in trajectories]).astype(np.float32, copy=False) for i in range(n_obs)]
    next_obs = [np.stack([t.next_obs[i] for t in trajectories]).astype(np.float32, copy=False) for i in range(n_obs)]
    return obs, next_obs


def trajectory_rows(
    trajectories: Sequence[tr.Trajectory],
    obs: Sequence[np.ndarray],
    branches: Sequence[int],
    computed: Mapping[str, np.ndarray],
    transitions: SignalBatch | None,
) -> dict[str, np.ndarray]:
    """The update-buffer rows of ``trajectories``, in order (module docstring).

    Args:
        obs: float32 [N, size_i] per observation, the trajectories' observations concatenated.
        branches: the action's; with any, each row keeps its action mask (as float32 [N, M]).
        computed: PPO's columns (``ADVANTAGES`` ...), [N] or [N, K] each.
        transitions: the same rows as the reward signals read them, kept for their own updates; or None when no
            signal has networks of its own.
    """
    rows = {tr.obs_key(i): o for i, o in enumerate(obs)}
    for key in (tr.CONTINUOUS_ACTIONS, tr.DISCRETE_ACTIONS, tr.CONTINUOUS_LOG_PROBS, tr.DISCRETE_LOG_PROBS):
        rows[key] = np.concatenate([getattr(t, key) for t in trajectories])
    if branches:  # the processor always sends a mask with branches (all True when the env gave none)
        rows[tr.ACTION_MASK] = np.concatenate([t.action_mask for t in trajectories]).astype(np.float32)
    rows.update(computed)
    if transitions is not None:  # what the signals' own updates read (SignalBatch.from_rows)
        rows.update({tr.next_obs_key(i): o for i, o in enumerate(transitions.next_obs)})
        rows.update({tr.DONE: transitions.done, tr.REWARDS: transitions.rewards})
    return rows


def epoch_minibatches(
    buffer: AgentBuffer, n_obs: int, branches: Sequence[int], num_epoch: int, batch_size: int, rng: np.random.Generator
) -> tuple[MiniBatch, np.ndarray]:
    """Every minibatch of ``num_epoch`` shuffled passes over the ``N`` rows of ``buffer``, epochs back to back,
    stacked: ``MiniBatch`` fields ``[S, B, ...]``, with their row indices int [S, B]; ``S = num_epoch * (N // B)``.

    One shuffle per epoch, composed as ``AgentBuffer.shuffle`` would compose them in place; each epoch keeps its
    first ``(N // batch_size) * batch_size`` rows (a last partial minibatch is dropped).
    """
    n = buffer.num_experiences
    per_epoch = n // batch_size
    order, index = np.arange(n), []
    for _ in range(num_epoch):
        order = order[rng.permutation(n)]
        index.append(order[: per_epoch * batch_size])
    take = np.concatenate(index).reshape(num_epoch * per_epoch, batch_size)
    stacked: MiniBatch = tf.nest.map_structure(lambda x: x[take], MiniBatch.from_buffer(buffer, n_obs, branches))
    return stacked, take


def summed_over_minibatches(step: Callable[[MiniBatch], tf.Tensor], batches: MiniBatch, width: int) -> tf.Tensor:
    """Inside a graph: ``step`` on each of the ``S`` minibatches stacked in ``batches`` (``[S, B, ...]`` per field),
    in order, in one ``tf.while_loop``; returns the sum of its float32 [width] results."""

    def body(i: tf.Tensor, sums: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return i + 1, sums + step(tf.nest.map_structure(lambda x: x[i], batches))

    steps = tf.shape(batches.advantages)[0]
    _, sums = tf.while_loop(lambda i, _: i < steps, body, (tf.constant(0), tf.zeros([width])))
    return sums


def train_signals(
    buffer: AgentBuffer, minibatches: np.ndarray, signals: Sequence[RewardSignal], n_obs: int
) -> dict[str, float]:
    """One ``update`` of every signal on each minibatch of ``buffer``'s rows (row indices int [S, B]), in order, as
    ML-Agents updates its reward signals on the policy's minibatches; returns each summary's mean over them."""
    rows = SignalBatch.from_buffer(buffer, n_obs)
    return update_signals(signals, (rows.take(index) for index in minibatches))


def signal_summaries(buffer: AgentBuffer, signals: Sequence[RewardSignal]) -> dict[str, float]:
    """Each signal's mean value estimate and mean reward per step over the rows of ``buffer``, under its
    ``value_tag`` and ``reward_tag``."""
    values, rewards = buffer[VALUE_ESTIMATES].data, buffer[SIGNAL_REWARDS].data
    out = {signal.value_tag: float(np.mean(values[:, k])) for k, signal in enumerate(signals)}
    out.update({signal.reward_tag: float(np.mean(rewards[:, k])) for k, signal in enumerate(signals)})
    return out
