"""The recurrent state the processor holds per agent (``processor.assembly``, "Recurrent state"), by hand.

A fake recurrent policy makes every state visible: with state ``[s, k]`` and obs ``x`` it returns ``[s + x, k + 1]``,
so an agent's state is (the sum of the obs it acted on, the steps it acted) since its state last started from zeros.
Each case writes out by hand the state every row acts with, and the ``memories`` of every trajectory published.
"""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import ProtocolError
from common.trajectory import MEMORY, Trajectory
from processor.assembly import RECURRENT_STATE, StepActions, TrajectoryAssembler
from processor.wire import DecodedBrainInfo
from tests.assembly_cases import CONTINUOUS, R, Step, actions_for, step, step_arrays

MEMORY_SIZE = 2


def decoded(st: Step) -> DecodedBrainInfo:
    return DecodedBrainInfo(behavior_name=CONTINUOUS.behavior_name, **step_arrays(st, CONTINUOUS)._asdict())


def act(
    assembler: TrajectoryAssembler, k: int, st: Step, memory_size: int = MEMORY_SIZE
) -> tuple[np.ndarray, list[Trajectory]]:
    """Step ``k`` through the fake recurrent policy: (the states its rows acted with [N, R], the trajectories cut)."""
    info = decoded(st)
    held = assembler.memories(info.agent_ids)
    memories = (
        np.zeros((len(info.agent_ids), memory_size), np.float32) if held is None or held.shape[1] != memory_size else held
    )
    next_memories = memories.copy()
    if memory_size:
        next_memories[:, 0] += info.observations[0][:, 0]  # the row's obs value (obs_vector's first column)
        next_memories[:, 1] += 1
    base = actions_for(k, info.agent_ids.tolist(), CONTINUOUS.action_spec)
    if not memory_size:  # a policy without memory
        return memories, assembler.add(info, StepActions(*base))
    actions = StepActions(*base, memories=memories, next_memories=next_memories)
    return memories, assembler.add(info, actions)


def new_assembler(session: str = "s", time_horizon: int = 5) -> TrajectoryAssembler:
    return TrajectoryAssembler(CONTINUOUS, session, time_horizon)


def test_zeros_at_first_sighting_then_the_returned_state() -> None:
    assembler = new_assembler()
    acted, _ = act(assembler, 0, step(R(1, 1.0), R(2, 10.0)))
    np.testing.assert_array_equal(acted, [[0, 0], [0, 0]])
    acted, _ = act(assembler, 1, step(R(2, 20.0), R(1, 2.0), R(3, 5.0)))  # agent 3: a first sighting
    np.testing.assert_array_equal(acted, [[10, 1], [1, 1], [0, 0]])
    acted, _ = act(assembler, 2, step(R(1, 3.0)))  # 2 and 3 absent: they keep theirs
    np.testing.assert_array_equal(acted, [[3, 2]])
    acted, _ = act(assembler, 3, step(R(3, 1.0), R(2, 1.0)))
    np.testing.assert_array_equal(acted, [[5, 1], [30, 2]])


def test_done_resets_the_state_and_the_trajectory_records_each_step_s() -> None:
    assembler = new_assembler()
    act(assembler, 0, step(R(1, 1.0)))
    act(assembler, 1, step(R(1, 2.0)))
    acted, cut = act(assembler, 2, step(R(1, 4.0, reward=1.0, done=True)))
    np.testing.assert_array_equal(acted, [[3, 2]])  # a done row still acts (its action is discarded)
    (trajectory,) = cut
    assert trajectory.done_reached
    # The states the two experiences' actions were chosen with: at obs 1 and at obs 2.
    np.testing.assert_array_equal(trajectory.memories, [[0, 0], [1, 1]])
    np.testing.assert_array_equal(trajectory.to_rows()[MEMORY], [[0, 0], [1, 1]])
    assert assembler.live_agents == 0
    acted, _ = act(assembler, 3, step(R(1, 7.0)))  # the same id, a new episode
    np.testing.assert_array_equal(acted, [[0, 0]])
    acted, _ = act(assembler, 4, step(R(1, 1.0)))
    np.testing.assert_array_equal(acted, [[7, 1]])


def test_a_time_horizon_cut_keeps_the_state() -> None:
    assembler = new_assembler(time_horizon=2)
    act(assembler, 0, step(R(1, 1.0)))
    act(assembler, 1, step(R(1, 2.0)))
    _, cut = act(assembler, 2, step(R(1, 3.0)))
    (first,) = cut
    np.testing.assert_array_equal(first.memories, [[0, 0], [1, 1]])
    acted, cut = act(assembler, 3, step(R(1, 4.0)))
    np.testing.assert_array_equal(acted, [[6, 3]])  # the cut did not touch it
    _, cut = act(assembler, 4, step(R(1, 5.0)))
    (second,) = cut
    np.testing.assert_array_equal(second.memories, [[3, 2], [6, 3]])


