"""A Unity player for tests, written from ML-Agents' C# sources rather than from the gateway's own fakes.

It does what ``Academy.EnvironmentStep``, ``Agent``, ``DecisionRequester`` and ``RpcCommunicator`` do,
in their order, each academy step:

1. ``AgentPreStep`` (``DecisionRequester.MakeRequests``): an agent requests a decision when the academy
   step count modulo its ``decision_period`` is 0, and an action every step when it takes actions
   between decisions;
2. the step counters go up (the academy's, then each agent's ``m_StepCount``);
3. ``AgentSendState`` (``Agent.SendInfo``): an agent that requested a decision puts its info
   (``done`` false, the reward gathered since its previous info) into the communicator's message;
4. ``DecideAction``: the communicator exchanges its message, if any agent put one
   (``RpcCommunicator.DecideBatch``); the reply's actions go, in order, to the agents that put a
   decision row (not the done ones); every agent then reads its last actions (none after its done);
5. ``AgentAct`` (``Agent.AgentStep``): an agent that requested an action runs it
   (``OnActionReceived``: the scene's task, which may end the episode); then, at ``MaxStep``, the
   episode is interrupted.

Ending an episode (``Agent.NotifyAgentDone``) puts a terminal row at once (``done``, ``max_step_reached``
for an interruption, the reward since the last info) into the *next* exchange's message, and resets
the agent, whose id (``m_EpisodeId``, taken once per agent) stays. So an agent that ends its episode
on a step before a decision step is reported twice in one exchange: terminal, then deciding in its
new episode. A non-200 status or a QUIT command quits the player (``Application.Quit``, exit code 0);
quitting on its own (``academy_steps``) sends the 400 of ``RpcCommunicator.Dispose``.

The scene: behaviors named as Unity names them (``Name?team=N``), vector observations, an optional
PNG camera (declared ``[C, H, W]`` as packages >= 2.0 do, or ``[H, W, C]`` in 1.0.x mode), and a task
whose episodes end at per-agent lengths. Rewards come only after an episode's first decision (a reward
before it would go with a first row, which no trainer takes). Side channels: the RESET's engine
configuration and environment parameters are read; each step sends two stats, an average and a
histogram. ``communication_version`` "1.0.0" plays a com.unity.ml-agents 1.0.x player: deprecated brain
parameters, no hybrid-actions capability, and actions read from ``vector_actions`` only.

``run_player`` plays a scene against an address in this process; as a script (a "build") it reads a
scene JSON, takes ``--mlagents-port`` (else the Editor's 5004) and writes its report JSON on quitting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from common.demo_images import encode_pngs
from envclient.unity.side_channels import ENGINE_CONFIGURATION, ENVIRONMENT_PARAMETERS, STATS, frame, split_messages
from protos import mlagents_demo_pb2 as demo_pb
from protos import mlagents_unity_pb2 as unity_pb
from protos import unity_to_external_pb2_grpc as unity_grpc

EDITOR_PORT = 5004


@dataclass(frozen=True)
class BehaviorScene:
    """One behavior's agents in the scene."""

    name: str
    """As Unity sends it (``BehaviorParameters.FullyQualifiedBehaviorName``): ``Name?team=N``."""
    agents: int = 2
    observation_size: int = 4
    continuous: int = 2
    branches: tuple[int, ...] = ()
    decision_period: int = 1
    take_actions_between_decisions: bool = True
    max_step: int = 0
    """``Agent.MaxStep``: the episode is interrupted at this step count (0: never)."""
    episode_lengths: tuple[int, ...] = (7, 12, 9)
    """The task ends an agent's episode (``EndEpisode``) at these step counts, agent k starting at entry k, cycling."""
    camera: tuple[int, int] | None = None
    """(height, width) of a PNG camera sensor, after the vector sensor."""


