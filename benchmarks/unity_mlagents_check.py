"""The Unity gateway checked against ML-Agents 1.1.0 itself, and its added latency (issue 17; not CI).

Three checks, in one run:

* **transcripts**: the fake Unity (``tests.unity_fake``) replays transcripts (the real ``.demo`` files'
  agent infos, and a built case with two behaviors, a hybrid action spec, agents finishing at
  different steps and a ``max_step_reached``) against ML-Agents' own Python side,
  ``UnityEnvironment(file_name=None)`` listening as it does for the Editor, in the ML-Agents
  environment that ``../shared/yardsticks/setup.sh`` builds. Its ``get_steps()`` of every step must
  equal what the gateway decodes from the same messages (``envclient.unity.translate.behavior_step``):
  agent ids, observations, rewards, decision/terminal split, interrupted (= max_reached) and masks.
* **onnx**: ML-Agents' own exporter (``ModelSerializer``) and ``trainer.onnx_export`` each write a
  model of the same behavior spec (continuous, masked discrete, hybrid); their input and output
  names, shapes, dtypes and constant outputs (``version_number``, ``memory_size``,
  ``*_action_output_shape``) are compared. Skipped (``null``) when ML-Agents' exporter does not run there.
* **latency**: a processor in this process, ``stepstream unity`` as a subprocess in front of it, and a
  client process that alternates one Exchange of the fake Unity through the gateway with one step of
  a direct ``EnvSession`` to the processor (same spec, same agents, prebuilt messages). The added
  latency is p50 (p99) of the gateway's round trips minus p50 (p99) of the direct ones.

    .venv/bin/python benchmarks/unity_mlagents_check.py [--mla-python PATH] [--steps 2000] [--agents 12]
        [--skip-transcripts] [--skip-onnx] [--skip-latency] [--gateway-tree CHECKOUT] [--profile-gateway FILE.prof]

One JSON line last: ``{"workload": "unity_check", "transcripts", "transcripts_matching_mlagents",
"onnx_contract_matches_mlagents", "gateway_added_p50_ms", "gateway_added_p99_ms", ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.specs import ActionSpec, BrainParameters, ObservationSpec  # noqa: E402
from tests.ports import PortReservation  # noqa: E402

log = logging.getLogger(__name__)

DEFAULT_MLA_PYTHON = Path.home() / ".cache" / "stepstream-yardsticks" / "mla" / "bin" / "python"
DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))
DEMOS = ("Expert3DBall.demo", "ExpertPyramid.demo", "test.demo", "ExpertHallway.demo", "ExpertBasic.demo")
TRANSCRIPT_RECORDS = 400
GATEWAY_BEHAVIOR = "GatewayBall"
DIRECT_BEHAVIOR = "DirectBall"
OBS_SIZE = 8
ACTION_SIZE = 2
"""3DBall's spec: 8 floats in, 2 continuous actions out."""
WARMUP_STEPS = 100


_PORTS = PortReservation()
"""Held until the process exits: a port probed free and released could be taken by a concurrent test's server."""


def free_port() -> int:
    return _PORTS.port()


def percentile_ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q) * 1e3)


# -- transcripts against ML-Agents' UnityEnvironment ---------------------------------------------------

MLA_ENV = r"""
import json, sys
import numpy as np
from mlagents_envs.environment import UnityEnvironment

port, steps, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
env = UnityEnvironment(file_name=None, base_port=port, timeout_wait=60)  # listens as for the Editor
arrays, specs = {}, {}
env.reset()
for i in range(steps):
    for name, spec in env.behavior_specs.items():
        specs[name] = {
            "observation_shapes": [list(o.shape) for o in spec.observation_specs],
            "continuous": int(spec.action_spec.continuous_size),
            "branches": [int(b) for b in spec.action_spec.discrete_branches],
        }
        decision, terminal = env.get_steps(name)
        key = f"{i}/{name}/"
        arrays[key + "decision_id"] = decision.agent_id
        arrays[key + "decision_reward"] = decision.reward
        for k, obs in enumerate(decision.obs):
            arrays[key + f"decision_obs{k}"] = obs
            arrays[key + f"terminal_obs{k}"] = terminal.obs[k]
        if decision.action_mask is not None:
            arrays[key + "decision_masked"] = np.concatenate(decision.action_mask, axis=1)
        arrays[key + "terminal_id"] = terminal.agent_id
        arrays[key + "terminal_reward"] = terminal.reward
        arrays[key + "terminal_interrupted"] = terminal.interrupted
    if i < steps - 1:
        env.step()  # default (zero) actions: the transcript does not depend on them
np.savez(out, **arrays)
json.dump(specs, open(out + ".json", "w"))
env.close()  # answers the last step with status 400, as mlagents-learn does at the end
"""

