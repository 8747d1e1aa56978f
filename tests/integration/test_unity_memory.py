"""A recurrent policy behind ``stepstream unity``'s gateway: Unity sends nothing new, the processor holds the state.

ML-Agents' Hallway (its memory example) replayed by the fake Unity (``tests.unity_fake``) through the real gateway to
a real processor acting with an LSTM artifact. The Unity messages carry observations and actions only; the
trajectories the processor publishes carry the state each action was chosen with, and it is the artifact's own
recurrence: zeros at an episode's first step, then what the artifact returns for the previous step's obs and state.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from common.policy_contract import RECURRENT_OUT
from envclient.unity import translate
from envclient.unity.gateway import GatewayServer, GatewaySettings
from processor.inference import Policy
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings
from tests.unity_fake import FakeUnity, demo_transcript

DEMO = Path(os.environ.get("STEPSTREAM_DEMO_DIR", Path(__file__).resolve().parents[3] / "shared/data/mlagents-demos"))
RECORDS = 200
MEMORY_SIZE = 8


@pytest.fixture
async def gateway_and_processor(start_processor: StartProcessor) -> AsyncIterator[tuple[Harness, FakeUnity]]:
    server, address = await start_processor(itest_settings())
    gateway = GatewayServer(GatewaySettings(processor=address, backoff_initial_s=0.05, reconnect_timeout_s=10.0), port=0)
    port = await gateway.start()
    unity = FakeUnity(f"127.0.0.1:{port}")
    try:
        yield Harness(server, address), unity
    finally:
        await unity.close()
        await gateway.stop()


async def test_hallway_through_the_gateway_with_the_state_held_by_the_processor(
    gateway_and_processor: tuple[Harness, FakeUnity],
) -> None:
    from trainer.export import export_tflite, make_policy_update
    from trainer.recurrent import RecurrentPolicyNetwork

    harness, unity = gateway_and_processor
    path = DEMO / "ExpertHallway.demo"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    brain, infos = demo_transcript(path, RECORDS)
    spec = translate.behavior_spec(brain, infos[0])
    shapes = [tuple(o.shape) for o in spec.observation_specs]
    network = RecurrentPolicyNetwork([math.prod(s) for s in shapes], spec.action_spec, 16, 1, MEMORY_SIZE)
    model = export_tflite(network, shapes, memory_size=MEMORY_SIZE)
    update = make_policy_update(
        spec.behavior_name, 1, 0, model, spec.action_spec.to_proto(), clip=math.inf, memory_size=MEMORY_SIZE
    )
    unity.brains[brain.brain_name] = brain
    assert harness.server.topics.policies(spec.behavior_name).publish(update, 1)
    harness.subscribe(spec.behavior_name)
    await unity.start()
    for info in infos:
        reply = await unity.step({brain.brain_name: [info]})
        assert reply.header.status == 200, reply.header.message
    await unity.stop()

    reference = Policy.from_update(update)
    trajectories = await harness.claim(spec.behavior_name)
    assert sum(t.length for t in trajectories) > 100 and any(t.done_reached for t in trajectories)
    states: dict[tuple[str, int], np.ndarray] = {}  # per agent, the state its next step acts with
    for t in sorted(trajectories, key=lambda t: (t.id.session_id, t.id.agent_id, t.id.sequence)):
        assert t.memories is not None and t.memories.shape == (t.length, MEMORY_SIZE)
        key = (t.id.session_id, t.id.agent_id)
        state = states.get(key, np.zeros((1, MEMORY_SIZE), np.float32))
        for k in range(t.length):
            np.testing.assert_allclose(t.memories[k], state[0], atol=1e-5, err_msg=f"{t.id} step {k}")
            state = reference.forward([o[k : k + 1] for o in t.obs], state)[RECURRENT_OUT]
        states[key] = np.zeros_like(state) if t.done_reached else state  # a new episode starts from zeros
