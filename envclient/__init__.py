"""The env-client SDK: connect a simulator to a stepstream processor."""

from envclient.session import ActionResult, EnvSession, StepRejectedError

__all__ = ["ActionResult", "EnvSession", "StepRejectedError"]
