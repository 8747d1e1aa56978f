"""``reward_signals.curiosity``: the Intrinsic Curiosity Module (Pathak et al. 2017, arXiv:1705.05363).

An encoder ``phi`` maps observations to features; two models read them:

    inverse model   a_hat = g(phi(s), phi(s'))      predicts the action that led from s to s'     (eq. 2)
    forward model   phi_hat = f(phi(s), a)           predicts the next state's features           (eq. 4)
    forward error   e = 0.5 * ||phi_hat - phi(s')||^2                                             (eq. 5)
    loss            10 * (0.2 * mean(e) + 0.8 * L_inverse)                                        (eq. 7, ML-Agents' weights)
    reward          min(e, 1 / strength) * strength                                               (ML-Agents' evaluate)

``L_inverse`` is 0.5 * squared error for continuous actions and the cross-entropy of each branch's choice,
summed over branches, for discrete ones. A transition seen often is predicted well, so its reward falls; a
novel one keeps a large error. *Ours:* the forward loss does not train the encoder (``phi`` enters ``f``
and its target through ``stop_gradient``; the features are the inverse model's, as Pathak et al. motivate
them): otherwise the encoder can shrink every error, novel ones included, by shrinking the features.

Like ML-Agents, curiosity ignores done (its value head bootstraps past a terminal: novelty does not end with
the episode). ``network_settings.normalize`` is not supported (the models read raw observations). Image
observations first go through visual encoders of phi's own (the signal's ``network_settings.vis_encode_type``,
``trainer.encoders``), whose features phi's MLP reads beside the vectors, as ML-Agents' ``NetworkBody`` does.

Shapes: ``N`` experiences, ``S`` summed observation size, ``H`` encoding (network_settings.hidden_units),
``C`` continuous action size, ``M = sum(branches)``.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from common.config import CuriositySettings, NotSupportedKeyError
from common.specs import ActionSpec, BrainParameters
from trainer.encoders import ObservationEncoder, observation_encoder
from trainer.networks import encoded, masked_log_softmax, mlp, swish
from trainer.optimizer import adam
from trainer.reward_signals.base import SignalBatch, action_features, batch_signature
from trainer.summaries import CURIOSITY_FORWARD_LOSS, CURIOSITY_INVERSE_LOSS, CURIOSITY_REWARD, CURIOSITY_VALUE_ESTIMATE

MODEL_UNITS = 256
"""Hidden units of the forward and inverse models (ML-Agents' curiosity network)."""
FORWARD_WEIGHT = 0.2
"""beta of eq. 7: the forward loss's share (ML-Agents' ``CuriosityRewardProvider.beta``)."""
LOSS_MULTIPLIER = 10.0
"""ML-Agents' ``CuriosityRewardProvider.loss_multiplier``."""


def forward_errors(predicted: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """``0.5 * ||predicted - target||^2`` per row [N], from encodings [N, H]."""
    return 0.5 * tf.reduce_sum(tf.square(predicted - target), axis=1)


def inverse_loss(predicted: tf.Tensor, continuous: tf.Tensor, discrete: tf.Tensor, spec: ActionSpec) -> tf.Tensor:
    """Mean over rows of the inverse model's action loss; ``predicted`` [N, C + M] (values, then logits)."""
    c, losses = spec.continuous_size, []
    if c:
        losses.append(0.5 * tf.reduce_sum(tf.square(predicted[:, :c] - continuous), axis=1))
    if spec.num_branches:
        for b, log_p in enumerate(masked_log_softmax(predicted[:, c:], None, spec.discrete_branches)):
            losses.append(-tf.gather(log_p, discrete[:, b], axis=1, batch_dims=1))
    return tf.reduce_mean(tf.add_n(losses))


class CuriosityModel(tf.Module):
    """The encoder ``phi``, the inverse model ``g`` and the forward model ``f`` (module docstring)."""

    def __init__(
        self,
        observation_size: int,
        spec: ActionSpec,
        hidden_units: int,
        num_layers: int,
        visual: ObservationEncoder | None = None,
    ) -> None:
        """``observation_size``: what phi's MLP reads (``visual.output_size`` with images); ``visual``: the images'
        encoders, or None with vectors only."""
        super().__init__(name="curiosity")
        self.visual = visual
        actions = spec.continuous_size + spec.mask_width
        self.encoder = mlp(hidden_units, num_layers, "curiosity_encoder")
        self.inverse = keras.Sequential(
            [keras.layers.Dense(MODEL_UNITS, activation=swish), keras.layers.Dense(actions)], name="curiosity_inverse"
        )
        self.forward = keras.Sequential(
            [keras.layers.Dense(MODEL_UNITS, activation=swish), keras.layers.Dense(hidden_units)], name="curiosity_forward"
        )
        self.encoder.build((None, observation_size))
        self.inverse.build((None, 2 * hidden_units))
        self.forward.build((None, hidden_units + actions))

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every weight (Keras 3 weights are invisible to ``tf.Module``'s walk; see networks.PolicyNetwork)."""
        visual = self.visual.trainable_variables if self.visual is not None else ()
        return visual + tuple(w for part in (self.encoder, self.inverse, self.forward) for w in part.trainable_variables)

    def phi(self, observations: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """The encoding [N, H] of raw observations (one [N, *shape_i] each)."""
        return self.encoder(encoded(self.visual, observations))


class CuriositySignal:
    """The ``curiosity`` reward signal (module docstring); a ``reward_signals.base.RewardSignal``.

    Raises:
        NotSupportedKeyError: ``network_settings.normalize`` is true.
    """

    name = "curiosity"
    ignore_done = True
    reward_tag = CURIOSITY_REWARD
    value_tag = CURIOSITY_VALUE_ESTIMATE

    def __init__(self, settings: CuriositySettings, brain_parameters: BrainParameters, seed: int = 0) -> None:
        del seed  # nothing random beyond the initial weights, which the learner seeds
        if settings.network_settings.normalize:
            raise NotSupportedKeyError("reward_signals.curiosity.network_settings.normalize", "true is not supported yet")
        self.gamma, self.strength = settings.gamma, settings.strength
        self._spec = brain_parameters.action_spec
        net = settings.network_settings
        specs = brain_parameters.observation_specs
        visual = observation_encoder(
            specs, net.vis_encode_type, net.hidden_units, brain_parameters.behavior_name, "curiosity_visual"
        )
        size = visual.output_size if visual is not None else sum(int(np.prod(o.shape)) for o in specs)
        self.model = CuriosityModel(size, self._spec, net.hidden_units, net.num_layers, visual)
        self.optimizer = adam(settings.learning_rate, self.model.trainable_variables)
        signature = batch_signature(brain_parameters)
        self._errors = tf.function(self._errors_graph, input_signature=[signature], autograph=False)
        self._train_step = tf.function(self._train_step_graph, input_signature=[signature], autograph=False)

    def _losses(self, batch: SignalBatch) -> tuple[tf.Tensor, tf.Tensor]:
        """(forward errors e [N], inverse loss []) of ``batch``."""
        phi = self.model.phi(batch.obs)
        next_phi = self.model.phi(batch.next_obs)
        predicted_action = self.model.inverse(tf.concat([phi, next_phi], axis=1))
        inverse = inverse_loss(predicted_action, batch.continuous_actions, batch.discrete_actions, self._spec)
        actions = action_features(batch.continuous_actions, batch.discrete_actions, self._spec)
        predicted_phi = self.model.forward(tf.concat([tf.stop_gradient(phi), actions], axis=1))
        return forward_errors(predicted_phi, tf.stop_gradient(next_phi)), inverse

    def _errors_graph(self, batch: SignalBatch) -> tf.Tensor:
        return self._losses(batch)[0]

    def _train_step_graph(self, batch: SignalBatch) -> tuple[tf.Tensor, tf.Tensor]:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            errors, inverse = self._losses(batch)
            forward = tf.reduce_mean(errors)
            loss = LOSS_MULTIPLIER * (FORWARD_WEIGHT * forward + (1.0 - FORWARD_WEIGHT) * inverse)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return forward, inverse

    def rewards(self, batch: SignalBatch) -> np.ndarray:
        """float32 [N]: the forward error, capped at ``1 / strength``, times ``strength``."""
        errors = np.asarray(self._errors(batch))
        if self.strength > 0:
            errors = np.minimum(errors, 1.0 / self.strength)
        return (errors * np.float32(self.strength)).astype(np.float32)

    def update(self, batch: SignalBatch) -> dict[str, float]:
        """One Adam step of encoder, inverse and forward model on ``batch``; returns both losses."""
        forward, inverse = self._train_step(batch)
        return {CURIOSITY_FORWARD_LOSS: float(forward), CURIOSITY_INVERSE_LOSS: float(inverse)}

    def checkpoint_objects(self) -> dict[str, object]:
        """The three models and their optimiser."""
        return {"model": self.model, "optimizer": self.optimizer}
