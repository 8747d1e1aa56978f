"""The group-assembly rules of ``processor/groups.py`` as a table: BrainInfo steps in, group fields out.

The style of ``tests/assembly_cases.py`` (whose action codes and observation vectors this reuses):
``tests/unit/test_groups.py`` feeds the steps to a ``TrajectoryAssembler`` and a ``SessionGroups``
per session; ``tests/integration/test_groups_server.py`` sends the very same steps through the real
gRPC server and checks what the trajectory topic delivers against the same expectations.

How to read a case:

* A ``GRow`` is ``(agent_id, obs, reward, done, max_reached, group, group_reward)``.
* The processor's answer to step ``k`` for agent ``a`` has the action code ``100 * a + k``.
* ``expected``: one ``GExpect`` per published trajectory, by (session, agent, the step that cut it
  or ``FLUSH``). ``mates`` has one entry per experience: the groupmates that experience sees, each
  ``Mate(agent, obs, code, reward, status)``; ``obs`` and ``code`` are what the groupmate acted on
  and did (its previous row), ``reward`` and ``status`` (``ACTING``/``DONE``) are of this step.
  ``next_mates`` are ``(agent, obs)`` after the trajectory's last experience.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np

from common.groups import ACTING, DONE
from common.specs import BrainParameters
from common.tensors import to_tensor
from common.trajectory import Trajectory
from protos import pb
from tests.assembly_cases import (
    CONTINUOUS,
    FLUSH,
    HYBRID,
    Row,
    Step,
    brain_info_proto,
    continuous_action,
    discrete_action,
    obs_vector,
)

__all__ = ["CONTINUOUS", "FLUSH", "GROUP_CASES", "HYBRID"]

A: Final = ACTING
D: Final = DONE


class GRow(NamedTuple):
    agent_id: int
    obs: float
    reward: float = 0.0
    done: bool = False
    max_reached: bool = False
    group: int = 0
    group_reward: float = 0.0


@dataclass(frozen=True)
class GStep:
    rows: tuple[GRow, ...]
    session: str = "s"
    groups: bool = True
    """False: the BrainInfo sends no group fields at all."""


def gstep(*rows: GRow, session: str = "s", groups: bool = True) -> GStep:
    return GStep(tuple(rows), session, groups)


class Mate(NamedTuple):
    agent_id: int
    obs: float
    code: int
    reward: float
    status: int


@dataclass(frozen=True)
class GExpect:
    at: int
    agent_id: int
    length: int
    group_rewards: tuple[float, ...]
    mates: tuple[tuple[Mate, ...], ...]
    next_mates: tuple[tuple[int, float], ...] = ()
    done_reached: bool = False
    interrupted: bool = False
    all_groupmates_done: bool = False
    session: str = "s"

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.session, self.agent_id, self.at)


@dataclass(frozen=True)
class GroupCase:
    name: str
    rule: str
    steps: tuple[GStep, ...]
    expected: tuple[GExpect, ...]
    time_horizon: int = 5
    params: BrainParameters = CONTINUOUS


def plain_step(st: GStep) -> Step:
    return Step(tuple(Row(r.agent_id, r.obs, r.reward, r.done, r.max_reached) for r in st.rows), session=st.session)


def group_brain_info(st: GStep, params: BrainParameters) -> pb.BrainInfo:
    """The BrainInfo for ``st``: ``assembly_cases.brain_info_proto`` plus the group fields."""
    msg = brain_info_proto(plain_step(st), params)
    if st.groups:
        to_tensor(np.array([r.group for r in st.rows], dtype=np.int32), msg.group_ids)
        to_tensor(np.array([r.group_reward for r in st.rows], dtype=np.float32), msg.group_rewards)
    return msg


P, Q = 7, 9  # group ids

GROUP_CASES: Final = (
    GroupCase(
        "two_agents_step_together",
        "each experience sees its groupmate's obs, action, reward and status at that step; the group reward rides along",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P)),
            gstep(GRow(1, 1.1, 1.0, group=P, group_reward=0.5), GRow(2, 1.2, 2.0, group=P, group_reward=0.5)),
            gstep(GRow(1, 2.1, 3.0, group=P), GRow(2, 2.2, 4.0, group=P, group_reward=-1.0)),
        ),
        (
            GExpect(FLUSH, 1, 2, (0.5, 0.0), ((Mate(2, 0.2, 200, 2.0, A),), (Mate(2, 1.2, 201, 4.0, A),)), ((2, 2.2),)),
            GExpect(FLUSH, 2, 2, (0.5, -1.0), ((Mate(1, 0.1, 100, 1.0, A),), (Mate(1, 1.1, 101, 3.0, A),)), ((1, 2.1),)),
        ),
    ),
    GroupCase(
        "an_agent_joins",
        "a groupmate appears from its first experience on, not at its first sighting",
        (
            gstep(GRow(1, 0.1, group=P)),
            gstep(GRow(1, 1.1, 1.0, group=P), GRow(3, 1.3, group=P)),
            gstep(GRow(1, 2.1, 2.0, group=P), GRow(3, 2.3, 5.0, group=P)),
        ),
        (
            GExpect(FLUSH, 1, 2, (0.0, 0.0), ((), (Mate(3, 1.3, 301, 5.0, A),)), ((3, 2.3),)),
            GExpect(FLUSH, 3, 1, (0.0,), ((Mate(1, 1.1, 101, 2.0, A),),), ((1, 2.1),)),
        ),
    ),
    GroupCase(
        "early_death",
        "a done agent sees its ongoing groupmate (terminal steps first) and is not all-done; the survivor no longer sees it",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P)),
            gstep(GRow(1, 1.1, 1.0, group=P), GRow(2, 1.2, -1.0, True, group=P)),
            gstep(GRow(1, 2.1, 2.0, group=P)),
        ),
        (
            GExpect(1, 2, 1, (0.0,), ((Mate(1, 0.1, 100, 1.0, A),),), ((1, 1.1),), done_reached=True),
            GExpect(FLUSH, 1, 2, (0.0, 0.0), ((), ()), ()),
        ),
    ),
    GroupCase(
        "an_agent_leaves_its_group",
        "an agent whose group id turns 0 is nobody's groupmate from that step",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P)),
            gstep(GRow(1, 1.1, group=P), GRow(2, 1.2, group=P)),
            gstep(GRow(1, 2.1, group=P), GRow(2, 2.2, group=0)),
        ),
        (
            GExpect(FLUSH, 1, 2, (0.0, 0.0), ((Mate(2, 0.2, 200, 0.0, A),), ()), ()),
            GExpect(FLUSH, 2, 2, (0.0, 0.0), ((Mate(1, 0.1, 100, 0.0, A),), ()), ()),
        ),
    ),
    GroupCase(
        "group_ends",
        "every member done at one step: each sees the others done, and all_groupmates_done holds",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P)),
            gstep(GRow(1, 1.1, 1.0, True, group=P, group_reward=3.0), GRow(2, 1.2, 2.0, True, group=P, group_reward=3.0)),
        ),
        (
            GExpect(1, 1, 1, (3.0,), ((Mate(2, 0.2, 200, 2.0, D),),), ((2, 1.2),), True, all_groupmates_done=True),
            GExpect(1, 2, 1, (3.0,), ((Mate(1, 0.1, 100, 1.0, D),),), ((1, 1.1),), True, all_groupmates_done=True),
        ),
    ),
    GroupCase(
        "group_interrupted",
        "every member hits max_reached: the same statuses, but interrupted (a trainer bootstraps)",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P)),
            gstep(GRow(1, 1.1, 1.0, True, True, group=P), GRow(2, 1.2, 2.0, True, True, group=P)),
        ),
        (
            GExpect(1, 1, 1, (0.0,), ((Mate(2, 0.2, 200, 2.0, D),),), ((2, 1.2),), True, True, True),
            GExpect(1, 2, 1, (0.0,), ((Mate(1, 0.1, 100, 1.0, D),),), ((1, 1.1),), True, True, True),
        ),
    ),
    GroupCase(
        "two_groups_in_one_session",
        "groupmates are the members of the agent's own group only",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=Q), GRow(3, 0.3, group=P), GRow(4, 0.4, group=Q)),
            gstep(
                GRow(1, 1.1, 1.0, group=P), GRow(2, 1.2, 2.0, group=Q), GRow(3, 1.3, 3.0, group=P), GRow(4, 1.4, 4.0, group=Q)
            ),
        ),
        (
            GExpect(FLUSH, 1, 1, (0.0,), ((Mate(3, 0.3, 300, 3.0, A),),), ((3, 1.3),)),
            GExpect(FLUSH, 2, 1, (0.0,), ((Mate(4, 0.4, 400, 4.0, A),),), ((4, 1.4),)),
            GExpect(FLUSH, 3, 1, (0.0,), ((Mate(1, 0.1, 100, 1.0, A),),), ((1, 1.1),)),
            GExpect(FLUSH, 4, 1, (0.0,), ((Mate(2, 0.2, 200, 2.0, A),),), ((2, 1.2),)),
        ),
    ),
    GroupCase(
        "colliding_ids_across_sessions",
        "group and agent ids are scoped by session: the same ids in two sessions are two groups",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P), session="a"),
            gstep(GRow(1, 0.5, group=P), GRow(2, 0.6, group=P), session="b"),
            gstep(GRow(1, 1.1, 1.0, group=P), GRow(2, 1.2, 2.0, group=P), session="a"),
            gstep(GRow(1, 1.5, 5.0, group=P), GRow(2, 1.6, 6.0, group=P), session="b"),
        ),
        (
            GExpect(FLUSH, 1, 1, (0.0,), ((Mate(2, 0.2, 200, 2.0, A),),), ((2, 1.2),), session="a"),
            GExpect(FLUSH, 2, 1, (0.0,), ((Mate(1, 0.1, 100, 1.0, A),),), ((1, 1.1),), session="a"),
            GExpect(FLUSH, 1, 1, (0.0,), ((Mate(2, 0.6, 201, 6.0, A),),), ((2, 1.6),), session="b"),
            GExpect(FLUSH, 2, 1, (0.0,), ((Mate(1, 0.5, 101, 5.0, A),),), ((1, 1.5),), session="b"),
        ),
    ),
    GroupCase(
        "cut_at_time_horizon",
        "a time_horizon cut takes the groupmates' current obs as next groupmate obs; the next segment starts empty",
        (
            gstep(GRow(1, 0.1, group=P), GRow(2, 0.2, group=P)),
            gstep(GRow(1, 1.1, 1.0, group=P), GRow(2, 1.2, 2.0, group=P)),
            gstep(GRow(1, 2.1, 3.0, group=P), GRow(2, 2.2, 4.0, group=P)),
        ),
        (
            GExpect(1, 1, 1, (0.0,), ((Mate(2, 0.2, 200, 2.0, A),),), ((2, 1.2),)),
            GExpect(1, 2, 1, (0.0,), ((Mate(1, 0.1, 100, 1.0, A),),), ((1, 1.1),)),
            GExpect(2, 1, 1, (0.0,), ((Mate(2, 1.2, 201, 4.0, A),),), ((2, 2.2),)),
            GExpect(2, 2, 1, (0.0,), ((Mate(1, 1.1, 101, 3.0, A),),), ((1, 2.1),)),
        ),
        time_horizon=1,
    ),
    GroupCase(
        "groups_start_late",
        "experiences before a session's first group_ids have no groupmates and no group reward",
        (
            gstep(GRow(1, 0.1), GRow(2, 0.2), groups=False),
            gstep(GRow(1, 1.1, 1.0, group=P), GRow(2, 1.2, 2.0, group=P)),
            gstep(GRow(1, 2.1, 3.0, group=P, group_reward=1.0), GRow(2, 2.2, 4.0, group=P, group_reward=1.0)),
        ),
        (
            GExpect(FLUSH, 1, 2, (0.0, 1.0), ((), (Mate(2, 1.2, 201, 4.0, A),)), ((2, 2.2),)),
            GExpect(FLUSH, 2, 2, (0.0, 1.0), ((), (Mate(1, 1.1, 101, 3.0, A),)), ((1, 2.1),)),
        ),
    ),
)


def check_group(
    actual: Trajectory,
    want: GExpect,
    params: BrainParameters,
    action_of: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None,
) -> None:
    """``actual``'s group fields against ``want``, exactly.

    Args:
        action_of: code -> (continuous [C], discrete [B]): the action a code stands for; by default the
            deterministic ``assembly_cases`` actions (through the server: the actions the client got).
    """
    label = f"session {want.session} agent {want.agent_id} at {want.at}"
    spec = params.action_spec
    if action_of is None:

        def action_of(code: int) -> tuple[np.ndarray, np.ndarray]:
            return continuous_action(code, spec.continuous_size), discrete_action(code, spec.discrete_branches)

    assert actual.length == want.length, label
    interrupted = want.interrupted or want.at == FLUSH  # a flush cuts as interrupted
    assert (actual.done_reached, actual.interrupted) == (want.done_reached, interrupted), label
    group = actual.group
    assert group is not None, f"{label}: no group data"
    # ML-Agents' all_group_dones_reached: every groupmate at the last step done, so True with none there.
    all_done = all(m.status == DONE for m in want.mates[-1]) if want.mates else True
    assert not want.all_groupmates_done or all_done, f"{label}: the case contradicts itself"
    assert group.all_groupmates_done == all_done, label
    np.testing.assert_array_equal(group.group_rewards, np.array(want.group_rewards, np.float32), err_msg=label)
    g = max((len(m) for m in want.mates), default=0)
    assert group.groupmates == g, f"{label}: {group.groupmates} groupmate slots, want {g}"
    t = want.length
    status = np.zeros((t, g), np.uint8)
    rewards = np.zeros((t, g), np.float32)
    cont = np.zeros((t, g, spec.continuous_size), np.float32)
    disc = np.zeros((t, g, spec.num_branches), np.int32)
    obs = [np.zeros((t, g, *s.shape), s.dtype) for s in params.observation_specs]
    for step, mates in enumerate(want.mates):
        for j, mate in enumerate(mates):
            status[step, j], rewards[step, j] = mate.status, mate.reward
            cont[step, j], disc[step, j] = action_of(mate.code)
            for i, s in enumerate(params.observation_specs):
                obs[i][step, j] = obs_vector(mate.obs, i, s.shape, s.dtype)
    np.testing.assert_array_equal(group.groupmate_status, status, err_msg=f"{label}: status")
    np.testing.assert_array_equal(group.groupmate_rewards, rewards, err_msg=f"{label}: rewards")
    np.testing.assert_array_equal(group.groupmate_continuous_actions, cont, err_msg=f"{label}: continuous actions")
    np.testing.assert_array_equal(group.groupmate_discrete_actions, disc, err_msg=f"{label}: discrete actions")
    for i, s in enumerate(params.observation_specs):
        np.testing.assert_array_equal(group.groupmate_obs[i], obs[i], err_msg=f"{label}: obs[{i}]")
        want_next = np.array([obs_vector(v, i, s.shape, s.dtype) for _, v in want.next_mates], s.dtype).reshape(-1, *s.shape)
        np.testing.assert_array_equal(group.next_groupmate_obs[i], want_next, err_msg=f"{label}: next obs[{i}]")


def expected_by_key(case: GroupCase) -> dict[tuple[str, int, int], GExpect]:
    keys = [e.key for e in case.expected]
    assert len(set(keys)) == len(keys), f"{case.name}: two expectations share a key"
    return {e.key: e for e in case.expected}
