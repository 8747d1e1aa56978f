"""MA-POCA: one shared actor per behavior, one centralised critic over the group, a counterfactual baseline per agent.

Cohen et al. 2021, "On the Use and Misuse of Absorbing States in Multi-agent Reinforcement Learning"
(arXiv:2111.05992), as ML-Agents' ``trainers/poca/`` has it:

* **The critic** ``V(s_group)`` attends over the observations of the agent and of the groupmates it saw at
  each step (``common.groups``), however many: each is an entity of ``trainer.attention``, embedded by one
  shared ``EntityEmbedding``, pooled by ``ResidualSelfAttention``, then an MLP and one value head per reward
  signal, which also reads the number of agents present (scaled to [-1, 1] by the most seen so far).
* **The baseline** ``Q(s_i, (s_j, a_j)_{j != i})`` is the same network on the agent's observation alone and
  its groupmates' observations *with their actions* (a second embedding): what the group would get
  whatever agent ``i`` did. Counterfactual credit: agent ``i``'s advantage is ``G^lambda_t - b_i(t)``.
* **Targets**: ``G^lambda`` is the lambda-return of the centralised value (``lambda_return``); the value and
  the baseline both regress to it (clipped around their old estimates by epsilon, as ML-Agents').
* **Bootstrapping**: a trajectory ends as terminal only when its agent's done was reached, it was not
  interrupted, and every groupmate at its last step was done too (``GroupData.all_groupmates_done``).
  An agent that leaves before its group ends bootstraps from the group's value after it, so it still
  learns to contribute to what the group gets later (the paper's absorbing-state argument).
* **Rewards** (ML-Agents' ``add_groupmate_rewards``): the extrinsic reward of a step is the agent's own,
  plus its groupmates' individual rewards at that step, plus the group reward, times ``strength``.
* **Loss**: ``PPO's clipped policy loss on the normalised advantage + 0.5 * (value loss + 0.5 * baseline
  loss) - beta * entropy`` (ML-Agents' weights), one Adam over actor and critic.

The exported policy is the actor alone, with PPO's ONNX/TFLite contract (``trainer.export``).

Not yet here (refused at construction with the key named): reward signals other than ``extrinsic``,
``normalize``, image observations in the critic, ``memory``. Summaries: ML-Agents' tags, with
``Losses/Baseline Loss`` and ``Environment/Group Cumulative Reward`` (the mean over the episodes of the
agents whose episodes ended with their group's since the previous update, reported with the update).

Shapes: ``B`` rows, ``T`` steps of a trajectory, ``G`` groupmate slots, ``D`` an agent's flattened vector
observations, ``A`` a groupmate's action as the baseline reads it (continuous values, then one one-hot per
discrete branch).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.config import BehaviorSettings, ConfigKeyError, POCAHyperparameters, RewardSignalType
from common.groups import EMPTY
from common.specs import BrainParameters
from protos import pb
from trainer.attention import EntityEmbedding, ResidualSelfAttention
from trainer.export import TFLiteExporter, make_policy_update
from trainer.networks import PolicyNetwork, WeightInit, activation_function, mlp
from trainer.optimizer import adam, apply_adam
from trainer.ppo import (
    ACTION_CLIP,
    ADAM_EPSILON,
    MIN_BETA,
    MIN_EPSILON,
    MiniBatch,
    action_log_probs_and_entropy,
    clipped_surrogate_loss,
    clipped_value_loss,
    normalized_advantages,
    squared_value_loss,
)
from trainer.schedules import MIN_LEARNING_RATE, decayed_value
from trainer.seeding import seeded_initializers
from trainer.summaries import BETA, ENTROPY, EPSILON, LEARNING_RATE, POLICY_LOSS, VALUE_LOSS

logger = logging.getLogger(__name__)

ATTENTION_EMBEDDING_SIZE = 128
"""ML-Agents' ``MultiAgentNetworkBody.ATTENTION_EMBEDDING_SIZE``."""
BASELINE_LOSS = "Losses/Baseline Loss"
GROUP_CUMULATIVE_REWARD = "Environment/Group Cumulative Reward"


