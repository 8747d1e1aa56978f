"""TrajectoryAssembler against the rule table of ``tests/assembly_cases.py`` (docs/architecture.md).

Each case's steps go straight into one assembler per session, with the deterministic actions of
``actions_for``; every session is flushed after the last step. What comes out is matched to the
case's hand-written expectations field by field.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from common.specs import BrainParameters
from common.trajectory import Trajectory
from processor.assembly import StepActions, TrajectoryAssembler
from processor.wire import DecodedBrainInfo, decode_brain_info
from tests.assembly_cases import (
    CASES,
    CONTINUOUS,
    FLUSH,
    START,
    Case,
    Expect,
    R,
    Step,
    actions_for,
    brain_info_proto,
    check_trajectory,
    implied_experiences,
    random_steps,
    step,
    step_arrays,
    with_images,
)

Published = list[tuple[int, Trajectory]]
"""(the step that cut it or FLUSH, trajectory) in publication order."""


def decoded(st: Step, params: BrainParameters) -> DecodedBrainInfo:
    return DecodedBrainInfo(behavior_name=params.behavior_name, **step_arrays(st, params)._asdict())


def run(
    steps: tuple[Step, ...], params: BrainParameters, time_horizon: int
) -> tuple[Published, dict[str, TrajectoryAssembler], list[int]]:
    """Feed ``steps`` to one assembler per session, then flush every session.

    Returns:
        What was published, the assemblers by session, and the step's session's live agents
        after each step.
    """
    assemblers: dict[str, TrajectoryAssembler] = {}
    published: Published = []
    live: list[int] = []
    for k, st in enumerate(steps):
        assembler = assemblers.setdefault(st.session, TrajectoryAssembler(params, st.session, time_horizon))
        info = decoded(st, params)
        actions = StepActions(*actions_for(k, info.agent_ids.tolist(), params.action_spec))
        published += [(k, t) for t in assembler.add(info, actions)]
        live.append(assembler.live_agents)
    for assembler in assemblers.values():
        published += [(FLUSH, t) for t in assembler.flush()]
    return published, assemblers, live


def _key(at: int, session: str, agent_id: int) -> tuple[int, str, int]:
    return (at, session, agent_id)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_assembly_rule(case: Case) -> None:
    check_case(case, case.params)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_assembly_rule_with_images_beside_the_vectors(case: Case) -> None:
    """Every rule again with a uint8 and a float32 image beside the case's vectors: each image's obs and
    next_obs are exactly the case's, in its dtype, and its T + 1 frames are one block (obs_frames)."""
    params = with_images(case.params)
    published = check_case(case, params)
    images = [i for i, spec in enumerate(params.observation_specs) if spec.is_image]
    for _, trajectory in published:
        rows = trajectory.to_rows()
        for i in images:
            block = trajectory.obs_frames[i]
            assert block.shape == (trajectory.length + 1, *params.observation_specs[i].shape)
            assert block.dtype == params.observation_specs[i].dtype
            assert np.shares_memory(trajectory.obs[i], block) and np.shares_memory(trajectory.next_obs[i], block)
            np.testing.assert_array_equal(block[-1], trajectory.next_obs[i], strict=True)
            # next_obs rows are a view of the block: every frame is held once.
            assert np.shares_memory(rows[f"next_obs_{i}"], block)
            np.testing.assert_array_equal(rows[f"next_obs_{i}"], block[1:], strict=True)


def check_case(case: Case, params: BrainParameters) -> Published:
    """Run ``case`` with ``params`` (the case's own or with more observations); check every trajectory and counter."""
    published, assemblers, live = run(case.steps, params, case.time_horizon)

    got = {_key(at, t.id.session_id, t.id.agent_id): t for at, t in published}
    want = {_key(e.at, e.session, e.agent_id): e for e in case.expected}
    assert len(got) == len(published), "one agent published twice at the same step"
    assert sorted(got) == sorted(want), "published (step, session, agent) differ from the case"
    for key, expected in want.items():
        check_trajectory(got[key], expected, params)

    # Sequence numbers: 0, 1, 2, ... per session, in publication order.
    sequences: dict[str, list[int]] = defaultdict(list)
    for _, t in published:
        sequences[t.id.session_id].append(t.id.sequence)
    for session, seqs in sequences.items():
        assert seqs == list(range(len(seqs))), f"session {session}: sequences {seqs}"

    # Counters, and nothing left behind.
    if case.live_agents is not None:
        assert tuple(live) == case.live_agents, "live agents after each step"
    flushed = [e for e in case.expected if e.at == FLUSH]
    assert sum(a.counters.experiences for a in assemblers.values()) == implied_experiences(case.steps)
    assert sum(a.counters.trajectories for a in assemblers.values()) == len(case.expected)
    assert sum(a.counters.flushed_trajectories for a in assemblers.values()) == len(flushed)
    assert sum(a.counters.flushed_experiences for a in assemblers.values()) == sum(len(e.actions) for e in flushed)
    assert all(a.live_agents == 0 for a in assemblers.values())
    return published


