"""common/backoff.py: the one capped exponential backoff, and its users' sequences."""

from __future__ import annotations

import asyncio
import time

import nats.errors
import pytest

from common.backoff import DEFAULT_INITIAL_S, DEFAULT_JITTER, DEFAULT_MAX_S, Backoff
from common.topics import grpc_transport
from common.topics.jetstream.connection import PUBLISH_BACKOFF_S, REFUSALS, pause, request_backoff, typed_error


def test_delays_double_from_initial_to_max_and_reset_starts_again() -> None:
    backoff = Backoff(0.5, 10.0, jitter=0.0)
    assert [backoff.next_delay_s() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.attempts == 7
    backoff.reset()
    assert backoff.next_delay_s() == 0.5


def test_jitter_shortens_each_delay_by_at_most_its_fraction() -> None:
    backoff = Backoff(1.0, 1.0, jitter=0.25)
    delays = [backoff.next_delay_s() for _ in range(200)]
    assert all(0.75 <= d <= 1.0 for d in delays) and len(set(delays)) > 1


def test_the_default_is_a_peers_retry_with_jitter() -> None:
    backoff = Backoff()
    assert (backoff.initial_s, backoff.max_s, backoff.jitter) == (DEFAULT_INITIAL_S, DEFAULT_MAX_S, DEFAULT_JITTER)
    assert DEFAULT_INITIAL_S * (1 - DEFAULT_JITTER) <= backoff.next_delay_s() <= DEFAULT_INITIAL_S


@pytest.mark.parametrize(
    ("initial_s", "max_s", "jitter"), [(0.0, 1.0, 0.0), (1.0, -1.0, 0.0), (1.0, 1.0, 1.0)], ids=["initial", "max", "jitter"]
)
def test_a_backoff_that_could_not_wait_is_refused(initial_s: float, max_s: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="Backoff"):
        Backoff(initial_s, max_s, jitter)


def test_the_subscribe_retry_waits_half_a_second_doubling_to_ten() -> None:
    """docs/architecture.md, "Topics and delivery": 0.5 s doubling to 10 s."""
    assert (grpc_transport.SUBSCRIBE_RETRY_INITIAL_S, grpc_transport.SUBSCRIBE_RETRY_MAX_S) == (0.5, 10.0)


def test_the_jetstream_request_backoff_doubles_without_jitter_and_pause_stops_at_the_deadline() -> None:
    backoff = request_backoff()
    first, largest = PUBLISH_BACKOFF_S
    assert [backoff.next_delay_s() for _ in range(3)] == [first, 2 * first, 4 * first]
    for _ in range(20):
        backoff.next_delay_s()
    assert backoff.next_delay_s() == largest

    async def paused() -> float:
        started = time.monotonic()
        await pause(Backoff(5.0, 5.0, jitter=0.0), time.monotonic() + 0.05)  # capped at the deadline
        return time.monotonic() - started

    assert asyncio.run(paused()) < 1.0


def test_a_brokers_authorization_violation_while_connecting_is_told_apart_by_type() -> None:
    """nats-py reports it as a plain Error while connecting; ``typed_error`` gives it its type, once."""
    plain = nats.errors.Error("nats: 'Authorization Violation'")
    typed = typed_error(plain)
    assert isinstance(typed, nats.errors.AuthorizationError) and isinstance(typed, REFUSALS) and typed.__cause__ is plain
    other = nats.errors.Error("nats: 'Maximum Connections Exceeded'")
    assert typed_error(other) is other and not isinstance(other, REFUSALS)
    timeout = nats.errors.TimeoutError()
    assert typed_error(timeout) is timeout
