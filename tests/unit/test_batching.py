"""processor.batching: coalescing, flush triggers, row order, policy swaps and the first-policy wait."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from common.errors import DeadlineExceededError, ProtocolError
from processor.batching import InferenceBatcher
from processor.inference import ActionOutput, Policy
from protos import pb
from tests.policies import build_mlp_policy_update

OBS = [(6,)]
SPEC = pb.ActionSpec(continuous_size=2, discrete_branches=[3])
LONG_MS = 10_000.0  # a deadline no test waits for


def make_policy(version: int) -> Policy:
    return Policy.from_update(build_mlp_policy_update("Crawler", OBS, SPEC, version, seed=0))


def request(n: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed).standard_normal((n, 6), dtype=np.float32)]


def batcher(with_policy: bool = True, **kwargs: object) -> InferenceBatcher:
    """A batcher with v1 of the policy, a deadline no test waits for, and rng seed 42."""
    settings: dict = {"deadline_ms": LONG_MS, "first_policy_timeout_s": 5.0, "rng": np.random.default_rng(42), **kwargs}
    b = InferenceBatcher("Crawler", **settings)
    if with_policy:
        b.set_policy(make_policy(1))
    return b


def expected_pass(requests: list[list[np.ndarray]], seed: int = 42) -> ActionOutput:
    """What one forward pass over the concatenated requests gives with the batcher's rng."""
    return make_policy(1).act([np.concatenate([r[0] for r in requests])], None, np.random.default_rng(seed))


def assert_rows(got: ActionOutput, want: ActionOutput, start: int, stop: int) -> None:
    for name in ActionOutput._fields[:5]:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name)[start:stop], err_msg=name)


async def test_concurrent_requests_share_one_pass_in_order() -> None:
    b = InferenceBatcher("Crawler", deadline_ms=50, rng=np.random.default_rng(42))
    b.set_policy(make_policy(1))
    sizes = [3, 1, 4, 2]
    requests = [request(n, seed=i) for i, n in enumerate(sizes)]
    results = await asyncio.gather(*(b.act(obs, None) for obs in requests))
    assert (b.counters.forward_passes, b.counters.requests, b.counters.rows) == (1, 4, 10)
    assert b.counters.requests_per_pass == {4: 1} and b.counters.rows_per_pass == {10: 1}
    want, start = expected_pass(requests), 0
    for n, got in zip(sizes, results, strict=True):
        assert got.continuous_actions.shape == (n, 2) and got.discrete_actions.shape == (n, 1)
        assert got.policy_version == 1
        assert_rows(got, want, start, start + n)
        start += n


async def test_a_pass_runs_as_soon_as_every_active_session_has_asked() -> None:
    b = batcher()
    b.set_active_sessions(3)
    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(b.act(request(2, i), None) for i in range(3))), timeout=2)
    assert time.perf_counter() - start < 1  # not the 10 s deadline
    assert b.counters.requests_per_pass == {3: 1}
    b.set_active_sessions(1)  # one session: every request is its own pass, at once
    for i in range(3):
        await asyncio.wait_for(b.act(request(1, i), None), timeout=1)
    assert b.counters.forward_passes == 4 and b.counters.requests_per_pass[1] == 3


async def test_a_session_leaving_releases_the_waiting_ones() -> None:
    b = batcher()
    b.set_active_sessions(3)
    tasks = [asyncio.create_task(b.act(request(1, i), None)) for i in range(2)]
    await asyncio.sleep(0.01)
    assert not any(t.done() for t in tasks)
    b.set_active_sessions(2)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=1)
    assert b.counters.requests_per_pass == {2: 1}


async def test_the_deadline_flushes_a_single_request() -> None:
    b = batcher(deadline_ms=30)
    start = time.perf_counter()
    out = await b.act(request(5, 0), None)
    assert time.perf_counter() - start >= 0.025
    assert out.discrete_actions.shape == (5, 1) and b.counters.forward_passes == 1