@dataclass(frozen=True)
class Scene:
    behaviors: tuple[BehaviorScene, ...]
    communication_version: str = "1.5.0"
    package_version: str = "2.0.1"
    academy_steps: int | None = None
    """Quit on its own after this many academy steps (None: only when told)."""
    seed: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @staticmethod
    def from_json(text: str) -> Scene:
        raw = json.loads(text)
        behaviors = tuple(
            BehaviorScene(**{**b, "branches": tuple(b["branches"]), "episode_lengths": tuple(b["episode_lengths"]),
                             "camera": None if b["camera"] is None else tuple(b["camera"])})
            for b in raw.pop("behaviors")
        )  # fmt: skip
        return Scene(behaviors, **raw)

    @property
    def legacy(self) -> bool:
        """A com.unity.ml-agents 1.0.x player (communication 1.0.0): ``vector_actions`` only."""
        return self.communication_version.startswith("1.0.")


@dataclass
class Episode:
    agent_id: int
    reward: float
    decisions: int
    """Decision rows of the episode, its terminal row not counted."""
    interrupted: bool


@dataclass
class Report:
    """What the player did, per behavior (full names), and why it quit."""

    episodes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Episodes whose terminal row reached the trainer (one ended on the last step before quitting never does)."""
    decisions: dict[str, int] = field(default_factory=dict)
    """Decision rows put (``done`` false)."""
    exchanges: int = 0
    academy_steps: int = 0
    quit_reason: str = ""
    engine_messages: int = 0
    environment_parameters: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """What a C# player would have thrown on (an action it cannot read)."""
    same_exchange_restarts: int = 0
    """Agents reported terminal and deciding in one exchange."""
    unanswered: dict[str, int] = field(default_factory=dict)
    """Decision rows that got no action back (the agent acts with empty actions, as C#'s ``ActionBuffers.Empty``)."""


class Quit(Exception):
    """``Application.Quit``: the player ends, exit code 0."""


