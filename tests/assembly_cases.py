"""The trajectory-assembly rules of docs/architecture.md as a table: BrainInfo steps in, Trajectories out.

Independent of how steps are delivered: ``tests/unit/test_assembly.py`` feeds the steps straight
into a ``TrajectoryAssembler``; an integration test can send the very same steps through the real
gRPC server (``brain_info_proto``) and check what comes out of the trajectory topic with the same
``check_trajectory``.

How to read a case:

* ``steps``: one ``Step`` per BrainInfo, in order. A ``Row`` is ``(agent_id, obs, reward, done,
  max_reached)``; ``obs`` is one number, spread over each observation by ``obs_vector``.
  ``masks``, when given, holds one mask per row (1 = allowed). Each step belongs to a session
  (``"s"`` unless named); every session ends (is flushed) after the last step.
* The processor's answer to step ``k`` is deterministic: agent ``a`` gets the action with code
  ``100 * a + k`` (``action_code``), chosen by policy version ``k``. An action code thus says who
  acted and when, so a pairing error shows up as a wrong number.
* ``expected``: every Trajectory the case publishes, written out by hand. ``at`` is the step whose
  BrainInfo cut it (``FLUSH``: the session end). ``obs``/``actions``/``prev_actions``/``rewards``
  have one entry per experience; ``START`` in ``prev_actions`` means zeros (an episode's first
  experience). The policy version of each experience is the step its action was chosen at,
  ``code % 100``, and ``done`` is True on the last experience only when ``done_reached``.

Shapes: ``N`` rows in a step, ``T`` experiences in a trajectory, ``C`` continuous action size,
``B`` discrete branches, ``M = sum(branches)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
import pytest

from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_tensor
from common.trajectory import Trajectory
from protos import pb

F32: Final = np.dtype(np.float32)
U8: Final = np.dtype(np.uint8)

#: One float32 vector observation; two continuous action dimensions; no discrete branches.
CONTINUOUS: Final = BrainParameters("Walker", (ObservationSpec((2,), F32),), ActionSpec(2))
#: One continuous dimension plus two discrete branches of sizes 3 and 2 (mask width 5).
HYBRID: Final = BrainParameters("Gridder", (ObservationSpec((2,), F32),), ActionSpec(1, (3, 2)))
#: Two observations; discrete only (one branch of size 2, so C = 0).
DISCRETE: Final = BrainParameters("Chooser", (ObservationSpec((1,), F32), ObservationSpec((3,), F32)), ActionSpec(0, (2,)))

START: Final = -1
"""In ``Expect.prev_actions``: zeros, as on an episode's first experience."""
FLUSH: Final = -1
"""In ``Expect.at``: published by the session-end flush rather than by a step."""

Mask = tuple[int, ...]


class Row(NamedTuple):
    """One agent's row in a BrainInfo."""

    agent_id: int
    obs: float
    reward: float = 0.0
    done: bool = False
    max_reached: bool = False


@dataclass(frozen=True)
class Step:
    """One BrainInfo: rows, optionally one action mask per row, and the session that sends it."""

    rows: tuple[Row, ...]
    masks: tuple[Mask, ...] | None = None
    session: str = "s"


def step(*rows: Row, masks: Sequence[Mask] | None = None, session: str = "s") -> Step:
    return Step(tuple(rows), None if masks is None else tuple(masks), session)


@dataclass(frozen=True)
class Expect:
    """One expected Trajectory, field by field (module docstring)."""

    at: int
    agent_id: int
    obs: tuple[float, ...]
    actions: tuple[int, ...]
    prev_actions: tuple[int, ...]
    rewards: tuple[float, ...]
    next_obs: float
    done_reached: bool = False
    interrupted: bool = False
    episode: tuple[float, int] | None = None
    """(episode_reward, episode_length) on the segment that ends an episode, else None."""
    masks: tuple[Mask, ...] | None = None
    """None: no mask was sent, so all allowed (or no action_mask at all when there are no branches)."""
    session: str = "s"

    @property
    def label(self) -> str:
        return f"session {self.session} agent {self.agent_id} ({'flush' if self.at == FLUSH else f'step {self.at}'})"


