"""Bad input, fuzzed, through the real server: wrong messages on real streams while a good client steps.

Each Hypothesis example is one misbehaving peer against the same running server (strict config,
64 KB message limit, Walker and Gridder policies published, as ``test_bad_input.py``):

* a Step stream: a Hello (drawn by ``test_fuzz_decode.hellos``, or a good one) or a BrainInfo
  first, then BrainInfos that start valid and get ``test_fuzz_decode``'s mutations, sometimes a
  second Hello or a BrainInfo of an undeclared behavior;
* a Subscribe stream: an Ack first, empty names, a second SubscribeOpen, Acks of unknown tags;
* a PublishPolicy call with a ``test_fuzz_policy_update`` update (never above the published
  version, so the good client's policy stays the one it acts with).

Meanwhile a well-behaved client plays ``agents_end_episodes_at_different_steps`` on Walker, with
the bad peer running at the same time. Properties: the bad peer's RPC ends with OK or a clean status
(never INTERNAL/UNKNOWN) within a liveness bound; the good client's published trajectories are
exactly the case's; no session is left behind; and the server goes on to serve the next example.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_tensor
from processor.behaviors import BehaviorRuntime
from processor.server import ProcessorServer, ServerOptions
from processor.wire import MAX_ROW_WIDTH
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.assembly_cases import CASES, CONTINUOUS, HYBRID
from tests.integration.helpers import (
    LIVENESS_S,
    STOP_GRACE_S,
    Harness,
    assert_published,
    from_expect,
    itest_settings,
    serve_steps,
    wait_until,
)
from tests.unit.test_fuzz_decode import MUTATIONS, hellos, valid_brain_infos
from tests.unit.test_fuzz_policy_update import base_update, policy_updates

GOOD_CASE = next(c for c in CASES if c.name == "agents_end_episodes_at_different_steps")
MAX_MESSAGE_BYTES = 64 * 1024
NOT_CLEAN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
DECLARED = {p.behavior_name: p for p in (CONTINUOUS, HYBRID)}


@pytest.fixture(params=[True, False], ids=["strict", "open"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """One server for every example, a small message limit, both policies published, Walker declared.

    ``strict``: only Walker and Gridder may be declared. ``open``: a Hello may declare any behavior
    (it then has no policy: its BrainInfos wait ``first_policy_timeout_s`` and end DEADLINE_EXCEEDED).
    """
    settings = itest_settings(
        behaviors={name: BehaviorRuntime(time_horizon=GOOD_CASE.time_horizon) for name in DECLARED},
        default_runtime=BehaviorRuntime(time_horizon=GOOD_CASE.time_horizon),
        strict=request.param,
        first_policy_timeout_s=0.2,
    )
    server = ProcessorServer(settings, ServerOptions(max_message_bytes=MAX_MESSAGE_BYTES))
    port = await server.start()
    for name in DECLARED:
        base_update(name)  # built before Hypothesis draws: Keras uses `random`, which strategies must not
    try:
        harness = Harness(server, f"127.0.0.1:{port}")
        for params in DECLARED.values():
            harness.publish_policy(params, version=1)
        # Declared by the good client first: the first declaration of a behavior is the one that holds.
        await serve_steps(harness, GOOD_CASE.steps, GOOD_CASE.params)
        yield harness
    finally:
        await server.stop(STOP_GRACE_S)


# -- the misbehaving peers -----------------------------------------------------------------------


@st.composite
def bad_brain_info(draw: st.DrawFn, params: BrainParameters) -> pb.BrainInfo:
    msg = draw(valid_brain_infos(params))
    for mutation in draw(st.lists(st.sampled_from(MUTATIONS), max_size=2)):
        mutation(draw, msg, params)
    if draw(st.integers(0, 9)) == 0:
        msg.behavior_name = draw(st.sampled_from(["", "Stranger", *(n for n in DECLARED if n != params.behavior_name)]))
    return msg


def empty_brain_info(params: BrainParameters) -> pb.BrainInfo:
    """A valid BrainInfo of no agents (whatever the observation width)."""
    msg = pb.BrainInfo(behavior_name=params.behavior_name)
    to_tensor(np.zeros(0, np.int64), msg.agent_ids)
    for spec in params.observation_specs:
        msg.observations.add(dtype=pb.FLOAT32, shape=[0, *spec.shape])
    to_tensor(np.zeros(0, np.float32), msg.rewards)
    to_tensor(np.zeros(0, np.bool_), msg.done)
    to_tensor(np.zeros(0, np.bool_), msg.max_reached)
    return msg


@st.composite
def step_streams(draw: st.DrawFn) -> list[pb.StepRequest]:
    params = DECLARED[draw(st.sampled_from(sorted(DECLARED)))]
    how = draw(st.sampled_from(["declared", "fuzzed", "wide"]))
    if how == "declared":
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env", brain_parameters=[params.to_proto()])
    elif how == "wide":  # a new behavior, well formed but for its sizes, and an empty step of it
        sizes = st.sampled_from([2**31 - 1, 3, MAX_ROW_WIDTH + 1, MAX_ROW_WIDTH, 1])
        wide = BrainParameters(
            f"Wide{draw(st.integers(0, 2**16))}",  # a first declaration (the first one holds)
            (ObservationSpec((draw(sizes),), np.dtype(np.float32)),),
            ActionSpec(draw(sizes), tuple(draw(st.lists(sizes, max_size=2)))),
        )
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-wide", brain_parameters=[wide.to_proto()])
        return [pb.StepRequest(hello=hello), pb.StepRequest(brain_info=empty_brain_info(wide))]
    else:
        hello = draw(hellos())
    # Never the good client's id: a Hello with a live session's client id replaces it, by design.
    hello.client_id = f"fuzz-{hello.client_id}" if hello.client_id else ""
    requests = [pb.StepRequest(hello=hello)]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 9)) == 0:
            requests.append(pb.StepRequest(hello=hello))  # a second Hello on one stream
        else:
            requests.append(pb.StepRequest(brain_info=draw(bad_brain_info(params))))
    if draw(st.integers(0, 9)) == 0:
        requests.pop(0)  # a BrainInfo first
    return requests


@st.composite
def subscribe_streams(draw: st.DrawFn) -> list[pb.SubscriberMessage]:
    """Wrong Subscribe sequences. Well-formed opens name another behavior: a fuzz subscriber that opened a
    queue on Walker's topic and went away would keep it (queues are durable), which is not bad input."""
    names = st.sampled_from(["", "Walker", "Gridder", "Stranger"])
    messages = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            behavior, subscriber = draw(names), draw(st.sampled_from(["", "fuzz-sub"]))
            if behavior in DECLARED and subscriber:
                behavior = "Stranger"
            messages.append(pb.SubscriberMessage(open=pb.SubscribeOpen(behavior_name=behavior, subscriber_name=subscriber)))
        else:
            tags = draw(st.lists(st.integers(0, 2**64 - 1), max_size=3))
            messages.append(pb.SubscriberMessage(ack=pb.Ack(delivery_tags=tags)))
    return messages


