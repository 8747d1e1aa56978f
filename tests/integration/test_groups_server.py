"""Groups through the real server: EnvSession -> gRPC Step stream (BrainInfo fields 9 and 10) -> group assembly ->
trajectory topic (Trajectory fields 22-28), against the hand-computed cases of ``tests/group_cases.py``; and bad group
input, each refused with a status naming the agent while another session steps on untouched.

A real MLP policy acts (``clip = inf``: the env action is the stored sample), so a groupmate's expected action is the
one the client got for it: action code ``100 * agent + step`` is read as "the answer to that agent at that step".
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import numpy as np
import pytest

from common.specs import BrainParameters
from common.tensors import to_tensor
from common.trajectory import Trajectory
from envclient.session import ActionResult, EnvSession, StepRejectedError
from processor.behaviors import BehaviorRuntime
from protos import pb
from tests.group_cases import (
    FLUSH,
    GROUP_CASES,
    HYBRID,
    GroupCase,
    GRow,
    check_group,
    expected_by_key,
    group_brain_info,
    gstep,
)
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings


async def start(start_processor: StartProcessor, params: BrainParameters, time_horizon: int) -> Harness:
    server, address = await start_processor(
        itest_settings(behaviors={params.behavior_name: BehaviorRuntime(time_horizon=time_horizon)})
    )
    harness = Harness(server, address)
    harness.publish_policy(params, version=1)
    return harness


async def serve(harness: Harness, case: GroupCase, params: BrainParameters):
    """Send the case's steps, one EnvSession per session name; returns (published by key, action_of)."""
    sessions: dict[str, EnvSession] = {}
    ids: dict[str, str] = {}
    answers: dict[int, tuple[list[int], ActionResult]] = {}
    published: dict[tuple[str, int, int], Trajectory] = {}

    async def collect(name: str, at: int) -> None:
        for t in await harness.claim(params.behavior_name, {ids[name]}):
            key = (name, t.id.agent_id, at)
            assert key not in published, key
            published[key] = t

    for k, st in enumerate(case.steps):
        if st.session not in sessions:
            sessions[st.session] = EnvSession(harness.address, f"client-{st.session}", [params])
            ids[st.session] = await sessions[st.session].open()
        answers[k] = ([r.agent_id for r in st.rows], await sessions[st.session].send(group_brain_info(st, params)))
        await collect(st.session, k)
    for name, session in sessions.items():
        await session.close()
        await collect(name, FLUSH)

    def action_of(code: int) -> tuple[np.ndarray, np.ndarray]:
        agents, result = answers[code % 100]
        row = agents.index(code // 100)
        return result.continuous_actions[row], result.discrete_actions[row]

    return published, action_of


@pytest.mark.parametrize("case", GROUP_CASES, ids=[c.name for c in GROUP_CASES])
async def test_group_rule_through_the_server(case: GroupCase, start_processor: StartProcessor) -> None:
    harness = await start(start_processor, HYBRID, case.time_horizon)
    published, action_of = await serve(harness, case, HYBRID)
    want = expected_by_key(case)
    assert sorted(published) == sorted(want)
    for key, trajectory in published.items():
        check_group(trajectory, want[key], HYBRID, action_of)
    assert harness.session_count() == 0


BadMutation = Callable[[pb.BrainInfo], None]


def _set(field: str, values: np.ndarray) -> BadMutation:
    return lambda msg: to_tensor(values, getattr(msg, field))


BAD_GROUPS = (
    ("negative_id", [GRow(1, 0.1, group=2), GRow(4, 0.2, group=-1)], None, "group_ids of agent 4 is -1"),
    (
        "nan_reward",
        [GRow(1, 0.1, group=2), GRow(4, 0.2, group=2, group_reward=float("inf"))],
        None,
        "group_rewards of agent 4",
    ),
    ("ids_without_rewards", [GRow(1, 0.1, group=2)], lambda m: m.ClearField("group_rewards"), "group_ids sent without"),
    ("float_ids", [GRow(1, 0.1, group=2)], _set("group_ids", np.ones(1, np.float32)), "group_ids must be [1] of kind 'iu'"),
    ("group_too_big", [GRow(a, 0.1, group=3) for a in range(70)], None, "agent 64 is agent 65 of group 3"),
)


@pytest.mark.parametrize("rows, mutate, details", [b[1:] for b in BAD_GROUPS], ids=[b[0] for b in BAD_GROUPS])
async def test_bad_group_input_ends_only_its_own_stream(
    rows: list[GRow], mutate: BadMutation | None, details: str, start_processor: StartProcessor
) -> None:
    harness = await start(start_processor, HYBRID, 5)
    good = EnvSession(harness.address, "good", [HYBRID])
    await good.open()
    (case,) = [c for c in GROUP_CASES if c.name == "two_agents_step_together"]
    await good.send(group_brain_info(case.steps[0], HYBRID))

    bad = EnvSession(harness.address, "bad", [HYBRID])
    await bad.open()
    msg = group_brain_info(gstep(*rows), HYBRID)
    if mutate is not None:
        mutate(msg)
    with pytest.raises(StepRejectedError) as refused:
        await bad.send(msg)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert details in refused.value.details and "behavior 'Gridder'" in refused.value.details, refused.value.details

    # The good session steps on, and its trajectories carry their groups as ever.
    for st in case.steps[1:]:
        await good.send(group_brain_info(st, HYBRID))
    await good.close()
    trajectories = await harness.claim(HYBRID.behavior_name)
    assert sorted(t.id.agent_id for t in trajectories) == [1, 2]
    assert all(t.group is not None and t.group.groupmates == 1 for t in trajectories)
    assert harness.session_count() == 0


async def test_a_group_spanning_two_behaviors_is_refused(start_processor: StartProcessor) -> None:
    other = BrainParameters("Other", HYBRID.observation_specs, HYBRID.action_spec)
    harness = await start(start_processor, HYBRID, 5)
    harness.publish_policy(other, version=1)
    session = EnvSession(harness.address, "two-behaviors", [HYBRID, other])
    await session.open()
    await session.send(group_brain_info(gstep(GRow(1, 0.1, group=5)), HYBRID))
    msg = group_brain_info(gstep(GRow(2, 0.1, group=5)), other)
    msg.behavior_name = "Other"
    with pytest.raises(StepRejectedError) as refused:
        await session.send(msg)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "agent 2 is in group 5, whose members have behavior 'Gridder'" in refused.value.details
