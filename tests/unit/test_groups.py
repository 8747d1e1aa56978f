"""Group assembly (``processor/groups.py``) against the table of ``tests/group_cases.py``, and the group fields'
decoding, checks and wire form.

Each case's steps go to one ``TrajectoryAssembler`` and one ``SessionGroups`` per session, as the servicer
calls them; every session is flushed after the last step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

from common.errors import ProtocolError
from common.groups import MAX_GROUP_AGENTS, WarnOnce, fold_group_rewards, max_group_size
from common.specs import BrainParameters
from common.tensors import to_tensor
from common.trajectory import Trajectory
from processor.assembly import StepActions, TrajectoryAssembler
from processor.groups import SessionGroups, decode_groups
from processor.wire import TrajectorySize, decode_brain_info
from protos import pb
from tests.assembly_cases import actions_for
from tests.group_cases import (
    CONTINUOUS,
    FLUSH,
    GROUP_CASES,
    HYBRID,
    GroupCase,
    GRow,
    GStep,
    check_group,
    expected_by_key,
    group_brain_info,
    gstep,
)

MAX_BYTES = 4 << 20


def run_groups(case: GroupCase, params: BrainParameters) -> list[tuple[tuple[str, int, int], Trajectory]]:
    """Feed ``case``'s steps as the servicer does; returns ((session, agent, at), trajectory) in publication order."""
    assemblers: dict[str, TrajectoryAssembler] = {}
    groups: dict[str, SessionGroups] = {}
    published = []
    for k, st in enumerate(case.steps):
        assembler = assemblers.setdefault(st.session, TrajectoryAssembler(params, st.session, case.time_horizon))
        msg = group_brain_info(st, params)
        info = decode_brain_info(msg, params, st.session)
        decoded = None
        if msg.HasField("group_ids"):
            session_groups = groups.setdefault(st.session, SessionGroups(st.session))
            decoded = session_groups.decode(msg, info, params, case.time_horizon, MAX_BYTES)
        actions = StepActions(*actions_for(k, info.agent_ids.tolist(), params.action_spec))
        cut = assembler.add(info, actions)
        if st.session in groups and groups[st.session].active(params.behavior_name):
            groups[st.session].add(params.behavior_name, info, decoded, actions, cut)
        published += [((st.session, t.id.agent_id, k), t) for t in cut]
    for session, assembler in assemblers.items():
        flushed = assembler.flush()
        if session in groups:
            groups[session].flushed(params.behavior_name, flushed)
        published += [((session, t.id.agent_id, FLUSH), t) for t in flushed]
    return published


@pytest.mark.parametrize("params", [CONTINUOUS, HYBRID], ids=["continuous", "hybrid"])
@pytest.mark.parametrize("case", GROUP_CASES, ids=[c.name for c in GROUP_CASES])
def test_group_rule(case: GroupCase, params: BrainParameters) -> None:
    published = run_groups(case, params)
    want = expected_by_key(case)
    assert sorted(k for k, _ in published) == sorted(want), "published trajectories"
    for key, trajectory in published:
        check_group(trajectory, want[key], params)
        # The wire keeps every group field exactly.
        check_group(Trajectory.from_proto(trajectory.to_proto()), want[key], params)


def test_a_behavior_without_groups_pays_nothing() -> None:
    """No group_ids ever: no group data, and the wire message is byte for byte what it was."""
    assembler = TrajectoryAssembler(CONTINUOUS, "s", 5)
    for k, st in enumerate([gstep(GRow(1, 0.1), groups=False), gstep(GRow(1, 1.1, 1.0, True), groups=False)]):
        info = decode_brain_info(group_brain_info(st, CONTINUOUS), CONTINUOUS)
        cut = assembler.add(info, StepActions(*actions_for(k, [1], CONTINUOUS.action_spec)))
    (trajectory,) = cut
    assert trajectory.group is None
    msg = trajectory.to_proto()
    assert not msg.HasField("group_rewards") and not msg.groupmate_observations
    assert Trajectory.from_proto(msg).group is None


