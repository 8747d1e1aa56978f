"""The processor's per-behavior state: declaration, inference, topics, staleness and counters.

A behavior is **known** when the processor's config declares it or, outside the config, while a live
session's Hello declares it. Only a known behavior's topics are created: a configured behavior's at
start (a trainer may subscribe, or publish a policy, before any env client connects), another's at
its first Hello. A ``Behavior`` (the spec, inference and counters) exists from the first Hello that
declares it; one outside the config is freed when its last session ends, with its topics unless a
subscriber is attached to them (``BehaviorTable.release``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.config import BehaviorSettings, RunOptions
from common.environment_stats import MAX_STATS_PER_TRAJECTORY, EnvironmentStat
from common.errors import IN_DOUBT, ConfigError, ProtocolError, StepstreamError, UnknownBehaviorError
from common.logs import set_log_context
from common.specs import ActionSpec, BrainParameters
from common.staleness import is_stale
from common.topics import DEFAULT_RELEASE_AFTER_S, TRAINER_SUBSCRIBER, FullPolicy, TopicRegistry
from common.trajectory import Trajectory
from processor.batching import InferenceBatcher
from processor.exploration import HeldNoise
from processor.inference import Policy
from processor.wire import quoted
from protos import pb

log = logging.getLogger(__name__)

IN_DOUBT_LOG = "trajectory in doubt:"
"""Starts the warning that names each trajectory counted in doubt (its id follows)."""


@dataclass(frozen=True)
class BehaviorRuntime:
    """The processor-side settings of one behavior (from the run's config)."""

    time_horizon: int = 64
    """Experiences after which a trajectory is cut even without done, >= 1."""
    max_policy_lag: int | None = None
    """Drop (and count) trajectories acted by a policy more than this many versions behind the
    newest one; None keeps all."""
    trajectory_queue_size: int | None = None
    """Capacity (trajectories, queued + unacknowledged) of each subscriber queue of this behavior;
    None: ``ProcessorSettings.trajectory_queue_size``."""
    noise_hold_steps: int = 1
    """Steps each agent keeps one draw of its continuous action noise (``processor.exploration``); 1: fresh every step."""
    sde_latent_size: int = 0
    """gSDE (PPO's ``use_sde``): the rows L of each agent's held exploration matrix [L, C], the policy's latent
    width; 0: the noise is a Gaussian's own (``processor.exploration``)."""

    @classmethod
    def from_settings(cls, settings: BehaviorSettings) -> BehaviorRuntime:
        """The processor's view of one behavior's config (queue size: ``BehaviorSettings.trajectory_queue_size``)."""
        return cls(
            settings.time_horizon,
            settings.effective_max_policy_lag,
            settings.trajectory_queue_size,
            settings.noise_hold_steps,
            settings.sde_latent_size,
        )


@dataclass(frozen=True)
class ProcessorSettings:
    """Everything the processor needs to know, independent of how it is served."""

    behaviors: Mapping[str, BehaviorRuntime] = field(default_factory=dict)
    """Configured behaviors; with ``strict`` a Hello declaring any other is refused."""
    strict: bool = False
    default_runtime: BehaviorRuntime = BehaviorRuntime()
    """Settings of behaviors not listed (only when not ``strict``)."""
    declared_subscribers: tuple[str, ...] = (TRAINER_SUBSCRIBER,)
    """Subscriber queues declared on every behavior's trajectory topic before any publish."""
    trajectory_queue_size: int = 1024
    """Capacity (trajectories, queued + unacknowledged) of each subscriber queue."""
    full_policy: FullPolicy = FullPolicy.BLOCK
    subscriber_release_after_s: float | None = DEFAULT_RELEASE_AFTER_S
    """How long a ``block`` queue whose subscriber detached keeps holding back publishers; after it, the queue
    drops its oldest items instead (metric ``queue_released``) until a subscriber attaches. None: for ever."""
    publish_timeout_s: float | None = None
    """How long a session waits for room on a full ``block`` topic; None waits forever."""
    max_batch_rows: int = 4096
    """Rows of one inference forward pass at most."""
    batch_deadline_ms: float = 2.0
    """How long the first request of a forward pass waits for others to join it."""
    first_policy_timeout_s: float = 120.0
    """How long a BrainInfo waits for its behavior's first policy before failing."""
    max_agents_per_brain_info: int = 16384
    """Rows one BrainInfo may carry; a larger one is refused (INVALID_ARGUMENT) before inference."""
    max_agents_per_session: int = 65536
    """Live agents (seen since their last done) one session may hold over all its behaviors; a BrainInfo
    that would pass it is refused (RESOURCE_EXHAUSTED). See ``processor.assembly`` for the bytes per agent."""
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_agents_per_brain_info", "max_agents_per_session"):
            if getattr(self, name) < 1:
                raise ConfigError(f"processor settings: {name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_run_options(cls, run_options: RunOptions, **overrides: Any) -> ProcessorSettings:
        """The processor's view of a run's config: each behavior's time_horizon and staleness bound.

        Behaviors outside the config are refused unless ``default_settings`` covers them.
        """
        behaviors = {name: BehaviorRuntime.from_settings(b) for name, b in run_options.behaviors.items()}
        fields: dict[str, Any] = {"behaviors": behaviors, "strict": run_options.default_settings is None}
        if run_options.default_settings is not None:
            fields["default_runtime"] = BehaviorRuntime.from_settings(run_options.default_settings)
        fields.update(overrides)
        return cls(**fields)

    def runtime(self, behavior_name: str) -> BehaviorRuntime:
        runtime = self.behaviors.get(behavior_name)
        if runtime is not None:
            return runtime
        if self.strict:
            raise UnknownBehaviorError(
                f"behavior '{behavior_name}' is not in the processor's config (configured: {sorted(self.behaviors)})"
            )
        return self.default_runtime


@dataclass
class BehaviorCounters:
    """Running totals of one behavior; experiences are agent steps."""

    published_trajectories: int = 0
    published_experiences: int = 0
    flushed_trajectories: int = 0
    flushed_experiences: int = 0
    stale_dropped_trajectories: int = 0
    stale_dropped_experiences: int = 0
    unpublished_trajectories: int = 0
    """Trajectories lost to a topic that stayed full past publish_timeout_s, or closed."""
    unpublished_experiences: int = 0
    in_doubt_trajectories: int = 0
    """Trajectories whose publish failed awaiting the broker's answer: the broker may have stored them, and the
    trainer may take them in (``common.errors.PublishInDoubtError``). Neither published nor dropped."""
    in_doubt_experiences: int = 0
    undeliverable_trajectories: int = 0
    """Trajectories dropped by Subscribe because no message could carry them (larger than the limit)."""
    undeliverable_experiences: int = 0


class Behavior:
    """One declared behavior: its BrainParameters, inference batcher, topics and counters."""

    def __init__(self, params: BrainParameters, runtime: BehaviorRuntime, settings: ProcessorSettings, topics: TopicRegistry):
        self.params = params
        self.runtime = runtime
        self.counters = BehaviorCounters()
        self.trajectories = topics.trajectories(params.behavior_name)
        self.policies = topics.policies(params.behavior_name)
        self._publish_timeout_s = settings.publish_timeout_s
        self.batcher = InferenceBatcher(
            params.behavior_name,
            max_batch_rows=settings.max_batch_rows,
            deadline_ms=settings.batch_deadline_ms,
            first_policy_timeout_s=settings.first_policy_timeout_s,
            rng=np.random.default_rng(settings.seed),
        )
        # Held exploration noise gets one generator per session, spawned from the run's seed: reproducible, and no
        # two sessions draw the same sequence.
        self._noise_seeds = np.random.SeedSequence(settings.seed)
        self._follower: asyncio.Task[None] | None = None
        self._loaded: dict[int, tuple[pb.PolicyUpdate, Policy]] = {}
        self.active_sessions = 0
        self.finished = False
        """Its trainer reported FinishTraining: cut trajectories are dropped (counted as unpublished)."""
        self._environment_stats: collections.deque[EnvironmentStat] = collections.deque(maxlen=MAX_STATS_PER_TRAJECTORY)
        """The envs' own statistics (any session's) for the next published trajectory; the oldest give way."""

    @property
    def name(self) -> str:
        return self.params.behavior_name

    def held_noise(self) -> HeldNoise | None:
        """A new session's per-agent held action noise, or None where noise is fresh every step (``noise_hold_steps``
        1, or no continuous actions). With a gSDE policy each agent holds a matrix, of the latent size the acting
        policy's artifact gives (``InferenceBatcher.sde_latent_size``)."""
        size = self.params.action_spec.continuous_size
        if self.runtime.noise_hold_steps <= 1 or size == 0:
            return None
        rng = np.random.default_rng(self._noise_seeds.spawn(1)[0])
        return HeldNoise(size, self.runtime.noise_hold_steps, rng, policy_latent_size=self.batcher.sde_latent_size)

    def session_started(self) -> None:
        """A session that declared this behavior opened: the batcher waits for one more request."""
        self.active_sessions += 1
        self.batcher.set_active_sessions(self.active_sessions)

    def session_ended(self) -> None:
        self.active_sessions -= 1
        self.batcher.set_active_sessions(self.active_sessions)

    def loaded(self, version: int, update: pb.PolicyUpdate, policy: Policy) -> None:
        """``policy`` was already loaded from ``update`` (PublishPolicy loads it to validate it): when the
        topic hands the follower that very update as ``version``, it acts with this instead of loading it again."""
        self._loaded[version] = (update, policy)

    def check_policy(self, policy: Policy, version: int) -> None:
        """Refuse a policy whose observation shapes or action spec differ from the declared BrainParameters.

        Raises:
            ProtocolError: (precondition) naming both specs.
        """
        spec = ActionSpec.from_proto(policy.action_spec)
        shapes = [tuple(s.shape) for s in self.params.observation_specs]
        if spec != self.params.action_spec or [tuple(s) for s in policy.observation_shapes] != shapes:
            takes = [list(s) for s in policy.observation_shapes]
            raise ProtocolError(
                f"behavior {quoted(self.name)}: policy version {version} takes obs {takes} and acts {spec};"
                f" the behavior declares obs {[list(s) for s in shapes]} and {self.params.action_spec}",
                precondition=True,
            )

    def _policy_of(self, version: int, update: pb.PolicyUpdate) -> Policy:
        loaded = self._loaded.pop(version, None)
        for older in [v for v in self._loaded if v < version]:  # skipped by latest-wins: never asked for
            del self._loaded[older]
        if loaded is not None and loaded[0] is update:
            return loaded[1]
        return Policy.from_update(update)

    def start(self) -> None:
        """Start following the policy topic (call from the event loop)."""
        # In a log context of its own (this behavior, no client): it would otherwise inherit the context of
        # the session whose Hello declared the behavior, and log that client id for as long as it runs.
        context = contextvars.Context()
        context.run(set_log_context, behavior=self.name)
        loop = asyncio.get_running_loop()
        self._follower = context.run(loop.create_task, self._follow_policies(), name=f"policies/{self.name}")

    def cancel(self) -> None:
        """Stop following the policy topic without waiting (a released behavior)."""
        if self._follower is not None:
            self._follower.cancel()

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower

    async def _follow_policies(self) -> None:
        """Swap each newer policy version into the batcher (latest-wins)."""
        version = -1
        while True:
            newer = await self.policies.await_newer(version)
            if newer is None:
                continue
            version, update = newer
            try:
                policy = self._policy_of(version, update)
            except StepstreamError:
                log.exception(
                    "behavior '%s': policy version %d cannot be loaded; keeping the previous one", self.name, version
                )
                continue
            try:  # published before a Hello declared the spec (or for an earlier declaration): never adopted
                self.check_policy(policy, version)
            except ProtocolError as err:
                log.error("%s; not adopted, keeping the previous one", err)
                continue
            self.batcher.set_policy(policy)
            # One per trainer update (every few tens of ms for PPO on CartPole): too many for INFO. The version
            # acting is on the metrics endpoint and in the trainer's summary line.
            log.debug("behavior '%s': acting with policy version %d", self.name, version)

    def add_environment_stats(self, stats: Iterable[EnvironmentStat]) -> None:
        """Hold a BrainInfo's environment stats until the next trajectory published (``publish``) carries them."""
        self._environment_stats.extend(stats)

    async def publish(self, trajectories: list[Trajectory], *, flushed: bool = False) -> None:
        """Publish cut trajectories, dropping (and counting) those older than ``max_policy_lag``.

        Awaits room on ``block`` topics: this is what backpressures env clients. When a publish
        fails (or the caller is cancelled while it waits), every later trajectory of the list counts
        as unpublished before the error is raised: nothing leaks uncounted. The failed one counts as
        unpublished too, unless the broker may have stored it (``common.errors.IN_DOUBT``): it then
        counts as in doubt, and its id is logged, so that a ledger of what the trainer took in can
        tell which way it went (``benchmarks/broker_faults.py``).
        """
        lag = self.runtime.max_policy_lag
        newest = self.policies.highest_version
        c = self.counters
        failure: BaseException | None = None
        for trajectory in trajectories:
            if self.finished:  # no trainer takes them any more: nothing to hold the env clients back for
                c.unpublished_trajectories += 1
                c.unpublished_experiences += trajectory.length
                continue
            if flushed:
                c.flushed_trajectories += 1
                c.flushed_experiences += trajectory.length
            if is_stale(trajectory, newest, lag):
                c.stale_dropped_trajectories += 1
                c.stale_dropped_experiences += trajectory.length
                continue
            if failure is None:
                stats = self._take_environment_stats(trajectory)
                try:
                    await self.trajectories.publish(trajectory, self._publish_timeout_s)
                except (StepstreamError, asyncio.CancelledError) as err:
                    failure = err
                    self._environment_stats.extendleft(reversed(stats))  # for the next one
                    if isinstance(err, IN_DOUBT):
                        c.in_doubt_trajectories += 1
                        c.in_doubt_experiences += trajectory.length
                        log.warning("%s %s (%d experiences): %s", IN_DOUBT_LOG, trajectory.id, trajectory.length, err)
                        continue
                else:
                    c.published_trajectories += 1
                    c.published_experiences += trajectory.length
                    continue
            c.unpublished_trajectories += 1
            c.unpublished_experiences += trajectory.length
        if failure is not None:
            raise failure

    def _take_environment_stats(self, trajectory: Trajectory) -> tuple[EnvironmentStat, ...]:
        stats = tuple(self._environment_stats)
        if stats:
            self._environment_stats.clear()
            trajectory.environment_stats = (*trajectory.environment_stats, *stats)
        return stats

    def status(self) -> pb.PolicyStatus:
        msg = pb.PolicyStatus(behavior_name=self.name, highest_version=self.policies.highest_version)
        msg.brain_parameters.CopyFrom(self.params.to_proto())
        return msg


class BehaviorTable:
    """Every behavior the processor knows, created at the first Hello that declares it."""

    def __init__(self, settings: ProcessorSettings, topics: TopicRegistry) -> None:
        self.settings = settings
        self.topics = topics
        self._behaviors: dict[str, Behavior] = {}
        self.finished: set[str] = set()
        """Behaviors whose trainer reported FinishTraining (``finish``), until a new subscription ``reopen``s one."""
        for name in settings.behaviors:
            self._declare_topics(name)

    def queue_size(self, name: str) -> int:
        """Capacity of each subscriber queue of behavior ``name``."""
        runtime = self.settings.behaviors.get(name, self.settings.default_runtime)
        return runtime.trajectory_queue_size or self.settings.trajectory_queue_size

    def _declare_topics(self, name: str) -> None:
        topic = self.topics.trajectories(name)
        for subscriber in self.settings.declared_subscribers:
            topic.declare(
                subscriber,
                self.queue_size(name),
                self.settings.full_policy,
                release_after_s=self.settings.subscriber_release_after_s,
            )

    def __getitem__(self, name: str) -> Behavior:
        behavior = self._behaviors.get(name)
        if behavior is None:
            raise UnknownBehaviorError(f"behavior '{name}' was never declared by an env client")
        return behavior

    def get(self, name: str) -> Behavior | None:
        return self._behaviors.get(name)

    def known(self, name: str) -> bool:
        """Whether the config declares ``name`` or a live session's Hello did."""
        return name in self.settings.behaviors or name in self._behaviors

    def require_known(self, name: str) -> None:
        """Refuse a query (Subscribe, PublishPolicy, GetPolicyStatus) for a behavior that is not known.

        Raises:
            UnknownBehaviorError: neither the config nor a live session declares it.
        """
        if not self.known(name):
            raise UnknownBehaviorError(
                f"behavior {quoted(name)} is not known: not in the processor's config and not declared by a live env client"
            )

    def runtime(self, name: str) -> BehaviorRuntime:
        """The settings behavior ``name`` would be declared with.

        Raises:
            UnknownBehaviorError: the config is strict and does not list it.
        """
        existing = self._behaviors.get(name)
        return existing.runtime if existing is not None else self.settings.runtime(name)

    def release(self, behaviors: Iterable[Behavior]) -> None:
        """Free each of ``behaviors`` that no live session declares and the config does not hold.

        Its inference and counters go, and its topics too unless a subscriber is attached to its
        trajectory topic (a trainer that waits for the next env client keeps them, with the latest
        policy); trajectories still queued for an absent subscriber are dropped, and logged.
        """
        for behavior in behaviors:
            if behavior.active_sessions > 0 or behavior.name in self.settings.behaviors:
                continue
            if self._behaviors.get(behavior.name) is not behavior:
                continue  # released already
            del self._behaviors[behavior.name]
            behavior.cancel()
            dropped = self.topics.discard(behavior.name)
            if dropped is None:
                log.info("behavior '%s' released (no live session declares it); a subscriber keeps its topics", behavior.name)
            else:
                log.info("behavior '%s' released with its topics (%d trajectories dropped)", behavior.name, dropped)

    def values(self) -> list[Behavior]:
        return list(self._behaviors.values())

    def declare(self, params: BrainParameters) -> Behavior:
        """The behavior of these BrainParameters, created on first declaration.

        Raises:
            UnknownBehaviorError: the config is strict and does not list the behavior.
            ProtocolError: (precondition) the behavior exists with other BrainParameters.
        """
        existing = self._behaviors.get(params.behavior_name)
        if existing is not None:
            if existing.params != params:
                raise ProtocolError(
                    f"behavior '{params.behavior_name}' is already declared with other BrainParameters: "
                    f"{_describe(existing.params, params)} != {_describe(params, existing.params)}",
                    precondition=True,
                )
            return existing
        runtime = self.settings.runtime(params.behavior_name)
        self._declare_topics(params.behavior_name)
        behavior = self._behaviors[params.behavior_name] = Behavior(params, runtime, self.settings, self.topics)
        behavior.finished = params.behavior_name in self.finished
        behavior.start()
        log.info("behavior '%s' declared: %s", params.behavior_name, _describe(params))
        return behavior

    def finish(self, name: str, trainer_step: int, policy_version: int) -> None:
        """Mark ``name``'s training finished: its declared subscriber queues go (waking publishers blocked on them,
        whose trajectories are dropped from then on), and sessions whose behaviors are all finished end."""
        self.require_known(name)
        if name in self.finished:
            return
        self.finished.add(name)
        behavior = self._behaviors.get(name)
        if behavior is not None:
            behavior.finished = True
        topic = self.topics.trajectories(name)
        topic.expect_no_subscribers()
        remove = getattr(topic, "remove", None)  # the broker's streams hold no publisher back
        for subscriber in self.settings.declared_subscribers:
            if remove is not None:
                remove(subscriber)
        log.info(
            "training of behavior '%s' finished (trainer step %d, policy version %d); its env clients are told to end",
            name, trainer_step, policy_version,
        )  # fmt: skip

    def reopen(self, name: str) -> None:
        """A trainer subscribes to a finished behavior (a new run against a processor that serves on): train it again."""
        if name not in self.finished:
            return
        self.finished.discard(name)
        behavior = self._behaviors.get(name)
        if behavior is not None:
            behavior.finished = False
        self._declare_topics(name)
        log.info("behavior '%s' reopened for training by a new subscription", name)

    def sessions_end(self, names: list[str]) -> bool:
        """Whether a session declaring ``names`` ends: when they and every other behavior have finished training.

        A behavior whose trainer finished while others train goes on being served with its last policy, publishing
        nothing (its trainer queue is gone), as mlagents-learn steps every agent until every trainer is done.
        """
        return bool(names) and all(name in self.finished for name in names) and self.all_finished()

    def all_finished(self) -> bool:
        """Every configured behavior (or, without a config, every one declared) has finished training."""
        names = set(self.settings.behaviors) or set(self._behaviors) | self.finished
        return bool(names) and names <= self.finished

    async def stop(self) -> None:
        for behavior in self._behaviors.values():
            await behavior.stop()


def _describe(params: BrainParameters, other: BrainParameters | None = None) -> str:
    """The spec in one line; beside ``other``, with the observation names where the two name them differently."""
    names = other is not None and [s.name for s in params.observation_specs] != [s.name for s in other.observation_specs]
    obs = ", ".join(f"{s.dtype.name}{list(s.shape)}" + (f" {s.name!r}" if names else "") for s in params.observation_specs)
    spec = params.action_spec
    return f"obs [{obs}], continuous {spec.continuous_size}, branches {list(spec.discrete_branches)}"
