"""Micro-batching of one behavior's inference requests across sessions.

Every session sends one BrainInfo per behavior per step and waits for its actions; an
``InferenceBatcher`` coalesces the requests that arrive close together into one forward pass of
the behavior's current ``Policy``, then hands each request its own rows, in order.

When a pass runs (``N`` rows pending over ``R`` requests):

* at once when the pending requests reach the number of active sessions the caller declared
  (``set_active_sessions``): every session has spoken, waiting longer only adds latency. With one
  session this makes batching free;
* at once when the pending rows reach ``max_batch_rows`` (a pass never exceeds it, except for a
  single request larger than it, which is never split);
* otherwise ``deadline_ms`` after the first pending request (``0`` = at the next event-loop turn:
  whatever arrived in the same turn shares the pass).

The pass runs inline on the event loop: a 2x64 MLP pass plus sampling costs tens of
microseconds, less than a hop to an executor thread. Every row of a pass uses the same policy.
Measured round trips: ``benchmarks/inference_formats.py`` (``batcher_*`` keys).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from common.errors import DeadlineExceededError
from processor.inference import ActionOutput, Policy

logger = logging.getLogger(__name__)

PASS_SECONDS_BUCKETS: tuple[float, ...] = (25e-6, 50e-6, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1)
"""Upper bounds (seconds) of the forward-pass duration histogram; a last slot counts the rest (+Inf)."""


@dataclass
class BatcherCounters:
    """Running totals of one batcher; histograms count passes by their size."""

    forward_passes: int = 0
    """Forward passes run (successful or not)."""
    failed_passes: int = 0
    """Passes whose policy call raised; every request in them got the error."""
    rows: int = 0
    """Agent rows acted on."""
    requests: int = 0
    """act() calls answered."""
    first_policy_timeouts: int = 0
    """act() calls that gave up waiting for the first policy."""
    rows_per_pass: collections.Counter[int] = field(default_factory=collections.Counter)
    """Rows in a pass -> number of passes with that many."""
    requests_per_pass: collections.Counter[int] = field(default_factory=collections.Counter)
    """Requests in a pass -> number of passes with that many."""
    pass_seconds_buckets: tuple[float, ...] = PASS_SECONDS_BUCKETS
    """Upper bounds of ``pass_seconds_counts``, seconds."""
    pass_seconds_counts: list[int] = field(default_factory=lambda: [0] * (len(PASS_SECONDS_BUCKETS) + 1))
    """Successful passes per duration bucket (policy call, sampling included); the last is +Inf."""
    pass_seconds_sum: float = 0.0
    """Seconds spent in successful passes."""


@dataclass
class _Request:
    observations: list[np.ndarray]
    action_mask: np.ndarray | None
    rows: int
    future: asyncio.Future[ActionOutput]
    noise: np.ndarray | None = None
    memories: np.ndarray | None = None


def _slice(output: ActionOutput, start: int, stop: int) -> ActionOutput:
    memories, next_memories = output.memories, output.next_memories
    return ActionOutput(
        output.env_continuous_actions[start:stop],
        output.continuous_actions[start:stop],
        output.continuous_log_probs[start:stop],
        output.discrete_actions[start:stop],
        output.discrete_log_probs[start:stop],
        output.policy_version,
        None if memories is None else memories[start:stop],
        None if next_memories is None else next_memories[start:stop],
    )


class InferenceBatcher:
    """Coalesces concurrent ``act`` calls of one behavior into shared forward passes.

    Not thread-safe: use it from one event loop.
    """

    def __init__(
        self,
        behavior_name: str,
        max_batch_rows: int = 1024,
        deadline_ms: float = 2.0,
        first_policy_timeout_s: float = 60.0,
        rng: np.random.Generator | None = None,
        deterministic: bool = False,
        seed: int | None = None,
    ) -> None:
        """Creates a batcher with no policy yet.

        Args:
            behavior_name: the behavior it serves (in logs and errors).
            max_batch_rows: the most rows in one pass (>= 1).
            deadline_ms: the longest a request waits for others to join its pass (>= 0).
            first_policy_timeout_s: how long ``act`` waits for the first policy before failing.
            rng: the generator actions are sampled with; None: one seeded with ``seed``, made at the first pass
                (a behavior that never acts holds none).
            deterministic: act with the mode (the Gaussian's mean, each branch's arg-max) instead of sampling
                (``network_settings.deterministic``).
            seed: the seed of that generator (None: unseeded).
        """
        if max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be >= 1, got {max_batch_rows}")
        if deadline_ms < 0 or first_policy_timeout_s < 0:
            raise ValueError(f"deadline_ms ({deadline_ms}) and first_policy_timeout_s ({first_policy_timeout_s}) must be >= 0")
        self.behavior_name = behavior_name
        self.max_batch_rows = max_batch_rows
        self.deadline_ms = deadline_ms
        self.first_policy_timeout_s = first_policy_timeout_s
        self.counters = BatcherCounters()
        self._rng = rng
        self._seed = seed
        self.deterministic = deterministic
        self._policy: Policy | None = None
        self._policy_ready: asyncio.Event | None = None
        """Made by the first request that waits for the first policy."""
        self._policy_waiters = 0
        self._active_sessions = 0
        self._pending: list[_Request] = []
        self._pending_rows = 0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The generator actions are sampled with (made on first use)."""
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng

    @property
    def policy(self) -> Policy | None:
        """The policy the next pass will use, or None before the first one."""
        return self._policy

    @property
    def active_sessions(self) -> int:
        """Sessions that may send requests (0 = unknown: only the deadline and row limit flush)."""
        return self._active_sessions

    def set_active_sessions(self, count: int) -> None:
        """Declares how many sessions may have a request in flight; a pass runs once all have one.

        Lowering it (a session ended) runs the pending pass at once if the rest are all waiting.
        """
        if count < 0:
            raise ValueError(f"active session count must be >= 0, got {count}")
        self._active_sessions = count
        if self._pending and 0 < count <= len(self._pending):
            self._flush()

    def sde_latent_size(self) -> int:
        """The acting policy's gSDE latent size L, from its artifact (``Policy.sde_latent_size``); 0 without gSDE or
        while no policy has arrived. What the behavior's held exploration matrices follow (``processor.exploration``)."""
        return 0 if self._policy is None else self._policy.sde_latent_size

    def set_policy(self, policy: Policy) -> bool:
        """Swaps in ``policy`` if it is newer than the current one (latest wins).

        Returns:
            True if it was taken, False if an equal or newer version is already in place.
        """
        if self._policy is not None and policy.version <= self._policy.version:
            logger.debug("%s: ignoring policy v%d (holding v%d)", self.behavior_name, policy.version, self._policy.version)
            return False
        first = self._policy is None
        self._policy = policy
        if first:
            logger.info("%s: first policy v%d arrived", self.behavior_name, policy.version)
            if self._policy_ready is not None:
                self._policy_ready.set()
        return True

    async def _wait_for_policy(self) -> Policy:
        if self._policy is not None:
            return self._policy
        if self._policy_waiters == 0:
            logger.info(
                "%s: waiting up to %.1f s for the first policy before acting", self.behavior_name, self.first_policy_timeout_s
            )
        if self._policy_ready is None:
            self._policy_ready = asyncio.Event()
        self._policy_waiters += 1
        try:
            await asyncio.wait_for(self._policy_ready.wait(), self.first_policy_timeout_s)
        except asyncio.TimeoutError:
            self.counters.first_policy_timeouts += 1
            raise DeadlineExceededError(
                f"behavior {self.behavior_name!r}: no policy arrived within {self.first_policy_timeout_s} s "
                "(is its trainer running and publishing?)"
            ) from None
        finally:
            self._policy_waiters -= 1
        assert self._policy is not None  # set before the event
        return self._policy

    async def act(
        self,
        observations: list[np.ndarray],
        action_mask: np.ndarray | None,
        noise: np.ndarray | None = None,
        memories: np.ndarray | None = None,
    ) -> ActionOutput:
        """Actions for one request's N rows, computed in a pass shared with concurrent requests.

        Args:
            observations: one array ``[N, *shape_i]`` per observation spec.
            action_mask: bool/uint8 [N, M], 1 = allowed, or None.
            noise: float32 [N, C], the continuous actions' held standard-normal noise, or [N, L, C], gSDE's held
                standard-normal exploration matrices (``processor.exploration``), or None: drawn fresh.
            memories: float32 [N, R], the rows' recurrent states (``TrajectoryAssembler.memories``), or None; rows
                whose states do not fit the acting policy's memory size act from zeros (``Policy.act``).

        Returns:
            This request's rows of the pass, in order, with the version of the policy that acted.

        Raises:
            DeadlineExceededError: no policy arrived within ``first_policy_timeout_s``.
            ProtocolError: the request does not match the policy's specs (only this request fails).
        """
        policy = await self._wait_for_policy()
        rows = policy.check_request(observations, action_mask)
        if rows == 0:
            self.counters.requests += 1
            return policy.act(
                observations,
                action_mask,
                self.rng,
                check=False,
                noise=noise,
                memories=memories,
                deterministic=self.deterministic,
            )
        if self._pending and self._pending_rows + rows > self.max_batch_rows:
            self._flush()
        future: asyncio.Future[ActionOutput] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(observations, action_mask, rows, future, noise, memories))
        self._pending_rows += rows
        if self._pending_rows >= self.max_batch_rows or 0 < self._active_sessions <= len(self._pending):
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.deadline_ms / 1e3, self._flush)
        return await future

    def _flush(self) -> None:
        """Runs one pass over every pending request and resolves their futures."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = [r for r in self._pending if not r.future.done()]  # a cancelled caller needs no rows
        self._pending, self._pending_rows = [], 0
        if not batch:
            return
        policy = self._policy
        assert policy is not None  # requests are only queued once a policy exists
        started = time.perf_counter()
        try:
            memories = self._memories(batch, policy.memory_size)
            output = policy.act(
                *self._concatenate(batch),
                self.rng,
                check=False,
                noise=self._noise(batch),
                memories=memories,
                deterministic=self.deterministic,
            )
        except Exception as err:  # the pass failed: every request in it gets the error
            self.counters.forward_passes += 1
            self.counters.failed_passes += 1
            for request in batch:
                request.future.set_exception(err)
            return
        seconds = time.perf_counter() - started
        rows = sum(r.rows for r in batch)
        counters = self.counters
        counters.pass_seconds_counts[bisect.bisect_left(counters.pass_seconds_buckets, seconds)] += 1
        counters.pass_seconds_sum += seconds
        counters.forward_passes += 1
        counters.rows += rows
        counters.requests += len(batch)
        counters.rows_per_pass[rows] += 1
        counters.requests_per_pass[len(batch)] += 1
        start = 0
        for request in batch:
            request.future.set_result(_slice(output, start, start + request.rows))
            start += request.rows

    def _noise(self, batch: list[_Request]) -> np.ndarray | None:
        """The pass's continuous noise ``[sum N, C]`` (gSDE: ``[sum N, L, C]``), fresh draws for the requests that hold
        none; None if none holds any."""
        if all(r.noise is None for r in batch):
            return None
        # Held noise is [N, C], or [N, L, C] with gSDE (one behavior's sessions all hold the same kind).
        shape = next(r.noise for r in batch if r.noise is not None).shape[1:]
        parts = [self.rng.standard_normal((r.rows, *shape), dtype=np.float32) if r.noise is None else r.noise for r in batch]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    @staticmethod
    def _memories(batch: list[_Request], memory_size: int) -> np.ndarray | None:
        """The pass's recurrent states ``[sum N, R]``: zeros for a request whose states are not of width R (none
        held yet, or held for another memory size); None for a policy without memory."""
        if not memory_size:
            return None
        if len(batch) == 1:
            return batch[0].memories
        parts = [
            r.memories
            if r.memories is not None and r.memories.shape[1] == memory_size
            else np.zeros((r.rows, memory_size), np.float32)
            for r in batch
        ]
        return np.concatenate(parts)

    @staticmethod
    def _concatenate(batch: list[_Request]) -> tuple[list[np.ndarray], np.ndarray | None]:
        """The pass's observations ``[sum N, *shape_i]`` and mask ``[sum N, M]`` (None if no request has one)."""
        if len(batch) == 1:
            return batch[0].observations, batch[0].action_mask
        observations = [np.concatenate(parts) for parts in zip(*(r.observations for r in batch), strict=True)]
        masks = [r.action_mask for r in batch]
        if all(m is None for m in masks):
            return observations, None
        width = next(m.shape[1] for m in masks if m is not None)
        filled = [
            np.ones((r.rows, width), np.bool_) if m is None else m.astype(np.bool_, copy=False)
            for r, m in zip(batch, masks, strict=True)
        ]
        return observations, np.concatenate(filled)

    def close(self) -> None:
        """Cancels the pending deadline and every pending request (their callers see CancelledError)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for request in self._pending:
            request.future.cancel()
        self._pending, self._pending_rows = [], 0
