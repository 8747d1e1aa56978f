"""Drive a vectorised environment through an ``EnvSession``: one BrainInfo per env step.

``run_env`` is the whole env-client loop for one behavior: send each copy's row (obs, reward,
done, max_reached), apply the actions the processor returns, repeat. Any env that implements the
small ``VectorEnv`` protocol plugs in (the 1-D task in ``envclient.simple_env``, the Gymnasium
adapter).

Words (docs/architecture.md, "Trajectory assembly rules"): a *row* is one agent's entry in one
BrainInfo; the first row of an episode is a *first sighting* and implies no experience; every
later row completes one *experience* (its reward and done belong to the previous row's action).
So ``experiences = rows - first_sightings``, which is what the processor must account for:
published + stale-dropped + unpublished trajectory steps (partial trajectories are flushed as
interrupted when the session closes).

Shapes: ``N`` copies (agents), ``C`` continuous action size, ``B`` discrete branches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from common.specs import BrainParameters
from envclient.session import EnvSession

logger = logging.getLogger(__name__)


class VectorEnv(Protocol):
    """``N`` copies of an environment stepped together, with Gymnasium's next-step auto-reset.

    After a step reports a copy terminated or truncated, the next ``step`` ignores that copy's
    action and returns its reset obs with reward 0 and both flags False.
    """

    @property
    def num_agents(self) -> int:
        """``N``: rows in every obs, reward and flag array."""
        ...

    @property
    def brain_parameters(self) -> BrainParameters:
        """The behavior's observation and action specs."""
        ...

    def reset(self) -> list[np.ndarray]:
        """Start every copy; one ``[N, *shape]`` array per observation spec."""
        ...

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """Apply float32 ``[N, C]`` and int ``[N, B]`` actions.

        Returns:
            ``(obs, rewards float32 [N], terminated bool [N], truncated bool [N])``.
        """
        ...


class VectorEnvWrapper:
    """Delegates every ``VectorEnv`` call to ``env``; subclass it and override what you observe or change."""

    def __init__(self, env: VectorEnv) -> None:
        self.env = env

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    @property
    def brain_parameters(self) -> BrainParameters:
        return self.env.brain_parameters

    def reset(self) -> list[np.ndarray]:
        return self.env.reset()

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        return self.env.step(continuous_actions, discrete_actions)


HISTORY = 100_000
"""Newest entries kept in each of RunStats' lists."""


def _trim(values: list[Any]) -> None:
    if len(values) > 2 * HISTORY:
        del values[:-HISTORY]


@dataclass
class RunStats:
    """What one ``run_env`` sent and saw; steps are counted as documented in the module docstring."""

    env_steps: int = 0
    """BrainInfos sent (vector steps, each with ``N`` rows)."""
    rows: int = 0
    """Agent rows sent."""
    first_sightings: int = 0
    """Rows that started an episode (no experience)."""
    episodes: int = 0
    """Episodes that ended (terminated or truncated)."""
    truncated_episodes: int = 0
    """Of those, ended by a time limit."""
    episode_returns: list[float] = field(default_factory=list)
    """Undiscounted return of each ended episode, in the order they ended."""
    episode_lengths: list[int] = field(default_factory=list)
    """Experiences of each ended episode."""
    policy_versions: list[int] = field(default_factory=list)
    """The policy version of each ActionInfo received, one per env step.

    The three lists keep at most the newest ``HISTORY`` entries (trimmed in amortised O(1)), so an
    env client that runs for days holds bounded memory."""
    wall_seconds: float = 0.0
    unanswered_experiences: int = 0
    """Experiences the rows of a BrainInfo sent but never answered imply (the session ended during that
    step: the processor may or may not have taken them in); 0 after every answered step."""

    @property
    def experiences(self) -> int:
        """Agent experiences the rows imply: ``rows - first_sightings``."""
        return self.rows - self.first_sightings

    @property
    def sent_experiences(self) -> int:
        """``experiences`` plus the unanswered ones: everything the rows this run sent imply."""
        return self.experiences + self.unanswered_experiences

    @property
    def agent_steps_per_s(self) -> float:
        return self.experiences / self.wall_seconds if self.wall_seconds > 0 else 0.0


