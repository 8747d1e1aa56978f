"""PPO with memory (``network_settings.memory``): ``trainer.ppo``'s losses on sequences, as ML-Agents trains an LSTM.

The actor is ``trainer.recurrent.RecurrentPolicyNetwork``; the processor holds each agent's state between steps and
every experience carries the state its action was chosen with (``common.trajectory.MEMORY``). Taking trajectories in:

* each trajectory is cut, from its first step, into sequences of ``sequence_length`` ``L``, the last padded at its end
  (``trainer.sequences.cut_sequences``); a sequence starts from its first step's stored state;
* the critic (``RecurrentValueNetwork``) has a memory of its own, held here as ML-Agents holds it: per agent
  (session id, agent id), the state after the last step of its previous trajectory, so it carries across time_horizon
  cuts; it starts at zeros, and is dropped at done (a new episode), at the session's end (a trajectory interrupted
  without done is a flush: the processor's session ended, or the agents' states restarted from zeros for a policy of
  another memory size), and when ``MAX_CRITIC_STATES`` agents are held (the least recently used goes). Each
  trajectory is unrolled from it over its ``T + 1`` observations (``next_obs`` last, so the bootstrap value comes from
  the same unroll), sequence after sequence; the state each sequence started with is kept for the value loss, which
  recomputes the values from it;
* GAE per trajectory and reward signal (``trainer.ppo.gae``), bootstrapping as ``trainer.ppo`` does.

An update: ``num_epoch`` passes over the sequences in a fresh random order, ``max(1, batch_size // L)`` whole sequences
per minibatch (a last partial one is dropped), one Adam step each on ``trainer.ppo``'s loss, every term a mean over
the real steps only (padding masked out, ``trainer.sequences.masked_mean``), advantages normalised over those steps.
Then the sequences are cleared (on-policy).

Not supported yet with memory (each a ``NotSupportedKeyError`` naming its key): ``use_sde``, ``shared_critic``,
``proximal_clip``, ``normalize_reward``, ``behavioral_cloning`` and reward signals with networks of their own (gail,
curiosity).

Shapes: ``T`` experiences of a trajectory, ``L`` sequence_length, ``S`` sequences, ``B`` sequences of a minibatch,
``R`` memory_size, ``C`` continuous size, ``nB`` branches, ``M`` = sum(branches), ``K`` reward signals.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.config import BehaviorSettings, ConfigKeyError, NotSupportedKeyError, PPOHyperparameters
from common.specs import BrainParameters
from protos import pb
from trainer.encoders import image_observation_dtypes, observation_encoder
from trainer.export import TFLiteExporter, make_policy_update, normalizer_state
from trainer.networks import WeightInit, activation_function, normalized_observations, observation_normalizers
from trainer.optimizer import adam, apply_adam
from trainer.ppo import (
    ACTION_CLIP,
    ADAM_EPSILON,
    MIN_BETA,
    MIN_EPSILON,
    VALUE_LOSS_COEFFICIENT,
    action_log_probs_and_entropy,
    gae,
)
from trainer.recurrent import RecurrentPolicyNetwork, RecurrentValueNetwork
from trainer.reward_signals import SignalBatch, make_reward_signals
from trainer.schedules import MIN_LEARNING_RATE, decayed_value
from trainer.seeding import seeded_initializers
from trainer.sequences import SEQUENCE_MASK, cut_sequences, masked_mean, masked_normalized, sequence_start_memories
from trainer.summaries import BETA, ENTROPY, EPSILON, LEARNING_RATE, POLICY_LOSS, VALUE_LOSS

logger = logging.getLogger(__name__)

OLD_LOG_PROBS = "old_log_probs"
ADVANTAGES = "advantages"
RETURNS = "returns"
OLD_VALUES = "old_values"
CRITIC_MEMORY = "critic_memory"
"""Sequence key: float32 [S, R], the critic's state at each sequence's first step."""
MAX_CRITIC_STATES = 65_536
"""Agents whose critic state the learner holds between trajectories, at most (``4 * R`` bytes each)."""


def _rows(sequences: np.ndarray) -> np.ndarray:
    """``[S, L, ...]`` as ``[S * L, ...]`` (also with no values per row)."""
    return sequences.reshape(sequences.shape[0] * sequences.shape[1], *sequences.shape[2:])


def agent_waves(trajectories: Sequence[tr.Trajectory]) -> list[list[int]]:
    """The trajectories' indices in waves: wave k holds each agent's k-th trajectory (agent: session and agent id),
    so an agent's trajectories are taken in order, one per wave."""
    seen: dict[tuple[str, int], int] = {}
    waves: list[list[int]] = []
    for i, t in enumerate(trajectories):
        key = (t.id.session_id, t.id.agent_id)
        k = seen[key] = seen.get(key, -1) + 1
        if k == len(waves):
            waves.append([])
        waves[k].append(i)
    return waves