class Communicator:
    """``RpcCommunicator``: the message being filled, the agents awaiting actions, the last actions per agent."""

    def __init__(self, address: str, scene: Scene, report: Report) -> None:
        self.scene = scene
        self.report = report
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = unity_grpc.UnityToExternalProtoStub(self.channel)
        self.is_open = False
        self.output = unity_pb.UnityRLOutputProto()
        for behavior in scene.behaviors:  # SubscribeBrain: every behavior is a key, with or without agents
            self.output.agentInfos[behavior.name].SetInParent()
        self.unsent = {b.name: b for b in scene.behaviors}
        self.ordered: dict[str, list[int]] = {b.name: [] for b in scene.behaviors}
        self.last_actions: dict[str, dict[int, Any]] = {b.name: {} for b in scene.behaviors}
        self.need_communicate = False
        self.pending_stats: list[bytes] = []
        self.ended: list[tuple[str, Episode]] = []
        """Episodes whose terminal row is in the message being filled: reported once it is sent."""
        self._terminal_ids: dict[str, set[int]] = {b.name: set() for b in scene.behaviors}

    async def _call(self, message: unity_pb.UnityMessageProto) -> unity_pb.UnityMessageProto:
        return await self.stub.Exchange(message, wait_for_ready=True, timeout=120.0)

    async def initialize(self) -> None:
        init = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
        out = init.unity_output.rl_initialization_output
        out.name = "CSharpPlayer"
        out.communication_version = self.scene.communication_version
        out.package_version = self.scene.package_version
        out.capabilities.baseRLCapabilities = True
        if not self.scene.legacy:
            out.capabilities.concatenatedPngObservations = True
            out.capabilities.compressedChannelMapping = True
            out.capabilities.hybridActions = True
        self.is_open = True
        first = await self._call(init)
        if first.header.status != 200:
            raise Quit(f"initialization refused with status {first.header.status}: {first.header.message}")
        second = await self._call(unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200)))
        self._update_environment(second.unity_input.rl_input)

    def _update_environment(self, rl_input: unity_pb.UnityRLInputProto) -> None:
        for channel, payload in split_messages(rl_input.side_channel):
            if channel == ENGINE_CONFIGURATION:
                self.report.engine_messages += 1
            elif channel == ENVIRONMENT_PARAMETERS:
                (n,) = struct.unpack_from("<i", payload, 0)
                key = payload[4 : 4 + n].decode("ascii")
                _, value = struct.unpack_from("<if", payload, 4 + n)
                self.report.environment_parameters[key] = value
        if rl_input.command == unity_pb.QUIT:
            raise Quit("QUIT command")
        if rl_input.command == unity_pb.RESET:
            for ids in self.ordered.values():
                ids.clear()

    def put(self, behavior: BehaviorScene, info: demo_pb.AgentInfoProto) -> None:
        """``PutObservations``."""
        name = behavior.name
        self.output.agentInfos[name].value.append(info)
        self.need_communicate = True
        if info.done:
            self._terminal_ids[name].add(info.id)
        else:
            self.ordered[name].append(info.id)
            if info.id in self._terminal_ids[name]:
                self.report.same_exchange_restarts += 1
        self.last_actions[name][info.id] = None
        if info.done:
            del self.last_actions[name][info.id]

    def add_stat(self, key: str, value: float, aggregation: int) -> None:
        data = key.encode("ascii")
        self.pending_stats.append(frame(STATS, struct.pack("<i", len(data)) + data + struct.pack("<fi", value, aggregation)))

    async def decide_batch(self) -> None:
        if not self.need_communicate:
            return
        self.need_communicate = False
        message = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
        message.unity_output.rl_output.CopyFrom(self.output)
        for name, behavior in list(self.unsent.items()):  # brain parameters go with a behavior's first agent infos
            if self.output.agentInfos[name].value:
                message.unity_output.rl_initialization_output.brain_parameters.append(_brain_proto(behavior, self.scene))
                del self.unsent[name]
        message.unity_output.rl_output.side_channel = b"".join(self.pending_stats)
        self.pending_stats.clear()
        for infos in self.output.agentInfos.values():
            del infos.value[:]
        for ids in self._terminal_ids.values():
            ids.clear()
        if not self.is_open:
            return
        self.report.exchanges += 1
        try:
            reply = await self._call(message)
        except grpc.aio.AioRpcError as err:
            self.is_open = False
            raise Quit(f"the trainer went away ({err.code().name})") from None
        for name, episode in self.ended:
            self.report.episodes.setdefault(name, []).append(dataclasses.asdict(episode))
        self.ended.clear()
        if reply.header.status != 200:
            self.is_open = False
            raise Quit(f"status {reply.header.status}")
        rl_input = reply.unity_input.rl_input
        self._update_environment(rl_input)
        self._apply_actions(rl_input)

    def _apply_actions(self, rl_input: unity_pb.UnityRLInputProto) -> None:
        """Each behavior's actions to its deciding agents, in the order they put their rows."""
        for name, actions in rl_input.agent_actions.items():
            ordered = self.ordered.get(name, [])
            if not ordered or not actions.value:
                continue
            if len(actions.value) < len(ordered):  # C#: ArgumentOutOfRangeException
                raise RuntimeError(f"{name}: {len(actions.value)} actions for {len(ordered)} deciding agents")
            for agent_id, action in zip(ordered, actions.value, strict=False):
                if agent_id in self.last_actions[name]:
                    self.last_actions[name][agent_id] = action
        for ids in self.ordered.values():
            ids.clear()

    async def dispose(self) -> None:
        """``Dispose``: a 400 if still open."""
        if self.is_open:
            self.is_open = False
            try:
                await self._call(unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=400)))
            except grpc.aio.AioRpcError:
                pass
        await self.channel.close()


