"""gSDE (PPO's ``use_sde``) through the real server: each agent holds an exploration matrix for ``noise_hold_steps``
steps, drawn anew at its episode start, the noise is ``latent(s) @ W`` of the state it acts in, the stored log-prob
is the per-state Gaussian's, and the matrices go with the session."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from common.policy_contract import MEAN, SDE_NOISE_SCALE
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from processor.inference import Policy
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings, recomputed_log_probs, wait_until
from trainer.export import export_tflite, make_policy_update
from trainer.networks import PolicyNetwork

WALKER = BrainParameters("Walker", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(2))
HOLD, LATENT = 3, 8


async def test_each_agent_acts_with_its_held_matrix_through_its_state(start_processor: StartProcessor) -> None:
    # No latent size in the processor's config: it learns L from the policy's artifact alone.
    runtime = {WALKER.behavior_name: BehaviorRuntime(time_horizon=100, noise_hold_steps=HOLD)}
    server, address = await start_processor(itest_settings(behaviors=runtime))
    harness = Harness(server, address)
    net = PolicyNetwork([3], WALKER.action_spec, LATENT, 2, initial_log_std=-0.5, sde=True)
    model = export_tflite(tf.function(lambda x: net(x)), [(3,)])
    update = make_policy_update(WALKER.behavior_name, 1, 0, model, WALKER.action_spec.to_proto(), [], False, math.inf)
    policy = Policy.from_update(update)
    assert server.topics.policies(WALKER.behavior_name).publish(update, 1)
    harness.subscribe(WALKER.behavior_name)
    rng = np.random.default_rng(5)
    ids = np.array([0, 1])
    async with EnvSession(address, "walker", [WALKER]) as session:
        for step in range(8):
            # Agent 0 sees one state throughout (its noise then repeats while held); agent 1 a new state each step.
            obs = [np.stack([np.full(3, 0.5, np.float32), rng.standard_normal(3).astype(np.float32)])]
            done = np.array([False, step == 4])  # agent 1's episode ends at its 5th row
            await session.step(WALKER.behavior_name, ids, obs, np.zeros(2, np.float32), done)
        held = next(iter(server.sessions)).noise[WALKER.behavior_name]
        assert len(held) == 2 and held.latent_size == LATENT
        matrix_of_1 = held._noise[held._slot_of[1]].copy()  # agent 1's current matrix, drawn at its 2nd new row
    await wait_until(lambda: harness.session_count() == 0, "the session to be closed")
    assert len(held) == 0 and held.capacity == 0  # freed with the session
    by_agent = sorted(await harness.claim(WALKER.behavior_name), key=lambda t: (t.id.agent_id, t.id.sequence))
    assert [(t.id.agent_id, t.length, t.done_reached) for t in by_agent] == [(0, 7, False), (1, 4, True), (1, 2, False)]
    for t in by_agent:
        rows = np.arange(t.length)
        continuous, _ = recomputed_log_probs(policy, t, rows)
        np.testing.assert_allclose(t.continuous_log_probs, continuous, rtol=1e-4, atol=1e-4)  # the per-state Gaussian's
    a0 = by_agent[0].continuous_actions  # draws at rows 0, 3, 6
    for block in ([0, 1, 2], [3, 4, 5]):
        np.testing.assert_array_equal(a0[block], np.repeat(a0[block[:1]], 3, axis=0))
    assert not np.any(a0[3] == a0[0]) and not np.any(a0[6] == a0[3])
    # Agent 1's second episode (rows 5, 6 of the session): one matrix, acting through two different states.
    back = by_agent[2]
    out = policy.forward(back.obs)
    noise = np.einsum("nlc,lc->nc", out[SDE_NOISE_SCALE], matrix_of_1)
    np.testing.assert_allclose(back.continuous_actions, out[MEAN] + noise, rtol=1e-5, atol=1e-5)
    assert not np.allclose(noise[0], noise[1])  # state-dependent: the same matrix, another push