@dataclass(frozen=True)
class Case:
    """One rule of docs/architecture.md's "Trajectory assembly rules"."""

    name: str
    rule: str
    steps: tuple[Step, ...]
    expected: tuple[Expect, ...]
    params: BrainParameters = CONTINUOUS
    time_horizon: int = 5
    live_agents: tuple[int, ...] | None = None
    """Agents whose state the step's session holds after each step (in-process check only)."""


# -- the processor's deterministic answers -------------------------------------------------------


def action_code(agent_id: int, step_index: int) -> int:
    """The number that identifies the action returned to ``agent_id`` at step ``step_index``."""
    return 100 * agent_id + step_index


def policy_version_of(code: int) -> int:
    """The version that chose action ``code``: the step it was chosen at."""
    return code % 100


def continuous_action(code: int, size: int) -> np.ndarray:
    """float32 [C]: ``code, code + 0.25, ...``."""
    return np.array([code + 0.25 * j for j in range(size)], dtype=np.float32)


def continuous_log_prob(code: int, size: int) -> np.ndarray:
    """float32 [C]."""
    return -continuous_action(code, size) / np.float32(1000)


def discrete_action(code: int, branches: tuple[int, ...]) -> np.ndarray:
    """int32 [B]: a valid choice per branch (``code % size``)."""
    return np.array([code % size for size in branches], dtype=np.int32).reshape(len(branches))


def discrete_log_prob(code: int, num_branches: int) -> np.ndarray:
    """float32 [B]: ``-code / 1000 - b`` for branch ``b``."""
    return np.array([-code / 1000 - b for b in range(num_branches)], dtype=np.float32).reshape(num_branches)


class ActionArrays(NamedTuple):
    """What the processor returns for one step; the field order of ``processor.assembly.StepActions``."""

    continuous_actions: np.ndarray
    """float32 [N, C]."""
    discrete_actions: np.ndarray
    """int32 [N, B]."""
    continuous_log_probs: np.ndarray
    """float32 [N, C]."""
    discrete_log_probs: np.ndarray
    """float32 [N, B]."""
    policy_version: int


def actions_for(step_index: int, agent_ids: Sequence[int], spec: ActionSpec) -> ActionArrays:
    """The answer to step ``step_index`` for ``agent_ids`` (rows in order)."""
    codes = [action_code(a, step_index) for a in agent_ids]
    c, b, n = spec.continuous_size, spec.num_branches, len(codes)
    return ActionArrays(
        continuous_actions=np.array([continuous_action(x, c) for x in codes], dtype=np.float32).reshape(n, c),
        discrete_actions=np.array([discrete_action(x, spec.discrete_branches) for x in codes], dtype=np.int32).reshape(n, b),
        continuous_log_probs=np.array([continuous_log_prob(x, c) for x in codes], dtype=np.float32).reshape(n, c),
        discrete_log_probs=np.array([discrete_log_prob(x, b) for x in codes], dtype=np.float32).reshape(n, b),
        policy_version=step_index,
    )


# -- steps as arrays and as messages -------------------------------------------------------------


def obs_vector(value: float, spec_index: int, shape: tuple[int, ...], dtype: np.dtype = F32) -> np.ndarray:
    """``dtype`` ``shape``: observation ``spec_index`` of a row whose obs is ``value``.

    A vector: ``value * (spec_index + 1)`` with alternating signs, so mixing up specs or columns
    shows. An image ``[H, W, C]``: every pixel differs (a ramp over its position) and is shifted by
    ``round(10 * value)`` and the spec index, so a pixel from another row, step, spec or position shows.
    """
    if len(shape) == 3:
        ramp = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        shifted = ramp * 7 + round(10 * value) * 13 + spec_index * 101
        return (shifted % 251).astype(dtype) if dtype == U8 else (shifted / 8).astype(dtype)
    (size,) = shape
    return np.array([value * (spec_index + 1) * (-1) ** j for j in range(size)], dtype=np.float32)


def with_images(params: BrainParameters) -> BrainParameters:
    """``params`` with two images beside its observations: a uint8 ``[4, 3, 2]`` and a float32 ``[2, 2, 3]``."""
    images = (ObservationSpec((4, 3, 2), U8, "camera"), ObservationSpec((2, 2, 3), F32, "depth"))
    return BrainParameters(params.behavior_name, (*params.observation_specs, *images), params.action_spec)


