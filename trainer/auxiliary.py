"""The parts PPO and SAC train beside their policy, and the plumbing the learners need around them: the reward
signals (``trainer.reward_signals``: extrinsic, gail, curiosity) and ``behavioral_cloning`` (``trainer.bc_component``).

Here: building the cloning component from a behavior's settings, buffer rows as a ``SignalBatch``, signal rewards
added to sampled rows (SAC's), and the names these parts take in a checkpoint. How each learner uses the rewards
(``trainer.ppo``: a value head, a GAE and returns per signal; ``trainer.sac``: one summed reward) stays there.

Shapes: ``N`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from common import trajectory as tr
from common.buffer import AgentBuffer
from common.config import BehaviorSettings, PPOHyperparameters
from common.specs import BrainParameters
from trainer.bc_component import BCComponent
from trainer.networks import PolicyNetwork
from trainer.reward_signals import RewardSignal, SignalBatch


def behavioral_cloning(
    settings: BehaviorSettings,
    brain_parameters: BrainParameters,
    policy: PolicyNetwork,
    normalize: Callable[[Sequence[tf.Tensor]], list[tf.Tensor]],
    seed: int,
    squash: bool = False,
) -> BCComponent | None:
    """The behavior's ``behavioral_cloning`` component, training ``policy`` in place; None without one.

    Its learning rate (before strength) and default batch size are the learner's ``hyperparameters``; its
    default ``num_epoch`` is PPO's ``num_epoch``, 1 for SAC (as ML-Agents); ``squash``: SAC's tanh-squashed policy.

    Raises:
        DemoError: its ``demo_path`` cannot be read for this behavior.
    """
    if (cloning := settings.behavioral_cloning) is None:
        return None
    hyper = settings.hyperparameters
    num_epoch = hyper.num_epoch if isinstance(hyper, PPOHyperparameters) else 1
    return BCComponent(
        cloning, brain_parameters, policy, normalize, hyper.learning_rate, hyper.batch_size, num_epoch, squash, seed
    )


def signal_batch(rows: AgentBuffer, n_obs: int) -> SignalBatch:
    """Every row of ``rows`` (PPO's update buffer, or a minibatch sampled from SAC's replay buffer) as a reward
    signal reads them (``SignalBatch.from_rows``)."""
    return SignalBatch.from_rows({key: field.data for key, field in rows.items()}, n_obs)


def add_signal_rewards(signals: Sequence[RewardSignal], columns: dict[str, np.ndarray], n_obs: int) -> dict[str, float]:
    """Adds each signal's reward (times its strength), by the signals' current networks, to ``columns``' ``rewards``
    (float32 [N]; the other columns are read as ``SignalBatch.from_rows`` reads them); returns each signal's mean
    reward under its ``reward_tag``."""
    if not signals:
        return {}
    batch, means = SignalBatch.from_rows(columns, n_obs), {}
    for signal in signals:
        rewards = signal.rewards(batch)
        columns[tr.REWARDS] = columns[tr.REWARDS] + rewards
        means[signal.reward_tag] = float(np.mean(rewards))
    return means


def checkpoint_objects(signals: Sequence[RewardSignal], bc: BCComponent | None) -> dict[str, object]:
    """The signals' networks and optimisers under ``<signal>_<key>`` (e.g. ``gail_discriminator``), and the
    cloning optimiser under ``bc_optimizer``: the names a learner's ``checkpoint_objects`` gives them."""
    objects: dict[str, object] = {}
    for signal in signals:
        objects.update({f"{signal.name}_{key}": value for key, value in signal.checkpoint_objects().items()})
    if bc is not None:
        objects["bc_optimizer"] = bc.optimizer
    return objects
