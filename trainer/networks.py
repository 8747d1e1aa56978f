"""Networks shared by the trainers: observation normaliser, MLP body, policy heads, distributions.

Shapes: ``B`` rows of a minibatch, ``C`` continuous action size, ``M = sum(branches)`` logits.

The policy network's ``forward(obs_0, ...)`` is what ``trainer.export`` converts into the TFLite
artifact the processor runs; its outputs follow ``common.policy_contract``: ``"mean"``/``"log_std"``
``[B, C]`` for continuous actions (with gSDE also ``"sde_noise_scale"`` ``[B, L, C]``, ``L`` = hidden units)
and ``"logits"`` ``[B, M]`` for discrete ones. Observations
enter already normalised: the processor applies the normaliser state shipped beside the model,
and the trainers apply ``Normalizer.normalize`` before calling the same network. Only vector observations
have normalisers (``observation_normalizers``); images enter raw and each network's
``trainer.encoders.ObservationEncoder`` scales and encodes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

import numpy as np
import tensorflow as tf

from common.config import ActivationType
from common.policy_contract import (
    LOG_STD,
    LOGITS,
    MASKED_LOGIT,
    MEAN,
    NORMALIZATION_CLIP,
    NORMALIZATION_EPSILON,
    SDE_EPSILON,
    SDE_NOISE_SCALE,
)
from common.specs import ActionSpec, ObservationSpec
from trainer.encoders import ObservationEncoder

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Normalizer(tf.Module):
    """Running mean and variance of one observation (Chan et al.'s parallel update).

    ``normalize`` is ML-Agents' rule, identical to the processor's:
    ``clip((x - mean) / sqrt(variance + 1e-8), -5, 5)``.
    """

    def __init__(self, size: int, name: str = "normalizer") -> None:
        super().__init__(name=name)
        self.mean = tf.Variable(tf.zeros([size]), trainable=False, name="mean")
        self.variance = tf.Variable(tf.ones([size]), trainable=False, name="variance")
        self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="count")

    def update(self, batch: np.ndarray) -> None:
        """Fold rows ``[K, size]`` into the running statistics."""
        if len(batch) == 0:
            return
        batch = np.asarray(batch, dtype=np.float64)
        n_a, n_b = float(self.count.numpy()), float(len(batch))
        mean_a, var_a = self.mean.numpy().astype(np.float64), self.variance.numpy().astype(np.float64)
        mean_b, var_b = batch.mean(axis=0), batch.var(axis=0)
        total = n_a + n_b
        delta = mean_b - mean_a
        mean = mean_a + delta * n_b / total
        m2 = var_a * n_a + var_b * n_b + delta**2 * n_a * n_b / total
        self.mean.assign(mean.astype(np.float32))
        self.variance.assign((m2 / total).astype(np.float32))
        self.count.assign(total)

    def normalize(self, x: tf.Tensor) -> tf.Tensor:
        return tf.clip_by_value(
            (x - self.mean) / tf.sqrt(self.variance + NORMALIZATION_EPSILON), -NORMALIZATION_CLIP, NORMALIZATION_CLIP
        )

    def state(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(mean, variance, count) for the PolicyUpdate's NormalizerState."""
        return self.mean.numpy(), self.variance.numpy(), int(self.count.numpy())


def observation_normalizers(
    observation_specs: Sequence[ObservationSpec], prefix: str = "normalizer"
) -> list[Normalizer | None]:
    """One ``Normalizer`` per vector observation, named ``{prefix}_{i}``; None for an image (never normalised)."""
    return [
        None if len(spec.shape) != 1 else Normalizer(int(spec.shape[0]), name=f"{prefix}_{i}")
        for i, spec in enumerate(observation_specs)
    ]


def normalized_observations(normalizers: Sequence[Normalizer | None], observations: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """Each vector observation through its normaliser; images (no normaliser) as they are."""
    return [o if n is None else n.normalize(o) for n, o in zip(normalizers, observations, strict=True)]


def swish(x: tf.Tensor) -> tf.Tensor:
    """``x * sigmoid(x)``, ML-Agents' default activation, written out: Keras' ``"swish"`` is ``tf.nn.silu``,
    whose custom gradient leaves an ``IdentityN`` in the graph that makes the TFLite converter drop the
    model's signature (the processor then refuses the artifact)."""
    return x * tf.sigmoid(x)


ACTIVATIONS: dict[ActivationType, Callable[[tf.Tensor], tf.Tensor]] = {
    ActivationType.TANH: tf.tanh,
    ActivationType.RELU: tf.nn.relu,
    ActivationType.SWISH: swish,
}
"""The hidden layers' activation for each ``activation`` setting (PPO's ``hyperparameters.activation``)."""


def activation_function(activation: ActivationType) -> Callable[[tf.Tensor], tf.Tensor]:
    """The function of an ``activation`` setting (``ACTIVATIONS``)."""
    return ACTIVATIONS[activation]


class WeightInit(Enum):
    """How a network's dense layers start (PPO's ``orthogonal_init`` picks ORTHOGONAL or PYTORCH)."""

    GLOROT = "glorot"
    """Keras' default: Glorot-uniform kernels, zero biases (policy heads: variance scaling 0.01). SAC's and BC's."""
    ORTHOGONAL = "orthogonal"
    """SB3's and CleanRL's PPO: orthogonal kernels of gain sqrt(2) hidden, 0.01 policy heads, 1 value heads; zero
    biases."""
    PYTORCH = "pytorch"
    """``torch.nn.Linear``'s own start, which SB3 keeps with ``ortho_init=False``: kernels and biases uniform in
    +-1/sqrt(fan_in), heads too. The biases matter to gSDE: with zero biases the body's output, its noise's scale,
    vanishes at the normalised observations' mean, where episodes often start (``FanInUniformDense``)."""


def orthogonal(gain: float) -> tf.keras.initializers.Initializer:
    """Orthogonal weights scaled by ``gain`` (Saxe et al. 2014), as SB3 and CleanRL initialise PPO; unseeded,
    like Keras' default initialisers (``trainer.seeding.seeded_initializers`` makes them repeatable)."""
    return tf.keras.initializers.Orthogonal(gain=gain)


class FanInUniformDense(tf.keras.layers.Dense):
    """A dense layer started as ``torch.nn.Linear``: kernel and bias uniform in +-1/sqrt(fan_in).

    PyTorch's kaiming_uniform with ``a = sqrt(5)`` is variance scaling 1/3 on the fan-in; the bias's bound needs
    the fan-in, which a Keras bias initialiser never sees, so it is made when the layer is built. Both
    initialisers are unseeded Keras ones, drawn in build order (``seeded_initializers`` makes them repeatable).
    """

    def __init__(self, units: int, **kwargs: Any) -> None:
        kernel = tf.keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")
        super().__init__(units, kernel_initializer=kernel, **kwargs)

    def build(self, input_shape: Any) -> None:
        bound = 1.0 / math.sqrt(int(input_shape[-1]))
        self.bias_initializer = tf.keras.initializers.RandomUniform(-bound, bound)
        super().build(input_shape)


def mlp(
    hidden_units: int,
    num_layers: int,
    name: str,
    activation: Callable[[tf.Tensor], tf.Tensor] = swish,
    init: WeightInit = WeightInit.GLOROT,
) -> tf.keras.Sequential:
    """``num_layers`` dense layers of ``hidden_units`` with ``activation`` (default swish, ML-Agents' default),
    started as ``init`` (``WeightInit``'s hidden layers)."""

    def layer() -> tf.keras.layers.Dense:
        if init is WeightInit.PYTORCH:
            return FanInUniformDense(hidden_units, activation=activation)
        kernel = orthogonal(math.sqrt(2.0)) if init is WeightInit.ORTHOGONAL else "glorot_uniform"
        return tf.keras.layers.Dense(hidden_units, activation=activation, kernel_initializer=kernel)

    return tf.keras.Sequential([layer() for _ in range(num_layers)], name=name)


def output_layer(units: int, init: WeightInit, kernel: Any, name: str) -> tf.keras.layers.Dense:
    """An output layer: ``FanInUniformDense`` under ``WeightInit.PYTORCH``, else zero biases and ``kernel``."""
    if init is WeightInit.PYTORCH:
        return FanInUniformDense(units, name=name)
    return tf.keras.layers.Dense(units, kernel_initializer=kernel, name=name)


class PolicyNetwork(tf.Module):
    """obs -> action distribution parameters (the part of the policy the processor runs).

    Continuous: a Gaussian. ``state_dependent_std`` False (PPO) learns one log_std per dimension;
    True (SAC) computes it from the observation. Discrete: logits per branch, concatenated.

    ``sde`` (PPO's ``use_sde``): generalised state-dependent exploration (Raffin et al. 2021, SB3's
    ``StateDependentNoiseDistribution`` with ``full_std``, ``learn_features`` False). ``log_std`` is then ``[L, C]``,
    the log std ``sigma`` of an exploration matrix ``W ~ N(0, sigma^2)`` that the processor holds per agent; the
    action noise is ``latent(s) @ W``, ``latent`` the body's output [B, L] with its gradient stopped (the noise
    shapes no features). Given the state that noise is ``N(0, latent^2 @ sigma^2)``, so ``LOG_STD`` is
    ``0.5 * log(latent^2 @ sigma^2 + SDE_EPSILON)`` per row and PPO's Gaussian log-prob needs no other change;
    ``SDE_NOISE_SCALE`` ``latent_j * sigma_jc`` [B, L, C] is what the processor multiplies its held standard
    normal by (``common.policy_contract``). ``use_expln``: SB3's ``expln`` instead of ``exp`` for sigma
    (``exp(x)`` for x <= 0, ``log1p(x) + 1`` above: it grows slowly). ``sde_learn_features`` (SAC's gSDE, as SB3's SAC
    actor sets ``learn_features``): the std's gradient reaches the features too. ``clip_mean``: the mean is clipped
    to [-clip_mean, clip_mean] (SB3's SAC actor clips at 2 with gSDE: tanh is flat beyond, and there the held noise
    could not move the squashed action).
    """

    def __init__(
        self,
        observation_sizes: Sequence[int],
        action_spec: ActionSpec,
        hidden_units: int,
        num_layers: int,
        state_dependent_std: bool = False,
        initial_log_std: float = 0.0,
        activation: Callable[[tf.Tensor], tf.Tensor] = swish,
        init: WeightInit = WeightInit.GLOROT,
        encoder: ObservationEncoder | None = None,
        sde: bool = False,
        use_expln: bool = False,
        sde_learn_features: bool = False,
        clip_mean: float | None = None,
    ) -> None:
        """``activation`` and ``init`` shape the body (see ``mlp``) and the heads (``WeightInit``).
        ``encoder``: the observations' encoder (images); None concatenates vectors of ``observation_sizes``.
        ``sde``, ``use_expln``: gSDE (class docstring; not with ``state_dependent_std``), ``initial_log_std`` then
        filling its ``[hidden_units, C]`` log_std; ``sde_learn_features`` and ``clip_mean`` as the class docstring."""
        super().__init__(name="policy")
        if sde and state_dependent_std:
            raise ValueError("sde and state_dependent_std exclude each other")
        self.observation_sizes = list(observation_sizes)
        self.encoder = encoder
        self.action_spec = action_spec
        self.state_dependent_std = state_dependent_std
        self.body = mlp(hidden_units, num_layers, "policy_body", activation, init)
        c, m = action_spec.continuous_size, action_spec.mask_width
        # Small initial weights keep the first policy near mean 0 (ML-Agents scales its heads by 0.01-0.1).
        # One instance for every head, as before the initialisation was a choice (SAC's initial weights stay as they
        # were): its seed is drawn once, here.
        small = orthogonal(0.01) if init is WeightInit.ORTHOGONAL else tf.keras.initializers.VarianceScaling(0.01)
        self.mean_head = output_layer(c, init, small, "mean") if c else None
        self.log_std_head = output_layer(c, init, small, "log_std") if c and state_dependent_std else None
        self.sde = bool(sde and c)
        self.use_expln = use_expln
        self.sde_learn_features = sde_learn_features
        self.clip_mean = clip_mean
        log_std_shape = [hidden_units, c] if self.sde else [c]
        self.log_std = (
            tf.Variable(tf.fill(log_std_shape, initial_log_std), name="log_std") if c and not state_dependent_std else None
        )
        self.logits_head = output_layer(m, init, small, "logits") if m else None
        total = encoder.output_size if encoder is not None else sum(self.observation_sizes)
        self.body.build((None, total))
        for head in (self.mean_head, self.log_std_head, self.logits_head):
            if head is not None:
                head.build((None, hidden_units))

    def __call__(self, *normalized_obs: tf.Tensor) -> dict[str, tf.Tensor]:
        """Distribution parameters: ``mean``/``log_std`` [B, C] and/or ``logits`` [B, M]."""
        return self.heads(self.features(*normalized_obs))

    def features(self, *normalized_obs: tf.Tensor) -> tf.Tensor:
        """The body's output [B, hidden_units]: the observations encoded, then the MLP (what the heads read)."""
        return self.body(encoded(self.encoder, normalized_obs))

    def heads(self, h: tf.Tensor) -> dict[str, tf.Tensor]:
        """The distribution parameters of ``features`` ``h`` [B, hidden_units] (see ``__call__``)."""
        out: dict[str, tf.Tensor] = {}
        if self.mean_head is not None:
            out[MEAN] = self.mean_head(h)
            if self.clip_mean is not None:
                out[MEAN] = tf.clip_by_value(out[MEAN], -self.clip_mean, self.clip_mean)
            if self.log_std_head is not None:
                out[LOG_STD] = tf.clip_by_value(self.log_std_head(h), LOG_STD_MIN, LOG_STD_MAX)
            elif self.sde:
                assert self.log_std is not None
                log_std = tf.clip_by_value(self.log_std, LOG_STD_MIN, LOG_STD_MAX)
                latent = h if self.sde_learn_features else tf.stop_gradient(h)
                out[LOG_STD], out[SDE_NOISE_SCALE] = sde_log_std_and_scale(latent, log_std, self.use_expln)
            else:
                assert self.log_std is not None
                out[LOG_STD] = tf.broadcast_to(tf.clip_by_value(self.log_std, LOG_STD_MIN, LOG_STD_MAX), tf.shape(out[MEAN]))
        if self.logits_head is not None:
            out[LOGITS] = self.logits_head(h)
        return out

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every trainable weight. ``tf.Module``'s own walk sees only ``log_std``: Keras 3 weights are not
        ``tf.Variable`` instances, so without this an optimiser would silently train nothing else."""
        layers = (self.body, self.mean_head, self.log_std_head, self.logits_head)
        own = (self.log_std,) if self.log_std is not None else ()
        visual = self.encoder.trainable_variables if self.encoder is not None else ()
        return own + visual + tuple(w for layer in layers if layer is not None for w in layer.trainable_variables)

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        """Every weight (all are trainable); ``tf.Module``'s own walk misses the Keras ones, as above."""
        return self.trainable_variables


class ValueNetwork(tf.Module):
    """obs (and optionally actions) -> one scalar per row: PPO's V(s), or SAC's Q(s, a)."""

    def __init__(
        self,
        hidden_units: int,
        num_layers: int,
        input_size: int,
        outputs: int = 1,
        name: str = "value",
        activation: Callable[[tf.Tensor], tf.Tensor] = swish,
        init: WeightInit = WeightInit.GLOROT,
        encoder: ObservationEncoder | None = None,
    ) -> None:
        """``activation`` and ``init`` as ``mlp``; under ``WeightInit.ORTHOGONAL`` the head gets gain 1 (SB3's value
        head). ``encoder``: this network's own observation encoder (images), which ``evaluate``
        runs; then ``input_size`` counts the inputs after the encoding (its ``output_size`` plus any extra,
        such as SAC's actions)."""
        super().__init__(name=name)
        self.encoder = encoder
        self.body = mlp(hidden_units, num_layers, f"{name}_body", activation, init)
        self.head = output_layer(outputs, init, value_head_kernel(init), f"{name}_head")
        self.body.build((None, input_size))
        self.head.build((None, hidden_units))

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """``x`` [B, input_size] -> [B, outputs]."""
        return self.head(self.body(x))

    def evaluate(self, normalized_obs: Sequence[tf.Tensor], extra: tf.Tensor | None = None) -> tf.Tensor:
        """The observations (one ``[B, *shape_i]`` each) encoded and concatenated, then ``extra`` [B, E] beside them
        (SAC's actions), through the network: [B, outputs]."""
        x = encoded(self.encoder, normalized_obs)
        return self(x if extra is None else tf.concat([x, extra], axis=-1))

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """Every trainable weight (Keras 3 weights are invisible to ``tf.Module``'s walk; see PolicyNetwork)."""
        visual = self.encoder.trainable_variables if self.encoder is not None else ()
        return visual + tuple(self.body.trainable_variables) + tuple(self.head.trainable_variables)

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        """Every weight (all are trainable)."""
        return self.trainable_variables


class SharedValueHeads(tf.Module):
    """PPO's critic with ``shared_critic`` (ML-Agents' ``SharedActorCritic``): value heads, one output per reward
    signal, on the policy network's ``features``. The policy's encoder and body are the critic's too, so the value
    loss trains them beside the policy loss; only the heads are this module's own weights (``trainable_variables``).
    """

    def __init__(
        self, policy: PolicyNetwork, hidden_units: int, outputs: int = 1, init: WeightInit = WeightInit.GLOROT
    ) -> None:
        """``hidden_units``: the policy body's width; ``init`` starts the head as ``ValueNetwork``'s."""
        super().__init__(name="value")
        self.policy = policy
        self.head = output_layer(outputs, init, value_head_kernel(init), "value_head")
        self.head.build((None, hidden_units))

    def __call__(self, features: tf.Tensor) -> tf.Tensor:
        """The policy's ``features`` [B, hidden_units] -> [B, outputs]."""
        return self.head(features)

    def evaluate(self, normalized_obs: Sequence[tf.Tensor]) -> tf.Tensor:
        """V of the observations (one ``[B, *shape_i]`` each) through the policy's trunk and the heads: [B, outputs]."""
        return self(self.policy.features(*normalized_obs))

    @property
    def trainable_variables(self) -> tuple[tf.Variable, ...]:
        """The heads' weights only: the trunk's are the policy's (an optimiser over both lists each once)."""
        return tuple(self.head.trainable_variables)

    @property
    def variables(self) -> tuple[tf.Variable, ...]:
        """The heads' weights (all are trainable)."""
        return self.trainable_variables


def value_head_kernel(init: WeightInit) -> Any:
    """A value head's kernel initialiser: orthogonal of gain 1 (SB3's) under ``WeightInit.ORTHOGONAL``, else Glorot."""
    return orthogonal(1.0) if init is WeightInit.ORTHOGONAL else "glorot_uniform"


def encoded(encoder: ObservationEncoder | None, normalized_obs: Sequence[tf.Tensor]) -> tf.Tensor:
    """One feature row per observation set: through ``encoder``, or (None) the vectors concatenated."""
    if encoder is not None:
        return encoder(normalized_obs)
    return normalized_obs[0] if len(normalized_obs) == 1 else tf.concat(list(normalized_obs), axis=-1)


# -- distributions: the same maths as processor/inference.py, in TF ----------------------------


def gaussian_log_prob(actions: tf.Tensor, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """Per-dimension log N(actions; mean, exp(log_std)), [B, C]."""
    z = (actions - mean) * tf.exp(-log_std)
    return -0.5 * tf.square(z) - log_std - _HALF_LOG_2PI


def expln(x: tf.Tensor) -> tf.Tensor:
    """SB3's gSDE ``expln``: ``exp(x)`` for x <= 0, ``log1p(x) + 1`` above (continuous, positive, slow growth)."""
    return tf.where(x <= 0.0, tf.exp(tf.minimum(x, 0.0)), tf.math.log1p(tf.maximum(x, 0.0)) + 1.0)


def sde_log_std_and_scale(latent: tf.Tensor, log_sigma: tf.Tensor, use_expln: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
    """gSDE given the latent features [B, L] and the exploration matrix's log std [L, C]: the per-state log std
    ``0.5 * log(latent^2 @ sigma^2 + SDE_EPSILON)`` [B, C] of the noise ``latent @ W``, ``W ~ N(0, sigma^2)``, and
    the noise scale ``latent_j * sigma_jc`` [B, L, C] (``common.policy_contract.SDE_NOISE_SCALE``); sigma is
    ``exp(log_sigma)``, or ``expln`` with ``use_expln``."""
    # sigma is taken per row, [B, L, C], though it does not depend on the row: of the variable alone, the TFLite
    # converter folds exp(log_sigma) into a constant that trainer.weight_template cannot patch, and every export
    # then converts in full, which with an export every few steps would dominate the run.
    per_row = log_sigma[None, :, :] + tf.zeros_like(latent)[:, :, None]
    sigma = expln(per_row) if use_expln else tf.exp(per_row)
    scale = latent[:, :, None] * sigma
    variance = tf.reduce_sum(tf.square(scale), axis=1)
    return 0.5 * tf.math.log(variance + SDE_EPSILON), scale


def gaussian_entropy(log_std: tf.Tensor) -> tf.Tensor:
    """Per-dimension entropy of a Gaussian, [B, C]."""
    return log_std + 0.5 + _HALF_LOG_2PI


def masked_log_softmax(logits: tf.Tensor, mask: tf.Tensor | None, branches: Sequence[int]) -> list[tf.Tensor]:
    """Per-branch log-probabilities with masked options (mask 0) pushed to ~-1e9; one [B, size] per branch."""
    if mask is not None:
        logits = tf.where(mask > 0, logits, MASKED_LOGIT)
    return [tf.nn.log_softmax(part, axis=-1) for part in tf.split(logits, list(branches), axis=-1)]


def discrete_log_prob_and_entropy(
    logits: tf.Tensor, mask: tf.Tensor | None, actions: tf.Tensor, branches: Sequence[int]
) -> tuple[tf.Tensor, tf.Tensor]:
    """Log-prob of the chosen option per branch [B, nB] and entropy per branch [B, nB]."""
    log_probs, entropies = [], []
    for b, log_p in enumerate(masked_log_softmax(logits, mask, branches)):
        log_probs.append(tf.gather(log_p, tf.cast(actions[:, b], tf.int32), axis=-1, batch_dims=1))
        entropies.append(-tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1))
    return tf.stack(log_probs, axis=-1), tf.stack(entropies, axis=-1)
