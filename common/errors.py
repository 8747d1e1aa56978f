"""The project's error types.

The core raises these; exactly one table in the processor's servicer layer maps them to gRPC
status codes. Code tells them apart by type, never by message text. This module imports nothing
from the project, so every layer (``protos`` included) may raise its types.
"""

from __future__ import annotations

import asyncio


class StepstreamError(Exception):
    """Base of every error stepstream raises on purpose."""


class ConfigError(StepstreamError):
    """A configuration file or flag is wrong; the message names the dotted key."""


class NotSupportedYetError(StepstreamError):
    """A valid ML-Agents setting, or a declared spec (image observations, memory), not implemented yet."""


class ProtocolError(StepstreamError):
    """A peer sent a malformed message, or a well-formed one at the wrong time.

    ``FAILED_PRECONDITION`` rather than ``INVALID_ARGUMENT`` when ``precondition`` is true: the
    message itself was fine, but it conflicts with the order of calls or an earlier declaration.
    """

    def __init__(self, message: str, *, precondition: bool = False) -> None:
        super().__init__(message)
        self.precondition = precondition


class UnknownBehaviorError(ProtocolError):
    """A message names a behavior that was never declared."""


class IncompatibleVersionError(ProtocolError):
    """The peer speaks a protocol version this build cannot serve."""

    def __init__(self, message: str) -> None:
        super().__init__(message, precondition=True)


class BufferException(StepstreamError):
    """A buffer call is inconsistent: unequal field lengths, a batch larger than the data, ..."""


class TopicClosedError(StepstreamError):
    """A publish or take on a topic that has been closed."""


class SubscriberBusyError(ProtocolError):
    """A named subscriber queue is attached to another live subscription: the holder keeps it (retry later)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, precondition=True)


class TopicFullError(StepstreamError):
    """A publish found the topic full and its policy is to fail rather than wait or drop."""


class PublishInDoubtError(TopicFullError):
    """A publish gave up (its timeout passed, or its topic closed) after an attempt the broker never answered.

    The broker may have stored the trajectory (that attempt, or an earlier retry with the same
    ``Nats-Msg-Id``), and its subscribers may take it in: neither published nor dropped, but "in doubt".
    A ``TopicFullError`` to the env client (RESOURCE_EXHAUSTED), like a publish that found no room.
    """


class PublishInDoubtCancelledError(asyncio.CancelledError):
    """The cancellation of a publish that was awaiting the broker's answer: as ``PublishInDoubtError``, the
    broker may have stored the trajectory. A ``CancelledError``, so the cancellation goes on as any other."""


IN_DOUBT: tuple[type[BaseException], ...] = (PublishInDoubtError, PublishInDoubtCancelledError)
"""What a publish raises when the broker may have stored the trajectory that it failed to publish."""


class ResourceLimitError(StepstreamError):
    """A peer asked the processor to hold more than a configured cap allows; the message gives the numbers."""


class DeadlineExceededError(StepstreamError):
    """An operation did not finish within its stated timeout."""


class SessionReplacedError(StepstreamError):
    """A newer Hello with the same client id took over this session."""


class PolicyVersionError(StepstreamError):
    """A policy version cannot be followed: the next one would pass ``common.topics.base.MAX_POLICY_VERSION``."""


class TrainingFinishedError(StepstreamError):
    """The behavior's trainer reached max_steps: its env clients are done (gRPC OUT_OF_RANGE, not a failure)."""
