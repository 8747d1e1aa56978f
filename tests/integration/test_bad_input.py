"""Bad input on the Step stream: the offending stream ends with the right status and a message
naming what is wrong, and a well-behaved session running at the same time is untouched.

Each case runs while the well-behaved session is mid-episode (after step 2 of the
``agents_end_episodes_at_different_steps`` case): its trajectories must still be exactly the
case's. Malformed messages are built directly with ``protos.pb`` / ``to_tensor`` and sent through
``EnvSession.send``, or through a raw stub where the real client cannot misbehave that way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import numpy as np
import pytest

from common.demo_images import encode_pngs
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_png_tensor, to_tensor
from envclient.session import EnvSession, MessageTooLargeError, StepRejectedError
from processor.behaviors import BehaviorRuntime
from processor.server import ProcessorServer, ServerOptions
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.assembly_cases import CASES, CONTINUOUS, HYBRID, R, brain_info_proto, step
from tests.integration.helpers import STOP_GRACE_S, Harness, assert_published, from_expect, itest_settings, serve_steps

GOOD_CASE = next(c for c in CASES if c.name == "agents_end_episodes_at_different_steps")
CAMERA = BrainParameters(
    "Camera",
    (ObservationSpec((8, 8, 3), np.dtype(np.uint8), "rgb"), ObservationSpec((2, 2, 1), np.dtype(np.float32), "depth")),
    ActionSpec(0, (3,)),
)
"""An image behavior small enough for this server's message limit: a uint8 camera and a float32 image."""
MAX_MESSAGE_BYTES = 64 * 1024
"""gRPC's own limit on this server: far above a normal BrainInfo, far below an oversized one."""


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    """A strict server (only Walker and Gridder configured) with a small message limit, both policies published."""
    settings = itest_settings(
        behaviors={
            p.behavior_name: BehaviorRuntime(time_horizon=GOOD_CASE.time_horizon) for p in (CONTINUOUS, HYBRID, CAMERA)
        },
        strict=True,
    )
    server = ProcessorServer(settings, ServerOptions(max_message_bytes=MAX_MESSAGE_BYTES))
    port = await server.start()
    try:
        harness = Harness(server, f"127.0.0.1:{port}")
        harness.publish_policy(CONTINUOUS, version=1)
        harness.publish_policy(HYBRID, version=1)
        harness.publish_policy(CAMERA, version=1)
        yield harness
    finally:
        await server.stop(STOP_GRACE_S)


# -- ways to misbehave ---------------------------------------------------------------------------


def walker_info(*agent_ids: int) -> pb.BrainInfo:
    """A valid Walker BrainInfo for ``agent_ids`` (obs = agent id)."""
    return brain_info_proto(step(*(R(a, float(a), 0.5) for a in agent_ids)), CONTINUOUS)


def gridder_info(mask: list[list[int]]) -> pb.BrainInfo:
    """A valid-but-for-its-mask Gridder BrainInfo for agents 7 and 8."""
    msg = brain_info_proto(step(R(7, 7.0), R(8, 8.0)), HYBRID)
    to_tensor(np.array(mask, np.uint8), msg.action_mask)
    return msg


async def send_after_hello(harness: Harness, info: pb.BrainInfo, params: BrainParameters = CONTINUOUS) -> StepRejectedError:
    """Open a real EnvSession, send one good step (its agents now have state), then ``info``."""
    session = EnvSession(harness.address, "bad-client", [params])
    try:
        await session.open()
        if params is CONTINUOUS:
            await session.send(walker_info(7, 9))
        with pytest.raises(StepRejectedError) as caught:
            await session.send(info)
        return caught.value
    finally:
        await session.close()


async def hello_with(
    harness: Harness, *params: BrainParameters | pb.BrainParameters, version: int = PROTOCOL_VERSION
) -> StepRejectedError:
    """A raw Hello declaring ``params`` (protos as they are, so invalid specs get through) with ``version``."""
    hello = pb.Hello(protocol_version=version, client_id="bad-client")
    hello.brain_parameters.extend(p if isinstance(p, pb.BrainParameters) else p.to_proto() for p in params)
    return await raw_stream(harness, pb.StepRequest(hello=hello))