@st.composite
def policy_publications(draw: st.DrawFn) -> pb.PolicyUpdate:
    update = draw(policy_updates())
    update.version = draw(st.sampled_from([1, 0, -1, -(2**63)]))  # never above the acting version 1
    if draw(st.integers(0, 4)) == 0:
        update.behavior_name = draw(st.sampled_from(["", "Stranger"]))
    return update


@dataclass(frozen=True)
class Misbehaviour:
    rpc: str
    messages: list[pb.StepRequest] | list[pb.SubscriberMessage] | pb.PolicyUpdate


MISBEHAVIOURS = st.one_of(
    step_streams().map(lambda m: Misbehaviour("Step", m)),
    subscribe_streams().map(lambda m: Misbehaviour("Subscribe", m)),
    policy_publications().map(lambda m: Misbehaviour("PublishPolicy", m)),
)


CLIENT_WRITE_ARTIFACT = "Internal error from Core"
"""What grpc.aio's client reports, as INTERNAL, for a write that finds the call already ended by the server,
in place of the server's own status (grpc/grpc#36066, open; fix proposed in grpc/grpc#43486)."""


async def misbehave(address: str, bad: Misbehaviour) -> grpc.StatusCode:
    """Run one misbehaving RPC to its end; the status the server ended it with."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.AgentProcessorStub(channel)
        if isinstance(bad.messages, pb.PolicyUpdate):
            try:
                reply = await stub.PublishPolicy(bad.messages)
            except grpc.aio.AioRpcError as err:
                return err.code()
            assert not reply.accepted, "a fuzzed policy replaced the acting one"
            return grpc.StatusCode.OK
        call = stub.Step() if bad.rpc == "Step" else stub.Subscribe()
        written = 0
        try:
            for message in bad.messages:
                await call.write(message)  # type: ignore[arg-type]
                written += 1
                if bad.rpc == "Step" and await call.read() is grpc.aio.EOF:
                    break
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
            return await call.code()
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.INTERNAL or err.details() != CLIENT_WRITE_ARTIFACT:
                return err.code()
    # The server ended the call in answer to the messages already written (a Subscribe stream
    # gets no reply to read between writes): send just those, and read the status it ends with.
    return await misbehave(address, Misbehaviour(bad.rpc, bad.messages[:written]))  # type: ignore[index]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(bad=MISBEHAVIOURS)
async def test_fuzzed_peers_get_clean_statuses_and_leave_a_good_client_untouched(harness: Harness, bad: Misbehaviour) -> None:
    good = asyncio.ensure_future(serve_steps(harness, GOOD_CASE.steps, GOOD_CASE.params))
    try:
        code = await asyncio.wait_for(misbehave(harness.address, bad), LIVENESS_S)
        run = await asyncio.wait_for(good, LIVENESS_S)
    finally:
        good.cancel()  # after a failure, before the next example's good client takes its client id

    event(f"{bad.rpc} ended {code.name}")  # see them with --hypothesis-show-statistics
    assert code not in NOT_CLEAN, f"{bad.rpc} ended {code.name}"
    assert_published(run, [from_expect(e, run) for e in GOOD_CASE.expected], harness)
    await wait_until(lambda: harness.session_count() == 0, "every session to be released")
    for name, params in DECLARED.items():
        behavior = harness.server.behaviors.get(name)  # Gridder: once a fuzzed Hello declared it
        if behavior is not None:
            assert behavior.params == params
            assert behavior.batcher.policy is not None and behavior.batcher.policy.version == 1
