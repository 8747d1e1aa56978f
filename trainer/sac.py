"""Soft Actor-Critic for continuous, discrete and hybrid actions, with a tuned entropy coefficient.

Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (arXiv:1812.05905): twin Q networks
with Polyak-averaged targets, a tanh-squashed Gaussian policy, automatic entropy tuning. Christodoulou 2019,
"Soft Actor-Critic for Discrete Action Settings" (arXiv:1910.07207): one Q per option, exact expectations.

Shapes: ``B`` minibatch rows, ``C`` continuous dimensions, ``nB`` branches, ``M = sum(branches)``. A critic
Q(s, a_c) outputs ``K = M`` columns (a Q per option of every branch, given the continuous action), or ``K = 1``
without branches. Per-branch sums are products with ``G [K, nB']`` (``G[j, b] = 1``: column j is in branch b);
continuous-only is one branch (nB' = 1) of one option of probability 1, so each formula reads the same always:

    soft value  V(s) = mean_b sum_j pi_b(j|s) Q_b(s, a_c, j) + sum_b alpha_b H_b(s) - alpha_c log pi_c(a_c|s),
                a_c ~ pi_c(.|s)                          (Haarnoja eq. 3; Christodoulou eq. 10 per branch)
    critics     Q(s, a) -> y = r + gamma (1 - done) V'(s'), V' under min(target Q1, target Q2)   (eq. 5)
    policy      maximise V(s) under min(Q1, Q2)                                                  (eq. 7, 12)
    alpha       minimise E[alpha (H(s) - H_target)], through log alpha                            (eq. 18)
                (unless ``learn_entcoef`` is false: then alpha stays ``init_entcoef``, SB3's fixed ``ent_coef``)

Top to bottom: the constants, ``SACSettings`` (what the learner takes from a behavior's settings), the replay
minibatch ``SACBatch``, the maths (pure functions, tensors in and out), then ``SACLearner`` with its gradient step.

The replay buffer (an AgentBuffer) holds one row per experience under the keys ``obs_i``, ``next_obs_i``
(observation i; ``common.trajectory``) and the other field names of ``SACBatch``: ``SACLearner.add_trajectories``
fills it, ``update`` samples it. Its file, beside each checkpoint with ``save_replay_buffer``, is
``trainer.sac_replay``'s.

Reward signals (``trainer.reward_signals``): the critics learn one combined reward, ``r = strength_ext * r_ext +
sum_k r_k``, each ``r_k`` (gail, curiosity; already times its strength) computed when a minibatch is sampled,
by the signal's current networks, as ML-Agents evaluates them (a reward stored at collection time would go
stale as the discriminator learns). One critic pair, so one gamma: extrinsic's, else the first signal's
(ML-Agents gives each signal a Q head of its own; a per-signal gamma is the only thing that adds). After
the policy steps, each signal takes ``due * steps_per_update / reward_signal_steps_per_update`` steps
(at least one) on fresh replay minibatches. ``behavioral_cloning`` (``trainer.bc_component``, tanh of the
mean against the demonstrated action, num_epoch 1 by default) runs after every gradient step, as ML-Agents'
off-policy trainer calls its ``BCModule`` inside its update loop. Run once per ``update`` call instead, the
actor's steps would outnumber the cloning steps by the due steps of the call, a count set by the loop's timing.

gSDE (``use_sde``, Raffin et al. 2021; ``common.config.StateDependentExploration``): the processor acts with
``tanh(mean + latent(s) @ W)``, ``W`` an exploration matrix it holds per agent for ``sde_sample_freq`` steps (SB3's SAC
draws one per ``train_freq`` rollout), and the policy's std is the per-state ``sqrt(latent^2 @ sigma^2)`` rather than a
head. The gradient step samples each row's ``u = mean + std(s) * eps`` independently: per row the same Gaussian as
SB3's ``latent @ W`` with one ``W`` for the whole minibatch, so the losses and the entropy tuning read as above.
As SB3's SAC actor, the std's gradient reaches the features (``learn_features``) and the mean is clipped at
``SDE_CLIP_MEAN``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import tensorflow as tf

from common import config
from common import trajectory as tr
from common.buffer import AgentBuffer
from common.groups import fold_group_rewards
from common.policy_contract import LOG_STD, LOGITS, MEAN, TANH_LOG_EPSILON
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from protos import pb
from trainer import summaries
from trainer.bc_component import BCComponent
from trainer.encoders import ObservationEncoder, image_observation_dtypes, observation_encoder
from trainer.export import TFLiteExporter, make_policy_update, normalizer_state
from trainer.networks import (
    PolicyNetwork,
    ValueNetwork,
    activation_function,
    gaussian_log_prob,
    masked_log_softmax,
    normalized_observations,
    observation_normalizers,
)
from trainer.optimizer import adam
from trainer.reward_signals import (
    ExtrinsicSignal,
    RewardSignal,
    SignalBatch,
    add_signal_rewards,
    make_reward_signals,
    signal_checkpoint_objects,
    update_signals,
)
from trainer.sac_replay import load_replay_buffer, save_replay_buffer
from trainer.schedules import MIN_LEARNING_RATE, decayed_value
from trainer.seeding import seeded_initializers
from trainer.warm_up import WarmUp

Tensor: TypeAlias = tf.Tensor
Rows: TypeAlias = tf.Tensor | np.ndarray
"""A ``SACBatch`` field: numpy as sampled from the replay buffer, a tensor inside the gradient step."""

# Discrete target entropy: this times log(allowed options), per branch and row. ML-Agents' value
# (discrete_target_entropy_scale); Christodoulou's 0.98 holds the policy near uniform for good.
DISCRETE_TARGET_ENTROPY_SCALE = 0.2
# POLICY_ENCODER: from images, the policy has no encoder of its own: it reads Q1's, and its loss does not train it
# (the actor's gradient stops at the features, as in SAC-AE and DrQ; Yarats et al. 2019, 2021). With its own CNN
# trained only through dQ/da (ML-Agents' layout), the 1-D pixel task sometimes missed its threshold: the critics
# fitted while the policy's features never told the sides apart.
BUFFER_TRUNCATE_FRACTION = 0.8  # an over-full replay buffer keeps its newest 80% (ML-Agents)
SAMPLE_CHUNK_STEPS = 64  # gradient steps whose minibatches are sampled at once (bounds memory)
NEXT_ACTION_MASK = "next_action_mask"  # the replay column of the action mask at next_obs
SDE_CLIP_MEAN = 2.0  # with gSDE the mean is clipped here, as SB3's SAC actor does (trainer.networks.PolicyNetwork)


@dataclass(frozen=True)
class SACSettings:
    """What the SAC learner takes from a behavior's settings."""

    hyperparameters: config.SACHyperparameters
    network: config.NetworkSettings
    gamma: float  # discount per agent step, from reward_signals.extrinsic (else the first signal's)
    reward_strength: float  # multiplier of the extrinsic reward (0 without an extrinsic signal)
    max_steps: int  # agent steps over which a linear learning-rate schedule decays

    @classmethod
    def from_behavior(cls, settings: config.BehaviorSettings) -> SACSettings:
        """Raises ConfigKeyError (no SAC hyperparameters, no reward signal, a buffer too small)."""
        hyper = settings.hyperparameters
        if not isinstance(hyper, config.SACHyperparameters):
            raise config.ConfigKeyError("hyperparameters", f"{type(hyper).__name__} given to the SAC learner")
        if not settings.reward_signals:
            raise config.ConfigKeyError("reward_signals", "the SAC learner needs at least one reward signal")
        extrinsic = settings.reward_signals.get(config.RewardSignalType.EXTRINSIC)
        first = extrinsic or next(iter(settings.reward_signals.values()))
        warm_up = max(hyper.batch_size, hyper.buffer_init_steps)
        if hyper.buffer_size < warm_up:
            detail = f"{hyper.buffer_size} < max(batch_size, buffer_init_steps) = {warm_up}: SAC would never update"
            raise config.ConfigKeyError("hyperparameters.buffer_size", detail)
        strength = extrinsic.strength if extrinsic is not None else 0.0
        return cls(hyper, settings.network_settings, first.gamma, strength, settings.max_steps)