class StepArrays(NamedTuple):
    """A step as the decoder produces it (the fields of ``processor.wire.DecodedBrainInfo``)."""

    agent_ids: np.ndarray
    """int64 [N]."""
    observations: list[np.ndarray]
    """[N, *shape] of the spec's dtype per observation spec."""
    rewards: np.ndarray
    """float32 [N]."""
    done: np.ndarray
    """bool [N]."""
    max_reached: np.ndarray
    """bool [N]."""
    action_mask: np.ndarray | None
    """bool [N, M], None when the step sends none."""


def step_arrays(st: Step, params: BrainParameters) -> StepArrays:
    n = len(st.rows)
    observations = [
        np.array([obs_vector(r.obs, i, spec.shape, spec.dtype) for r in st.rows], dtype=spec.dtype).reshape(n, *spec.shape)
        for i, spec in enumerate(params.observation_specs)
    ]
    mask = None if st.masks is None else np.array(st.masks, dtype=bool).reshape(n, params.action_spec.mask_width)
    return StepArrays(
        agent_ids=np.array([r.agent_id for r in st.rows], dtype=np.int64),
        observations=observations,
        rewards=np.array([r.reward for r in st.rows], dtype=np.float32),
        done=np.array([r.done for r in st.rows], dtype=bool),
        max_reached=np.array([r.max_reached for r in st.rows], dtype=bool),
        action_mask=mask,
    )


def brain_info_proto(st: Step, params: BrainParameters) -> pb.BrainInfo:
    """The BrainInfo an env client sends for ``st`` (masks as uint8, 1 = allowed)."""
    arrays = step_arrays(st, params)
    msg = pb.BrainInfo(behavior_name=params.behavior_name)
    to_tensor(arrays.agent_ids, msg.agent_ids)
    for obs in arrays.observations:
        to_tensor(obs, msg.observations.add())
    to_tensor(arrays.rewards, msg.rewards)
    to_tensor(arrays.done, msg.done)
    to_tensor(arrays.max_reached, msg.max_reached)
    if arrays.action_mask is not None:
        to_tensor(arrays.action_mask.astype(np.uint8), msg.action_mask)
    return msg


def implied_experiences(steps: Sequence[Step]) -> int:
    """Experiences the rows imply: every row of an agent that had a previous row since its last done."""
    carried: set[tuple[str, int]] = set()
    count = 0
    for st in steps:
        for row in st.rows:
            key = (st.session, row.agent_id)
            count += key in carried
            if row.done:
                carried.discard(key)
            else:
                carried.add(key)
    return count


