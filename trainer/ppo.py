"""Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347), as ML-Agents trains it.

Top to bottom: the constants, GAE, the minibatch and the losses (pure: tensors in and out), the update buffer's
rows and minibatches, then ``PPOLearner``, the ``trainer.learner.Learner``. Its settings are
``common.config.PPOHyperparameters`` (the YAML's ``hyperparameters``).

The update contract (``trainer.loop`` drives it):

* **In**: trajectories, through ``add_trajectories``. Each counts its experiences as trainer steps (the schedules'
  clock) and waits as it is; when the update buffer is read, every waiting trajectory becomes rows at once: its
  observations are folded into the normalisers, its values estimated, and GAE computed per reward signal.
* **When**: ``ready_to_update`` once the buffer holds ``buffer_size`` experiences.
* **Out**: ``update`` reads learning rate, epsilon and beta off their schedules (``trainer.schedules``) at the trainer
  step, makes ``num_epoch`` shuffled passes over the buffer in minibatches of ``batch_size`` (a last partial one is
  dropped), each one Adam step on the policy and value networks together, clears the buffer (PPO is on-policy) and
  returns the update's summaries, ML-Agents' tags (``trainer.summaries``).
* **Publish**: the loop exports a policy (``export_policy``: the policy network as TFLite, with the normaliser state)
  after each update, and once before the first, so the envs can act at once. Nothing else reaches the processor.

Four variants are stepstream settings (ML-Agents' YAML has no key for them), with SB3's choices as defaults, because
ML-Agents' choices solved CartPole-v1 markedly slower (benchmarks/time_to_solve.py shows it):

* ``clip_value_loss`` false: the value loss is plain ``mean((R - V)^2)``, as SB3 (``clip_range_vf=None``) and
  CleanRL recommend. ML-Agents' clipped value loss lets V move at most epsilon per update from its old estimate:
  with unnormalised returns of up to 1 / (1 - gamma) the critic takes many updates to catch up, and the advantages
  stay noise.
* ``max_grad_norm`` 0.5: the global norm of each minibatch's gradient is clipped (SB3's ``max_grad_norm``;
  ML-Agents does not clip).
* ``activation`` tanh and ``orthogonal_init``: SB3's MlpPolicy (orthogonal kernels, gain sqrt(2) hidden, 0.01
  policy head, 1 value head). ``orthogonal_init: false`` is SB3's ``ortho_init=False``: ``torch.nn.Linear``'s own
  start, biases included (``trainer.networks.WeightInit``).

``log_std_init`` (a stepstream key, default 0: std 1, as ML-Agents and SB3 start) sets the Gaussian's initial
log_std: where every failed episode pays an action cost (MountainCarContinuous-v0), std 1 can drive the policy to
stand still before it finds the goal; a lower start avoids it.

``use_sde`` (a stepstream key, default false): gSDE, SB3's ``use_sde`` (``trainer.networks.PolicyNetwork``); the
processor holds each agent's exploration matrix (``processor.exploration``) for ``sde_sample_freq`` steps, and the
log-prob below is the Gaussian of the per-state std the network outputs, so this module changes nothing else.

``normalize_reward`` (a stepstream key): the extrinsic rewards are scaled by SB3 VecNormalize's reward half
(``trainer.reward_scaler``) before GAE.

Reward signals (``trainer.reward_signals``: extrinsic, gail, curiosity): the value network has one output, a
value head, per signal, in ``reward_signals`` order. Each signal's strength-scaled reward gets its own GAE with
its own gamma and returns (the value targets of its head); the policy's advantage is their sum (ML-Agents takes
the mean: the same after the per-minibatch normalisation). After the PPO steps, each signal with networks of
its own takes one step on each of the update's minibatches, and ``behavioral_cloning`` (``trainer.bc_component``)
runs its cloning steps. None of it reaches the exported policy.

``shared_critic`` (ML-Agents' own key, default false): one encoder and MLP body feed the policy heads and the value
heads (``trainer.networks.SharedValueHeads``, ML-Agents' ``SharedActorCritic``), and the total loss's value term
trains the shared trunk too, as ML-Agents' optimiser steps once on ``policy + 0.5 * value - beta * entropy`` over the
actor's parameters; one trunk pass per minibatch feeds both heads. With images this halves the convolution work of
an update (SB3's CnnPolicy shares its features extractor the same way). The exported policy is the actor alone.

Speed: the whole update is one call of one graph (every epoch's shuffled minibatches stacked by
``epoch_minibatches``, looped with ``tf.while_loop`` by ``summed_over_minibatches``), traced once without autograph
(``trainer.warm_up``). In the embedded mode the trainer's thread shares the GIL with the processor's event loop, so
the learner keeps its TensorFlow calls few: a take-in makes none (the step variable is brought up to date once per
update, the rows are made in one value-network call per update), the traced graphs are called directly, and Adam's
step is one fused kernel per variable (``trainer.optimizer.apply_adam``).

Shapes: ``T`` experiences of one trajectory, ``N`` of many, ``B`` rows of a minibatch, ``S`` minibatches of an
update, ``C`` continuous action dimensions, ``nB`` discrete branches, ``M = sum(branches)``, ``K`` reward signals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.config import BehaviorSettings, ConfigKeyError, PPOHyperparameters
from common.groups import fold_group_rewards
from common.policy_contract import LOG_STD, LOGITS, MEAN
from common.specs import ActionSpec, BrainParameters
from protos import pb
from trainer import networks
from trainer.bc_component import BCComponent
from trainer.encoders import image_observation_dtypes, observation_encoder
from trainer.export import TFLiteExporter, make_policy_update, normalizer_state
from trainer.networks import (
    PolicyNetwork,
    SharedValueHeads,
    ValueNetwork,
    WeightInit,
    activation_function,
    normalized_observations,
    observation_normalizers,
)
from trainer.optimizer import adam, apply_adam
from trainer.reward_scaler import RewardScaler
from trainer.reward_signals import RewardSignal, SignalBatch, make_reward_signals, signal_checkpoint_objects, update_signals
from trainer.schedules import MIN_LEARNING_RATE, decayed_value
from trainer.seeding import seeded_initializers
from trainer.summaries import BETA, ENTROPY, EPSILON, LEARNING_RATE, POLICY_LOSS, VALUE_LOSS
from trainer.warm_up import WarmUp

logger = logging.getLogger(__name__)

#: ML-Agents' constants its YAML does not expose: the value loss weight, the advantage std floor, Adam's epsilon
#: (PyTorch's default), and where the linear schedules of epsilon and beta end at max_steps (the learning rate's
#: is ``trainer.schedules.MIN_LEARNING_RATE``).
VALUE_LOSS_COEFFICIENT = 0.5
ADVANTAGE_EPSILON = 1e-10
ADAM_EPSILON = 1e-8
MIN_EPSILON = 0.1
MIN_BETA = 1e-5
#: The clip mode's bound: the env gets clip(u, -1, 1) of the Gaussian sample u, as SB3 and CleanRL clip to the
#: action bounds. ML-Agents' clip(u, -3, 3) / 3 needs |u| >= 3 for a full-scale action, which made continuous PPO
#: several times slower to learn the 1-D task (tests/learning).
ACTION_CLIP = 1.0

#: Update-buffer keys PPO adds to the trajectory's own (``common.trajectory``): float32 [N] advantages (summed over
#: signals), and [N, K] returns, value estimates and strength-scaled rewards, a column per reward signal.
ADVANTAGES = "advantages"
RETURNS = "returns"
VALUE_ESTIMATES = "value_estimates"
SIGNAL_REWARDS = "signal_rewards"


# -- returns -------------------------------------------------------------------------------------


def gae(rewards: np.ndarray, values: np.ndarray, next_value: float, gamma: float, lambd: float) -> np.ndarray:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438, eq. 16) over one trajectory.

    ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)`` and ``A_t = sum_l (gamma * lambd)^l * delta_{t+l}``,
    computed backwards as ``A_t = delta_t + gamma * lambd * A_{t+1}``. The two ends of the trade-off:

    * ``lambd = 1``: ``A_t = G_t - V(s_t)``, the discounted Monte-Carlo return (bootstrapped with
      ``next_value`` after the last step) minus the value: no bias from V, high variance.
    * ``lambd = 0``: ``A_t = delta_t``, the one-step TD error: low variance, biased by V.

    Args: ``rewards`` float32 [T] (scaled), ``values`` float32 [T] ``V(s_t)``, ``next_value`` ``V(s_T)``
    after the last step (0 when the episode truly terminated there), ``gamma`` in [0, 1), ``lambd`` in [0, 1].

    Returns: float32 [T], the advantages ``A_t``; the returns (value targets) are ``A_t + V(s_t)``.
    """
    next_values = np.append(values[1:], np.float32(next_value))
    delta = rewards + gamma * next_values - values
    advantages = np.zeros(len(rewards), dtype=np.float32)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = delta[t] + gamma * lambd * running
        advantages[t] = running
    return advantages


