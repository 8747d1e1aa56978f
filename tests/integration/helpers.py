"""Helpers for the Step-stream integration tests: a harness around a running ProcessorServer, env
clients that record what they sent and got, and the trajectories those answers imply.

A real policy samples the actions, so no test knows them in advance: every client records the
``ActionResult`` of each BrainInfo, and expectations are built from the rows sent and the answers
received, by ``from_expect`` (a hand-written ``tests.assembly_cases.Expect``, its action code
``100 * agent + step`` read as "the action returned to that agent at that step") or by
``reference_trajectories`` (docs/architecture.md's assembly rules restated per agent, for random streams;
the served assembly cases check it against the hand-written table). ``assert_published`` compares
field by field: ids, obs, next_obs, masks, rewards, done, episode statistics and ``interrupted``
exactly; actions against what the client got (policies act with ``clip = inf``, so the env action
*is* the stored sample); policy versions against ``ActionInfo.policy_version``; log-probs finite,
``[T, C]`` / ``[T, B]``, and those the acting version gives the stored actions (recomputed).

Shapes: ``N`` rows in a BrainInfo, ``T`` experiences, ``C`` continuous size, ``B`` branches,
``M = sum(branches)``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from common.errors import TopicClosedError
from common.policy_contract import MASKED_LOGIT
from common.specs import BrainParameters
from common.topics import Subscription
from common.trajectory import Trajectory
from envclient.session import ActionResult, EnvSession
from processor.behaviors import Behavior, ProcessorSettings
from processor.inference import Policy
from processor.server import ProcessorServer
from protos import pb
from tests.assembly_cases import FLUSH, START, Expect, Step, brain_info_proto, expected_arrays, step_arrays
from tests.policies import build_mlp_policy_update

SUBSCRIBER = "itest"
"""The subscriber queue every test declares (``ProcessorSettings.declared_subscribers``)."""
LIVENESS_S = 20.0
"""Bound on every wait for something that must happen (generous: never a timing assertion)."""
STOP_GRACE_S = 0.5


def itest_settings(**overrides: object) -> ProcessorSettings:
    """ProcessorSettings declaring ``SUBSCRIBER`` on every trajectory topic, plus ``overrides``."""
    return ProcessorSettings(declared_subscribers=(SUBSCRIBER,), **overrides)  # type: ignore[arg-type]


def policy_update(params: BrainParameters, version: int, seed: int = 0) -> pb.PolicyUpdate:
    """A real MLP policy for ``params``; ``clip = inf`` makes the env action the stored sample."""
    shapes = [spec.shape for spec in params.observation_specs]
    return build_mlp_policy_update(
        params.behavior_name, shapes, params.action_spec.to_proto(), version, seed, tanh_squash=False, clip=math.inf
    )


async def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = LIVENESS_S) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout_s`` (a liveness bound)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.005)


class Harness:
    """A running ProcessorServer, its policies, and the test's subscription to its trajectory topics."""

    def __init__(self, server: ProcessorServer, address: str) -> None:
        assert SUBSCRIBER in server.settings.declared_subscribers, "use itest_settings()"
        self.server = server
        self.address = address
        self._policies: dict[tuple[str, int], Policy] = {}
        self._subscriptions: dict[str, Subscription[Trajectory]] = {}
        self._pool: dict[str, list[Trajectory]] = defaultdict(list)
        """Trajectories taken from the topic, not yet claimed by a client."""

    # -- policies --------------------------------------------------------------------------------

    def publish_policy(self, params: BrainParameters, version: int, seed: int = 0) -> None:
        """Publish a real MLP as ``version`` on the behavior's policy topic (and subscribe to its trajectories)."""
        update = policy_update(params, version, seed)
        self._policies[(params.behavior_name, version)] = Policy.from_update(update)
        assert self.server.topics.policies(params.behavior_name).publish(update, version)
        self.subscribe(params.behavior_name)

    def policy(self, behavior_name: str, version: int) -> Policy:
        """A private copy of the policy published as ``version`` (to recompute log-probs)."""
        return self._policies[(behavior_name, version)]

    def behavior(self, behavior_name: str) -> Behavior:
        return self.server.behaviors[behavior_name]

    async def wait_for_acting_version(self, behavior_name: str, version: int) -> None:
        """Wait until the behavior's batcher acts with ``version`` (the swap is asynchronous)."""

        def acting() -> bool:
            behavior = self.server.behaviors.get(behavior_name)
            return behavior is not None and behavior.batcher.policy is not None and behavior.batcher.policy.version == version

        await wait_until(acting, f"behavior '{behavior_name}' to act with policy version {version}")

    # -- trajectories ----------------------------------------------------------------------------

    def subscribe(self, behavior_name: str) -> None:
        if behavior_name not in self._subscriptions:
            settings = self.server.settings
            topic = self.server.topics.trajectories(behavior_name)
            self._subscriptions[behavior_name] = topic.subscribe(
                SUBSCRIBER, settings.trajectory_queue_size, settings.full_policy
            )

    async def _pull(self, behavior_name: str) -> None:
        """Move everything queued for the test's subscriber into the pool, acknowledging it."""
        self.subscribe(behavior_name)
        subscription = self._subscriptions[behavior_name]
        while True:
            try:
                deliveries = await subscription.aget(timeout_s=0)
            except TopicClosedError:  # closed and drained (after server.stop)
                return
            if not deliveries:
                return
            subscription.ack(d.tag for d in deliveries)
            self._pool[behavior_name].extend(d.item for d in deliveries)

    async def claim(self, behavior_name: str, session_ids: Collection[str] | None = None) -> list[Trajectory]:
        """The trajectories published so far by ``session_ids`` (all sessions if None), in publication order."""
        await self._pull(behavior_name)
        pool = self._pool[behavior_name]
        mine = [t for t in pool if session_ids is None or t.id.session_id in session_ids]
        self._pool[behavior_name] = [t for t in pool if not (session_ids is None or t.id.session_id in session_ids)]
        return mine

    def session_count(self) -> int:
        return len(self.server.sessions)


