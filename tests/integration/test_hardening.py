"""Hostile peers against the real server: one message must never stall a behavior, hold state it did not
pay for, or end in UNKNOWN / RESOURCE_EXHAUSTED instead of a clear status (issue 13).

Every test talks to a real ``ProcessorServer`` on loopback port 0 through raw stubs (a hostile peer
does not use our clients) or the real trainer-side clients, and checks both the status the peer gets
and what the server holds afterwards.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import numpy as np
import pytest

from common.environment_stats import MAX_STATS_PER_MESSAGE, MAX_STATS_PER_TRAJECTORY
from common.errors import ProtocolError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.topics.grpc_transport import GrpcPolicyPublisher, GrpcTrajectorySubscription
from common.trajectory import Trajectory, TrajectoryId
from envclient.session import EnvSession, brain_info_message
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.server import ProcessorServer, ServerOptions
from processor.servicer import MAX_STATUS_DETAILS_BYTES
from processor.wire import MAX_BEHAVIORS_PER_HELLO, MAX_CLIENT_ID_BYTES, TrajectorySize, check_trajectory_fits
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.assembly_cases import CONTINUOUS, R, brain_info_proto, step
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import LIVENESS_S, policy_update, wait_until
from tests.policies import build_mlp_policy_update

F32 = np.dtype(np.float32)
WIDE = BrainParameters("Wide", (ObservationSpec((1 << 16,), F32),), ActionSpec(2))
"""The widest observation a Hello may declare (``MAX_ROW_WIDTH``): at time_horizon 64 a trajectory passes 16 MiB."""


def hello(*params: BrainParameters | pb.BrainParameters, client_id: str = "hostile") -> pb.StepRequest:
    msg = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id=client_id)
    msg.brain_parameters.extend(p if isinstance(p, pb.BrainParameters) else p.to_proto() for p in params)
    return pb.StepRequest(hello=msg)


def named(name: str, params: BrainParameters = CONTINUOUS) -> BrainParameters:
    return BrainParameters(name, params.observation_specs, params.action_spec)


async def raw_step(address: str, *requests: pb.StepRequest) -> tuple[grpc.StatusCode, str, list[pb.StepResponse]]:
    """Write ``requests`` on a raw Step stream, reading an answer to each; the status that ends it."""
    answers: list[pb.StepResponse] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call = pb_grpc.AgentProcessorStub(channel).Step()
        try:
            for request in requests:
                await call.write(request)
                response = await call.read()
                if response is grpc.aio.EOF:
                    break
                answers.append(response)
            await call.done_writing()
            return await asyncio.wait_for(call.code(), LIVENESS_S), await call.details() or "", answers
        except grpc.aio.AioRpcError as err:
            return err.code(), err.details() or "", answers


def trajectory(sequence: int, steps: int, width: int, session_id: str = "s0") -> Trajectory:
    """A continuous-action Walker-like trajectory of ``steps`` experiences of ``width`` floats."""
    return Trajectory(
        id=TrajectoryId(session_id, agent_id=7, sequence=sequence),
        behavior_name=CONTINUOUS.behavior_name,
        obs=[np.full((steps, width), sequence, np.float32)],
        next_obs=[np.zeros(width, np.float32)],
        continuous_actions=np.zeros((steps, 2), np.float32),
        discrete_actions=np.zeros((steps, 0), np.int32),
        continuous_log_probs=np.zeros((steps, 2), np.float32),
        discrete_log_probs=np.zeros((steps, 0), np.float32),
        prev_continuous_actions=np.zeros((steps, 2), np.float32),
        prev_discrete_actions=np.zeros((steps, 0), np.int32),
        action_mask=None,
        rewards=np.zeros(steps, np.float32),
        done=np.zeros(steps, bool),
        policy_versions=np.zeros(steps, np.int64),
        done_reached=False,
        interrupted=False,
    )


# -- 1. what can be declared always fits a message -------------------------------------------------


async def test_a_hello_whose_trajectories_cannot_fit_a_message_is_refused_with_the_numbers(
    start_processor: StartProcessor,
) -> None:
    server, address = await start_processor(ProcessorSettings())  # no config: time_horizon 64
    code, details, _ = await raw_step(address, hello(WIDE))
    longest = TrajectorySize.of(WIDE).longest_within(16 * 1024 * 1024)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details}"
    for part in ("behavior 'Wide'", "time_horizon 64", "16,777,216-byte message limit", f"time_horizon to at most {longest}"):
        assert part in details, f"{part!r} not in {details!r}"
    assert 0 < longest < 64
    assert server.behaviors.values() == [] and server.topics.behavior_names() == []


@pytest.mark.parametrize("what", ["client_id", "behavior_name"])
async def test_an_overlong_client_id_or_behavior_name_is_refused_without_quoting_it_whole(
    what: str, start_processor: StartProcessor, caplog: pytest.LogCaptureFixture
) -> None:
    server, address = await start_processor(ProcessorSettings())
    long = "x" * (1 << 20)
    request = hello(CONTINUOUS, client_id=long) if what == "client_id" else hello(named(long))
    with caplog.at_level(logging.INFO):
        code, details, _ = await raw_step(address, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details[:200]}"
    assert f"longer than {MAX_CLIENT_ID_BYTES} bytes" in details and f"({1 << 20} bytes)" in details
    assert len(details) < 400
    assert max(len(r.getMessage()) for r in caplog.records) < 1000, "a log line quotes the whole name"
    assert server.sessions.opened == 0 and server.topics.behavior_names() == []


async def test_a_trajectory_too_large_to_send_is_dropped_and_the_next_one_delivered() -> None:
    """Defence in depth: one that passed Hello's bound anyway (a smaller limit) must not wedge the topic."""
    server = ProcessorServer(
        ProcessorSettings(behaviors={"Walker": BehaviorRuntime()}), ServerOptions(max_message_bytes=64 * 1024)
    )
    port = await server.start()
    try:
        topic = server.topics.trajectories("Walker")
        await topic.publish(trajectory(0, steps=64, width=512))  # ~140 KB encoded, over the 64 KiB limit
        await topic.publish(trajectory(1, steps=2, width=2))
        with GrpcTrajectorySubscription(f"127.0.0.1:{port}", "Walker", "trainer") as trainer:
            taken = await trainer.aget(timeout_s=LIVENESS_S)
            assert [d.item.id.sequence for d in taken] == [1]
            trainer.ack(d.tag for d in taken)
            queue = lambda: topic.stats().subscribers["trainer"]  # noqa: E731
            await wait_until(lambda: queue().acked == 2, "both trajectories acked (one of them dropped)")
            assert queue().depth == 0 and queue().in_flight == 0
    finally:
        await server.stop(1.0)


