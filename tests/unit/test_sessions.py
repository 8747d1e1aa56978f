"""``processor.sessions``: session ids carry the processor's identity and the client's; what a session and a
declared behavior hold."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from common.errors import ConfigError, ProtocolError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.topics import TopicRegistry
from processor.behaviors import BehaviorRuntime, BehaviorTable, ProcessorSettings
from processor.sessions import Session, SessionTable, client_id_of, default_processor_id


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


# -- what a declared behavior costs (processor/wire.py MAX_BEHAVIORS_PER_HELLO) ----------------------


def _declared(count: int, per_session: int = 64) -> tuple[BehaviorTable, list[Session]]:
    """``count`` behaviors declared by sessions of ``per_session`` each (Hellos, no agents)."""
    table = BehaviorTable(ProcessorSettings(default_runtime=BehaviorRuntime()), TopicRegistry())
    sessions = SessionTable("p0")
    opened = []
    for k in range(0, count, per_session):
        params = [
            BrainParameters(f"B{i}", (ObservationSpec((32,), np.dtype(np.float32)),), ActionSpec(4))
            for i in range(k, min(count, k + per_session))
        ]
        opened.append(sessions.open(f"env-{k}", [table.declare(p) for p in params], None, 65536)[0])
    return table, opened


async def test_a_sessions_assembler_is_made_with_its_first_agent_not_at_hello() -> None:
    table, (session,) = _declared(2)
    first, second = session.behaviors.values()
    assert session.assemblers == {}
    assembler = session.assembler(first)
    assert session.assembler(first) is assembler and list(session.assemblers) == [first.name]
    assert session.assembler(second).budget is assembler.budget is session.budget
    await table.stop()


async def test_a_declared_behavior_holds_few_objects_for_the_collector_and_little_memory() -> None:
    """The garbage collector scans every tracked object at a full collection: 10,000 behaviors of 110 objects
    each made 0.4-0.8 s pauses. The figures documented at ``MAX_BEHAVIORS_PER_HELLO`` (43 objects, 8.4 KiB)
    are held with a margin."""
    _declared(64)  # warm: module-level caches, first-use allocations
    gc.collect()
    objects = len(gc.get_objects())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table, _sessions = _declared(512)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_behavior = (len(gc.get_objects()) - objects) / 512
    assert per_behavior <= 50, f"{per_behavior:.1f} tracked objects per declared behavior"
    assert held / 512 <= 10 * 1024, f"{held / 512 / 1024:.1f} KiB per declared behavior"
    await table.stop()