def _bad(rows: list[GRow], mutate: Callable[[pb.BrainInfo], object] | None = None, max_agents: int = 4) -> str:
    """The refusal of a BrainInfo of ``rows`` (``mutate`` changes the message first)."""
    st = gstep(*rows)
    msg = group_brain_info(st, CONTINUOUS)
    if mutate is not None:
        mutate(msg)
    info = decode_brain_info(msg, CONTINUOUS, "s")
    with pytest.raises(ProtocolError) as err:
        decode_groups(msg, info.agent_ids, "behavior 'Walker' (session s)", max_agents)
    return str(err.value)


def test_negative_group_id_names_the_agent() -> None:
    message = _bad([GRow(1, 0.1, group=1), GRow(5, 0.2, group=-3)])
    assert "group_ids of agent 5 is -3" in message


def test_non_finite_group_reward_names_the_agent() -> None:
    message = _bad([GRow(1, 0.1, group=1), GRow(6, 0.2, group=1, group_reward=float("nan"))])
    assert "group_rewards of agent 6 is NaN or Inf" in message


def test_group_over_the_cap_names_the_first_agent_over_it() -> None:
    message = _bad([GRow(a, 0.1, group=2) for a in range(10, 15)], max_agents=4)
    assert "agent 14 is agent 5 of group 2" in message and "at most 4 agents per group" in message


def test_a_group_id_over_int64_is_refused() -> None:
    message = _bad([GRow(1, 0.1, group=1), GRow(3, 0.2, group=1)], mutate=_set_ids(np.array([1, 2**64 - 1], np.uint64)))
    assert "group_ids of agent 3 is 18446744073709551615" in message


def _set_ids(values: np.ndarray) -> Callable[[pb.BrainInfo], object]:
    return lambda msg: to_tensor(values, msg.group_ids)


def test_one_field_without_the_other_is_refused() -> None:
    message = _bad([GRow(1, 0.1, group=1)], mutate=lambda m: m.ClearField("group_rewards"))
    assert "group_ids sent without group_rewards" in message


def test_wrong_shape_is_refused() -> None:
    message = _bad(
        [GRow(1, 0.1, group=1), GRow(2, 0.1, group=1)], mutate=lambda m: to_tensor(np.zeros(3, np.int32), m.group_ids)
    )
    assert "group_ids must be [2]" in message


def test_a_group_keeps_to_one_behavior_in_a_session() -> None:
    other = BrainParameters("Other", CONTINUOUS.observation_specs, CONTINUOUS.action_spec)
    groups = SessionGroups("s")
    for params, agent in ((CONTINUOUS, 1), (other, 8)):
        msg = group_brain_info(gstep(GRow(agent, 0.1, group=3)), params)
        msg.behavior_name = params.behavior_name
        info = decode_brain_info(msg, params, "s")
        if params is CONTINUOUS:
            groups.decode(msg, info, params, 5, MAX_BYTES)
            continue
        with pytest.raises(ProtocolError, match="agent 8 is in group 3, whose members have behavior 'Walker'"):
            groups.decode(msg, info, params, 5, MAX_BYTES)


def test_max_group_size_keeps_a_trajectory_inside_the_message_limit() -> None:
    bound = TrajectorySize.of(CONTINUOUS).at_most(1000)
    assert max_group_size(CONTINUOUS, bound, 1000, 64 << 20) == MAX_GROUP_AGENTS
    k = max_group_size(CONTINUOUS, bound, 1000, 200_000)
    assert 1 < k < MAX_GROUP_AGENTS
    # What K - 1 groupmates at every step cost on the wire stays under the limit, and one more would not.
    per_mate = 1000 * (8 + 8 + 5) + 8
    assert bound + (k - 1) * per_mate < 200_000 < bound + (k + 1) * per_mate
    assert max_group_size(CONTINUOUS, bound, 1000, bound) == 1


