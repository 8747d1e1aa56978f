"""``stepstream unity``'s gateway between a fake Unity (``tests.unity_fake``) and a real processor, both on port 0.

The fake plays ``RpcCommunicator.cs``'s sequence (init, empty call, steps, 400). What the processor
receives is read back from its trajectory topic (``Harness``) and compared field by field with what
``common.demo`` decodes from the same records, or with the agent infos the fake sent.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import struct
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from common import trajectory as tr
from common.demo import demo_to_buffer
from common.specs import BrainParameters
from common.trajectory import Trajectory
from envclient.unity import translate
from envclient.unity.gateway import GatewayServer, GatewaySettings
from envclient.unity.side_channels import ENGINE_CONFIGURATION, ENVIRONMENT_PARAMETERS, split_messages
from protos import mlagents_demo_pb2 as demo_pb
from protos import mlagents_unity_pb2 as unity_pb
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings, wait_until
from tests.unity_fake import FakeUnity, agent_info, brain_proto, demo_transcript

DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", Path(__file__).resolve().parents[3] / "shared/data/mlagents-demos"))
TRANSCRIPT_RECORDS = 400
"""Records replayed per .demo file (the first ones): enough for several episodes, quick on 2 cores."""


class Stack:
    """A processor (with its test harness), a gateway in front of it, and a fake Unity."""

    def __init__(self, harness: Harness, gateway: GatewayServer, unity: FakeUnity) -> None:
        self.harness = harness
        self.gateway = gateway
        self.unity = unity

    def declare(self, brain: demo_pb.BrainParametersProto, first: demo_pb.AgentInfoProto) -> BrainParameters:
        """Tell the fake about a behavior and publish a policy for the spec the gateway will declare."""
        self.unity.brains[brain.brain_name] = brain
        spec = translate.behavior_spec(brain, first)
        self.harness.publish_policy(spec, 1)
        return spec

    async def trajectories(self, name: str, experiences: int) -> list[Trajectory]:
        """Every trajectory of ``name`` once they hold ``experiences`` in all (publication order)."""
        got: list[Trajectory] = []

        async def pull() -> int:
            got.extend(await self.harness.claim(name))
            return sum(t.length for t in got)

        deadline = asyncio.get_running_loop().time() + 20.0
        while await pull() < experiences:
            assert asyncio.get_running_loop().time() < deadline, f"{name}: {sum(t.length for t in got)} of {experiences}"
            await asyncio.sleep(0.01)
        return got


@pytest.fixture
async def stack(start_processor: StartProcessor) -> AsyncIterator[Stack]:
    server, address = await start_processor(itest_settings())
    gateway = GatewayServer(GatewaySettings(processor=address, backoff_initial_s=0.05, reconnect_timeout_s=10.0), port=0)
    port = await gateway.start()
    unity = FakeUnity(f"127.0.0.1:{port}")
    try:
        yield Stack(Harness(server, address), gateway, unity)
    finally:
        await unity.close()
        await gateway.stop()


def _actions(reply: unity_pb.UnityMessageProto, name: str) -> list[demo_pb.AgentActionProto]:
    assert reply.header.status == 200, reply.header.message
    actions = reply.unity_input.rl_input.agent_actions
    return list(actions[name].value) if name in actions else []


def _cat(trajectories: Sequence[Trajectory], field: str) -> np.ndarray:
    return np.concatenate([getattr(t, field) for t in trajectories])


# -- the sequence ---------------------------------------------------------------------------------


async def test_initialization_answers_as_mlagents_does(stack: Stack) -> None:
    first, second = await stack.unity.start()
    init = first.unity_input.rl_initialization_input
    assert first.header.status == 200
    assert (init.communication_version, init.package_version, init.num_areas) == ("1.5.0", "1.1.0", 1)
    assert init.capabilities.baseRLCapabilities and init.capabilities.hybridActions
    assert init.capabilities.multiAgentGroups  # GroupId and GroupReward reach the processor (processor.groups)
    reset = second.unity_input.rl_input
    assert second.header.status == 200 and reset.command == unity_pb.RESET
    assert len(reset.side_channel) > 0  # the engine configuration, at least
    assert (await stack.unity.stop()).header.status == 200


# -- decoding against real data -------------------------------------------------------------------


@pytest.mark.parametrize("demo", ["Expert3DBall.demo", "ExpertPyramid.demo", "test.demo", "ExpertHallway.demo"])
async def test_demo_transcripts_reach_the_processor_as_the_demo_reader_decodes_them(stack: Stack, demo: str) -> None:
    path = DEMO_DIR / demo
    brain, infos = demo_transcript(path, TRANSCRIPT_RECORDS)
    name = brain.brain_name
    spec = stack.declare(brain, infos[0])
    demo_spec, rows = demo_to_buffer(path, action_timing="same")  # row i = record i, whatever the file's timing
    assert spec.action_spec == demo_spec.action_spec
    assert [o.shape for o in spec.observation_specs] == [o.shape for o in demo_spec.observation_specs]
    await stack.unity.start()
    branches = spec.action_spec.discrete_branches
    for info in infos:
        actions = _actions(await stack.unity.step({name: [info]}), name)
        assert len(actions) == (0 if info.done else 1)  # a done agent asks for no decision
        for action in actions:
            assert len(action.continuous_actions) == spec.action_spec.continuous_size
            assert len(action.discrete_actions) == len(branches)
            assert all(0 <= a < b for a, b in zip(action.discrete_actions, branches, strict=True))
    await stack.unity.stop()

    # Row i of the reader pairs record i's obs and mask with record i+1's reward and done; the
    # processor makes the same experience unless record i is itself terminal (then i+1 starts anew).
    n = len(infos) - 1
    record_done = np.array([info.done for info in infos])
    keep = ~record_done[:n]
    got = await stack.trajectories(spec.behavior_name, int(keep.sum()))
    assert sum(t.length for t in got) == int(keep.sum())
    for k in range(len(spec.observation_specs)):
        np.testing.assert_array_equal(np.concatenate([t.obs[k] for t in got]), rows[tr.obs_key(k)][:n][keep])
    np.testing.assert_array_equal(_cat(got, "rewards"), rows[tr.REWARDS][:n][keep])
    np.testing.assert_array_equal(_cat(got, "done"), rows[tr.DONE][:n][keep])
    if branches:
        np.testing.assert_array_equal(_cat(got, "action_mask"), rows[tr.ACTION_MASK][:n][keep].astype(bool))
        assert _cat(got, "discrete_actions").shape == (int(keep.sum()), len(branches))
    assert _cat(got, "continuous_actions").shape == (int(keep.sum()), spec.action_spec.continuous_size)


# -- two behaviors, hybrid actions, agents finishing apart ----------------------------------------

WALKER = brain_proto("Walker", continuous=2)
CHOOSER = brain_proto("Chooser", continuous=1, branches=(2, 3))


def _walker(agent_id: int, t: int, **kw: object) -> demo_pb.AgentInfoProto:
    return agent_info(agent_id, [[t, agent_id, 0.5]], reward=0.1 * t, **kw)  # type: ignore[arg-type]


def _chooser(agent_id: int, t: int, masked: Sequence[bool], **kw: object) -> demo_pb.AgentInfoProto:
    return agent_info(agent_id, [[t, agent_id, -1.0, 2.0], [t * 0.5, 1.0]], reward=-0.2 * t, masked=masked, **kw)  # type: ignore[arg-type]


async def test_two_behaviors_hybrid_actions_and_agents_that_finish_apart(stack: Stack) -> None:
    stack.declare(WALKER, _walker(1, 0))
    stack.declare(CHOOSER, _chooser(10, 0, [False] * 5))
    await stack.unity.start()
    #         Chooser masks: branch 0 has 2 options, branch 1 has 3 (Unity's wire: True = masked)
    only_first = [False, True, True, False, True]  # allowed: branch 0 -> 0, branch 1 -> 1
    only_last = [True, False, True, True, False]  # allowed: branch 0 -> 1, branch 1 -> 2
    steps: list[dict[str, list[demo_pb.AgentInfoProto]]] = [
        {"Walker": [_walker(1, 0), _walker(2, 0)]},  # Chooser appears later: declared mid-run
        {"Walker": [_walker(1, 1), _walker(2, 1)], "Chooser": [_chooser(10, 1, only_first), _chooser(11, 1, only_last)]},
        {
            "Walker": [_walker(1, 2, done=True), _walker(2, 2)],
            "Chooser": [_chooser(10, 2, only_last), _chooser(11, 2, only_first)],
        },
        {
            "Walker": [_walker(3, 3), _walker(2, 3)],
            "Chooser": [_chooser(10, 3, only_first), _chooser(11, 3, only_last, done=True)],
        },
        {"Walker": [_walker(3, 4), _walker(2, 4, done=True, max_step=True)], "Chooser": [_chooser(10, 4, only_last)]},
        {"Walker": [_walker(3, 5)], "Chooser": [_chooser(10, 5, only_first)]},
    ]
    allowed = {tuple(only_first): (0, 1), tuple(only_last): (1, 2)}
    for infos in steps:
        reply = await stack.unity.step(infos)
        for name, agents in infos.items():
            actions = _actions(reply, name)
            asking = [a for a in agents if not a.done]
            assert len(actions) == len(asking), f"{name}: one action per agent asking, in its order"
            for agent, action in zip(asking, actions, strict=True):
                if name == "Walker":
                    assert len(action.continuous_actions) == 2 and not action.discrete_actions
                else:
                    assert len(action.continuous_actions) == 1
                    assert tuple(action.discrete_actions) == allowed[tuple(agent.action_mask)]  # the mask was obeyed
    assert set(stack.gateway.gateway.links) == {"Walker", "Chooser"}
    await stack.unity.stop()

    walker = {t.id.agent_id: t for t in await stack.trajectories("Walker", 2 + 4 + 2)}
    assert walker[1].done_reached and not walker[1].interrupted and walker[1].length == 2
    assert walker[2].done_reached and walker[2].interrupted and walker[2].length == 4  # max_step_reached
    assert not walker[3].done_reached and walker[3].interrupted  # flushed at the Stop
    np.testing.assert_array_equal(walker[2].obs[0][:, 0], [0, 1, 2, 3])
    np.testing.assert_allclose(walker[2].rewards, np.float32([0.1, 0.2, 0.3, 0.4]))
    chooser = {t.id.agent_id: t for t in await stack.trajectories("Chooser", 4 + 2)}
    assert chooser[11].done_reached and not chooser[11].interrupted
    assert chooser[11].action_mask is not None
    np.testing.assert_array_equal(chooser[11].action_mask, ~np.array([only_last, only_first]))
    np.testing.assert_array_equal(chooser[10].obs[1][:, 0], np.float32([0.5, 1.0, 1.5, 2.0]))


# -- lifecycle ------------------------------------------------------------------------------------


async def test_stop_closes_the_sessions_and_play_again_starts_afresh(stack: Stack) -> None:
    stack.declare(WALKER, _walker(1, 0))
    sessions: list[set[str]] = []
    for _ in range(2):
        await stack.unity.start()
        for t in range(3):
            assert len(_actions(await stack.unity.step({"Walker": [_walker(1, t)]}), "Walker")) == 1
        assert stack.harness.session_count() == 1
        await stack.unity.stop()
        await wait_until(lambda: stack.harness.session_count() == 0, "the Stop to close the processor session")
        assert stack.gateway.gateway.links == {}
        got = await stack.trajectories("Walker", 2)
        assert [t.length for t in got] == [2] and got[0].interrupted  # agent 1 starts anew each session
        sessions.append({t.id.session_id for t in got})
    assert sessions[0] != sessions[1]
    assert stack.gateway.gateway.stats.sessions == 2


async def test_a_restarted_build_without_stop_is_a_new_session(stack: Stack) -> None:
    stack.declare(WALKER, _walker(1, 0))
    await stack.unity.start()
    await stack.unity.step({"Walker": [_walker(1, 0)]})
    await stack.unity.step({"Walker": [_walker(1, 1)]})
    await stack.unity.close()  # the build is killed: no 400
    restarted = FakeUnity(stack.unity.address)
    restarted.brains = dict(stack.unity.brains)
    await restarted.start()
    assert len(_actions(await restarted.step({"Walker": [_walker(1, 0)]}), "Walker")) == 1
    first = await stack.trajectories("Walker", 1)
    assert [t.length for t in first] == [1] and first[0].interrupted  # the old session was flushed
    await restarted.stop()


async def test_processor_unreachable_past_the_timeout_answers_500(start_processor: StartProcessor) -> None:
    server, address = await start_processor(itest_settings())
    await server.stop(0.1)
    gateway = GatewayServer(GatewaySettings(processor=address, backoff_initial_s=0.02, reconnect_timeout_s=0.3), port=0)
    unity = FakeUnity(f"127.0.0.1:{await gateway.start()}")
    unity.brains["Walker"] = WALKER
    try:
        await unity.start()
        reply = await unity.step({"Walker": [_walker(1, 0)]})
        assert reply.header.status == 500
        assert "Walker" in reply.header.message and "unreachable" in reply.header.message
    finally:
        await unity.close()
        await gateway.stop()


async def test_processor_restart_while_unity_waits_reconnects(start_processor: StartProcessor) -> None:
    from processor.server import ProcessorServer, ServerOptions

    server, address = await start_processor(itest_settings())
    port = int(address.rsplit(":", 1)[1])
    harness = Harness(server, address)
    spec = translate.behavior_spec(WALKER, _walker(1, 0))
    harness.publish_policy(spec, 1)
    gateway = GatewayServer(GatewaySettings(processor=address, backoff_initial_s=0.05, reconnect_timeout_s=20.0), port=0)
    unity = FakeUnity(f"127.0.0.1:{await gateway.start()}")
    unity.brains["Walker"] = WALKER
    restarted: ProcessorServer | None = None
    try:
        await unity.start()
        await unity.step({"Walker": [_walker(1, 0)]})
        await server.stop(0.5)
        waiting = asyncio.create_task(unity.step({"Walker": [_walker(1, 1)]}))  # Unity waits while the processor is away
        await asyncio.sleep(0.3)
        assert not waiting.done()
        restarted = ProcessorServer(itest_settings(), ServerOptions(host="127.0.0.1", port=port))
        await restarted.start()
        Harness(restarted, address).publish_policy(spec, 1)
        reply = await asyncio.wait_for(waiting, 20.0)
        assert len(_actions(reply, "Walker")) == 1
        assert gateway.gateway.links["Walker"].sessions == 2
    finally:
        await unity.close()
        await gateway.stop()
        if restarted is not None:
            await restarted.stop(0.5)


# -- bad input from Unity -------------------------------------------------------------------------


def _nan(info: demo_pb.AgentInfoProto) -> None:
    info.observations[0].float_data.data[1] = math.nan


def _unknown_compression(info: demo_pb.AgentInfoProto) -> None:
    info.observations[0].compression_type = 7  # type: ignore[assignment]


def _wrong_mask_width(info: demo_pb.AgentInfoProto) -> None:
    del info.action_mask[:]
    info.action_mask.extend([False, False, True])


@pytest.mark.parametrize(
    ("spoil", "message"),
    [(_nan, "NaN or Inf"), (_unknown_compression, "unknown (7)"), (_wrong_mask_width, "the action mask has 3 entries")],
)
async def test_bad_input_refuses_that_behavior_and_ends_the_run_naming_it(stack: Stack, spoil, message: str) -> None:  # type: ignore[no-untyped-def]
    """As mlagents-learn stops on a behavior it cannot take, the gateway answers that step with status 400 (Unity
    quits), the reason naming the behavior and the agent, instead of serving the others on."""
    stack.declare(WALKER, _walker(1, 0))
    stack.declare(CHOOSER, _chooser(10, 0, [False] * 5))
    await stack.unity.start()
    free = [False] * 5
    await stack.unity.step({"Walker": [_walker(1, 0)], "Chooser": [_chooser(10, 0, free), _chooser(11, 0, free)]})
    bad = _chooser(11, 1, free)
    spoil(bad)
    reply = await stack.unity.step({"Walker": [_walker(1, 1)], "Chooser": [_chooser(10, 1, free), bad]})
    assert reply.header.status == translate.STATUS_STOP
    assert "behavior 'Chooser' is refused: behavior 'Chooser', agent 11" in reply.header.message
    assert message in reply.header.message
    assert stack.gateway.gateway.refusal == reply.header.message and stack.gateway.gateway.ended.is_set()
    assert stack.gateway.gateway.links == {}  # every behavior's session closed (flushed)
    await stack.unity.close()


@pytest.mark.parametrize(
    ("demo", "camera"),
    [("testhybridvis.demo", ((84, 84, 3), np.uint8)), ("ExpertGridWorld.demo", ((64, 84, 3), np.float32))],
    ids=["png_channels_first", "uncompressed"],
)
async def test_a_camera_passes_through_as_an_image(stack: Stack, demo: str, camera: tuple[tuple[int, ...], type]) -> None:
    """A PNG camera (declared [C, H, W], Unity >= 2.0) reaches the processor as PNGs it decodes once, to uint8
    [H, W, C]; an uncompressed one as float32. Either way the pixels are the .demo reader's."""
    path = DEMO_DIR / demo
    brain, infos = demo_transcript(path, TRANSCRIPT_RECORDS)
    name = brain.brain_name
    spec = stack.declare(brain, infos[0])
    shape, dtype = camera
    assert (spec.observation_specs[0].shape, spec.observation_specs[0].dtype) == (shape, dtype)
    _, rows = demo_to_buffer(path, action_timing="same")
    await stack.unity.start()
    for info in infos:
        assert len(_actions(await stack.unity.step({name: [info]}), name)) == (0 if info.done else 1)
    await stack.unity.stop()

    n = len(infos) - 1
    keep = ~np.array([info.done for info in infos])[:n]
    got = await stack.trajectories(spec.behavior_name, int(keep.sum()))
    images = np.concatenate([t.obs[0] for t in got])
    pixels = rows[tr.obs_key(0)][:n][keep]  # the reader's float32 in [0, 1], in the declared layout
    if dtype == np.uint8:
        want = np.rint(np.moveaxis(pixels, 1, -1) * 255).astype(np.uint8)  # [C, H, W] -> [H, W, C]
        np.testing.assert_array_equal(images, want, strict=True)
    else:
        np.testing.assert_array_equal(images, pixels.astype(np.float32), strict=True)
    for k in range(1, len(spec.observation_specs)):
        np.testing.assert_array_equal(np.concatenate([t.obs[k] for t in got]), rows[tr.obs_key(k)][:n][keep])


