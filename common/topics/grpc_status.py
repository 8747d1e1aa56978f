"""gRPC status -> ``StepstreamError``: how a trainer-side client reads the processor's refusals.

The inverse of the processor's one status table (``processor.servicer.STATUS_TABLE``); kept apart from
``grpc_transport`` so that module stays about the streams.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import cast

import grpc

from common.errors import (
    DeadlineExceededError,
    NotSupportedYetError,
    ProtocolError,
    StepstreamError,
    SubscriberBusyError,
    TopicClosedError,
    TopicFullError,
    TrainingFinishedError,
    UnknownBehaviorError,
)

TRAINING_FINISHED_STATUS = grpc.StatusCode.OUT_OF_RANGE
"""The status a session ends with once every behavior it declares has finished training (``FinishTraining``):
an env client reads it as "done" and exits 0 (never a reconnect). OUT_OF_RANGE, as gRPC defines it for
"iterating past the end": the run's step budget is spent."""


class GrpcStatusError(StepstreamError):
    """The processor ended a call with a status that no more specific error type covers."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


#: Status code -> the error the processor's status table started from (its inverse mapping).
#: UNAVAILABLE (processor gone or stopping) and CANCELLED end a stream: ``TopicClosedError``.
_ERROR_FOR_STATUS: dict[grpc.StatusCode, Callable[[str], StepstreamError]] = {
    grpc.StatusCode.UNAVAILABLE: TopicClosedError,
    grpc.StatusCode.CANCELLED: TopicClosedError,
    grpc.StatusCode.NOT_FOUND: UnknownBehaviorError,
    grpc.StatusCode.ALREADY_EXISTS: SubscriberBusyError,
    grpc.StatusCode.INVALID_ARGUMENT: ProtocolError,
    grpc.StatusCode.FAILED_PRECONDITION: functools.partial(ProtocolError, precondition=True),
    grpc.StatusCode.UNIMPLEMENTED: NotSupportedYetError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: TopicFullError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    TRAINING_FINISHED_STATUS: TrainingFinishedError,
}


def error_from_rpc(error: grpc.RpcError, what: str) -> StepstreamError:
    """The ``StepstreamError`` for a failed call; ``GrpcStatusError`` for a status without a better type."""
    call = cast(grpc.Call, error)
    code = call.code()
    message = f"{what}: {code.name}: {call.details()}"
    make = _ERROR_FOR_STATUS.get(code)
    return make(message) if make is not None else GrpcStatusError(message, code)
