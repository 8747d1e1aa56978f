"""The env-client SDK: connect a simulator to a stepstream processor (``envclient.session`` says how)."""

from common.errors import TrainingFinishedError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.session import ActionResult, EnvSession, MessageTooLargeError, SessionFinishedError, StepRejectedError

__all__ = [
    "ActionResult",
    "ActionSpec",
    "BrainParameters",
    "EnvSession",
    "MessageTooLargeError",
    "ObservationSpec",
    "SessionFinishedError",
    "StepRejectedError",
    "TrainingFinishedError",
]
