"""``stepstream unity``: a gRPC server Unity calls, which steps Unity's behaviors through the processor.

Unity is the gRPC client (``translate`` describes its sequence). The gateway listens on the Unity
host's loopback (``127.0.0.1:5004`` by default, the Editor's port) and, for every behavior as it
appears, opens one ``EnvSession`` with the processor, which may be on another host (TLS and the
token through ``ClientSecurity``). One session per behavior keeps behaviors apart: a behavior that
appears mid-run is a new Hello without touching the others, a behavior refused for bad input ends
only its own session, and the behaviors of one step are sent concurrently.

Lifecycle:

- Unity's first call starts a *Unity session* (``UnityStats.sessions``); a first call while one is
  running (Play again after a crash, a restarted build) closes the old one first, so every Unity
  session starts with fresh processor sessions and no agent state carried over.
- The Editor's Stop (status 400) closes every behavior's session cleanly (the processor flushes
  their partial trajectories as interrupted) and is answered with 200.
- Behaviors are keyed by the name Unity sends (``Name?team=N``); each session is named and declared
  by the behavior alone, its team in the Hello (``translate.parse_behavior_id``).
- A behavior refused (bad input from Unity, a behavior the run has no settings for, the processor's
  non-retryable status) is logged once at ERROR with the reason and ends the run as mlagents-learn
  stops on it: that step is answered with status 400 and the reason, every session is closed, and
  ``refusal`` keeps the reason (``stepstream train`` fails with it).
- ``end_run`` (``stepstream train`` once every trainer finished) answers Unity's next call with status
  400, as mlagents-learn's ``RpcCommunicator.close``: Unity quits. In the stack (``FinishTraining``),
  the processor serves a finished behavior on until every behavior has finished, then ends its sessions
  with ``TRAINING_FINISHED_STATUS``; once every behavior of the Unity session has ended so, Unity is told
  to quit the same way (one ended earlier, by an older processor, gets no actions from then on).
- The processor restarting or unreachable (a retryable status): the behavior's step is retried on a
  new session with capped exponential backoff while Unity waits, for at most
  ``GatewaySettings.reconnect_timeout_s``; the agents then start new trajectories mid-episode. Past
  that bound Unity gets status 500 with the reason and quits.
- Any other failure while answering: status 500 with the reason (one ERROR line for a ``StepstreamError``, such
  as a communication version the gateway does not speak; a traceback only for an unexpected one). Unity is
  never left without an answer or a status.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import grpc
import numpy as np

from common import environment_stats
from common.environment_stats import MAX_STATS_PER_MESSAGE
from common.errors import NotSupportedYetError, StepstreamError
from common.security import PLAINTEXT, ClientSecurity
from common.specs import BrainParameters
from common.topics.grpc_status import TRAINING_FINISHED_STATUS
from common.topics.grpc_transport import KEEPALIVE_OPTIONS
from envclient.reconnect import RETRYABLE_STATUSES, SESSION_CLOSE_TIMEOUT_S, Backoff
from envclient.session import ActionResult, EnvSession, StepRejectedError
from envclient.unity import side_channels as sc
from envclient.unity import translate
from envclient.unity.metrics import UnityStats
from protos import mlagents_unity_pb2 as unity_pb
from protos import pb
from protos import unity_to_external_pb2_grpc as unity_grpc

log = logging.getLogger(__name__)

DEFAULT_UNITY_PORT = 5004
"""The Editor's port (``--port``); builds take theirs from ``--mlagents-port``."""
RECONNECT_TIMEOUT_S = 60.0


class ProcessorUnavailableError(StepstreamError):
    """The processor stayed unreachable past ``reconnect_timeout_s`` while Unity waited."""


@dataclass(frozen=True)
class GatewaySettings:
    """Where the processor is and how to reach it; what to tell Unity."""

    processor: str
    """``host:port`` of the processor."""
    client_id: str = "unity"
    """Each behavior's session is ``<client_id>/<behavior>``."""
    unity: sc.UnitySettings = field(default_factory=sc.UnitySettings)
    security: ClientSecurity = PLAINTEXT
    reconnect_timeout_s: float = RECONNECT_TIMEOUT_S
    """How long one step may wait for the processor to come back (seconds)."""
    backoff_initial_s: float = 0.5
    on_declare: Callable[[BrainParameters], None] | None = None
    """Called on the event loop with each behavior's spec as it is declared, before its first step (``stepstream
    train`` starts the behavior's trainer there); a ``StepstreamError`` from it refuses the behavior."""


