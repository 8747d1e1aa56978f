"""status_details: every status message the servicer ends an RPC with fits the client's metadata limit; session
work takes turns; a serving processor's garbage-collector settings."""

from __future__ import annotations

import asyncio
import gc

import pytest

from common.topics import TopicRegistry
from processor.behaviors import BehaviorTable, ProcessorSettings
from processor.server import GC_THRESHOLDS, configure_gc
from processor.servicer import MAX_STATUS_DETAILS_BYTES, AgentProcessorServicer, status_details
from processor.sessions import SessionTable


@pytest.mark.parametrize("char", ["a", "é", "😀"], ids=["ascii", "two_bytes", "four_bytes"])
def test_a_long_message_is_cut_within_the_bound_and_says_how_much_is_left(char: str) -> None:
    message = "behavior 'X' was not declared (declared: [" + char * 100_000 + "])"
    total = len(message.encode())
    cut = status_details(message)
    assert len(cut.encode()) <= MAX_STATUS_DETAILS_BYTES
    assert cut.startswith("behavior 'X' was not declared")
    head, _, tail = cut.rpartition("... (")
    assert tail.endswith(" more)")
    assert len(head.encode()) + int(tail.removesuffix(" more)")) == total


def test_a_short_message_is_unchanged() -> None:
    message = "é" * (MAX_STATUS_DETAILS_BYTES // 2)  # exactly the bound in bytes
    assert status_details(message) == message
    assert status_details(message + "é").endswith(" more)")


async def test_session_work_takes_turns_one_piece_per_event_loop_iteration() -> None:
    """A burst of Hellos (each some 10 ms of declarations) ran in one iteration and stalled every step for all
    of them; each piece now runs in an iteration of its own, and other callbacks run between them."""
    servicer = AgentProcessorServicer(BehaviorTable(ProcessorSettings(), TopicRegistry()), SessionTable("p0"))
    iteration = 0
    ran: list[int] = []

    async def ticker() -> None:
        nonlocal iteration
        while True:
            iteration += 1
            await asyncio.sleep(0)

    async def piece() -> None:
        async with servicer._turn():
            ran.append(iteration)

    ticking = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    await asyncio.gather(*[piece() for _ in range(5)])  # all ready in the same iteration
    ticking.cancel()
    assert len(set(ran)) == 5 and ran == sorted(ran), ran


def test_a_serving_processor_freezes_start_up_and_sets_the_collectors_thresholds() -> None:
    thresholds = gc.get_threshold()
    try:
        configure_gc()
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