def widest_accepted(time_horizon: int, limit: int) -> BrainParameters:
    """The widest float32 vector observation (2 continuous actions) a Hello may declare at ``time_horizon``."""
    low, high = 1, 1 << 16
    while low < high:
        mid = (low + high + 1) // 2
        params = BrainParameters("Stats", (ObservationSpec((mid,), F32),), ActionSpec(2))
        try:
            check_trajectory_fits(params, time_horizon, limit)
            low = mid
        except ProtocolError:
            high = mid - 1
    return BrainParameters("Stats", (ObservationSpec((low,), F32),), ActionSpec(2))


async def test_environment_stats_never_push_an_honest_trajectory_over_the_message_limit(
    start_processor: StartProcessor,
) -> None:
    """4096 held stats of 256-byte keys (1.1 MB) pushed a trajectory of the widest accepted observation to
    17.9 MB, over the 16 MiB limit: dropped as undeliverable. Stats now ride only in the room a trajectory leaves."""
    server, address = await start_processor(ProcessorSettings(behaviors={"Stats": BehaviorRuntime(time_horizon=64)}))
    wide = widest_accepted(64, 16 * 1024 * 1024)
    assert wide.observation_specs[0].shape[0] > 60_000
    update = build_mlp_policy_update("Stats", [wide.observation_specs[0].shape], wide.action_spec.to_proto(), 1, 0, hidden=4)
    assert server.topics.policies("Stats").publish(update, 1)
    # The attack: one session, 16 BrainInfos of no agents, each with 256 stats of 256-byte keys.
    stats = [pb.EnvironmentStat(key=f"{i:04d}" + "k" * 252, value=float(i)) for i in range(MAX_STATS_PER_MESSAGE)]
    empty = brain_info_message("Stats", np.zeros(0, np.int64), [np.zeros((0, *wide.observation_specs[0].shape), F32)],
                               np.zeros(0, np.float32), np.zeros(0, bool))  # fmt: skip
    empty.environment_stats.extend(stats)
    code, details, answers = await raw_step(address, hello(wide, client_id="stats"), *[pb.StepRequest(brain_info=empty)] * 16)
    assert code == grpc.StatusCode.OK and len(answers) == 17, f"{code.name}: {details}"
    behavior = server.behaviors["Stats"]
    assert behavior.held_environment_stats == MAX_STATS_PER_TRAJECTORY
    # An honest session at the widest accepted observation: one agent, 75 steps: a trajectory of 64, then one of 10
    # flushed at its end.
    obs = np.ones((1, *wide.observation_specs[0].shape), F32)
    one = (np.zeros(1, np.int64), [obs], np.ones(1, np.float32), np.zeros(1, bool))
    async with EnvSession(address, "honest", [wide]) as session:
        for _ in range(75):
            await session.send(brain_info_message("Stats", *one))
    taken: list[Trajectory] = []
    with GrpcTrajectorySubscription(address, "Stats", "trainer") as trainer:
        while len(taken) < 2:
            deliveries = await trainer.aget(timeout_s=LIVENESS_S)
            trainer.ack(d.tag for d in deliveries)
            taken += [d.item for d in deliveries]
    assert [t.length for t in taken] == [64, 10], "the honest trajectories were delivered"
    assert behavior.counters.undeliverable_trajectories == 0
    for t in taken:
        assert t.to_proto().ByteSize() <= 16 * 1024 * 1024 - 32
    # The widest trajectory leaves no room for a 270-byte stat; the short one has room for them all, oldest first.
    assert [len(t.environment_stats) for t in taken] == [0, MAX_STATS_PER_TRAJECTORY]
    assert [s.key for s in taken[1].environment_stats[:256]] == [s.key for s in stats]
    assert behavior.held_environment_stats == 0