class BehaviorLink:
    """One behavior's session with the processor, reopened after retryable failures."""

    def __init__(self, spec: BrainParameters, settings: GatewaySettings, behavior: translate.BehaviorId | None = None) -> None:
        self.spec = spec
        self.settings = settings
        self.behavior = behavior or translate.BehaviorId(spec.behavior_name, spec.behavior_name, 0)
        self.session: EnvSession | None = None
        self.backoff = Backoff(initial_s=settings.backoff_initial_s)
        self.sessions = 0

    async def step(self, brain_info: pb.BrainInfo) -> ActionResult:
        """Send one BrainInfo; reopen the session (same BrainInfo, new trajectories) while the processor is away.

        Raises:
            StepRejectedError: a non-retryable status.
            ProcessorUnavailableError: retryable failures for longer than ``reconnect_timeout_s``.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.reconnect_timeout_s
        name = self.spec.behavior_name
        while True:
            try:
                if self.session is None:
                    self.session = EnvSession(
                        self.settings.processor,
                        f"{self.settings.client_id}/{name}",
                        [self.spec],
                        channel_options=KEEPALIVE_OPTIONS,
                        security=self.settings.security,
                        team_ids={name: self.behavior.team_id},
                    )
                    await self.session.open()
                    self.sessions += 1
                result = await self.session.send(brain_info)
                self.backoff.attempts = 0
                return result
            except StepRejectedError as err:
                await self.close()
                if err.code not in RETRYABLE_STATUSES:
                    raise
                delay_s = self.backoff.next_delay_s()
                if loop.time() + delay_s > deadline:
                    raise ProcessorUnavailableError(
                        f"behavior {name!r}: the processor at {self.settings.processor} stayed unreachable for "
                        f"{self.settings.reconnect_timeout_s:g} s ({err})"
                    ) from err
                log.warning(
                    "behavior %r: no session with %s (%s); retrying in %.1f s", name, self.settings.processor, err, delay_s
                )
                await asyncio.sleep(delay_s)

    async def step_parts(self, brain_infos: list[pb.BrainInfo]) -> list[ActionResult]:
        """``step`` each BrainInfo of one Unity step, in order (``translate.split_restarts``)."""
        return [await self.step(info) for info in brain_infos]

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            try:
                await session.close(SESSION_CLOSE_TIMEOUT_S)
            except Exception as err:  # a broken stream has nothing left to flush
                log.debug("closing behavior %r's session: %s", self.spec.behavior_name, err)


class _BehaviorStep(NamedTuple):
    """One behavior's part of a Unity step: its rows, their split (``translate.split_restarts``) and BrainInfos."""

    link: BehaviorLink
    rows: translate.StepRows
    parts: list[np.ndarray]
    brain_infos: list[pb.BrainInfo]


