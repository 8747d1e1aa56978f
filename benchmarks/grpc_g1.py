"""Workload G1 (../shared/yardsticks/README.md): gRPC end to end.

K env-client sessions (default 8), each one Step stream carrying A agents (default 32) with W1's
observations (32 float32) and 4 continuous actions. The processor runs a real TensorFlow-produced
2x64 MLP (TFLite artifact), batched across sessions, assembles trajectories (time_horizon 64) and
publishes them to one in-process subscriber that counts experiences and acknowledges them.

The clients run in a process of their own, as real env clients do (one asyncio loop, K sessions);
the processor and the subscriber share the main process. Each agent's episode lasts uniform
[50, 300] steps; on done the same id comes back as a new episode on the next step.

Compare with ``grpc_echo_floor.py 4096 8 2000`` run in the same Python environment:
ratio = agent_steps_per_s / (floor round-trips/s * 32).

``--server echo`` swaps the processor for a servicer that answers every BrainInfo with one fixed
ActionInfo (no decoding, inference, assembly or topics): the same clients, the same messages, the
same two processes. Its agent-steps/s is the ceiling the SDK client and gRPC leave the processor.

``--server echo-hardened`` is that echo served with the processor's gRPC wiring: its channel options and
call limit (``processor.server.grpc_server``), its interceptors (``ProcessorServer.interceptors``) and
requests read with ``context.read()`` as its Step handler reads them. Its server CPU per round trip minus
echo's is what the hardening of the gRPC layer costs; ``step_path.py`` measures the processor's own work.

``--obs 84x84x3`` (issue 19's pixel figure) replaces the 32 floats by one uint8 image ``[H, W, C]`` of random
pixels (16 frames per client, cycled) and the MLP by a ``nature_cnn`` policy (``trainer.encoders``: the camera
encoded to 64 features, then the 2x64 body), exported with a uint8 input as trainers export it. The default,
``--obs 32``, is G1 as the yardstick defines it.

``--group-size K`` puts each client's agents in groups of K (``processor.groups``; zero group rewards): what groups
cost on this path, against the same run without.

usage: grpc_g1.py [--clients 8] [--agents 32] [--steps 1500] [--warmup 100] [--server processor|echo|echo-hardened]
                  [--obs 32|HxWxC] [--group-size 0]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import logging
import math
import multiprocessing as mp
import os
import resource
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from common.specs import BrainParameters
    from processor.server import ProcessorServer
    from protos import pb

log = logging.getLogger("benchmarks.grpc_g1")
OBS_SIZE, ACTION_SIZE, TIME_HORIZON, BEHAVIOR = 32, 4, 64, "G1"
VECTOR_OBS: tuple[int, ...] = (OBS_SIZE,)
"""G1's own observation; a 3-D shape ``(H, W, C)`` (``--obs``) is a uint8 image instead."""
IMAGE_FRAMES = 16
"""Distinct random frames per image client, cycled (64 like the vectors' would hold 8 x 64 x 16 x 84 x 84 x 3 bytes)."""


def is_image(obs_shape: tuple[int, ...]) -> bool:
    """``(H, W, C)``: a uint8 image; ``(D,)``: float32 vectors."""
    return len(obs_shape) == 3