Transcript = list  # one dict per decision step: behavior name -> that step's AgentInfoProtos


def demo_case(path: Path) -> tuple[dict[str, Any], Transcript]:
    """A .demo file's brain parameters and agent infos, one agent info per step (as recorded)."""
    from tests.unity_fake import demo_transcript

    brain, infos = demo_transcript(path, TRANSCRIPT_RECORDS)
    return {brain.brain_name: brain}, [{brain.brain_name: [info]} for info in infos]


def built_case(steps: int = 60, seed: int = 0) -> tuple[dict[str, Any], Transcript]:
    """Two behaviors: ``Walker`` (C = 2, 3 agents) and ``Chooser`` (hybrid: C = 1, branches [2, 3], masks,
    two observations, 2 agents, appearing at step 3); episodes of random lengths end done or by
    ``max_step_reached``, and a fresh agent id takes the row in the next step."""
    from tests.unity_fake import agent_info, brain_proto

    rng = np.random.default_rng(seed)
    brains = {"Walker": brain_proto("Walker", continuous=2), "Chooser": brain_proto("Chooser", continuous=1, branches=(2, 3))}
    next_id = iter(range(1, 10_000))
    agents = {"Walker": [next(next_id) for _ in range(3)], "Chooser": [next(next_id) for _ in range(2)]}
    left = {a: int(rng.integers(3, 15)) for ids in agents.values() for a in ids}
    transcript: Transcript = []
    for t in range(steps):
        step: dict[str, list[Any]] = {}
        for name, ids in agents.items():
            if name == "Chooser" and t < 3:
                continue
            infos = []
            for j, agent in enumerate(ids):
                left[agent] -= 1
                done = left[agent] == 0
                max_step = done and bool(rng.integers(2))
                if name == "Walker":
                    obs = [rng.standard_normal(3).tolist()]
                    masked: list[bool] = []
                else:
                    obs = [rng.standard_normal(4).tolist(), rng.standard_normal(2).tolist()]
                    masked = [bool(m) for m in rng.integers(0, 2, 5)]
                    masked[int(rng.integers(2))] = False  # one option of each branch stays allowed
                    masked[2 + int(rng.integers(3))] = False
                infos.append(agent_info(agent, obs, float(rng.standard_normal()), done, max_step, masked))
                if done:
                    ids[j] = next(next_id)
                    left[ids[j]] = int(rng.integers(3, 15))
            step[name] = infos
        transcript.append(step)
    return brains, transcript


async def _replay(address: str, brains: dict[str, Any], transcript: Transcript, ready: Any) -> None:
    from tests.unity_fake import FakeUnity

    await ready
    unity = FakeUnity(address, name="TranscriptUnity")
    unity.brains.update(brains)
    await unity.start()
    for step in transcript:
        reply = await unity.step(step)
    assert reply.header.status == 400, "ML-Agents ends with status 400 after the last step"
    await unity.close()