@pytest.mark.parametrize("images", [False, True], ids=["vectors", "with_images"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_steps_survive_the_wire(case: Case, images: bool) -> None:
    """The table's BrainInfo messages decode to exactly the arrays fed above (for integration reuse)."""
    params = with_images(case.params) if images else case.params
    for st in case.steps:
        got = decode_brain_info(brain_info_proto(st, params), params)
        want = decoded(st, params)
        np.testing.assert_array_equal(got.agent_ids, want.agent_ids, strict=True)
        for g, w in zip(got.observations, want.observations, strict=True):
            np.testing.assert_array_equal(g, w, strict=True)
        for name in ("rewards", "done", "max_reached"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), strict=True)
        if want.action_mask is None:
            assert got.action_mask is None
        else:
            assert got.action_mask is not None
            np.testing.assert_array_equal(got.action_mask, want.action_mask, strict=True)


def test_a_case_checks_every_field() -> None:
    """The checker itself: a trajectory differing from the case in one field is caught."""
    case = next(c for c in CASES if c.name == "cut_at_time_horizon")
    published, _, _ = run(case.steps, case.params, case.time_horizon)
    first = published[0][1]
    wrong = Expect(
        at=2, agent_id=1, obs=(1.0, 1.1), actions=(100, 101), prev_actions=(100, 100), rewards=(0.5, 1.0), next_obs=1.2
    )
    with pytest.raises(AssertionError, match="prev_continuous_actions"):
        check_trajectory(first, wrong, case.params)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_stream_conserves_experiences(seed: int) -> None:
    """Every experience the rows imply is published exactly once, cut or flushed, in order per agent."""
    steps = random_steps(seed)
    published, assemblers, _ = run(steps, CONTINUOUS, time_horizon=3)

    trajectories = [t for _, t in published]
    assert sum(t.length for t in trajectories) == implied_experiences(steps)
    assert sum(a.counters.experiences for a in assemblers.values()) == implied_experiences(steps)
    flushed = [t for at, t in published if at == FLUSH]
    assert sum(a.counters.flushed_experiences for a in assemblers.values()) == sum(t.length for t in flushed)
    assert all(a.live_agents == 0 for a in assemblers.values())
    assert len({t.id for t in trajectories}) == len(trajectories), "trajectory ids are unique"
    assert all(1 <= t.length <= 3 for t in trajectories)

    # Per agent, the trajectories laid end to end give back its rows' rewards and obs.
    rows_of: dict[tuple[str, int], list[tuple[float, float, bool]]] = defaultdict(list)
    for st in steps:
        for row in st.rows:
            rows_of[(st.session, row.agent_id)].append((row.obs, row.reward, row.done))
    for (session, agent), rows in rows_of.items():
        mine = [t for t in trajectories if (t.id.session_id, t.id.agent_id) == (session, agent)]
        want_rewards, want_obs, want_ends = [], [], []
        carried = False
        for (obs, _, _), (_, reward, done) in zip([(np.nan, 0.0, True), *rows[:-1]], rows, strict=True):
            if carried:
                want_obs.append(obs)
                want_rewards.append(reward)
                want_ends.append(done)
            carried = not done
        np.testing.assert_array_equal(
            np.concatenate([t.rewards for t in mine]) if mine else np.zeros(0, np.float32),
            np.array(want_rewards, dtype=np.float32),
            err_msg=f"session {session} agent {agent}: rewards",
        )
        got_obs = np.concatenate([t.obs[0][:, 0] for t in mine]) if mine else np.zeros(0, np.float32)
        np.testing.assert_array_equal(got_obs, np.array(want_obs, dtype=np.float32), err_msg=f"{session}/{agent}: obs")
        assert sum(t.done_reached for t in mine) == sum(want_ends)

        # Episode stats: the ending segment sums every segment since the previous ending.
        length, reward = 0, 0.0
        for t in mine:
            length, reward = length + t.length, reward + float(t.rewards.sum())
            if t.done_reached:
                assert (t.episode_length, t.episode_reward) == (length, pytest.approx(reward))
                length, reward = 0, 0.0
            else:
                assert t.episode_length is None and t.episode_reward is None


def test_empty_step_changes_nothing() -> None:
    """A BrainInfo with no rows: every agent is absent and keeps its state."""
    assembler = TrajectoryAssembler(CONTINUOUS, "s", time_horizon=5)
    spec = CONTINUOUS.action_spec
    assembler.add(decoded(step(R(1, 1.0)), CONTINUOUS), StepActions(*actions_for(0, [1], spec)))

    assert assembler.add(decoded(step(), CONTINUOUS), StepActions(*actions_for(1, [], spec))) == []
    assert assembler.live_agents == 1
    (trajectory,) = assembler.add(
        decoded(step(R(1, 1.2, 1.0, done=True)), CONTINUOUS), StepActions(*actions_for(2, [1], spec))
    )
    check_trajectory(
        trajectory,
        Expect(
            at=2,
            agent_id=1,
            obs=(1.0,),
            actions=(100,),
            prev_actions=(START,),
            rewards=(1.0,),
            next_obs=1.2,
            done_reached=True,
            episode=(1.0, 1),
        ),
        CONTINUOUS,
    )


def test_time_horizon_must_be_positive() -> None:
    with pytest.raises(ValueError, match="time_horizon"):
        TrajectoryAssembler(CONTINUOUS, "s", 0)


def test_the_store_is_a_processing_buffer_with_the_seed_api() -> None:
    """The assembler's store is the ProcessingBuffer: per-agent AgentBuffers under the update-buffer
    keys, and the seed's ``append_to_update_buffer`` moves an agent's held steps into an update buffer."""
    from common.buffer import AgentBuffer
    from processor.processing_buffer import ProcessingBuffer

    assembler = TrajectoryAssembler(CONTINUOUS, "s", time_horizon=5)
    spec = CONTINUOUS.action_spec
    for k, obs in enumerate((1.0, 1.1, 1.2)):
        assembler.add(decoded(step(R(1, obs, 0.5), R(2, -obs, 0.25)), CONTINUOUS), StepActions(*actions_for(k, [1, 2], spec)))
    store = assembler.buffer
    assert isinstance(store, ProcessingBuffer) and list(store) == [1, 2]
    agent = store[1]
    assert agent.num_experiences == 2 and agent.check_length()
    np.testing.assert_array_equal(agent["obs_0"].data[:, 0], np.array([1.0, 1.1], np.float32))
    np.testing.assert_array_equal(agent["rewards"].data, np.array([0.5, 0.5], np.float32))
    np.testing.assert_array_equal(agent["policy_version"].data, [0, 1])
    update = AgentBuffer()
    store.append_all_agent_batch_to_update_buffer(update, key_list=["obs_0", "rewards"])
    assert update.num_experiences == 4
    store.reset_local_buffers()
    assert [store[a].num_experiences for a in store] == [0, 0] and assembler.live_agents == 2


def test_a_session_budget_refuses_new_agents_past_its_limit_and_changes_nothing() -> None:
    from common.errors import ResourceLimitError
    from processor.assembly import AgentBudget

    budget = AgentBudget(3)
    walker = TrajectoryAssembler(CONTINUOUS, "s", time_horizon=5, budget=budget)
    other = TrajectoryAssembler(CONTINUOUS, "s", time_horizon=5, budget=budget)  # another behavior of the session
    spec = CONTINUOUS.action_spec
    walker.add(decoded(step(R(1, 1.0), R(2, 1.0)), CONTINUOUS), StepActions(*actions_for(0, [1, 2], spec)))
    with pytest.raises(ResourceLimitError, match="2 new agents to the 2 the session holds; at most 3"):
        other.add(decoded(step(R(7, 1.0), R(8, 1.0)), CONTINUOUS), StepActions(*actions_for(1, [7, 8], spec)))
    assert other.live_agents == 0 and budget.live == 2
    other.add(decoded(step(R(7, 1.0)), CONTINUOUS), StepActions(*actions_for(1, [7], spec)))
    walker.add(decoded(step(R(1, 1.1, done=True)), CONTINUOUS), StepActions(*actions_for(2, [1], spec)))  # frees one
    assert budget.live == 2
    walker.add(decoded(step(R(3, 1.0)), CONTINUOUS), StepActions(*actions_for(3, [3], spec)))
    other.flush()
    assert budget.live == 2 and walker.live_agents == 2


def test_flush_batches_bound_the_work_between_yields() -> None:
    assembler = TrajectoryAssembler(CONTINUOUS, "s", time_horizon=5)
    ids = list(range(10))
    spec = CONTINUOUS.action_spec
    for k in range(2):
        assembler.add(decoded(step(*(R(a, 1.0) for a in ids)), CONTINUOUS), StepActions(*actions_for(k, ids, spec)))
    batches = list(assembler.flush_batches(agents_per_batch=4))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [t.id.agent_id for b in batches for t in b] == ids
    assert all(t.interrupted and t.length == 1 for b in batches for t in b)
    assert assembler.live_agents == 0


@pytest.mark.parametrize("cap", ["max_agents_per_brain_info", "max_agents_per_session"])
def test_agent_caps_must_be_positive(cap: str) -> None:
    from common.errors import ConfigError
    from processor.behaviors import ProcessorSettings

    with pytest.raises(ConfigError, match=f"{cap} must be >= 1, got 0"):
        ProcessorSettings(**{cap: 0})  # type: ignore[arg-type]
