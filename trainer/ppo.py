"""Proximal Policy Optimization (Schulman et al. 2017, arXiv:1707.06347), as ML-Agents trains it.

Top to bottom: ML-Agents' fixed constants, GAE, the losses (pure: tensors in and out), then ``PPOLearner``,
the ``trainer.learner.Learner``. One update, as ML-Agents' ``PPOTrainer._update_policy``: learning rate,
epsilon and beta are read off their schedules (``trainer.schedules``) at the trainer step; ``num_epoch`` shuffled
passes over the update buffer in minibatches of ``batch_size`` (a last partial one is dropped) each take
one Adam step on the policy and value networks together; then the buffer is cleared (PPO is on-policy).
Three details follow SB3 instead of ML-Agents (unclipped value loss, gradient norm clipping, tanh bodies
with orthogonal init): see ``CLIP_VALUE_LOSS`` and its neighbours. The whole update is one call of one graph
(``trainer.ppo_buffer``: the update buffer's rows and minibatches, and why one graph).

Reward signals (``trainer.reward_signals``: extrinsic, gail, curiosity): the value network has one output, a
value head, per signal, in ``reward_signals`` order. Each signal's strength-scaled reward gets its own GAE with
its own gamma and returns (the value targets of its head); the policy's advantage is their sum (ML-Agents takes
the mean: the same after the per-minibatch normalisation). After the PPO steps, each signal with networks of
its own takes one step on each of the update's minibatches, and ``behavioral_cloning`` (``trainer.bc_component``)
runs its cloning steps. None of it reaches the exported policy.

Shapes: ``T`` experiences of one trajectory, ``N`` of many, ``B`` rows of a minibatch, ``C``
continuous action dimensions, ``nB`` discrete branches, ``M = sum(branches)``, ``K`` reward signals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.config import BehaviorSettings, PPOHyperparameters
from common.errors import ConfigError
from common.specs import BrainParameters
from protos import pb
from trainer import networks, ppo_buffer
from trainer.bc_component import BCComponent
from trainer.export import TFLiteExporter, make_policy_update, normalizer_state
from trainer.networks import Normalizer, PolicyNetwork, ValueNetwork
from trainer.ppo_buffer import ADVANTAGES, RETURNS, SIGNAL_REWARDS, VALUE_ESTIMATES, MiniBatch
from trainer.reward_signals import SignalBatch, make_reward_signals, signal_checkpoint_objects
from trainer.schedules import decayed_value

logger = logging.getLogger(__name__)

#: ML-Agents' TensorBoard tags for what ``update`` returns.
POLICY_LOSS, VALUE_LOSS, ENTROPY = "Losses/Policy Loss", "Losses/Value Loss", "Policy/Entropy"
LEARNING_RATE, EPSILON, BETA = "Policy/Learning Rate", "Policy/Epsilon", "Policy/Beta"
VALUE_ESTIMATE = "Policy/Extrinsic Value Estimate"
#: ML-Agents' constants its YAML does not expose: the value loss weight, the advantage std floor and
#: Adam's epsilon (PyTorch's default); where linear schedules end at max_steps (ModelUtils.DecayedValue);
#: and the clip mode's bound: the env gets clip(u, -1, 1) of the Gaussian sample u, as SB3 and CleanRL clip
#: to the action bounds. ML-Agents' clip(u, -3, 3) / 3 needs |u| >= 3 for a full-scale action: on the 1-D task
#: continuous PPO took 2100-6700 steps to reach 0.9 with it (8 seeds), 435-950 with full scale at |u| = 0.6.
VALUE_LOSS_COEFFICIENT, ADVANTAGE_EPSILON, ADAM_EPSILON = 0.5, 1e-10, 1e-8
MIN_LEARNING_RATE, MIN_EPSILON, MIN_BETA, ACTION_CLIP = 1e-10, 0.1, 1e-5, 1.0
#: Where we follow SB3's PPO (RL-Zoo's peer) rather than ML-Agents, none of it exposed by ML-Agents' YAML.
#: On CartPole-v1 (configs/cartpole_ppo.yaml, seeds 0-1) the ML-Agents versions needed 66-93k steps (or did
#: not solve within 100k); with these three, 30-36k (benchmarks/time_to_solve.py):
#:
#: * ``CLIP_VALUE_LOSS`` False: the value loss is plain ``mean((R - V)^2)``, as SB3 (``clip_range_vf=None``)
#:   and CleanRL recommend. ML-Agents' clipped value loss (``clipped_value_loss``, kept for users who want it)
#:   lets V move at most epsilon (0.2) per update from its old estimate: with unnormalised returns of up to
#:   1 / (1 - gamma) = 50 the critic takes hundreds of updates to catch up, and the advantages stay noise.
#: * ``MAX_GRAD_NORM`` 0.5: the global norm of each minibatch's gradient is clipped (SB3's ``max_grad_norm``;
#:   ML-Agents does not clip).
#: * ``ACTIVATION`` tanh and ``ORTHOGONAL_INIT``: SB3's MlpPolicy (orthogonal kernels, gain sqrt(2) hidden,
#:   0.01 policy head, 1 value head) instead of ML-Agents' swish and Keras' Glorot init. This one change
#:   took CartPole from 57-39k to 30-36k steps (value clipping off, gradients clipped, seeds 0-1).
CLIP_VALUE_LOSS = False
MAX_GRAD_NORM = 0.5
ACTIVATION = tf.tanh
ORTHOGONAL_INIT = True


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
    """ML-Agents' (and OpenAI baselines') clipped value loss, all inputs ``[B]``:
    ``mean(max((R - V)^2, (R - V_clip)^2))`` with ``V_clip = V_old + clip(V - V_old, -eps, eps)``."""
    clipped_values = old_values + tf.clip_by_value(values - old_values, -epsilon, epsilon)
    return tf.reduce_mean(tf.maximum(tf.square(returns - values), tf.square(returns - clipped_values)))


def ppo_losses(
    log_probs: tf.Tensor, entropy: tf.Tensor, values: tf.Tensor, batch: MiniBatch, epsilon: tf.Tensor, beta: tf.Tensor
) -> PPOLosses:
    """``L = -L^CLIP + 0.5 * L_value - beta * mean(entropy)`` (eq. 9, signs for minimisation) of one minibatch.

    ``log_probs``, ``entropy`` [B] and ``values`` [B, K] come from the current networks; ``batch`` gives
    the old log-probs, old values, returns and advantages, which are normalised per minibatch here. The value
    loss averages over rows and value heads (ML-Agents averages the heads' losses).
    """
    advantages = normalized_advantages(batch.advantages)
    policy = clipped_surrogate_loss(log_probs, batch.old_log_probs, advantages, epsilon)
    if CLIP_VALUE_LOSS:
        value = clipped_value_loss(values, batch.old_values, batch.returns, epsilon)
    else:
        value = tf.reduce_mean(tf.square(batch.returns - values))
    mean_entropy = tf.reduce_mean(entropy)
    return PPOLosses(policy + VALUE_LOSS_COEFFICIENT * value - beta * mean_entropy, policy, value, mean_entropy)


def action_log_probs_and_entropy(
    outputs: Mapping[str, tf.Tensor], batch: MiniBatch, branches: Sequence[int]
) -> tuple[tf.Tensor, tf.Tensor]:
    """``log pi(a|s)`` and the policy's entropy, each ``[B]``, summed over every dimension and branch.

    ``outputs`` are the PolicyNetwork's ``mean``/``log_std`` [B, C] and/or ``logits`` [B, M]. The
    continuous actions are the raw Gaussian samples (the processor clips only the env's copy), so
    their log-prob is the Gaussian's own; masked discrete options get ~0 probability.
    """
    log_probs, entropies = [], []
    if "mean" in outputs:
        log_p = networks.gaussian_log_prob(batch.continuous_actions, outputs["mean"], outputs["log_std"])
        log_probs.append(tf.reduce_sum(log_p, axis=-1))
        entropies.append(tf.reduce_sum(networks.gaussian_entropy(outputs["log_std"]), axis=-1))
    if "logits" in outputs:
        log_p, entropy = networks.discrete_log_prob_and_entropy(
            outputs["logits"], batch.action_mask, batch.discrete_actions, branches
        )
        log_probs.append(tf.reduce_sum(log_p, axis=-1))
        entropies.append(tf.reduce_sum(entropy, axis=-1))
    return tf.add_n(log_probs), tf.add_n(entropies)


class PPOLearner:
    """PPO for one behavior: a Gaussian (state-independent log_std) and/or masked-categorical policy,
    a separate value network, one Adam optimiser over both, and an on-policy update buffer.

    The trainer step (agent experiences taken in; it drives the schedules) is counted by
    ``add_trajectories`` in the ``step`` variable, which checkpoints with the networks; a loop that
    counts steps itself may overrule it with ``set_step``. Used from one thread only.
    """

    def __init__(
        self, brain_parameters: BrainParameters, settings: BehaviorSettings, seed: int = 0, warm_up: bool = True
    ) -> None:
        """Builds the networks; with ``warm_up``, also traces and instantiates the update graph (~1-2 s on
        2 cores), so the first update does not keep env clients waiting on a policy (tests skip it).

        Raises:
            ConfigError: ``settings`` are not PPO's.
            NotSupportedKeyError: a reward signal option not supported (``trainer.reward_signals``).
            DemoError: a ``demo_path`` (gail, behavioral_cloning) that cannot be read for this behavior.
        """
        if not isinstance(settings.hyperparameters, PPOHyperparameters):
            raise ConfigError(f"PPOLearner needs PPO hyperparameters, got {type(settings.hyperparameters).__name__}")
        self.brain_parameters, self.settings = brain_parameters, settings
        self.hyperparameters: PPOHyperparameters = settings.hyperparameters
        self.normalize = settings.network_settings.normalize
        action_spec = brain_parameters.action_spec
        self.branches = tuple(action_spec.discrete_branches)
        # The Keras initialisers draw from Keras' global seed: seeding it makes the initial weights
        # repeatable (a process-wide side effect, as with any Keras model built unseeded).
        keras.utils.set_random_seed(seed)
        self._rng = np.random.default_rng(seed)

        sizes = [spec.shape[0] for spec in brain_parameters.observation_specs]
        net, hp = settings.network_settings, self.hyperparameters
        self.normalizers = [Normalizer(size, name=f"normalizer_{i}") for i, size in enumerate(sizes)]
        body = {"activation": ACTIVATION, "orthogonal_init": ORTHOGONAL_INIT}
        self.policy = PolicyNetwork(sizes, action_spec, net.hidden_units, net.num_layers, state_dependent_std=False, **body)
        self.signals = make_reward_signals(brain_parameters, settings.reward_signals, seed)
        self._transitions = any(s.checkpoint_objects() for s in self.signals)  # a signal with networks of its own
        self.value = ValueNetwork(net.hidden_units, net.num_layers, sum(sizes), len(self.signals), **body)
        self._variables = (*self.policy.trainable_variables, *self.value.trainable_variables)
        self.optimizer = keras.optimizers.Adam(learning_rate=self.hyperparameters.learning_rate, epsilon=ADAM_EPSILON)
        self.optimizer.build(self._variables)  # slot variables now, so a checkpoint restores them at once
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.update_buffer = AgentBuffer()
        self.bc = BCComponent.from_behavior(settings, brain_parameters, self.policy, self._normalized, hp.num_epoch, seed=seed)

        # Fixed signatures with dynamic leading axes: each function traces once for the learner's life.
        # ``_train_epoch`` runs every epoch of an update (the name predates that; tests read its tracing count).
        obs_specs = tuple(tf.TensorSpec([None, size], tf.float32) for size in sizes)
        self._value_estimates = tf.function(self._values, input_signature=[obs_specs], autograph=False)
        stacked, scalar = MiniBatch.stacked_signature(obs_specs, action_spec, len(self.signals)), tf.TensorSpec([], tf.float32)
        self._train_epoch = tf.function(self._epochs, input_signature=[stacked, scalar, scalar], autograph=False)
        if warm_up:  # no rows: nothing trains, but the graphs are built and optimised
            empty = tf.nest.map_structure(lambda spec: tf.zeros([0, 0, *spec.shape[2:]], spec.dtype), stacked)
            self._train_epoch(empty, 0.0, 0.0)
            self._value_estimates(tuple(tf.zeros([0, size]) for size in sizes))
        self._exporter = TFLiteExporter(self.policy, [spec.shape for spec in brain_parameters.observation_specs])

    def _normalized(self, obs: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        if not self.normalize:
            return list(obs)
        return [normalizer.normalize(o) for normalizer, o in zip(self.normalizers, obs, strict=True)]

    def _values(self, obs: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """V(s) [N, K], one column per reward signal, of raw observations (one [N, size_i] each)."""
        normalized = self._normalized(obs)
        return self.value(normalized[0] if len(normalized) == 1 else tf.concat(normalized, axis=-1))

    def _gradient_step(self, batch: MiniBatch, epsilon: tf.Tensor, beta: tf.Tensor) -> PPOLosses:
        """One Adam step on one minibatch; returns its losses."""
        with tf.GradientTape() as tape:
            outputs = self.policy(*self._normalized(batch.obs))
            log_probs, entropy = action_log_probs_and_entropy(outputs, batch, self.branches)
            losses = ppo_losses(log_probs, entropy, self._values(batch.obs), batch, epsilon, beta)
        gradients = tape.gradient(losses.total, self._variables)
        if MAX_GRAD_NORM is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, MAX_GRAD_NORM)
        self.optimizer.apply_gradients(zip(gradients, self._variables, strict=True))
        return losses

    def _epochs(self, batches: MiniBatch, epsilon: tf.Tensor, beta: tf.Tensor) -> tf.Tensor:
        """Every gradient step of one update: ``batches`` holds ``S`` minibatches stacked on a leading axis
        (``[S, B, ...]`` per field, epochs back to back), looped over inside the graph; returns the summed
        (policy, value, entropy) losses."""

        def step(batch: MiniBatch) -> tf.Tensor:
            losses = self._gradient_step(batch, epsilon, beta)
            return tf.stack([losses.policy, losses.value, losses.entropy])

        return ppo_buffer.summed_over_minibatches(step, batches, 3)

    def set_step(self, step: int) -> None:
        """Overrules the trainer step the schedules read (agent experiences consumed)."""
        self.step.assign(step)

    def schedules(self, step: int | None = None) -> tuple[float, float, float]:
        """(learning rate, epsilon, beta) at ``step`` (default: the current trainer step)."""
        hp, max_steps = self.hyperparameters, self.settings.max_steps
        step = int(self.step.numpy()) if step is None else step
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
                lambd = self.hyperparameters.lambd
                advantages[start:end, k] = gae(rewards[start:end, k], values[start:end, k], bootstrap, signal.gamma, lambd)
                start = end
        return advantages

    def add_trajectories(self, trajectories: Sequence[tr.Trajectory]) -> int:
        """Estimates values, computes GAE per trajectory and signal, and appends the rows to the update buffer.

        Returns:
            The experiences added (the sum of the trajectories' lengths).
        """
        if not trajectories:
            return 0
        n_obs = len(self.normalizers)
        obs, next_obs = ppo_buffer.observations(trajectories, n_obs)
        if self.normalize:  # as ML-Agents: fold the new observations in before estimating values with them
            for normalizer, o in zip(self.normalizers, obs, strict=True):
                normalizer.update(o)
        n = len(obs[0])  # one value-network call below for every obs and every next_obs
        all_values = self._value_estimates(tuple(np.concatenate(pair) for pair in zip(obs, next_obs, strict=True))).numpy()
        values, next_values = all_values[:n], all_values[n:]
        # Signals with networks read whole transitions; extrinsic alone needs only the rewards.
        batch = SignalBatch.from_trajectories(trajectories, n_obs, transitions=self._transitions)
        rewards = np.stack([signal.rewards(batch) for signal in self.signals], axis=1)
        advantages = self._advantages(trajectories, rewards, values, next_values)
        computed = {ADVANTAGES: advantages.sum(axis=1), RETURNS: advantages + values, VALUE_ESTIMATES: values}
        computed[SIGNAL_REWARDS] = rewards
        transitions = batch if self._transitions else None
        self.update_buffer.extend_rows(ppo_buffer.trajectory_rows(trajectories, obs, self.branches, computed, transitions))
        self.step.assign_add(n)
        return n

    def ready_to_update(self) -> bool:
        return self.update_buffer.num_experiences >= self.hyperparameters.buffer_size

    def update(self) -> dict[str, float]:
        """``num_epoch`` shuffled passes over the update buffer, then clears it (module docstring).

        Returns:
            ML-Agents' tags: losses and entropy averaged over the minibatches (the policy loss as its absolute
            value, as ML-Agents reports it), the scheduled values used, each signal's mean value estimate and
            reward per step in the buffer, the signals' own losses, and behavioral_cloning's.
        """
        n = self.update_buffer.num_experiences
        if n == 0:
            return {}
        # A buffer smaller than batch_size (a config warning) still trains, on one minibatch of all.
        batch_size = min(self.hyperparameters.batch_size, n)
        learning_rate, epsilon, beta = self.schedules()
        self.optimizer.learning_rate.assign(learning_rate)
        signal_stats = ppo_buffer.signal_summaries(self.update_buffer, self.signals)
        n_obs, epochs = len(self.normalizers), self.hyperparameters.num_epoch
        batches, take = ppo_buffer.epoch_minibatches(self.update_buffer, n_obs, self.branches, epochs, batch_size, self._rng)
        sums = self._train_epoch(batches, epsilon, beta).numpy()
        if self._transitions:  # the signals with networks of their own take a step on each minibatch
            signal_stats.update(ppo_buffer.train_signals(self.update_buffer, take, self.signals, n_obs))
        self.update_buffer.reset_agent()
        policy, value, entropy = sums / len(take)  # take: the row indices [S, B] of the S minibatches
        traces = self._train_epoch.experimental_get_tracing_count()  # 1, unless something forces a retrace
        logger.debug("PPO update: %d experiences, %d gradient steps, %d trace(s)", n, len(take), traces)
        if self.bc is not None:
            signal_stats.update(self.bc.update(int(self.step.numpy())))
        return {
            POLICY_LOSS: abs(float(policy)),
            VALUE_LOSS: float(value),
            ENTROPY: float(entropy),
            LEARNING_RATE: learning_rate,
            EPSILON: epsilon,
            BETA: beta,
            **signal_stats,
        }

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        """The policy network as TFLite, with the normaliser state when ``normalize`` is on."""
        normalizers = [normalizer_state(*n.state()) for n in self.normalizers] if self.normalize else []
        name, spec = self.brain_parameters.behavior_name, self.brain_parameters.action_spec.to_proto()
        model = self._exporter.export()
        return make_policy_update(name, version, trainer_step, model, spec, normalizers, tanh_squash=False, clip=ACTION_CLIP)

    def checkpoint_objects(self) -> dict[str, object]:
        """Networks, optimiser (its step count and moments), normalisers, the trainer step, and the reward signals'
        and behavioral_cloning's networks and optimisers."""
        objects: dict[str, object] = {"policy": self.policy, "value": self.value, "optimizer": self.optimizer}
        objects["trainer_step"] = self.step  # not "step": trainer.checkpoint reserves that name
        objects.update({f"normalizer_{i}": normalizer for i, normalizer in enumerate(self.normalizers)})
        return {**objects, **signal_checkpoint_objects(self.signals), **(self.bc.checkpoint_objects() if self.bc else {})}

    def save_extra(self, directory: Path) -> None:
        """Nothing: the update buffer is cleared after every update, and the rest is in the TF checkpoint."""
        del directory

    def load_extra(self, directory: Path) -> None:
        """Nothing to restore (see ``save_extra``)."""
        del directory