# -- clients that record ------------------------------------------------------------------------


@dataclass
class ServedRun:
    """What a set of clients sent, got and caused to be published, step by step."""

    params: BrainParameters
    steps: Sequence[Step]
    answers: dict[int, ActionResult] = field(default_factory=dict)
    """Step index -> the ActionInfo its BrainInfo got."""
    published: list[tuple[int, Trajectory]] = field(default_factory=list)
    """(the step whose answer preceded its publication, or FLUSH; trajectory), in publication order."""
    session_ids: dict[str, str] = field(default_factory=dict)
    """Session name in the steps -> the session id the processor gave it."""


class RecordingClient:
    """One real EnvSession for the steps of one session name; records answers and claims trajectories."""

    def __init__(self, harness: Harness, run: ServedRun, name: str, client_id: str | None = None) -> None:
        self.harness = harness
        self.run = run
        self.name = name
        self.session = EnvSession(harness.address, client_id or f"client-{name}", [run.params])
        self.session_id = ""

    async def open(self) -> None:
        self.session_id = await self.session.open()
        self.run.session_ids[self.name] = self.session_id

    async def send(self, k: int) -> ActionResult:
        """Send step ``k`` of the run (it must be this client's) and record what it got and published."""
        st = self.run.steps[k]
        assert st.session == self.name, f"step {k} belongs to session {st.session}, not {self.name}"
        answer = await self.session.send(brain_info_proto(st, self.run.params))
        n, spec, continuous, discrete = len(st.rows), self.run.params.action_spec, *answer[:2]
        assert (continuous.dtype, continuous.shape) == (np.float32, (n, spec.continuous_size)), f"step {k}: continuous"
        assert (discrete.dtype, discrete.shape) == (np.int32, (n, spec.num_branches)), f"step {k}: discrete"
        self.run.answers[k] = answer
        await self.collect(k)
        return answer

    async def collect(self, at: int) -> None:
        """Claim this session's trajectories published so far, as published at ``at`` (a step or FLUSH)."""
        for trajectory in await self.harness.claim(self.run.params.behavior_name, {self.session_id}):
            self.run.published.append((at, trajectory))

    async def close(self) -> None:
        """End the session cleanly; ``EnvSession.close`` returns once the processor flushed it."""
        await self.session.close()
        await self.collect(FLUSH)


async def play(client: RecordingClient, indices: Iterable[int]) -> None:
    """Send, in order, the steps among ``indices`` that belong to ``client``'s session."""
    for k in indices:
        if client.run.steps[k].session == client.name:
            await client.send(k)


