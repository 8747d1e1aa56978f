"""Self-play behind the Unity gateway: Unity's ``Name?team=N`` behaviors become one session per team, declared in
the Hello, and the processor acts for the opponent team with a snapshot (``processor.opponents``)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from common.config import SelfPlaySettings
from envclient.unity import translate
from envclient.unity.gateway import GatewayServer, GatewaySettings
from processor.behaviors import BehaviorRuntime
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings, policy_update
from tests.unity_fake import FakeUnity, agent_info, brain_proto

TEAMS = ("Duel?team=0", "Duel?team=1")


def _infos(t: int, done: bool = False) -> dict[str, list]:
    return {
        name: [
            agent_info(10 * team + k, [[t, k, team]], reward=(1.0 if team == 0 else -1.0) * done, done=done) for k in (0, 1)
        ]
        for team, name in enumerate(TEAMS)
    }


async def _run(start_processor: StartProcessor, self_play: frozenset[str]) -> tuple[Harness, GatewayServer, FakeUnity]:
    settings = SelfPlaySettings(save_steps=10, swap_steps=4, window=2, play_against_latest_model_ratio=0.0)
    server, address = await start_processor(
        itest_settings(behaviors={"Duel": BehaviorRuntime(self_play=settings)}, strict=True, seed=3)
    )
    harness = Harness(server, address)
    unity = FakeUnity(f"127.0.0.1:{(port := 0)}")
    gateway = GatewayServer(GatewaySettings(processor=address, self_play=self_play), port=port)
    unity.address = f"127.0.0.1:{await gateway.start()}"
    spec = None
    for name in TEAMS:
        unity.brains[name] = brain_proto(name, continuous=1)
        spec = translate.behavior_spec(unity.brains[name], _infos(0)[name][0])
    assert spec is not None and spec.behavior_name == "Duel"
    harness.publish_policy(spec, 1)
    snapshot = policy_update(spec, 0, seed=5)
    snapshot.snapshot = 1
    assert server.topics.snapshots("Duel").publish(snapshot, 1)  # the embedded trainer's route
    return harness, gateway, unity


async def test_each_team_is_a_session_and_only_the_learning_team_is_published(start_processor: StartProcessor) -> None:
    harness, gateway, unity = await _run(start_processor, frozenset({"Duel"}))
    try:
        await unity.start()
        for t in range(6):
            reply = await unity.step(_infos(t, done=t == 5))
            assert reply.header.status == 200
            for name in TEAMS:
                actions = reply.unity_input.rl_input.agent_actions[name].value if t < 5 else []
                assert len(actions) == (2 if t < 5 else 0)
        self_play = harness.server.servicer.self_play
        duel = self_play.behaviors["Duel"]
        learning = self_play.learning_team  # the team whose Hello came first (the gateway opens them at once)
        opponent = 1 - learning
        assert set(duel.picks) == {opponent}
        assert duel.picks[opponent].snapshot == 1 and duel.picks[opponent].policy.version == 0  # ratio 0: a snapshot
        assert duel.counters.opponent_experiences == 2 * 6
        assert {team for _, team in duel.sessions.values()} == {0, 1}
        published = await harness.claim("Duel")
        client = "unity/Duel" + ("?team=1" if learning else "")  # one session per team
        assert published and {t.id.session_id.split(":")[1].rsplit("-", 1)[0] for t in published} == {client}
        assert all(set(t.policy_versions.tolist()) == {1} for t in published)
        assert (duel.ratings.learner > 1200.0) == (learning == 0)  # team 0 wins, team 1 loses, against the snapshot
        np.testing.assert_array_equal(sorted(t.id.agent_id for t in published), [10 * learning, 10 * learning + 1])
    finally:
        await unity.close()
        await gateway.stop()


async def test_a_second_team_without_self_play_is_refused_naming_it(
    start_processor: StartProcessor, caplog: pytest.LogCaptureFixture
) -> None:
    _, gateway, unity = await _run(start_processor, frozenset())
    try:
        await unity.start()
        with caplog.at_level(logging.ERROR, logger="envclient.unity.gateway"):
            await unity.step(_infos(0))  # the refusal ends the run, as mlagents-learn stops on a refused behavior
        refused = [r.getMessage() for r in caplog.records if "is refused" in r.getMessage()]
        assert len(refused) == 1 and "Duel?team=1" in refused[0] and "need its config's self_play" in refused[0]
    finally:
        await unity.close()
        await gateway.stop()