def _brain_proto(behavior: BehaviorScene, scene: Scene) -> demo_pb.BrainParametersProto:
    brain = demo_pb.BrainParametersProto(brain_name=behavior.name, is_training=True)
    if scene.legacy:  # 1.0.x: one action list, continuous or discrete
        if behavior.branches:
            brain.vector_action_size_deprecated.extend(behavior.branches)
            brain.vector_action_space_type_deprecated = demo_pb.discrete
        else:
            brain.vector_action_size_deprecated.append(behavior.continuous)
            brain.vector_action_space_type_deprecated = demo_pb.continuous
        return brain
    brain.action_spec.num_continuous_actions = behavior.continuous
    brain.action_spec.num_discrete_actions = len(behavior.branches)
    brain.action_spec.discrete_branch_sizes.extend(behavior.branches)
    return brain


def declaration(scene: Scene, behavior: BehaviorScene) -> tuple[demo_pb.BrainParametersProto, demo_pb.AgentInfoProto]:
    """The brain parameters the player sends for ``behavior`` and a first agent info like its agents'."""
    return _brain_proto(behavior, scene), Agent(behavior, 1, 0, scene, Report())._info(done=False, max_step_reached=False)


class Agent:
    """One ``Agent`` with its ``DecisionRequester`` and the scene's task."""

    def __init__(self, behavior: BehaviorScene, episode_id: int, index: int, scene: Scene, report: Report) -> None:
        self.behavior = behavior
        self.id = episode_id  # m_EpisodeId: taken once, kept across episodes
        self.scene = scene
        self.report = report
        self.rng = np.random.default_rng(scene.seed * 1000 + episode_id)
        self.length_index = index
        self.step_count = 0
        self.reward = 0.0
        self.cumulative = 0.0
        self.decisions = 0
        self.request_decision = self.request_action = False
        self.info_done = False
        self.awaiting = False
        """A decision row was put this step, and its action is due."""
        self.action: Any = None
        self.position = 0.0

    @property
    def episode_length(self) -> int:
        lengths = self.behavior.episode_lengths
        return lengths[self.length_index % len(lengths)]

    def make_requests(self, academy_step: int) -> None:
        if academy_step % self.behavior.decision_period == 0:
            self.request_decision = self.request_action = True
        if self.behavior.take_actions_between_decisions:
            self.request_action = True

    def _info(self, done: bool, max_step_reached: bool) -> demo_pb.AgentInfoProto:
        b = self.behavior
        info = demo_pb.AgentInfoProto(id=self.id, reward=self.reward, done=done, max_step_reached=max_step_reached)
        vector = info.observations.add(shape=[b.observation_size], compression_type=demo_pb.NONE, name="VectorSensor")
        values = [self.position, self.step_count / 10.0, *self.rng.standard_normal(b.observation_size - 2).tolist()]
        vector.float_data.data.extend(values[: b.observation_size])
        if b.camera is not None:
            height, width = b.camera
            pixels = self.rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            shape = [height, width, 3] if self.scene.legacy else [3, height, width]
            camera = info.observations.add(shape=shape, compression_type=demo_pb.PNG, name="CameraSensor")
            camera.compressed_data = encode_pngs(pixels)
        if b.branches and not done:
            info.action_mask.extend([False] * sum(b.branches))
        return info

    def send_info(self, comm: Communicator) -> None:
        """``SendInfo``: a decision row when one was requested."""
        if not self.request_decision:
            return
        self.info_done = False
        comm.put(self.behavior, self._info(done=False, max_step_reached=False))
        self.report.decisions[self.behavior.name] = self.report.decisions.get(self.behavior.name, 0) + 1
        self.decisions += 1
        self.reward = 0.0
        self.request_decision = False
        self.awaiting = True

    def decide_action(self, comm: Communicator) -> None:
        name = self.behavior.name
        self.action = comm.last_actions[name].get(self.id)
        if self.awaiting and self.action is None:
            self.report.unanswered[name] = self.report.unanswered.get(name, 0) + 1
        self.awaiting = False

    def agent_step(self, comm: Communicator) -> None:
        """``AgentStep``: run the requested action, then the MaxStep interruption."""
        if self.request_action:
            self.request_action = False
            self.on_action_received(comm)
        if self.behavior.max_step > 0 and self.step_count >= self.behavior.max_step:
            self.notify_done(comm, interrupted=True)
            self.reset()

    def _read_action(self) -> list[float]:
        b = self.behavior
        if self.action is None:
            return []
        if self.scene.legacy:
            values = list(self.action.vector_actions_deprecated)
            want = len(b.branches) if b.branches else b.continuous
            if len(values) != want:  # a 1.0.x agent indexes its float[] and throws
                self.report.errors.append(f"{b.name}: agent {self.id} got {len(values)} vector actions, needs {want}")
            return values
        return [*self.action.continuous_actions, *self.action.discrete_actions]

    def on_action_received(self, comm: Communicator) -> None:
        """The task: move by the first action; a reward for staying near 0 once the episode had a decision."""
        values = self._read_action()
        self.position = float(np.clip(self.position + 0.1 * (values[0] if values else 0.0), -1.0, 1.0))
        if self.decisions > 0:
            gained = round(1.0 - abs(self.position), 3)
            self.reward += gained
            self.cumulative += gained
        if self.step_count >= self.episode_length:
            self.notify_done(comm, interrupted=False)
            self.reset()

    def notify_done(self, comm: Communicator, interrupted: bool) -> None:
        if self.info_done:
            return
        self.info_done = True
        comm.put(self.behavior, self._info(done=True, max_step_reached=interrupted))
        comm.ended.append((self.behavior.name, Episode(self.id, self.cumulative, self.decisions, interrupted)))
        self.reward = self.cumulative = 0.0
        self.decisions = 0
        self.request_action = self.request_decision = False
        self.action = None

    def reset(self) -> None:
        """``_AgentReset`` and the scene's ``OnEpisodeBegin``."""
        self.step_count = 0
        self.position = float(self.rng.uniform(-0.5, 0.5))
        self.length_index += 1


