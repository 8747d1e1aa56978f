"""``envclient.unity.translate.behavior_step``: the whole-step reading gives the agent-by-agent reading's rows."""

from __future__ import annotations

import numpy as np
import pytest

from envclient.unity import translate
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