async def raw_stream(harness: Harness, *requests: pb.StepRequest) -> StepRejectedError:
    """Write ``requests`` one by one on a raw Step stream, reading an answer to each; the status that ends it."""
    async with grpc.aio.insecure_channel(harness.address) as channel:
        call = pb_grpc.AgentProcessorStub(channel).Step()
        try:
            for request in requests:
                await call.write(request)
                response = await call.read()
                if response is grpc.aio.EOF:
                    break
        except grpc.aio.AioRpcError as err:
            return StepRejectedError(err.code(), err.details() or "")
        code = await call.code()
        assert code != grpc.StatusCode.OK, "the stream was not refused"
        return StepRejectedError(code, await call.details() or "")


def with_tensor(info: pb.BrainInfo, edit: Callable[[pb.BrainInfo], None]) -> pb.BrainInfo:
    edit(info)
    return info


def bad_value(field: str, value: float) -> pb.BrainInfo:
    """A Walker step for agents 9 and 7 whose ``field`` of agent 7 is ``value``."""
    info = walker_info(9, 7)
    if field == "obs":
        to_tensor(np.array([[9.0, -9.0], [value, 1.0]], np.float32), info.observations[0])
    else:
        to_tensor(np.array([0.5, value], np.float32), info.rewards)
    return info


def camera_info(rgb: np.ndarray | None = None, depth: np.ndarray | None = None) -> pb.BrainInfo:
    """A Camera BrainInfo for agents 7 and 8, valid unless ``rgb`` / ``depth`` replace its images."""
    msg = pb.BrainInfo(behavior_name=CAMERA.behavior_name)
    to_tensor(np.array([7, 8]), msg.agent_ids)
    to_tensor(np.full((2, 8, 8, 3), 200, np.uint8) if rgb is None else rgb, msg.observations.add())
    to_tensor(np.zeros((2, 2, 2, 1), np.float32) if depth is None else depth, msg.observations.add())
    to_tensor(np.zeros(2, np.float32), msg.rewards)
    to_tensor(np.zeros(2, bool), msg.done)
    to_tensor(np.zeros(2, bool), msg.max_reached)
    return msg


def undecodable_png(info: pb.BrainInfo) -> None:
    """Agent 8's camera image is PNG-compressed bytes that are not a PNG; agent 7's is a good PNG."""
    to_png_tensor(
        [encode_pngs(np.zeros((8, 8, 3), np.uint8)), b"\x89PNG garbage"], (2, 8, 8, 3), np.uint8, (), info.observations[0]
    )


def nan_depth() -> np.ndarray:
    depth = np.zeros((2, 2, 2, 1), np.float32)
    depth[1, 0, 1, 0] = np.nan  # agent 8
    return depth


def truncate_rewards(info: pb.BrainInfo) -> None:
    info.rewards.data = info.rewards.data[:-2]


def add_observation(info: pb.BrainInfo) -> None:
    to_tensor(np.zeros((2, 2), np.float32), info.observations.add())


def widen_observation(info: pb.BrainInfo) -> None:
    to_tensor(np.zeros((2, 3), np.float32), info.observations[0])


def max_reached_alone(info: pb.BrainInfo) -> None:
    to_tensor(np.array([False, True]), info.max_reached)


def oversized() -> pb.BrainInfo:
    ids = np.arange(10_000)
    return brain_info_proto(step(*(R(int(a), 1.0) for a in ids)), CONTINUOUS)


def hello(params: BrainParameters, client_id: str = "bad-client") -> pb.StepRequest:
    msg = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id=client_id)
    msg.brain_parameters.append(params.to_proto())
    return pb.StepRequest(hello=msg)


@dataclass(frozen=True)
class BadCase:
    name: str
    misbehave: Callable[[Harness], Awaitable[StepRejectedError]]
    code: grpc.StatusCode
    details: tuple[str, ...]
    """Every one of these must appear in the status details."""


