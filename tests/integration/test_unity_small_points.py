"""Smaller differences from mlagents-learn: a communication-version refusal is one ERROR line, and two sessions whose
specs differ only in their sensor names are refused naming the names."""

from __future__ import annotations

import logging

import grpc
import numpy as np
import pytest

from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.session import EnvSession, StepRejectedError
from envclient.unity.gateway import GatewayServer, GatewaySettings
from protos import mlagents_unity_pb2 as unity_pb
from protos import unity_to_external_pb2_grpc as unity_grpc
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import itest_settings


async def test_a_communication_version_refusal_is_one_error_line(
    start_processor: StartProcessor, caplog: pytest.LogCaptureFixture
) -> None:
    _, address = await start_processor(itest_settings())
    gateway = GatewayServer(GatewaySettings(processor=address), port=0)
    port = await gateway.start()
    init = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
    out = init.unity_output.rl_initialization_output
    out.name, out.communication_version, out.package_version = "Future", "2.0.0", "4.0.0"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with caplog.at_level(logging.ERROR, logger="envclient.unity.gateway"):
                reply = await unity_grpc.UnityToExternalProtoStub(channel).Exchange(init)
    finally:
        await gateway.stop()
    assert reply.header.status == 500 and "communication version '2.0.0'" in reply.header.message
    (record,) = [r for r in caplog.records if r.name == "envclient.unity.gateway"]
    assert record.levelno == logging.ERROR and record.exc_info is None
    assert "\n" not in record.getMessage() and "the gateway speaks 1.5.0" in record.getMessage()


def _ball(sensor: str) -> BrainParameters:
    return BrainParameters("3DBall", (ObservationSpec((8,), np.dtype(np.float32), sensor),), ActionSpec(2, ()))


async def test_specs_that_differ_only_in_sensor_names_are_refused_naming_them(start_processor: StartProcessor) -> None:
    _, address = await start_processor(itest_settings())
    async with EnvSession(address, "unity-0/3DBall", [_ball("VectorSensor")]):
        second = EnvSession(address, "unity-1/3DBall", [_ball("StackingSensor_size3_VectorSensor")])
        with pytest.raises(StepRejectedError) as err:
            await second.open()
        await second.close()
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "float32[8] 'VectorSensor'" in err.value.details
    assert "float32[8] 'StackingSensor_size3_VectorSensor'" in err.value.details
