"""``reward_signals.rnd``: Random Network Distillation (Burda et al. 2018, "Exploration by Random Network
Distillation", arXiv:1810.12894).

Two networks of the same shape read an observation: a **target** ``f``, randomly initialised and never
trained, and a **predictor** ``f_hat``, trained to match it on the states the agent visits:

    error    e(s) = ||f_hat(s) - f(s)||^2                  summed over the H outputs         (Burda et al., sec. 2.2)
    loss     mean over the batch of e(s)                     the predictor's only loss
    reward   strength * e(s)                                 ML-Agents' evaluate, times strength

A state seen often is predicted well, so its reward falls; a novel one keeps a large error (the target is a
fixed random function, so there is nothing stochastic to predict and no "noisy TV"). As in ML-Agents, the
observation read is ``s`` (the one the action was taken in, not ``s'``), done is ignored (novelty does not end
with the episode: its value head bootstraps past a terminal), and both networks are ML-Agents' ``NetworkBody``
shape: the signal's ``network_settings`` (``hidden_units`` wide, ``num_layers`` deep, swish), with visual encoders
of their own for images. ``network_settings.normalize`` is not supported (the networks read raw observations).

Shapes: ``N`` experiences, ``S`` summed observation size, ``H`` = network_settings.hidden_units.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from common.config import NotSupportedKeyError, RNDSettings
from common.specs import BrainParameters
from trainer.encoders import ObservationEncoder, observation_encoder
from trainer.networks import encoded, mlp
from trainer.optimizer import adam
from trainer.reward_signals.base import SignalBatch, batch_signature
from trainer.summaries import RND_LOSS, RND_REWARD, RND_VALUE_ESTIMATE


def prediction_errors(predicted: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """``||predicted - target||^2`` per row [N], from outputs [N, H]."""
    return tf.reduce_sum(tf.square(predicted - target), axis=1)


class RNDNetwork(tf.Module):
    """Observations -> [N, H]: the visual encoders (images only), then ``num_layers`` swish layers of ``H`` units."""

    def __init__(
        self, name: str, observation_size: int, hidden_units: int, num_layers: int, visual: ObservationEncoder | None
    ) -> None:
        super().__init__(name=name)
        self.visual = visual
        self.body = mlp(hidden_units, num_layers, f"{name}_body")
        self.body.build((None, observation_size))

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every weight (Keras 3 weights are invisible to ``tf.Module``'s walk; see networks.PolicyNetwork)."""
        visual = self.visual.trainable_variables if self.visual is not None else ()
        return visual + tuple(self.body.trainable_variables)

    def __call__(self, observations: tuple[tf.Tensor, ...]) -> tf.Tensor:
        return self.body(encoded(self.visual, observations))


class RNDSignal:
    """The ``rnd`` reward signal (module docstring); a ``reward_signals.base.RewardSignal``.

    Raises:
        NotSupportedKeyError: ``network_settings.normalize`` is true.
    """

    name = "rnd"
    ignore_done = True
    reward_tag = RND_REWARD
    value_tag = RND_VALUE_ESTIMATE

    def __init__(self, settings: RNDSettings, brain_parameters: BrainParameters, seed: int = 0) -> None:
        del seed  # nothing random beyond the initial weights, which the learner seeds
        net = settings.network_settings
        if net.normalize:
            raise NotSupportedKeyError("reward_signals.rnd.network_settings.normalize", "true is not supported yet")
        self.gamma, self.strength = settings.gamma, settings.strength
        specs = brain_parameters.observation_specs
        networks = []
        for role in ("rnd_target", "rnd_predictor"):
            visual = observation_encoder(
                specs, net.vis_encode_type, net.hidden_units, brain_parameters.behavior_name, f"{role}_visual"
            )
            size = visual.output_size if visual is not None else sum(int(np.prod(o.shape)) for o in specs)
            networks.append(RNDNetwork(role, size, net.hidden_units, net.num_layers, visual))
        self.target, self.predictor = networks
        self.optimizer = adam(settings.learning_rate, self.predictor.trainable_variables)
        signature = batch_signature(brain_parameters)
        self._errors = tf.function(self._errors_graph, input_signature=[signature], autograph=False)
        self._train_step = tf.function(self._train_step_graph, input_signature=[signature], autograph=False)

    def _errors_graph(self, batch: SignalBatch) -> tf.Tensor:
        target = tf.stop_gradient(self.target(batch.obs))  # fixed: no gradient ever reaches it
        return prediction_errors(self.predictor(batch.obs), target)

    def _train_step_graph(self, batch: SignalBatch) -> tf.Tensor:
        variables = self.predictor.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(self._errors_graph(batch))
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    def rewards(self, batch: SignalBatch) -> np.ndarray:
        """float32 [N]: the predictor's squared error on each experience's observation, times ``strength``."""
        return (np.asarray(self._errors(batch)) * np.float32(self.strength)).astype(np.float32)

    def update(self, batch: SignalBatch) -> dict[str, float]:
        """One Adam step of the predictor on ``batch``; the target stays as it was drawn."""
        return {RND_LOSS: float(self._train_step(batch))}

    def checkpoint_objects(self) -> dict[str, object]:
        """Both networks (the target too: a resumed run must distil the same random function) and the optimiser."""
        return {"target": self.target, "predictor": self.predictor, "optimizer": self.optimizer}