class SACBatch(NamedTuple):
    """One minibatch of ``B`` replay rows: numpy arrays as ``from_columns`` takes them from a sample of the replay
    buffer, tensors inside the gradient step (``tf.TensorSpec`` in ``signature``).

    ``obs``, ``next_obs``: one [B, *shape_i] per observation (vectors float32, images uint8 or float32), raw
    (normalised inside the step), before and after the action; ``continuous_actions`` float32 [B, C], squashed
    (the env's action, in [-1, 1]);
    ``discrete_actions`` int32 [B, nB]; ``action_mask`` float32 [B, M], 1 = allowed; ``next_action_mask``
    float32 [B, M], the mask at next_obs (all ones where unknown); ``rewards`` float32 [B], already times the
    extrinsic strength (the other signals' rewards are added when sampled); ``done`` float32 [B], 1 on a true
    terminal only.
    """

    obs: tuple[Rows, ...]
    next_obs: tuple[Rows, ...]
    continuous_actions: Rows
    discrete_actions: Rows
    action_mask: Rows
    next_action_mask: Rows
    rewards: Rows
    done: Rows

    @classmethod
    def signature(cls, obs_specs: Sequence[ObservationSpec], action_spec: ActionSpec) -> SACBatch:
        """``tf.TensorSpec`` of every field, for minibatches of any size: a gradient step's input signature."""
        dtypes = image_observation_dtypes(obs_specs)
        obs = tuple(tf.TensorSpec([None, *o.shape], d) for o, d in zip(obs_specs, dtypes, strict=True))
        mask = tf.TensorSpec([None, action_spec.mask_width], tf.float32)
        per_row = tf.TensorSpec([None], tf.float32)
        continuous = tf.TensorSpec([None, action_spec.continuous_size], tf.float32)
        discrete = tf.TensorSpec([None, len(action_spec.discrete_branches)], tf.int32)
        return cls(obs, obs, continuous, discrete, mask, mask, per_row, per_row)

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray], rows: slice, n_obs: int) -> SACBatch:
        """The ``rows`` of sampled replay columns (``AgentBuffer`` field data by key)."""
        obs = tuple(columns[tr.obs_key(i)][rows] for i in range(n_obs))
        next_obs = tuple(columns[tr.next_obs_key(i)][rows] for i in range(n_obs))
        keys = (tr.CONTINUOUS_ACTIONS, tr.DISCRETE_ACTIONS, tr.ACTION_MASK, NEXT_ACTION_MASK, tr.REWARDS, tr.DONE)
        return cls(obs, next_obs, *(columns[key][rows] for key in keys))


