"""``ProcessorServer.stop``'s delivery wait: it waits for a subscriber that keeps taking and acking, not for an idle one.

A real server on loopback and the real trainer-side client (``GrpcTrajectorySubscription``); the trajectories are
published straight into the server's topic. ``deliver_timeout_s`` is set to 30 s, so a stop held for that long
shows, and the slow subscriber needs longer than ``DELIVERY_STALL_S`` in all, so a wait cut at the stall window
(rather than at a pause) shows too. Time bounds here are liveness bounds, far from the figures they guard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest

from common.errors import TopicClosedError
from common.topics.grpc_transport import GrpcTrajectorySubscription
from processor.server import DELIVERY_STALL_S, ProcessorServer, ServerOptions
from tests.integration.test_topics_grpc import BEHAVIOR, make_trajectory, settings

DELIVER_TIMEOUT_S = 30.0
TRAJECTORIES = 8
ACK_EVERY_S = 0.3
"""The slow subscriber's pause between acks: well inside ``DELIVERY_STALL_S``, and 8 of them take longer than it."""
STOP_BOUND_S = 15.0
"""Liveness bound on a stop held by an idle subscriber: far below ``DELIVER_TIMEOUT_S``, far above the stall window."""


@pytest.fixture
async def server() -> AsyncIterator[ProcessorServer]:
    server = ProcessorServer(settings(), ServerOptions(host="127.0.0.1", port=0, deliver_timeout_s=DELIVER_TIMEOUT_S))
    await server.start()
    try:
        yield server
    finally:
        await server.stop(0.5)


async def test_stop_waits_for_a_slow_subscriber_that_keeps_acking(server: ProcessorServer) -> None:
    assert TRAJECTORIES * ACK_EVERY_S > 2 * DELIVERY_STALL_S  # the test's premise: slower than one stall window in all
    topic = server.topics.trajectories(BEHAVIOR)
    for sequence in range(TRAJECTORIES):
        await topic.publish(make_trajectory(sequence))
    acked: list[int] = []
    with GrpcTrajectorySubscription(f"127.0.0.1:{server.port}", BEHAVIOR, "trainer") as trainer:

        async def slow_trainer() -> None:
            while True:
                try:
                    deliveries = await trainer.aget(1, timeout_s=DELIVER_TIMEOUT_S)
                except TopicClosedError:  # the stop ended the subscription once the queue was drained
                    return
                await asyncio.sleep(ACK_EVERY_S)
                assert trainer.ack(d.tag for d in deliveries) == len(deliveries)
                acked.extend(d.item.id.sequence for d in deliveries)

        consumer = asyncio.create_task(slow_trainer())
        while not acked:  # it has started; the stop begins with most of the queue still to take
            await asyncio.sleep(0.01)
        await server.stop(0.5)
        await asyncio.wait_for(consumer, DELIVER_TIMEOUT_S)

    assert acked == list(range(TRAJECTORIES))
    queue = topic.stats().subscribers["trainer"]
    assert (queue.acked, queue.depth, queue.in_flight) == (TRAJECTORIES, 0, 0)


async def test_an_idle_attached_subscriber_does_not_hold_the_stop(
    server: ProcessorServer, caplog: pytest.LogCaptureFixture
) -> None:
    topic = server.topics.trajectories(BEHAVIOR)
    for sequence in range(3):
        await topic.publish(make_trajectory(sequence))
    with GrpcTrajectorySubscription(f"127.0.0.1:{server.port}", BEHAVIOR, "trainer"):
        while topic.stats().subscribers["trainer"].in_flight < 3:  # attached and sent everything; it never acks
            await asyncio.sleep(0.01)
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="processor.server"):
            await server.stop(0.5)
        stop_s = time.monotonic() - start

    assert stop_s < STOP_BOUND_S, f"stop took {stop_s:.1f} s with deliver_timeout_s={DELIVER_TIMEOUT_S}"
    assert "with 3 trajectories not yet acked by attached subscribers" in caplog.text