INVALID = grpc.StatusCode.INVALID_ARGUMENT
WALKER = "behavior 'Walker'"
BAD_CASES = (
    BadCase(
        "brain_info_before_hello",
        lambda h: raw_stream(h, pb.StepRequest(brain_info=walker_info(7))),
        grpc.StatusCode.FAILED_PRECONDITION,
        ("first message of a Step stream must be a Hello",),
    ),
    BadCase(
        "second_hello_on_one_stream",
        lambda h: raw_stream(h, hello(CONTINUOUS), hello(CONTINUOUS)),
        grpc.StatusCode.FAILED_PRECONDITION,
        ("second Hello",),
    ),
    BadCase(
        "step_request_without_payload",
        lambda h: raw_stream(h, hello(CONTINUOUS), pb.StepRequest()),
        INVALID,
        ("StepRequest with no payload",),
    ),
    BadCase(
        "client_id_too_long",
        lambda h: raw_stream(h, hello(CONTINUOUS, client_id="c" * 4096)),
        INVALID,
        ("hello.client_id", "longer than 256 bytes", "(4096 bytes)"),
    ),
    BadCase(
        "too_many_behaviors_in_one_hello",
        lambda h: hello_with(
            h, *(BrainParameters(f"B{i}", CONTINUOUS.observation_specs, CONTINUOUS.action_spec) for i in range(65))
        ),
        INVALID,
        ("declares 65 behaviors; at most 64",),
    ),
    BadCase(
        "trajectory_larger_than_the_message_limit",
        lambda h: hello_with(
            h, BrainParameters("Walker", (ObservationSpec((1 << 16,), np.dtype(np.float32)),), ActionSpec(2))
        ),
        INVALID,
        (WALKER, f"a trajectory of time_horizon {GOOD_CASE.time_horizon}", f"{MAX_MESSAGE_BYTES:,}-byte message limit"),
    ),
    BadCase(
        "brain_info_of_undeclared_behavior",
        lambda h: send_after_hello(h, brain_info_proto(step(R(7, 7.0), R(8, 8.0)), HYBRID)),
        grpc.StatusCode.NOT_FOUND,
        ("behavior 'Gridder' was not declared in the Hello", "declared: ['Walker']"),
    ),
    BadCase(
        "hello_with_behavior_not_in_strict_config",
        lambda h: hello_with(h, BrainParameters("Stranger", CONTINUOUS.observation_specs, CONTINUOUS.action_spec)),
        grpc.StatusCode.NOT_FOUND,
        ("behavior 'Stranger' is not in the processor's config", "Gridder", "Walker"),
    ),
    BadCase(
        "tensor_byte_length_mismatch",
        lambda h: send_after_hello(h, with_tensor(walker_info(9, 7), truncate_rewards)),
        INVALID,
        (WALKER, "rewards: 6 bytes do not match shape [2] of float32 (8 bytes expected)"),
    ),
    BadCase(
        "observation_count_differs_from_brain_parameters",
        lambda h: send_after_hello(h, with_tensor(walker_info(9, 7), add_observation)),
        INVALID,
        (WALKER, "2 observations sent, BrainParameters declare 1"),
    ),
    BadCase(
        "observation_shape_differs_from_brain_parameters",
        lambda h: send_after_hello(h, with_tensor(walker_info(9, 7), widen_observation)),
        INVALID,
        (WALKER, "observations[0] is float32 [2, 3], BrainParameters declare float32 [2, 2]"),
    ),
    BadCase(
        "nan_in_observation",
        lambda h: send_after_hello(h, bad_value("obs", np.nan)),
        INVALID,
        (WALKER, "observations[0] of agent 7 is NaN or Inf"),
    ),
    BadCase(
        "inf_in_observation",
        lambda h: send_after_hello(h, bad_value("obs", -np.inf)),
        INVALID,
        (WALKER, "observations[0] of agent 7 is NaN or Inf"),
    ),
    BadCase(
        "nan_in_reward",
        lambda h: send_after_hello(h, bad_value("reward", np.nan)),
        INVALID,
        (WALKER, "rewards of agent 7 is NaN or Inf"),
    ),
    BadCase(
        "inf_in_reward",
        lambda h: send_after_hello(h, bad_value("reward", np.inf)),
        INVALID,
        (WALKER, "rewards of agent 7 is NaN or Inf"),
    ),
    BadCase(
        "duplicate_agent_ids",
        lambda h: send_after_hello(h, walker_info(3, 5, 3)),
        INVALID,
        (WALKER, "duplicate agent ids [3]"),
    ),
    BadCase(
        "max_reached_without_done",
        lambda h: send_after_hello(h, with_tensor(walker_info(9, 7), max_reached_alone)),
        INVALID,
        (WALKER, "max_reached without done for agent 7"),
    ),
    BadCase(
        "action_mask_of_wrong_width",
        lambda h: send_after_hello(h, gridder_info([[1, 1, 1, 1], [1, 1, 1, 1]]), HYBRID),
        INVALID,
        ("behavior 'Gridder'", "action_mask must be [2, 5] (sum of branches [3, 2]), got uint8 [2, 4]"),
    ),
    BadCase(
        "action_mask_branch_with_nothing_allowed",
        lambda h: send_after_hello(h, gridder_info([[1, 0, 0, 1, 1], [0, 1, 0, 0, 0]]), HYBRID),
        INVALID,
        ("behavior 'Gridder'", "action_mask allows nothing in branch 1 for agent 8"),
    ),
    BadCase(
        "protocol_version_mismatch",
        lambda h: hello_with(h, CONTINUOUS, version=PROTOCOL_VERSION + 1),
        grpc.StatusCode.FAILED_PRECONDITION,
        (f"protocol version {PROTOCOL_VERSION + 1}", f"this processor speaks {PROTOCOL_VERSION}"),
    ),
    BadCase(
        "brain_parameters_differ_from_the_declared_behavior",
        lambda h: hello_with(h, BrainParameters("Walker", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(2))),
        grpc.StatusCode.FAILED_PRECONDITION,
        ("behavior 'Walker' is already declared with other BrainParameters", "float32[2]", "float32[3]"),
    ),
    BadCase(
        "oversized_message",
        # A raw stream: the SDK itself refuses to send it (test_the_sdk_refuses_an_oversized_step_...).
        lambda h: raw_stream(h, hello(CONTINUOUS), pb.StepRequest(brain_info=oversized())),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        ("larger than max", str(MAX_MESSAGE_BYTES)),
    ),
    BadCase(
        "image_size_differs_from_its_spec",
        lambda h: send_after_hello(h, camera_info(rgb=np.zeros((2, 8, 7, 3), np.uint8)), CAMERA),
        INVALID,
        ("behavior 'Camera'", "observations[0] is uint8 [2, 8, 7, 3], BrainParameters declare uint8 [2, 8, 8, 3]"),
    ),
    BadCase(
        "image_bytes_differ_from_its_shape",
        lambda h: send_after_hello(
            h, with_tensor(camera_info(), lambda m: setattr(m.observations[0], "data", b"\0" * 300)), CAMERA
        ),
        INVALID,
        ("behavior 'Camera'", "observations[0]: 300 bytes do not match shape [2, 8, 8, 3] of uint8 (384 bytes expected)"),
    ),
    BadCase(
        "png_that_does_not_decode",
        lambda h: send_after_hello(h, with_tensor(camera_info(), undecodable_png), CAMERA),
        INVALID,
        ("behavior 'Camera'", "observations[0] of agent 8", "not a PNG"),
    ),
    BadCase(
        "image_of_which_no_agent_fits_the_message_limit",
        lambda h: hello_with(
            h, BrainParameters("Camera", (ObservationSpec((200, 200, 3), np.dtype(np.uint8)),), ActionSpec(0, (3,)))
        ),
        INVALID,
        # One agent's BrainInfo would not fit either; a trajectory holds at least two frames, so its check,
        # at Hello, is the one that refuses (gRPC would refuse every step of it, naming no behavior).
        ("behavior 'Camera'", f"a trajectory of time_horizon {GOOD_CASE.time_horizon}", f"{MAX_MESSAGE_BYTES:,}-byte"),
    ),
    BadCase(
        "float_image_with_nan",
        lambda h: send_after_hello(h, camera_info(depth=nan_depth()), CAMERA),
        INVALID,
        ("behavior 'Camera'", "observations[1] of agent 8 is NaN or Inf"),
    ),
    BadCase(
        "image_over_the_frame_cap_in_hello",
        lambda h: hello_with(
            h, BrainParameters("Camera", (ObservationSpec((1024, 1024, 3), np.dtype(np.uint8)),), ActionSpec(0, (3,)))
        ),
        INVALID,
        ("behavior 'Camera'", "images of 3,145,728 bytes per agent", "at most 1,048,576 bytes (MAX_FRAME_BYTES)"),
    ),
    BadCase(
        "image_trajectory_larger_than_the_message_limit",
        lambda h: hello_with(
            h, BrainParameters("Camera", (ObservationSpec((84, 84, 3), np.dtype(np.uint8)),), ActionSpec(0, (3,)))
        ),
        INVALID,
        (
            "behavior 'Camera'",
            f"a trajectory of time_horizon {GOOD_CASE.time_horizon}",
            "21,196 per experience",
            f"{MAX_MESSAGE_BYTES:,}-byte",
        ),
    ),
)


