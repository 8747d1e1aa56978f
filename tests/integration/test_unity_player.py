"""The gateway against ``tests.unity_player``, a player written from ML-Agents' C# sources, in this process.

What the processor records is compared with what the player did: every episode it ended, with its reward, and
the decisions in it, while agents end episodes on steps before a decision step (a terminal and a decision row of
one agent in one exchange), decide every few steps, are interrupted at ``MaxStep``, and one behavior has a PNG
camera. A com.unity.ml-agents 1.0.x player reads its actions from ``vector_actions``.
"""

from __future__ import annotations

import asyncio

from common.topics.grpc_transport import GrpcPolicyPublisher
from common.trajectory import Trajectory
from envclient.unity import translate
from envclient.unity.gateway import GatewayServer, GatewaySettings
from processor.behaviors import BehaviorRuntime
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings, wait_until
from tests.unity_player import BehaviorScene, Report, Scene, declaration, run_player

BALL = BehaviorScene(
    "3DBall?team=0", agents=3, observation_size=8, continuous=2, decision_period=5, max_step=30, episode_lengths=(7, 12, 9, 41)
)
EYE = BehaviorScene(
    "Eye?team=0", agents=2, observation_size=3, continuous=0, branches=(3,), episode_lengths=(4, 6), camera=(8, 8)
)
SCENE = Scene((BALL, EYE), academy_steps=90)


async def _play(start_processor: StartProcessor, scene: Scene) -> tuple[Report, dict[str, list[Trajectory]]]:
    """Play ``scene`` to its end through a gateway; every trajectory the processor published, by behavior."""
    server, address = await start_processor(itest_settings())
    harness = Harness(server, address)
    names = {}
    for behavior in scene.behaviors:
        spec = translate.behavior_spec(*declaration(scene, behavior))
        harness.publish_policy(spec, 1)
        names[behavior.name] = spec.behavior_name
    gateway = GatewayServer(GatewaySettings(processor=address), port=0)
    port = await gateway.start()
    try:
        report = await asyncio.wait_for(run_player(f"127.0.0.1:{port}", scene), 60.0)
    finally:
        await gateway.stop()
    got: dict[str, list[Trajectory]] = {}
    for unity_name, name in names.items():
        expected = len(report.episodes.get(unity_name, []))
        trajectories: list[Trajectory] = []
        deadline = asyncio.get_running_loop().time() + 20.0
        while (ended := sum(t.episode_ended for t in trajectories)) < expected:
            assert asyncio.get_running_loop().time() < deadline, f"{name}: {ended} of {expected} episodes"
            trajectories.extend(await harness.claim(name))
            await asyncio.sleep(0.02)
        got[unity_name] = trajectories
    return report, got


async def test_every_episode_the_player_ends_is_recorded(start_processor: StartProcessor) -> None:
    report, got = await _play(start_processor, SCENE)
    assert report.quit_reason == "academy_steps" and not report.errors and not report.unanswered
    assert report.same_exchange_restarts > 0  # done and decision rows of one agent in one exchange happened
    for behavior in SCENE.behaviors:
        episodes = report.episodes[behavior.name]
        ended = [t for t in got[behavior.name] if t.episode_ended]
        assert len(ended) == len(episodes) > 3
        assert sorted(round(float(t.episode_reward or 0.0), 3) for t in ended) == sorted(
            round(e["reward"], 3) for e in episodes
        )
        # An episode's experiences: one per decision row after its first, and its terminal row.
        assert sorted(int(t.episode_length or 0) for t in ended) == sorted(e["decisions"] for e in episodes)
        assert sum(t.interrupted for t in ended) == sum(e["interrupted"] for e in episodes)
    assert any(e["interrupted"] for e in report.episodes[BALL.name])  # MaxStep interruptions happened


async def test_a_1_0_player_reads_its_actions_from_vector_actions(start_processor: StartProcessor) -> None:
    legacy = BehaviorScene("3DBall?team=0", agents=2, observation_size=8, continuous=2, episode_lengths=(5, 8))
    discrete = BehaviorScene("Push?team=0", agents=1, observation_size=4, continuous=0, branches=(3, 2))
    scene = Scene((legacy, discrete), communication_version="1.0.0", package_version="1.0.2", academy_steps=20)
    report, got = await _play(start_processor, scene)
    assert report.quit_reason == "academy_steps"
    assert report.errors == []  # every action had its vector_actions
    assert report.decisions[legacy.name] > 10 and got[legacy.name]


async def test_a_finished_behavior_is_served_until_every_behavior_has_finished(start_processor: StartProcessor) -> None:
    """The stack's way (``FinishTraining`` per behavior): 3DBall's training finishes first and its agents still get
    actions with its last policy; once Eye's finishes too, the gateway tells the player to quit (status 400)."""
    runtime = BehaviorRuntime(time_horizon=16)
    server, address = await start_processor(itest_settings(behaviors={"3DBall": runtime, "Eye": runtime}, strict=True))
    harness = Harness(server, address)
    scene = Scene((BALL, EYE))
    for behavior in scene.behaviors:
        harness.publish_policy(translate.behavior_spec(*declaration(scene, behavior)), 1)
    gateway = GatewayServer(GatewaySettings(processor=address), port=0)
    port = await gateway.start()
    report = Report()
    playing = asyncio.ensure_future(run_player(f"127.0.0.1:{port}", scene, report))
    try:
        await wait_until(lambda: report.exchanges > 10, "the player to play")
        with GrpcPolicyPublisher(address, "3DBall") as publisher:
            await asyncio.to_thread(publisher.finish, 100, 1)
        served = report.decisions[BALL.name]
        await wait_until(lambda: report.decisions[BALL.name] > served + 20, "3DBall's agents to decide on")
        assert not playing.done() and not report.errors and not report.unanswered, report.unanswered
        with GrpcPolicyPublisher(address, "Eye") as publisher:
            await asyncio.to_thread(publisher.finish, 100, 1)
        await asyncio.wait_for(playing, 20.0)
    finally:
        playing.cancel()
        await gateway.stop()
    assert report.quit_reason == "status 400" and not report.errors
    assert gateway.gateway.refusal is None