def _compare(brains: dict[str, Any], transcript: Transcript, theirs: Any, their_specs: dict[str, Any]) -> list[str]:
    """Where ML-Agents' decoding differs from the gateway's (``translate``); empty when they agree."""
    from envclient.unity import translate

    problems: list[str] = []
    specs: dict[str, BrainParameters] = {}
    for i, step in enumerate(transcript):
        for name, infos in step.items():
            if name not in specs:
                specs[name] = translate.behavior_spec(brains[name], infos[0])
                spec = specs[name]
                mine = {
                    "observation_shapes": [list(o.shape) for o in spec.observation_specs],
                    "continuous": spec.action_spec.continuous_size,
                    "branches": list(spec.action_spec.discrete_branches),
                }
                if mine != their_specs.get(name):
                    problems.append(f"{name}: spec {mine} != ML-Agents' {their_specs.get(name)}")
            spec = specs[name]
            rows = translate.behavior_step(spec, infos)
            key = f"{i}/{name}/"
            asking, done = ~rows.done, rows.done
            expect = {
                "decision_id": rows.agent_ids[asking],
                "decision_reward": rows.rewards[asking],
                "terminal_id": rows.agent_ids[done],
                "terminal_reward": rows.rewards[done],
                "terminal_interrupted": rows.max_reached[done],
            }
            for k, obs in enumerate(rows.observations):
                # PNG cameras stay encoded (pb.Tensor) until the processor; these transcripts carry vectors only.
                assert isinstance(obs, np.ndarray), f"{key}observations[{k}] is a compressed camera"
                expect[f"decision_obs{k}"] = obs[asking]
                expect[f"terminal_obs{k}"] = obs[done]
            if spec.action_spec.discrete_branches and asking.any():  # no decision rows: ML-Agents' mask is None
                allowed = (
                    np.ones((len(infos), spec.action_spec.mask_width), bool) if rows.action_mask is None else rows.action_mask
                )
                expect["decision_masked"] = ~allowed[asking]
            for field, value in expect.items():
                got = theirs.get(key + field)
                if got is None or got.shape != value.shape or not np.array_equal(got.astype(value.dtype), value):
                    problems.append(
                        f"step {i}, {name}, {field}: ours {value.tolist()} != ML-Agents' "
                        f"{None if got is None else got.tolist()}"
                    )
    return problems