class _EpisodeTracker:
    """Per-copy running return and length, fed one step's rows at a time."""

    def __init__(self, n: int, stats: RunStats) -> None:
        self.stats = stats
        self.returns = np.zeros(n, np.float64)
        self.lengths = np.zeros(n, np.int64)
        self.first = np.ones(n, bool)  # the next row of this copy is a first sighting

    def record(self, rewards: np.ndarray, done: np.ndarray, max_reached: np.ndarray) -> None:
        stats, first = self.stats, self.first
        stats.rows += len(first)
        stats.first_sightings += int(first.sum())
        counted = ~first
        self.returns[counted] += rewards[counted]
        self.lengths[counted] += 1
        ended = counted & done
        if ended.any():
            stats.episodes += int(ended.sum())
            stats.truncated_episodes += int((ended & max_reached).sum())
            stats.episode_returns.extend(self.returns[ended].tolist())
            stats.episode_lengths.extend(self.lengths[ended].tolist())
            _trim(stats.episode_returns)
            _trim(stats.episode_lengths)
            self.returns[ended] = 0.0
            self.lengths[ended] = 0
        # A copy that was first-sighted has started; one that is done starts again next row.
        self.first = done.copy()


async def run_env(
    session: EnvSession,
    env: VectorEnv,
    behavior_name: str,
    *,
    max_env_steps: int | None = None,
    stop: asyncio.Event | None = None,
    stats: RunStats | None = None,
) -> RunStats:
    """Step ``env`` through an open ``session`` until ``max_env_steps`` BrainInfos were sent or ``stop`` is set.

    Agent ids are ``0..N-1`` for the whole run: after a done, the same id's next row is a new
    episode (a first sighting). ``done = terminated | truncated``; ``max_reached = truncated &
    ~terminated``. The session stays open; closing it (which flushes partial trajectories) is the
    caller's.

    Args:
        session: an open session that declared ``behavior_name``.
        env: the environment; its actions come from the processor.
        behavior_name: the behavior the env's agents act for.
        max_env_steps: BrainInfos to send at most; None: until ``stop``.
        stop: checked before each step; the step in flight is finished first.
        stats: the ``RunStats`` to count into (a fresh one if None): the caller keeps what a run that
            raised had sent.

    Returns:
        The counts of what was sent and the episodes that ended.

    Raises:
        StepRejectedError: the processor ended the session.
        ValueError: ``max_env_steps`` and ``stop`` are both None (the run would never end).
    """
    if max_env_steps is None and stop is None:
        raise ValueError("give max_env_steps or stop, or the run never ends")
    stats = RunStats() if stats is None else stats
    n = env.num_agents
    agent_ids = np.arange(n, dtype=np.int64)
    tracker = _EpisodeTracker(n, stats)
    received = getattr(session, "environment_parameters", None)
    if received is not None and hasattr(env, "environment_parameters"):  # a GymVectorEnv: its resets draw from them
        env.environment_parameters = received
    obs = env.reset()
    rewards = np.zeros(n, np.float32)
    done = np.zeros(n, bool)
    max_reached = np.zeros(n, bool)
    started = time.monotonic()
    try:
        while (max_env_steps is None or stats.env_steps < max_env_steps) and not (stop is not None and stop.is_set()):
            stats.unanswered_experiences = n - int(tracker.first.sum())
            result = await session.step(behavior_name, agent_ids, obs, rewards, done, max_reached)
            stats.unanswered_experiences = 0
            stats.env_steps += 1
            tracker.record(rewards, done, max_reached)
            stats.policy_versions.append(int(result.policy_version))
            _trim(stats.policy_versions)
            if received is not None and received.reset_pending and done.all():  # the interrupted episodes were sent
                received.reset_pending = False
                obs, rewards, done, max_reached = env.reset(), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
                continue
            obs, rewards, terminated, truncated = env.step(result.continuous_actions, result.discrete_actions)
            rewards = np.asarray(rewards, np.float32)
            done = np.asarray(terminated, bool) | np.asarray(truncated, bool)
            max_reached = np.asarray(truncated, bool) & ~np.asarray(terminated, bool)
            if received is not None and received.reset_pending:  # a require_reset lesson began: every episode ends now
                max_reached |= ~done  # interrupted, as by a time limit; then every copy is reset
                done[:] = True
    finally:
        stats.wall_seconds = time.monotonic() - started
        logger.debug(
            "env run of %r ended: %d env steps, %d experiences, %d episodes",
            behavior_name,
            stats.env_steps,
            stats.experiences,
            stats.episodes,
        )
    return stats
