"""The AgentProcessor gRPC servicer: translation only.

Each RPC decodes (``processor.wire``), calls the core (sessions, behaviors, assembly, topics) and
encodes. Errors raised by the core are mapped to gRPC status codes by ``STATUS_TABLE``, the one
place that does so, and their messages bounded by ``status_details`` (``refuse``); the offending
stream ends with that status and every other session goes on.

A refused request is not kept (a peer could make the processor hold one 16 MiB message per refusal):
streams are read with ``context.read()``, not grpc.aio's request iterator, whose async generator keeps
the last request alive with the call; and a refusal sets the status and returns instead of
``context.abort``, whose exception grpc.aio keeps with the call, traceback and handler frames (and their
requests) included. Measured on a real processor: 20 refused 16 MiB Hellos grew its RSS 202 -> 907 MB
before, and not beyond allocator slack after (``tests/integration/test_refusal_memory.py``).

Queries (Subscribe, PublishPolicy, GetPolicyStatus) name a behavior; one the processor does not know
(``BehaviorTable.known``) is refused with NOT_FOUND before anything is created for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

import grpc

from common.errors import (
    ConfigError,
    DeadlineExceededError,
    IncompatibleVersionError,
    NotSupportedYetError,
    ProtocolError,
    ResourceLimitError,
    SessionReplacedError,
    StepstreamError,
    SubscriberBusyError,
    TopicClosedError,
    TopicFullError,
    TrainingFinishedError,
    UnknownBehaviorError,
)
from common.topics import MAX_POLICY_VERSION, Delivery, Subscription
from common.topics.grpc_status import TRAINING_FINISHED_STATUS
from common.topics.grpc_transport import MAX_MESSAGE_BYTES
from common.trajectory import Trajectory
from processor.assembly import StepActions
from processor.behaviors import Behavior, BehaviorTable, highest_acceptable_version
from processor.environment_parameters import EnvironmentParameterService, accepts_environment_parameters
from processor.groups import GroupInfo, SessionGroups
from processor.inference import ActionOutput, Policy
from processor.opponents import SelfPlay
from processor.sessions import Session, SessionTable
from processor.wire import (
    MAX_BEHAVIOR_NAME_BYTES,
    DecodedBrainInfo,
    check_behavior_name,
    check_name,
    check_trajectory_fits,
    decode_brain_info,
    decode_hello,
    encode_action_info,
    quoted,
)
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: A DeliveryBatch stays below this, well under the 16 MiB message limit of client and server.
MAX_BATCH_BYTES = 4 * 1024 * 1024

MAX_STATUS_DETAILS_BYTES = 2048
"""The longest status message (UTF-8 bytes) an RPC ends with, and a refusal's log line quotes. gRPC
sends it percent-encoded in a trailer (up to 3 bytes per byte), and a client refuses trailers past
its metadata limit (8 KiB by default) with RESOURCE_EXHAUSTED instead of the real status."""

RELEASE_PER_TURN = 16
"""Behaviors a closed session releases per turn of session work (``AgentProcessorServicer._turn``)."""

MAX_LOGGED_NAMES_BYTES = 512
"""The longest list of behavior names a session's opening log line quotes."""

MAX_SUBSCRIBER_NAME_BYTES = MAX_BEHAVIOR_NAME_BYTES
"""The longest subscriber name (UTF-8 bytes) a SubscribeOpen may carry."""