async def serve_steps(
    harness: Harness,
    steps: Sequence[Step],
    params: BrainParameters,
    *,
    concurrent: bool = False,
    after_step: Mapping[int, Callable[[], Awaitable[None]]] | None = None,
) -> ServedRun:
    """Send ``steps`` through one real EnvSession per session name, then close every session.

    Sequentially in step order (``after_step[k]`` is awaited after step ``k``), or with each
    session's steps in its own coroutine, all sessions at once (``concurrent``).
    """
    run = ServedRun(params, steps)
    names = list(dict.fromkeys(st.session for st in steps))
    clients = {name: RecordingClient(harness, run, name) for name in names}
    if concurrent:
        assert not after_step, "after_step hooks need the sequential order"

        async def whole_session(client: RecordingClient) -> None:
            await client.open()
            await play(client, range(len(steps)))
            await client.close()

        await asyncio.gather(*(whole_session(c) for c in clients.values()))
        return run
    opened: set[str] = set()
    for k, st in enumerate(steps):
        if st.session not in opened:
            await clients[st.session].open()
            opened.add(st.session)
        await clients[st.session].send(k)
        if after_step and k in after_step:
            await after_step[k]()
    for client in clients.values():
        await client.close()
    return run


# -- expected trajectories ----------------------------------------------------------------------


@dataclass
class Expected:
    """One expected Trajectory, every array as the Trajectory holds it. Key: (session, agent, at)."""

    session: str
    agent_id: int
    at: int
    obs: list[np.ndarray]
    next_obs: list[np.ndarray]
    continuous_actions: np.ndarray
    discrete_actions: np.ndarray
    prev_continuous_actions: np.ndarray
    prev_discrete_actions: np.ndarray
    action_mask: np.ndarray | None
    rewards: np.ndarray
    done: np.ndarray
    policy_versions: np.ndarray
    done_reached: bool
    interrupted: bool
    episode: tuple[float, int] | None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.session, self.agent_id, self.at)

    @property
    def label(self) -> str:
        return f"session {self.session} agent {self.agent_id} ({'flush' if self.at == FLUSH else f'step {self.at}'})"


def _row_of(st: Step, agent_id: int) -> int:
    return next(r for r, row in enumerate(st.rows) if row.agent_id == agent_id)


def from_expect(want: Expect, run: ServedRun) -> Expected:
    """A hand-written expectation, with its action codes replaced by the answers the client got."""
    params, spec = run.params, run.params.action_spec
    c, b, t = spec.continuous_size, spec.num_branches, len(want.actions)
    arrays = expected_arrays(want, params)

    def answered(code: int) -> tuple[np.ndarray, np.ndarray, int]:
        agent_id, k = divmod(code, 100)
        answer, row = run.answers[k], _row_of(run.steps[k], agent_id)
        return answer.continuous_actions[row], answer.discrete_actions[row], answer.policy_version

    acted = [answered(code) for code in want.actions]
    before = [None if code == START else answered(code) for code in want.prev_actions]
    return Expected(
        session=want.session,
        agent_id=want.agent_id,
        at=want.at,
        obs=[arrays[f"obs[{i}]"] for i in range(len(params.observation_specs))],  # type: ignore[misc]
        next_obs=[arrays[f"next_obs[{i}]"] for i in range(len(params.observation_specs))],  # type: ignore[misc]
        continuous_actions=np.array([a[0] for a in acted], np.float32).reshape(t, c),
        discrete_actions=np.array([a[1] for a in acted], np.int32).reshape(t, b),
        prev_continuous_actions=np.array([np.zeros(c, np.float32) if p is None else p[0] for p in before], np.float32).reshape(
            t, c
        ),
        prev_discrete_actions=np.array([np.zeros(b, np.int32) if p is None else p[1] for p in before], np.int32).reshape(t, b),
        action_mask=arrays["action_mask"],
        rewards=arrays["rewards"],  # type: ignore[arg-type]
        done=arrays["done"],  # type: ignore[arg-type]
        policy_versions=np.array([a[2] for a in acted], np.int64),
        done_reached=want.done_reached,
        interrupted=want.interrupted,
        episode=want.episode,
    )


@dataclass
class _Agent:
    """The reference model's state of one agent since its last done."""

    last: tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray, int] | None = None
    """(obs per spec, mask [M], continuous [C], discrete [B], version) of its previous row."""
    prev: tuple[np.ndarray, np.ndarray] | None = None
    """The action before ``last``'s (None: zeros, the episode's first)."""
    steps: list[dict[str, object]] = field(default_factory=list)
    """The experiences of the trajectory being built."""
    episode_reward: float = 0.0
    episode_length: int = 0


