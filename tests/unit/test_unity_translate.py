"""``envclient.unity.translate.behavior_step``: the whole-step reading gives the agent-by-agent reading's rows."""

from __future__ import annotations

import numpy as np
import pytest

from envclient.session import ActionResult
from envclient.unity import translate
from protos import mlagents_unity_pb2 as unity_pb
from tests.unity_fake import agent_info, brain_proto

CHOOSER = brain_proto("Chooser", continuous=1, branches=(2, 3))


def _chooser(agent_id: int, t: int, masked: list[bool], **kw: object) -> object:
    return agent_info(agent_id, [[t, agent_id, -1.0, 2.0], [t * 0.5, 1.0]], reward=-0.2 * t, masked=masked, **kw)  # type: ignore[arg-type]


def _same(a: translate.StepRows, b: translate.StepRows) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, list):
            for u, v in zip(x, y, strict=True):
                np.testing.assert_array_equal(u, v)
                assert u.dtype == v.dtype
        elif x is None or y is None:
            assert x is None and y is None
        else:
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype


@pytest.mark.parametrize(
    "masks",
    [
        [[False, True, True, False, True], [True, False, False, False, False], [False] * 5],  # every agent masked
        [[], [], []],  # no agent sent a mask
        [[False, True, True, False, True], [], [False] * 5],  # some did: read agent by agent
    ],
)
def test_whole_step_and_agent_by_agent_readings_agree(masks: list[list[bool]]) -> None:
    infos = [
        _chooser(10, 1, masks[0]),
        _chooser(11, 1, masks[1], done=True),
        _chooser(12, 1, masks[2], done=True, max_step=True),
    ]
    spec = translate.behavior_spec(CHOOSER, infos[0])
    at_once = translate._rows_at_once(spec, infos)
    by_agent = translate._rows_by_agent(spec, infos)
    if masks[1] == [] and masks[0]:
        assert at_once is None  # a mix of masked and unmasked agents takes the agent-by-agent path
    else:
        assert at_once is not None
        _same(at_once, by_agent)
    _same(translate.behavior_step(spec, infos), by_agent)
    assert translate.behavior_step(spec, infos).max_reached.tolist() == [False, False, True]


def test_a_bad_agent_is_named_by_the_agent_by_agent_reading() -> None:
    good = _chooser(10, 1, [False] * 5)
    spec = translate.behavior_spec(CHOOSER, good)
    bad = _chooser(11, 1, [False] * 4)
    assert translate._rows_at_once(spec, [good, bad]) is None
    with pytest.raises(translate.UnityInputError, match=r"behavior 'Chooser', agent 11: the action mask has 4 entries"):
        translate.behavior_step(spec, [good, bad])


# -- an agent's terminal row and its next decision in one step --------------------------------------

WALKER = brain_proto("Walker", continuous=2)


def _walker(agent_id: int, t: float, **kw: object) -> object:
    return agent_info(agent_id, [[t, float(agent_id), 0.5]], reward=t, **kw)  # type: ignore[arg-type]


def test_a_terminal_and_a_decision_row_of_one_agent_become_two_brain_infos_terminal_first() -> None:
    spec = translate.behavior_spec(WALKER, _walker(1, 0))  # type: ignore[arg-type]
    infos = [_walker(1, 1), _walker(2, 2, done=True), _walker(3, 3), _walker(2, 4)]
    rows = translate.behavior_step(spec, infos)  # type: ignore[arg-type]
    parts = translate.split_restarts(rows, "Walker")
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3]]
    first, second = (rows.take(p) for p in parts)
    assert first.agent_ids.tolist() == [1, 2, 3] and first.done.tolist() == [False, True, False]
    assert second.agent_ids.tolist() == [2] and second.done.tolist() == [False] and second.rewards.tolist() == [4.0]
    # Unity wants one action per deciding row, in its order: 1, 3, then 2's first of its new episode.
    answers = [
        ActionResult(np.array([[1, 1], [2, 2], [3, 3]], np.float32), np.zeros((3, 0), np.int32), 5),
        ActionResult(np.array([[4, 4]], np.float32), np.zeros((1, 0), np.int32), 6),
    ]
    merged = translate.merge_actions(len(infos), parts, answers)
    out = unity_pb.UnityRLInputProto().agent_actions["Walker"]
    translate.fill_actions(rows.done, merged, out)
    assert [list(a.continuous_actions) for a in out.value] == [[1, 1], [3, 3], [4, 4]]


def test_a_step_without_a_repeated_agent_stays_one_brain_info() -> None:
    spec = translate.behavior_spec(WALKER, _walker(1, 0))  # type: ignore[arg-type]
    rows = translate.behavior_step(spec, [_walker(1, 1, done=True), _walker(2, 2)])  # type: ignore[list-item]
    assert [p.tolist() for p in translate.split_restarts(rows, "Walker")] == [[0, 1]]


@pytest.mark.parametrize(
    "flags", [(False, False), (True, True), (False, True)], ids=["two_decisions", "two_terminals", "decision_first"]
)
def test_an_agent_twice_in_another_order_is_refused_naming_it(flags: tuple[bool, bool]) -> None:
    spec = translate.behavior_spec(WALKER, _walker(1, 0))  # type: ignore[arg-type]
    rows = translate.behavior_step(spec, [_walker(7, 1, done=flags[0]), _walker(7, 2, done=flags[1])])  # type: ignore[list-item]
    with pytest.raises(translate.UnityInputError, match="behavior 'Walker', agent 7: reported twice in one step"):
        translate.split_restarts(rows, "Walker")


def test_a_png_camera_is_taken_row_by_row() -> None:
    from common.demo_images import encode_pngs
    from protos import mlagents_demo_pb2 as demo_pb

    def camera(agent_id: int, done: bool = False) -> demo_pb.AgentInfoProto:
        info = demo_pb.AgentInfoProto(id=agent_id, done=done)
        obs = info.observations.add(shape=[3, 2, 2], compression_type=demo_pb.PNG)
        obs.compressed_data = encode_pngs(np.full((2, 2, 3), agent_id, np.uint8))
        return info

    brain = brain_proto("Eye", continuous=1)
    spec = translate.behavior_spec(brain, camera(1))
    rows = translate.behavior_step(spec, [camera(1, done=True), camera(2), camera(1)])
    first, second = (rows.take(p) for p in translate.split_restarts(rows, "Eye"))
    assert list(second.observations[0].shape) == [1, 2, 2, 3]  # type: ignore[union-attr]
    assert list(second.observations[0].png) == [rows.observations[0].png[2]]  # type: ignore[union-attr]
    assert len(first.observations[0].png) == 2  # type: ignore[union-attr]


# -- a com.unity.ml-agents 1.0.x player -------------------------------------------------------------


@pytest.mark.parametrize("vector_actions", [False, True])
def test_vector_actions_are_filled_for_a_player_without_hybrid_actions(vector_actions: bool) -> None:
    result = ActionResult(np.array([[0.5], [-0.25]], np.float32), np.array([[1, 2], [0, 1]], np.int32), 1)
    out = unity_pb.UnityRLInputProto().agent_actions["Chooser"]
    translate.fill_actions(np.array([False, False]), result, out, vector_actions=vector_actions)
    assert [list(a.continuous_actions) for a in out.value] == [[0.5], [-0.25]]
    assert [list(a.discrete_actions) for a in out.value] == [[1, 2], [0, 1]]
    expected = [[0.5, 1.0, 2.0], [-0.25, 0.0, 1.0]] if vector_actions else [[], []]
    assert [list(a.vector_actions_deprecated) for a in out.value] == expected