# -- the losses: pure functions, tensors in and out -------------------------------------------------


class MiniBatch(NamedTuple):
    """``B`` update-buffer rows: a whole shuffled buffer (one epoch) or one minibatch; numpy in, tensors inside.

    ``obs``: one [B, *shape_i] per observation (vectors float32, images uint8 or float32), raw (normalised inside the step);
    ``continuous_actions`` float32 [B, C]; ``discrete_actions`` int32 [B, nB]; ``action_mask``
    float32 [B, M], 1 = allowed ([B, 0] with no branches); ``old_log_probs`` float32 [B], the
    processor's log-probs summed over dimensions and branches; ``advantages`` float32 [B] (summed over the
    signals); ``returns`` (value targets: each signal's advantages + old values) and ``old_values`` (V when
    the trajectory was added) float32 [B, K], a column per reward signal; ``weights`` float32 [B], the
    advantages' importance weights ``min(1, pi_prox(a|s) / pi_behaviour(a|s))`` when ``proximal_clip`` is on (then
    ``old_log_probs`` are the proximal policy's, see ``PPOLearner.update``), else 1. Stacked for one update
    (``epoch_minibatches``), every field gains a leading ``[S]`` axis.
    """

    obs: tuple[tf.Tensor, ...]
    continuous_actions: tf.Tensor
    discrete_actions: tf.Tensor
    action_mask: tf.Tensor
    old_log_probs: tf.Tensor
    advantages: tf.Tensor
    returns: tf.Tensor
    old_values: tf.Tensor
    weights: tf.Tensor

    @classmethod
    def from_buffer(cls, buffer: AgentBuffer, n_obs: int, branches: Sequence[int]) -> MiniBatch:
        """Every row of ``buffer``, as numpy; ``branches``: the action's (with none, the rows have no action mask)."""
        obs = tuple(buffer[tr.obs_key(i)].data for i in range(n_obs))
        continuous = buffer[tr.CONTINUOUS_ACTIONS].data
        discrete = buffer[tr.DISCRETE_ACTIONS].data
        mask = buffer[tr.ACTION_MASK].data if branches else np.zeros((buffer.num_experiences, 0), np.float32)
        old_log_probs = buffer[tr.CONTINUOUS_LOG_PROBS].data.sum(axis=1) + buffer[tr.DISCRETE_LOG_PROBS].data.sum(axis=1)
        advantages = buffer[ADVANTAGES].data
        returns = buffer[RETURNS].data
        old_values = buffer[VALUE_ESTIMATES].data
        weights = np.ones(buffer.num_experiences, np.float32)
        return cls(obs, continuous, discrete, mask, old_log_probs.astype(np.float32), advantages, returns, old_values, weights)

    @classmethod
    def stacked_signature(cls, obs_specs: tuple[tf.TensorSpec, ...], action_spec: ActionSpec, signals: int) -> MiniBatch:
        """``tf.TensorSpec`` of every field of ``S`` stacked minibatches (``[S, B, ...]``), for any S and B, given the
        observations' ``[None, *shape_i]`` specs: an update graph's input signature."""
        rows = tf.TensorSpec([None], tf.float32)
        heads = tf.TensorSpec([None, signals])
        continuous = tf.TensorSpec([None, action_spec.continuous_size])
        mask = tf.TensorSpec([None, action_spec.mask_width])
        discrete = tf.TensorSpec([None, action_spec.num_branches], tf.int32)
        batch_spec = cls(obs_specs, continuous, discrete, mask, rows, rows, heads, heads, rows)
        stacked: MiniBatch = tf.nest.map_structure(lambda spec: tf.TensorSpec([None, *spec.shape], spec.dtype), batch_spec)
        return stacked