def lambda_return(rewards: np.ndarray, values: np.ndarray, value_next: float, gamma: float, lambd: float) -> np.ndarray:
    """The lambda-return of each step (Sutton and Barto, 12.1), ML-Agents' ``lambda_return``:
    ``G_t = r_t + gamma * ((1 - lambd) * V_{t+1} + lambd * G_{t+1})``, with ``G_T = r_T + gamma * value_next``.

    lambd = 1 is the Monte-Carlo return bootstrapped at the end; lambd = 0 the one-step TD target.

    Args:
        rewards, values: float32 ``[T]``.
        value_next: the value after the last step (0 when it is terminal).
    """
    returns = np.zeros_like(rewards, dtype=np.float32)
    returns[-1] = rewards[-1] + gamma * value_next
    for t in reversed(range(len(rewards) - 1)):
        returns[t] = rewards[t] + gamma * ((1.0 - lambd) * values[t + 1] + lambd * returns[t + 1])
    return returns


def extrinsic_rewards(trajectory: tr.Trajectory, strength: float) -> np.ndarray:
    """float32 ``[T]``: own reward + groupmates' individual rewards + group reward, times ``strength``
    (ML-Agents' ``add_groupmate_rewards``)."""
    rewards = trajectory.rewards.astype(np.float32)
    group = trajectory.group
    if group is not None:
        present = group.groupmate_status != EMPTY
        rewards = rewards + (group.groupmate_rewards * present).sum(axis=1) + group.group_rewards
    return (strength * rewards).astype(np.float32)


def flat_actions(continuous: np.ndarray, discrete: np.ndarray, branches: Sequence[int]) -> np.ndarray:
    """``[..., C]`` and ``[..., B]`` -> float32 ``[..., A]``: the continuous values, then a one-hot per branch."""
    parts = [continuous.astype(np.float32)]
    for b, size in enumerate(branches):
        parts.append(np.eye(size, dtype=np.float32)[discrete[..., b]])
    return np.concatenate(parts, axis=-1)


