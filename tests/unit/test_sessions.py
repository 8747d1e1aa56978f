"""``processor.sessions.SessionTable``: session ids carry the processor's identity."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from processor.sessions import SessionTable, default_processor_id


def test_session_ids_start_with_the_processor_id_and_differ_across_processors() -> None:
    first, _ = SessionTable("p0").open("env-0", [], None)
    second, _ = SessionTable("p1").open("env-0", [], None)
    assert first.session_id.startswith("p0:env-0-") and second.session_id.startswith("p1:env-0-")
    assert SessionTable().processor_id == default_processor_id()


@pytest.mark.parametrize("bad", ["p 0", "p/0", "p:0", "pé"])
def test_a_processor_id_that_cannot_travel_in_a_trajectory_id_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="--processor-id"):
        SessionTable(bad)
