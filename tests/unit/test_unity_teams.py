"""``Name?team=N``: split once at the gateway's edge (``translate.parse_behavior_id``), the team declared per behavior
in the Hello (``Hello.team_ids``) and checked there (``processor.wire.decode_hello``)."""

from __future__ import annotations

import numpy as np
import pytest

from common.errors import ProtocolError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.unity import translate
from processor.wire import decode_hello
from protos import PROTOCOL_VERSION, pb
from tests.unity_fake import agent_info, brain_proto

BALL = BrainParameters("3DBall", (ObservationSpec((8,), np.dtype(np.float32)),), ActionSpec(2, ()))
WALKER = BrainParameters("Walker", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(1, ()))


@pytest.mark.parametrize(
    ("unity_name", "name", "team"),
    [("3DBall?team=0", "3DBall", 0), ("Soccer?team=1", "Soccer", 1), ("3DBall", "3DBall", 0), ("a?b?team=12", "a?b", 12)],
)
def test_a_unity_name_splits_as_behavior_identifiers_does(unity_name: str, name: str, team: int) -> None:
    assert translate.parse_behavior_id(unity_name) == translate.BehaviorId(unity_name, name, team)


@pytest.mark.parametrize("unity_name", ["3DBall?team=", "3DBall?team=-1", "3DBall?side=0", "?team=0", "3DBall?team=x"])
def test_a_malformed_team_suffix_is_refused_naming_it(unity_name: str) -> None:
    with pytest.raises(translate.UnityInputError, match=r"expected 'Name\?team=N'") as err:
        translate.parse_behavior_id(unity_name)
    assert repr(unity_name) in str(err.value)


def test_the_spec_is_named_by_the_bare_behavior() -> None:
    spec = translate.behavior_spec(brain_proto("3DBall?team=0", continuous=2), agent_info(1, [[0.0] * 8]))
    assert spec == BALL


def _hello(team_ids: dict[str, int]) -> pb.Hello:
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="unity/3DBall")
    hello.brain_parameters.extend([BALL.to_proto(), WALKER.to_proto()])
    hello.team_ids.update(team_ids)
    return hello


def test_the_hello_declares_each_behaviors_team_and_an_absent_one_is_team_0() -> None:
    assert decode_hello(_hello({"3DBall": 1})).team_ids == {"3DBall": 1, "Walker": 0}
    assert decode_hello(_hello({})).team_ids == {"3DBall": 0, "Walker": 0}


@pytest.mark.parametrize(
    ("team_ids", "named"),
    [({"Pyramids": 0}, "hello.team_ids['Pyramids']: not a behavior this hello declares"),
     ({"3DBall": -1}, "hello.team_ids['3DBall']: team -1 is negative")],
)  # fmt: skip
def test_a_bad_team_declaration_is_refused_naming_it(team_ids: dict[str, int], named: str) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_hello(_hello(team_ids))
    assert named in str(err.value)