async def test_an_observation_the_processor_refuses_is_refused_once_naming_it(stack: Stack) -> None:
    """testdcvis.demo's second observation is an empty vector [0], which no spec may declare."""
    brain, infos = demo_transcript(DEMO_DIR / "testdcvis.demo", 3)
    stack.unity.brains[brain.brain_name] = brain
    stack.declare(WALKER, _walker(1, 0))
    await stack.unity.start()
    reply = await stack.unity.step({brain.brain_name: [infos[0]], "Walker": [_walker(1, 0)]})
    assert reply.header.status == translate.STATUS_STOP
    assert f"behavior {brain.brain_name!r}: observation_specs[1].shape [0]" in reply.header.message
    assert stack.gateway.gateway.stats.failed_behaviors == 1
    await stack.unity.close()


# -- side channels and the command line -----------------------------------------------------------


async def test_stats_channel_values_reach_the_metrics(stack: Stack) -> None:
    from prometheus_client import generate_latest

    from common.metrics import new_registry
    from envclient.unity.metrics import UnityCollector
    from envclient.unity.side_channels import STATS, frame

    stack.declare(WALKER, _walker(1, 0))
    await stack.unity.start()
    stat = frame(STATS, struct.pack("<i", 9) + b"Env/Laps." + struct.pack("<fi", 3.0, 1))
    await stack.unity.step({"Walker": [_walker(1, 0)]}, side_channel=stat + stat)
    text = generate_latest(new_registry(UnityCollector(stack.gateway.gateway.stats))).decode()
    assert 'stepstream_unity_stat{aggregation="most_recent",key="Env/Laps."} 3.0' in text
    assert 'stepstream_unity_stat_messages_total{key="Env/Laps."} 2.0' in text
    await stack.unity.stop()