async def test_zero_deadline_coalesces_one_event_loop_turn() -> None:
    b = batcher(deadline_ms=0)
    await asyncio.gather(*(b.act(request(1, i), None) for i in range(5)))
    assert b.counters.forward_passes == 1 and b.counters.requests_per_pass == {5: 1}


async def test_passes_never_exceed_max_batch_rows() -> None:
    b = batcher(max_batch_rows=8)
    requests = [request(3, i) for i in range(5)]
    tasks = [asyncio.create_task(b.act(obs, None)) for obs in requests]
    await asyncio.sleep(0)  # all five queued: 3+3 run, 3+3 run, the fifth waits for company
    assert b.counters.rows_per_pass == {6: 2}
    b.set_active_sessions(1)
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=1)
    assert b.counters.rows_per_pass == {6: 2, 3: 1} and b.counters.rows == 15
    assert [r.continuous_actions.shape[0] for r in results] == [3] * 5
    big = await asyncio.wait_for(b.act(request(20, 9), None), timeout=1)  # one oversized request is not split
    assert big.continuous_actions.shape == (20, 2) and b.counters.rows_per_pass[20] == 1


async def test_latest_policy_wins() -> None:
    b = batcher()
    b.set_active_sessions(1)
    assert b.set_policy(make_policy(3)) is True
    assert b.set_policy(make_policy(2)) is False
    assert b.set_policy(make_policy(3)) is False
    assert (await b.act(request(2, 0), None)).policy_version == 3
    assert b.set_policy(make_policy(4)) is True
    assert (await b.act(request(2, 0), None)).policy_version == 4


async def test_first_policy_wait_logs_once_and_times_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="processor.batching")
    b = batcher(with_policy=False, first_policy_timeout_s=0.05)
    results = await asyncio.gather(*(b.act(request(1, i), None) for i in range(3)), return_exceptions=True)
    assert all(isinstance(r, DeadlineExceededError) for r in results)
    assert "'Crawler'" in str(results[0]) and "0.05 s" in str(results[0])
    waits = [r for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waits) == 1 and "Crawler" in waits[0].getMessage()
    assert b.counters.first_policy_timeouts == 3 and b.counters.forward_passes == 0


async def test_waiters_are_released_when_the_first_policy_arrives() -> None:
    b = batcher(with_policy=False, deadline_ms=0)
    tasks = [asyncio.create_task(b.act(request(2, i), None)) for i in range(3)]
    await asyncio.sleep(0.02)
    assert not any(t.done() for t in tasks)
    b.set_policy(make_policy(7))
    results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=1)
    assert [r.policy_version for r in results] == [7, 7, 7]
    assert b.counters.forward_passes == 1


async def test_a_bad_request_fails_alone_and_masks_stay_per_request() -> None:
    b = batcher(deadline_ms=0)
    mask = np.zeros((50, 3), np.bool_)
    mask[:, 2] = True
    results: tuple[ActionOutput | BaseException, ...] = await asyncio.gather(
        b.act([np.zeros((2, 5), np.float32)], None),
        b.act(request(50, 1), mask),
        b.act(request(50, 2), None),
        return_exceptions=True,
    )
    bad, masked, unmasked = results
    assert isinstance(bad, ProtocolError)
    assert isinstance(masked, ActionOutput) and isinstance(unmasked, ActionOutput)
    assert (masked.discrete_actions == 2).all()
    assert len(set(unmasked.discrete_actions[:, 0].tolist())) > 1  # no mask leaked onto these rows
    assert b.counters.requests_per_pass == {2: 1}


async def test_a_cancelled_request_does_not_break_the_pass() -> None:
    b = batcher()
    b.set_active_sessions(2)
    doomed = asyncio.create_task(b.act(request(1, 0), None))
    await asyncio.sleep(0)
    doomed.cancel()
    b.set_active_sessions(3)
    other = asyncio.create_task(b.act(request(2, 1), None))
    await asyncio.sleep(0)
    b.set_active_sessions(1)
    assert (await asyncio.wait_for(other, timeout=1)).continuous_actions.shape == (2, 2)
    assert b.counters.requests_per_pass == {1: 1}