class PPOLosses(NamedTuple):
    """Scalars of one minibatch."""

    total: tf.Tensor
    policy: tf.Tensor
    value: tf.Tensor
    entropy: tf.Tensor


def normalized_advantages(advantages: tf.Tensor, epsilon: float = ADVANTAGE_EPSILON) -> tf.Tensor:
    """``(A - mean(A)) / (std(A) + epsilon)`` over a minibatch ``[B]``."""
    mean, variance = tf.nn.moments(advantages, axes=[0])
    return (advantages - mean) / (tf.sqrt(variance) + epsilon)


def clipped_surrogate_loss(
    log_probs: tf.Tensor, old_log_probs: tf.Tensor, advantages: tf.Tensor, epsilon: tf.Tensor
) -> tf.Tensor:
    """``-L^CLIP`` (eq. 7), negated for minimisation: ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))``.

    ``r = pi(a|s) / pi_old(a|s) = exp(log_probs - old_log_probs)``; all inputs ``[B]``. The min makes
    the objective a pessimistic bound: a ratio beyond the clip range earns nothing more in the
    direction the advantage favours, but is still penalised fully in the other.
    """
    ratio = tf.exp(log_probs - old_log_probs)
    unclipped = ratio * advantages
    clipped = tf.clip_by_value(ratio, 1.0 - epsilon, 1.0 + epsilon) * advantages
    return -tf.reduce_mean(tf.minimum(unclipped, clipped))


def clipped_value_loss(values: tf.Tensor, old_values: tf.Tensor, returns: tf.Tensor, epsilon: tf.Tensor) -> tf.Tensor:
    """ML-Agents' (and OpenAI baselines') clipped value loss, all inputs ``[B]`` (or ``[B, K]``):
    ``mean(max((R - V)^2, (R - V_clip)^2))`` with ``V_clip = V_old + clip(V - V_old, -eps, eps)``."""
    clipped_values = old_values + tf.clip_by_value(values - old_values, -epsilon, epsilon)
    return tf.reduce_mean(tf.maximum(tf.square(returns - values), tf.square(returns - clipped_values)))


def squared_value_loss(values: tf.Tensor, returns: tf.Tensor) -> tf.Tensor:
    """SB3's and CleanRL's value loss, ``mean((R - V)^2)``, inputs ``[B]`` (or ``[B, K]``)."""
    return tf.reduce_mean(tf.square(returns - values))


def ppo_losses(
    log_probs: tf.Tensor,
    entropy: tf.Tensor,
    values: tf.Tensor,
    batch: MiniBatch,
    epsilon: tf.Tensor,
    beta: tf.Tensor,
    clip_value_loss: bool,
) -> PPOLosses:
    """``L = -L^CLIP + 0.5 * L_value - beta * mean(entropy)`` (eq. 9, signs for minimisation) of one minibatch.

    ``log_probs``, ``entropy`` [B] and ``values`` [B, K] come from the current networks; ``batch`` gives
    the old log-probs, old values, returns and advantages, which are normalised per minibatch here. The value
    loss averages over rows and value heads (ML-Agents averages the heads' losses); ``clip_value_loss`` picks
    ``clipped_value_loss`` over ``squared_value_loss`` (module docstring).
    """
    advantages = normalized_advantages(batch.advantages) * batch.weights
    policy = clipped_surrogate_loss(log_probs, batch.old_log_probs, advantages, epsilon)
    if clip_value_loss:
        value = clipped_value_loss(values, batch.old_values, batch.returns, epsilon)
    else:
        value = squared_value_loss(values, batch.returns)
    mean_entropy = tf.reduce_mean(entropy)
    total = policy + VALUE_LOSS_COEFFICIENT * value - beta * mean_entropy
    return PPOLosses(total, policy, value, mean_entropy)