# -- 5. a policy for an unknown behavior, or of another spec, is never adopted -------------------------


async def test_publish_policy_for_an_unknown_behavior_is_not_found_and_creates_nothing(
    start_processor: StartProcessor,
) -> None:
    server, address = await start_processor(ProcessorSettings())
    async with grpc.aio.insecure_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.AgentProcessorStub(channel).PublishPolicy(policy_update(CONTINUOUS, 1))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert "behavior 'Walker' is not known" in (refused.value.details() or "")
    assert server.topics.behavior_names() == []


async def test_a_trainer_publishing_before_any_env_client_retries_until_one_declares_the_behavior(
    start_processor: StartProcessor, caplog: pytest.LogCaptureFixture
) -> None:
    _, address = await start_processor(ProcessorSettings())
    with GrpcPolicyPublisher(address, "Walker") as publisher, caplog.at_level(logging.WARNING):
        publishing = asyncio.ensure_future(asyncio.to_thread(publisher.publish, policy_update(CONTINUOUS, 1), 1))
        await wait_until(lambda: any("retrying" in r.getMessage() for r in caplog.records), "the trainer to say it retries")
        assert not publishing.done()
        async with EnvSession(address, "env-0", [CONTINUOUS]):
            assert await asyncio.wait_for(publishing, LIVENESS_S)
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 1


async def test_a_policy_of_another_spec_published_before_the_hello_is_never_adopted(start_processor: StartProcessor) -> None:
    settings = ProcessorSettings(behaviors={"Walker": BehaviorRuntime()}, strict=True, first_policy_timeout_s=LIVENESS_S)
    server, address = await start_processor(settings)
    wrong = BrainParameters("Walker", (ObservationSpec((3,), F32),), ActionSpec(2))
    with GrpcPolicyPublisher(address, "Walker") as publisher:
        assert await asyncio.to_thread(publisher.publish, policy_update(wrong, 1), 1)  # configured: known, spec not yet
        async with EnvSession(address, "env-0", [CONTINUOUS]) as session:
            acting = asyncio.ensure_future(session.send(brain_info_proto(step(R(7, 7.0)), CONTINUOUS)))
            await wait_until(lambda: server.behaviors.get("Walker") is not None, "the Hello to declare Walker")
            await asyncio.sleep(0.2)  # the follower has seen version 1 by now: it must not act with it
            assert not acting.done(), acting.result() if not acting.exception() else acting.exception()
            assert await asyncio.to_thread(publisher.publish, policy_update(CONTINUOUS, 2), 2)
            answer = await asyncio.wait_for(acting, LIVENESS_S)
    assert answer.policy_version == 2


# -- 7. queries create nothing for an unknown behavior --------------------------------------------


async def test_queries_for_unknown_behaviors_are_not_found_and_create_nothing(start_processor: StartProcessor) -> None:
    server, address = await start_processor(ProcessorSettings(behaviors={"Walker": BehaviorRuntime()}, strict=True))
    before = server.topics.behavior_names()
    name = "n" * 200
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.AgentProcessorStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetPolicyStatus(pb.PolicyQuery(behavior_name=name))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        call = stub.Subscribe()
        await call.write(pb.SubscriberMessage(open=pb.SubscribeOpen(behavior_name=name, subscriber_name="trainer")))
        assert await asyncio.wait_for(call.code(), LIVENESS_S) == grpc.StatusCode.NOT_FOUND
        assert (await stub.GetPolicyStatus(pb.PolicyQuery(behavior_name="Walker"))).highest_version == -1  # configured: known
    assert server.topics.behavior_names() == before == ["Walker"]


# -- 9. behaviors per Hello are bounded, and freed with their last session ------------------------------


