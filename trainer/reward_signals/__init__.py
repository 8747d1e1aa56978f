"""Reward signals (``reward_signals`` in the trainer YAML): extrinsic, GAIL, curiosity and RND; see README.md here."""

from __future__ import annotations

from collections.abc import Mapping

from common.config import (
    ConfigKeyError,
    CuriositySettings,
    GAILSettings,
    NotSupportedKeyError,
    RewardSignalSettings,
    RewardSignalType,
    RNDSettings,
)
from common.specs import BrainParameters
from trainer.reward_signals.base import (
    ExtrinsicSignal,
    RewardSignal,
    SignalBatch,
    add_signal_rewards,
    signal_checkpoint_objects,
    update_signals,
)
from trainer.reward_signals.curiosity import CuriositySignal
from trainer.reward_signals.gail import GAILSignal
from trainer.reward_signals.rnd import RNDSignal

__all__ = [
    "CuriositySignal",
    "ExtrinsicSignal",
    "GAILSignal",
    "RNDSignal",
    "RewardSignal",
    "SignalBatch",
    "add_signal_rewards",
    "make_reward_signals",
    "signal_checkpoint_objects",
    "update_signals",
]


def make_reward_signals(
    brain_parameters: BrainParameters, settings: Mapping[RewardSignalType, RewardSignalSettings], seed: int = 0
) -> list[RewardSignal]:
    """One signal per ``reward_signals`` entry, in the order given (a learner's value heads follow it).

    Raises:
        NotSupportedKeyError: an entry whose settings class or options are not supported (e.g. ``use_vail``).
        ConfigKeyError: no signal at all.
        DemoError: GAIL's ``demo_path`` cannot be read for this behavior.
    """
    signals: list[RewardSignal] = []
    for kind, entry in settings.items():
        if kind is RewardSignalType.GAIL and isinstance(entry, GAILSettings):
            signals.append(GAILSignal(entry, brain_parameters, seed))
        elif kind is RewardSignalType.CURIOSITY and isinstance(entry, CuriositySettings):
            signals.append(CuriositySignal(entry, brain_parameters, seed))
        elif kind is RewardSignalType.RND and isinstance(entry, RNDSettings):
            signals.append(RNDSignal(entry, brain_parameters, seed))
        elif kind is RewardSignalType.EXTRINSIC:
            signals.append(ExtrinsicSignal(entry))
        else:
            raise NotSupportedKeyError(f"reward_signals.{kind.value}", f"{type(entry).__name__} is not supported here")
    if not signals:
        raise ConfigKeyError("reward_signals", "at least one reward signal is needed")
    return signals
