"""Recurrent state through the real server: what the processor holds per agent equals the artifact run by hand.

Two scripted clients act at once with the same agent ids (so the batcher joins their rows in one pass). Their agents
finish at different steps, come back as new episodes, skip steps and appear late. The reference runs the same
artifact row by row, agent by agent, each from its own state: zeros at a first sighting and after done, else what
the previous step returned. Every experience published must carry the state its action was chosen with, and the
states held at the end must be each agent's last returned one.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from common.policy_contract import RECURRENT_OUT
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from processor.inference import Policy
from protos import pb
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings, wait_until

PARAMS = BrainParameters("Rememberer", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(1, (2,)))
MEMORY_SIZE = 8

# Per step: (agent id, done) of each row. Agent 1 ends at step 2 and is back at step 4; agent 2 ends at step 5;
# agent 3 appears at step 2; agent 0 skips step 3.
SCRIPT: list[list[tuple[int, bool]]] = [
    [(0, False), (1, False), (2, False)],
    [(0, False), (1, False), (2, False)],
    [(1, True), (0, False), (3, False), (2, False)],
    [(2, False), (3, False)],
    [(3, False), (1, False), (0, False), (2, False)],
    [(0, False), (2, True), (1, False), (3, False)],
    [(1, False), (0, False), (3, True)],
    [(0, False), (1, False)],
]


def recurrent_update(version: int) -> pb.PolicyUpdate:
    from trainer.export import export_tflite, make_policy_update
    from trainer.recurrent import RecurrentPolicyNetwork

    network = RecurrentPolicyNetwork([3], PARAMS.action_spec, hidden_units=16, num_layers=1, memory_size=MEMORY_SIZE)
    model = export_tflite(network, [(3,)], memory_size=MEMORY_SIZE)
    spec = PARAMS.action_spec.to_proto()
    return make_policy_update(PARAMS.behavior_name, version, 0, model, spec, clip=math.inf, memory_size=MEMORY_SIZE)


def observations(session: int, k: int, ids: list[int]) -> np.ndarray:
    """float32 [N, 3], distinct per session, step and agent."""
    return np.array([[session + 0.1 * k, 0.3 * a - 0.5, np.sin(k + a)] for a in ids], np.float32)


async def test_the_states_held_per_agent_are_the_artifact_run_agent_by_agent(start_processor: StartProcessor) -> None:
    runtime = {PARAMS.behavior_name: BehaviorRuntime(time_horizon=3)}
    server, address = await start_processor(itest_settings(behaviors=runtime))
    harness = Harness(server, address)
    update = recurrent_update(1)
    assert server.topics.policies(PARAMS.behavior_name).publish(update, 1)
    harness.subscribe(PARAMS.behavior_name)
    reference = Policy.from_update(update)

    acted: dict[tuple[int, int], list[np.ndarray]] = {}  # (session, agent) -> the state of each of its rows
    state: dict[tuple[int, int], np.ndarray] = {}
    clients = [EnvSession(address, f"client-{s}", [PARAMS]) for s in range(2)]
    for client in clients:
        await client.__aenter__()
    try:
        for k, rows in enumerate(SCRIPT):
            ids = [a for a, _ in rows]
            done = np.array([d for _, d in rows])
            obs = [observations(s, k, ids) for s in range(2)]
            sends = [
                c.step(PARAMS.behavior_name, np.array(ids), [obs[s]], np.zeros(len(ids), np.float32), done)
                for s, c in enumerate(clients)
            ]
            await asyncio.gather(*sends)
            for s in range(2):
                for r, (agent, is_done) in enumerate(rows):
                    key = (s, agent)
                    memory = state.get(key, np.zeros(MEMORY_SIZE, np.float32))
                    acted.setdefault(key, []).append(memory)
                    out = reference.forward([obs[s][r : r + 1]], memory[None])[RECURRENT_OUT][0]
                    if is_done:
                        state.pop(key, None)
                    else:
                        state[key] = out
        # The states held now: each live agent's last returned one, per session.
        live = {session.client_id: session for session in server.sessions}
        for s in range(2):
            assembler = live[f"client-{s}"].assemblers[PARAMS.behavior_name]
            held = sorted(a for s_, a in state if s_ == s)
            assert sorted(int(a) for a in assembler.buffer.slot_of) == held  # type: ignore[call-overload]
            memories = assembler.memories(np.array(held))
            assert memories is not None
            np.testing.assert_allclose(memories, np.stack([state[(s, a)] for a in held]), atol=1e-5)
    finally:
        for client in clients:
            await client.__aexit__(None, None, None)
    await wait_until(lambda: harness.session_count() == 0, "the sessions to be closed")

    # Every experience carries the state its action was chosen with: an agent's rows in order, episode by episode.
    trajectories = await harness.claim(PARAMS.behavior_name)
    by_agent: dict[tuple[str, int], list[np.ndarray]] = {}
    for t in sorted(trajectories, key=lambda t: (t.id.session_id, t.id.agent_id, t.id.sequence)):
        assert t.memories is not None and t.memories.shape == (t.length, MEMORY_SIZE)
        by_agent.setdefault((t.id.session_id, t.id.agent_id), []).extend(t.memories)
    session_of = {t.id.session_id: int(t.id.session_id.split("client-")[1].split("-")[0]) for t in trajectories}
    assert len(by_agent) == 8  # 4 agents in each of 2 sessions
    for (session_id, agent), published in by_agent.items():
        states = acted[(session_of[session_id], agent)]
        # Each episode's last row (done, or the pending row at the flush) is no experience.
        experiences = [m for m, is_last in zip(states, _last_rows(agent), strict=True) if not is_last]
        np.testing.assert_allclose(np.stack(published), np.stack(experiences), atol=1e-5, err_msg=f"{session_id} {agent}")
    assert any(np.any(m) for rows in by_agent.values() for m in rows)  # states really moved


def _last_rows(agent: int) -> list[bool]:
    """For each of ``agent``'s rows in SCRIPT: whether it is no experience (a done row, or the session's last row)."""
    out = [d for rows in SCRIPT for a, d in rows if a == agent]
    if not out[-1]:
        out[-1] = True  # flushed at the session end: the pending row has no reward yet
    return out
