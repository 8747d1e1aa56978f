"""``reward_signals.gail``: Generative Adversarial Imitation Learning (Ho & Ermon 2016, arXiv:1606.03476).

A discriminator ``D(x)`` in (0, 1) estimates the probability that an experience ``x`` is the expert's. ``x``
is the observation, and with ``use_actions`` also the env action (continuous values, one-hot branches) and
the done flag, as ML-Agents' ``DiscriminatorNetwork`` sees it. Expert rows come from ``demo_path``.

    discriminator loss  L_D = -mean(log(D(x_E) + eps)) - mean(log(1 - D(x_pi) + eps))        (Ho & Ermon eq. 17)
                            + 10 * mean((||grad_x D(x_hat)|| - 1)^2),  x_hat = u x_pi + (1 - u) x_E,  u ~ U(0, 1)
    reward              r(x_pi) = -log(1 - D(x_pi) (1 - eps)) * strength                     (ML-Agents' evaluate)

The second line is the gradient penalty of WGAN-GP (Gulrajani et al. 2017, arXiv:1704.00028), as ML-Agents
adds it (weight 10, one ``u`` per row), which keeps D smooth so its reward does not saturate. Each ``update``
is one Adam step on one agent minibatch and an expert minibatch of the same size, drawn with replacement.

With ``network_settings.normalize``, D normalises the observation part of ``x`` with a running mean and
variance (``networks.Normalizer``, clipped at 5 like the policy's) before its body; the action features and the
done flag enter raw, as in ML-Agents' ``NetworkBody``. As ML-Agents' ``GAILRewardProvider.update`` does, the
statistics fold in each update's expert minibatch, before that step. The gradient penalty's ``x_hat`` is
interpolated on the raw inputs, so ``grad_x`` is taken through the normaliser, as ML-Agents' is.

Image observations go through visual encoders of the discriminator's own (the signal's
``network_settings.vis_encode_type``, ``trainer.encoders``), as ML-Agents' ``NetworkBody`` encodes them; the
penalty's ``x_hat`` then interpolates the images scaled into [0, 1] (the encoders' input), and ``normalize``
normalises the vector observations only, each with its own running statistics, before the encoding.

Not supported: ``use_vail`` (the variational bottleneck of Peng et al. 2018) raises NotSupportedKeyError.

Shapes: ``N`` experiences, ``X`` discriminator inputs (sum of observation sizes, each image counting as its encoder's
``hidden_units`` features, + C + M + 1 with use_actions).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from common.config import GAILSettings, NotSupportedKeyError
from common.specs import BrainParameters
from trainer.encoders import ObservationEncoder, observation_encoder, scaled_image
from trainer.networks import Normalizer, mlp, normalized_observations, observation_normalizers
from trainer.optimizer import adam
from trainer.reward_signals.base import SignalBatch, action_features, batch_signature, expert_rows
from trainer.summaries import GAIL_EXPERT_ESTIMATE, GAIL_LOSS, GAIL_POLICY_ESTIMATE, GAIL_REWARD, GAIL_VALUE_ESTIMATE

EPSILON = 1e-7
"""Inside the logs, as ML-Agents' ``DiscriminatorNetwork.EPSILON``."""
GRADIENT_PENALTY_WEIGHT = 10.0
"""ML-Agents' ``gradient_penalty_weight``."""


def discriminator_loss(expert_estimate: tf.Tensor, policy_estimate: tf.Tensor) -> tf.Tensor:
    """Binary cross-entropy with the expert labelled 1: ``-mean(log(D_E + eps) + log(1 - D_pi + eps))``; inputs [N]."""
    return -tf.reduce_mean(tf.math.log(expert_estimate + EPSILON) + tf.math.log(1.0 - policy_estimate + EPSILON))


def gail_rewards(policy_estimate: tf.Tensor) -> tf.Tensor:
    """``-log(1 - D (1 - eps))`` [N]: 0 where D is sure the experience is the agent's, large where it looks expert."""
    return -tf.math.log(1.0 - policy_estimate * (1.0 - EPSILON))


def gradient_penalty(gradients: tf.Tensor) -> tf.Tensor:
    """``mean((||g|| - 1)^2)`` of ``grad_x D`` at the interpolated inputs [N, X]; the norm kept finite at 0."""
    norm = tf.sqrt(tf.reduce_sum(tf.square(gradients), axis=1) + EPSILON)
    return tf.reduce_mean(tf.square(norm - 1.0))


