"""``processor.sessions``: session ids carry the processor's identity and the client's."""

from __future__ import annotations

import pytest

from common.errors import ConfigError, ProtocolError
from processor.sessions import SessionTable, client_id_of, default_processor_id


def test_session_ids_start_with_the_processor_id_and_differ_across_processors() -> None:
    first, _ = SessionTable("p0").open("env-0", [], None)
    second, _ = SessionTable("p1").open("env-0", [], None)
    assert first.session_id.startswith("p0:env-0-") and second.session_id.startswith("p1:env-0-")
    assert SessionTable().processor_id == default_processor_id()


@pytest.mark.parametrize("bad", ["p 0", "p/0", "p:0", "pé"])
def test_a_processor_id_that_cannot_travel_in_a_trajectory_id_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="--processor-id"):
        SessionTable(bad)


@pytest.mark.parametrize("client_id", ["env-0", "a:b", "soak-3-0", "é", "x" * 256])
def test_client_id_of_returns_the_client_id_a_session_id_was_made_from(client_id: str) -> None:
    session, _ = SessionTable("host-1.a_b").open(client_id, [], None)
    assert client_id_of(session.session_id) == client_id


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "env-0-0123456789ab",
        "p0:env-0",
        "p0:-0123456789ab",
        ":env-0-0123456789ab",
        "p0:env-0-0123456789a",
        "p0:env-0-0123456789aZ",
        "p0:env-0_0123456789ab",
    ],
)
def test_client_id_of_refuses_an_id_a_session_table_does_not_make(bad: str) -> None:
    with pytest.raises(ProtocolError, match="session id"):
        client_id_of(bad)
