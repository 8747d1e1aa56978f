"""Server interceptors of the processor: the stopping gate, the shared-token check and the log context.

Both run once per RPC, when the call arrives and before its handler: a Step stream pays them once
per session, never per step.

* ``TokenAuthInterceptor`` refuses a call without ``authorization: Bearer <token>`` (or with another
  token) with UNAUTHENTICATED. The refusal replaces the handler, so the servicer never sees the call:
  no session is opened, no subscription attached, no policy published. The gRPC health service is
  exempt (``EXEMPT_METHOD_PREFIXES``): it creates no state and reveals only SERVING / NOT_SERVING, and
  orchestrators' probes cannot always send metadata. ``stepstream health`` sends the token anyway.
* ``StoppingInterceptor`` refuses new calls of the named methods (the Step stream) with UNAVAILABLE
  once ``stop()`` was called: while the processor drains (``processor.server``), subscribers and
  trainers still reach it, but no new session opens whose flush would come too late.
* ``LogContextInterceptor`` sets the client id and behavior the client named in its metadata
  (``common.logs.identity_metadata``) as the log context of the call; grpc.aio runs interceptors and
  the handler in one ``contextvars.Context``, so every line the handler logs carries them.
* ``DecodeCheckInterceptor`` ends a call whose request bytes are not its message with
  INVALID_ARGUMENT (instead of grpc.aio's UNKNOWN and traceback).

Every refusal here sets the status and returns, never ``context.abort``: grpc.aio keeps the abort's
exception with the call, and with it the frame holding the request (``processor.servicer``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from common.errors import ProtocolError
from common.logs import BEHAVIOR_METADATA, CLIENT_ID_METADATA, set_log_context
from common.security import token_matches

log = logging.getLogger(__name__)

EXEMPT_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods callable without the token: the standard health service."""

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


def _metadata_value(details: grpc.HandlerCallDetails, key: str) -> str | None:
    for item_key, value in details.invocation_metadata or ():  # type: ignore[attr-defined]
        if item_key == key:
            return value if isinstance(value, str) else value.decode("ascii", errors="replace")
    return None


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, details: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind (streaming or not) as ``handler`` that only refuses: it never decodes the request."""

    async def abort(unused_request: Any, context: grpc.aio.ServicerContext) -> None:
        del unused_request
        context.set_code(code)
        context.set_details(details)

    codecs = {"request_deserializer": None, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort, **codecs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort, **codecs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort, **codecs)
    return grpc.unary_unary_rpc_method_handler(abort, **codecs)


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuse every call (health checks excepted) that does not carry the shared ``token``.

    Attributes:
        refused: calls refused so far (the metrics endpoint reports it).
    """

    def __init__(self, token: str, exempt_prefixes: tuple[str, ...] = EXEMPT_METHOD_PREFIXES) -> None:
        if not token:
            raise ValueError("an empty token would admit every call")
        self._token = token
        self._exempt = exempt_prefixes
        self.refused = 0

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        handler = await continuation(handler_call_details)  # a lookup only: nothing runs yet
        if handler is None or method.startswith(self._exempt):
            return handler
        if token_matches(handler_call_details.invocation_metadata, self._token):  # type: ignore[attr-defined]
            return handler
        self.refused += 1
        log.warning("%s refused: missing or wrong token", method)
        return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token (authorization: Bearer <token>)")


class StoppingInterceptor(grpc.aio.ServerInterceptor):
    """Once ``stop()`` was called, refuse new calls of ``methods`` with UNAVAILABLE (a client retries elsewhere or later).

    Attributes:
        refused: calls refused since ``stop()``.
    """

    def __init__(self, methods: tuple[str, ...]) -> None:
        self._methods = methods
        self._stopping = False
        self.refused = 0

    def stop(self) -> None:
        """Refuse every later call of the methods. Idempotent."""
        self._stopping = True

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or not self._stopping or handler_call_details.method not in self._methods:  # type: ignore[attr-defined]
            return handler
        self.refused += 1
        return _refusal(handler, grpc.StatusCode.UNAVAILABLE, "the processor is stopping")


class LogContextInterceptor(grpc.aio.ServerInterceptor):
    """Set the caller's client id and behavior, from its metadata, as the log context of the call."""

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        set_log_context(
            client_id=_metadata_value(handler_call_details, CLIENT_ID_METADATA),
            behavior=_metadata_value(handler_call_details, BEHAVIOR_METADATA),
        )
        return await continuation(handler_call_details)


class Undecodable:
    """What a request deserializer returns for bytes that are not the method's message."""

    def __init__(self, method: str, error: Exception) -> None:
        self.details = f"{method}: the request is not a valid message ({type(error).__name__}: {error})"


class DecodeCheckInterceptor(grpc.aio.ServerInterceptor):
    """End a call whose request bytes do not decode with INVALID_ARGUMENT and one log line.

    grpc.aio would end it UNKNOWN with a traceback. The deserializer of every method is wrapped: on a
    ``DecodeError`` a streaming request raises ``ProtocolError`` where the handler reads it (the
    servicer's status table maps it, and the handler logs it); a unary one yields an ``Undecodable``,
    which a wrapped behavior refuses, and logs, before the handler runs.
    """

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return _decode_checked(handler, handler_call_details.method)  # type: ignore[attr-defined]


def _decode_checked(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    decode = handler.request_deserializer
    codecs = {"response_serializer": handler.response_serializer}
    if handler.request_streaming:

        def decode_or_raise(data: bytes) -> Any:
            try:
                return decode(data)
            except DecodeError as err:  # the handler ends the stream with it, and logs it
                raise ProtocolError(Undecodable(method, err).details) from None

        make = grpc.stream_stream_rpc_method_handler if handler.response_streaming else grpc.stream_unary_rpc_method_handler
        behavior = handler.stream_stream if handler.response_streaming else handler.stream_unary
        return make(behavior, request_deserializer=decode_or_raise, **codecs)

    def decode_or_mark(data: bytes) -> Any:
        try:
            return decode(data)
        except DecodeError as err:
            return Undecodable(method, err)

    if handler.response_streaming:
        behavior = _checked_unary_stream(handler.unary_stream)
        return grpc.unary_stream_rpc_method_handler(behavior, request_deserializer=decode_or_mark, **codecs)
    inner = handler.unary_unary

    async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            return _refuse(request, context)
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer=decode_or_mark, **codecs)


def _refuse(undecodable: Undecodable, context: grpc.aio.ServicerContext) -> None:
    """Set INVALID_ARGUMENT and log it once; the caller returns (no message goes with a status other than OK)."""
    log.warning("%s", undecodable.details)
    context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
    context.set_details(undecodable.details)


def _checked_unary_stream(inner_stream: Callable[..., Any]) -> Callable[..., Any]:
    """``inner_stream`` behind the ``Undecodable`` check, in its own style: an async generator, or a
    coroutine that writes with ``context.write`` (as the health Watch does; grpc.aio refuses a mix)."""
    if not inspect.isasyncgenfunction(inner_stream):

        async def writing(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, Undecodable):
                return _refuse(request, context)
            return await inner_stream(request, context)

        return writing

    async def yielding(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            _refuse(request, context)
            return
        async for response in inner_stream(request, context):
            yield response

    return yielding
