"""The AgentProcessor gRPC servicer: translation only.

Each RPC decodes (``processor.wire``), calls the core (sessions, behaviors, assembly, topics) and
encodes. Errors raised by the core are mapped to gRPC status codes by ``STATUS_TABLE``, the one
place that does so; the offending stream ends with that status and every other session goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc

from common.errors import (
    ConfigError,
    DeadlineExceededError,
    IncompatibleVersionError,
    NotSupportedYetError,
    ProtocolError,
    StepstreamError,
    TopicClosedError,
    TopicFullError,
    UnknownBehaviorError,
)
from common.specs import ActionSpec
from processor.assembly import StepActions
from processor.behaviors import BehaviorTable
from processor.inference import Policy
from processor.sessions import Session, SessionTable
from processor.wire import decode_brain_info, decode_hello, encode_action_info
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Error type -> status code, most specific first. A ProtocolError flagged ``precondition`` (order
#: of calls, conflicting declarations) maps to FAILED_PRECONDITION instead of INVALID_ARGUMENT.
STATUS_TABLE: tuple[tuple[type[StepstreamError], grpc.StatusCode], ...] = (
    (UnknownBehaviorError, grpc.StatusCode.NOT_FOUND),
    (IncompatibleVersionError, grpc.StatusCode.FAILED_PRECONDITION),
    (NotSupportedYetError, grpc.StatusCode.UNIMPLEMENTED),
    (ProtocolError, grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError, grpc.StatusCode.FAILED_PRECONDITION),
    (TopicFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (TopicClosedError, grpc.StatusCode.UNAVAILABLE),
)


def status_for(error: StepstreamError) -> grpc.StatusCode:
    """The status code ``error`` ends its RPC with."""
    if isinstance(error, ProtocolError) and error.precondition and not isinstance(error, UnknownBehaviorError):
        return grpc.StatusCode.FAILED_PRECONDITION
    for error_type, code in STATUS_TABLE:
        if isinstance(error, error_type):
            return code
    return grpc.StatusCode.INTERNAL


class AgentProcessorServicer(pb_grpc.AgentProcessorServicer):
    """Serves env-client sessions (Step) and trainers (Subscribe, PublishPolicy, GetPolicyStatus)."""

    def __init__(self, behaviors: BehaviorTable, sessions: SessionTable) -> None:
        self.behaviors = behaviors
        self.sessions = sessions
        self.topics = behaviors.topics

    # -- env clients -----------------------------------------------------------------------------

    async def Step(
        self, request_iterator: AsyncIterator[pb.StepRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StepResponse]:
        session: Session | None = None
        try:
            async for request in request_iterator:
                if session is None:
                    session = self._open(request)
                    yield pb.StepResponse(hello_reply=pb.HelloReply(protocol_version=PROTOCOL_VERSION, session_id=session.session_id))
                else:
                    yield pb.StepResponse(action_info=await self._step(session, request))
        except StepstreamError as err:
            log.warning("session %s ends: %s", session.session_id if session else context.peer(), err)
            await context.abort(status_for(err), str(err))
        except asyncio.CancelledError:
            if session is None or not session.replaced:
                raise
            # A newer Hello with this client id took over: end this stream with a clear status.
            context.set_code(grpc.StatusCode.ABORTED)
            context.set_details(f"session {session.session_id} was replaced by a newer session of client '{session.client_id}'")
        finally:
            if session is not None:
                await self._close(session)

    def _open(self, request: pb.StepRequest) -> Session:
        if request.WhichOneof("payload") != "hello":
            raise ProtocolError("the first message of a Step stream must be a Hello", precondition=True)
        hello = decode_hello(request.hello)
        behaviors = [self.behaviors.declare(params) for params in hello.brain_parameters]
        session = self.sessions.open(hello.client_id, behaviors, asyncio.current_task())
        log.info("session %s opened by client '%s' for %s", session.session_id, hello.client_id, [b.name for b in behaviors])
        return session

    async def _step(self, session: Session, request: pb.StepRequest) -> pb.ActionInfo:
        if request.WhichOneof("payload") != "brain_info":
            raise ProtocolError(f"session {session.session_id}: a second Hello on one stream", precondition=True)
        behavior, assembler = session.behavior(request.brain_info.behavior_name)
        info = decode_brain_info(request.brain_info, behavior.params, session.session_id)
        out = await behavior.batcher.act(info.observations, info.action_mask)
        actions = StepActions(
            out.continuous_actions, out.discrete_actions, out.continuous_log_probs, out.discrete_log_probs, out.policy_version
        )
        cut = assembler.add(info, actions)
        session.steps += 1
        if cut:
            await behavior.publish(cut)
        return encode_action_info(behavior.name, out.env_continuous_actions, out.discrete_actions, out.policy_version)

    async def _close(self, session: Session) -> None:
        """Flush the session's partial trajectories (as interrupted) and forget it."""
        self.sessions.close(session)
        for name, trajectories in session.flush().items():
            try:
                await session.behaviors[name].publish(trajectories, flushed=True)
            except StepstreamError as err:
                log.warning("session %s: flushed trajectories of '%s' not published: %s", session.session_id, name, err)
        log.info("session %s closed after %d steps", session.session_id, session.steps)

    # -- trainers --------------------------------------------------------------------------------

    async def Subscribe(
        self, request_iterator: AsyncIterator[pb.SubscriberMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DeliveryBatch]:
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None or first.WhichOneof("payload") != "open":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the first message of a Subscribe stream must be SubscribeOpen")
            return
        name = first.open.behavior_name
        if not name or not first.open.subscriber_name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "SubscribeOpen needs a behavior_name and a subscriber_name")
            return
        settings = self.behaviors.settings
        try:
            subscription = self.topics.trajectories(name).subscribe(
                first.open.subscriber_name, settings.trajectory_queue_size, settings.full_policy, replace=True
            )
        except StepstreamError as err:
            await context.abort(status_for(err), str(err))
            return

        async def read_acks() -> None:
            async for message in requests:
                if message.WhichOneof("payload") == "ack":
                    subscription.ack(message.ack.delivery_tags)

        acks = asyncio.get_running_loop().create_task(read_acks())
        try:
            while not acks.done():
                deliveries = await subscription.aget(timeout_s=1.0)
                if deliveries:
                    batch = pb.DeliveryBatch()
                    for delivery in deliveries:
                        batch.deliveries.add(delivery_tag=delivery.tag, trajectory=delivery.item.to_proto())
                    yield batch
        except TopicClosedError:
            return
        finally:
            acks.cancel()
            subscription.detach()

    async def PublishPolicy(self, request: pb.PolicyUpdate, context: grpc.aio.ServicerContext) -> pb.PublishPolicyReply:
        name = request.behavior_name
        try:
            if not name or request.version < 0:
                raise ProtocolError(f"PolicyUpdate needs a behavior_name and a version >= 0 (got '{name}', {request.version})")
            policy = Policy.from_update(request)  # refuse an artifact the processor cannot run
            behavior = self.behaviors.get(name)
            if behavior is not None:
                spec = ActionSpec.from_proto(policy.action_spec)
                shapes = [s.shape for s in behavior.params.observation_specs]
                if spec != behavior.params.action_spec or [tuple(s) for s in policy.observation_shapes] != shapes:
                    raise ProtocolError(
                        f"behavior '{name}': policy version {request.version} takes obs {policy.observation_shapes} and acts {spec};"
                        f" the behavior declares obs {shapes} and {behavior.params.action_spec}",
                        precondition=True,
                    )
        except StepstreamError as err:
            await context.abort(status_for(err), str(err))
        topic = self.topics.policies(name)
        accepted = topic.publish(request, request.version)
        if not accepted:
            log.info("behavior '%s': policy version %d ignored (have %d)", name, request.version, topic.highest_version)
        return pb.PublishPolicyReply(accepted=accepted, current_version=topic.highest_version)

    async def GetPolicyStatus(self, request: pb.PolicyQuery, context: grpc.aio.ServicerContext) -> pb.PolicyStatus:
        behavior = self.behaviors.get(request.behavior_name)
        if behavior is not None:
            return behavior.status()
        return pb.PolicyStatus(
            behavior_name=request.behavior_name, highest_version=self.topics.policies(request.behavior_name).highest_version
        )