# -- the maths: pure functions, tensors in and out ---------------------------------------------
# Traced once, inside the learner's gradient step (a tf.function with a fixed input signature).
# A tf.function of their own would nest calls in that step, whose inputs XLA then takes for
# compile-time constants: it would recompile on every step.


def squashed_gaussian_sample(mean: Tensor, log_std: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """a = tanh(u), u = mean + exp(log_std) * noise; returns (a, log pi(a) per dimension), each [B, C]."""
    u = mean + tf.exp(log_std) * noise
    # tanh in float64 rounded once to float32, like the processor's numpy tanh (TF's float32 tanh is
    # off by up to 6 ulp near +-1, which moves the correction below by up to 0.4).
    a = tf.cast(tf.tanh(tf.cast(u, tf.float64)), tf.float32)
    a64 = tf.cast(a, tf.float64)
    # Change of variables (Haarnoja 2018, app. C): log pi(a) = log N(u) - log(da/du), da/du = 1 - tanh(u)^2,
    # in processor.inference's arithmetic (float64 from the float32 a, + 1e-6), so a stored log-prob and
    # this one agree: to rounding for |u| < 5, within 0.12 beyond (there 1 ulp of a is 1e-7, vs 1e-6).
    # The epsilon keeps the log finite once tanh saturates at +-1.
    correction = tf.cast(tf.math.log(1.0 - a64 * a64 + TANH_LOG_EPSILON), tf.float32)
    return a, gaussian_log_prob(u, mean, log_std) - correction


def soft_state_value(
    q: Tensor, probs: Tensor, log_probs: Tensor, log_pi_c: Tensor, g: Tensor, alpha_c: Tensor, alpha_d: Tensor
) -> Tensor:
    """V(s) [B] (module docstring) from the critic's q [B, K], the policy's probs and log-probs per
    option [B, K], the sampled continuous action's log-probs [B, C], G [K, nB'], alpha_c [], alpha_d [nB']."""
    expected_q = tf.reduce_mean(tf.matmul(probs * q, g), axis=1)  # mean over branches
    entropy = -tf.matmul(probs * log_probs, g)  # H_b [B, nB']; a masked option adds 0 * -1e9 = 0
    return expected_q + tf.reduce_sum(alpha_d * entropy, axis=1) - alpha_c * tf.reduce_sum(log_pi_c, axis=1)


def soft_q_target(rewards: Tensor, done: Tensor, next_value: Tensor, gamma: Tensor) -> Tensor:
    """y = r + gamma (1 - done) V'(s') [B], a constant for the critics."""
    # done is 1 only on a true terminal. An interrupted last step (time limit, flushed segment) is
    # stored with done 0: the episode would have gone on, so its return still includes V'(next_obs).
    return tf.stop_gradient(rewards + gamma * (1.0 - done) * next_value)


def q_loss(q_chosen: Tensor, target: Tensor) -> Tensor:
    """0.5 (Q(s, a) - y)^2 averaged over rows and branches; q_chosen [B, nB'], target [B]."""
    return 0.5 * tf.reduce_mean(tf.square(q_chosen - target[:, tf.newaxis]))


def policy_loss(soft_value: Tensor) -> Tensor:
    """J_pi = E[alpha log pi - Q] = -E[V(s)]: the soft value of the policy's own actions, negated."""
    return -tf.reduce_mean(soft_value)


def entropy_coefficient_loss(log_alpha: Tensor, entropy: Tensor, target_entropy: Tensor) -> Tensor:
    """E[sum_k log alpha_k (H_k(s) - H_target_k)] over the action kinds k [B, k]: alpha_k rises while H_k
    is below target. Continuous: H = -log pi(a|s) of the sampled a; discrete: the exact H_b (Christodoulou eq. 11)."""
    return tf.reduce_mean(tf.reduce_sum(log_alpha * tf.stop_gradient(entropy - target_entropy), axis=1))


def polyak_average(online: Tensor, target: Tensor, tau: Tensor) -> Tensor:
    """The target's new value: tau * online + (1 - tau) * target."""
    return tau * online + (1.0 - tau) * target


class SACLearner:
    """One behavior's SAC state: policy, twin critics and targets, entropy coefficients, replay buffer.

    Update ratio: ``update_credit`` counts the experiences taken in once the replay buffer holds
    ``max(batch_size, buffer_init_steps)`` rows, less ``steps_per_update`` per gradient step run;
    ``update`` runs ``floor(credit / steps_per_update)`` steps. So gradient steps = experiences after
    warm-up / steps_per_update, however the loop batches its calls (ML-Agents' ``while (step -
    buffer_init_steps) / update_steps > steps_per_update`` is the same ratio, less one step).

    Speed: a gradient step is one call of a tf.function with a fixed input signature, compiled with
    XLA unless ``jit_compile`` is False (cheaper per step, after a compile on the first update). With
    ``warm_up`` (the default) the step is traced in a thread of its own from the first ``add_trajectories``
    (``trainer.warm_up``), while the replay buffer fills; ``update``, exports and checkpoints wait for it.
    """

    def __init__(
        self,
        brain_parameters: BrainParameters,
        settings: config.BehaviorSettings,
        seed: int = 0,
        jit_compile: bool = True,
        warm_up: bool = True,
    ):
        """Raises ConfigKeyError (see ``SACSettings.from_behavior``), NotSupportedKeyError (a reward signal option,
        ``trainer.reward_signals``) or DemoError (an unreadable ``demo_path``)."""
        self.brain_parameters = brain_parameters
        self.settings = SACSettings.from_behavior(settings)
        hyper = self.settings.hyperparameters
        net = self.settings.network
        spec = brain_parameters.action_spec
        self._c = spec.continuous_size
        self._branches = tuple(spec.discrete_branches)
        self._m = spec.mask_width
        obs_specs = brain_parameters.observation_specs
        self._obs_sizes = [int(np.prod(o.shape)) for o in obs_specs]
        self._warm_up_rows = max(hyper.batch_size, hyper.buffer_init_steps)
        behavior = brain_parameters.behavior_name
        activation = activation_function(hyper.activation)

        def encoder(name: str) -> ObservationEncoder | None:  # each critic and target encodes images itself
            return observation_encoder(obs_specs, net.vis_encode_type, net.hidden_units, behavior, name)

        def critic(name: str, own: ObservationEncoder | None) -> ValueNetwork:
            q_input_size = (own.output_size if own is not None else sum(self._obs_sizes)) + self._c
            return ValueNetwork(
                net.hidden_units, net.num_layers, q_input_size, self._m or 1, name=name, activation=activation, encoder=own
            )

        with seeded_initializers(seed):
            # The policy reads images through Q1's encoder, which only the critic loss trains (POLICY_ENCODER).
            # The policy is made first, as before the encoder was shared: from vectors (no encoder) every
            # network's initial weights are the ones the learning tests were measured with.
            q1_encoder = encoder("q1_encoder")
            self.policy = PolicyNetwork(
                self._obs_sizes,
                spec,
                net.hidden_units,
                net.num_layers,
                state_dependent_std=not hyper.use_sde,
                initial_log_std=hyper.log_std_init,
                encoder=q1_encoder,
                sde=hyper.use_sde,
                use_expln=hyper.use_expln,
                sde_learn_features=True,
                clip_mean=SDE_CLIP_MEAN if hyper.use_sde else None,
                activation=activation,
            )
            self.q1, self.q2 = critic("q1", q1_encoder), critic("q2", encoder("q2_encoder"))
            self.target_q1 = critic("target_q1", encoder("target_q1_encoder"))
            self.target_q2 = critic("target_q2", encoder("target_q2_encoder"))
            # Extrinsic rewards are stored (times strength) with the replay rows; the others are computed at sampling.
            signals = make_reward_signals(brain_parameters, settings.reward_signals, seed)
            self.signals: list[RewardSignal] = [s for s in signals if not isinstance(s, ExtrinsicSignal)]
            self.bc = BCComponent.from_behavior(
                settings, brain_parameters, self.policy, self._features, 1, squash=True, seed=seed
            )
        self.normalizers = observation_normalizers(obs_specs)  # vectors only: None for an image
        self._q_vars = [*self.q1.trainable_variables, *self.q2.trainable_variables]
        self._target_vars = [*self.target_q1.trainable_variables, *self.target_q2.trainable_variables]
        for online, target in zip(self._q_vars, self._target_vars, strict=True):
            target.assign(online)
        # One entropy coefficient per action kind: [continuous (when C > 0), branch 0, branch 1, ...].
        self._kinds = int(self._c > 0) + len(self._branches)
        self.log_alpha = tf.Variable(tf.fill([self._kinds], math.log(hyper.init_entcoef)), name="log_alpha")
        shared = {id(v) for v in self.q1.encoder.trainable_variables} if self.q1.encoder is not None else set()
        self._policy_vars = [v for v in self.policy.trainable_variables if id(v) not in shared]
        self.policy_optimizer = adam(hyper.learning_rate, self._policy_vars)
        self.q_optimizer = adam(hyper.learning_rate, self._q_vars)
        self.entropy_optimizer = adam(hyper.learning_rate, [self.log_alpha])
        self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")
        self.update_credit = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="update_credit")
        self._tf_rng = tf.random.Generator.from_seed(seed)
        self._np_rng = np.random.default_rng(seed)
        self.replay = AgentBuffer()
        dtypes = image_observation_dtypes(obs_specs)
        self._exporter = TFLiteExporter(self.policy, [o.shape for o in obs_specs], observation_dtypes=dtypes)
        # G [K, nB'] (module docstring): G[j, b] = 1 where column j is an option of branch b.
        g = np.repeat(np.eye(len(self._branches)), self._branches, axis=0) if self._m else np.ones((1, 1))
        self._g = tf.constant(g, tf.float32)
        signature = [SACBatch.signature(obs_specs, spec)]
        self._gradient_step = tf.function(
            self._gradient_step_graph, input_signature=signature, autograph=False, jit_compile=jit_compile
        )
        self._warm_up = WarmUp(self._gradient_step.get_concrete_function, name="sac-warm-up", pending=warm_up)

    def _replay_rows(self, trajectory: tr.Trajectory) -> dict[str, np.ndarray]:
        rows = trajectory.to_rows()
        out = {key: rows[key] for i in range(len(self._obs_sizes)) for key in (tr.obs_key(i), tr.next_obs_key(i))}
        out[tr.CONTINUOUS_ACTIONS] = rows[tr.CONTINUOUS_ACTIONS]
        out[tr.DISCRETE_ACTIONS] = rows[tr.DISCRETE_ACTIONS]
        mask = rows.get(tr.ACTION_MASK, np.ones((trajectory.length, self._m), np.float32))
        out[tr.ACTION_MASK] = mask
        # Row j's next mask is row j+1's; after the last row it is unknown: everything allowed.
        out[NEXT_ACTION_MASK] = np.concatenate([mask[1:], np.ones((1, self._m), np.float32)])
        out[tr.REWARDS] = rows[tr.REWARDS].astype(np.float32) * np.float32(self.settings.reward_strength)
        # Only a true terminal is done. An interrupted last step (max_reached, or a segment flushed at
        # session end) is stored as not done: the episode did not end there, so the critic target
        # bootstraps from next_obs (Pardo et al. 2018, "Time Limits in Reinforcement Learning").
        out[tr.DONE] = (rows[tr.DONE] & ~rows[tr.INTERRUPTED]).astype(np.float32)
        return out

    def add_trajectories(self, trajectories: Sequence[tr.Trajectory]) -> int:
        """Appends the trajectories' rows to the replay buffer; returns the experiences taken in."""
        fold_group_rewards(trajectories, "sac")  # ML-Agents' SAC: the group reward joins the agent's own
        rows = [self._replay_rows(t) for t in trajectories if t.length]
        if not rows:
            return 0
        self._warm_up.start(in_thread=True)
        if self.settings.network.normalize:
            for i, normalizer in enumerate(self.normalizers):
                if normalizer is not None:
                    normalizer.update(np.concatenate([r[tr.obs_key(i)] for r in rows]))
        before = self.replay.num_experiences
        self.replay.extend_rows_many(rows)
        after = self.replay.num_experiences
        self.update_credit.assign_add(float(max(0, after - max(before, self._warm_up_rows))))  # class docstring
        self.steps.assign_add(after - before)
        buffer_size = self.settings.hyperparameters.buffer_size
        if after > buffer_size:
            self.replay.truncate(int(buffer_size * BUFFER_TRUNCATE_FRACTION))
        return after - before

    def _due_gradient_steps(self) -> int:
        if self.replay.num_experiences < self._warm_up_rows:
            return 0
        return math.floor(float(self.update_credit.numpy()) / self.settings.hyperparameters.steps_per_update + 1e-9)

    def ready_to_update(self) -> bool:
        """Warm-up rows are in and at least one gradient step is due (class docstring)."""
        return self._due_gradient_steps() > 0

    def update(self) -> dict[str, float]:
        """Runs the due gradient steps and returns their mean metrics ({} when none is due)."""
        hyper = self.settings.hyperparameters
        due = self._due_gradient_steps()
        if due == 0:
            return {}
        self._warm_up.wait()
        n_obs = len(self._obs_sizes)
        b = hyper.batch_size
        self.update_credit.assign(max(0.0, float(self.update_credit.numpy()) - due * hyper.steps_per_update))
        learning_rate = self.learning_rate()
        for optimizer in (self.policy_optimizer, self.q_optimizer, self.entropy_optimizer):
            optimizer.learning_rate.assign(learning_rate)
        stats: list[Mapping[str, Any]] = []
        for first in range(0, due, SAMPLE_CHUNK_STEPS):
            steps = min(SAMPLE_CHUNK_STEPS, due - first)
            sampled = self.replay.sample_mini_batch(steps * b, rng=self._np_rng)  # with replacement, as ML-Agents
            columns = {key: field.data for key, field in sampled.items()}
            if self.settings.reward_strength:  # the extrinsic part (times strength), before the signals add theirs
                stats.append({ExtrinsicSignal.reward_tag: float(np.mean(columns[tr.REWARDS]))})
            stats.append(add_signal_rewards(self.signals, columns, n_obs))  # module docstring
            for i in range(steps):
                stats.append(self._gradient_step(SACBatch.from_columns(columns, slice(i * b, (i + 1) * b), n_obs)))
                if self.bc is not None:  # after every gradient step, not every call (module docstring)
                    stats.append(self.bc.update(int(self.steps.numpy())))
        stats.append(self._update_signals(due))
        keys = {key for s in stats for key in s}
        means = {key: float(np.mean([np.asarray(s[key]) for s in stats if key in s])) for key in keys}
        return {**means, summaries.LEARNING_RATE: learning_rate}

    def learning_rate(self) -> float:
        """The learning rate of all three optimisers at the current step: ``learning_rate_schedule`` over
        ``max_steps`` (``trainer.schedules``)."""
        hyper = self.settings.hyperparameters
        max_steps = self.settings.max_steps
        step = int(self.steps.numpy())
        return decayed_value(hyper.learning_rate_schedule, hyper.learning_rate, MIN_LEARNING_RATE, max_steps, step)

    def _update_signals(self, due: int) -> dict[str, float]:
        """The signals' own steps after ``due`` gradient steps, each an ``update`` of every signal on a fresh replay
        minibatch sampled with replacement, as ML-Agents (module docstring); returns each summary's mean."""
        if not self.signals:
            return {}
        hyper = self.settings.hyperparameters
        n_obs = len(self._obs_sizes)
        steps = max(1, round(due * hyper.steps_per_update / hyper.effective_reward_signal_steps_per_update))
        sampled = (self.replay.sample_mini_batch(hyper.batch_size, rng=self._np_rng) for _ in range(steps))
        return update_signals(self.signals, (SignalBatch.from_buffer(rows, n_obs) for rows in sampled))

    def _features(self, obs: Sequence[Tensor]) -> list[Tensor]:
        return normalized_observations(self.normalizers, obs) if self.settings.network.normalize else list(obs)

    def _policy_sample(self, features: list[Tensor], mask: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(a_c [B, C], log pi_c [B, C], probs [B, K], log-probs [B, K]) of the current policy."""
        out = self.policy(*features)
        rows = tf.shape(features[0])[0]
        actions = tf.zeros([rows, 0])
        log_probs = tf.zeros([rows, 0])
        if self._c:
            noise = self._tf_rng.normal(tf.shape(out[MEAN]))
            actions, log_probs = squashed_gaussian_sample(out[MEAN], out[LOG_STD], noise)
        if not self._m:  # one option of probability 1 (module docstring)
            return actions, log_probs, tf.ones([rows, 1]), tf.zeros([rows, 1])
        option_log_probs = tf.concat(masked_log_softmax(out[LOGITS], mask, self._branches), axis=1)
        return actions, log_probs, tf.exp(option_log_probs), option_log_probs

    def _gradient_step_graph(self, batch: SACBatch) -> dict[str, Tensor]:
        """One gradient step of critics, policy and entropy coefficients, then the target update."""
        g = self._g
        gamma = tf.constant(self.settings.gamma)
        tau = tf.constant(self.settings.hyperparameters.tau)
        alpha = tf.exp(self.log_alpha)
        alpha_c = alpha[0] if self._c else tf.constant(0.0)
        alpha_d = alpha[int(self._c > 0) :] if self._m else tf.zeros([1])
        features = self._features(batch.obs)
        next_features = self._features(batch.next_obs)

        next_a, next_log_pi_c, next_probs, next_log_probs = self._policy_sample(next_features, batch.next_action_mask)
        next_q = tf.minimum(self.target_q1.evaluate(next_features, next_a), self.target_q2.evaluate(next_features, next_a))
        next_value = soft_state_value(next_q, next_probs, next_log_probs, next_log_pi_c, g, alpha_c, alpha_d)
        target = soft_q_target(batch.rewards, batch.done, next_value, gamma)
        chosen = tf.ones_like(batch.rewards)[:, tf.newaxis]  # one-hot of the stored options [B, K]; ones without branches
        if self._m:
            chosen = tf.concat([tf.one_hot(batch.discrete_actions[:, b], n) for b, n in enumerate(self._branches)], axis=1)
        with tf.GradientTape() as tape:
            q1 = self.q1.evaluate(features, batch.continuous_actions)
            q2 = self.q2.evaluate(features, batch.continuous_actions)
            q1_loss = q_loss(tf.matmul(q1 * chosen, g), target)
            q2_loss = q_loss(tf.matmul(q2 * chosen, g), target)
            critic_loss = q1_loss + q2_loss
        self.q_optimizer.apply_gradients(zip(tape.gradient(critic_loss, self._q_vars), self._q_vars, strict=True))

        policy_vars = self._policy_vars  # without Q1's encoder (POLICY_ENCODER)
        with tf.GradientTape() as tape:
            a, log_pi_c, probs, log_probs = self._policy_sample(features, batch.action_mask)
            q = tf.minimum(self.q1.evaluate(features, a), self.q2.evaluate(features, a))
            pi_loss = policy_loss(soft_state_value(q, probs, log_probs, log_pi_c, g, alpha_c, alpha_d))
        self.policy_optimizer.apply_gradients(zip(tape.gradient(pi_loss, policy_vars), policy_vars, strict=True))

        entropies: list[Tensor] = []  # per action kind, [B, kinds]
        targets: list[Tensor] = []
        if self._c:  # H = -log pi(a|s) of the sampled a; target -C (Haarnoja 2018, sec. 5)
            entropies.append(-tf.reduce_sum(log_pi_c, axis=1, keepdims=True))
            targets.append(-float(self._c) * tf.ones_like(entropies[-1]))
        if self._m:  # the exact H_b; target a fraction of the most entropy the row's mask allows in branch b
            entropies.append(-tf.matmul(probs * log_probs, g))
            targets.append(DISCRETE_TARGET_ENTROPY_SCALE * tf.math.log(tf.maximum(tf.matmul(batch.action_mask, g), 1.0)))
        entropy = tf.concat(entropies, axis=1)
        target_entropy = tf.concat(targets, axis=1)
        with tf.GradientTape() as tape:
            alpha_loss = entropy_coefficient_loss(self.log_alpha, entropy, target_entropy)
        if self.settings.hyperparameters.learn_entcoef:  # else held at init_entcoef (SB3's fixed ent_coef)
            self.entropy_optimizer.apply_gradients([(tape.gradient(alpha_loss, self.log_alpha), self.log_alpha)])

        for online, target_var in zip(self._q_vars, self._target_vars, strict=True):
            target_var.assign(polyak_average(online, target_var, tau))
        stats = {summaries.Q1_LOSS: q1_loss, summaries.Q2_LOSS: q2_loss, summaries.POLICY_LOSS: pi_loss}
        stats[summaries.ENTROPY_COEFFICIENT_LOSS] = alpha_loss
        stats[summaries.ENTROPY] = tf.reduce_mean(tf.reduce_sum(entropy, axis=1))
        stats[summaries.ENTROPY_COEFF] = tf.reduce_mean(alpha)
        if self._c:
            stats[summaries.CONTINUOUS_ENTROPY_COEFF] = alpha_c
        if self._m:
            stats[summaries.DISCRETE_ENTROPY_COEFF] = tf.reduce_mean(alpha_d)
        return stats

    # -- policy, checkpoints -----------------------------------------------------------------

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        """The current policy as a PolicyUpdate: TFLite artifact, tanh squash, normaliser states."""
        self._warm_up.wait()  # the exporter calls the policy's layers, which the warm-up may be tracing
        normalize = self.settings.network.normalize
        normalizers = [normalizer_state(*n.state()) for n in self.normalizers if n is not None] if normalize else []
        model = self._exporter.export()
        spec = self.brain_parameters.action_spec.to_proto()
        name = self.brain_parameters.behavior_name
        return make_policy_update(name, version, trainer_step, model, spec, normalizers, tanh_squash=True)

    def checkpoint_objects(self) -> dict[str, object]:
        """Networks, targets, optimisers, entropy coefficients, normalisers, counters, the TF RNG, and the reward
        signals' and behavioral_cloning's networks and optimisers."""
        objects: dict[str, object] = {
            "policy": self.policy,
            "q1": self.q1,
            "q2": self.q2,
            "target_q1": self.target_q1,
            "target_q2": self.target_q2,
            "policy_optimizer": self.policy_optimizer,
            "q_optimizer": self.q_optimizer,
            "entropy_optimizer": self.entropy_optimizer,
            "log_alpha": self.log_alpha,
            "steps": self.steps,
            "update_credit": self.update_credit,
            "rng": self._tf_rng,
        }
        objects.update({f"normalizer_{i}": n for i, n in enumerate(self.normalizers) if n is not None})
        objects.update(signal_checkpoint_objects(self.signals))
        if self.bc is not None:
            objects.update(self.bc.checkpoint_objects())
        return objects

    def save_extra(self, directory: Path) -> None:
        """With save_replay_buffer, writes the replay buffer to ``directory / replay_buffer.hdf5`` (``trainer.sac_replay``).
        A warm-up still running is waited for first."""
        self._warm_up.wait()
        if self.settings.hyperparameters.save_replay_buffer:
            save_replay_buffer(self.replay, directory)

    def load_extra(self, directory: Path) -> None:
        """With save_replay_buffer, reloads the replay buffer; a missing file is logged, not an error.

        Raises:
            BufferException: the file exists but is not an AgentBuffer file.
        """
        if self.settings.hyperparameters.save_replay_buffer:
            load_replay_buffer(self.replay, directory)
