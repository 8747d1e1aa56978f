"""A refused request is not kept: a real ``stepstream processor``'s RSS after many refused big requests.

Each refused Hello here is a 16 MiB message (its client id fills the message limit). Before the fix, grpc.aio
kept every refused request alive (the request iterator's async generator, and the handler's frame in the
traceback of ``context.abort``'s exception), about 33 MB per refusal. The processor runs in a process of its
own, so its RSS (``/proc/<pid>/status``) is what the peer made it hold.

The concurrency cap (``ServerOptions.max_concurrent_rpcs``) is checked in process: a call past it is refused
RESOURCE_EXHAUSTED by grpc.aio while the sessions already open go on stepping.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from benchmarks.hostile import _params, hello_bytes
from common.topics.grpc_transport import MAX_MESSAGE_BYTES, MESSAGE_SIZE_OPTIONS
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from processor.server import ProcessorServer, ServerOptions
from protos import PROTOCOL_VERSION, pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.assembly_cases import CONTINUOUS, R, brain_info_proto, step
from tests.integration.helpers import LIVENESS_S, Harness, itest_settings, wait_until
from tests.integration.test_stack import REPO, serving
from tests.ports import PortReservation

SERVICE = "/stepstream.v1.AgentProcessor"
REFUSALS = 20
"""Refused big requests of each kind, one after the other."""
MAX_GROWTH_BYTES = 150 * 1024 * 1024
"""RSS growth allowed over all refusals of one kind: allocator slack, far below one kept request per refusal."""
QUERY_NAME_BYTES = 2 * 1024 * 1024
QUERY_REFUSALS = 100
"""Refused 2 MiB queries (GetPolicyStatus), one after the other: 200 MiB sent, 50 MiB allowed to stay
(measured: +86 MB before the fix, none after)."""
START_TIMEOUT_S = 60.0


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture
def processor(tmp_path: Path, ports: PortReservation) -> Iterator[tuple[str, int]]:
    """A ``stepstream processor`` (no config) on a free port: its address and pid."""
    port = ports.port()
    address = f"127.0.0.1:{port}"
    command = [sys.executable, "-m", "cli.main", "--log-level", "ERROR", "processor", "--port", str(port)]
    with open(tmp_path / "processor.log", "wb") as log_file:
        process = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not serving(address):
            assert process.poll() is None, (tmp_path / "processor.log").read_text()
            assert time.monotonic() < deadline, "processor did not start"
            time.sleep(0.2)
        yield address, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def _refused_hellos(channel: grpc.Channel, request: bytes, count: int) -> None:
    step = channel.stream_stream(f"{SERVICE}/Step", request_serializer=None, response_deserializer=None)
    for _ in range(count):
        with pytest.raises(grpc.RpcError) as refused:
            list(step(iter([request]), timeout=30))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()


def _refused_queries(channel: grpc.Channel, request: bytes, count: int) -> None:
    query = channel.unary_unary(f"{SERVICE}/GetPolicyStatus", request_serializer=None, response_deserializer=None)
    for _ in range(count):
        with pytest.raises(grpc.RpcError) as refused:
            query(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()


def test_refused_big_requests_are_not_kept(processor: tuple[str, int]) -> None:
    address, pid = processor
    hello = hello_bytes("h" * (MAX_MESSAGE_BYTES - 4096), _params("Soak", 4, 2))  # client id over its bound
    query = pb.PolicyQuery(behavior_name="q" * QUERY_NAME_BYTES).SerializeToString()  # name over its bound
    with grpc.insecure_channel(address, options=list(MESSAGE_SIZE_OPTIONS)) as channel:
        _refused_hellos(channel, hello, 2)  # warm up: gRPC's buffers, the first decode
        before = _rss_bytes(pid)
        _refused_hellos(channel, hello, REFUSALS)
        after_hellos = _rss_bytes(pid)
        _refused_queries(channel, query, QUERY_REFUSALS)
        after_queries = _rss_bytes(pid)
    mb = 1024 * 1024
    assert after_hellos - before < MAX_GROWTH_BYTES, (
        f"{REFUSALS} refused {len(hello) // mb} MiB Hellos grew RSS {before / mb:.0f} -> {after_hellos / mb:.0f} MB"
    )
    assert after_queries - after_hellos < QUERY_REFUSALS * QUERY_NAME_BYTES // 4, (
        f"{QUERY_REFUSALS} refused 2 MiB queries grew RSS {after_hellos / mb:.0f} -> {after_queries / mb:.0f} MB"
    )


async def test_a_call_past_the_concurrency_cap_is_resource_exhausted_while_a_session_keeps_stepping() -> None:
    runtime = {CONTINUOUS.behavior_name: BehaviorRuntime()}
    server = ProcessorServer(itest_settings(behaviors=runtime), ServerOptions(port=0, max_concurrent_rpcs=2))
    address = f"127.0.0.1:{await server.start()}"
    harness = Harness(server, address)
    harness.publish_policy(CONTINUOUS, 1)
    query = pb.PolicyQuery(behavior_name=CONTINUOUS.behavior_name)
    try:
        async with EnvSession(address, "env-0", [CONTINUOUS]) as session, grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.AgentProcessorStub(channel)
            assert (await session.send(brain_info_proto(step(R(7, 7.0)), CONTINUOUS))).policy_version == 1
            held = stub.Step()  # the second open call: the cap is full
            second = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-1", brain_parameters=[CONTINUOUS.to_proto()])
            await held.write(pb.StepRequest(hello=second))
            assert (await asyncio.wait_for(held.read(), LIVENESS_S)).WhichOneof("payload") == "hello_reply"
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.GetPolicyStatus(query, timeout=LIVENESS_S)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
            assert (await session.send(brain_info_proto(step(R(7, 8.0)), CONTINUOUS))).policy_version == 1
            held.cancel()
            await wait_until(lambda: not any(s.client_id == "env-1" for s in server.sessions), "env-1 to end")
            assert (await stub.GetPolicyStatus(query, timeout=LIVENESS_S)).behavior_name == CONTINUOUS.behavior_name
    finally:
        await server.stop(0.5)
