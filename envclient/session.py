"""An env client's session with the processor: Hello once, then BrainInfo -> ActionInfo per step.

Usage (asyncio)::

    from envclient import ActionSpec, BrainParameters, EnvSession, ObservationSpec, TrainingFinishedError

    walker = BrainParameters("Walker", (ObservationSpec((32,)),), ActionSpec.continuous(4))
    picker = BrainParameters("Picker", (ObservationSpec((8,)),), ActionSpec.discrete(5))
    async with EnvSession("127.0.0.1:50051", "sim-0", [walker, picker]) as session:
        try:
            while True:
                a, b = await asyncio.gather(  # two behaviors of one session: the steps take turns on its stream
                    session.step("Walker", walker_ids, [walker_obs], walker_rewards, walker_done),
                    session.step("Picker", picker_ids, [picker_obs], picker_rewards, picker_done, action_mask=mask),
                )
                sim.apply(a.continuous_actions, b.discrete_actions)
        except TrainingFinishedError:
            pass  # every behavior of the session reached its max_steps: a normal end

Agents come and go between steps: a new id starts an episode at its first row, and an agent leaves for good
with a last row whose ``done`` is True (``max_reached`` too when it was cut off rather than ended), which
frees what the processor holds for it. An agent merely left out of a step keeps its state (it may come back).

Shapes: ``N`` agent rows in one step, ``C`` continuous action size, ``B`` discrete branches.

Security: pass ``security=ClientSecurity(...)`` (``common.security``) for TLS and the shared token;
the stream then carries the token, and the client id and behaviors for the processor's logs, as
metadata. Messages either way are limited to ``MAX_MESSAGE_BYTES``, the processor's default limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import grpc
import numpy as np

from common.environment_parameters import ACCEPTS_METADATA, ReceivedParameters
from common.errors import StepstreamError, TrainingFinishedError
from common.logs import identity_metadata
from common.security import PLAINTEXT, ClientSecurity
from common.specs import BrainInfoSize, BrainParameters
from common.tensors import from_tensor, to_tensor
from common.topics.grpc_status import TRAINING_FINISHED_STATUS
from common.topics.grpc_transport import MESSAGE_SIZE_OPTIONS
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)


WRITE_AFTER_END_DETAILS = "Internal error from Core"
"""What grpc.aio reports, as INTERNAL, for a write that finds the stream already ended, in place of its real status
(grpc/grpc#36066): seen when the processor is SIGKILLed mid-stream, and when it refuses a Hello (a wrong token)
before reading it. The stream is gone either way: a reconnecting client tries again, and a status retrying cannot
fix comes back, clean, at the next Hello."""


class StepRejectedError(StepstreamError):
    """The processor ended the session with a non-OK status (``code``, ``details``)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @property
    def write_after_end(self) -> bool:
        """gRPC's INTERNAL for a write to an ended stream (``WRITE_AFTER_END_DETAILS``): the real status is unknown."""
        return self.code == grpc.StatusCode.INTERNAL and self.details == WRITE_AFTER_END_DETAILS


class SessionFinishedError(StepRejectedError, TrainingFinishedError):
    """The processor ended the session because training finished: every behavior it declares reached its
    ``max_steps`` (gRPC OUT_OF_RANGE). Not a failure: stop stepping. Catch it as ``TrainingFinishedError``."""


def rejected(code: grpc.StatusCode, details: str) -> StepRejectedError:
    """The error for a session the processor ended with ``code``: ``SessionFinishedError`` for the end of training."""
    return (SessionFinishedError if code == TRAINING_FINISHED_STATUS else StepRejectedError)(code, details)


class ActionResult(NamedTuple):
    """The processor's answer to one BrainInfo, rows in the BrainInfo's order."""

    continuous_actions: np.ndarray
    """float32 [N, C], already clipped or squashed into [-1, 1]-style bounds by the policy."""
    discrete_actions: np.ndarray
    """int32 [N, B]."""
    policy_version: int


class MessageTooLargeError(StepstreamError):
    """A BrainInfo is larger than the message limit; nothing was sent and the session goes on."""


def brain_info_message(
    behavior_name: str,
    agent_ids: np.ndarray,
    observations: Sequence[np.ndarray | pb.Tensor],
    rewards: np.ndarray,
    done: np.ndarray,
    max_reached: np.ndarray | None = None,
    action_mask: np.ndarray | None = None,
    group_ids: np.ndarray | None = None,
    group_rewards: np.ndarray | None = None,
) -> pb.BrainInfo:
    """Encode one step of one behavior (shapes as in ``EnvSession.step``).

    An observation is sent as float32, except a uint8 image ``[N, H, W, C]``, which stays uint8; a ``pb.Tensor``
    (a PNG-compressed image, ``common.tensors.to_png_tensor``) is sent as it is.
    """
    n = len(agent_ids)
    msg = pb.BrainInfo(behavior_name=behavior_name)
    to_tensor(np.asarray(agent_ids, dtype=np.int64), msg.agent_ids)
    for obs in observations:
        if isinstance(obs, pb.Tensor):
            msg.observations.add().CopyFrom(obs)
            continue
        arr = np.asarray(obs)
        image = arr.dtype == np.uint8 and arr.ndim == 4  # [N, H, W, C]
        to_tensor(arr if image else arr.astype(np.float32, copy=False), msg.observations.add())
    to_tensor(np.asarray(rewards, dtype=np.float32), msg.rewards)
    to_tensor(np.asarray(done, dtype=bool), msg.done)
    to_tensor(np.zeros(n, bool) if max_reached is None else np.asarray(max_reached, dtype=bool), msg.max_reached)
    if action_mask is not None:
        to_tensor(np.asarray(action_mask, dtype=bool), msg.action_mask)
    if group_ids is not None or group_rewards is not None:  # both or neither on the wire
        to_tensor(np.zeros(n, np.int32) if group_ids is None else np.asarray(group_ids, dtype=np.int32), msg.group_ids)
        to_tensor(
            np.zeros(n, np.float32) if group_rewards is None else np.asarray(group_rewards, dtype=np.float32),
            msg.group_rewards,
        )
    return msg


class EnvSession:
    """One Step stream. Concurrent ``step`` calls (one per behavior, say, from ``asyncio.gather``) take turns:
    one step is in flight at a time, each waits for its own actions.

    ``channel_options`` add to (or, by key, replace) ``MESSAGE_SIZE_OPTIONS``; ``security`` gives TLS
    and the token (plaintext, none by default).
    """

    def __init__(
        self,
        address: str,
        client_id: str,
        brain_parameters: Sequence[BrainParameters],
        *,
        channel_options: Sequence[tuple[str, int | str]] = (),
        protocol_version: int = PROTOCOL_VERSION,
        security: ClientSecurity = PLAINTEXT,
        team_ids: Mapping[str, int] | None = None,
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.brain_parameters = list(brain_parameters)
        self.team_ids = dict(team_ids or {})
        """Each behavior's team, declared in the Hello (``Hello.team_ids``; absent: team 0)."""
        self.session_id: str | None = None
        self.security = security
        self._options = list({**dict(MESSAGE_SIZE_OPTIONS), **dict(channel_options)}.items())
        self.max_message_bytes = int(dict(self._options)["grpc.max_send_message_length"])
        """The largest message this client sends: its channel's ``grpc.max_send_message_length``, lowered at ``open``
        to the processor's receive limit when its HelloReply gives one."""
        self._sizes = {p.behavior_name: BrainInfoSize.of(p) for p in self.brain_parameters}
        self._protocol_version = protocol_version
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._turn = asyncio.Lock()
        """One request and its response at a time on the stream (grpc.aio refuses overlapping writes)."""
        self.environment_parameters = ReceivedParameters()
        """The environment parameters the processor sent last (``common.environment_parameters``)."""

    async def __aenter__(self) -> EnvSession:
        await self.open()
        return self

    async def __aexit__(self, *unused_exc: object) -> None:
        await self.close()

    async def open(self) -> str:
        """Connect and say Hello; returns the session id.

        Raises:
            StepRejectedError: the processor refused the Hello.
        """
        self._channel = self.security.aio_channel(self.address, self._options)
        behaviors = [p.behavior_name for p in self.brain_parameters]
        metadata = (*self.security.metadata(), *identity_metadata(self.client_id, behaviors))
        metadata = (*metadata, ACCEPTS_METADATA)  # the processor may send environment parameters
        self._call = pb_grpc.AgentProcessorStub(self._channel).Step(metadata=metadata)
        hello = pb.Hello(protocol_version=self._protocol_version, client_id=self.client_id)
        hello.brain_parameters.extend(p.to_proto() for p in self.brain_parameters)
        hello.team_ids.update(self.team_ids)
        reply = await self._exchange(pb.StepRequest(hello=hello))
        self.session_id = reply.hello_reply.session_id
        if reply.hello_reply.max_message_bytes > 0:
            self.max_message_bytes = min(self.max_message_bytes, int(reply.hello_reply.max_message_bytes))
        log.info("client '%s' connected to %s as session %s", self.client_id, self.address, self.session_id)
        return self.session_id

    async def _exchange(self, request: pb.StepRequest) -> pb.StepResponse:
        async with self._turn:
            return await self._exchange_now(request)

    async def _exchange_now(self, request: pb.StepRequest) -> pb.StepResponse:
        if self._call is None:
            raise StepstreamError("the session is not open")
        try:
            await self._call.write(request)
            response = await self._call.read()
        except grpc.aio.AioRpcError as err:
            raise rejected(err.code(), err.details() or "") from None
        except asyncio.InvalidStateError:
            # The processor ended the stream before this write (replaced, shut down): its status says why.
            raise await self._ended(self._call) from None
        while response is not grpc.aio.EOF and response.WhichOneof("payload") == "environment_parameters":
            self.environment_parameters.take(response.environment_parameters)  # it precedes the answer
            try:
                response = await self._call.read()
            except grpc.aio.AioRpcError as err:
                raise rejected(err.code(), err.details() or "") from None
        if response is grpc.aio.EOF:
            raise await self._ended(self._call)
        return response

    @staticmethod
    async def _ended(call: grpc.aio.StreamStreamCall) -> StepRejectedError:
        """The error for a stream the processor has ended, from its final status."""
        return rejected(await call.code(), await call.details() or "stream ended")

    async def send(self, brain_info: pb.BrainInfo) -> ActionResult:
        """Send an already-encoded BrainInfo; returns its actions.

        Raises:
            MessageTooLargeError: the message is over ``max_message_bytes``, which gRPC would refuse
                and end the session for; nothing is sent, the session goes on, and the error names
                the behavior and how many of its agents fit one BrainInfo.
            StepRejectedError: the processor ended the session.
        """
        request = pb.StepRequest(brain_info=brain_info)
        size = request.ByteSize()  # ~3 us for a vector step: upb's C walk, cheaper than any Python shortcut
        if size > self.max_message_bytes:
            raise self._too_large(brain_info, size)
        response = await self._exchange(request)
        info = response.action_info
        return ActionResult(
            from_tensor(info.continuous_actions, "continuous_actions"),
            from_tensor(info.discrete_actions, "discrete_actions"),
            info.policy_version,
        )

    def _too_large(self, brain_info: pb.BrainInfo, size: int) -> MessageTooLargeError:
        shape = brain_info.agent_ids.shape
        name, n = brain_info.behavior_name, max(1, int(shape[0]) if shape else 1)
        declared = self._sizes.get(name)
        fixed = declared.fixed_bytes if declared is not None else 0
        # This message's own bytes per agent (PNGs vary), so the advice holds for steps like it.
        per_agent = max(1, -(-(size - fixed) // n))
        fit = max(0, (self.max_message_bytes - fixed) // per_agent)
        return MessageTooLargeError(
            f"behavior '{name}': a BrainInfo of {n} agents takes {size:,} bytes (about {per_agent:,} per agent), over"
            f" the {self.max_message_bytes:,}-byte message limit; at most {fit} agents fit in one BrainInfo: send"
            " the step's agents in several BrainInfos, or compress images as PNG"
        )

    async def step(
        self,
        behavior_name: str,
        agent_ids: np.ndarray,
        observations: Sequence[np.ndarray | pb.Tensor],
        rewards: np.ndarray,
        done: np.ndarray,
        max_reached: np.ndarray | None = None,
        action_mask: np.ndarray | None = None,
        group_ids: np.ndarray | None = None,
        group_rewards: np.ndarray | None = None,
    ) -> ActionResult:
        """Send one step of one behavior and wait for its actions.

        Args:
            agent_ids: int [N], unique.
            observations: one [N, *shape] per declared observation spec: float32, or uint8 for a
                uint8 image; or a ``pb.Tensor`` of PNGs (``common.tensors.to_png_tensor``).
            rewards: float32 [N], the reward each agent received since its previous row. An agent's first row
                (its first in the session, or its first after a done) has no previous row: its reward is not
                used (send 0), so a reward earned on arriving belongs in its second row.
            done: bool [N], the agent's episode ended (its row carries the terminal obs). It is also how an
                agent leaves for good: its state in the processor is freed; the same id later starts afresh.
            max_reached: bool [N], the episode ended by a time limit; only together with done.
            action_mask: bool [N, sum(branches)], True = allowed; None allows everything.
            group_ids: int [N], each agent's group (0 = none; scoped by this session); None sends no groups
                (docs/environments.md, "Groups of agents").
            group_rewards: float32 [N], the reward each agent's group received since the agent's previous row;
                zeros when None and ``group_ids`` is given.

        Raises:
            MessageTooLargeError: the step is over the message limit (see ``send``).
            SessionFinishedError: training finished (a ``TrainingFinishedError``, and a ``StepRejectedError``).
            StepRejectedError: the processor ended the session (bad input, replaced, shutdown).
        """
        return await self.send(
            brain_info_message(
                behavior_name, agent_ids, observations, rewards, done, max_reached, action_mask, group_ids, group_rewards
            )
        )

    async def close(self, timeout_s: float = 10.0) -> None:
        """End the session cleanly: half-close the stream, then wait up to ``timeout_s`` for the
        processor to end it, which it does once it has flushed this session's partial trajectories.
        Closing the channel at once would cancel the call: the processor would see a disconnect."""
        call, self._call = self._call, None
        if call is not None:
            try:
                await call.done_writing()
                await asyncio.wait_for(call.code(), timeout_s)
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.TimeoutError):
                pass
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