def action_log_probs_and_entropy(
    outputs: Mapping[str, tf.Tensor], batch: MiniBatch, branches: Sequence[int]
) -> tuple[tf.Tensor, tf.Tensor]:
    """``log pi(a|s)`` and the policy's entropy, each ``[B]``, summed over every dimension and branch.

    ``outputs`` are the PolicyNetwork's ``mean``/``log_std`` [B, C] and/or ``logits`` [B, M]. The
    continuous actions are the raw Gaussian samples (the processor clips only the env's copy), so
    their log-prob is the Gaussian's own; masked discrete options get ~0 probability.
    """
    log_probs: list[tf.Tensor] = []
    entropies: list[tf.Tensor] = []
    if MEAN in outputs:
        log_p = networks.gaussian_log_prob(batch.continuous_actions, outputs[MEAN], outputs[LOG_STD])
        log_probs.append(tf.reduce_sum(log_p, axis=-1))
        entropies.append(tf.reduce_sum(networks.gaussian_entropy(outputs[LOG_STD]), axis=-1))
    if LOGITS in outputs:
        log_p, entropy = networks.discrete_log_prob_and_entropy(
            outputs[LOGITS], batch.action_mask, batch.discrete_actions, branches
        )
        log_probs.append(tf.reduce_sum(log_p, axis=-1))
        entropies.append(tf.reduce_sum(entropy, axis=-1))
    return tf.add_n(log_probs), tf.add_n(entropies)


# -- the update buffer: its rows, and the minibatches of one update -----------------------------------
# ML-Agents' ``update_buffer`` of its PPO trainer: an ``AgentBuffer`` with one row per experience taken in since
# the last update. A row holds the trajectory's own fields (observations, actions, the processor's log-probs, the
# action mask: ``common.trajectory`` keys), what PPO computed for it (``ADVANTAGES`` ...), and, when a reward
# signal has networks of its own, the transition its updates read (next observation, done, env reward).