@pytest.mark.parametrize("bad", BAD_CASES, ids=[b.name for b in BAD_CASES])
async def test_bad_input_ends_only_its_own_stream(bad: BadCase, harness: Harness) -> None:
    refused: list[StepRejectedError] = []

    async def misbehave() -> None:
        refused.append(await bad.misbehave(harness))

    run = await serve_steps(harness, GOOD_CASE.steps, GOOD_CASE.params, after_step={2: misbehave})

    (error,) = refused
    assert error.code == bad.code, f"{error.code.name}: {error.details}"
    for part in bad.details:
        assert part in error.details, f"{part!r} not in {error.details!r}"
    # The well-behaved session, mid-episode throughout, got exactly its trajectories and nothing else came.
    assert_published(run, [from_expect(e, run) for e in GOOD_CASE.expected], harness)
    assert await harness.claim(CONTINUOUS.behavior_name) == [], "the refused session published something"
    assert await harness.claim(HYBRID.behavior_name) == []
    assert await harness.claim(CAMERA.behavior_name) == []
    assert harness.behavior("Walker").params == CONTINUOUS
    assert harness.session_count() == 0


async def test_the_sdk_refuses_an_oversized_step_by_name_and_the_session_goes_on(harness: Harness) -> None:
    """gRPC would end the stream with RESOURCE_EXHAUSTED naming no behavior; the SDK measures first, against the
    processor's limit from its HelloReply."""
    agents = np.arange(1000)
    big = pb.BrainInfo(behavior_name=CAMERA.behavior_name)
    to_tensor(agents, big.agent_ids)
    to_tensor(np.zeros((1000, 8, 8, 3), np.uint8), big.observations.add())
    to_tensor(np.zeros((1000, 2, 2, 1), np.float32), big.observations.add())
    for field, dtype in (("rewards", np.float32), ("done", bool), ("max_reached", bool)):
        to_tensor(np.zeros(1000, dtype), getattr(big, field))
    refused: list[MessageTooLargeError] = []

    async def misbehave() -> None:
        # The client's own limit is 16 MiB: the HelloReply tells it the processor's.
        async with EnvSession(harness.address, "camera-client", [CAMERA]) as session:
            assert session.max_message_bytes == MAX_MESSAGE_BYTES
            with pytest.raises(MessageTooLargeError) as caught:
                await session.send(big)
            refused.append(caught.value)
            result = await session.send(camera_info())  # the same session steps on
            assert result.discrete_actions.shape == (2, 1)

    run = await serve_steps(harness, GOOD_CASE.steps, GOOD_CASE.params, after_step={2: misbehave})

    (error,) = refused
    message = str(error)
    fit = (MAX_MESSAGE_BYTES - 400) // 222  # about 222 bytes per agent (8x8x3 + 2x2x1 float32 + id, reward, flags)
    for part in (
        "behavior 'Camera'",
        "a BrainInfo of 1000 agents takes",
        f"{MAX_MESSAGE_BYTES:,}-byte message limit",
        "agents fit",
    ):
        assert part in message, f"{part!r} not in {message!r}"
    said = int(message.split("at most ")[1].split(" agents fit")[0])
    assert abs(said - fit) <= 3, message
    assert_published(run, [from_expect(e, run) for e in GOOD_CASE.expected], harness)
    assert await harness.claim(CONTINUOUS.behavior_name) == []
