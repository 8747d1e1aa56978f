"""The AgentProcessor gRPC servicer: translation only.

Each RPC decodes (``processor.wire``), calls the core (sessions, behaviors, assembly, topics) and
encodes. Errors raised by the core are mapped to gRPC status codes by ``STATUS_TABLE``, the one
place that does so; the offending stream ends with that status and every other session goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import grpc

from common.errors import (
    ConfigError,
    DeadlineExceededError,
    IncompatibleVersionError,
    NotSupportedYetError,
    ProtocolError,
    SessionReplacedError,
    StepstreamError,
    TopicClosedError,
    TopicFullError,
    UnknownBehaviorError,
)
from common.specs import ActionSpec
from common.topics import Delivery, Subscription
from common.trajectory import Trajectory
from processor.assembly import StepActions
from processor.behaviors import BehaviorTable
from processor.inference import Policy
from processor.sessions import Session, SessionTable
from processor.wire import decode_brain_info, decode_hello, encode_action_info
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: A DeliveryBatch stays below this, well under the 16 MiB message limit of client and server.
MAX_BATCH_BYTES = 4 * 1024 * 1024

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
    (SessionReplacedError, grpc.StatusCode.ABORTED),
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
                    session = await self._open(request)
                    yield pb.StepResponse(
                        hello_reply=pb.HelloReply(protocol_version=PROTOCOL_VERSION, session_id=session.session_id)
                    )
                else:
                    yield pb.StepResponse(action_info=await self._step(session, request))
        except StepstreamError as err:
            log.warning("session %s ends: %s", session.session_id if session else context.peer(), err)
            await context.abort(status_for(err), str(err))
        except asyncio.CancelledError:
            if session is None:
                raise
            # The client went away or the server is stopping: end with a clear status and flush
            # (below) instead of re-raising.
            context.set_code(grpc.StatusCode.UNAVAILABLE)
            context.set_details(f"session {session.session_id} was cancelled (client gone or processor stopping)")
        finally:
            if session is not None and not session.closed:
                await self._close(session)

    async def _open(self, request: pb.StepRequest) -> Session:
        if request.WhichOneof("payload") != "hello":
            raise ProtocolError("the first message of a Step stream must be a Hello", precondition=True)
        hello = decode_hello(request.hello)
        behaviors = [self.behaviors.declare(params) for params in hello.brain_parameters]
        session, replaced = self.sessions.open(hello.client_id, behaviors, asyncio.current_task())
        log.info("session %s opened by client '%s' for %s", session.session_id, hello.client_id, [b.name for b in behaviors])
        if replaced is not None:
            await self._close(replaced)  # its agents are handled as at disconnect, now
        return session

    @staticmethod
    def _check_live(session: Session) -> None:
        if session.replaced:
            raise SessionReplacedError(
                f"session {session.session_id} was replaced by a newer session of client '{session.client_id}'"
            )

    async def _step(self, session: Session, request: pb.StepRequest) -> pb.ActionInfo:
        self._check_live(session)
        if request.WhichOneof("payload") != "brain_info":
            raise ProtocolError(f"session {session.session_id}: a second Hello on one stream", precondition=True)
        behavior, assembler = session.behavior(request.brain_info.behavior_name)
        info = decode_brain_info(request.brain_info, behavior.params, session.session_id)
        out = await behavior.batcher.act(info.observations, info.action_mask)
        self._check_live(session)  # replaced while waiting: its agents were flushed, this row is not theirs any more
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
        try:
            for name, trajectories in session.flush().items():
                try:
                    await session.behaviors[name].publish(trajectories, flushed=True)
                except StepstreamError as err:
                    log.warning("session %s: flushed trajectories of '%s' not published: %s", session.session_id, name, err)
        finally:  # also when a publish blocked on a full queue is cancelled (the client gave up closing)
            log.info("session %s closed after %d steps", session.session_id, session.steps)

    # -- trainers --------------------------------------------------------------------------------

    async def Subscribe(
        self, request_iterator: AsyncIterator[pb.SubscriberMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DeliveryBatch]:
        requests = aiter(request_iterator)
        try:
            subscription = self._attach(await anext(requests, None))
        except StepstreamError as err:
            await context.abort(status_for(err), str(err))
            return

        async def read_acks() -> None:
            async for message in requests:
                if message.WhichOneof("payload") != "ack":
                    raise ProtocolError("a Subscribe stream takes one SubscribeOpen, then only Acks", precondition=True)
                subscription.ack(message.ack.delivery_tags)

        # The stream ends when the client half-closes (or breaks) its side: race each take against that.
        acks = asyncio.ensure_future(read_acks())
        taking: asyncio.Future[list[Delivery[Trajectory]]] | None = None
        try:
            while True:
                taking = asyncio.ensure_future(subscription.aget())
                await asyncio.wait((taking, acks), return_when=asyncio.FIRST_COMPLETED)
                if not taking.done():
                    break
                for batch in delivery_batches(taking.result()):
                    yield batch
            error = acks.exception()
            if isinstance(error, StepstreamError):
                await context.abort(status_for(error), str(error))
        except TopicClosedError:
            if subscription.topic.closed:
                return  # the processor is stopping
            # A newer subscriber of this name took over: say so, so this one does not resubscribe in turn.
            await context.abort(
                grpc.StatusCode.ABORTED, f"subscriber '{subscription.subscriber_name}' was replaced by a newer subscription"
            )
        finally:
            for task in (taking, acks):
                if task is not None:
                    task.cancel()
            subscription.detach()  # requeues the unacked deliveries for the next subscriber of this name

    def _attach(self, first: pb.SubscriberMessage | None) -> Subscription[Trajectory]:
        if first is None or first.WhichOneof("payload") != "open":
            raise ProtocolError("the first message of a Subscribe stream must be SubscribeOpen", precondition=True)
        if not first.open.behavior_name or not first.open.subscriber_name:
            raise ProtocolError("SubscribeOpen needs a behavior_name and a subscriber_name")
        name = first.open.behavior_name
        return self.topics.trajectories(name).subscribe(
            first.open.subscriber_name, self.behaviors.queue_size(name), self.behaviors.settings.full_policy, replace=True
        )

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
                        f"behavior '{name}': policy version {request.version} takes obs {policy.observation_shapes}"
                        f" and acts {spec}; the behavior declares obs {shapes} and {behavior.params.action_spec}",
                        precondition=True,
                    )
            topic = self.topics.policies(name)
            if behavior is not None:
                behavior.loaded(request.version, request, policy)  # spares the behavior a second load
            accepted = topic.publish(request, request.version)
        except StepstreamError as err:
            await context.abort(status_for(err), str(err))
        if not accepted:
            log.info("behavior '%s': policy version %d ignored (have %d)", name, request.version, topic.highest_version)
        return pb.PublishPolicyReply(accepted=accepted, current_version=topic.highest_version)

    async def GetPolicyStatus(self, request: pb.PolicyQuery, context: grpc.aio.ServicerContext) -> pb.PolicyStatus:
        name = request.behavior_name
        if not name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "PolicyQuery needs a behavior_name")
        behavior = self.behaviors.get(name)
        if behavior is not None:
            return behavior.status()
        return pb.PolicyStatus(behavior_name=name, highest_version=self.topics.policies(name).highest_version)


def delivery_batches(deliveries: list[Delivery[Trajectory]], max_bytes: int = MAX_BATCH_BYTES) -> Iterator[pb.DeliveryBatch]:
    """Encode deliveries into batches of at most ``max_bytes`` each (a lone larger trajectory goes alone)."""
    batch, size = pb.DeliveryBatch(), 0
    for delivery in deliveries:
        trajectory = delivery.item.to_proto()
        item_bytes = trajectory.ByteSize()
        if batch.deliveries and size + item_bytes > max_bytes:
            yield batch
            batch, size = pb.DeliveryBatch(), 0
        batch.deliveries.add(delivery_tag=delivery.tag, trajectory=trajectory)
        size += item_bytes
    if batch.deliveries:
        yield batch