def test_session_end_flushes_the_memories_and_frees_the_states() -> None:
    assembler = new_assembler()
    act(assembler, 0, step(R(1, 1.0), R(2, 2.0)))
    act(assembler, 1, step(R(1, 3.0), R(2, 4.0)))
    act(assembler, 2, step(R(1, 5.0)))
    flushed = {t.id.agent_id: t for t in assembler.flush()}
    np.testing.assert_array_equal(flushed[1].memories, [[0, 0], [1, 1]])
    np.testing.assert_array_equal(flushed[2].memories, [[0, 0]])
    assert all(t.interrupted for t in flushed.values())
    assert len(assembler.buffer) == 0 and not assembler.buffer.state[RECURRENT_STATE][:2].any()
    np.testing.assert_array_equal(assembler.memories(np.array([1, 2])), [[0, 0], [0, 0]])
    # The client's next session is a new assembler: its agents start from zeros.
    acted, _ = act(new_assembler("s2"), 0, step(R(1, 9.0)))
    np.testing.assert_array_equal(acted, [[0, 0]])


def test_two_sessions_with_the_same_agent_ids_keep_separate_states() -> None:
    first, second = new_assembler("a"), new_assembler("b")
    act(first, 0, step(R(1, 1.0), R(2, 2.0)))
    act(second, 0, step(R(2, 100.0), R(1, 200.0)))
    act(first, 1, step(R(1, 3.0)))
    acted_a, _ = act(first, 2, step(R(1, 0.0), R(2, 0.0)))
    acted_b, _ = act(second, 1, step(R(1, 0.0), R(2, 0.0)))
    np.testing.assert_array_equal(acted_a, [[4, 2], [2, 1]])
    np.testing.assert_array_equal(acted_b, [[200, 1], [100, 1]])


def test_another_memory_size_flushes_and_restarts_from_zeros() -> None:
    assembler = new_assembler()
    act(assembler, 0, step(R(1, 1.0), R(2, 2.0)))
    act(assembler, 1, step(R(1, 3.0), R(2, 4.0)))
    # A policy with memory_size 4 arrives: what the agents held (of width 2) ends as interrupted.
    acted, out = act(assembler, 2, step(R(1, 5.0), R(2, 6.0)), memory_size=4)
    np.testing.assert_array_equal(acted, np.zeros((2, 4)))
    assert sorted(t.id.agent_id for t in out) == [1, 2]
    assert all(t.interrupted and t.length == 1 and getattr(t.memories, "shape", None) == (1, 2) for t in out)
    assert assembler.counters.flushed_trajectories == 2
    acted, _ = act(assembler, 3, step(R(1, 1.0)), memory_size=4)
    np.testing.assert_array_equal(acted, [[5, 1, 0, 0]])
    # Back to a policy without memory: no states at all, and trajectories carry none.
    assert getattr(act(assembler, 4, step(R(1, 1.0)), memory_size=0)[1][0].memories, "shape", None) == (1, 4)
    assert assembler.memories(np.array([1])) is None
    _, cut = act(assembler, 5, step(R(1, 1.0, done=True)), memory_size=0)
    assert cut[0].memories is None


def test_a_swap_of_the_same_memory_size_keeps_the_states() -> None:
    """The policy version changes every step here (``actions_for``): the states go on regardless."""
    assembler = new_assembler()
    for k in range(4):
        acted, _ = act(assembler, k, step(R(1, 1.0)))
    np.testing.assert_array_equal(acted, [[3, 3]])


@pytest.mark.parametrize("memory_size", [2, 128])
def test_bytes_per_agent_grow_by_the_stated_amount(memory_size: int) -> None:
    """``4 * R`` per held step and pending row, and ``4 * R`` of state (the docstring's figures)."""
    plain = TrajectoryAssembler(CONTINUOUS, "p", 5)
    recurrent = TrajectoryAssembler(CONTINUOUS, "r", 5)
    act(recurrent, 0, step(R(1, 1.0)), memory_size=memory_size)
    assert recurrent.buffer.row_bytes - plain.buffer.row_bytes == 4 * memory_size
    assert recurrent.buffer.state[RECURRENT_STATE].itemsize * memory_size == 4 * memory_size


def test_memories_cross_the_wire_as_trajectory_field_21() -> None:
    assembler = new_assembler()
    act(assembler, 0, step(R(1, 1.0)))
    act(assembler, 1, step(R(1, 2.0)))
    (trajectory,) = assembler.flush()
    msg = trajectory.to_proto()
    assert msg.DESCRIPTOR.fields_by_name["memories"].number == 21
    np.testing.assert_array_equal(Trajectory.from_proto(msg).memories, [[0, 0]])
    msg.ClearField("memories")
    assert Trajectory.from_proto(msg).memories is None
    bad = trajectory.to_proto()
    bad.memories.shape[:] = [2, 1]
    with pytest.raises(ProtocolError, match="disagree on the number of steps"):
        Trajectory.from_proto(bad)
