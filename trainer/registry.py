"""``trainer_type`` -> Learner class. Imported lazily: a process builds only the learners it runs."""

from __future__ import annotations

import importlib
from typing import Any

from common.config import BehaviorSettings, ConfigKeyError, NotSupportedKeyError, TrainerType
from common.specs import BrainParameters
from trainer.learner import Learner

LEARNERS: dict[TrainerType, str] = {
    TrainerType.PPO: "trainer.ppo:PPOLearner",
    TrainerType.SAC: "trainer.sac:SACLearner",
    TrainerType.BC: "trainer.bc:BCLearner",
    TrainerType.POCA: "trainer.poca:POCALearner",
}
"""Where each trainer type's Learner lives, as ``module:Class``."""
RECURRENT_LEARNERS: dict[TrainerType, str] = {
    TrainerType.PPO: "trainer.ppo_recurrent:RecurrentPPOLearner",
}
"""Where each trainer type's Learner with ``network_settings.memory`` lives; a type not here refuses memory."""


def learner_class(trainer_type: TrainerType) -> Any:
    """The Learner class of ``trainer_type``, importing its module now.

    Its constructor is ``(brain_parameters, settings, seed=0)``.

    Raises:
        ConfigKeyError: no learner is registered for ``trainer_type``.
    """
    target = LEARNERS.get(TrainerType(trainer_type))
    if target is None:
        known = ", ".join(t.value for t in LEARNERS)
        raise ConfigKeyError("trainer_type", f"no learner for {trainer_type!r} (known: {known})")
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_learner(brain_parameters: BrainParameters, settings: BehaviorSettings, seed: int = 0) -> Learner:
    """A new learner for one behavior, of the class its ``settings.trainer_type`` names (``RECURRENT_LEARNERS``'
    with ``network_settings.memory``).

    Raises:
        NotSupportedKeyError: ``network_settings.memory`` for a trainer type that does not learn sequences yet.
    """
    if settings.network_settings.memory is None:
        learner: Learner = learner_class(settings.trainer_type)(brain_parameters, settings, seed)
        return learner
    target = RECURRENT_LEARNERS.get(settings.trainer_type)
    if target is None:
        detail = f"not supported yet by trainer_type {settings.trainer_type.value!r} (ppo learns sequences)"
        raise NotSupportedKeyError("network_settings.memory", detail)
    module_name, class_name = target.split(":")
    recurrent: Learner = getattr(importlib.import_module(module_name), class_name)(brain_parameters, settings, seed)
    return recurrent