async def run_player(address: str, scene: Scene, report: Report | None = None) -> Report:
    """Play ``scene`` against the trainer at ``address`` until told to quit (or ``academy_steps``); ``report`` (filled
    as it plays) lets a caller watch."""
    report = Report() if report is None else report
    comm = Communicator(address, scene, report)
    agents = [Agent(b, 1 + 100 * i + k, k, scene, report) for i, b in enumerate(scene.behaviors) for k in range(b.agents)]
    try:
        await comm.initialize()
        for agent in agents:  # the first RESET: ForcedFullReset
            agent.reset()
        step = 0
        while scene.academy_steps is None or step < scene.academy_steps:
            for agent in agents:
                agent.make_requests(step)
            step += 1
            report.academy_steps = step
            for agent in agents:
                agent.step_count += 1
            for agent in agents:
                agent.send_info(comm)
            comm.add_stat("Env/Laps", 2.0, 0)
            comm.add_stat("Env/Speed", float(step % 5), 3)
            await comm.decide_batch()
            for agent in agents:
                agent.decide_action(comm)
            for agent in agents:
                agent.agent_step(comm)
        report.quit_reason = "academy_steps"
    except Quit as why:
        report.quit_reason = str(why)
    finally:
        await comm.dispose()
    return report


def main(argv: list[str]) -> int:
    """As a build: ``PLAYER SCENE_JSON REPORT_JSON [--mlagents-port PORT] ...``."""
    scene = Scene.from_json(Path(argv[0]).read_text())
    port = int(argv[argv.index("--mlagents-port") + 1]) if "--mlagents-port" in argv else EDITOR_PORT
    report = asyncio.run(run_player(f"127.0.0.1:{port}", scene))
    Path(argv[1]).write_text(json.dumps(dataclasses.asdict(report)))
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