def test_ppo_and_sac_fold_the_group_reward_into_the_reward(caplog: pytest.LogCaptureFixture) -> None:
    (case,) = [c for c in GROUP_CASES if c.name == "two_agents_step_together"]
    trajectories = [t for _, t in run_groups(case, CONTINUOUS)]
    before = [t.rewards.copy() for t in trajectories]
    warn = WarnOnce()
    with caplog.at_level(logging.WARNING, logger="common.groups"):
        fold_group_rewards(trajectories[:1], "ppo", warn)
        fold_group_rewards(trajectories[1:], "ppo", warn)
    for b, t in zip(before, trajectories, strict=True):
        assert t.group is not None
        np.testing.assert_array_equal(t.rewards, b + t.group.group_rewards)
    assert sum("poca is the trainer for groups" in r.message for r in caplog.records) == 1


def test_the_sdk_sends_both_group_fields() -> None:
    from envclient.session import brain_info_message

    obs = [np.zeros((2, 2), np.float32)]
    msg = brain_info_message("Walker", np.array([1, 2]), obs, np.zeros(2), np.zeros(2, bool), group_ids=np.array([3, 0]))
    info = decode_brain_info(msg, CONTINUOUS, "s")
    groups = decode_groups(msg, info.agent_ids, "w", 4)
    assert groups is not None
    assert groups.group_ids.tolist() == [3, 0] and groups.group_rewards.tolist() == [0.0, 0.0]
    plain = brain_info_message("Walker", np.array([1, 2]), obs, np.zeros(2), np.zeros(2, bool))
    assert not plain.HasField("group_ids") and decode_groups(plain, info.agent_ids, "w", 4) is None


def reference_groupmates(steps: list[GStep]) -> dict[tuple[str, int], list[list[tuple[int, float, float, bool]]]]:
    """The rules restated per agent, naively: per (session, agent), each experience's groupmates as
    (agent, obs acted on, reward, done), in row order; episodes concatenated."""
    last: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, int], list[list[tuple[int, float, float, bool]]]] = {}
    for st in steps:
        having = [r for r in st.rows if (st.session, r.agent_id) in last and r.group > 0]
        for r in st.rows:
            key = (st.session, r.agent_id)
            if key not in last:
                continue
            mates = [
                (m.agent_id, last[(st.session, m.agent_id)], m.reward, m.done)
                for m in having
                if r.group > 0 and m.group == r.group and m.agent_id != r.agent_id and (r.done or not m.done)
            ]
            seen.setdefault(key, []).append(mates)
        for r in st.rows:
            if r.done:
                last.pop((st.session, r.agent_id), None)
            else:
                last[(st.session, r.agent_id)] = r.obs
    return seen


@pytest.mark.parametrize("seed", [0, 1])
def test_a_long_random_stream_matches_the_rules_restated(seed: int) -> None:
    """Hundreds of steps (the row log drops what no segment needs many times): agents skip steps, die early,
    change groups; every experience's groupmates are the rules' own."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(600):
        rows = []
        for agent in range(9):
            if rng.random() < 0.2:
                continue
            done = bool(rng.random() < 0.05)
            rows.append(
                GRow(agent, float(rng.integers(0, 1000)) / 8, float(rng.integers(-4, 5)), done, group=int(rng.integers(0, 3)))
            )
        steps.append(gstep(*rows))
    case = GroupCase("random", "", tuple(steps), (), time_horizon=16)
    published = run_groups(case, CONTINUOUS)
    got: dict[tuple[str, int], list[list[tuple[int, float, float, bool]]]] = {}
    for (session, agent, _), trajectory in sorted(published, key=lambda p: p[1].id.sequence):
        group = trajectory.group
        assert group is not None
        for step in range(trajectory.length):
            mates = []
            for j in np.flatnonzero(group.groupmate_status[step]).tolist():
                obs = float(group.groupmate_obs[0][step, j, 0])
                mates.append((obs, float(group.groupmate_rewards[step, j]), bool(group.groupmate_status[step, j] == 2)))
            got.setdefault((session, agent), []).append(mates)
    want = reference_groupmates(steps)
    assert sorted(got) == sorted(want)
    for key, experiences in want.items():
        assert [[m[1:] for m in step] for step in experiences] == got[key], key
