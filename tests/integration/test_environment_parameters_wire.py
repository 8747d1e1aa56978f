"""Environment parameters on the Step stream (``processor.environment_parameters``), through the real server.

A client that asks (``ACCEPTS_METADATA``, which ``EnvSession`` sends) gets the current samplers before its
HelloReply, and a lesson change before the next ActionInfo; an older client, which does not ask, gets one
answer per request as before and never an ``environment_parameters`` message.
"""

from __future__ import annotations

import grpc
import numpy as np

from common.environment_parameters import (
    CompletionCriteria,
    ConstantSampler,
    EnvironmentParameter,
    Lesson,
    UniformSampler,
)
from envclient.session import EnvSession, brain_info_message
from processor.environment_parameters import EnvironmentParameterService
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.assembly_cases import CONTINUOUS
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings

CRITERIA = CompletionCriteria(behavior=CONTINUOUS.behavior_name, threshold=1.0, min_lesson_length=1, require_reset=True)
PARAMETERS = {
    "gravity": EnvironmentParameter(
        lessons=(
            Lesson(name="light", value=ConstantSampler(value=1.0), completion_criteria=CRITERIA),
            Lesson(name="heavy", value=UniformSampler(min_value=5.0, max_value=6.0, seed=3)),
        ),
        curriculum=True,
    )
}
OBS = [np.zeros((1, 2), np.float32)]


async def _served(start_processor: StartProcessor) -> Harness:
    server, address = await start_processor(itest_settings())
    server.servicer.environment_parameters = EnvironmentParameterService(PARAMETERS, 0, {CONTINUOUS.behavior_name: 1000})
    harness = Harness(server, address)
    harness.publish_policy(CONTINUOUS, 1)
    return harness


async def _step(session: EnvSession, done: bool, reward: float) -> None:
    await session.step(CONTINUOUS.behavior_name, np.array([7]), OBS, np.array([reward], np.float32), np.array([done]))


async def test_a_client_that_asks_gets_the_samplers_and_each_lesson_change(start_processor: StartProcessor) -> None:
    harness = await _served(start_processor)
    async with EnvSession(harness.address, "asks", [CONTINUOUS]) as session:
        received = session.environment_parameters
        assert received.version == 1  # before the HelloReply
        assert received.samplers == {"gravity": ConstantSampler(value=1.0, seed=0)}
        assert received.lessons == {"gravity": 0} and not received.reset_pending
        await _step(session, done=False, reward=0.0)
        assert received.version == 1  # nothing changed: nothing sent
        await _step(session, done=True, reward=2.0)  # an episode of reward 2 > threshold 1 ends: the lesson changes
        assert received.version == 2
        assert received.samplers == {"gravity": UniformSampler(min_value=5.0, max_value=6.0, seed=3)}
        assert received.lessons == {"gravity": 1}
        assert received.reset_pending  # require_reset
        await _step(session, done=False, reward=0.0)
        assert received.version == 2
    trajectories = await harness.claim(CONTINUOUS.behavior_name)
    lessons = [s for t in trajectories for s in t.environment_stats if s.key == "Environment/Lesson Number/gravity"]
    assert lessons and lessons[-1].value == 1.0


async def test_an_older_client_gets_one_answer_per_request_and_no_parameters(start_processor: StartProcessor) -> None:
    harness = await _served(start_processor)
    async with grpc.aio.insecure_channel(harness.address) as channel:
        call = pb_grpc.AgentProcessorStub(channel).Step()
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="old")
        hello.brain_parameters.append(CONTINUOUS.to_proto())
        await call.write(pb.StepRequest(hello=hello))
        assert (await call.read()).WhichOneof("payload") == "hello_reply"
        for k, done in enumerate((False, True, False)):
            rewards = np.array([2.0 if done else 0.0], np.float32)
            info = brain_info_message(CONTINUOUS.behavior_name, np.array([7]), OBS, rewards, np.array([done]))
            await call.write(pb.StepRequest(brain_info=info))
            assert (await call.read()).WhichOneof("payload") == "action_info", k
        await call.done_writing()
    assert harness.server.servicer.environment_parameters.curriculum.lesson_numbers() == {"gravity": 1}


def test_the_service_of_a_config_takes_each_criteria_behaviors_max_steps() -> None:
    from common.config import parse_config
    from processor.environment_parameters import parameter_service

    criteria = {"behavior": "Other", "measure": "progress", "threshold": 0.5}
    lessons = [{"name": "a", "value": 1.0, "completion_criteria": criteria}, {"name": "b", "value": 2.0}]
    config = {
        "behaviors": {"Mine": {"max_steps": 100}},
        "default_settings": {"max_steps": 40},
        "environment_parameters": {"p": {"curriculum": lessons}},
    }
    service = parameter_service(parse_config(config), 0)
    assert service is not None and service.max_steps == {"Mine": 100, "Other": 40}
    assert parameter_service(parse_config({"behaviors": {"Mine": {}}}), 0) is None
