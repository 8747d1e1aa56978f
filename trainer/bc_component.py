"""``behavioral_cloning``: a cloning loss on demonstrations, in its own optimiser step, beside PPO or SAC.

ML-Agents' ``BCModule`` (and Hester et al. 2018's idea of pre-training on demonstrations while learning).
After each PPO update and after each SAC gradient step (where ML-Agents' trainers call it), ``update`` runs
``num_epoch`` shuffled passes over the demonstration rows in minibatches of ``batch_size`` (both default to the
trainer's: PPO's ``num_epoch``, 1 for SAC; with ``samples_per_update`` > 0 at most that many rows per pass),
each one Adam step on the policy alone:

    continuous  L = mean((a_mean(s) - a_E)^2)                 (``trainer.bc.continuous_cloning_loss``)
    discrete    L = -mean(sum_b log pi_b(a_E,b | s))          (``trainer.bc.discrete_cloning_loss``)

(both in ``trainer.bc.cloning_loss``, the loss of standalone BC too, on the rows of ``trainer.bc.demo_rows``).

``a_mean`` is the policy's action in env units: PPO's Gaussian mean (the env receives clip(u, -1, 1)), or
``tanh`` of SAC's pre-squash mean.

Strength and annealing, as ML-Agents: the cloning optimiser's learning rate is the policy's learning rate
times ``strength``, and with ``steps`` > 0 that strength falls linearly to 0 at ``steps`` agent steps (an
Adam step is invariant to a loss weight, so the learning rate is where a strength can act). Once it reaches
0 no more steps run, and ``Losses/Pretraining Loss`` reads 0, as in ML-Agents.

Shapes: ``B`` rows of a minibatch, ``C`` continuous action size, ``nB`` branches, ``M = sum(branches)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.config import BehavioralCloningSettings, BehaviorSettings, ScheduleType
from common.specs import BrainParameters
from trainer.bc import cloning_loss, demo_rows
from trainer.networks import PolicyNetwork
from trainer.optimizer import adam
from trainer.reward_signals.base import expert_rows
from trainer.schedules import MIN_LEARNING_RATE, decayed_value
from trainer.summaries import BC_STRENGTH, PRETRAINING_LOSS


def annealed_strength(strength: float, anneal_steps: int, step: int) -> float:
    """``strength`` throughout when ``anneal_steps`` is 0, else linear to 0 at ``anneal_steps`` (``trainer.schedules``)."""
    schedule = ScheduleType.LINEAR if anneal_steps > 0 else ScheduleType.CONSTANT
    return decayed_value(schedule, strength, 0.0, anneal_steps, step)


class BCComponent:
    """The ``behavioral_cloning`` component of one learner (module docstring).

    Args:
        settings: ``behavioral_cloning``.
        brain_parameters: the behavior; the demonstration must have its spec.
        policy: the learner's policy network (trained in place).
        normalize: the learner's observation normalisation, raw obs [B, size_i] -> network inputs.
        policy_learning_rate: the learner's initial learning rate; times strength, the component's.
        default_batch_size, default_num_epoch: used where the settings leave batch_size, num_epoch unset.
        squash: SAC's tanh squash: compare ``tanh(mean)`` with the demonstrated action.
        seed: seeds the shuffling.

    Raises:
        DemoError: ``demo_path`` is missing, malformed, or of another spec.
    """

    @classmethod
    def from_behavior(
        cls,
        behavior: BehaviorSettings,
        brain_parameters: BrainParameters,
        policy: PolicyNetwork,
        normalize: Callable[[Sequence[tf.Tensor]], list[tf.Tensor]],
        default_num_epoch: int,
        squash: bool = False,
        seed: int = 0,
    ) -> BCComponent | None:
        """The behavior's ``behavioral_cloning`` component, or None without one. As ML-Agents: its learning rate
        (before strength) and default batch size are the learner's ``hyperparameters``', its default
        ``num_epoch`` PPO's own and 1 for SAC, which also passes ``squash``.

        Raises:
            DemoError: its ``demo_path`` cannot be read for this behavior.
        """
        if behavior.behavioral_cloning is None:
            return None
        hyper = behavior.hyperparameters
        return cls(
            behavior.behavioral_cloning,
            brain_parameters,
            policy,
            normalize,
            hyper.learning_rate,
            hyper.batch_size,
            default_num_epoch,
            squash,
            seed,
        )

    def __init__(
        self,
        settings: BehavioralCloningSettings,
        brain_parameters: BrainParameters,
        policy: PolicyNetwork,
        normalize: Callable[[Sequence[tf.Tensor]], list[tf.Tensor]],
        policy_learning_rate: float,
        default_batch_size: int,
        default_num_epoch: int,
        squash: bool,
        seed: int = 0,
    ) -> None:
        self.settings, self.policy, self._normalize, self._squash = settings, policy, normalize, squash
        self.batch_size = settings.batch_size or default_batch_size
        self.num_epoch = settings.num_epoch or default_num_epoch
        self.base_learning_rate = policy_learning_rate
        self._branches = tuple(brain_parameters.action_spec.discrete_branches)
        rows = demo_rows(expert_rows(settings.demo_path, brain_parameters, settings.demo_action_timing), brain_parameters)
        k, width = len(rows[tr.CONTINUOUS_ACTIONS]), brain_parameters.action_spec.mask_width
        # Vectors flat [K, size_i]; images [K, H, W, C] in their spec's dtype (the policy's encoder reads them).
        observations = [rows[tr.obs_key(i)] for i in range(len(brain_parameters.observation_specs))]
        self._obs = [o if o.ndim == 4 else o.reshape(k, -1) for o in observations]
        self._continuous, self._discrete = rows[tr.CONTINUOUS_ACTIONS], rows[tr.DISCRETE_ACTIONS]
        self._mask = rows.get(tr.ACTION_MASK, np.ones((k, width), np.float32))
        # The policy's log_std (PPO's variable, SAC's head) gets no cloning gradient: only means and logits train.
        frozen = {id(v) for v in (policy.log_std, *(policy.log_std_head.trainable_variables if policy.log_std_head else ()))}
        self._variables = [v for v in policy.trainable_variables if id(v) not in frozen]
        self.optimizer = adam(policy_learning_rate * settings.strength, self._variables)
        self._rng = np.random.default_rng(seed)
        spec = brain_parameters.action_spec
        signature = [
            [tf.TensorSpec([None, *o.shape[1:]], o.dtype) for o in self._obs],
            tf.TensorSpec([None, spec.continuous_size], tf.float32),
            tf.TensorSpec([None, spec.num_branches], tf.int32),
            tf.TensorSpec([None, width], tf.float32),
        ]
        self._train_step = tf.function(self._train_step_graph, input_signature=signature, autograph=False)

    @property
    def num_demonstrations(self) -> int:
        return len(self._continuous)

    def cloning_loss(self, obs: Sequence[tf.Tensor], continuous: tf.Tensor, discrete: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """The loss of the current policy on demonstrated rows (module docstring)."""
        return cloning_loss(self.policy(*self._normalize(obs)), continuous, discrete, mask, self._branches, self._squash)

    def _train_step_graph(
        self, obs: list[tf.Tensor], continuous: tf.Tensor, discrete: tf.Tensor, mask: tf.Tensor
    ) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = self.cloning_loss(obs, continuous, discrete, mask)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, self._variables), self._variables, strict=True))
        return loss

    def update(self, step: int) -> dict[str, float]:
        """The cloning steps of one learner update at trainer step ``step`` (agent steps); returns the summaries."""
        strength = annealed_strength(self.settings.strength, self.settings.steps, step)
        learning_rate = self.base_learning_rate * strength
        if learning_rate <= MIN_LEARNING_RATE:  # below a schedule's floor the component stops, as ML-Agents' BCModule
            return {PRETRAINING_LOSS: 0.0, BC_STRENGTH: strength}
        self.optimizer.learning_rate.assign(learning_rate)
        n = self.num_demonstrations
        batch = min(self.batch_size, n)
        rows = n if self.settings.samples_per_update == 0 else min(n, self.settings.samples_per_update)
        losses = []
        for _ in range(self.num_epoch):
            order = self._rng.permutation(n)
            for start in range(0, max(rows // batch, 1) * batch, batch):  # a last partial minibatch is dropped
                idx = order[start : start + batch]
                obs = [o[idx] for o in self._obs]
                losses.append(float(self._train_step(obs, self._continuous[idx], self._discrete[idx], self._mask[idx])))
        return {PRETRAINING_LOSS: float(np.mean(losses)), BC_STRENGTH: strength}

    def checkpoint_objects(self) -> dict[str, object]:
        """The cloning optimiser (its step count and moments), under the name a learner's checkpoint gives it."""
        return {"bc_optimizer": self.optimizer}