async def test_stats_channel_values_ride_the_steps_to_the_behaviors_next_trajectory(stack: Stack) -> None:
    """A standalone gateway's stats reach the trainer: in the step's BrainInfo, then on the behavior's next published
    trajectory (over the Subscribe wire too), in the order Unity sent them; a step without agents holds them."""
    from common.environment_stats import EnvironmentStat
    from envclient.unity.side_channels import STATS, frame

    def stat(key: bytes, value: float, code: int) -> bytes:
        return frame(STATS, struct.pack("<i", len(key)) + key + struct.pack("<fi", value, code))

    stack.declare(WALKER, _walker(1, 0))
    await stack.unity.start()
    await stack.unity.step({"Walker": [_walker(1, 0)]}, side_channel=stat(b"Env/Laps", 3.0, 1))
    await stack.unity.step({}, side_channel=stat(b"Env/Laps", 4.0, 1) + stat(b"Env/Hits", 2.0, 2))  # no agents
    await stack.unity.step({"Walker": [_walker(1, 1, done=True)]}, side_channel=stat(b"Env/Dist", 1.5, 0))
    (trajectory,) = await stack.trajectories("Walker", 1)
    want = (
        EnvironmentStat("Env/Laps", 3.0, "most_recent"),
        EnvironmentStat("Env/Laps", 4.0, "most_recent"),
        EnvironmentStat("Env/Hits", 2.0, "sum"),
        EnvironmentStat("Env/Dist", 1.5, "average"),
    )
    assert trajectory.environment_stats == want
    assert Trajectory.from_proto(trajectory.to_proto()).environment_stats == want  # what a remote trainer decodes
    await stack.unity.step({"Walker": [_walker(2, 0)]})
    await stack.unity.step({"Walker": [_walker(2, 1, done=True)]})
    (later,) = await stack.trajectories("Walker", 1)
    assert later.environment_stats == ()  # each value is carried once
    await stack.unity.stop()


