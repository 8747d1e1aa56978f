"""A fake Unity for tests: plays ``RpcCommunicator.cs``'s sequence against a gateway, from our own .proto files.

``FakeUnity.start`` makes the first call (``rl_initialization_output``) and the empty second call
(whose reply is the first RESET); ``step`` sends one ``UnityRLOutputProto`` per decision step and,
as Unity does, attaches a behavior's ``BrainParametersProto`` to the first step in which it has
agents; ``stop`` is the Editor's Stop (status 400). ``demo_transcript`` turns a real .demo file into
the agent infos Unity sent while recording it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc

from common.demo import _read_file
from protos import mlagents_demo_pb2 as demo_pb
from protos import mlagents_unity_pb2 as unity_pb
from protos import unity_to_external_pb2_grpc as unity_grpc

UNITY_COMMUNICATION_VERSION = "1.5.0"
UNITY_PACKAGE_VERSION = "3.0.0"


def brain_proto(name: str, continuous: int = 0, branches: Sequence[int] = ()) -> demo_pb.BrainParametersProto:
    """A behavior's ``BrainParametersProto`` as Unity's package 2.x/3.x sends it (``action_spec``)."""
    return demo_pb.BrainParametersProto(
        brain_name=name,
        is_training=True,
        action_spec=demo_pb.ActionSpecProto(
            num_continuous_actions=continuous, num_discrete_actions=len(branches), discrete_branch_sizes=list(branches)
        ),
    )


def agent_info(
    agent_id: int,
    observations: Sequence[Sequence[float]],
    reward: float = 0.0,
    done: bool = False,
    max_step: bool = False,
    masked: Sequence[bool] = (),
) -> demo_pb.AgentInfoProto:
    """One agent's info with float observations; ``masked``: Unity's mask (True = masked)."""
    info = demo_pb.AgentInfoProto(id=agent_id, reward=reward, done=done, max_step_reached=max_step)
    for values in observations:
        obs = info.observations.add(shape=[len(values)], compression_type=demo_pb.NONE)
        obs.float_data.data.extend(values)
    info.action_mask.extend(masked)
    return info


def demo_transcript(
    path: str | Path, limit: int | None = None
) -> tuple[demo_pb.BrainParametersProto, list[demo_pb.AgentInfoProto]]:
    """A .demo file's brain parameters and its recorded agent infos (the first ``limit``), one per step."""
    demo_file, brain = _read_file(Path(path))
    return brain, [pair.agent_info for pair in demo_file.pairs[:limit]]


class FakeUnity:
    """One Unity session against the gateway at ``address``."""

    def __init__(self, address: str, name: str = "FakeUnity") -> None:
        self.address = address
        self.name = name
        self.brains: dict[str, demo_pb.BrainParametersProto] = {}
        self._sent: set[str] = set()
        self._channel: grpc.aio.Channel | None = None
        self._stub: unity_grpc.UnityToExternalProtoStub | None = None

    async def _exchange(self, message: unity_pb.UnityMessageProto) -> unity_pb.UnityMessageProto:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.address)
            self._stub = unity_grpc.UnityToExternalProtoStub(self._channel)
        return await self._stub.Exchange(message)

    async def start(self) -> tuple[unity_pb.UnityMessageProto, unity_pb.UnityMessageProto]:
        """The init call and the empty call; returns both replies (the second carries the RESET)."""
        init = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
        out = init.unity_output.rl_initialization_output
        out.name = self.name
        out.communication_version = UNITY_COMMUNICATION_VERSION
        out.package_version = UNITY_PACKAGE_VERSION
        out.capabilities.baseRLCapabilities = True
        out.capabilities.hybridActions = True
        first = await self._exchange(init)
        second = await self._exchange(unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200)))
        self._sent.clear()
        return first, second

    async def step(
        self, agent_infos: Mapping[str, Sequence[demo_pb.AgentInfoProto]], side_channel: bytes = b""
    ) -> unity_pb.UnityMessageProto:
        """One decision step; a behavior's brain parameters go with its first step with agents."""
        message = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
        rl_output = message.unity_output.rl_output
        for name in self.brains:
            rl_output.agentInfos[name].value.extend(agent_infos.get(name, ()))
        for name, infos in agent_infos.items():
            if name not in self.brains:
                raise KeyError(f"declare behavior {name!r} in FakeUnity.brains first")
            if infos and name not in self._sent:
                message.unity_output.rl_initialization_output.brain_parameters.append(self.brains[name])
                self._sent.add(name)
        rl_output.side_channel = side_channel
        return await self._exchange(message)

    async def stop(self) -> unity_pb.UnityMessageProto:
        """The Editor's Stop: status 400, nothing else."""
        reply = await self._exchange(unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=400)))
        await self.close()
        return reply

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._stub = None