class UnityGateway(unity_grpc.UnityToExternalProtoServicer):
    """The servicer of ``UnityToExternalProto/Exchange``: one Unity session at a time (module docstring)."""

    def __init__(self, settings: GatewaySettings, stats: UnityStats | None = None) -> None:
        self.settings = settings
        self.stats = stats or UnityStats()
        self.links: dict[str, BehaviorLink] = {}
        """Each behavior's link, by its name as Unity sends it (``Name?team=N``)."""
        self.failures: dict[str, str] = {}
        """Refused behaviors of the current Unity session (names as Unity sends them), with the reason."""
        self.finished: set[str] = set()
        """Behaviors (Unity's names) whose training the processor reported finished (``TRAINING_FINISHED_STATUS``)."""
        self.unity_name: str | None = None
        """The connected Unity's name; None between sessions."""
        self.vector_actions = False
        """The connected Unity reads actions from ``vector_actions`` only (no hybrid-actions capability: 1.0.x)."""
        self.refusal: str | None = None
        """Why the gateway ended the run itself (a refused behavior); None otherwise."""
        self._end_reason: str | None = None
        self._ending = False
        self.ended = asyncio.Event()
        """Set once Unity was told to quit (``end_run``, a refusal, every behavior finished)."""
        self._stats: collections.deque[sc.StatsValue] = collections.deque(maxlen=MAX_STATS_PER_MESSAGE)
        """Stats-channel values not yet sent: they go with the next step's BrainInfos, to the trainers' summaries."""
        self._lock = asyncio.Lock()

    async def Exchange(
        self, request: unity_pb.UnityMessageProto, context: grpc.aio.ServicerContext
    ) -> unity_pb.UnityMessageProto:
        del context
        async with self._lock:  # Unity calls one at a time; a second client must not interleave
            self.stats.exchanges += 1
            try:
                return await self._answer(request)
            except StepstreamError as err:  # a reason to give, not a fault of the gateway: one line
                log.error("answering Unity failed; Unity gets status %d: %s", translate.STATUS_ERROR, err)
                return _status(translate.STATUS_ERROR, str(err))
            except Exception as err:
                log.exception("answering Unity failed; Unity gets status %d", translate.STATUS_ERROR)
                return _status(translate.STATUS_ERROR, str(err))

    def end_run(self, reason: str = "training finished") -> None:
        """Answer Unity's next call with status 400, as mlagents-learn ends a run (``RpcCommunicator.close``): Unity
        quits (a build exits, the Editor leaves Play mode). ``ended`` is set then."""
        if not self._ending:
            self._ending, self._end_reason = True, reason
        if self.unity_name is None:
            self.ended.set()

    async def _answer(self, request: unity_pb.UnityMessageProto) -> unity_pb.UnityMessageProto:
        if request.header.status != translate.STATUS_OK:
            log.info("Unity '%s' ended its session (status %d)", self.unity_name, request.header.status)
            await self.end_session()
            return _reply()
        output = request.unity_output
        if self._ending and not output.HasField("rl_initialization_output"):
            return await self._quit()
        if output.HasField("rl_output"):
            step = await self._step(output)
            return await self._quit() if self._ending else _reply(unity_pb.UnityInputProto(rl_input=step))
        if output.HasField("rl_initialization_output"):
            return _reply(await self._initialize(output.rl_initialization_output))
        # Unity's second call: the first real input is a RESET with the side-channel settings.
        return _reply(translate.reset_input(self.settings.unity))

    async def _quit(self) -> unity_pb.UnityMessageProto:
        """Status 400: Unity quits. Every behavior's session is closed first (the processor flushes them)."""
        reason = self._end_reason or "training finished"
        log.info("telling Unity '%s' to quit (status %d): %s", self.unity_name, translate.STATUS_STOP, reason)
        await self.end_session()
        self.ended.set()
        return _status(translate.STATUS_STOP, reason)

    async def _initialize(self, init: unity_pb.UnityRLInitializationOutputProto) -> unity_pb.UnityInputProto:
        if self.unity_name is not None:
            log.warning("Unity '%s' connected again without a Stop: closing its previous session", init.name)
            await self.end_session()
        translate.check_versions(init)
        self.unity_name = init.name
        self.vector_actions = not init.capabilities.hybridActions
        self.stats.sessions += 1
        log.info(
            "Unity '%s' connected (communication %s, package %s)", init.name, init.communication_version, init.package_version
        )
        return translate.initialization_input(self.settings.unity)

    async def end_session(self) -> None:
        """Close every behavior's session (cleanly: the processor flushes them) and forget the Unity session."""
        links, self.links = self.links, {}
        await asyncio.gather(*(link.close() for link in links.values()))
        self.failures = {}
        self.finished = set()
        self.unity_name = None

    def _fail(self, name: str, reason: str) -> None:
        """Refuse a behavior: Unity is told to quit at the end of this step, as mlagents-learn stops on it."""
        log.error("behavior %r is refused; ending the run: %s", name, reason)
        self.failures[name] = reason
        self.stats.failed_behaviors += 1
        if self.refusal is None:
            self.refusal = f"behavior {name!r} is refused: {reason}"
        self.end_run(self.refusal)

    def _declare(self, output: unity_pb.UnityOutputProto) -> None:
        for brain in output.rl_initialization_output.brain_parameters:
            unity_name = brain.brain_name
            infos = output.rl_output.agentInfos[unity_name].value if unity_name in output.rl_output.agentInfos else []
            if unity_name in self.links or unity_name in self.failures or not infos:
                continue
            try:
                behavior = translate.parse_behavior_id(unity_name)
                other = next((link for link in self.links.values() if link.spec.behavior_name == behavior.name), None)
                if other is not None:
                    raise NotSupportedYetError(
                        f"team {behavior.team_id} of {behavior.name!r} beside {other.behavior.unity_name!r}: "
                        "several teams of one behavior (self-play) are not supported yet"
                    )
                spec = translate.behavior_spec(brain, infos[0])
                if self.settings.on_declare is not None:
                    self.settings.on_declare(spec)
            except StepstreamError as err:
                self._fail(unity_name, str(err))
                continue
            self.links[unity_name] = BehaviorLink(spec, self.settings, behavior)
            log.info("behavior %r declared (team %d, from %r): %s", spec.behavior_name, behavior.team_id, unity_name, spec)

    async def _step(self, output: unity_pb.UnityOutputProto) -> unity_pb.UnityRLInputProto:
        if self.unity_name is None:
            raise StepstreamError("Unity sent a decision step before its initialization message")
        self._read_side_channel(output.rl_output.side_channel)
        self._declare(output)
        steps = await self._behavior_steps(output)
        if self._stats and steps:  # every behavior of the step gets them, as ML-Agents records env stats per behavior
            stats = environment_stats.to_protos(self._stats)
            self._stats.clear()
            for step in steps:
                step.brain_infos[0].environment_stats.extend(stats)
        rl_input = unity_pb.UnityRLInputProto(command=unity_pb.STEP)
        if self._ending:  # a behavior was refused: Unity quits at this step's answer
            return rl_input
        results = await _step_all([(step.link, step.brain_infos) for step in steps])
        for step, result in zip(steps, results, strict=True):
            unity_name = step.link.behavior.unity_name
            if isinstance(result, StepRejectedError):
                await self._rejected(unity_name, result)
                continue
            if isinstance(result, BaseException):
                raise result
            merged = translate.merge_actions(len(step.rows.done), step.parts, result)
            translate.fill_actions(step.rows.done, merged, rl_input.agent_actions[unity_name], self.vector_actions)
        return rl_input

    async def _behavior_steps(self, output: unity_pb.UnityOutputProto) -> list[_BehaviorStep]:
        """Each stepped behavior's rows and the BrainInfos they become; a behavior whose rows are bad is refused."""
        steps: list[_BehaviorStep] = []
        for unity_name, infos in output.rl_output.agentInfos.items():
            if not infos.value or unity_name in self.failures or unity_name in self.finished:
                continue
            link = self.links.get(unity_name)
            if link is None:
                self._fail(unity_name, "agent infos arrived before the behavior's brain parameters")
                continue
            name = link.spec.behavior_name
            try:
                rows = translate.behavior_step(link.spec, infos.value)
                parts = translate.split_restarts(rows, name)
            except StepstreamError as err:
                self._fail(unity_name, str(err))
                await self._drop(unity_name)
                continue
            brain_infos = [rows.brain_info(name)] if len(parts) == 1 else [rows.take(p).brain_info(name) for p in parts]
            steps.append(_BehaviorStep(link, rows, parts, brain_infos))
        return steps

    async def _rejected(self, unity_name: str, err: StepRejectedError) -> None:
        """The processor ended a behavior's session: its training finished, or it refuses the behavior."""
        if err.code == TRAINING_FINISHED_STATUS:
            self._finish(unity_name, str(err))
        else:
            self._fail(unity_name, f"the processor refused its step: {err}")
        await self._drop(unity_name)

    def _finish(self, unity_name: str, reason: str) -> None:
        """The processor ended a behavior's session because its training finished (the stack's ``FinishTraining``):
        once every behavior of this Unity session has, Unity is told to quit."""
        log.info("behavior %r: %s", unity_name, reason)
        self.finished.add(unity_name)
        if set(self.links) <= self.finished | {unity_name}:
            self.end_run("training of every behavior finished")

    async def _drop(self, name: str) -> None:
        link = self.links.pop(name, None)
        if link is not None:
            await link.close()
            if not self.links and self.finished:
                self.end_run("training of every behavior finished")

    def _read_side_channel(self, data: bytes) -> None:
        try:
            for channel, payload in sc.split_messages(data):
                if channel == sc.STATS:
                    value = sc.parse_stats(payload)
                    self.stats.record(value)
                    log.debug("Unity stat %s = %g (%s)", value.key, value.value, value.aggregation)
                    if 0 < len(value.key.encode()) <= environment_stats.MAX_KEY_BYTES and math.isfinite(value.value):
                        self._stats.append(value)  # the processor would refuse the step for another
                    else:
                        log.warning(
                            "Unity stat %.64r = %g is not passed to the trainer (empty or long key, or not finite)",
                            value.key,
                            value.value,
                        )
                else:
                    log.debug("ignoring a %d-byte message on side channel %s", len(payload), channel)
        except StepstreamError as err:
            log.warning("Unity's side-channel bytes are malformed (the rest of this step's are skipped): %s", err)