class SequenceBatch(NamedTuple):
    """``B`` sequences of ``L`` steps, their rows laid out sequence after sequence (``[B * L, ...]``).

    ``obs`` one [B * L, *shape_i] per observation, raw; ``memories`` float32 [B, R], each sequence's starting state;
    ``critic_memories`` float32 [B, R], the critic's;
    ``continuous_actions`` float32 [B * L, C]; ``discrete_actions`` int32 [B * L, nB]; ``action_mask`` float32
    [B * L, M]; ``old_log_probs`` and ``advantages`` float32 [B * L]; ``returns`` and ``old_values`` float32
    [B * L, K]; ``mask`` float32 [B * L], 1 on real steps, 0 on padding.
    """

    obs: tuple[tf.Tensor, ...]
    memories: tf.Tensor
    critic_memories: tf.Tensor
    continuous_actions: tf.Tensor
    discrete_actions: tf.Tensor
    action_mask: tf.Tensor
    old_log_probs: tf.Tensor
    advantages: tf.Tensor
    returns: tf.Tensor
    old_values: tf.Tensor
    mask: tf.Tensor


def masked_ppo_losses(
    log_probs: tf.Tensor,
    entropy: tf.Tensor,
    values: tf.Tensor,
    batch: SequenceBatch,
    epsilon: tf.Tensor,
    beta: tf.Tensor,
    clip_value_loss: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """``trainer.ppo.ppo_losses`` over the real steps of a sequence batch: (total, policy, value, entropy).

    Every mean is ``masked_mean`` over ``batch.mask``, and the advantages are normalised over the real steps, so a
    padded step changes no loss and gets no gradient."""
    mask = batch.mask
    advantages = masked_normalized(batch.advantages, mask)
    ratio = tf.exp(log_probs - batch.old_log_probs)
    clipped = tf.clip_by_value(ratio, 1.0 - epsilon, 1.0 + epsilon)
    policy = -masked_mean(tf.minimum(ratio * advantages, clipped * advantages), mask)
    if clip_value_loss:
        clipped_values = batch.old_values + tf.clip_by_value(values - batch.old_values, -epsilon, epsilon)
        value = masked_mean(tf.maximum(tf.square(batch.returns - values), tf.square(batch.returns - clipped_values)), mask)
    else:
        value = masked_mean(tf.square(batch.returns - values), mask)
    mean_entropy = masked_mean(entropy, mask)
    return policy + VALUE_LOSS_COEFFICIENT * value - beta * mean_entropy, policy, value, mean_entropy


def _refuse_unsupported(settings: BehaviorSettings, signals: Sequence[Any]) -> None:
    hp = settings.hyperparameters
    assert isinstance(hp, PPOHyperparameters)
    refused = {
        "hyperparameters.use_sde": hp.use_sde,
        "hyperparameters.shared_critic": hp.shared_critic,
        "hyperparameters.proximal_clip": hp.proximal_clip,
        "hyperparameters.normalize_reward": hp.normalize_reward,
        "behavioral_cloning": settings.behavioral_cloning is not None,
    }
    refused |= {f"reward_signals.{s.name}": bool(s.checkpoint_objects()) for s in signals}
    for key, on in refused.items():
        if on:
            raise NotSupportedKeyError(key, "not supported yet with network_settings.memory")


class RecurrentPPOLearner:
    """PPO for one behavior whose policy has memory (module docstring); a ``trainer.learner.Learner``, one thread."""

    def __init__(self, brain_parameters: BrainParameters, settings: BehaviorSettings, seed: int = 0) -> None:
        """Builds the networks.

        Raises:
            ConfigKeyError: ``settings`` are not PPO's, or have no ``network_settings.memory``.
            NotSupportedKeyError: an option not supported yet with memory (module docstring).
        """
        hp = settings.hyperparameters
        memory = settings.network_settings.memory
        if not isinstance(hp, PPOHyperparameters) or memory is None:
            raise ConfigKeyError("network_settings.memory", "RecurrentPPOLearner needs PPO hyperparameters and a memory")
        self.brain_parameters = brain_parameters
        self.settings = settings
        self.hyperparameters = hp
        self.memory_size = memory.memory_size
        self.sequence_length = memory.sequence_length
        net = settings.network_settings
        self.normalize = net.normalize
        self.branches = tuple(brain_parameters.action_spec.discrete_branches)
        self._rng = np.random.default_rng(seed)
        specs = brain_parameters.observation_specs
        sizes = [int(np.prod(spec.shape)) for spec in specs]
        dtypes = image_observation_dtypes(specs)
        self.normalizers = observation_normalizers(specs)
        activation = activation_function(hp.activation)
        init = WeightInit.ORTHOGONAL if hp.orthogonal_init else WeightInit.PYTORCH
        name = brain_parameters.behavior_name
        with seeded_initializers(seed):
            self.signals = make_reward_signals(brain_parameters, settings.reward_signals, seed)
            _refuse_unsupported(settings, self.signals)
            self.policy = RecurrentPolicyNetwork(
                sizes,
                brain_parameters.action_spec,
                net.hidden_units,
                net.num_layers,
                self.memory_size,
                initial_log_std=hp.log_std_init,
                activation=activation,
                init=init,
                encoder=observation_encoder(specs, net.vis_encode_type, net.hidden_units, name, "policy_encoder"),
            )
            self.value = RecurrentValueNetwork(
                sizes,
                net.hidden_units,
                net.num_layers,
                self.memory_size // 2,
                len(self.signals),
                activation=activation,
                init=init,
                encoder=observation_encoder(specs, net.vis_encode_type, net.hidden_units, name, "value_encoder"),
            )
        self._variables = (*self.policy.trainable_variables, *self.value.trainable_variables)
        self.optimizer = adam(hp.learning_rate, self._variables, epsilon=ADAM_EPSILON)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._sequences: list[dict[str, np.ndarray]] = []
        """Per trajectory taken in since the last update: its fields as ``[S_i, L, ...]``, memories ``[S_i, R]``."""
        self._held_steps = 0
        obs_specs = tuple(tf.TensorSpec([None, *spec.shape], dtype) for spec, dtype in zip(specs, dtypes, strict=True))
        states = tf.TensorSpec([None, self.memory_size])
        self._value_graph = tf.function(self._values, input_signature=[obs_specs, states], autograph=False)
        self._critic_states: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        """Per agent: the critic's state after its previous trajectory's last step (module docstring)."""
        action_spec = brain_parameters.action_spec
        rows, heads = tf.TensorSpec([None]), tf.TensorSpec([None, len(self.signals)])
        batch_spec = SequenceBatch(
            obs_specs,
            states,
            states,
            tf.TensorSpec([None, action_spec.continuous_size]),
            tf.TensorSpec([None, action_spec.num_branches], tf.int32),
            tf.TensorSpec([None, action_spec.mask_width]),
            rows,
            rows,
            heads,
            heads,
            rows,
        )
        scalar = tf.TensorSpec([], tf.float32)
        self._train_graph = tf.function(self._gradient_step, input_signature=[batch_spec, scalar, scalar], autograph=False)
        self._exporter = TFLiteExporter(
            self.policy, [spec.shape for spec in specs], observation_dtypes=dtypes, memory_size=self.memory_size
        )

    def _normalized(self, obs: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        return normalized_observations(self.normalizers, obs) if self.normalize else list(obs)

    def _values(self, obs: tuple[tf.Tensor, ...], memories: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """V [S * L, K] of sequences laid out row after row (raw observations), each from its critic state in
        ``memories`` [S, R]; and the critic's state after each step, [S, L, R]."""
        return self.value.sequences_with_states(self._normalized(obs), memories, self.sequence_length)

    # -- steps and schedules ------------------------------------------------------------------------

    @property
    def trainer_step(self) -> int:
        return int(self.step.numpy())

    def set_step(self, step: int) -> None:
        self.step.assign(step)

    def schedules(self) -> tuple[float, float, float]:
        """(learning rate, epsilon, beta) at the current trainer step, as ``trainer.ppo``."""
        hp, max_steps, step = self.hyperparameters, self.settings.max_steps, self.trainer_step
        return (
            decayed_value(hp.learning_rate_schedule, hp.learning_rate, MIN_LEARNING_RATE, max_steps, step),
            decayed_value(hp.effective_epsilon_schedule, hp.epsilon, MIN_EPSILON, max_steps, step),
            decayed_value(hp.effective_beta_schedule, hp.beta, MIN_BETA, max_steps, step),
        )

    # -- taking trajectories in -----------------------------------------------------------------------

    def add_trajectories(self, trajectories: Sequence[tr.Trajectory]) -> int:
        """Cuts the trajectories into sequences with their values, advantages and returns (module docstring).

        Returns:
            The experiences taken in.
        """
        trajectories = [t for t in trajectories if t.length]
        if not trajectories:
            return 0
        n_obs = len(self.normalizers)
        if self.normalize:
            for i, normalizer in enumerate(self.normalizers):
                if normalizer is not None:
                    normalizer.update(np.concatenate([t.obs[i] for t in trajectories]).astype(np.float32))
        batch = SignalBatch.from_trajectories(trajectories, n_obs, transitions=False)
        rewards = np.stack([signal.rewards(batch) for signal in self.signals], axis=1)
        values, critic_starts = self._critic(trajectories)
        start = 0
        for t, v, c in zip(trajectories, values, critic_starts, strict=True):
            self._sequences.append(self._trajectory_sequences(t, v, rewards[start : start + t.length], c))
            start += t.length
        n = sum(t.length for t in trajectories)
        self._held_steps += n
        self.step.assign_add(n)
        return n

    def _critic(self, trajectories: Sequence[tr.Trajectory]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each trajectory's values [T + 1, K] (the last V(next_obs)) and the critic's state at each of its sequences'
        first steps [ceil((T + 1) / L), R], unrolled from the agent's held state (module docstring); holds each
        agent's state after its last step for its next trajectory.

        One agent's trajectories are unrolled in their order, each from where the previous one ended
        (``agent_waves``)."""
        values: list[np.ndarray] = [np.empty(0)] * len(trajectories)
        starts: list[np.ndarray] = [np.empty(0)] * len(trajectories)
        for wave in agent_waves(trajectories):
            members = [trajectories[i] for i in wave]
            for i, v, c in zip(wave, *self._unroll_wave(members), strict=True):
                values[i], starts[i] = v, c
        return values, starts

    def _unroll_wave(self, trajectories: Sequence[tr.Trajectory]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """``_critic`` for trajectories of distinct agents: sequence j of every one of them in one call."""
        length, n_obs = self.sequence_length, len(self.normalizers)
        frames = [cut_sequences({tr.obs_key(k): t.frames(k) for k in range(n_obs)}, length) for t in trajectories]
        keys = [(t.id.session_id, t.id.agent_id) for t in trajectories]
        zeros = np.zeros(self.memory_size, np.float32)
        state = np.stack([self._critic_states.pop(key, zeros) for key in keys])
        values, starts, carry = self._unroll_frames(frames, state, [t.length for t in trajectories])
        for a, t in enumerate(trajectories):
            values[a] = values[a][: t.length + 1]
            if not (t.done_reached or t.interrupted):  # a new episode, or the session ended (a flush)
                self._hold_critic_state(keys[a], carry[a])
        return values, starts

    def _unroll_frames(
        self, frames: list[dict[str, np.ndarray]], state: np.ndarray, lengths: list[int]
    ) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """The critic over each trajectory's frame sequences (``[S_a, L, ...]`` per observation) from ``state``
        [A, R]: per trajectory its values [S_a * L, K] and sequence start states [S_a, R], and the state after each
        one's last experience (its ``lengths[a] - 1``-th row) [A, R]."""
        length, n_obs = self.sequence_length, len(self.normalizers)
        counts = [len(f[SEQUENCE_MASK]) for f in frames]
        values = [np.empty((c * length, len(self.signals)), np.float32) for c in counts]
        starts = [np.empty((c, self.memory_size), np.float32) for c in counts]
        carry = state.copy()
        for j in range(max(counts)):
            active = [a for a, c in enumerate(counts) if c > j]
            obs = tuple(np.concatenate([frames[a][tr.obs_key(k)][j] for a in active]) for k in range(n_obs))
            v, after = (x.numpy() for x in self._value_graph(obs, state[active]))
            for row, a in enumerate(active):
                starts[a][j] = state[a]
                values[a][j * length : (j + 1) * length] = v[row * length : (row + 1) * length]
                if (lengths[a] - 1) // length == j:
                    carry[a] = after[row, (lengths[a] - 1) % length]
            state[active] = after[:, -1]
        return values, starts, carry

    def _hold_critic_state(self, key: tuple[str, int], state: np.ndarray) -> None:
        self._critic_states[key] = state
        if len(self._critic_states) > MAX_CRITIC_STATES:
            self._critic_states.popitem(last=False)  # the least recently used: its session most likely ended

    def _trajectory_sequences(
        self, t: tr.Trajectory, values: np.ndarray, rewards: np.ndarray, critic_starts: np.ndarray
    ) -> dict[str, np.ndarray]:
        """One trajectory's sequences: ``values`` [T + 1, K] (the last is V(next_obs)), ``rewards`` [T, K],
        ``critic_starts`` [>= S, R] the critic's state at each sequence's first step."""
        advantages = np.empty((t.length, len(self.signals)), np.float32)
        for k, signal in enumerate(self.signals):
            terminal = t.done_reached and not t.interrupted and not signal.ignore_done
            bootstrap = 0.0 if terminal else float(values[-1, k])
            advantages[:, k] = gae(rewards[:, k], values[:-1, k], bootstrap, signal.gamma, self.hyperparameters.lambd)
        rows = {tr.obs_key(i): o for i, o in enumerate(t.obs)}
        rows[tr.CONTINUOUS_ACTIONS] = t.continuous_actions
        rows[tr.DISCRETE_ACTIONS] = t.discrete_actions
        if self.branches:
            assert t.action_mask is not None  # the processor sends a mask whenever there are branches
            rows[tr.ACTION_MASK] = t.action_mask.astype(np.float32)
        rows[OLD_LOG_PROBS] = (t.continuous_log_probs.sum(axis=1) + t.discrete_log_probs.sum(axis=1)).astype(np.float32)
        rows[ADVANTAGES] = advantages.sum(axis=1)
        rows[RETURNS] = advantages + values[:-1]
        rows[OLD_VALUES] = values[:-1].astype(np.float32)
        sequences = cut_sequences(rows, self.sequence_length, {tr.ACTION_MASK: 1.0})
        memories = t.memories if t.memories is not None else np.zeros((t.length, self.memory_size), np.float32)
        sequences[tr.MEMORY] = sequence_start_memories(memories, self.sequence_length)
        sequences[CRITIC_MEMORY] = critic_starts[: len(sequences[SEQUENCE_MASK])]
        return sequences

    # -- the update ----------------------------------------------------------------------------------

    def ready_to_update(self) -> bool:
        return self._held_steps >= self.hyperparameters.buffer_size

    def _gradient_step(self, batch: SequenceBatch, epsilon: tf.Tensor, beta: tf.Tensor) -> tf.Tensor:
        """One Adam step on one minibatch of sequences; returns (policy, value, entropy) losses, float32 [3]."""
        hp = self.hyperparameters
        with tf.GradientTape() as tape:
            obs = self._normalized(batch.obs)
            outputs = self.policy.sequences(obs, batch.memories, self.sequence_length)
            values = self.value.sequences(obs, batch.critic_memories, self.sequence_length)
            log_probs, entropy = action_log_probs_and_entropy(outputs, batch, self.branches)  # type: ignore[arg-type]
            total, policy, value, mean_entropy = masked_ppo_losses(
                log_probs, entropy, values, batch, epsilon, beta, hp.clip_value_loss
            )
        gradients = tape.gradient(total, self._variables)
        if hp.max_grad_norm is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, hp.max_grad_norm)
        apply_adam(self.optimizer, gradients, self._variables)
        return tf.stack([policy, value, mean_entropy])

    def _batch(self, held: dict[str, np.ndarray], index: np.ndarray) -> SequenceBatch:
        """The sequences ``index`` of ``held`` (``[S, L, ...]`` per field) as a ``SequenceBatch``."""

        def rows(key: str) -> np.ndarray:
            return _rows(held[key][index])

        n_obs = len(self.normalizers)
        width = self.brain_parameters.action_spec.mask_width
        mask = rows(tr.ACTION_MASK) if self.branches else np.zeros((len(index) * self.sequence_length, width), np.float32)
        return SequenceBatch(
            tuple(rows(tr.obs_key(i)) for i in range(n_obs)),
            held[tr.MEMORY][index],
            held[CRITIC_MEMORY][index],
            rows(tr.CONTINUOUS_ACTIONS),
            rows(tr.DISCRETE_ACTIONS),
            mask,
            rows(OLD_LOG_PROBS),
            rows(ADVANTAGES),
            rows(RETURNS),
            rows(OLD_VALUES),
            rows(SEQUENCE_MASK),
        )

    def update(self) -> dict[str, float]:
        """``num_epoch`` passes over the sequences taken in, whole sequences per minibatch; then clears them."""
        if not self._sequences:
            return {}
        held = {key: np.concatenate([s[key] for s in self._sequences]) for key in self._sequences[0]}
        self._sequences, self._held_steps = [], 0
        learning_rate, epsilon, beta = self.schedules()
        self.optimizer.learning_rate.assign(learning_rate)
        count = len(held[tr.MEMORY])
        per_batch = min(max(1, self.hyperparameters.batch_size // self.sequence_length), count)
        sums, steps = np.zeros(3), 0
        for _ in range(self.hyperparameters.num_epoch):
            order = self._rng.permutation(count)
            for start in range(0, count - per_batch + 1, per_batch):
                batch = self._batch(held, order[start : start + per_batch])
                sums += self._train_graph(batch, epsilon, beta).numpy()
                steps += 1
        policy, value, entropy = sums / max(steps, 1)
        logger.debug("recurrent PPO update: %d sequences, %d gradient steps", count, steps)
        return {
            POLICY_LOSS: abs(float(policy)),
            VALUE_LOSS: float(value),
            ENTROPY: float(entropy),
            LEARNING_RATE: learning_rate,
            EPSILON: epsilon,
            BETA: beta,
        }

    # -- policy, checkpoints ------------------------------------------------------------------------

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        """The recurrent policy as TFLite with its state in and out (``memory_size``), and the normaliser state."""
        normalizers = [normalizer_state(*n.state()) for n in self.normalizers if n is not None] if self.normalize else []
        spec = self.brain_parameters.action_spec.to_proto()
        return make_policy_update(
            self.brain_parameters.behavior_name,
            version,
            trainer_step,
            self._exporter.export(),
            spec,
            normalizers,
            tanh_squash=False,
            clip=ACTION_CLIP,
            memory_size=self.memory_size,
        )

    def checkpoint_objects(self) -> dict[str, object]:
        """Networks, optimiser, normalisers and the trainer step."""
        objects: dict[str, object] = {"policy": self.policy, "value": self.value, "optimizer": self.optimizer}
        objects["trainer_step"] = self.step
        objects.update({f"normalizer_{i}": n for i, n in enumerate(self.normalizers) if n is not None})
        return objects

    def save_extra(self, directory: Path) -> None:
        """Nothing: the sequences are cleared at every update, as PPO's update buffer."""
        del directory

    def load_extra(self, directory: Path) -> None:
        """Nothing to restore (see ``save_extra``)."""
        del directory