def brain_parameters(obs_shape: tuple[int, ...] = VECTOR_OBS) -> BrainParameters:
    """G1's behavior: one observation (default 32 float32; ``(H, W, C)``: a uint8 image), 4 continuous actions."""
    from common.specs import ActionSpec, BrainParameters, ObservationSpec

    dtype = np.dtype(np.uint8 if is_image(obs_shape) else np.float32)
    return BrainParameters(BEHAVIOR, (ObservationSpec(obs_shape, dtype),), ActionSpec(ACTION_SIZE))


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process, every thread (gRPC's own included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _now() -> float:
    """Seconds on CLOCK_MONOTONIC, which both processes share: the clients' windows meet the server's samples."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def cpu_over_window(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds spent over [start, end] (``_now`` seconds), from (time, CPU seconds) samples in time order: the
    CPU rate between the first and last sample inside the window, times its length; NaN with fewer than two."""
    inside = [(t, cpu) for t, cpu in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return math.nan
    (t0, cpu0), (t1, cpu1) = inside[0], inside[-1]
    return (cpu1 - cpu0) / (t1 - t0) * (end - start)


def brain_infos(
    index: int, agents: int, obs_shape: tuple[int, ...] = VECTOR_OBS, group_size: int = 0
) -> Iterator[pb.BrainInfo]:
    """Env client ``index``'s BrainInfos, one per step, for ever (module docstring: W1's shapes, episodes of
    uniform [50, 300] steps, the same id back as a new episode after done); seeded by ``index``.
    ``obs_shape`` ``(H, W, C)``: uint8 frames ``[agents, H, W, C]``, ``IMAGE_FRAMES`` of them cycled. ``group_size``
    > 0: the agents also in groups of that many (``processor.groups``), with zero group rewards."""
    from envclient.session import brain_info_message

    rng = np.random.default_rng(index)
    ids = np.arange(agents, dtype=np.int64)
    if is_image(obs_shape):
        frames = rng.integers(0, 256, size=(IMAGE_FRAMES, agents, *obs_shape), dtype=np.uint8)
        obs = [frames[t % IMAGE_FRAMES] for t in range(64)]  # views: 64 steps, IMAGE_FRAMES frames of memory
    else:
        obs = list(rng.standard_normal((64, agents, *obs_shape), dtype=np.float32))
    rewards = rng.standard_normal((64, agents)).astype(np.float32)
    left = rng.integers(50, 301, size=agents)
    group_ids = np.arange(agents) // group_size + 1 if group_size else None
    group_rewards = np.zeros(agents, np.float32) if group_size else None
    for t in itertools.count():
        done = left <= 0
        yield brain_info_message(
            BEHAVIOR, ids, [obs[t % 64]], rewards[t % 64], done, group_ids=group_ids, group_rewards=group_rewards
        )
        left -= 1
        if done.any():  # a new length only for the agents that start over: the client's env work stays small
            left[done] = rng.integers(50, 301, size=int(done.sum()))


async def _client(
    address: str,
    index: int,
    agents: int,
    steps: int,
    warmup: int,
    start_at: float,
    cpu_marks: list[float],
    obs_shape: tuple[int, ...] = VECTOR_OBS,
    group_size: int = 0,
) -> tuple[list[float], float, float, float]:
    """One env client; returns its timed round trips (s), when its timed window began and ended (``_now``), and the
    process's CPU seconds at its end. The first client to start its timed window appends the process's CPU seconds
    to ``cpu_marks``."""
    from envclient import EnvSession

    stream = brain_infos(index, agents, obs_shape, group_size)
    timings: list[float] = []
    window_start = 0.0
    async with EnvSession(address, f"g1-{index}", [brain_parameters(obs_shape)]) as session:
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        for t in range(warmup + steps):
            message = next(stream)
            started = time.perf_counter()
            if t == warmup:
                window_start = _now()
                if not cpu_marks:
                    cpu_marks.append(_cpu_seconds())
            await session.send(message)
            if t >= warmup:
                timings.append(time.perf_counter() - started)
        window_end, cpu_end = _now(), _cpu_seconds()  # before the session closes: closing is not timed
    return timings, window_start, window_end, cpu_end


def _client_process(
    address: str,
    clients: int,
    agents: int,
    steps: int,
    warmup: int,
    start_at: float,
    out: mp.Queue,
    obs_shape: tuple[int, ...] = VECTOR_OBS,
    group_size: int = 0,
) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    cpu_marks: list[float] = []

    async def run_all() -> list[tuple[list[float], float, float, float]]:
        return await asyncio.gather(
            *[_client(address, i, agents, steps, warmup, start_at, cpu_marks, obs_shape, group_size) for i in range(clients)]
        )

    results = asyncio.run(run_all())
    # The last client to end its window read the process's CPU last: the window's CPU ends there.
    out.put(([r[:3] for r in results], max(r[3] for r in results) - cpu_marks[0]))


def policy_update(obs_shape: tuple[int, ...] = VECTOR_OBS) -> pb.PolicyUpdate:
    """Version 1 of G1's policy: a TensorFlow 2x64 MLP (seed 0) exported as the TFLite artifact trainers publish;
    for an image ``(H, W, C)``, a ``nature_cnn`` encoder (64 features) before that body, the input uint8."""
    import tensorflow as tf

    from common.config import EncoderType
    from common.specs import ActionSpec
    from trainer.encoders import ObservationEncoder
    from trainer.export import TFLiteExporter, make_policy_update
    from trainer.networks import PolicyNetwork

    tf.random.set_seed(0)
    action_spec = ActionSpec(ACTION_SIZE)
    if is_image(obs_shape):
        specs = brain_parameters(obs_shape).observation_specs
        encoder = ObservationEncoder(specs, EncoderType.NATURE_CNN, 64, BEHAVIOR)
        network = PolicyNetwork([0], action_spec, hidden_units=64, num_layers=2, encoder=encoder)
        model = TFLiteExporter(network, [obs_shape], observation_dtypes=[np.uint8]).export()
    else:
        network = PolicyNetwork(list(obs_shape), action_spec, hidden_units=64, num_layers=2)
        model = TFLiteExporter(network, [obs_shape]).export()
    return make_policy_update(BEHAVIOR, 1, 0, model, action_spec.to_proto())


async def _echo_server(agents: int, hardened: bool = False):  # type: ignore[no-untyped-def]
    """A Step servicer that decodes nothing and answers each BrainInfo with the same ActionInfo; ``hardened``:
    served and read as the processor serves and reads (module docstring)."""
    import grpc

    from common.tensors import to_tensor
    from processor.server import ProcessorServer, grpc_server
    from protos import PROTOCOL_VERSION, pb
    from protos import stepstream_pb2_grpc as pb_grpc

    answer = pb.StepResponse(action_info=pb.ActionInfo(behavior_name=BEHAVIOR, policy_version=1))
    to_tensor(np.zeros((agents, ACTION_SIZE), np.float32), answer.action_info.continuous_actions)
    to_tensor(np.zeros((agents, 0), np.int32), answer.action_info.discrete_actions)

    hello = pb.StepResponse(hello_reply=pb.HelloReply(protocol_version=PROTOCOL_VERSION, session_id="echo"))

    class Echo(pb_grpc.AgentProcessorServicer):
        async def Step(self, requests, context):  # type: ignore[no-untyped-def]
            replied = False
            async for _ in requests:
                yield answer if replied else hello
                replied = True

    class HardenedEcho(pb_grpc.AgentProcessorServicer):
        async def Step(self, requests, context):  # type: ignore[no-untyped-def]
            del requests  # read as processor.servicer reads them
            replied = False
            while (request := await context.read()) is not grpc.aio.EOF:
                del request
                yield answer if replied else hello
                replied = True

    if hardened:
        wiring = ProcessorServer()  # never started: only its options and interceptors serve
        server = grpc_server(wiring.options, wiring.interceptors())
        pb_grpc.add_AgentProcessorServicer_to_server(HardenedEcho(), server)
    else:
        server = grpc.aio.server()
        pb_grpc.add_AgentProcessorServicer_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _measure_echo(args: argparse.Namespace) -> dict[str, float]:
    server, port = await _echo_server(args.agents, hardened=args.server == "echo-hardened")
    try:
        run = await _run_clients(args, port)
    finally:
        await server.stop(None)
    return {**_figures(args, run), "experiences_published": 0, "mean_rows_per_forward_pass": 0.0}


class ClientRun(NamedTuple):
    """What one run of the client process measured."""

    per_client: list[tuple[list[float], float, float]]
    """Per client: timed round trips (s), start and end of its timed window (``_now``)."""
    client_cpu_s: float
    """CPU seconds of the whole client process over the timed window."""
    server_cpu_s: float
    """CPU seconds of this (server) process over the same window, sampled every 20 ms (``cpu_over_window``); NaN if
    the window held fewer than two samples."""


async def _run_clients(args: argparse.Namespace, port: int) -> ClientRun:
    """Runs the client process to its end, sampling this process's CPU time meanwhile."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    start_at = time.time() + 4.0  # let the child import and connect before the clock starts
    child = ctx.Process(
        target=_client_process,
        args=(
            f"127.0.0.1:{port}",
            args.clients,
            args.agents,
            args.steps,
            args.warmup,
            start_at,
            out,
            args.obs,
            args.group_size,
        ),
    )
    child.start()
    samples: list[tuple[float, float]] = []

    async def sample() -> None:
        while True:
            samples.append((_now(), _cpu_seconds()))
            await asyncio.sleep(0.02)

    sampler = asyncio.get_running_loop().create_task(sample())
    per_client, client_cpu_s = await asyncio.to_thread(out.get)
    sampler.cancel()
    await asyncio.to_thread(child.join)
    start, end = min(s for _, s, _ in per_client), max(e for _, _, e in per_client)
    server_cpu_s = cpu_over_window(samples, start, end)
    if math.isnan(server_cpu_s):
        log.warning("the timed window (%.3f s) held fewer than two CPU samples: no server CPU figure", end - start)
    return ClientRun(per_client, client_cpu_s, server_cpu_s)


def _figures(args: argparse.Namespace, run: ClientRun) -> dict[str, float]:
    all_timings = np.concatenate([np.asarray(t) for t, _, _ in run.per_client])
    # The timed window runs from the first client's first timed step to the last client's end.
    wall = max(end for _, _, end in run.per_client) - min(start for _, start, _ in run.per_client)
    round_trips = args.clients * args.steps
    return {
        "agent_steps_per_s": args.agents * round_trips / wall,
        "p50_ms": float(np.percentile(all_timings, 50) * 1e3),
        "p99_ms": float(np.percentile(all_timings, 99) * 1e3),
        "server_cpu_us_per_round_trip": run.server_cpu_s / round_trips * 1e6,
        "client_cpu_us_per_round_trip": run.client_cpu_s / round_trips * 1e6,
    }


def processor_server(deadline_ms: float | None = None, obs_shape: tuple[int, ...] = VECTOR_OBS) -> ProcessorServer:
    """G1's processor, not started, holding the 2x64 policy (for ``obs_shape``, see ``policy_update``);
    ``deadline_ms`` overrides the batch deadline."""
    from processor.behaviors import BehaviorRuntime, ProcessorSettings
    from processor.server import ProcessorServer

    settings = ProcessorSettings(
        behaviors={BEHAVIOR: BehaviorRuntime(time_horizon=TIME_HORIZON)}, strict=True, declared_subscribers=("counter",)
    )
    if deadline_ms is not None:
        settings = dataclasses.replace(settings, batch_deadline_ms=deadline_ms)
    server = ProcessorServer(settings)
    server.topics.policies(BEHAVIOR).publish(policy_update(obs_shape), 1)
    return server


class ExperienceCounter:
    """G1's one subscriber, in-process: counts the experiences published and acknowledges them, until the
    processor's topics close and it has taken everything (``finish``)."""

    def __init__(self, server: ProcessorServer) -> None:
        self.experiences = 0
        self._subscription = server.topics.trajectories(BEHAVIOR).subscribe("counter")
        self._task = asyncio.get_running_loop().create_task(self._count())

    async def _count(self) -> None:
        from common.errors import TopicClosedError

        try:
            while True:
                deliveries = await self._subscription.aget(timeout_s=0.5)
                self.experiences += sum(d.item.length for d in deliveries)
                self._subscription.ack([d.tag for d in deliveries])
        except TopicClosedError:  # closed and drained: every experience published is counted
            return

    async def finish(self) -> int:
        """Once the topics are closed (``ProcessorServer.stop``): waits for the count to take the rest; returns it."""
        await self._task
        return self.experiences


async def _serve_and_measure(args: argparse.Namespace) -> dict[str, float]:
    server = processor_server(args.deadline_ms, args.obs)
    port = await server.start()
    counter = ExperienceCounter(server)
    try:
        run = await _run_clients(args, port)
    finally:  # also on failure: the topics close, which ends the counter
        await server.stop(5.0)  # the sessions' flushes reach the topic, then it closes
    await counter.finish()
    batcher = server.behaviors[BEHAVIOR].batcher.counters
    return {
        **_figures(args, run),
        "experiences_published": counter.experiences,
        "mean_rows_per_forward_pass": batcher.rows / max(batcher.forward_passes, 1),
    }


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def obs_shape(text: str) -> tuple[int, ...]:
    """argparse type: ``D`` (D float32) or ``HxWxC`` (a uint8 image), each size >= 1."""
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) not in (1, 3) or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"must be D or HxWxC with sizes >= 1 (e.g. 32 or 84x84x3), got {text!r}")
    return shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--steps", type=positive_int, default=1500, help="timed steps per client")
    parser.add_argument("--warmup", type=int, default=100, help="untimed steps per client first")
    parser.add_argument("--deadline-ms", type=float, default=None, help="override ProcessorSettings.batch_deadline_ms")
    parser.add_argument(
        "--server",
        choices=("processor", "echo", "echo-hardened"),
        default="processor",
        help="echo: a fixed answer, the clients' ceiling; echo-hardened: the same with the processor's gRPC wiring",
    )
    parser.add_argument(
        "--obs",
        type=obs_shape,
        default=VECTOR_OBS,
        help="D float32 (default 32, G1) or HxWxC: a uint8 image and a nature_cnn policy (e.g. 84x84x3)",
    )
    parser.add_argument("--group-size", type=int, default=0, help="agents per group (processor.groups); 0: no groups")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    figures = asyncio.run(_serve_and_measure(args) if args.server == "processor" else _measure_echo(args))
    logging.getLogger().setLevel(logging.INFO)
    log.info(
        "G1 K=%d A=%d obs %s: %.0f agent-steps/s, p50 %.2f ms, p99 %.2f ms, %.1f rows per forward pass",
        args.clients,
        args.agents,
        "x".join(map(str, args.obs)),
        figures["agent_steps_per_s"],
        figures["p50_ms"],
        figures["p99_ms"],
        figures["mean_rows_per_forward_pass"],
    )
    server_cpu = figures["server_cpu_us_per_round_trip"]
    print(
        json.dumps(
            {
                "workload": "G1",
                "server": args.server,
                "clients": args.clients,
                "agents": args.agents,
                "obs": "x".join(map(str, args.obs)),
                "agent_steps_per_s": round(figures["agent_steps_per_s"]),
                "p50_ms": round(figures["p50_ms"], 3),
                "p99_ms": round(figures["p99_ms"], 3),
                "mean_rows_per_forward_pass": round(figures["mean_rows_per_forward_pass"], 1),
                "experiences_published": int(figures["experiences_published"]),
                "server_cpu_us_per_round_trip": None if math.isnan(server_cpu) else round(server_cpu, 1),
                "client_cpu_us_per_round_trip": round(figures["client_cpu_us_per_round_trip"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