def observations(trajectories: Sequence[tr.Trajectory], n_obs: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(obs, next_obs) per observation i: [N, *shape_i], every experience of ``trajectories`` in order, and
    [len(trajectories), *shape_i], the observation after each trajectory's last experience. Vectors become float32;
    images keep their dtype (uint8 images stay uint8 in the update buffer; the networks scale them)."""

    def kept(x: np.ndarray) -> np.ndarray:
        return x if x.ndim == 4 else x.astype(np.float32, copy=False)

    obs = [kept(np.concatenate([t.obs[i] for t in trajectories])) for i in range(n_obs)]
    next_obs = [kept(np.stack([t.next_obs[i] for t in trajectories])) for i in range(n_obs)]
    return obs, next_obs


def trajectory_rows(
    trajectories: Sequence[tr.Trajectory],
    obs: Sequence[np.ndarray],
    branches: Sequence[int],
    computed: Mapping[str, np.ndarray],
    transitions: SignalBatch | None,
) -> dict[str, np.ndarray]:
    """The update-buffer rows of ``trajectories``, in order.

    Args:
        obs: [N, *shape_i] per observation, the trajectories' observations concatenated.
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
        rows[tr.DONE] = transitions.done
        rows[tr.REWARDS] = transitions.rewards
    return rows


def epoch_minibatches(
    buffer: AgentBuffer,
    n_obs: int,
    branches: Sequence[int],
    num_epoch: int,
    batch_size: int,
    rng: np.random.Generator,
    full: MiniBatch | None = None,
) -> tuple[MiniBatch, np.ndarray]:
    """Every minibatch of ``num_epoch`` shuffled passes over the ``N`` rows of ``buffer``, epochs back to back,
    stacked: ``MiniBatch`` fields ``[S, B, ...]``, with their row indices int [S, B]; ``S = num_epoch * (N // B)``.

    One shuffle per epoch, composed as ``AgentBuffer.shuffle`` would compose them in place; each epoch keeps its
    first ``(N // batch_size) * batch_size`` rows (a last partial minibatch is dropped). ``full``: the buffer's rows
    as a ``MiniBatch`` already (default ``MiniBatch.from_buffer``).
    """
    n = buffer.num_experiences
    per_epoch = n // batch_size
    order = np.arange(n)
    index = []
    for _ in range(num_epoch):
        order = order[rng.permutation(n)]
        index.append(order[: per_epoch * batch_size])
    take = np.concatenate(index).reshape(num_epoch * per_epoch, batch_size)
    rows = full if full is not None else MiniBatch.from_buffer(buffer, n_obs, branches)
    stacked: MiniBatch = tf.nest.map_structure(lambda x: x[take], rows)
    return stacked, take


def summed_over_minibatches(step: Callable[[MiniBatch], tf.Tensor], batches: MiniBatch, width: int) -> tf.Tensor:
    """Inside a graph: ``step`` on each of the ``S`` minibatches stacked in ``batches`` (``[S, B, ...]`` per field),
    in order, in one ``tf.while_loop``; returns the sum of its float32 [width] results."""

    def body(i: tf.Tensor, sums: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return i + 1, sums + step(tf.nest.map_structure(lambda x: x[i], batches))

    steps = tf.shape(batches.advantages)[0]
    _, sums = tf.while_loop(lambda i, _: i < steps, body, (tf.constant(0), tf.zeros([width])))
    return sums


def signal_summaries(buffer: AgentBuffer, signals: Sequence[RewardSignal]) -> dict[str, float]:
    """Each signal's mean value estimate and mean reward per step over the rows of ``buffer``, under its
    ``value_tag`` and ``reward_tag``."""
    values = buffer[VALUE_ESTIMATES].data
    rewards = buffer[SIGNAL_REWARDS].data
    out = {signal.value_tag: float(np.mean(values[:, k])) for k, signal in enumerate(signals)}
    out.update({signal.reward_tag: float(np.mean(rewards[:, k])) for k, signal in enumerate(signals)})
    return out


# -- the learner -----------------------------------------------------------------------------------


class PPOLearner:
    """PPO for one behavior: a Gaussian (state-independent log_std) and/or masked-categorical policy,
    a separate value network (or, with ``shared_critic``, value heads on the policy's encoder and body), one Adam
    optimiser over both, and an on-policy update buffer.

    The trainer step (agent experiences taken in; it drives the schedules) is counted by
    ``add_trajectories`` and kept in the ``step`` variable, which checkpoints with the networks (read it as
    ``trainer_step``); a loop that counts steps itself may overrule it with ``set_step``. Used from one thread only.
    """

    def __init__(
        self, brain_parameters: BrainParameters, settings: BehaviorSettings, seed: int = 0, warm_up: bool = True
    ) -> None:
        """Builds the learner in named steps: the networks and reward signals, the reward scaler, the optimiser and
        the update buffer, the traced graphs and their warm-up.

        With ``warm_up`` (tests skip it), the update graph is traced before the first update needs it
        (``trainer.warm_up``). The first ``export_policy`` does it first, in the caller's thread: the trainer loop
        exports the first policy right after building the learner and the envs wait for that policy, so the trace has
        the CPU to itself rather than sharing it with the acting envs, which would act longer with version 0
        (benchmarks/classic_control.py). A learner that takes trajectories in before any export traces in a thread of
        its own from the first ``add_trajectories``, so the caller goes on meanwhile; ``update`` and checkpoints wait
        for it.

        Raises:
            ConfigKeyError: ``settings`` are not PPO's.
            NotSupportedKeyError: a reward signal option not supported (``trainer.reward_signals``).
            DemoError: a ``demo_path`` (gail, behavioral_cloning) that cannot be read for this behavior.
        """
        if not isinstance(settings.hyperparameters, PPOHyperparameters):
            detail = f"PPOLearner needs PPO hyperparameters, got {type(settings.hyperparameters).__name__}"
            raise ConfigKeyError("hyperparameters", detail)
        self.brain_parameters = brain_parameters
        self.settings = settings
        self.hyperparameters: PPOHyperparameters = settings.hyperparameters
        self.normalize = settings.network_settings.normalize
        self.branches = tuple(brain_parameters.action_spec.discrete_branches)
        self._rng = np.random.default_rng(seed)
        self.normalizers = observation_normalizers(brain_parameters.observation_specs)  # vectors only: None for an image
        with seeded_initializers(seed):  # in this order: the initial weights follow from the seed and the order
            self.policy = self._build_policy()
            self.signals = make_reward_signals(brain_parameters, settings.reward_signals, seed)
            self.value = self._build_value()
        self._transitions = any(s.checkpoint_objects() for s in self.signals)  # a signal with networks of its own
        self.reward_scaler, self._extrinsic = self._build_reward_scaler()
        self._variables = (*self.policy.trainable_variables, *self.value.trainable_variables)
        self.optimizer = adam(self.hyperparameters.learning_rate, self._variables, epsilon=ADAM_EPSILON)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._steps_to_add = 0
        """Experiences counted since ``step`` was last brought up to date (``_sync_step``)."""
        self._assigned_learning_rate: float | None = None
        """The optimiser's learning rate as last assigned (None: assign at the next update, whatever it holds)."""
        self._update_buffer = AgentBuffer()
        self._pending: list[tr.Trajectory] = []
        """Trajectories taken in and not yet turned into rows (``add_trajectories``)."""
        self.bc = BCComponent.from_behavior(
            settings, brain_parameters, self.policy, self._normalized, self.hyperparameters.num_epoch, seed=seed
        )
        self._build_graphs()
        self._warm_up = WarmUp(self._trace_update, self._trace_values, name="ppo-warm-up", pending=warm_up)
        specs = brain_parameters.observation_specs
        dtypes = image_observation_dtypes(specs)
        self._exporter = TFLiteExporter(self.policy, [spec.shape for spec in specs], observation_dtypes=dtypes)

    def _build_policy(self) -> PolicyNetwork:
        """The policy network: a Gaussian (state-independent log_std, or gSDE) and/or masked-categorical heads on its
        own image encoder and MLP body."""
        specs = self.brain_parameters.observation_specs
        net = self.settings.network_settings
        hp = self.hyperparameters
        name = self.brain_parameters.behavior_name
        # The policy and the critic each encode the images with encoders of their own, as ML-Agents' PPO, unless
        # shared_critic (then the critic is value heads on the policy's trunk, as ML-Agents' SharedActorCritic).
        encoder = observation_encoder(specs, net.vis_encode_type, net.hidden_units, name, "policy_encoder")
        return PolicyNetwork(
            [int(np.prod(spec.shape)) for spec in specs],
            self.brain_parameters.action_spec,
            net.hidden_units,
            net.num_layers,
            state_dependent_std=False,
            initial_log_std=hp.log_std_init,
            activation=activation_function(hp.activation),
            init=self._weight_init,
            encoder=encoder,
            sde=hp.use_sde,
            use_expln=hp.use_expln,
        )

    @property
    def _weight_init(self) -> WeightInit:
        """SB3's two starts: ortho_init True (its default) or False, which leaves torch.nn.Linear's own."""
        return WeightInit.ORTHOGONAL if self.hyperparameters.orthogonal_init else WeightInit.PYTORCH

    def _build_value(self) -> ValueNetwork | SharedValueHeads:
        """The critic, one value head per reward signal: a network of its own, or with ``shared_critic`` heads on the
        policy's encoder and body (ML-Agents' SharedActorCritic)."""
        heads = len(self.signals)
        net = self.settings.network_settings
        if self.hyperparameters.shared_critic:
            return SharedValueHeads(self.policy, net.hidden_units, heads, self._weight_init)
        specs = self.brain_parameters.observation_specs
        name = self.brain_parameters.behavior_name
        encoder = observation_encoder(specs, net.vis_encode_type, net.hidden_units, name, "value_encoder")
        return ValueNetwork(
            net.hidden_units,
            net.num_layers,
            encoder.output_size if encoder is not None else sum(int(np.prod(spec.shape)) for spec in specs),
            heads,
            activation=activation_function(self.hyperparameters.activation),
            init=self._weight_init,
            encoder=encoder,
        )

    def _build_reward_scaler(self) -> tuple[RewardScaler | None, int]:
        """(the extrinsic rewards' scaler, with ``normalize_reward`` and an extrinsic signal, else None; the extrinsic
        signal's column, -1 without one)."""
        extrinsic = [k for k, signal in enumerate(self.signals) if signal.name == "extrinsic"]
        if not extrinsic:
            return None, -1
        scaler = RewardScaler(self.signals[extrinsic[0]].gamma) if self.hyperparameters.normalize_reward else None
        return scaler, extrinsic[0]

    def _build_graphs(self) -> None:
        """The learner's graphs as tf.functions with fixed signatures and dynamic leading axes, so each traces once for
        the learner's life: value estimates, the whole update (``_train_epoch``: every epoch of an update; the name
        predates that, and tests read its tracing count) and the rows' log-probs."""
        specs = self.brain_parameters.observation_specs
        dtypes = image_observation_dtypes(specs)
        obs_specs = tuple(tf.TensorSpec([None, *spec.shape], dtype) for spec, dtype in zip(specs, dtypes, strict=True))
        self._value_estimates: Callable[[tuple[Any, ...]], tf.Tensor] = tf.function(
            self._values, input_signature=[obs_specs], autograph=False
        )
        stacked = MiniBatch.stacked_signature(obs_specs, self.brain_parameters.action_spec, len(self.signals))
        scalar = tf.TensorSpec([], tf.float32)
        self._train_epoch = tf.function(self._epochs, input_signature=[stacked, scalar, scalar], autograph=False)
        # Each update calls the traced graphs directly: a tf.function call binds and checks its arguments against the
        # signature first, GIL-holding time the embedded processor's event loop would wait out (module docstring).
        self._update_graph: Any = None
        rows_spec = tf.nest.map_structure(lambda spec: tf.TensorSpec(spec.shape[1:], spec.dtype), stacked)
        self._log_probs = tf.function(self._action_log_probs, input_signature=[rows_spec], autograph=False)
        self._stacked_signature = stacked

    def _trace_values(self) -> None:
        """The warm-up's first part, in the caller's thread: the value function is traced before the update graph,
        which would otherwise call the same Keras layers from a second thread at once. After it, the caller only runs
        traced graphs while the warm-up's thread traces."""
        self._value_estimates = self._value_estimates.get_concrete_function()  # type: ignore[attr-defined]

    def _trace_update(self) -> None:
        """Traces and instantiates the update graph on no rows (nothing trains)."""
        empty = tf.nest.map_structure(lambda spec: tf.zeros([0, 0, *spec.shape[2:]], spec.dtype), self._stacked_signature)
        self._train_epoch(empty, 0.0, 0.0)

    def _normalized(self, obs: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        if not self.normalize:
            return list(obs)
        return normalized_observations(self.normalizers, obs)

    def _action_log_probs(self, batch: MiniBatch) -> tf.Tensor:
        """log pi(a|s) [N] of the rows' actions under the current policy network."""
        outputs = self.policy(*self._normalized(batch.obs))
        return action_log_probs_and_entropy(outputs, batch, self.branches)[0]

    def _values(self, obs: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """V(s) [N, K], one column per reward signal, of raw observations (one [N, *shape_i] each)."""
        return self.value.evaluate(self._normalized(obs))

    # -- taking trajectories in: values, GAE, rows ----------------------------------------------------

    def set_step(self, step: int) -> None:
        """Overrules the trainer step the schedules read (agent experiences consumed)."""
        self._steps_to_add = 0
        self.step.assign(step)

    @property
    def trainer_step(self) -> int:
        """Agent experiences taken in (or as ``set_step`` last set), the step the schedules read."""
        self._sync_step()
        return int(self.step.numpy())

    def _sync_step(self) -> None:
        """Adds the experiences counted since the last sync to ``step``: one TensorFlow op per update instead of one
        per take-in. Each eager op holds the GIL in the trainer's thread, which the embedded processor's event loop
        waits out (module docstring)."""
        if self._steps_to_add:
            self.step.assign_add(self._steps_to_add)
            self._steps_to_add = 0

    def schedules(self, step: int | None = None) -> tuple[float, float, float]:
        """(learning rate, epsilon, beta) at ``step`` (default: the current trainer step)."""
        hp = self.hyperparameters
        max_steps = self.settings.max_steps
        step = self.trainer_step if step is None else step
        return (
            decayed_value(hp.learning_rate_schedule, hp.learning_rate, MIN_LEARNING_RATE, max_steps, step),
            decayed_value(hp.effective_epsilon_schedule, hp.epsilon, MIN_EPSILON, max_steps, step),
            decayed_value(hp.effective_beta_schedule, hp.beta, MIN_BETA, max_steps, step),
        )

    def _advantages(
        self, trajectories: Sequence[tr.Trajectory], rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray
    ) -> np.ndarray:
        """GAE per trajectory and per signal (rewards, values [N, K], next_values [len(trajectories), K]); returns
        the advantages [N, K], column k with signal k's gamma."""
        advantages = np.empty_like(values)
        lambd = self.hyperparameters.lambd
        for k, signal in enumerate(self.signals):
            start = 0
            for j, trajectory in enumerate(trajectories):
                end = start + trajectory.length
                # Only a true terminal has no future. A time-limit end (interrupted: max_reached or a
                # session flush) and a time_horizon cut stop the *segment*, not the MDP, so both bootstrap
                # from V(next_obs) (Pardo et al. 2018, "Time Limits in Reinforcement Learning"). A signal
                # that ignores done (curiosity) bootstraps after a terminal too.
                terminal = trajectory.done_reached and not trajectory.interrupted and not signal.ignore_done
                bootstrap = 0.0 if terminal else float(next_values[j, k])
                advantages[start:end, k] = gae(rewards[start:end, k], values[start:end, k], bootstrap, signal.gamma, lambd)
                start = end
        return advantages

    def add_trajectories(self, trajectories: Sequence[tr.Trajectory]) -> int:
        """Takes trajectories in for the next update and counts their experiences as trainer steps.

        They wait as they are until the update buffer is read (``update_buffer``: by ``update``, a checkpoint or an
        export); then every waiting trajectory is turned into rows at once (``_rows_of_pending``). Why: with short
        trajectories the trainer takes them in one or two at a time, and a value-network call and the normaliser's
        eager ops per take-in would cost the trainer's thread more CPU than the updates themselves
        (configs/mountaincar_ppo.yaml's 16-step trajectories; benchmarks/classic_control.py).

        Returns:
            The experiences added (the sum of the trajectories' lengths).
        """
        if not trajectories:
            return 0
        fold_group_rewards(trajectories, "ppo")  # ML-Agents' PPO: the group reward joins the agent's own
        self._warm_up.start(in_thread=True)
        n = sum(trajectory.length for trajectory in trajectories)
        self._pending.extend(trajectories)
        self._steps_to_add += n  # added to ``step`` once per update (``_sync_step``)
        return n

    @property
    def update_buffer(self) -> AgentBuffer:
        """The rows (observations, actions, values, advantages, returns) of every trajectory taken in since the last
        update; the trajectories still waiting are turned into rows first."""
        self._rows_of_pending()
        return self._update_buffer

    def _rows_of_pending(self) -> None:
        """Turns the waiting trajectories into rows in one pass: folds their observations into the normalisers,
        estimates values, computes GAE per trajectory and signal, and appends the rows to the update buffer.

        ML-Agents folds each trajectory in just before estimating its values; here all of an update's trajectories
        are folded in before any of them is estimated (the networks do not change in between either way).
        """
        if not self._pending:
            return
        trajectories, self._pending = self._pending, []
        n_obs = len(self.normalizers)
        obs, next_obs = observations(trajectories, n_obs)
        if self.normalize:  # as ML-Agents: fold the new observations in before estimating values with them
            for normalizer, o in zip(self.normalizers, obs, strict=True):
                if normalizer is not None:
                    normalizer.update(o)
        n = len(obs[0])  # one value-network call below for every obs and every next_obs
        all_values = self._value_estimates(tuple(np.concatenate(pair) for pair in zip(obs, next_obs, strict=True))).numpy()
        values = all_values[:n]
        next_values = all_values[n:]
        # Signals with networks read whole transitions; extrinsic alone needs only the rewards.
        batch = SignalBatch.from_trajectories(trajectories, n_obs, transitions=self._transitions)
        rewards = np.stack([signal.rewards(batch) for signal in self.signals], axis=1)
        if self.reward_scaler is not None:
            rewards[:, self._extrinsic] = self.reward_scaler.scale(trajectories, rewards[:, self._extrinsic])
        advantages = self._advantages(trajectories, rewards, values, next_values)
        computed = {
            ADVANTAGES: advantages.sum(axis=1),
            RETURNS: advantages + values,
            VALUE_ESTIMATES: values,
            SIGNAL_REWARDS: rewards,
        }
        transitions = batch if self._transitions else None
        self._update_buffer.extend_rows(trajectory_rows(trajectories, obs, self.branches, computed, transitions))

    # -- the update --------------------------------------------------------------------------------------

    def ready_to_update(self) -> bool:
        waiting = sum(trajectory.length for trajectory in self._pending)
        return self._update_buffer.num_experiences + waiting >= self.hyperparameters.buffer_size

    def _gradient_step(self, batch: MiniBatch, epsilon: tf.Tensor, beta: tf.Tensor) -> PPOLosses:
        """One Adam step on one minibatch; returns its losses."""
        hp = self.hyperparameters
        with tf.GradientTape() as tape:
            obs = self._normalized(batch.obs)
            if isinstance(self.value, SharedValueHeads):  # one pass through the shared trunk feeds both heads
                features = self.policy.features(*obs)
                outputs, values = self.policy.heads(features), self.value(features)
            else:
                outputs, values = self.policy(*obs), self.value.evaluate(obs)
            log_probs, entropy = action_log_probs_and_entropy(outputs, batch, self.branches)
            losses = ppo_losses(log_probs, entropy, values, batch, epsilon, beta, hp.clip_value_loss)
        gradients = tape.gradient(losses.total, self._variables)
        if hp.max_grad_norm is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, hp.max_grad_norm)
        apply_adam(self.optimizer, gradients, self._variables)
        return losses

    def _epochs(self, batches: MiniBatch, epsilon: tf.Tensor, beta: tf.Tensor) -> tf.Tensor:
        """Every gradient step of one update: ``batches`` holds ``S`` minibatches stacked on a leading axis
        (``[S, B, ...]`` per field, epochs back to back), looped over inside the graph; returns the summed
        (policy, value, entropy) losses."""

        def step(batch: MiniBatch) -> tf.Tensor:
            losses = self._gradient_step(batch, epsilon, beta)
            return tf.stack([losses.policy, losses.value, losses.entropy])

        return summed_over_minibatches(step, batches, 3)

    def update(self) -> dict[str, float]:
        """``num_epoch`` shuffled passes over the update buffer, then clears it (module docstring).

        Returns:
            ML-Agents' tags: losses and entropy averaged over the minibatches (the policy loss as its absolute
            value, as ML-Agents reports it), the scheduled values used, each signal's mean value estimate and
            reward per step in the buffer, the signals' own losses, and behavioral_cloning's.
        """
        self._warm_up.wait()
        n = self.update_buffer.num_experiences
        if n == 0:
            return {}
        # A buffer smaller than batch_size (a config warning) still trains, on one minibatch of all.
        batch_size = min(self.hyperparameters.batch_size, n)
        learning_rate, epsilon, beta = self.schedules()
        if learning_rate != self._assigned_learning_rate:  # a constant schedule's is assigned once
            self.optimizer.learning_rate.assign(learning_rate)
            self._assigned_learning_rate = learning_rate
        signal_stats = signal_summaries(self.update_buffer, self.signals)
        n_obs = len(self.normalizers)
        epochs = self.hyperparameters.num_epoch
        rows = MiniBatch.from_buffer(self.update_buffer, n_obs, self.branches)
        if self.hyperparameters.proximal_clip:
            rows = self._proximal(rows)
        batches, take = epoch_minibatches(self.update_buffer, n_obs, self.branches, epochs, batch_size, self._rng, rows)
        if self._update_graph is None:  # traced by the warm-up, or now (a learner built without it)
            self._update_graph = self._train_epoch.get_concrete_function()
        sums = self._update_graph(batches, epsilon, beta).numpy()
        if self._transitions:  # the signals with networks of their own take a step on each minibatch
            signal_stats.update(self._update_signals(take))
        self._update_buffer.reset_agent()
        policy, value, entropy = sums / len(take)  # take: the row indices [S, B] of the S minibatches
        traces = self._train_epoch.experimental_get_tracing_count()  # 1, unless something forces a retrace
        logger.debug("PPO update: %d experiences, %d gradient steps, %d trace(s)", n, len(take), traces)
        if self.bc is not None:
            signal_stats.update(self.bc.update(self.trainer_step))
        return {
            POLICY_LOSS: abs(float(policy)),
            VALUE_LOSS: float(value),
            ENTROPY: float(entropy),
            LEARNING_RATE: learning_rate,
            EPSILON: epsilon,
            BETA: beta,
            **signal_stats,
        }

    def _proximal(self, rows: MiniBatch) -> MiniBatch:
        """``rows`` with the clip centred on the policy at the update's start (decoupled PPO, Hilton et al. 2021,
        "Batch size-invariance for policy optimization", arXiv:2110.00641): ``old_log_probs`` become the current
        policy's and the advantages are weighted by ``pi_prox / pi_behaviour``, truncated at 1 (IMPALA's rho-bar,
        Espeholt et al. 2018). With on-policy rows the ratio starts at 1 either way; with rows the envs took with an
        older policy while the trainer updated (policy lag) the plain ratio starts off 1 and clipping drops their
        gradient. The observation normaliser's own update before the step is also taken out of the ratio."""
        proximal = self._log_probs(rows).numpy()
        weights = np.minimum(1.0, np.exp(proximal - rows.old_log_probs)).astype(np.float32)
        return rows._replace(old_log_probs=proximal, weights=weights)

    def _update_signals(self, minibatches: np.ndarray) -> dict[str, float]:
        """One ``update`` of every signal on each of the update's minibatches (row indices int [S, B]) of the update
        buffer, in order, as ML-Agents updates its reward signals on the policy's minibatches; returns each summary's
        mean over them."""
        rows = SignalBatch.from_buffer(self.update_buffer, len(self.normalizers))
        return update_signals(self.signals, (rows.take(index) for index in minibatches))

    # -- policy, checkpoints -------------------------------------------------------------------------------

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        """The policy network as TFLite, with the normaliser state when ``normalize`` is on. The first export runs the
        warm-up first (``__init__``)."""
        self._warm_up.start(in_thread=False)
        self._rows_of_pending()  # the exported normalisers fold in every trajectory taken in
        normalizers = [normalizer_state(*n.state()) for n in self.normalizers if n is not None] if self.normalize else []
        name = self.brain_parameters.behavior_name
        spec = self.brain_parameters.action_spec.to_proto()
        model = self._exporter.export()
        return make_policy_update(name, version, trainer_step, model, spec, normalizers, tanh_squash=False, clip=ACTION_CLIP)

    def checkpoint_objects(self) -> dict[str, object]:
        """Networks, optimiser (its step count and moments), normalisers, the trainer step, and the reward signals'
        and behavioral_cloning's networks and optimisers."""
        objects: dict[str, object] = {"policy": self.policy, "value": self.value, "optimizer": self.optimizer}
        objects["trainer_step"] = self.step  # not "step": trainer.checkpoint reserves that name
        objects.update({f"normalizer_{i}": n for i, n in enumerate(self.normalizers) if n is not None})
        objects.update(signal_checkpoint_objects(self.signals))
        if self.reward_scaler is not None:
            objects.update(self.reward_scaler.checkpoint_objects())
        if self.bc is not None:
            objects.update(self.bc.checkpoint_objects())
        return objects

    def save_extra(self, directory: Path) -> None:
        """No file: the update buffer is not checkpointed (it is cleared after every update), and the rest is in the TF
        checkpoint, written next. Before it, a warm-up still creating the optimiser's slots is waited for, and the
        trajectories waiting for the update are turned into rows, so the checkpointed normalisers include them."""
        del directory
        self._warm_up.wait()
        self._rows_of_pending()
        self._sync_step()

    def load_extra(self, directory: Path) -> None:
        """Nothing to restore (see ``save_extra``)."""
        del directory
