"""The gateway hands the processor's environment-parameter samplers to Unity on the EnvironmentParametersChannel.

A fake Unity steps one behavior through the real gateway and processor: the samplers reach Unity, once,
on the step input after the behavior's session opened, in ML-Agents' bytes (``sampler_messages``, checked
against ML-Agents' own encoder in ``tests/unit/test_unity_environment_parameters.py``), and again when a
lesson changes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from common.environment_parameters import (
    CompletionCriteria,
    ConstantSampler,
    EnvironmentParameter,
    GaussianSampler,
    Lesson,
    UniformSampler,
)
from envclient.unity import translate
from envclient.unity.environment_parameters import sampler_messages
from envclient.unity.gateway import GatewayServer, GatewaySettings
from processor.environment_parameters import EnvironmentParameterService
from protos import mlagents_unity_pb2 as unity_pb
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings
from tests.unity_fake import FakeUnity, agent_info, brain_proto

WALKER = brain_proto("Walker", continuous=2)
CRITERIA = CompletionCriteria(behavior="Walker", threshold=0.5, min_lesson_length=1, signal_smoothing=False)
PARAMETERS = {
    "mass": EnvironmentParameter(lessons=(Lesson(name="mass", value=UniformSampler(min_value=1.0, max_value=2.0, seed=4)),)),
    "height": EnvironmentParameter(
        lessons=(
            Lesson(name="low", value=ConstantSampler(value=1.0), completion_criteria=CRITERIA),
            Lesson(name="high", value=GaussianSampler(mean=3.0, st_dev=0.5, seed=9)),
        ),
        curriculum=True,
    ),
}


@pytest.fixture
async def unity(start_processor: StartProcessor) -> AsyncIterator[tuple[FakeUnity, Harness]]:
    server, address = await start_processor(itest_settings())
    server.servicer.environment_parameters = EnvironmentParameterService(PARAMETERS, 0, {"Walker": 1000})
    gateway = GatewayServer(GatewaySettings(processor=address, backoff_initial_s=0.05, reconnect_timeout_s=10.0), port=0)
    port = await gateway.start()
    fake = FakeUnity(f"127.0.0.1:{port}")
    fake.brains["Walker"] = WALKER
    harness = Harness(server, address)
    try:
        yield fake, harness
    finally:
        await fake.close()
        await gateway.stop()


def _side_channel(reply: unity_pb.UnityMessageProto) -> bytes:
    assert reply.header.status == 200, reply.header.message
    return bytes(reply.unity_input.rl_input.side_channel)


async def test_samplers_reach_unity_once_and_again_at_a_lesson_change(unity: tuple[FakeUnity, Harness]) -> None:
    fake, harness = unity
    first = agent_info(0, [[0.0, 0.0, 0.0]])
    harness.publish_policy(translate.behavior_spec(WALKER, first), 1)
    await fake.start()
    samplers = {"mass": PARAMETERS["mass"].lessons[0].value, "height": ConstantSampler(value=1.0, seed=0)}
    assert _side_channel(await fake.step({"Walker": [first]})) == sampler_messages(samplers)
    assert _side_channel(await fake.step({"Walker": [agent_info(0, [[1.0, 0.0, 0.0]])]})) == b""
    # An episode of reward 1 > threshold 0.5 ends: "height" moves to its second lesson, and Unity is told.
    reply = await fake.step({"Walker": [agent_info(0, [[2.0, 0.0, 0.0]], reward=1.0, done=True)]})
    assert _side_channel(reply) == sampler_messages({**samplers, "height": GaussianSampler(mean=3.0, st_dev=0.5, seed=9)})
    await fake.stop()