async def test_the_unity_command_sends_the_yaml_settings_and_steps_through_the_processor(
    start_processor: StartProcessor, tmp_path: Path
) -> None:
    from tests.integration.test_cli import REPO, stepstream_command, subprocess_env

    server, address = await start_processor(itest_settings())
    Harness(server, address).publish_policy(translate.behavior_spec(WALKER, _walker(1, 0)), 1)
    config = tmp_path / "unity.yaml"
    config.write_text("engine_settings: {time_scale: 7, width: 320}\nenvironment_parameters: {gravity: 9.5}\n")
    proc = await asyncio.create_subprocess_exec(
        *stepstream_command(), "unity", str(config), "--port", "0", "--processor", address,
        cwd=REPO, env=subprocess_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        port = None
        while port is None:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30.0)).decode()
            assert line, "stepstream unity exited before listening"
            found = re.search(r"listening for Unity on 127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        unity = FakeUnity(f"127.0.0.1:{port}")
        unity.brains["Walker"] = WALKER
        _, reset = await unity.start()
        sent = list(split_messages(reset.unity_input.rl_input.side_channel))
        assert (ENGINE_CONFIGURATION, struct.pack("<iii", 0, 320, 84)) in sent
        assert (ENGINE_CONFIGURATION, struct.pack("<if", 2, 7.0)) in sent
        assert (ENVIRONMENT_PARAMETERS, struct.pack("<i", 7) + b"gravity" + struct.pack("<if", 0, 9.5)) in sent
        assert len(_actions(await unity.step({"Walker": [_walker(1, 0)]}), "Walker")) == 1
        await unity.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30.0) == 0


