"""The Unity gateway's groups: ``AgentInfoProto`` ``GroupId``/``GroupReward`` become the BrainInfo's ``group_ids`` and
``group_rewards`` (``envclient.unity.translate``), read whole-step and agent by agent alike, split with the terminal
rows first, and advertised as ``multiAgentGroups`` so Unity stops warning that group rewards are ignored."""

from __future__ import annotations

import numpy as np
import pytest

from envclient.unity import translate
from envclient.unity.translate import UnityInputError
from processor.groups import decode_groups
from tests.unity_fake import agent_info, brain_proto

WALKER = brain_proto("Walker", continuous=2)


def _walker(agent_id: int, t: float, group: int = 0, group_reward: float = 0.0, **kw: object) -> object:
    info = agent_info(agent_id, [[t, float(agent_id), 0.5]], reward=t, **kw)  # type: ignore[arg-type]
    info.group_id, info.group_reward = group, group_reward
    return info


def test_group_id_and_group_reward_become_the_brain_info_fields() -> None:
    spec = translate.behavior_spec(WALKER, _walker(1, 0))  # type: ignore[arg-type]
    # A transcript step: agents 1 and 2 in group 7 (2 ends its episode with the group's reward), 3 in none.
    infos = [_walker(1, 1, 7, 0.5), _walker(2, 2, 7, 0.5, done=True), _walker(3, 3), _walker(2, 4, 7)]
    rows = translate.behavior_step(spec, infos)  # type: ignore[arg-type]
    by_agent = translate._rows_by_agent(spec, infos)  # type: ignore[arg-type]
    assert rows.groups is not None and by_agent.groups is not None
    for a, b in zip(rows.groups, by_agent.groups, strict=True):
        np.testing.assert_array_equal(a, b)
    first, second = (rows.take(p) for p in translate.split_restarts(rows, "Walker"))
    for part, ids, groups, rewards in ((first, [1, 2, 3], [7, 7, 0], [0.5, 0.5, 0.0]), (second, [2], [7], [0.0])):
        msg = part.brain_info("Walker")
        decoded = decode_groups(msg, part.agent_ids, "Walker", 64)
        assert decoded is not None and part.agent_ids.tolist() == ids
        assert decoded.group_ids.tolist() == groups and decoded.group_rewards.tolist() == rewards


def test_a_step_without_groups_sends_none() -> None:
    spec = translate.behavior_spec(WALKER, _walker(1, 0))  # type: ignore[arg-type]
    rows = translate.behavior_step(spec, [_walker(1, 1), _walker(2, 2)])  # type: ignore[list-item]
    assert rows.groups is None
    assert not rows.brain_info("Walker").HasField("group_ids")


def test_a_non_finite_group_reward_names_the_agent() -> None:
    spec = translate.behavior_spec(WALKER, _walker(1, 0))  # type: ignore[arg-type]
    with pytest.raises(UnityInputError, match="agent 9"):
        translate.behavior_step(spec, [_walker(1, 1, 3), _walker(9, 2, 3, float("nan"))])  # type: ignore[list-item]


def test_the_gateway_advertises_multi_agent_groups() -> None:
    assert translate.capabilities().multiAgentGroups
