"""Behavioural cloning (``trainer_type: bc``): supervised learning of demonstrated actions.

Stepstream's standalone BC trainer (ML-Agents 0.12's ``offline_bc``; Pomerleau 1991, Bain &
Sammut 1995). The update buffer holds demonstration rows, filled by ``load_rows`` from an
``AgentBuffer`` (the demonstrations reader feeds ``.demo`` files through it). Each update makes
``num_epoch`` shuffled passes over every row in minibatches of ``batch_size``:

* continuous actions: mean squared error between the policy mean and the demonstrated action;
* discrete actions: cross-entropy of the demonstrated choice, summed over branches, under the
  masked softmax (masked options get ~-1e9 logits, as the processor acts).

Action space. Demonstration rows hold **env actions**: continuous in [-1, 1] (as ``.demo`` files
record them), discrete choices per branch. The network's mean is trained in that space. The
exported policy acts in the processor's clip mode (``clip = ACTION_CLIP = 3``, like PPO): the
artifact's mean is ``3 * mean`` and its standard deviation the fixed ``3 * ACTING_STD``, so the
env receives ``clip(u, -3, 3) / 3 ~ N(mean, ACTING_STD)`` clipped to [-1, 1].

The env's own trajectories, acted by the cloned policy, are *not* cloned (imitating itself would
teach nothing): ``add_trajectories`` counts them for the step budget, the learning-rate schedule
and the update cadence. ``ready_to_update``: demonstrations exist and either no update ran yet or
``batch_size`` new env experiences arrived since the last one.

Demonstrations from ``demo_path`` (``load_demonstrations``): ``common.demo.demo_to_buffer`` rows,
checked against the behavior's spec; a random ``HOLDOUT_FRACTION`` of them (fixed seed
``HOLDOUT_SEED``) is kept out of training and scores the policy in ``report``: the held-out action
accuracy (discrete; argmax of the masked logits, per branch) or R^2 (continuous; the clipped mean,
what the env receives at zero noise, against the clipped demonstrated action).

Without an env (offline BC, ``trainer.offline``) the loop's source queues each update's data with
``add_passes``: ``num_epoch`` passes over the rows, the last one cut to what is left of ``max_steps``
(a pass of ``r`` rows trains on ``r`` rows of a fresh shuffle). Its steps are the demonstration
experiences trained on, and they drive the learning-rate schedule. With passes queued,
``ready_to_update`` holds and ``update`` trains on exactly them; without, an update is
``num_epoch`` whole passes.

``cloning_loss`` is the one loss of every cloning step: this learner's, the ``behavioral_cloning``
component's (``trainer.bc_component``) and the held-out scores'. ``demo_rows`` is the one
extraction of demonstration rows from an ``AgentBuffer`` that both use.

Shapes: ``B`` rows of a minibatch, ``C`` continuous action size, ``nB`` discrete branches,
``M = sum(branches)``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from common.buffer import AgentBuffer
from common.config import BCHyperparameters, BehaviorSettings, ConfigKeyError, DemoActionTiming
from common.demo import demo_to_buffer
from common.policy_contract import LOG_STD, LOGITS, MEAN
from common.specs import BrainParameters
from common.trajectory import ACTION_MASK, CONTINUOUS_ACTIONS, DISCRETE_ACTIONS, Trajectory, obs_key
from protos import pb
from trainer.bc_metrics import BC_METRICS_FILE, HOLDOUT_FRACTION, HOLDOUT_SEED, branch_accuracy, r_squared, split_rows
from trainer.encoders import as_observation_dtype, image_observation_dtypes, observation_encoder
from trainer.export import TFLiteExporter, make_policy_update, normalizer_state
from trainer.networks import Normalizer, PolicyNetwork, masked_log_softmax, normalized_observations, observation_normalizers
from trainer.optimizer import adam
from trainer.schedules import MIN_LEARNING_RATE, decayed_value
from trainer.seeding import seeded_initializers
from trainer.summaries import CLONING_LOSS, LEARNING_RATE

logger = logging.getLogger(__name__)

ACTION_CLIP = 3.0
"""Clip bound of the exported policy (clip mode, as PPO's): env action = clip(u, -3, 3) / 3."""
ACTING_STD = 0.05
"""Fixed standard deviation of the exported Gaussian, in env-action units."""
_EVAL_CHUNK = 4096


# -- losses: pure functions of tensors ---------------------------------------------------------


def continuous_cloning_loss(mean: tf.Tensor, expert_actions: tf.Tensor) -> tf.Tensor:
    """Mean squared error between the policy mean [B, C] and the demonstrated env actions [B, C]."""
    return tf.reduce_mean(tf.square(mean - tf.clip_by_value(expert_actions, -1.0, 1.0)))


def discrete_cloning_loss(logits: tf.Tensor, mask: tf.Tensor, expert_actions: tf.Tensor, branches: Sequence[int]) -> tf.Tensor:
    """Cross-entropy of the demonstrated choices, summed over branches, averaged over rows.

    Args:
        logits: float32 [B, M], branches side by side.
        mask: float32 [B, M], 1 = allowed.
        expert_actions: int32 [B, nB], the demonstrated option of each branch.
        branches: the branch sizes.
    """
    total = tf.zeros([tf.shape(logits)[0]])
    for b, log_p in enumerate(masked_log_softmax(logits, mask, branches)):
        total -= tf.gather(log_p, expert_actions[:, b], axis=-1, batch_dims=1)
    return tf.reduce_mean(total)


def cloning_loss(
    outputs: Mapping[str, tf.Tensor],
    continuous: tf.Tensor,
    discrete: tf.Tensor,
    mask: tf.Tensor,
    branches: Sequence[int],
    squash: bool = False,
) -> tf.Tensor:
    """The cloning loss of a policy's outputs on demonstrated rows: the continuous loss on ``mean`` plus the
    discrete loss on ``logits``, each where the policy has that head.

    Args:
        outputs: ``PolicyNetwork`` outputs: ``mean`` float32 [B, C] and/or ``logits`` float32 [B, M].
        continuous: float32 [B, C], the demonstrated env actions.
        discrete: int32 [B, nB], the demonstrated choices.
        mask: float32 [B, M], 1 = allowed (unused without ``logits``).
        branches: the branch sizes.
        squash: compare ``tanh(mean)`` (SAC's squashed action) instead of the mean.

    Returns:
        A float32 scalar.
    """
    loss = tf.constant(0.0)
    if MEAN in outputs:
        mean = tf.tanh(outputs[MEAN]) if squash else outputs[MEAN]
        loss += continuous_cloning_loss(mean, continuous)
    if LOGITS in outputs:
        loss += discrete_cloning_loss(outputs[LOGITS], mask, discrete, branches)
    return loss


def demo_rows(buffer: AgentBuffer, brain_parameters: BrainParameters) -> dict[str, np.ndarray]:
    """The demonstration rows of ``buffer`` (K rows) as the cloning steps read them.

    Returns:
        ``obs_<i>`` [K, *shape_i] (float32; an image in its spec's dtype, ``trainer.encoders.as_observation_dtype``:
        a uint8 camera's demonstrated frames back in uint8), ``continuous_actions`` float32 [K, C] (env actions),
        ``discrete_actions`` int32 [K, nB], and with branches ``action_mask`` float32 [K, M] (all
        ones where the buffer has none).

    Raises:
        ValueError: a needed key is missing, or a field has the wrong width or row count.
    """
    spec = brain_parameters.action_spec
    k = buffer.num_experiences
    rows: dict[str, np.ndarray] = {}
    for i, obs_spec in enumerate(brain_parameters.observation_specs):
        rows[obs_key(i)] = as_observation_dtype(_field(buffer, obs_key(i), (k, *obs_spec.shape), None), obs_spec)
    rows[CONTINUOUS_ACTIONS] = _field(buffer, CONTINUOUS_ACTIONS, (k, spec.continuous_size), np.float32)
    rows[DISCRETE_ACTIONS] = _field(buffer, DISCRETE_ACTIONS, (k, spec.num_branches), np.int32)
    if spec.num_branches:
        if ACTION_MASK in buffer:
            rows[ACTION_MASK] = _field(buffer, ACTION_MASK, (k, spec.mask_width), np.float32)
        else:
            rows[ACTION_MASK] = np.ones((k, spec.mask_width), np.float32)
    return rows


def _field(buffer: AgentBuffer, key: str, shape: tuple[int, ...], dtype: type | None) -> np.ndarray:
    width = shape[1] if len(shape) > 1 else 0
    if key not in buffer:
        if width == 0:  # an action kind this behavior does not have
            return np.zeros(shape, dtype)
        raise ValueError(f"demonstration rows lack {key!r}")
    data: np.ndarray = np.asarray(buffer[key].data, dtype=dtype)
    if data.shape != shape:
        raise ValueError(f"demonstration field {key!r} has shape {list(data.shape)}, expected {list(shape)}")
    return data


class _State(tf.Module):
    """Checkpointed counters and normalisers."""

    def __init__(self, normalizers: list[Normalizer | None]) -> None:
        super().__init__(name="bc_state")
        self.normalizers = normalizers
        self.env_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        self.updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")


class BCLearner:
    """Behavioural cloning for one behavior (module docstring); a ``trainer.learner.Learner``.

    Args:
        brain_parameters: the behavior's observation and action specs.
        settings: its settings; ``hyperparameters`` must be ``BCHyperparameters``.
        seed: seeds the network initialisation (``trainer.seeding.seeded_initializers``, which is
            process-wide) and the minibatch shuffling.

    Raises:
        ConfigKeyError: the settings are not a ``bc`` trainer's.
    """

    def __init__(self, brain_parameters: BrainParameters, settings: BehaviorSettings, seed: int = 0) -> None:
        if not isinstance(settings.hyperparameters, BCHyperparameters):
            detail = f"BCLearner needs BCHyperparameters, got {type(settings.hyperparameters).__name__}"
            raise ConfigKeyError("hyperparameters", detail)
        self.hyperparameters: BCHyperparameters = settings.hyperparameters
        self.brain_parameters = brain_parameters
        self.max_steps = settings.max_steps
        network = settings.network_settings
        spec = brain_parameters.action_spec
        self._branches = tuple(spec.discrete_branches)
        specs = brain_parameters.observation_specs
        sizes = [int(np.prod(s.shape)) for s in specs]
        dtypes = image_observation_dtypes(specs)
        with seeded_initializers(seed):
            name = brain_parameters.behavior_name
            encoder = observation_encoder(specs, network.vis_encode_type, network.hidden_units, name, "policy_encoder")
            self.policy = PolicyNetwork(sizes, spec, network.hidden_units, network.num_layers, encoder=encoder)
        self.normalize = network.normalize
        self.state = _State(observation_normalizers(specs) if self.normalize else [])  # vectors only: None for an image
        self.demonstrations = AgentBuffer()
        self._keys = [obs_key(i) for i in range(len(sizes))]
        self._rng = np.random.default_rng(seed)
        self._since_update = 0
        self._passes: list[int] = []
        """Rows of each pass ``add_passes`` queued for the next update (offline BC)."""
        self.demo_path: str | None = None
        self.held_out: dict[str, np.ndarray] = {}
        """Demonstration rows kept out of training (``load_demonstrations``), same keys as ``demonstrations``."""
        self.last_loss = math.nan
        """Mean cloning loss of the newest update."""
        # The log_std variable is PPO's; BC acts with a fixed one, so it is not trained.
        self._variables = [v for v in self.policy.trainable_variables if v is not self.policy.log_std]
        self.optimizer = adam(self.hyperparameters.learning_rate, self._variables)  # built: one trace
        # A fixed signature with a dynamic batch axis: one trace for the learner's life.
        signature = [
            [tf.TensorSpec([None, *s.shape], d) for s, d in zip(specs, dtypes, strict=True)],
            tf.TensorSpec([None, spec.continuous_size], tf.float32),
            tf.TensorSpec([None, spec.num_branches], tf.int32),
            tf.TensorSpec([None, spec.mask_width], tf.float32),
        ]
        self._train_step = tf.function(self._train_step_eager, input_signature=signature, autograph=False)
        self._exporter = TFLiteExporter(self._acting_forward, [s.shape for s in specs], observation_dtypes=dtypes)

    # -- data --------------------------------------------------------------------------------

    def load_rows(self, buffer: AgentBuffer) -> int:
        """Append demonstration rows: ``obs_<i>`` [K, *shape], ``continuous_actions`` [K, C] env
        actions in [-1, 1], ``discrete_actions`` [K, nB], optionally ``action_mask`` [K, M].

        Returns:
            The rows added (K).

        Raises:
            ValueError: a needed key is missing, or a field has the wrong width or row count.
        """
        return self._add_rows(demo_rows(buffer, self.brain_parameters))

    def load_demonstrations(
        self,
        path: str | Path,
        holdout_fraction: float = HOLDOUT_FRACTION,
        action_timing: DemoActionTiming = DemoActionTiming.AUTO,
    ) -> int:
        """Read ``path`` (a .demo file or folder) with ``demo_to_buffer`` (paired by ``action_timing``), hold out a random
        ``holdout_fraction`` of its rows (seed ``HOLDOUT_SEED``) and train on the rest.

        Returns:
            The training rows added.

        Raises:
            DemoSpecMismatchError: the demonstration's spec differs from this behavior's.
            DemoError: a missing path, a wrong extension, an unsupported or malformed file.
        """
        _, buffer = demo_to_buffer(path, 1, expected_spec=self.brain_parameters, action_timing=action_timing)
        train, held = split_rows(demo_rows(buffer, self.brain_parameters), holdout_fraction, HOLDOUT_SEED)
        self.demo_path = str(path)
        self.held_out = held
        logger.info("BC: %s: %d rows held out to score the policy", path, len(held[CONTINUOUS_ACTIONS]))
        return self._add_rows(train)

    def _add_rows(self, rows: dict[str, np.ndarray]) -> int:
        k = len(rows[CONTINUOUS_ACTIONS])
        self.demonstrations.extend_rows(rows)
        for i, normalizer in enumerate(self.state.normalizers):
            if normalizer is not None:
                normalizer.update(rows[obs_key(i)].reshape(k, -1))
        logger.info("BC: %d demonstration rows loaded (%d in all)", k, self.demonstrations.num_experiences)
        return k

    def add_trajectories(self, trajectories: Sequence[Trajectory]) -> int:
        """Count the env's experiences (not cloned: see the module docstring)."""
        n = sum(t.length for t in trajectories)
        self._since_update += n
        self.state.env_steps.assign_add(n)
        return n

    def add_passes(self, max_rows: int) -> int:
        """Queue the next update's data without an env (offline BC): ``num_epoch`` passes over the training
        rows, the last cut so that at most ``max_rows`` rows are queued; returns the rows queued."""
        n, left = self.demonstrations.num_experiences, max_rows
        for _ in range(self.hyperparameters.num_epoch):
            if left <= 0 or n == 0:
                break
            self._passes.append(min(n, left))
            left -= self._passes[-1]
        return max_rows - left

    def ready_to_update(self) -> bool:
        if self.demonstrations.num_experiences == 0:
            return False
        if self._passes:
            return True
        return int(self.state.updates.numpy()) == 0 or self._since_update >= self.hyperparameters.batch_size

    # -- training ----------------------------------------------------------------------------

    def _normalized(self, observations: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        if not self.state.normalizers:
            return list(observations)
        return normalized_observations(self.state.normalizers, observations)

    def _train_step_eager(
        self, observations: list[tf.Tensor], continuous: tf.Tensor, discrete: tf.Tensor, mask: tf.Tensor
    ) -> tf.Tensor:
        with tf.GradientTape() as tape:
            out = self.policy(*self._normalized(observations))
            loss = cloning_loss(out, continuous, discrete, mask, self._branches)
        gradients = tape.gradient(loss, self._variables)
        self.optimizer.apply_gradients(zip(gradients, self._variables, strict=True))
        return loss

    def learning_rate(self) -> float:
        hp = self.hyperparameters
        step = int(self.state.env_steps.numpy())
        return decayed_value(hp.learning_rate_schedule, hp.learning_rate, MIN_LEARNING_RATE, self.max_steps, step)

    def update(self) -> Mapping[str, float]:
        """The passes ``add_passes`` queued, else ``num_epoch`` whole ones, each over a fresh shuffle of the
        demonstrations; returns the mean cloning loss (absent when no minibatch fitted) and the learning rate.

        Raises:
            ValueError: there are no demonstration rows.
        """
        n = self.demonstrations.num_experiences
        if n == 0:
            raise ValueError("BC update without demonstration rows (load_rows first)")
        lr = self.learning_rate()
        self.optimizer.learning_rate.assign(lr)
        data = self.demonstrations
        observations = [np.asarray(data[key].data) for key in self._keys]
        continuous = np.asarray(data[CONTINUOUS_ACTIONS].data)
        discrete = np.asarray(data[DISCRETE_ACTIONS].data)
        mask = np.asarray(data[ACTION_MASK].data) if ACTION_MASK in data else np.ones((n, 0), np.float32)
        batch = min(self.hyperparameters.batch_size, n)
        queued, self._passes = self._passes, []
        passes = queued or [n] * self.hyperparameters.num_epoch
        losses = []
        for rows in passes:
            order = self._rng.permutation(n)[:rows]
            for start in range(0, rows - batch + 1, batch):  # the partial last minibatch is left out, as in ML-Agents
                idx = order[start : start + batch]
                loss = self._train_step([o[idx] for o in observations], continuous[idx], discrete[idx], mask[idx])
                losses.append(float(loss))
        # Offline, the rows trained on are the steps: counted after the update, so its learning rate is that of
        # the steps before it (online, add_trajectories counted the env's experiences already).
        self.state.env_steps.assign_add(sum(queued))
        self.state.updates.assign_add(1)
        self._since_update = 0
        metrics = {LEARNING_RATE: lr}
        if losses:  # a pass cut below one minibatch trains nothing: the newest loss stays
            self.last_loss = metrics[CLONING_LOSS] = float(np.mean(losses))
        return metrics

    # -- scoring -----------------------------------------------------------------------------

    def evaluate(self, rows: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The cloning loss, and accuracy (discrete) or R^2 (continuous), of the greedy policy on ``rows``."""
        k = len(rows[CONTINUOUS_ACTIONS])
        if k == 0:
            return {}
        outputs: dict[str, list[np.ndarray]] = {}
        for start in range(0, k, _EVAL_CHUNK):
            obs = [tf.constant(rows[key][start : start + _EVAL_CHUNK]) for key in self._keys]
            for name, value in self.policy(*self._normalized(obs)).items():
                outputs.setdefault(name, []).append(np.asarray(value))
        out = {name: np.concatenate(parts) for name, parts in outputs.items()}
        metrics: dict[str, Any] = {}
        mask = rows.get(ACTION_MASK, np.ones((k, 0), np.float32))
        expert_continuous, expert_discrete = rows[CONTINUOUS_ACTIONS], rows[DISCRETE_ACTIONS]
        tensors = {name: tf.constant(value) for name, value in out.items()}
        expert = (tf.constant(expert_continuous), tf.constant(expert_discrete), tf.constant(mask))
        loss = float(cloning_loss(tensors, *expert, self._branches))
        if MEAN in out:
            metrics["r2"] = r_squared(np.clip(out[MEAN], -1.0, 1.0), np.clip(expert_continuous, -1.0, 1.0))
        if LOGITS in out:
            metrics.update(branch_accuracy(out[LOGITS], mask, expert_discrete, self._branches))
        metrics["cloning_loss"] = loss
        return metrics

    def report(self) -> dict[str, Any]:
        """What ``bc_metrics.json`` holds: the final cloning loss and the held-out scores (module docstring)."""
        held = self.evaluate(self.held_out) if self.held_out else {}
        report: dict[str, Any] = {
            "behavior": self.brain_parameters.behavior_name,
            "demo_path": self.demo_path,
            "train_rows": self.demonstrations.num_experiences,
            "held_out_rows": len(self.held_out.get(CONTINUOUS_ACTIONS, ())),
            "held_out_fraction": HOLDOUT_FRACTION,
            "held_out_seed": HOLDOUT_SEED,
            "updates": int(self.state.updates.numpy()),
            "cloning_loss": self.last_loss,
        }
        report.update({f"held_out_{key}": value for key, value in held.items()})
        return report

    def write_report(self, directory: Path) -> Path:
        """Write ``report()`` to ``directory / bc_metrics.json`` (NaN as null); returns the path."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / BC_METRICS_FILE
        clean = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in self.report().items()}
        path.write_text(json.dumps(clean, indent=2) + "\n", encoding="utf-8")
        logger.info("BC: wrote %s", path)
        return path

    # -- export and checkpoints ----------------------------------------------------------------

    def _acting_forward(self, *normalized_obs: tf.Tensor) -> dict[str, tf.Tensor]:
        """The acting distribution in the processor's clip mode (module docstring)."""
        out = self.policy(*normalized_obs)
        acting: dict[str, tf.Tensor] = {}
        if MEAN in out:
            acting[MEAN] = ACTION_CLIP * out[MEAN]
            acting[LOG_STD] = tf.zeros_like(out[MEAN]) + math.log(ACTION_CLIP * ACTING_STD)
        if LOGITS in out:
            acting[LOGITS] = out[LOGITS]
        return acting

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        normalizers = [normalizer_state(*n.state()) for n in self.state.normalizers if n is not None]
        return make_policy_update(
            self.brain_parameters.behavior_name,
            version,
            trainer_step,
            self._exporter.export(),
            self.brain_parameters.action_spec.to_proto(),
            normalizers,
            tanh_squash=False,
            clip=ACTION_CLIP,
        )

    def checkpoint_objects(self) -> Mapping[str, object]:
        return {"policy": self.policy, "optimizer": self.optimizer, "state": self.state}

    def save_extra(self, directory: Path) -> None:
        """Nothing: demonstrations are reloaded from ``demo_path``."""
        del directory

    def load_extra(self, directory: Path) -> None:
        del directory