FAKE_BUILD = """#!{python}
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from tests.unity_fake import FakeUnity, agent_info, brain_proto

argv = sys.argv[1:]
with open({record!r}, "w") as f:
    json.dump(argv, f)
port = int(argv[argv.index("--mlagents-port") + 1])


async def main():
    unity = FakeUnity(f"127.0.0.1:{{port}}")
    unity.brains["Walker"] = brain_proto("Walker", continuous=2)
    await unity.start()
    for t in range(3):
        reply = await unity.step({{"Walker": [agent_info(1, [[t, 1.0, 0.5]])]}})
        assert reply.header.status == 200 and len(reply.unity_input.rl_input.agent_actions["Walker"].value) == 1
    await unity.stop()


asyncio.run(main())
sys.exit({code})
"""


@pytest.mark.parametrize("code", [0, 3])
async def test_env_launches_the_build_as_mlagents_learn_does(
    start_processor: StartProcessor, tmp_path: Path, code: int
) -> None:
    import json
    import sys

    from tests.integration.test_cli import REPO, stepstream_command, subprocess_env

    server, address = await start_processor(itest_settings())
    Harness(server, address).publish_policy(translate.behavior_spec(WALKER, _walker(1, 0)), 1)
    record = tmp_path / "argv.json"
    build = tmp_path / "Game.x86_64"  # --env Game finds it, as ML-Agents resolves a Linux build
    build.write_text(FAKE_BUILD.format(python=sys.executable, repo=str(REPO), record=str(record), code=code))
    build.chmod(0o755)
    logs = tmp_path / "logs"
    proc = await asyncio.create_subprocess_exec(
        *stepstream_command(), "unity", "--port", "0", "--processor", address, "--env", str(tmp_path / "Game"),
        "--no-graphics", "--log-dir", str(logs), "--env-args", "--level", "2",
        cwd=REPO, env=subprocess_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), 60.0)
    text = output.decode()
    argv = json.loads(record.read_text())
    port = argv[argv.index("--mlagents-port") + 1]
    assert int(port) > 0
    assert argv == [
        "-nographics",
        "-batchmode",
        "--mlagents-port",
        port,
        "-logFile",
        str(logs / "Player-0.log"),
        "--level",
        "2",
    ]
    if code == 0:
        assert proc.returncode == 0, text
    else:
        assert proc.returncode == 2 and "exited with code 3" in text, text
