"""G1's server work without gRPC: the processor's real Step path driven in-process.

K sessions (default 8) of A agents (default 32) open through ``AgentProcessorServicer._open`` and
each sends G1's BrainInfos (same observations, rewards and episode lengths as ``grpc_g1.py``),
as serialised ``StepRequest`` bytes built before the clock starts. Per request the clock covers
what the servicer does between gRPC's read and write: parse the bytes, ``_step`` (decode and
validation, the batched TFLite pass over all sessions' rows, assembly, publishing to an
in-process subscriber that acknowledges) and serialise the ``StepResponse``. The K sessions run
concurrently on one event loop, so passes are batched as in G1. After the clock the sessions close
as at a disconnect, so ``experiences_published`` counts every experience their rows imply.

Set beside ``grpc_g1.py``'s ``server_cpu_us_per_round_trip`` (and ``--server echo``'s), it splits
the server's CPU per round trip into the processor's own path and what gRPC and the event loop
add around it.

``--part assembly`` times the trajectory assembly alone: each client's BrainInfos decoded before the
clock, then ``TrajectoryAssembler.add`` of every step with fixed actions, one assembler per client, on
one thread (no TensorFlow, no event loop): ``cpu_us_per_add`` is the assembler's share of a request.
It runs against any tree whose assembler has this API (dd6817a's included): run it with that tree's
PYTHONPATH.

usage: step_path.py [--clients 8] [--agents 32] [--steps 1500] [--part all|assembly]; one JSON line last.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# After PYTHONPATH: the tree it names (dd6817a's, for a before/after) is the one measured; else this one.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from grpc_g1 import BEHAVIOR, TIME_HORIZON, ExperienceCounter, brain_infos, brain_parameters, processor_server


def requests(index: int, agents: int, steps: int) -> list[bytes]:
    """Client ``index``'s first ``steps`` serialised StepRequests, the BrainInfos ``grpc_g1`` clients send."""
    from protos import pb

    infos = itertools.islice(brain_infos(index, agents), steps)
    return [pb.StepRequest(brain_info=info).SerializeToString() for info in infos]


async def measure(clients: int, agents: int, steps: int) -> dict[str, float]:
    from protos import PROTOCOL_VERSION, pb

    server = processor_server()  # never started: no port, no gRPC
    # The servicer's own steps (_open, _step, _close), called as its Step handler calls them: what this measures.
    servicer = server.servicer
    sessions = []
    for i in range(clients):
        hello = pb.StepRequest(hello=pb.Hello(protocol_version=PROTOCOL_VERSION, client_id=f"step-path-{i}"))
        hello.hello.brain_parameters.add().CopyFrom(brain_parameters().to_proto())
        sessions.append(await servicer._open(hello))
    messages = [requests(i, agents, steps) for i in range(clients)]
    counter = ExperienceCounter(server)

    async def client(i: int) -> None:
        for data in messages[i]:
            action_info = await servicer._step(sessions[i], pb.StepRequest.FromString(data))
            pb.StepResponse(action_info=action_info).SerializeToString()

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*[client(i) for i in range(clients)])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    for session in sessions:  # as at a disconnect: partial trajectories flushed, so every experience is counted
        await servicer._close(session)
    await server.behaviors.stop()  # as ProcessorServer.stop does, before the topics close under it
    server.topics.close()
    await counter.finish()
    batcher = server.behaviors[BEHAVIOR].batcher.counters
    return {
        "agent_steps_per_s": clients * agents * steps / wall,
        "cpu_us_per_request": cpu / (clients * steps) * 1e6,
        "mean_rows_per_forward_pass": batcher.rows / max(batcher.forward_passes, 1),
        "experiences_published": counter.experiences,
    }


def measure_assembly(clients: int, agents: int, steps: int, repeats: int = 5) -> dict[str, object]:
    """CPU us per ``TrajectoryAssembler.add`` over every client's steps, the best of ``repeats`` passes."""
    import numpy as np

    from processor import assembly
    from processor.assembly import StepActions, TrajectoryAssembler
    from processor.wire import decode_brain_info
    from protos import pb

    params = brain_parameters()
    infos = [
        [decode_brain_info(pb.StepRequest.FromString(data).brain_info, params) for data in requests(i, agents, steps)]
        for i in range(clients)
    ]
    spec = params.action_spec
    zeros = np.zeros((agents, spec.continuous_size), np.float32)
    actions = StepActions(zeros, np.zeros((agents, 0), np.int32), zeros, np.zeros((agents, 0), np.float32), 1)
    best, cut = float("inf"), 0
    for _ in range(repeats):
        assemblers = [TrajectoryAssembler(params, f"s{i}", TIME_HORIZON) for i in range(clients)]
        cpu, cut = time.process_time(), 0
        for t in range(steps):
            for assembler, stream in zip(assemblers, infos, strict=True):
                cut += len(assembler.add(stream[t], actions))
        best = min(best, time.process_time() - cpu)
    tree = str(Path(assembly.__file__).resolve().parents[1])  # which tree's assembler ran (PYTHONPATH's)
    return {"cpu_us_per_add": round(best / (clients * steps) * 1e6, 2), "trajectories": cut, "tree": tree}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1500, help="requests per client")
    parser.add_argument("--part", choices=("all", "assembly"), default="all", help="assembly: TrajectoryAssembler.add alone")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.part == "assembly":
        record = {"workload": "G1-assembly", "clients": args.clients, "agents": args.agents}
        print(json.dumps(record | measure_assembly(args.clients, args.agents, args.steps)))
        return
    figures = asyncio.run(measure(args.clients, args.agents, args.steps))
    print(
        json.dumps(
            {
                "workload": "G1-step-path",
                "clients": args.clients,
                "agents": args.agents,
                "agent_steps_per_s": round(figures["agent_steps_per_s"]),
                "cpu_us_per_request": round(figures["cpu_us_per_request"], 1),
                "mean_rows_per_forward_pass": round(figures["mean_rows_per_forward_pass"], 1),
                "experiences_published": int(figures["experiences_published"]),
            }
        )
    )


if __name__ == "__main__":
    main()