async def _step_all(steps: list[tuple[BehaviorLink, list[pb.BrainInfo]]]) -> list[list[ActionResult] | BaseException]:
    """Every behavior's step (its one or two BrainInfos, ``translate.split_restarts``), behaviors concurrently; each
    result is the behavior's ``ActionResult`` list or its exception.

    One behavior (the usual case) is awaited in place: a task per step would cost an event-loop turn
    and a task's set-up, a noticeable part of the gateway's added latency per Exchange.
    """
    if len(steps) == 1:
        link, infos = steps[0]
        try:
            return [await link.step_parts(infos)]
        except Exception as err:
            return [err]
    return await asyncio.gather(*(link.step_parts(infos) for link, infos in steps), return_exceptions=True)


def _status(status: int, message: str) -> unity_pb.UnityMessageProto:
    return unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=status, message=message))


def _reply(unity_input: unity_pb.UnityInputProto | None = None) -> unity_pb.UnityMessageProto:
    message = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=translate.STATUS_OK))
    if unity_input is not None:
        message.unity_input.CopyFrom(unity_input)
    return message


class GatewayServer:
    """The gateway's gRPC server on ``host:port`` (port 0: any free port, see ``start``'s result)."""

    def __init__(self, settings: GatewaySettings, host: str = "127.0.0.1", port: int = DEFAULT_UNITY_PORT) -> None:
        self.gateway = UnityGateway(settings)
        self.host = host
        self.port = port
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        """Bind and serve; returns the port."""
        from common.topics.grpc_transport import MESSAGE_SIZE_OPTIONS

        self._server = grpc.aio.server(options=list(MESSAGE_SIZE_OPTIONS))
        unity_grpc.add_UnityToExternalProtoServicer_to_server(self.gateway, self._server)
        # Unity dials insecurely (RpcCommunicator.cs), so the gateway listens on loopback only by default.
        self.port = self._server.add_insecure_port(f"{self.host}:{self.port}")
        if self.port == 0:
            raise StepstreamError(f"cannot listen on {self.host}:{self.port} (is another trainer or gateway there?)")
        await self._server.start()
        log.info("listening for Unity on %s:%d: press Play in the Editor, or start the build", self.host, self.port)
        return self.port

    async def end_run(self, timeout_s: float, reason: str = "training finished") -> bool:
        """Tell Unity to quit at its next call (``UnityGateway.end_run``) and wait up to ``timeout_s`` for that call;
        True once Unity was told (or none was connected)."""
        self.gateway.end_run(reason)
        try:
            await asyncio.wait_for(self.gateway.ended.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True

    async def stop(self, grace_s: float = 1.0) -> None:
        await self.gateway.end_session()
        if self._server is not None:
            await self._server.stop(grace_s)

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


__all__ = [
    "DEFAULT_UNITY_PORT",
    "BehaviorLink",
    "GatewayServer",
    "GatewaySettings",
    "ProcessorUnavailableError",
    "UnityGateway",
]