class GroupCritic(tf.Module):
    """The centralised value and the counterfactual baseline, one output per reward signal (module docstring)."""

    def __init__(self, obs_size: int, action_size: int, hidden_units: int, num_layers: int, heads: int) -> None:
        super().__init__(name="poca_critic")
        with self.name_scope:
            self.obs_embedding = EntityEmbedding(obs_size, ATTENTION_EMBEDDING_SIZE, name="obs_embedding")
            self.obs_action_embedding = EntityEmbedding(
                obs_size + action_size, ATTENTION_EMBEDDING_SIZE, name="obs_action_embedding"
            )
            self.attention = ResidualSelfAttention(ATTENTION_EMBEDDING_SIZE)
            self.body = mlp(hidden_units, num_layers, "critic_body")
            self.body.build((None, ATTENTION_EMBEDDING_SIZE))
            self.head = tf.keras.layers.Dense(heads, name="value_heads")
            self.head.build((None, hidden_units + 1))
            self.max_agents = tf.Variable(1.0, trainable=False, name="max_agents")
            """The most agents (itself and groupmates) any row had: the agent count is scaled by it."""

    def _output(self, entities: tf.Tensor, absent: tf.Tensor) -> tf.Tensor:
        pooled = self.attention(entities, absent)
        count = tf.reduce_sum(1.0 - absent, axis=1, keepdims=True)
        scaled = count * 2.0 / self.max_agents - 1.0
        return self.head(tf.concat([self.body(pooled), scaled], axis=1))

    def value(self, obs: tf.Tensor, mates_obs: tf.Tensor, mates_absent: tf.Tensor) -> tf.Tensor:
        """``V`` ``[B, K]`` of ``obs`` ``[B, D]``, ``mates_obs`` ``[B, G, D]`` and ``mates_absent`` ``[B, G]`` (1 = empty)."""
        entities = self.obs_embedding(tf.concat([obs[:, tf.newaxis], mates_obs], axis=1))
        absent = tf.concat([tf.zeros([tf.shape(obs)[0], 1]), tf.cast(mates_absent, tf.float32)], axis=1)
        return self._output(entities, absent)

    def baseline(self, obs: tf.Tensor, mates_obs: tf.Tensor, mates_actions: tf.Tensor, mates_absent: tf.Tensor) -> tf.Tensor:
        """``b`` ``[B, K]``: the agent's obs alone, its groupmates' obs with their actions ``[B, G, A]``."""
        own = self.obs_embedding(obs[:, tf.newaxis])
        mates = self.obs_action_embedding(tf.concat([mates_obs, mates_actions], axis=2))
        absent = tf.concat([tf.zeros([tf.shape(obs)[0], 1]), tf.cast(mates_absent, tf.float32)], axis=1)
        return self._output(tf.concat([own, mates], axis=1), absent)

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every trainable weight (Keras 3 weights are invisible to ``tf.Module``'s walk)."""
        modules = (self.obs_embedding, self.obs_action_embedding, self.attention)
        layers = (self.body, self.head)
        return tuple(w for m in modules for w in m.trainable_variables) + tuple(
            w for layer in layers for w in layer.trainable_variables
        )

    def note_agents(self, count: int) -> None:
        if count > float(self.max_agents.numpy()):
            self.max_agents.assign(float(count))


class POCALearner:
    """MA-POCA for one behavior (module docstring); used from one thread only."""

    def __init__(self, brain_parameters: BrainParameters, settings: BehaviorSettings, seed: int = 0) -> None:
        """Raises:
        ConfigKeyError: settings not POCA's, or what this trainer does not do yet (module docstring).
        """
        hp = settings.hyperparameters
        if not isinstance(hp, POCAHyperparameters):
            raise ConfigKeyError("hyperparameters", f"POCALearner needs POCA hyperparameters, got {type(hp).__name__}")
        self._check_supported(brain_parameters, settings)
        self.brain_parameters = brain_parameters
        self.settings = settings
        self.hyperparameters = hp
        signal = settings.reward_signals[RewardSignalType.EXTRINSIC]
        self.gamma, self.strength = signal.gamma, signal.strength
        spec = brain_parameters.action_spec
        self.branches = tuple(spec.discrete_branches)
        self._obs_sizes = [int(np.prod(s.shape)) for s in brain_parameters.observation_specs]
        self.obs_size = sum(self._obs_sizes)
        self.action_size = spec.continuous_size + sum(self.branches)
        self._rng = np.random.default_rng(seed)
        net = settings.network_settings
        init = WeightInit.ORTHOGONAL if hp.orthogonal_init else WeightInit.PYTORCH
        with seeded_initializers(seed):
            self.policy = PolicyNetwork(
                self._obs_sizes,
                spec,
                net.hidden_units,
                net.num_layers,
                state_dependent_std=False,
                initial_log_std=hp.log_std_init,
                activation=activation_function(hp.activation),
                init=init,
            )
            self.critic = GroupCritic(self.obs_size, self.action_size, net.hidden_units, net.num_layers, heads=1)
        self._variables = (*self.policy.trainable_variables, *self.critic.trainable_variables)
        self.optimizer = adam(hp.learning_rate, self._variables, epsilon=ADAM_EPSILON)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._rows: list[dict[str, np.ndarray]] = []
        """Update rows of the trajectories turned into rows so far (``_rows_of_pending``)."""
        self._pending: list[tr.Trajectory] = []
        """Trajectories taken in, not yet turned into rows."""
        self._steps_to_add = 0
        self._values = tf.function(self.critic.value, reduce_retracing=True)
        self._baselines = tf.function(self.critic.baseline, reduce_retracing=True)
        self._group_returns: list[float] = []
        self._collected_group_rewards: dict[tuple[str, int], float] = {}
        self._exporter = TFLiteExporter(self.policy, [s.shape for s in brain_parameters.observation_specs])
        self._train_step = tf.function(self._gradient_step, reduce_retracing=True)

    @staticmethod
    def _check_supported(params: BrainParameters, settings: BehaviorSettings) -> None:
        other = [s.value for s in settings.reward_signals if s is not RewardSignalType.EXTRINSIC]
        if other or RewardSignalType.EXTRINSIC not in settings.reward_signals:
            raise ConfigKeyError("reward_signals", f"trainer_type poca takes the extrinsic signal alone yet, got {other}")
        if settings.network_settings.normalize:
            raise ConfigKeyError("network_settings.normalize", "trainer_type poca does not normalise observations yet")
        if any(s.is_image for s in params.observation_specs):
            raise ConfigKeyError("network_settings.vis_encode_type", "trainer_type poca takes vector observations only yet")

    # -- taking trajectories in ------------------------------------------------------------------------

    def add_trajectories(self, trajectories: Sequence[tr.Trajectory]) -> int:
        """Take trajectories in for the next update; returns their experiences. They wait as they are and become
        rows all at once before the update (``_rows_of_pending``): one critic pass for all of them, not three per
        trajectory, which cost more than the updates with short episodes."""
        kept = [t for t in trajectories if t.length]
        for trajectory in trajectories:
            self._record_group_episode(trajectory)
        self._pending.extend(kept)
        n = sum(t.length for t in kept)
        self._steps_to_add += n
        return n

    def _inputs(self, trajectory: tr.Trajectory) -> dict[str, np.ndarray]:
        """The trajectory's per-step arrays as the networks read them (vectors flattened and concatenated)."""
        t = trajectory.length
        obs = np.concatenate([o.reshape(t, -1) for o in trajectory.obs], axis=1).astype(np.float32)
        next_obs = np.concatenate([o.reshape(1, -1) for o in trajectory.next_obs], axis=1).astype(np.float32)
        group = trajectory.group
        g = 0 if group is None else group.groupmates
        mates = np.zeros((t, 0, self.obs_size), np.float32)
        actions = np.zeros((t, 0, self.action_size), np.float32)
        absent = np.zeros((t, 0), np.float32)
        next_mates = np.zeros((0, self.obs_size), np.float32)
        if group is not None and g:
            mates = np.concatenate([o.reshape(t, g, -1) for o in group.groupmate_obs], axis=2).astype(np.float32)
            actions = flat_actions(group.groupmate_continuous_actions, group.groupmate_discrete_actions, self.branches)
            absent = (group.groupmate_status == EMPTY).astype(np.float32)
        if group is not None and len(group.next_groupmate_obs[0]):
            k = len(group.next_groupmate_obs[0])
            next_mates = np.concatenate([o.reshape(k, -1) for o in group.next_groupmate_obs], axis=1).astype(np.float32)
        return {
            "obs": obs,
            "next_obs": next_obs,
            "mates": mates,
            "actions": actions,
            "absent": absent,
            "next_mates": next_mates,
        }

    def _rows_of_pending(self) -> None:
        """The waiting trajectories as update rows: values, baselines and the next values in one pass each, then each
        trajectory's lambda-returns and advantages (module docstring)."""
        if not self._pending:
            return
        trajectories, self._pending = self._pending, []
        xs = [self._inputs(t) for t in trajectories]
        g = max(x["mates"].shape[1] for x in xs)
        k = max(len(x["next_mates"]) for x in xs)
        self.critic.note_agents(1 + max(g, k))
        batch = _padded(xs, g)
        values = self._values(batch["obs"], batch["mates"], batch["absent"]).numpy()[:, 0]
        baselines = self._baselines(batch["obs"], batch["mates"], batch["actions"], batch["absent"]).numpy()[:, 0]
        next_mates = np.zeros((len(xs), k, self.obs_size), np.float32)
        next_absent = np.ones((len(xs), k), np.float32)
        for j, x in enumerate(xs):
            next_mates[j, : len(x["next_mates"])] = x["next_mates"]
            next_absent[j, : len(x["next_mates"])] = 0.0
        next_obs = np.concatenate([x["next_obs"] for x in xs])
        next_values = self._values(next_obs, next_mates, next_absent).numpy()[:, 0]
        batch["returns"], batch["rewards"] = self._returns(trajectories, values, next_values)
        batch["advantages"] = (batch["returns"] - baselines).astype(np.float32)
        batch["old_values"] = values.astype(np.float32)
        batch["old_baselines"] = baselines.astype(np.float32)
        batch.update(_action_columns(trajectories))
        self._rows.append(batch)

    def _returns(
        self, trajectories: Sequence[tr.Trajectory], values: np.ndarray, next_values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lambda-returns, extrinsic rewards), float32 ``[N]`` over the trajectories' steps in order; ``values``
        ``[N]``, ``next_values`` one per trajectory."""
        start = 0
        returns, rewards = [], []
        for j, trajectory in enumerate(trajectories):
            end = start + trajectory.length
            group = trajectory.group
            all_done = group is None or group.all_groupmates_done
            # Terminal only when the agent's done was reached, it was not a time limit, and its whole group was
            # done: an agent that leaves early bootstraps from the group's value after it (module docstring).
            terminal = trajectory.done_reached and not trajectory.interrupted and all_done
            value_next = 0.0 if terminal else float(next_values[j])
            rewards.append(extrinsic_rewards(trajectory, self.strength))
            returns.append(lambda_return(rewards[-1], values[start:end], value_next, self.gamma, self.hyperparameters.lambd))
            start = end
        return np.concatenate(returns), np.concatenate(rewards)

    def _record_group_episode(self, trajectory: tr.Trajectory) -> None:
        """ML-Agents' ``Environment/Group Cumulative Reward``: an agent's group rewards over its episode, reported
        when its episode ends together with its group's."""
        group = trajectory.group
        if group is None:
            return
        key = (trajectory.id.session_id, trajectory.id.agent_id)
        total = self._collected_group_rewards.get(key, 0.0) + float(group.group_rewards.sum())
        if trajectory.done_reached:
            self._collected_group_rewards.pop(key, None)
            if group.all_groupmates_done:
                self._group_returns.append(total)
        else:
            self._collected_group_rewards[key] = total

    # -- the update ------------------------------------------------------------------------------------

    def ready_to_update(self) -> bool:
        waiting = sum(t.length for t in self._pending)
        return waiting + sum(len(r["obs"]) for r in self._rows) >= self.hyperparameters.buffer_size

    def _buffer(self) -> dict[str, np.ndarray]:
        """Every row taken in, groupmate slots padded to the most in the buffer (empty slots absent)."""
        g = max(r["mates"].shape[1] for r in self._rows)

        def padded(r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            extra = g - r["mates"].shape[1]
            if not extra:
                return r
            out = dict(r)
            out["mates"] = np.pad(r["mates"], ((0, 0), (0, extra), (0, 0)))
            out["actions"] = np.pad(r["actions"], ((0, 0), (0, extra), (0, 0)))
            out["absent"] = np.pad(r["absent"], ((0, 0), (0, extra)), constant_values=1.0)
            return out

        rows = [padded(r) for r in self._rows]
        return {key: np.concatenate([r[key] for r in rows]) for key in rows[0]}

    def schedules(self) -> tuple[float, float, float]:
        hp, max_steps, step = self.hyperparameters, self.settings.max_steps, self.trainer_step
        return (
            decayed_value(hp.learning_rate_schedule, hp.learning_rate, MIN_LEARNING_RATE, max_steps, step),
            decayed_value(hp.effective_epsilon_schedule, hp.epsilon, MIN_EPSILON, max_steps, step),
            decayed_value(hp.effective_beta_schedule, hp.beta, MIN_BETA, max_steps, step),
        )

    def _gradient_step(self, batch: dict[str, tf.Tensor], epsilon: tf.Tensor, beta: tf.Tensor) -> tf.Tensor:
        """One Adam step on one minibatch; returns (policy, value, baseline, entropy) losses ``[4]``."""
        hp = self.hyperparameters
        with tf.GradientTape() as tape:
            outputs = self.policy(*tf.split(batch["obs"], self._obs_sizes, axis=1))
            log_probs, entropy = action_log_probs_and_entropy(outputs, cast(MiniBatch, _Actions(batch)), self.branches)
            advantages = normalized_advantages(batch["advantages"])
            policy_loss = clipped_surrogate_loss(log_probs, batch["old_log_probs"], advantages, epsilon)
            values = self.critic.value(batch["obs"], batch["mates"], batch["absent"])[:, 0]
            baselines = self.critic.baseline(batch["obs"], batch["mates"], batch["actions"], batch["absent"])[:, 0]
            if hp.clip_value_loss:
                value_loss = clipped_value_loss(values, batch["old_values"], batch["returns"], epsilon)
                baseline_loss = clipped_value_loss(baselines, batch["old_baselines"], batch["returns"], epsilon)
            else:
                value_loss = squared_value_loss(values, batch["returns"])
                baseline_loss = squared_value_loss(baselines, batch["returns"])
            mean_entropy = tf.reduce_mean(entropy)
            total = policy_loss + 0.5 * (value_loss + 0.5 * baseline_loss) - beta * mean_entropy
        gradients = tape.gradient(total, self._variables)
        if hp.max_grad_norm is not None:
            gradients, _ = tf.clip_by_global_norm(gradients, hp.max_grad_norm)
        apply_adam(self.optimizer, gradients, self._variables)
        return tf.stack([policy_loss, value_loss, baseline_loss, mean_entropy])

    def update(self) -> dict[str, float]:
        """``num_epoch`` shuffled passes over the rows taken in, in minibatches of ``batch_size``; then clears them.

        Returns:
            ML-Agents' tags: the losses averaged over minibatches (the policy loss's absolute value), the scheduled
            values, and the group cumulative reward of the episodes that ended since the last update.
        """
        self._rows_of_pending()
        self._sync_step()
        if not self._rows:
            return {}
        buffer = self._buffer()
        self._rows = []
        n = len(buffer["obs"])
        batch_size = min(self.hyperparameters.batch_size, n)
        learning_rate, epsilon, beta = self.schedules()
        self.optimizer.learning_rate.assign(learning_rate)
        sums = np.zeros(4)
        steps = 0
        for _ in range(self.hyperparameters.num_epoch):
            order = self._rng.permutation(n)
            for start in range(0, n - batch_size + 1, batch_size):
                take = order[start : start + batch_size]
                batch = {key: tf.constant(value[take]) for key, value in buffer.items()}
                sums += self._train_step(batch, tf.constant(epsilon, tf.float32), tf.constant(beta, tf.float32)).numpy()
                steps += 1
        policy, value, baseline, entropy = sums / max(steps, 1)
        out = {
            POLICY_LOSS: abs(float(policy)),
            VALUE_LOSS: float(value),
            BASELINE_LOSS: float(baseline),
            ENTROPY: float(entropy),
            LEARNING_RATE: learning_rate,
            EPSILON: epsilon,
            BETA: beta,
            "Policy/Extrinsic Reward": float(buffer["rewards"].mean()),
        }
        if self._group_returns:
            out[GROUP_CUMULATIVE_REWARD] = float(np.mean(self._group_returns))
            self._group_returns = []
        return out

    # -- policy, checkpoints ---------------------------------------------------------------------------

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        """The actor alone as TFLite, with PPO's contract (clip mode, ``ACTION_CLIP``)."""
        name = self.brain_parameters.behavior_name
        spec = self.brain_parameters.action_spec.to_proto()
        return make_policy_update(
            name, version, trainer_step, self._exporter.export(), spec, [], tanh_squash=False, clip=ACTION_CLIP
        )

    def checkpoint_objects(self) -> Mapping[str, object]:
        """The actor, the critic (with its agent count scale), the optimiser and the trainer step."""
        return {"policy": self.policy, "critic": self.critic, "optimizer": self.optimizer, "trainer_step": self.step}

    def save_extra(self, directory: Path) -> None:
        del directory  # the rows waiting for an update are not checkpointed (as PPO's update buffer)
        self._sync_step()

    def load_extra(self, directory: Path) -> None:
        del directory

    def _sync_step(self) -> None:
        """Adds the experiences counted since the last sync to ``step``: one TensorFlow op per update, not per take-in."""
        if self._steps_to_add:
            self.step.assign_add(self._steps_to_add)
            self._steps_to_add = 0

    @property
    def trainer_step(self) -> int:
        self._sync_step()
        return int(self.step.numpy())

    def set_step(self, step: int) -> None:
        self._steps_to_add = 0
        self.step.assign(step)


def _action_columns(trajectories: Sequence[tr.Trajectory]) -> dict[str, np.ndarray]:
    """The trajectories' actions, the processor's log-probs (summed per step) and masks, concatenated."""
    log_probs = [t.continuous_log_probs.sum(axis=1) + t.discrete_log_probs.sum(axis=1) for t in trajectories]
    masks = [t.action_mask if t.action_mask is not None else np.zeros((t.length, 0), bool) for t in trajectories]
    return {
        "continuous_actions": np.concatenate([t.continuous_actions for t in trajectories]).astype(np.float32),
        "discrete_actions": np.concatenate([t.discrete_actions for t in trajectories]).astype(np.int32),
        "old_log_probs": np.concatenate(log_probs).astype(np.float32),
        "action_mask": np.concatenate(masks).astype(np.float32),
    }


def _padded(xs: list[dict[str, np.ndarray]], g: int) -> dict[str, np.ndarray]:
    """The per-step inputs of many trajectories concatenated, groupmate slots padded to ``g`` (padding absent)."""

    def pad(x: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        extra = g - x["mates"].shape[1]
        if not extra:
            return x["mates"], x["actions"], x["absent"]
        return (
            np.pad(x["mates"], ((0, 0), (0, extra), (0, 0))),
            np.pad(x["actions"], ((0, 0), (0, extra), (0, 0))),
            np.pad(x["absent"], ((0, 0), (0, extra)), constant_values=1.0),
        )

    mates, actions, absent = zip(*(pad(x) for x in xs), strict=True)
    return {
        "obs": np.concatenate([x["obs"] for x in xs]),
        "mates": np.concatenate(mates),
        "actions": np.concatenate(actions),
        "absent": np.concatenate(absent),
    }


class _Actions:
    """The fields of a minibatch ``action_log_probs_and_entropy`` reads (those of ``trainer.ppo.MiniBatch``)."""

    def __init__(self, batch: Mapping[str, Any]) -> None:
        self.continuous_actions = batch["continuous_actions"]
        self.discrete_actions = batch["discrete_actions"]
        self.action_mask = batch["action_mask"]