class Discriminator(tf.Module):
    """``x`` [N, X] -> ``D(x)`` [N]: an MLP body (the signal's network_settings, swish) and a sigmoid unit.

    Args:
        input_size: ``X``.
        hidden_units, num_layers: the body's network_settings.
        normalized_size: with ``normalize``, the first ``normalized_size`` columns (the observations) pass
            through ``normalizer`` first; 0 keeps ``normalizer`` None and ``x`` raw.
    """

    def __init__(
        self,
        input_size: int,
        hidden_units: int,
        num_layers: int,
        normalized_size: int = 0,
        encoder: ObservationEncoder | None = None,
        vector_normalizers: list[Normalizer | None] | None = None,
    ) -> None:
        """``encoder``, ``vector_normalizers``: with image observations, the discriminator's visual encoders and
        (``normalize``) one normaliser per vector observation (None for an image); ``encode`` applies them."""
        super().__init__(name="gail_discriminator")
        self.encoder = encoder
        self.vector_normalizers = vector_normalizers
        self.body = mlp(hidden_units, num_layers, "gail_body")
        self.head = keras.layers.Dense(1, name="gail_estimate")
        self.body.build((None, input_size))
        self.head.build((None, hidden_units))
        self.normalized_size = normalized_size
        # A tf.Module attribute, so the checkpoint saves it with the discriminator's weights.
        self.normalizer = Normalizer(normalized_size, "gail_normalizer") if normalized_size else None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        if self.normalizer is not None:
            obs, rest = x[:, : self.normalized_size], x[:, self.normalized_size :]
            x = tf.concat([self.normalizer.normalize(obs), rest], axis=1)
        return tf.sigmoid(self.head(self.body(x))[:, 0])

    def encode(self, parts: list[tf.Tensor], n_obs: int) -> tf.Tensor:
        """``x`` [N, X] from the raw input parts: ``n_obs`` observations (images float32 in [0, 1]) then the action
        features and done flag; with vectors only, their concatenation (the normaliser then acts in ``__call__``)."""
        if self.encoder is None:
            return tf.concat(parts, axis=1)
        obs = parts[:n_obs]
        if self.vector_normalizers is not None:
            obs = normalized_observations(self.vector_normalizers, obs)
        return tf.concat([self.encoder(obs), *parts[n_obs:]], axis=1)

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every weight (Keras 3 weights are invisible to ``tf.Module``'s walk; see networks.PolicyNetwork)."""
        visual = self.encoder.trainable_variables if self.encoder is not None else ()
        return (*visual, *self.body.trainable_variables, *self.head.trainable_variables)


class GAILSignal:
    """The ``gail`` reward signal (module docstring); a ``reward_signals.base.RewardSignal``.

    Args:
        settings: ``reward_signals.gail``.
        brain_parameters: the behavior; the demonstration must have its spec.
        seed: seeds the expert sampling and the penalty's interpolation.

    Raises:
        NotSupportedKeyError: ``use_vail`` is true.
        DemoError: ``demo_path`` is missing, malformed, or of another spec.
    """

    name = "gail"
    ignore_done = False  # ML-Agents' GAIL provider bootstraps like extrinsic: no value after a true terminal
    reward_tag = GAIL_REWARD
    value_tag = GAIL_VALUE_ESTIMATE

    def __init__(self, settings: GAILSettings, brain_parameters: BrainParameters, seed: int = 0) -> None:
        if settings.use_vail:
            raise NotSupportedKeyError("reward_signals.gail.use_vail", "VAIL is not supported yet; set use_vail: false")
        self.gamma, self.strength, self.use_actions = settings.gamma, settings.strength, settings.use_actions
        self._spec = brain_parameters.action_spec
        n_obs = len(brain_parameters.observation_specs)
        demo = expert_rows(settings.demo_path, brain_parameters, settings.demo_action_timing)
        self.expert = SignalBatch.from_rows({key: demo[key].data for key in demo}, n_obs)
        """Every demonstrated experience (``N_E`` rows)."""
        net = settings.network_settings
        specs = brain_parameters.observation_specs
        self._n_obs = n_obs
        encoder = observation_encoder(
            specs, net.vis_encode_type, net.hidden_units, brain_parameters.behavior_name, "gail_encoder"
        )
        obs_size = encoder.output_size if encoder is not None else sum(int(np.prod(o.shape)) for o in specs)
        size = obs_size + (self._spec.continuous_size + self._spec.mask_width + 1 if self.use_actions else 0)
        if encoder is None:
            self.discriminator = Discriminator(size, net.hidden_units, net.num_layers, obs_size if net.normalize else 0)
        else:
            normalizers = observation_normalizers(specs, "gail_normalizer") if net.normalize else None
            self.discriminator = Discriminator(size, net.hidden_units, net.num_layers, 0, encoder, normalizers)
        self.optimizer = adam(settings.learning_rate, self.discriminator.trainable_variables)
        self._rng = np.random.default_rng(seed)
        self._tf_rng = tf.random.Generator.from_seed(seed)
        signature = batch_signature(brain_parameters)
        self._estimate = tf.function(self._estimate_graph, input_signature=[signature], autograph=False)
        self._train_step = tf.function(self._train_step_graph, input_signature=[signature, signature], autograph=False)

    def _parts(self, batch: SignalBatch) -> list[tf.Tensor]:
        """The raw inputs: the observations (images scaled into [0, 1]), then (use_actions) the action features
        and the done flag."""
        parts = [scaled_image(o) for o in batch.obs]
        if self.use_actions:
            parts += [action_features(batch.continuous_actions, batch.discrete_actions, self._spec), batch.done[:, None]]
        return parts

    def _estimate_graph(self, batch: SignalBatch) -> tf.Tensor:
        return self.discriminator(self.discriminator.encode(self._parts(batch), self._n_obs))

    def _train_step_graph(self, policy: SignalBatch, expert: SignalBatch) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """One Adam step on L_D; returns (L_D, mean D(agent), mean D(expert))."""
        d, n_obs = self.discriminator, self._n_obs
        parts_pi, parts_e = self._parts(policy), self._parts(expert)
        u = self._tf_rng.uniform([tf.shape(parts_pi[0])[0], 1])

        def between(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:  # one u per row, broadcast over an image's axes
            row_u = tf.reshape(u, [-1] + [1] * (a.shape.rank - 1))
            return row_u * a + (1.0 - row_u) * b

        parts_hat = [between(a, b) for a, b in zip(parts_pi, parts_e, strict=True)]
        variables = d.trainable_variables
        with tf.GradientTape() as tape:
            policy_estimate, expert_estimate = d(d.encode(parts_pi, n_obs)), d(d.encode(parts_e, n_obs))
            with tf.GradientTape() as inner:  # grad_x D(x_hat), itself differentiated by the outer tape
                inner.watch(parts_hat)
                estimate_hat = tf.reduce_sum(d(d.encode(parts_hat, n_obs)))
            rows = tf.shape(parts_pi[0])[0]
            grads = [tf.reshape(g, [rows, -1]) for g in inner.gradient(estimate_hat, parts_hat)]
            penalty = gradient_penalty(tf.concat(grads, axis=1))
            loss = discriminator_loss(expert_estimate, policy_estimate) + GRADIENT_PENALTY_WEIGHT * penalty
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss, tf.reduce_mean(policy_estimate), tf.reduce_mean(expert_estimate)

    def estimate(self, batch: SignalBatch) -> np.ndarray:
        """D(x) float32 [N]: the discriminator's probability that each experience is the expert's."""
        return np.asarray(self._estimate(batch))

    def rewards(self, batch: SignalBatch) -> np.ndarray:
        """float32 [N]: ``-log(1 - D(x)(1 - eps)) * strength``."""
        return np.asarray(gail_rewards(self._estimate(batch))) * np.float32(self.strength)

    def update(self, batch: SignalBatch) -> dict[str, float]:
        """One discriminator step on ``batch`` against as many expert rows; returns the GAIL summaries."""
        expert = self.expert.take(self._rng.integers(0, self.expert.size, size=batch.size))
        if self.discriminator.normalizer is not None:
            self.discriminator.normalizer.update(np.concatenate(expert.obs, axis=1))
        for normalizer, obs in zip(self.discriminator.vector_normalizers or (), expert.obs, strict=False):
            if normalizer is not None:
                normalizer.update(obs)
        loss, policy_estimate, expert_estimate = self._train_step(batch, expert)
        return {
            GAIL_LOSS: float(loss),
            GAIL_POLICY_ESTIMATE: float(policy_estimate),
            GAIL_EXPERT_ESTIMATE: float(expert_estimate),
        }

    def checkpoint_objects(self) -> dict[str, object]:
        """The discriminator (with its normaliser, if any), its optimiser and the interpolation RNG."""
        return {"discriminator": self.discriminator, "optimizer": self.optimizer, "rng": self._tf_rng}