async def _check_transcript(mla_python: Path, label: str, brains: dict[str, Any], transcript: Transcript) -> list[str]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "steps.npz")
        process = await asyncio.create_subprocess_exec(
            str(mla_python),
            "-c",
            MLA_ENV,
            str(port),
            str(len(transcript)),
            out,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        ready = asyncio.ensure_future(_wait_for_listener(port, process))
        try:
            await asyncio.wait_for(_replay(f"127.0.0.1:{port}", brains, transcript, ready), 300)
            output, _ = await asyncio.wait_for(process.communicate(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        if process.returncode != 0:
            return [f"{label}: ML-Agents' side exited with {process.returncode}: {output.decode()[-2000:]}"]
        with np.load(out) as theirs:
            their_arrays = dict(theirs.items())
        their_specs = json.loads(Path(out + ".json").read_text())
    return [f"{label}: {p}" for p in _compare(brains, transcript, their_arrays, their_specs)]


async def _wait_for_listener(port: int, process: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise RuntimeError(f"ML-Agents' side exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            await asyncio.sleep(0.2)
    raise RuntimeError(f"ML-Agents' side did not listen on {port} within {timeout_s:g} s")


def check_transcripts(mla_python: Path) -> dict[str, Any]:
    cases = [(demo, *demo_case(DEMO_DIR / demo)) for demo in DEMOS if (DEMO_DIR / demo).exists()]
    cases.append(("two behaviors, hybrid, finishing apart", *built_case()))
    matching = 0
    for label, brains, transcript in cases:
        problems = asyncio.run(_check_transcript(mla_python, label, brains, transcript))
        for problem in problems[:5]:
            log.error("%s", problem)
        matching += not problems
        log.info(
            "%s: %d steps, %s", label, len(transcript), "matches ML-Agents" if not problems else f"{len(problems)} differences"
        )
    return {"transcripts": len(cases), "transcripts_matching_mlagents": matching}


# -- ONNX contract against ML-Agents' exporter ---------------------------------------------------------

ONNX_CASES: dict[str, tuple[tuple[int, ...], int, tuple[int, ...]]] = {
    "continuous": ((8,), 2, ()),
    "masked_discrete": ((6, 3), 0, (3, 2)),
    "hybrid": ((5,), 2, (3,)),
}
"""Case -> (observation sizes, continuous actions, branches)."""

MLA_EXPORT = r"""
import json, sys, torch
from mlagents.trainers.settings import NetworkSettings
from mlagents.trainers.policy.torch_policy import TorchPolicy
from mlagents.trainers.torch_entities.networks import SimpleActor
from mlagents.trainers.torch_entities.model_serialization import ModelSerializer
from mlagents_envs.base_env import ActionSpec, BehaviorSpec, DimensionProperty, ObservationSpec, ObservationType

# The side environment's onnx does not import beside its protobuf 3.20; torch's TorchScript exporter needs
# onnx only to add onnxscript functions, which ML-Agents' model has none of. torch >= 2.9 defaults to the
# dynamo exporter; ML-Agents 1.1.0 was written for the TorchScript one.
from torch.onnx._internal.torchscript_exporter import onnx_proto_utils
onnx_proto_utils._add_onnxscript_fn = lambda model_bytes, custom_opsets: model_bytes
_export = torch.onnx.export
def export(*args, **kwargs):
    kwargs.setdefault("dynamo", False)
    return _export(*args, **kwargs)
torch.onnx.export = export

for name, (sizes, continuous, branches), out in json.loads(sys.argv[1]):
    obs = [ObservationSpec((s,), (DimensionProperty.NONE,), ObservationType.DEFAULT, f"obs{i}") for i, s in enumerate(sizes)]
    spec = BehaviorSpec(obs, ActionSpec(continuous, tuple(branches)))
    policy = TorchPolicy(0, spec, NetworkSettings(), SimpleActor, {"conditional_sigma": False, "tanh_squash": False})
    ModelSerializer(policy).export_policy_model(out[: -len(".onnx")])
"""


def _our_onnx(sizes: tuple[int, ...], continuous: int, branches: tuple[int, ...], path: Path) -> None:
    """Our exporter's model of that spec (a PPO policy network as ``trainer.ppo`` builds it)."""
    from trainer.export import TFLiteExporter, make_policy_update
    from trainer.networks import PolicyNetwork
    from trainer.onnx_export import write_onnx

    action_spec = ActionSpec(continuous, branches)
    network = PolicyNetwork(list(sizes), action_spec, hidden_units=128, num_layers=2)
    model = TFLiteExporter(network, [(s,) for s in sizes]).export()
    write_onnx(make_policy_update("Behavior", 1, 0, model, action_spec.to_proto()), path)


def _contract(path: Path, sizes: tuple[int, ...], branches: tuple[int, ...]) -> dict[str, Any]:
    """Input and output names, dtypes, fixed dimensions (a symbolic one as ``"N"``) and constant outputs."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))

    def described(values: Any) -> dict[str, Any]:
        out = {}
        for value in values:
            tensor = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else "N" for d in tensor.shape.dim]
            out[value.name] = {"dtype": onnx.TensorProto.DataType.Name(tensor.elem_type), "shape": dims}
        return out

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {f"obs_{i}": np.zeros((3, s), np.float32) for i, s in enumerate(sizes)}
    if branches:
        feeds["action_masks"] = np.ones((3, sum(branches)), np.float32)
    wanted = [i.name for i in session.get_inputs()]
    names = [o.name for o in session.get_outputs()]
    results = dict(zip(names, session.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))
    constants = {
        n: results[n].tolist() for n in names if n in ("version_number", "memory_size") or n.endswith("_output_shape")
    }
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    return {"inputs": described(inputs), "outputs": described(model.graph.output), "constants": constants}


def _same_contract(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    problems = []
    for side in ("inputs", "outputs"):
        if set(ours[side]) != set(theirs[side]):
            problems.append(f"{side}: ours {sorted(ours[side])} != ML-Agents' {sorted(theirs[side])}")
            continue
        for name, mine in ours[side].items():
            if mine != theirs[side][name]:
                problems.append(f"{side} {name}: ours {mine} != ML-Agents' {theirs[side][name]}")
    if ours["constants"] != theirs["constants"]:
        problems.append(f"constant outputs: ours {ours['constants']} != ML-Agents' {theirs['constants']}")
    return problems


def check_onnx(mla_python: Path) -> dict[str, Any]:
    import onnx

    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(name, case, str(Path(tmp) / f"mla_{name}.onnx")) for name, case in ONNX_CASES.items()]
        done = subprocess.run(
            [str(mla_python), "-c", MLA_EXPORT, json.dumps(jobs)], capture_output=True, text=True, timeout=600, check=False
        )
        if done.returncode != 0:
            log.error("ML-Agents' exporter did not run: %s", done.stderr[-2000:])
            return {"onnx_contract_matches_mlagents": None}
        all_match = True
        opsets: dict[str, Any] = {}
        for name, (sizes, continuous, branches), theirs_path in jobs:
            ours_path = Path(tmp) / f"ours_{name}.onnx"
            _our_onnx(sizes, continuous, branches, ours_path)
            problems = _same_contract(_contract(ours_path, sizes, branches), _contract(Path(theirs_path), sizes, branches))
            for problem in problems:
                log.error("onnx %s: %s", name, problem)
            all_match &= not problems
            opsets[name] = [
                max(o.version for o in onnx.load(str(p)).opset_import if o.domain in ("", "ai.onnx"))
                for p in (ours_path, theirs_path)
            ]
            log.info(
                "onnx %s: %s", name, "the contract matches ML-Agents'" if not problems else f"{len(problems)} differences"
            )
    return {"onnx_contract_matches_mlagents": all_match, "onnx_opsets_ours_mlagents": opsets}


# -- latency -----------------------------------------------------------------------------------------


def latency_spec(name: str) -> BrainParameters:
    return BrainParameters(name, (ObservationSpec((OBS_SIZE,), np.dtype(np.float32)),), ActionSpec(ACTION_SIZE))


def _policy_update(spec: BrainParameters) -> Any:
    """Version 1 of a 2x128 MLP (seed 0) as the TFLite artifact trainers publish."""
    import tensorflow as tf

    from trainer.export import TFLiteExporter, make_policy_update
    from trainer.networks import PolicyNetwork

    tf.random.set_seed(0)
    network = PolicyNetwork([OBS_SIZE], spec.action_spec, hidden_units=128, num_layers=2)
    model = TFLiteExporter(network, [(OBS_SIZE,)]).export()
    return make_policy_update(spec.behavior_name, 1, 0, model, spec.action_spec.to_proto())


def _latency_client(gateway: str, processor: str, agents: int, steps: int, out: Any, go: Any) -> None:
    """The client process: alternates a gateway Exchange with a direct step; puts both lists of seconds.

    After the warm-up it puts ``"ready"`` and waits for ``go``, so the gateway's CPU is read around the
    timed steps alone.
    """
    from envclient.session import EnvSession
    from envclient.unity import translate
    from protos import mlagents_unity_pb2 as unity_pb
    from tests.unity_fake import FakeUnity, agent_info, brain_proto

    rng = np.random.default_rng(0)

    def infos() -> list[Any]:
        return [agent_info(i, [rng.standard_normal(OBS_SIZE).tolist()], reward=0.1) for i in range(agents)]

    async def run() -> tuple[list[float], list[float]]:
        unity = FakeUnity(gateway, name="LatencyUnity")
        unity.brains[GATEWAY_BEHAVIOR] = brain_proto(GATEWAY_BEHAVIOR, continuous=ACTION_SIZE)
        await unity.start()
        await unity.step({GATEWAY_BEHAVIOR: infos()})  # declares the behavior
        spec = latency_spec(DIRECT_BEHAVIOR)
        session = EnvSession(processor, "direct", [spec])
        await session.open()
        messages = []
        directs = []
        for _ in range(32):  # a few different steps, cycled: both sides send the same rows
            step_infos = infos()
            message = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
            message.unity_output.rl_output.agentInfos[GATEWAY_BEHAVIOR].value.extend(step_infos)
            messages.append(message)
            directs.append(translate.behavior_step(spec, step_infos).brain_info(DIRECT_BEHAVIOR))
        through, direct = [], []
        clock = time.perf_counter
        for i in range(WARMUP_STEPS + steps):
            if i == WARMUP_STEPS:
                out.put("ready")
                await asyncio.to_thread(go.wait)
            t0 = clock()
            reply = await unity._exchange(messages[i % len(messages)])
            t1 = clock()
            await session.send(directs[i % len(directs)])
            t2 = clock()
            if reply.header.status != 200 or len(reply.unity_input.rl_input.agent_actions[GATEWAY_BEHAVIOR].value) != agents:
                raise RuntimeError(f"the gateway answered {reply.header}")
            if i >= WARMUP_STEPS:
                through.append(t1 - t0)
                direct.append(t2 - t1)
        await unity.stop()
        await session.close()
        return through, direct

    out.put(asyncio.run(run()))


async def _measure_latency(args: argparse.Namespace) -> dict[str, Any]:
    from processor.behaviors import BehaviorRuntime, ProcessorSettings
    from processor.server import ProcessorServer, ServerOptions

    specs = [latency_spec(GATEWAY_BEHAVIOR), latency_spec(DIRECT_BEHAVIOR)]
    settings = ProcessorSettings(
        behaviors={s.behavior_name: BehaviorRuntime(time_horizon=64) for s in specs},
        strict=True,
        declared_subscribers=("counter",),
    )
    server = ProcessorServer(settings, ServerOptions(host="127.0.0.1", port=0))
    for spec in specs:
        server.topics.policies(spec.behavior_name).publish(_policy_update(spec), 1)
    subscriptions = [server.topics.trajectories(s.behavior_name).subscribe("counter") for s in specs]

    port = await server.start()
    drainer = asyncio.ensure_future(_ack_forever(subscriptions))
    gateway_port = free_port()
    command = [sys.executable]
    if args.profile_gateway:
        command += ["-m", "cProfile", "-o", str(args.profile_gateway)]
    command += ["-m", "cli.main", "--log-level", "WARNING", "unity", "--port", str(gateway_port)]
    command += ["--processor", f"127.0.0.1:{port}"]
    tree = args.gateway_tree or REPO
    env = {**os.environ, "PYTHONPATH": str(tree)}
    gateway = subprocess.Popen(command, env=env, cwd=tree)
    try:
        await _wait_for_port(gateway_port, gateway)
        ctx = mp.get_context("spawn")
        out, go = ctx.Queue(), ctx.Event()
        address = f"127.0.0.1:{gateway_port}"
        child = ctx.Process(target=_latency_client, args=(address, f"127.0.0.1:{port}", args.agents, args.steps, out, go))
        child.start()
        ready = await _next(out, child)
        assert ready == "ready", ready
        cpu_start = _process_cpu_s(gateway.pid)
        go.set()
        through, direct = await _next(out, child)
        gateway_cpu_s = _process_cpu_s(gateway.pid) - cpu_start
        child.join()
    finally:
        gateway.send_signal(signal.SIGINT)
        gateway.wait(30)
        drainer.cancel()
        await server.stop(5.0)
    return {
        "latency_agents": args.agents,
        "latency_steps": len(through),
        "gateway_p50_ms": percentile_ms(through, 50),
        "gateway_p99_ms": percentile_ms(through, 99),
        "direct_p50_ms": percentile_ms(direct, 50),
        "direct_p99_ms": percentile_ms(direct, 99),
        "gateway_cpu_us_per_exchange": gateway_cpu_s / len(through) * 1e6,
        "gateway_added_p50_ms": percentile_ms(through, 50) - percentile_ms(direct, 50),
        "gateway_added_p99_ms": percentile_ms(through, 99) - percentile_ms(direct, 99),
    }


def _echo_server(mode: str, port: int, agents: int) -> None:
    """A bare ``UnityToExternalProto/Exchange`` server (the floor of any gateway): every call gets one fixed reply
    with ``agents`` actions, the size of the gateway's. ``mode``: ``aio`` (grpc.aio, as the gateway) or ``sync``
    (grpc.server, a handler thread)."""
    from concurrent import futures

    import grpc

    from protos import mlagents_unity_pb2 as unity_pb
    from protos import unity_to_external_pb2_grpc as unity_grpc

    reply = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
    actions = reply.unity_input.rl_input.agent_actions[GATEWAY_BEHAVIOR].value
    for _ in range(agents):
        actions.add().continuous_actions.extend([0.5] * ACTION_SIZE)

    class Echo(unity_grpc.UnityToExternalProtoServicer):
        def Exchange(self, request: Any, context: Any) -> Any:
            return reply

    class AioEcho(unity_grpc.UnityToExternalProtoServicer):
        async def Exchange(self, request: Any, context: Any) -> Any:
            return reply

    if mode == "sync":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        unity_grpc.add_UnityToExternalProtoServicer_to_server(Echo(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        server.wait_for_termination()
        return

    async def serve() -> None:
        server = grpc.aio.server()
        unity_grpc.add_UnityToExternalProtoServicer_to_server(AioEcho(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


STREAM_ECHO_METHOD = "/floor.Echo/Stream"


def _stream_echo_server(port: int) -> None:
    """A bare bidi stream (raw bytes) that answers each message with one fixed 200-byte message: the processor
    leg's transport alone, as ``EnvSession`` drives it (one write, one read per step)."""
    import grpc

    reply = b"\0" * 200

    async def echo(requests: Any, context: Any) -> Any:
        async for _ in requests:
            yield reply

    async def serve() -> None:
        handler = grpc.method_handlers_generic_handler("floor.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(echo)})
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def _stream_client_cpu(port: int, payload: bytes, steps: int, mode: str) -> tuple[list[float], float]:
    """Round trips and this process's CPU seconds for ``steps`` write-then-read steps on one stream; ``mode``:
    ``aio`` (``call.write`` / ``call.read``, as ``EnvSession``) or ``sync`` (a request iterator fed from a queue,
    ``next`` on the responses: grpc's own thread writes)."""
    import queue

    import grpc

    times: list[float] = []
    if mode == "sync":
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        responses = channel.stream_stream(STREAM_ECHO_METHOD)(iter(requests.get, None))
        for _ in range(WARMUP_STEPS):
            requests.put(payload)
            next(responses)
        cpu = time.process_time()
        for _ in range(steps):
            t0 = time.perf_counter()
            requests.put(payload)
            next(responses)
            times.append(time.perf_counter() - t0)
        cpu = time.process_time() - cpu
        requests.put(None)
        channel.close()
        return times, cpu

    async def run() -> float:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        call = channel.stream_stream(STREAM_ECHO_METHOD)()
        for _ in range(WARMUP_STEPS):
            await call.write(payload)
            await call.read()
        cpu = time.process_time()
        for _ in range(steps):
            t0 = time.perf_counter()
            await call.write(payload)
            await call.read()
            times.append(time.perf_counter() - t0)
        cpu = time.process_time() - cpu
        await call.done_writing()
        await channel.close()
        return cpu

    return times, asyncio.run(run())


async def _measure_echo_floor(args: argparse.Namespace) -> dict[str, Any]:
    """p50 / p99 of a bare Exchange round trip (the fake Unity's aio client, the same 12-agent messages) and the
    server's CPU per call, for an aio and a sync server: what taking no leg at all off gRPC-in-Python costs."""
    from protos import mlagents_unity_pb2 as unity_pb
    from tests.unity_fake import FakeUnity, agent_info

    rng = np.random.default_rng(0)
    messages = []
    for _ in range(32):
        message = unity_pb.UnityMessageProto(header=unity_pb.HeaderProto(status=200))
        infos = [agent_info(i, [rng.standard_normal(OBS_SIZE).tolist()], reward=0.1) for i in range(args.agents)]
        message.unity_output.rl_output.agentInfos[GATEWAY_BEHAVIOR].value.extend(infos)
        messages.append(message)
    result: dict[str, Any] = {}
    ctx = mp.get_context("spawn")
    for mode in ("aio", "sync"):
        port = free_port()
        server = ctx.Process(target=_echo_server, args=(mode, port, args.agents), daemon=True)
        server.start()
        try:
            await _wait_for_port(port, server)  # type: ignore[arg-type]
            unity = FakeUnity(f"127.0.0.1:{port}")
            for i in range(WARMUP_STEPS):
                await unity._exchange(messages[i % len(messages)])
            times = []
            cpu_start = _process_cpu_s(server.pid)  # type: ignore[arg-type]
            for i in range(args.steps):
                t0 = time.perf_counter()
                await unity._exchange(messages[i % len(messages)])
                times.append(time.perf_counter() - t0)
            cpu_s = _process_cpu_s(server.pid) - cpu_start  # type: ignore[arg-type]
            await unity.close()
        finally:
            server.terminate()
            server.join(10)
        result[f"echo_{mode}_p50_ms"] = percentile_ms(times, 50)
        result[f"echo_{mode}_p99_ms"] = percentile_ms(times, 99)
        result[f"echo_{mode}_server_cpu_us_per_call"] = cpu_s / len(times) * 1e6
    # The processor leg: a BrainInfo's worth of bytes (12 agents' rows) on one stream, from an aio and a sync client.
    payload = b"\1" * (args.agents * (OBS_SIZE + 3) * 4 + 64)
    port = free_port()
    server = ctx.Process(target=_stream_echo_server, args=(port,), daemon=True)
    server.start()
    try:
        await _wait_for_port(port, server)
        for mode in ("aio", "sync"):
            times, cpu_s = await asyncio.to_thread(_stream_client_cpu, port, payload, args.steps, mode)
            result[f"stream_{mode}_client_p50_ms"] = percentile_ms(times, 50)
            result[f"stream_{mode}_client_cpu_us_per_step"] = cpu_s / len(times) * 1e6
    finally:
        server.terminate()
        server.join(10)
    return result


async def _next(queue: Any, child: Any) -> Any:
    """The client process's next message (it failing: an error with its exit code)."""
    while queue.empty():
        if not child.is_alive() and queue.empty():
            raise RuntimeError(f"the latency client exited with {child.exitcode}")
        await asyncio.sleep(0.05)
    return queue.get()


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _ack_forever(subscriptions: list[Any]) -> None:
    from common.errors import TopicClosedError

    async def one(sub: Any) -> None:
        try:
            while True:
                deliveries = await sub.aget(timeout_s=0.5)
                sub.ack([d.tag for d in deliveries])
        except TopicClosedError:
            return

    await asyncio.gather(*(one(s) for s in subscriptions))


async def _wait_for_port(port: int, process: Any, timeout_s: float = 60.0) -> None:
    """Until ``port`` accepts; ``process`` (a ``Popen`` or a ``multiprocessing.Process``) exiting first is an error."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll() if hasattr(process, "poll") else process.exitcode
        if code is not None:
            raise RuntimeError(f"the server exited with {code}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the gateway did not listen on {port} within {timeout_s:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mla-python", type=Path, default=DEFAULT_MLA_PYTHON)
    parser.add_argument("--steps", type=int, default=2000, help="timed Exchanges (and as many direct steps)")
    parser.add_argument("--agents", type=int, default=12, help="agents per step (3DBall has 12)")
    parser.add_argument("--skip-transcripts", action="store_true")
    parser.add_argument("--skip-onnx", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument(
        "--gateway-tree", type=Path, help="run the gateway from this checkout (another version, for a before/after)"
    )
    parser.add_argument("--profile-gateway", type=Path, help="run the gateway under cProfile; its stats file here")
    parser.add_argument(
        "--echo-floor", action="store_true", help="also time a bare Exchange echo server (aio and sync): the floor"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    result: dict[str, Any] = {"workload": "unity_check"}
    if not args.skip_transcripts:
        result.update(check_transcripts(args.mla_python))
    if not args.skip_onnx:
        result.update(check_onnx(args.mla_python))
    if not args.skip_latency:
        result.update(asyncio.run(_measure_latency(args)))
    if args.echo_floor:
        result.update(asyncio.run(_measure_echo_floor(args)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