def random_steps(
    seed: int, num_steps: int = 300, num_agents: int = 12, sessions: Sequence[str] = ("a", "b")
) -> tuple[Step, ...]:
    """A seeded multi-agent, multi-session stream: agents skip steps, end episodes, hit time limits."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(num_steps):
        session = str(rng.choice(sessions))
        rows = []
        for agent in rng.permutation(num_agents):
            if rng.random() < 0.3:
                continue  # absent from this BrainInfo
            done = bool(rng.random() < 0.1)
            rows.append(
                Row(int(agent), float(rng.normal()), float(rng.integers(-4, 5)) / 4, done, done and bool(rng.random() < 0.5))
            )
        steps.append(Step(tuple(rows), session=session))
    return tuple(steps)


# -- checking a published Trajectory -------------------------------------------------------------


def expected_arrays(want: Expect, params: BrainParameters) -> dict[str, np.ndarray | None]:
    """Every array field of the expected Trajectory; ``obs[i]`` / ``next_obs[i]`` per observation."""
    spec = params.action_spec
    c, b, t = spec.continuous_size, spec.num_branches, len(want.actions)
    if not len(want.obs) == len(want.prev_actions) == len(want.rewards) == t:
        raise ValueError(f"{want.label}: obs, actions, prev_actions and rewards must have one entry per experience")
    out: dict[str, np.ndarray | None] = {}
    for i, obs_spec in enumerate(params.observation_specs):
        shape, dtype = obs_spec.shape, obs_spec.dtype
        out[f"obs[{i}]"] = np.array([obs_vector(v, i, shape, dtype) for v in want.obs], dtype=dtype).reshape(t, *shape)
        out[f"next_obs[{i}]"] = obs_vector(want.next_obs, i, shape, dtype)

    def per_step(make: Callable[[int], np.ndarray], dtype: type, width: int) -> np.ndarray:
        return np.array([make(x) for x in want.actions], dtype=dtype).reshape(t, width)

    def prev(make: Callable[[int], np.ndarray], dtype: type, width: int) -> np.ndarray:
        rows = [np.zeros(width, dtype) if x == START else make(x) for x in want.prev_actions]
        return np.array(rows, dtype=dtype).reshape(t, width)

    out["continuous_actions"] = per_step(lambda x: continuous_action(x, c), np.float32, c)
    out["discrete_actions"] = per_step(lambda x: discrete_action(x, spec.discrete_branches), np.int32, b)
    out["continuous_log_probs"] = per_step(lambda x: continuous_log_prob(x, c), np.float32, c)
    out["discrete_log_probs"] = per_step(lambda x: discrete_log_prob(x, b), np.float32, b)
    out["prev_continuous_actions"] = prev(lambda x: continuous_action(x, c), np.float32, c)
    out["prev_discrete_actions"] = prev(lambda x: discrete_action(x, spec.discrete_branches), np.int32, b)
    if not b:
        out["action_mask"] = None
    elif want.masks is None:
        out["action_mask"] = np.ones((t, spec.mask_width), dtype=bool)
    else:
        out["action_mask"] = np.array(want.masks, dtype=bool).reshape(t, spec.mask_width)
    out["rewards"] = np.array(want.rewards, dtype=np.float32)
    out["done"] = np.array([want.done_reached and k == t - 1 for k in range(t)], dtype=bool)
    out["policy_versions"] = np.array([policy_version_of(x) for x in want.actions], dtype=np.int64)
    return out


def _actual(trajectory: Trajectory, key: str) -> np.ndarray | None:
    if key.startswith(("obs[", "next_obs[")):
        name, index = key.rstrip("]").split("[")
        return getattr(trajectory, name)[int(index)]
    return getattr(trajectory, key)


def check_trajectory(actual: Trajectory, want: Expect, params: BrainParameters, session_id: str | None = None) -> None:
    """Assert that ``actual`` matches ``want`` in every field; the failure names the field.

    ``session_id``: the id the transport gave ``want.session`` (default: the case's name for it).
    """
    assert actual.id.session_id == (want.session if session_id is None else session_id), f"{want.label}: id.session_id"
    assert actual.id.agent_id == want.agent_id, f"{want.label}: id.agent_id {actual.id.agent_id}"
    assert actual.behavior_name == params.behavior_name, f"{want.label}: behavior_name"
    for key, expected in expected_arrays(want, params).items():
        got = _actual(actual, key)
        if expected is None:
            assert got is None, f"{want.label}: {key} should be None, got {got!r}"
            continue
        assert got is not None, f"{want.label}: {key} is None"
        np.testing.assert_array_equal(got, expected, err_msg=f"{want.label}: {key}", strict=True)
    assert actual.done_reached is want.done_reached, f"{want.label}: done_reached"
    assert actual.interrupted is want.interrupted, f"{want.label}: interrupted"
    if want.episode is None:
        assert actual.episode_reward is None, f"{want.label}: episode_reward {actual.episode_reward} on a mid-episode segment"
        assert actual.episode_length is None, f"{want.label}: episode_length {actual.episode_length} on a mid-episode segment"
    else:
        reward, length = want.episode
        assert actual.episode_reward == pytest.approx(reward, rel=1e-6), f"{want.label}: episode_reward"
        assert actual.episode_length == length, f"{want.label}: episode_length"


# -- the table -----------------------------------------------------------------------------------

R = Row

CASES: tuple[Case, ...] = (
    Case(
        name="first_sighting_only_records_obs",
        rule="The first sighting of an agent produces no experience; it only records the obs.",
        time_horizon=1,
        steps=(
            step(R(1, 1.0, reward=9.0)),  # the first sighting's reward belongs to no experience
            step(R(1, 1.1, 0.5), R(2, 2.1)),  # agent 2 is seen once: nothing, not even at the flush
        ),
        expected=(Expect(at=1, agent_id=1, obs=(1.0,), actions=(100,), prev_actions=(START,), rewards=(0.5,), next_obs=1.1),),
        live_agents=(1, 2),
    ),
    Case(
        name="experience_pairs_previous_row_with_current_reward",
        rule="The obs and action mask come from the previous row; the action, log-prob and policy version are what "
        "the processor returned for that row. Reward, done and max_reached come from the current row.",
        steps=(
            step(R(1, 1.0), R(2, 2.0)),
            step(R(2, 2.1, -1.0), R(1, 1.1, 0.5)),  # row order changes between BrainInfos
            step(R(1, 1.2, 1.0, done=True), R(2, 2.2, 2.0, done=True)),
        ),
        expected=(
            Expect(
                at=2,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),
                prev_actions=(START, 100),
                rewards=(0.5, 1.0),
                next_obs=1.2,
                done_reached=True,
                episode=(1.5, 2),
            ),
            Expect(
                at=2,
                agent_id=2,
                obs=(2.0, 2.1),
                actions=(200, 201),
                prev_actions=(START, 200),
                rewards=(-1.0, 2.0),
                next_obs=2.2,
                done_reached=True,
                episode=(1.0, 2),
            ),
        ),
    ),
    Case(
        name="prev_action_zeros_then_action_before",
        rule="prev_action is the action before that (zeros at an episode's first step).",
        steps=(step(R(1, 1.0)), step(R(1, 1.1, 0.25)), step(R(1, 1.2, 0.5)), step(R(1, 1.3, 0.75, done=True))),
        expected=(
            Expect(
                at=3,
                agent_id=1,
                obs=(1.0, 1.1, 1.2),
                actions=(100, 101, 102),
                prev_actions=(START, 100, 101),
                rewards=(0.25, 0.5, 0.75),
                next_obs=1.3,
                done_reached=True,
                episode=(1.5, 3),
            ),
        ),
    ),
    Case(
        name="cut_at_time_horizon",
        rule="Cut when the trajectory reaches time_horizon; next_obs is the agent's current obs. The agent goes on.",
        time_horizon=2,
        steps=(
            step(R(1, 1.0)),
            step(R(1, 1.1, 0.5)),
            step(R(1, 1.2, 1.0)),  # 2 experiences: cut, not done
            step(R(1, 1.3, 1.5)),
            step(R(1, 1.4, 2.0)),  # cut again; prev_action carries over the cut
            step(R(1, 1.5, 2.5)),
        ),
        expected=(
            Expect(
                at=2,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),
                prev_actions=(START, 100),
                rewards=(0.5, 1.0),
                next_obs=1.2,
            ),
            Expect(
                at=4, agent_id=1, obs=(1.2, 1.3), actions=(102, 103), prev_actions=(101, 102), rewards=(1.5, 2.0), next_obs=1.4
            ),
            Expect(
                at=FLUSH,
                agent_id=1,
                obs=(1.4,),
                actions=(104,),
                prev_actions=(103,),
                rewards=(2.5,),
                next_obs=1.5,
                interrupted=True,
            ),
        ),
        live_agents=(1, 1, 1, 1, 1, 1),
    ),
    Case(
        name="cut_on_done_next_obs_is_terminal",
        rule="Cut when done; next_obs is the terminal obs. The actions returned for a done row are discarded.",
        steps=(step(R(1, 1.0)), step(R(1, 1.1, 1.0)), step(R(1, 1.2, 2.0, done=True))),
        expected=(
            Expect(
                at=2,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),  # 102, returned for the done row, appears nowhere
                prev_actions=(START, 100),
                rewards=(1.0, 2.0),
                next_obs=1.2,
                done_reached=True,
                episode=(3.0, 2),
            ),
        ),
        live_agents=(1, 1, 0),
    ),
    Case(
        name="max_reached_is_done_and_interrupted",
        rule="max_reached comes only with done: cut and cleared like any done, but marked interrupted.",
        steps=(
            step(R(1, 1.0), R(2, 2.0)),
            step(R(1, 1.1, 1.0, done=True, max_reached=True), R(2, 2.1, 1.0, done=True)),  # truncated vs terminated
        ),
        expected=(
            Expect(
                at=1,
                agent_id=1,
                obs=(1.0,),
                actions=(100,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=1.1,
                done_reached=True,
                interrupted=True,
                episode=(1.0, 1),
            ),
            Expect(
                at=1,
                agent_id=2,
                obs=(2.0,),
                actions=(200,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=2.1,
                done_reached=True,
                episode=(1.0, 1),
            ),
        ),
        live_agents=(2, 0),
    ),
    Case(
        name="state_cleared_after_done",
        rule="After done, the agent's state is cleared; the same id may come back in the next BrainInfo as a new "
        "episode (a first sighting).",
        steps=(
            step(R(1, 1.0)),
            step(R(1, 1.1, 1.0, done=True)),
            step(R(1, 1.2, 7.0)),  # a first sighting again: its reward counts nowhere
            step(R(1, 1.3, 0.5)),
            step(R(1, 1.4, 0.25, done=True)),
        ),
        expected=(
            Expect(
                at=1,
                agent_id=1,
                obs=(1.0,),
                actions=(100,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=1.1,
                done_reached=True,
                episode=(1.0, 1),
            ),
            Expect(
                at=4,
                agent_id=1,
                obs=(1.2, 1.3),
                actions=(102, 103),
                prev_actions=(START, 102),  # not 101, the discarded action of the done row
                rewards=(0.5, 0.25),
                next_obs=1.4,
                done_reached=True,
                episode=(0.75, 2),  # this episode only
            ),
        ),
        live_agents=(1, 0, 1, 1, 0),
    ),
    Case(
        name="absent_agent_keeps_its_state",
        rule="An agent absent from a BrainInfo keeps its state: decision intervals differ per agent.",
        steps=(
            step(R(1, 1.0), R(2, 2.0)),
            step(R(1, 1.1, 0.5)),  # agent 2 absent
            step(R(1, 1.2, 0.5)),  # agent 2 absent
            step(R(1, 1.3, 0.5, done=True), R(2, 2.3, 4.0)),
            step(R(2, 2.4, 1.0, done=True)),
        ),
        expected=(
            Expect(
                at=3,
                agent_id=1,
                obs=(1.0, 1.1, 1.2),
                actions=(100, 101, 102),
                prev_actions=(START, 100, 101),
                rewards=(0.5, 0.5, 0.5),
                next_obs=1.3,
                done_reached=True,
                episode=(1.5, 3),
            ),
            Expect(
                at=4,
                agent_id=2,
                obs=(2.0, 2.3),
                actions=(200, 203),  # policy versions 0 and 3
                prev_actions=(START, 200),
                rewards=(4.0, 1.0),
                next_obs=2.4,
                done_reached=True,
                episode=(5.0, 2),
            ),
        ),
        live_agents=(2, 2, 2, 1, 0),
    ),
    Case(
        name="agents_end_episodes_at_different_steps",
        rule="Each agent is cut and cleared on its own done, whatever the other agents of the BrainInfo do.",
        steps=(
            step(R(1, 1.0), R(2, 2.0), R(3, 3.0)),
            step(R(1, 1.1, 1.0, done=True), R(2, 2.1, 0.5), R(3, 3.1, 0.25)),
            step(R(1, 1.2), R(2, 2.2, 0.5), R(3, 3.2, 0.25, done=True, max_reached=True)),
            step(R(1, 1.3, 2.0), R(2, 2.3, 0.5, done=True)),
            step(R(1, 1.4, 3.0, done=True)),
        ),
        expected=(
            Expect(
                at=1,
                agent_id=1,
                obs=(1.0,),
                actions=(100,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=1.1,
                done_reached=True,
                episode=(1.0, 1),
            ),
            Expect(
                at=2,
                agent_id=3,
                obs=(3.0, 3.1),
                actions=(300, 301),
                prev_actions=(START, 300),
                rewards=(0.25, 0.25),
                next_obs=3.2,
                done_reached=True,
                interrupted=True,
                episode=(0.5, 2),
            ),
            Expect(
                at=3,
                agent_id=2,
                obs=(2.0, 2.1, 2.2),
                actions=(200, 201, 202),
                prev_actions=(START, 200, 201),
                rewards=(0.5, 0.5, 0.5),
                next_obs=2.3,
                done_reached=True,
                episode=(1.5, 3),
            ),
            Expect(
                at=4,
                agent_id=1,
                obs=(1.2, 1.3),
                actions=(102, 103),
                prev_actions=(START, 102),
                rewards=(2.0, 3.0),
                next_obs=1.4,
                done_reached=True,
                episode=(5.0, 2),
            ),
        ),
        live_agents=(3, 2, 2, 1, 0),
    ),
    Case(
        name="agent_ids_scoped_per_session",
        rule="An agent's identity is (session, behavior, agent id). Ids from different sessions never collide.",
        steps=(
            step(R(1, 1.0), R(2, 2.0), session="a"),
            step(R(1, 5.0), R(2, 6.0), session="b"),  # the same ids, another session
            step(R(1, 1.2, 1.0, done=True), session="a"),
            step(R(1, 5.3, 2.0, done=True), R(2, 6.3, 3.0), session="b"),
            step(R(2, 2.4, 0.5, done=True), session="a"),
        ),
        expected=(
            Expect(
                at=2,
                session="a",
                agent_id=1,
                obs=(1.0,),
                actions=(100,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=1.2,
                done_reached=True,
                episode=(1.0, 1),
            ),
            Expect(
                at=3,
                session="b",
                agent_id=1,
                obs=(5.0,),
                actions=(101,),
                prev_actions=(START,),
                rewards=(2.0,),
                next_obs=5.3,
                done_reached=True,
                episode=(2.0, 1),
            ),
            Expect(
                at=4,
                session="a",
                agent_id=2,
                obs=(2.0,),
                actions=(200,),
                prev_actions=(START,),
                rewards=(0.5,),
                next_obs=2.4,
                done_reached=True,
                episode=(0.5, 1),
            ),
            Expect(
                at=FLUSH,
                session="b",
                agent_id=2,
                obs=(6.0,),
                actions=(201,),
                prev_actions=(START,),
                rewards=(3.0,),
                next_obs=6.3,
                interrupted=True,
            ),
        ),
        live_agents=(2, 2, 1, 1, 0),
    ),
    Case(
        name="episode_stats_span_time_horizon_cuts",
        rule="On the segment that ends an episode, the whole episode's cumulative reward and length.",
        time_horizon=2,
        steps=(
            step(R(1, 1.0)),
            step(R(1, 1.1, 0.5)),
            step(R(1, 1.2, 1.0)),
            step(R(1, 1.3, 1.5)),
            step(R(1, 1.4, 2.0)),
            step(R(1, 1.5, -0.5, done=True)),
        ),
        expected=(
            Expect(
                at=2,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),
                prev_actions=(START, 100),
                rewards=(0.5, 1.0),
                next_obs=1.2,
            ),
            Expect(
                at=4, agent_id=1, obs=(1.2, 1.3), actions=(102, 103), prev_actions=(101, 102), rewards=(1.5, 2.0), next_obs=1.4
            ),
            Expect(
                at=5,
                agent_id=1,
                obs=(1.4,),
                actions=(104,),
                prev_actions=(103,),
                rewards=(-0.5,),
                next_obs=1.5,
                done_reached=True,
                episode=(4.5, 5),  # all three segments
            ),
        ),
    ),
    Case(
        name="discrete_actions_and_masks_from_previous_row",
        rule="The obs and action mask come from the agent's previous row (discrete branches and hybrid actions).",
        params=HYBRID,
        steps=(
            step(R(1, 1.0), R(2, 2.0), masks=[(1, 0, 1, 0, 1), (1, 1, 0, 1, 0)]),
            step(R(1, 1.1, 0.5), R(2, 2.1, 0.5), masks=[(0, 1, 0, 1, 1), (0, 0, 1, 1, 1)]),
            step(R(1, 1.2, 1.0, done=True), R(2, 2.2, 1.0, done=True), masks=[(1, 1, 1, 1, 0), (1, 1, 1, 0, 1)]),  # unused
        ),
        expected=(
            Expect(
                at=2,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),
                prev_actions=(START, 100),
                rewards=(0.5, 1.0),
                next_obs=1.2,
                done_reached=True,
                episode=(1.5, 2),
                masks=((1, 0, 1, 0, 1), (0, 1, 0, 1, 1)),
            ),
            Expect(
                at=2,
                agent_id=2,
                obs=(2.0, 2.1),
                actions=(200, 201),
                prev_actions=(START, 200),
                rewards=(0.5, 1.0),
                next_obs=2.2,
                done_reached=True,
                episode=(1.5, 2),
                masks=((1, 1, 0, 1, 0), (0, 0, 1, 1, 1)),
            ),
        ),
    ),
    Case(
        name="mask_not_sent_means_all_allowed",
        rule="An action mask is optional: a row sent without one allows every choice (discrete-only behavior, "
        "two observations).",
        params=DISCRETE,
        steps=(
            step(R(1, 1.0)),  # no mask
            step(R(1, 1.1, 1.0), masks=[(0, 1)]),
            step(R(1, 1.2, 1.0, done=True)),
        ),
        expected=(
            Expect(
                at=2,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),
                prev_actions=(START, 100),
                rewards=(1.0, 1.0),
                next_obs=1.2,
                done_reached=True,
                episode=(2.0, 2),
                masks=((1, 1), (0, 1)),
            ),
        ),
    ),
    Case(
        name="flush_at_session_end",
        rule="When a session ends, its agents' partial trajectories are flushed as interrupted (next_obs: the last "
        "obs seen; the last row, which has no reward yet, is no experience). Nothing may leak.",
        steps=(
            step(R(1, 1.0), R(3, 3.0)),
            step(R(1, 1.1, 0.5), R(3, 3.1, 1.0, done=True)),
            step(R(1, 1.2, 0.5), R(2, 2.2)),  # agent 2: a first sighting, nothing to flush
        ),
        expected=(
            Expect(
                at=1,
                agent_id=3,
                obs=(3.0,),
                actions=(300,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=3.1,
                done_reached=True,
                episode=(1.0, 1),
            ),
            Expect(
                at=FLUSH,
                agent_id=1,
                obs=(1.0, 1.1),
                actions=(100, 101),
                prev_actions=(START, 100),
                rewards=(0.5, 0.5),
                next_obs=1.2,
                interrupted=True,
            ),
        ),
        live_agents=(2, 1, 2),
    ),
    Case(
        name="done_at_first_sighting_yields_nothing",
        rule="A first sighting produces no experience, even when it is already done; its state is cleared at once.",
        steps=(
            step(R(1, 1.0, 5.0, done=True), R(2, 2.0)),
            step(R(1, 1.1), R(2, 2.1, 1.0, done=True)),
            step(R(1, 1.2, 0.5, done=True)),
        ),
        expected=(
            Expect(
                at=1,
                agent_id=2,
                obs=(2.0,),
                actions=(200,),
                prev_actions=(START,),
                rewards=(1.0,),
                next_obs=2.1,
                done_reached=True,
                episode=(1.0, 1),
            ),
            Expect(
                at=2,
                agent_id=1,
                obs=(1.1,),
                actions=(101,),
                prev_actions=(START,),
                rewards=(0.5,),
                next_obs=1.2,
                done_reached=True,
                episode=(0.5, 1),
            ),
        ),
        live_agents=(1, 1, 0),
    ),
    Case(
        name="slot_growth_keeps_data",
        rule="Any number of agents: 5 agents mid-episode when 45 more join at once (past the initial capacity).",
        time_horizon=2,
        steps=(
            step(*(R(a, a + 0.0) for a in range(1, 6))),
            step(*(R(a, a + 0.1, a * 0.25) for a in range(1, 51))),
            step(*(R(a, a + 0.2, 1.0) for a in range(1, 51))),
        ),
        expected=(
            *(
                Expect(
                    at=2,
                    agent_id=a,
                    obs=(a + 0.0, a + 0.1),
                    actions=(100 * a, 100 * a + 1),
                    prev_actions=(START, 100 * a),
                    rewards=(a * 0.25, 1.0),
                    next_obs=a + 0.2,
                )
                for a in range(1, 6)
            ),
            *(
                Expect(
                    at=FLUSH,
                    agent_id=a,
                    obs=(a + 0.1,),
                    actions=(100 * a + 1,),
                    prev_actions=(START,),
                    rewards=(1.0,),
                    next_obs=a + 0.2,
                    interrupted=True,
                )
                for a in range(6, 51)
            ),
        ),
        live_agents=(5, 50, 50),
    ),
)