async def test_a_hello_with_too_many_behaviors_is_refused(start_processor: StartProcessor) -> None:
    server, address = await start_processor(ProcessorSettings())
    many = [named(f"B{i}") for i in range(MAX_BEHAVIORS_PER_HELLO + 1)]
    code, details, _ = await raw_step(address, hello(*many))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details}"
    assert f"declares {MAX_BEHAVIORS_PER_HELLO + 1} behaviors; at most {MAX_BEHAVIORS_PER_HELLO}" in details
    assert server.behaviors.values() == [] and server.topics.behavior_names() == []


async def test_what_a_session_declared_outside_the_config_is_freed_when_it_ends(start_processor: StartProcessor) -> None:
    server, address = await start_processor(ProcessorSettings(behaviors={"Walker": BehaviorRuntime()}))
    declared = [CONTINUOUS, named("Stray0"), named("Stray1")]
    async with EnvSession(address, "env-0", declared), EnvSession(address, "env-1", declared[:2]):
        assert sorted(b.name for b in server.behaviors.values()) == ["Stray0", "Stray1", "Walker"]
    await wait_until(lambda: server.sessions.closed == 2, "both sessions to close")
    assert [b.name for b in server.behaviors.values()] == ["Walker"]  # the config holds it
    assert server.topics.behavior_names() == ["Walker"]


# -- 11, 13, 14. every refusal is a clear, bounded status -----------------------------------------


async def test_a_status_listing_many_behaviors_stays_within_the_metadata_limit(start_processor: StartProcessor) -> None:
    _, address = await start_processor(ProcessorSettings())
    many = [named(f"{i:03d}" + "b" * 250) for i in range(MAX_BEHAVIORS_PER_HELLO)]  # 64 x 253-byte names
    stranger = brain_info_proto(step(R(7, 7.0)), named("Stranger"))
    code, details, answers = await raw_step(address, hello(*many), pb.StepRequest(brain_info=stranger))
    assert answers[0].WhichOneof("payload") == "hello_reply"
    assert code == grpc.StatusCode.NOT_FOUND, f"{code.name}: {details[:300]}"
    assert "behavior 'Stranger' was not declared" in details and details.endswith(" more)")
    assert len(details.encode()) <= MAX_STATUS_DETAILS_BYTES


GARBAGE = b"\x0a\xff\xff\xff\xff\x0f\x01"
"""A length-delimited field 1 that claims 4 GiB: no message decodes it."""


@pytest.mark.parametrize("method", ["Step", "Subscribe", "PublishPolicy", "GetPolicyStatus"])
async def test_garbage_bytes_are_invalid_argument_with_one_log_line(
    method: str, start_processor: StartProcessor, caplog: pytest.LogCaptureFixture
) -> None:
    _, address = await start_processor(ProcessorSettings())
    path = f"/stepstream.v1.AgentProcessor/{method}"
    with caplog.at_level(logging.INFO):
        async with grpc.aio.insecure_channel(address) as channel:
            if method in ("Step", "Subscribe"):
                call = channel.stream_stream(path)()
                await call.write(GARBAGE)
                code, details = await asyncio.wait_for(call.code(), LIVENESS_S), await call.details()
            else:
                try:
                    await channel.unary_unary(path)(GARBAGE, timeout=LIVENESS_S)
                    code, details = grpc.StatusCode.OK, ""
                except grpc.aio.AioRpcError as err:
                    code, details = err.code(), err.details()
    assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details}"
    assert "not a valid message" in (details or "")
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert sum("not a valid message" in r.getMessage() for r in caplog.records) == 1


async def test_a_step_request_without_payload_is_named_so(start_processor: StartProcessor) -> None:
    _, address = await start_processor(ProcessorSettings())
    code, details, _ = await raw_step(address, hello(CONTINUOUS), pb.StepRequest())
    assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{code.name}: {details}"
    assert "StepRequest with no payload" in details and "second Hello" not in details


async def test_a_policy_whose_spec_disagrees_with_the_declared_one_is_refused_naming_both(
    start_processor: StartProcessor,
) -> None:
    server, address = await start_processor(ProcessorSettings())
    wrong = BrainParameters("Walker", (ObservationSpec((3,), F32),), ActionSpec(0, (4,)))
    async with EnvSession(address, "env-0", [CONTINUOUS]), grpc.aio.insecure_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.AgentProcessorStub(channel).PublishPolicy(policy_update(wrong, 1))
        assert server.topics.policies("Walker").highest_version == -1
    details = refused.value.details() or ""
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, details
    for part in ("behavior 'Walker'", "policy version 1 takes obs [[3]]", "declares obs [[2]]"):
        assert part in details, f"{part!r} not in {details!r}"