#: Error type -> status code, most specific first. A ProtocolError flagged ``precondition`` (order
#: of calls, conflicting declarations) maps to FAILED_PRECONDITION instead of INVALID_ARGUMENT.
STATUS_TABLE: tuple[tuple[type[StepstreamError], grpc.StatusCode], ...] = (
    (UnknownBehaviorError, grpc.StatusCode.NOT_FOUND),
    (SubscriberBusyError, grpc.StatusCode.ALREADY_EXISTS),
    (IncompatibleVersionError, grpc.StatusCode.FAILED_PRECONDITION),
    (NotSupportedYetError, grpc.StatusCode.UNIMPLEMENTED),
    (ProtocolError, grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError, grpc.StatusCode.FAILED_PRECONDITION),
    (TopicFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ResourceLimitError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeadlineExceededError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (SessionReplacedError, grpc.StatusCode.ABORTED),
    (TopicClosedError, grpc.StatusCode.UNAVAILABLE),
    (TrainingFinishedError, TRAINING_FINISHED_STATUS),
)


def status_details(message: str, max_bytes: int = MAX_STATUS_DETAILS_BYTES) -> str:
    """``message`` cut to at most ``max_bytes`` UTF-8 bytes, ending in ``... (N more)`` (N bytes) if it was cut."""
    if len(message) <= max_bytes // 4:  # at most 4 bytes per character: surely short enough
        return message
    data = message.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return message
    head = data[: max_bytes - 32].decode("utf-8", "ignore")  # room for the suffix; a cut character is dropped
    return f"{head}... ({len(data) - len(head.encode('utf-8', 'surrogatepass'))} more)"


def refuse(context: grpc.aio.ServicerContext, error: StepstreamError) -> None:
    """Set ``error``'s status code and bounded message on the RPC; the handler then returns (module docstring).

    Not ``context.abort``: its exception, kept by grpc.aio with the call, holds the handler's frames and so
    the request that was refused.
    """
    context.set_code(status_for(error))
    context.set_details(status_details(str(error)))


def status_for(error: StepstreamError) -> grpc.StatusCode:
    """The status code ``error`` ends its RPC with."""
    own_code = (UnknownBehaviorError, SubscriberBusyError)
    if isinstance(error, ProtocolError) and error.precondition and not isinstance(error, own_code):
        return grpc.StatusCode.FAILED_PRECONDITION
    for error_type, code in STATUS_TABLE:
        if isinstance(error, error_type):
            return code
    return grpc.StatusCode.INTERNAL


class AgentProcessorServicer(pb_grpc.AgentProcessorServicer):
    """Serves env-client sessions (Step) and trainers (Subscribe, PublishPolicy, GetPolicyStatus)."""

    def __init__(self, behaviors: BehaviorTable, sessions: SessionTable, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        """``max_message_bytes``: the server's send limit; a trajectory must also fit the trainers' (``MAX_MESSAGE_BYTES``)."""
        self.behaviors = behaviors
        self.sessions = sessions
        self.topics = behaviors.topics
        self.max_message_bytes = max_message_bytes
        """The server's receive limit, told to each env client in its HelloReply (the SDK measures against it)."""
        self.max_trajectory_bytes = min(max_message_bytes, MAX_MESSAGE_BYTES)
        self.environment_parameters: EnvironmentParameterService | None = None
        """The run's curriculum and samplers, served to clients that ask (``processor.environment_parameters``)."""
        self.self_play = SelfPlay.from_settings(behaviors.settings, self.topics)
        """Which team learns, and what each opponent team acts with (``processor.opponents``)."""
        self._turns = asyncio.Lock()
        """Held by the session work that takes turns (``_turn``)."""
        # The settings are frozen: read once, not per step.
        self._max_agents_per_brain_info = behaviors.settings.max_agents_per_brain_info

    @property
    def max_trajectory_bytes(self) -> int:
        """The largest DeliveryBatch of one trajectory both ends pass; Hello refuses what could exceed it, and
        environment stats ride a trajectory only within it (``BehaviorTable.max_trajectory_bytes``)."""
        return self.behaviors.max_trajectory_bytes

    @max_trajectory_bytes.setter
    def max_trajectory_bytes(self, value: int) -> None:
        self.behaviors.max_trajectory_bytes = value
        for behavior in self.behaviors.values():
            behavior.max_trajectory_bytes = value

    # -- env clients -----------------------------------------------------------------------------

    async def Step(
        self, request_iterator: AsyncIterator[pb.StepRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StepResponse]:
        del request_iterator  # read with context.read(), which keeps no request past its step (module docstring)
        session: Session | None = None
        parameters = self.environment_parameters
        if parameters is not None and not accepts_environment_parameters(context.invocation_metadata()):
            parameters = None  # an older client: it would take the message for its step's answer
        parameters_sent = -1  # the parameters' version this client has (processor.environment_parameters)
        try:
            while (request := await context.read()) is not grpc.aio.EOF:
                if session is None:
                    session = await self._open(request)
                    response = pb.StepResponse(
                        hello_reply=pb.HelloReply(
                            protocol_version=PROTOCOL_VERSION,
                            session_id=session.session_id,
                            max_message_bytes=self.max_message_bytes,
                        )
                    )
                else:
                    response = pb.StepResponse(action_info=await self._step(session, request))
                del request  # not held while the client takes its time with the next one
                if parameters is not None and parameters_sent < parameters.version:  # before the answer it precedes
                    yield pb.StepResponse(environment_parameters=parameters.message(parameters_sent))
                    parameters_sent = parameters.version
                yield response
        except StepstreamError as err:
            level = logging.INFO if isinstance(err, TrainingFinishedError) else logging.WARNING  # the run's normal end
            log.log(level, "session %s ends: %s", session.session_id if session else context.peer(), status_details(str(err)))
            refuse(context, err)
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

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """Take the one turn of session work (a Hello's checks or declarations, a closed session's release) and
        hold it across one event-loop iteration before the piece runs: so each iteration runs at most one such
        piece, and a burst of them (157 Hellos of 64 behaviors, some 10 ms each) delays a running session's
        step by one piece, not by all of them. Nothing awaits after the piece: a cancel lands before it or not
        at all."""
        async with self._turns:
            await asyncio.sleep(0)
            yield

    async def _open(self, request: pb.StepRequest) -> Session:
        if request.WhichOneof("payload") != "hello":
            raise ProtocolError("the first message of a Step stream must be a Hello", precondition=True)
        async with self._turn():
            hello = decode_hello(request.hello)
            self._check_training(hello.client_id, [p.behavior_name for p in hello.brain_parameters])
            for params in hello.brain_parameters:  # before anything is declared
                time_horizon = self.behaviors.runtime(params.behavior_name).time_horizon
                check_trajectory_fits(params, time_horizon, self.max_trajectory_bytes)
        async with self._turn():
            behaviors: list[Behavior] = []
            try:
                for params in hello.brain_parameters:
                    behaviors.append(self.behaviors.declare(params))
            except StepstreamError:
                self.behaviors.release(behaviors)  # those this Hello created and no session holds
                raise
            max_agents = self.behaviors.settings.max_agents_per_session
            session, replaced = self.sessions.open(hello.client_id, behaviors, asyncio.current_task(), max_agents)
            self.self_play.join(session, hello.team_ids)
        if log.isEnabledFor(logging.INFO):
            names = status_details(str([b.name for b in behaviors]), MAX_LOGGED_NAMES_BYTES)
            log.info("session %s opened by client '%s' for %s", session.session_id, hello.client_id, names)
        if replaced is not None:
            await self._close(replaced)  # its agents are handled as at disconnect, now
        return session

    @staticmethod
    def _check_live(session: Session) -> None:
        if session.replaced:
            raise SessionReplacedError(
                f"session {session.session_id} was replaced by a newer session of client '{session.client_id}'"
            )

    def _check_training(self, who: str, names: list[str]) -> None:
        """End a session (or refuse a Hello) once its behaviors and every other have finished training
        (``BehaviorTable.sessions_end``); until then a finished behavior is served on with its last policy."""
        if self.behaviors.sessions_end(names):
            raise TrainingFinishedError(f"training of {', '.join(map(quoted, names))} finished; {who} can end")

    async def _step(self, session: Session, request: pb.StepRequest) -> pb.ActionInfo:
        """One BrainInfo answered: decoded and checked, acted on, its rows assembled and the cut trajectories
        published. An opponent team's rows (self-play) are acted on and counted, never assembled."""
        behavior, info, groups = self._decode_step(session, request)
        if self.self_play.behaviors and (opponents := self.self_play.opponents_of(session, behavior.name)) is not None:
            out = await self.self_play.act_for_opponent(opponents, session, info.observations, info.action_mask)
            self._check_live(session)
            session.steps += 1  # an opponent's rows are counted there, never assembled
            return encode_action_info(behavior.name, out.env_continuous_actions, out.discrete_actions, out.policy_version)
        out = await self._act(session, behavior, info)
        if self.self_play.behaviors and self.self_play.opponents_of(session, behavior.name) is not None:
            # the team stopped learning while this step waited: its trajectories were cut at the change
            return encode_action_info(behavior.name, out.env_continuous_actions, out.discrete_actions, out.policy_version)
        await self._assemble(session, behavior, info, groups, out)
        return encode_action_info(behavior.name, out.env_continuous_actions, out.discrete_actions, out.policy_version)

    def _decode_step(self, session: Session, request: pb.StepRequest) -> tuple[Behavior, DecodedBrainInfo, GroupInfo | None]:
        """The request's behavior, its checked BrainInfo and group fields; the environment stats taken."""
        self._check_live(session)
        if self.behaviors.finished:  # per step: no message or list is built while every behavior trains
            self._check_training(f"session {session.session_id}", list(session.behaviors))
        if request.WhichOneof("payload") != "brain_info":  # one test on the usual path
            if request.HasField("hello"):
                raise ProtocolError(f"session {session.session_id}: a second Hello on one stream", precondition=True)
            raise ProtocolError(f"session {session.session_id}: a StepRequest with no payload (neither hello nor brain_info)")
        brain_info = request.brain_info
        behavior = session.behavior(brain_info.behavior_name)
        info = decode_brain_info(brain_info, behavior.params, session.session_id, self._max_agents_per_brain_info)
        groups = None
        if brain_info.HasField("group_ids") or brain_info.HasField("group_rewards"):  # processor.groups
            session.groups = session.groups or SessionGroups(session.session_id)
            groups = session.groups.decode(
                brain_info, info, behavior.params, behavior.runtime.time_horizon, self.max_trajectory_bytes
            )
        if info.environment_stats:  # for the behavior's trainer summaries (common.environment_stats)
            behavior.add_environment_stats(info.environment_stats)
        return behavior, info, groups

    async def _act(self, session: Session, behavior: Behavior, info: DecodedBrainInfo) -> ActionOutput:
        """The behavior's batched forward pass on the rows, with each agent's held noise and recurrent state."""
        held = session.noise.get(behavior.name)
        noise = None if held is None else held.draw(info.agent_ids, info.done)
        assembler = session.assemblers.get(behavior.name)  # made at the first agent: none held yet means zeros
        memories = None if assembler is None else assembler.memories(info.agent_ids)  # None without memory
        out = await behavior.batcher.act(info.observations, info.action_mask, noise, memories)
        self._check_live(session)  # replaced while waiting: its agents were flushed, this row is not theirs any more
        session.steps += 1
        return out

    async def _assemble(
        self, session: Session, behavior: Behavior, info: DecodedBrainInfo, groups: GroupInfo | None, out: ActionOutput
    ) -> None:
        """Pair the rows with their actions (``processor.assembly``, ``processor.groups``), feed the curricula and
        publish what was cut."""
        actions = StepActions(
            out.continuous_actions, out.discrete_actions, out.continuous_log_probs, out.discrete_log_probs, out.policy_version,
            out.memories, out.next_memories,
        )  # fmt: skip
        cut = session.assembler(behavior).add(info, actions) if len(info.agent_ids) else None
        if session.groups is not None and session.groups.active(behavior.name):
            session.groups.add(behavior.name, info, groups, actions, cut or [])
        if self.environment_parameters is not None:
            self._observe_parameters(behavior, cut or [])
        if cut:
            changed = self.self_play.learner_cut(behavior.name, cut)  # rated before publishing: the ELO rides along
            await behavior.publish(cut)
            for other, trajectories in changed:  # a team change cut the old learning team's trajectories
                await other.publish(trajectories)

    def _observe_parameters(self, behavior: Behavior, cut: list[Trajectory]) -> None:
        """Feed the curriculum this step's ended episodes and the acting trainer step; the lessons ride on trajectories."""
        parameters = self.environment_parameters
        assert parameters is not None
        policy = behavior.batcher.policy
        parameters.observe(behavior.name, cut, None if policy is None else policy.trainer_step)
        if cut:
            behavior.add_environment_stats(parameters.lesson_stats())

    async def _close(self, session: Session) -> None:
        """Flush the session's partial trajectories (as interrupted) and forget it."""
        self.sessions.close(session)
        self.self_play.leave(session)
        try:
            async for name, trajectories in session.flush():  # in batches, yielding to other sessions
                if session.groups is not None:
                    session.groups.flushed(name, trajectories)
                try:
                    await session.behaviors[name].publish(trajectories, flushed=True)
                except StepstreamError as err:
                    log.warning("session %s: flushed trajectories of '%s' not published: %s", session.session_id, name, err)
        finally:  # also when a publish blocked on a full queue is cancelled (the client gave up closing)
            log.info("session %s closed after %d steps", session.session_id, session.steps)
            behaviors = list(session.behaviors.values())
            try:  # those no live session declares any more, a few per turn (each some 0.1 ms)
                for start in range(0, len(behaviors), RELEASE_PER_TURN):
                    async with self._turn():
                        self.behaviors.release(behaviors[start : start + RELEASE_PER_TURN])
            except asyncio.CancelledError:  # cancelled waiting for its turn (release is idempotent)
                self.behaviors.release(behaviors)
                raise

    # -- trainers --------------------------------------------------------------------------------

    async def Subscribe(
        self, request_iterator: AsyncIterator[pb.SubscriberMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DeliveryBatch]:
        del request_iterator  # read with context.read() (module docstring)
        try:
            first = await context.read()
            subscription = self._attach(None if first is grpc.aio.EOF else first)
        except StepstreamError as err:
            log.warning("subscription from %s refused: %s", context.peer(), status_details(str(err)))
            refuse(context, err)
            return
        finally:
            first = None

        async def read_acks() -> None:
            while (message := await context.read()) is not grpc.aio.EOF:
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
                undeliverable: list[tuple[Delivery[Trajectory], int]] = []
                batches = delivery_batches(taking.result(), max_item_bytes=self.max_trajectory_bytes, too_large=undeliverable)
                for batch in batches:
                    yield batch
                if undeliverable:
                    self._drop_undeliverable(subscription, undeliverable)
            error = acks.exception()
            if isinstance(error, StepstreamError):
                log.warning("subscriber '%s' ends: %s", subscription.subscriber_name, status_details(str(error)))
                refuse(context, error)
        except TopicClosedError:
            if subscription.topic.closed:
                return  # the processor is stopping
            # A newer subscriber of this name took over: say so, so this one does not resubscribe in turn.
            context.set_code(grpc.StatusCode.ABORTED)
            context.set_details(f"subscriber '{subscription.subscriber_name}' was replaced by a newer subscription")
        finally:
            for task in (taking, acks):
                if task is not None:
                    task.cancel()
            subscription.detach()  # requeues the unacked deliveries for the next subscriber of this name

    def _drop_undeliverable(
        self, subscription: Subscription[Trajectory], dropped: list[tuple[Delivery[Trajectory], int]]
    ) -> None:
        """Ack (so never redeliver) and count trajectories too large for any message: requeued, they would
        be retried first forever and block every later one. Hello's ``check_trajectory_fits`` prevents them."""
        subscription.ack(d.tag for d, _ in dropped)
        for delivery, size in dropped:
            trajectory = delivery.item
            behavior = self.behaviors.get(trajectory.behavior_name)
            log.error(
                "trajectory %s/%d/%d of behavior %s (%d experiences) encodes to %d bytes, over the %d-byte message"
                " limit: dropped, it can never be delivered",
                quoted(trajectory.id.session_id), trajectory.id.agent_id, trajectory.id.sequence,
                quoted(trajectory.behavior_name), trajectory.length, size, self.max_trajectory_bytes,
            )  # fmt: skip
            if behavior is not None:
                behavior.counters.undeliverable_trajectories += 1
                behavior.counters.undeliverable_experiences += trajectory.length

    def _attach(self, first: pb.SubscriberMessage | None) -> Subscription[Trajectory]:
        if first is None or first.WhichOneof("payload") != "open":
            raise ProtocolError("the first message of a Subscribe stream must be SubscribeOpen", precondition=True)
        name = first.open.behavior_name
        check_behavior_name(name, "SubscribeOpen.behavior_name")
        check_name(first.open.subscriber_name, "SubscribeOpen.subscriber_name", MAX_SUBSCRIBER_NAME_BYTES)
        self.behaviors.require_known(name)
        self.behaviors.reopen(name)  # a new trainer of a finished behavior: train it again
        # Only queues the processor declared; the holder of a live one keeps it (common.topics.grpc_transport).
        return self.topics.trajectories(name).subscribe(
            first.open.subscriber_name,
            self.behaviors.queue_size(name),
            self.behaviors.settings.full_policy,
            declared_only=True,
        )

    async def PublishPolicy(self, request: pb.PolicyUpdate, context: grpc.aio.ServicerContext) -> pb.PublishPolicyReply:
        name = request.behavior_name
        try:
            check_behavior_name(name, "PolicyUpdate.behavior_name")
            if not 0 <= request.version <= MAX_POLICY_VERSION:
                raise ProtocolError(
                    f"PolicyUpdate of {quoted(name)} needs a version in [0, {MAX_POLICY_VERSION}] (got {request.version})"
                )
            self.behaviors.require_known(name)  # before loading: nothing is spent on an unknown name
            topic = self.topics.policies(name)
            # A snapshot is an older policy on purpose, numbered apart (``_publish_snapshot``): the version rule is the
            # latest-wins topic's.
            if not request.snapshot and request.version > (most := highest_acceptable_version(topic.highest_version)):
                log.warning(
                    "behavior %s: policy version %d not accepted: a publish raises the version by one at most"
                    " (holds %d, so at most %d)",
                    quoted(name), request.version, topic.highest_version, most,
                )  # fmt: skip
                return pb.PublishPolicyReply(accepted=False, current_version=topic.highest_version)
            policy = Policy.from_update(request)  # refuse an artifact the processor cannot run
            behavior = self.behaviors.get(name)
            if behavior is not None:  # else configured, not declared yet: its follower checks it at the first Hello
                behavior.check_policy(policy, request.version)
            if request.snapshot:  # kept for self-play's opponents, beside the latest-wins policy topic
                return self._publish_snapshot(request)
            if behavior is not None:
                behavior.loaded(request.version, request, policy)  # spares the behavior a second load
            accepted = topic.publish(request, request.version)
        except StepstreamError as err:
            refuse(context, err)
            return pb.PublishPolicyReply()  # grpc.aio sends no message with a status other than OK
        if not accepted:
            log.info("behavior '%s': policy version %d ignored (have %d)", name, request.version, topic.highest_version)
        return pb.PublishPolicyReply(accepted=accepted, current_version=topic.highest_version)

    def _publish_snapshot(self, request: pb.PolicyUpdate) -> pb.PublishPolicyReply:
        """A self-play snapshot onto ``snapshots/<behavior>``, keyed by its number (a repeated number is ignored).

        Raises:
            ProtocolError: (precondition) the behavior has no ``self_play``; a number outside [1, MAX_POLICY_VERSION].
        """
        name = request.behavior_name
        if not self.self_play.configured(name):
            raise ProtocolError(
                f"snapshot {request.snapshot} of {quoted(name)}: the behavior has no self_play", precondition=True
            )
        if not 0 < request.snapshot <= MAX_POLICY_VERSION:
            raise ProtocolError(
                f"PolicyUpdate of {quoted(name)} needs a snapshot in [1, {MAX_POLICY_VERSION}] (got {request.snapshot})"
            )
        topic = self.topics.snapshots(name)
        accepted = topic.publish(request, request.snapshot)
        return pb.PublishPolicyReply(accepted=accepted, current_version=self.topics.policies(name).highest_version)

    async def FinishTraining(self, request: pb.TrainingFinished, context: grpc.aio.ServicerContext) -> pb.PolicyStatus:
        try:
            check_behavior_name(request.behavior_name, "TrainingFinished.behavior_name")
            self.behaviors.finish(request.behavior_name, request.trainer_step, request.policy_version)
        except StepstreamError as err:
            refuse(context, err)
            return pb.PolicyStatus()  # grpc.aio sends no message with a status other than OK
        return await self.GetPolicyStatus(pb.PolicyQuery(behavior_name=request.behavior_name), context)

    async def GetPolicyStatus(self, request: pb.PolicyQuery, context: grpc.aio.ServicerContext) -> pb.PolicyStatus:
        name = request.behavior_name
        try:
            check_behavior_name(name, "PolicyQuery.behavior_name")
            self.behaviors.require_known(name)
        except StepstreamError as err:
            refuse(context, err)
            return pb.PolicyStatus()  # grpc.aio sends no message with a status other than OK
        behavior = self.behaviors.get(name)
        status = behavior.status() if behavior is not None else pb.PolicyStatus(behavior_name=name)
        if behavior is None:
            status.highest_version = self.topics.policies(name).highest_version
        status.training_finished = name in self.behaviors.finished
        return status


def delivery_batches(
    deliveries: list[Delivery[Trajectory]],
    max_bytes: int = MAX_BATCH_BYTES,
    *,
    max_item_bytes: int | None = None,
    too_large: list[tuple[Delivery[Trajectory], int]] | None = None,
) -> Iterator[pb.DeliveryBatch]:
    """Encode deliveries into batches of at most ``max_bytes`` each (a lone larger trajectory goes alone).

    A trajectory whose batch alone would pass ``max_item_bytes`` (the message limit) is left out and
    appended, with its encoded size, to ``too_large``: no message could carry it.
    """
    batch, size = pb.DeliveryBatch(), 0
    for delivery in deliveries:
        trajectory = delivery.item.to_proto()
        item_bytes = trajectory.ByteSize()
        if max_item_bytes is not None and item_bytes + _DELIVERY_FRAMING_BYTES > max_item_bytes:
            if too_large is not None:
                too_large.append((delivery, item_bytes))
            continue
        if batch.deliveries and size + item_bytes > max_bytes:
            yield batch
            batch, size = pb.DeliveryBatch(), 0
        batch.deliveries.add(delivery_tag=delivery.tag, trajectory=trajectory)
        size += item_bytes
    if batch.deliveries:
        yield batch


_DELIVERY_FRAMING_BYTES = 32
"""A DeliveryBatch of one trajectory, besides the trajectory: its tag and the two fields' framing (< 32)."""