def reference_trajectories(run: ServedRun, time_horizon: int) -> list[Expected]:
    """docs/architecture.md's assembly rules, restated per agent, over ``run``'s steps and answers.

    Every session ends (cleanly or not) with its partial trajectories flushed as interrupted.
    """
    params, spec = run.params, run.params.action_spec
    c, b, m = spec.continuous_size, spec.num_branches, spec.mask_width
    agents: dict[tuple[str, int], _Agent] = {}
    out: list[Expected] = []

    def cut(key: tuple[str, int], agent: _Agent, at: int, next_obs: list[np.ndarray], done: bool, max_reached: bool) -> None:
        steps, t = agent.steps, len(agent.steps)
        out.append(
            Expected(
                session=key[0],
                agent_id=key[1],
                at=at,
                obs=[np.array([s["obs"][i] for s in steps], o.dtype) for i, o in enumerate(next_obs)],  # type: ignore[index]
                next_obs=[np.asarray(o) for o in next_obs],
                continuous_actions=np.array([s["cont"] for s in steps], np.float32).reshape(t, c),
                discrete_actions=np.array([s["disc"] for s in steps], np.int32).reshape(t, b),
                prev_continuous_actions=np.array([s["prev_cont"] for s in steps], np.float32).reshape(t, c),
                prev_discrete_actions=np.array([s["prev_disc"] for s in steps], np.int32).reshape(t, b),
                action_mask=np.array([s["mask"] for s in steps], bool).reshape(t, m) if b else None,
                rewards=np.array([s["reward"] for s in steps], np.float32),
                done=np.array([s["done"] for s in steps], bool),
                policy_versions=np.array([s["version"] for s in steps], np.int64),
                done_reached=done,
                interrupted=(done and max_reached) or at == FLUSH,
                episode=(agent.episode_reward, agent.episode_length) if done else None,
            )
        )
        agent.steps = []

    for k, st in enumerate(run.steps):
        arrays, answer = step_arrays(st, params), run.answers[k]
        for r, row in enumerate(st.rows):
            key = (st.session, row.agent_id)
            agent = agents.setdefault(key, _Agent())
            obs = [o[r] for o in arrays.observations]
            if agent.last is not None:
                last_obs, mask, cont, disc, version = agent.last
                prev_cont, prev_disc = agent.prev or (np.zeros(c, np.float32), np.zeros(b, np.int32))
                agent.steps.append(
                    dict(obs=last_obs, mask=mask, cont=cont, disc=disc, prev_cont=prev_cont, prev_disc=prev_disc,
                         reward=row.reward, done=row.done, version=version)
                )  # fmt: skip
                agent.episode_reward += float(np.float32(row.reward))
                agent.episode_length += 1
                if row.done or len(agent.steps) == time_horizon:
                    cut(key, agent, k, obs, row.done, row.max_reached)
            if row.done:
                del agents[key]  # the answer to a done row is discarded
                continue
            mask = np.ones(m, bool) if arrays.action_mask is None else arrays.action_mask[r]
            agent.prev = None if agent.last is None else (agent.last[2], agent.last[3])
            agent.last = (obs, mask, answer.continuous_actions[r], answer.discrete_actions[r], answer.policy_version)
    for key, agent in agents.items():
        if agent.steps:
            assert agent.last is not None
            cut(key, agent, FLUSH, agent.last[0], False, False)
    return out


# -- checking ------------------------------------------------------------------------------------


