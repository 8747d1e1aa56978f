"""Held action noise (``noise_hold_steps``) through the real server: per agent, drawn anew at episode start,
with the Gaussian's log-prob, and freed with the session."""

from __future__ import annotations

import numpy as np

from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, assert_log_probs, itest_settings, wait_until

WALKER = BrainParameters("Walker", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(2))
HOLD = 3


async def test_each_agent_holds_its_noise_for_hold_steps_and_draws_anew_at_episode_start(
    start_processor: StartProcessor,
) -> None:
    runtime = {WALKER.behavior_name: BehaviorRuntime(time_horizon=100, noise_hold_steps=HOLD)}
    server, address = await start_processor(itest_settings(behaviors=runtime))
    harness = Harness(server, address)
    harness.publish_policy(WALKER, version=1)
    ids, obs = np.array([0, 1]), [np.full((2, 3), 0.5, np.float32)]  # one obs for all: the mean never changes
    async with EnvSession(address, "walker", [WALKER]) as session:
        for step in range(8):
            done = np.array([False, step == 4])  # agent 1's episode ends at its 5th row
            await session.step(WALKER.behavior_name, ids, obs, np.zeros(2, np.float32), done)
        live = next(iter(server.sessions))
        held = live.noise[WALKER.behavior_name]
        assert len(held) == 2
    await wait_until(lambda: harness.session_count() == 0, "the session to be closed")
    assert len(held) == 0 and held.capacity == 0  # freed with the session
    by_agent = sorted(await harness.claim(WALKER.behavior_name), key=lambda t: (t.id.agent_id, t.id.sequence))
    assert [(t.id.agent_id, t.length, t.done_reached) for t in by_agent] == [(0, 7, False), (1, 4, True), (1, 2, False)]
    for t in by_agent:
        assert_log_probs(t, harness, f"agent {t.id.agent_id}")  # each step's log-prob is the Gaussian's
    # Agent 0's 7 experiences acted at rows 0..6: draws at rows 0, 3, 6.
    a0 = by_agent[0].continuous_actions
    for block in ([0, 1, 2], [3, 4, 5]):
        np.testing.assert_array_equal(a0[block], np.repeat(a0[block[:1]], 3, axis=0))
    assert not np.any(a0[3] == a0[0]) and not np.any(a0[6] == a0[3])
    assert not np.any(a0[0] == by_agent[1].continuous_actions[0])  # each agent its own draw
    # Agent 1: rows 0..3 (draws at 0 and 3), done at row 4; back at row 5, a new episode with a fresh draw.
    a1, back = by_agent[1].continuous_actions, by_agent[2].continuous_actions
    np.testing.assert_array_equal(a1[1], a1[0])
    assert not np.any(a1[3] == a1[0])
    assert not np.any(back[0] == a1[3])
    np.testing.assert_array_equal(back[1], back[0])


async def test_fresh_noise_by_default_holds_no_state(start_processor: StartProcessor) -> None:
    server, address = await start_processor(itest_settings(behaviors={WALKER.behavior_name: BehaviorRuntime()}))
    harness = Harness(server, address)
    harness.publish_policy(WALKER, version=1)
    obs = [np.full((1, 3), 0.5, np.float32)]
    async with EnvSession(address, "walker", [WALKER]) as session:
        for _ in range(3):
            await session.step(WALKER.behavior_name, np.array([0]), obs, np.zeros(1, np.float32), np.zeros(1, bool))
        assert next(iter(server.sessions)).noise == {}
    await wait_until(lambda: harness.session_count() == 0, "the session to be closed")
    (flushed,) = await harness.claim(WALKER.behavior_name)
    assert not np.any(flushed.continuous_actions[1] == flushed.continuous_actions[0])