def recomputed_log_probs(policy: Policy, trajectory: Trajectory, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The log-probs ``policy`` gives the stored actions of ``rows``: ``[R, C]`` and ``[R, B]`` (float64)."""
    outputs = policy.forward([o[rows] for o in trajectory.obs])
    continuous = np.zeros((len(rows), 0))
    if "mean" in outputs:
        mean, log_std = outputs["mean"].astype(np.float64), outputs["log_std"].astype(np.float64)
        z = (trajectory.continuous_actions[rows] - mean) / np.exp(log_std)
        continuous = -0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi)
    discrete = np.zeros((len(rows), 0))
    if "logits" in outputs:
        logits = outputs["logits"].astype(np.float64)
        mask = trajectory.action_mask[rows] if trajectory.action_mask is not None else np.ones(logits.shape, bool)
        masked = np.where(mask, logits, MASKED_LOGIT)
        columns = []
        start = 0
        for branch, size in enumerate(policy.action_spec.discrete_branches):
            part = masked[:, start : start + size]
            log_softmax = part - part.max(axis=1, keepdims=True)
            log_softmax -= np.log(np.exp(log_softmax).sum(axis=1, keepdims=True))
            chosen = trajectory.discrete_actions[rows, branch]
            columns.append(log_softmax[np.arange(len(rows)), chosen])
            start += size
        discrete = np.stack(columns, axis=1)
    return continuous, discrete


def assert_log_probs(actual: Trajectory, harness: Harness, label: str) -> None:
    """Log-probs: float32, ``[T, C]`` / ``[T, B]``, finite, and those of the version that acted."""
    t, c, b = actual.length, actual.continuous_actions.shape[1], actual.discrete_actions.shape[1]
    for name, shape in (("continuous_log_probs", (t, c)), ("discrete_log_probs", (t, b))):
        value = getattr(actual, name)
        assert value.dtype == np.float32 and value.shape == shape, f"{label}: {name} {value.dtype} {value.shape}"
        assert np.isfinite(value).all(), f"{label}: {name} not finite: {value}"
        assert (value <= 1e-5).all() or name == "continuous_log_probs", f"{label}: {name} above 0: {value}"
    for version in np.unique(actual.policy_versions):
        rows = np.flatnonzero(actual.policy_versions == version)
        policy = harness.policy(actual.behavior_name, int(version))
        continuous, discrete = recomputed_log_probs(policy, actual, rows)
        np.testing.assert_allclose(actual.continuous_log_probs[rows], continuous, rtol=1e-4, atol=1e-4, err_msg=label)
        np.testing.assert_allclose(actual.discrete_log_probs[rows], discrete, rtol=1e-4, atol=1e-4, err_msg=label)


_ARRAY_FIELDS = (
    *("continuous_actions", "discrete_actions", "prev_continuous_actions", "prev_discrete_actions", "action_mask"),
    *("rewards", "done", "policy_versions"),
)


def assert_trajectory(actual: Trajectory, want: Expected, run: ServedRun, harness: Harness) -> None:
    """``actual`` matches ``want`` in every field (log-probs by recomputation); failures name the field."""
    label = want.label
    assert actual.id.session_id == run.session_ids[want.session], f"{label}: id.session_id"
    assert actual.id.agent_id == want.agent_id, f"{label}: id.agent_id"
    assert actual.behavior_name == run.params.behavior_name, f"{label}: behavior_name"
    assert len(actual.obs) == len(want.obs) and len(actual.next_obs) == len(want.next_obs), f"{label}: observation count"
    for i, (got, expected) in enumerate(zip(actual.obs, want.obs, strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=f"{label}: obs[{i}]", strict=True)
    for i, (got, expected) in enumerate(zip(actual.next_obs, want.next_obs, strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=f"{label}: next_obs[{i}]", strict=True)
    for name in _ARRAY_FIELDS:
        got, expected = getattr(actual, name), getattr(want, name)
        if expected is None:
            assert got is None, f"{label}: {name} should be None, got {got!r}"
        else:
            assert got is not None, f"{label}: {name} is None"
            np.testing.assert_array_equal(got, expected, err_msg=f"{label}: {name}", strict=True)
    assert actual.done_reached is want.done_reached, f"{label}: done_reached"
    assert actual.interrupted is want.interrupted, f"{label}: interrupted"
    if want.episode is None:
        assert (actual.episode_reward, actual.episode_length) == (None, None), f"{label}: episode stats mid-episode"
    else:
        assert actual.episode_reward == pytest.approx(want.episode[0], rel=1e-6, abs=1e-9), f"{label}: episode_reward"
        assert actual.episode_length == want.episode[1], f"{label}: episode_length"
    assert_log_probs(actual, harness, label)


def assert_published(
    run: ServedRun,
    expected: Sequence[Expected],
    harness: Harness,
    *,
    sessions: Collection[str] | None = None,
    all_cut_published: bool = True,
) -> None:
    """Exactly ``expected`` was published by ``run`` (restricted to ``sessions``), each field by field.

    Also: within a session, trajectory sequence numbers rise in publication order; they are
    0, 1, 2, ... when every trajectory cut was published (``all_cut_published``).
    """
    names = {session_id: name for name, session_id in run.session_ids.items()}
    published = [(at, t) for at, t in run.published if sessions is None or names[t.id.session_id] in sessions]
    got = {(names[t.id.session_id], t.id.agent_id, at): t for at, t in published}
    want = {e.key: e for e in expected if sessions is None or e.session in sessions}
    assert len(got) == len(published), "an agent was published twice at one step"
    assert sorted(got) == sorted(want), f"published (session, agent, step) differ:\n got  {sorted(got)}\n want {sorted(want)}"
    for key, expectation in want.items():
        assert_trajectory(got[key], expectation, run, harness)
    for name in {names[t.id.session_id] for _, t in published}:
        sequences = [t.id.sequence for _, t in published if names[t.id.session_id] == name]
        assert sequences == sorted(set(sequences)), f"session {name}: sequence numbers {sequences}"
        if all_cut_published:
            assert sequences == list(range(len(sequences))), f"session {name}: sequence numbers {sequences}"
