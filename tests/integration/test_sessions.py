"""Sessions through the real server: batching across them, their ends (clean, abrupt, replaced,
server shutdown), conservation of experiences, and the policy they act with (first wait, swap).

Every run's trajectories are checked field by field against ``reference_trajectories`` (docs/architecture.md's
rules restated per agent over the rows sent and the answers received; see ``helpers``).
"""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from envclient.session import StepRejectedError
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from tests.assembly_cases import CONTINUOUS, FLUSH, HYBRID, R, Step, brain_info_proto, implied_experiences, random_steps, step
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import (
    LIVENESS_S,
    STOP_GRACE_S,
    SUBSCRIBER,
    Harness,
    RecordingClient,
    ServedRun,
    assert_published,
    itest_settings,
    play,
    reference_trajectories,
    serve_steps,
    wait_until,
)

TIME_HORIZON = 5


async def start(start_processor: StartProcessor, settings: ProcessorSettings | None = None) -> Harness:
    runtime = {p.behavior_name: BehaviorRuntime(time_horizon=TIME_HORIZON) for p in (CONTINUOUS, HYBRID)}
    server, address = await start_processor(settings or itest_settings(behaviors=runtime))
    return Harness(server, address)


# -- batching ------------------------------------------------------------------------------------


def one_option_mask(agent_id: int) -> tuple[int, ...]:
    """A HYBRID mask (branches 3 and 2) allowing only (agent_id % 3, agent_id % 2)."""
    return tuple(int(j == agent_id % 3) for j in range(3)) + tuple(int(j == agent_id % 2) for j in range(2))


async def test_forward_passes_hold_rows_of_several_sessions(start_processor: StartProcessor) -> None:
    """Four clients step at once; the batcher's passes hold several sessions' rows, each handed back to its own."""
    # A pass runs once every active session has a request in, or at the deadline: a long one keeps a slow
    # client from missing its pass on a loaded machine (it only adds latency, and only if one is late).
    runtime = {HYBRID.behavior_name: BehaviorRuntime(time_horizon=TIME_HORIZON)}
    harness = await start(start_processor, itest_settings(behaviors=runtime, batch_deadline_ms=100.0))
    harness.publish_policy(HYBRID, version=1)
    rng = np.random.default_rng(2)
    steps: list[Step] = []
    for k in range(8):
        for s in range(4):
            agents = [int(a) for a in rng.permutation([10 * s + j for j in range(6)])]  # every (a % 3, a % 2) once
            rows = [R(a, a + k / 8, float(rng.integers(0, 4)), done=bool(rng.random() < 0.15)) for a in agents]
            steps.append(step(*rows, masks=[one_option_mask(a) for a in agents], session=f"s{s}"))

    run = await serve_steps(harness, steps, HYBRID, concurrent=True)

    counters = harness.behavior(HYBRID.behavior_name).batcher.counters
    assert counters.requests == len(steps) and counters.rows == sum(len(st.rows) for st in steps)
    assert sum(n * passes for n, passes in counters.requests_per_pass.items()) == counters.requests
    assert max(counters.requests_per_pass) > 1, f"no pass held two sessions' requests: {counters.requests_per_pass}"
    assert max(counters.rows_per_pass) > 6, f"no pass held more rows than one request: {counters.rows_per_pass}"
    assert counters.failed_passes == 0
    for k, st in enumerate(steps):  # each row got its own (only allowed) choice back
        wanted = np.array([[row.agent_id % 3, row.agent_id % 2] for row in st.rows], np.int32)
        np.testing.assert_array_equal(run.answers[k].discrete_actions, wanted, err_msg=f"step {k}", strict=True)
    assert_published(run, reference_trajectories(run, TIME_HORIZON), harness)


# -- how sessions end ----------------------------------------------------------------------------


def walker_steps(session: str, agents: list[int], count: int, start: float = 0.0, done_at: int | None = None) -> list[Step]:
    """``count`` Walker steps of ``agents`` (obs ``agent + start + k/10``); all done at step ``done_at``."""
    return [
        step(*(R(a, a + start + k / 10, 0.25 * (k + a), done=k == done_at) for a in agents), session=session)
        for k in range(count)
    ]


def interleave(*sessions: list[Step]) -> tuple[Step, ...]:
    """Round-robin over the sessions' step lists."""
    out: list[Step] = []
    for k in range(max(map(len, sessions))):
        out += [steps[k] for steps in sessions if k < len(steps)]
    return tuple(out)


async def kill(client: RecordingClient, how: str) -> None:
    """End ``client``'s stream abruptly, as a crashing process would (the real client only closes cleanly)."""
    session = client.session
    if how == "channel_closed":
        assert session._channel is not None
        await session._channel.close()  # no done_writing first
    else:
        assert session._call is not None
        session._call.cancel()


@pytest.mark.parametrize("how", ["channel_closed", "call_cancelled"])
async def test_disconnect_mid_episode_flushes_and_reclaims_the_session(how: str, start_processor: StartProcessor) -> None:
    harness = await start(start_processor)
    harness.publish_policy(CONTINUOUS, version=1)
    victim_steps = walker_steps("victim", [1, 2, 3], count=4)  # mid-episode when killed; 3 experiences each
    good_steps = walker_steps("good", [1, 2], count=8, start=5.0, done_at=6)
    run = ServedRun(CONTINUOUS, interleave(victim_steps, good_steps))
    victim, good = RecordingClient(harness, run, "victim"), RecordingClient(harness, run, "good")
    await victim.open()
    await good.open()
    await play(victim, range(len(run.steps)))
    await play(good, range(6))

    await kill(victim, how)
    counters = harness.behavior(CONTINUOUS.behavior_name).counters
    behavior = harness.behavior(CONTINUOUS.behavior_name)
    await wait_until(
        lambda: harness.session_count() == 1 and counters.flushed_trajectories == counters.published_trajectories == 3,
        "the victim to be flushed",
    )
    assert behavior.active_sessions == 1 and behavior.batcher.active_sessions == 1
    await victim.collect(FLUSH)
    await play(good, range(6, len(run.steps)))
    await good.close()

    assert (counters.flushed_trajectories, counters.flushed_experiences) == (3, 9)
    assert counters.published_experiences == implied_experiences(run.steps)
    expected = reference_trajectories(run, TIME_HORIZON)
    assert [e.interrupted and not e.done_reached for e in expected if e.session == "victim"] == [True] * 3
    assert_published(run, expected, harness)
    assert harness.session_count() == 0 and behavior.active_sessions == 0


async def test_a_new_hello_with_a_live_client_id_replaces_the_session(start_processor: StartProcessor) -> None:
    harness = await start(start_processor)
    harness.publish_policy(CONTINUOUS, version=1)
    old_steps = walker_steps("old", [1, 2], count=4)  # the last is refused: the session was replaced
    new_steps = walker_steps("new", [1, 2], count=4, start=3.0, done_at=3)  # the same agent ids start afresh
    good_steps = walker_steps("good", [1, 2], count=7, start=5.0, done_at=5)
    run = ServedRun(CONTINUOUS, (*interleave(old_steps[:3], good_steps[:3]), *interleave(new_steps, good_steps[3:])))
    old = RecordingClient(harness, run, "old", client_id="sim")
    new = RecordingClient(harness, run, "new", client_id="sim")
    good = RecordingClient(harness, run, "good")
    await old.open()
    await good.open()
    await play(old, range(6))
    await play(good, range(6))

    await new.open()
    counters = harness.behavior(CONTINUOUS.behavior_name).counters
    await wait_until(lambda: counters.flushed_trajectories == counters.published_trajectories == 2, "the old session's flush")
    assert harness.session_count() == 2 and harness.behavior(CONTINUOUS.behavior_name).active_sessions == 2
    with pytest.raises(StepRejectedError) as replaced:
        await old.session.send(brain_info_proto(old_steps[3], CONTINUOUS))
    await old.collect(FLUSH)
    await old.session.close()
    await play(new, range(6, len(run.steps)))
    await play(good, range(6, len(run.steps)))
    await new.close()
    await good.close()

    assert replaced.value.code == grpc.StatusCode.ABORTED
    assert f"session {old.session_id} was replaced by a newer session of client 'sim'" in replaced.value.details
    assert harness.server.sessions.replaced == 1 and new.session_id != old.session_id
    assert (counters.flushed_trajectories, counters.flushed_experiences) == (2, 4)  # the old session's; the others ended
    assert_published(run, reference_trajectories(run, TIME_HORIZON), harness)
    assert harness.session_count() == 0


async def test_graceful_stop_flushes_live_sessions(start_processor: StartProcessor) -> None:
    harness = await start(start_processor)
    harness.publish_policy(CONTINUOUS, version=1)
    run = ServedRun(CONTINUOUS, tuple(walker_steps("live", [1, 2, 3], count=3)))
    client = RecordingClient(harness, run, "live")
    await client.open()
    await play(client, range(len(run.steps)))

    await harness.server.stop(STOP_GRACE_S)
    await client.collect(FLUSH)

    expected = reference_trajectories(run, TIME_HORIZON)
    assert len(expected) == 3 and all(e.interrupted and e.at == FLUSH for e in expected)
    assert_published(run, expected, harness)
    assert harness.server.topics.trajectories(CONTINUOUS.behavior_name).closed
    with pytest.raises(StepRejectedError):  # the stream is over
        await client.session.send(brain_info_proto(run.steps[-1], CONTINUOUS))
    await client.session.close()


# -- conservation ---------------------------------------------------------------------------------


async def test_every_implied_experience_is_published_or_counted(start_processor: StartProcessor) -> None:
    """Four clients at once, random episode ends, a policy swap with max_policy_lag=0 halfway (so some trajectories are stale).

    Identity: experiences the clients' rows imply == published + stale-dropped + unpublished
    (flushed trajectories are published or stale-dropped like any other, and counted in those too).
    """
    runtime = {CONTINUOUS.behavior_name: BehaviorRuntime(time_horizon=6, max_policy_lag=0)}
    harness = await start(start_processor, itest_settings(behaviors=runtime))
    harness.publish_policy(CONTINUOUS, version=1)
    steps = random_steps(7, num_steps=160, num_agents=8, sessions=("a", "b", "c", "d"))
    half = len(steps) // 2
    run = ServedRun(CONTINUOUS, steps)
    clients = [RecordingClient(harness, run, name) for name in ("a", "b", "c", "d")]
    await asyncio.gather(*(c.open() for c in clients))

    await asyncio.gather(*(play(c, range(half)) for c in clients))
    harness.publish_policy(CONTINUOUS, version=2, seed=1)
    await harness.wait_for_acting_version(CONTINUOUS.behavior_name, 2)
    await asyncio.gather(*(play(c, range(half, len(steps))) for c in clients))
    await asyncio.gather(*(c.close() for c in clients))

    counters = harness.behavior(CONTINUOUS.behavior_name).counters
    implied = implied_experiences(steps)
    assert implied == counters.published_experiences + counters.stale_dropped_experiences + counters.unpublished_experiences
    assert counters.stale_dropped_trajectories > 0 and counters.unpublished_experiences == 0
    received = [t for _, t in run.published]
    assert (len(received), sum(t.length for t in received)) == (
        counters.published_trajectories,
        counters.published_experiences,
    )
    # Exactly the trajectories cut after the swap that hold a version-1 step were dropped.
    cut = reference_trajectories(run, time_horizon=6)
    stale = [e for e in cut if (e.at >= half or e.at == FLUSH) and e.policy_versions.min() < 2]
    assert sum(len(e.rewards) for e in stale) == counters.stale_dropped_experiences
    assert sum(e.at == FLUSH for e in cut) == counters.flushed_trajectories
    assert_published(run, [e for e in cut if not any(e is s for s in stale)], harness, all_cut_published=False)


# -- the policy sessions act with ----------------------------------------------------------------


async def test_a_brain_info_before_any_policy_waits_for_the_first(start_processor: StartProcessor) -> None:
    harness = await start(start_processor)
    run = ServedRun(CONTINUOUS, tuple(walker_steps("s", [1, 2], count=4, done_at=3)))
    client = RecordingClient(harness, run, "s")
    await client.open()

    first = asyncio.ensure_future(client.send(0))
    await wait_until(  # the batcher's count of requests waiting for a first policy: no public signal says so
        lambda: (b := harness.server.behaviors.get(CONTINUOUS.behavior_name)) is not None and b.batcher._policy_waiters == 1,
        "the first BrainInfo to wait for a policy",
    )
    assert not first.done()
    harness.publish_policy(CONTINUOUS, version=4)
    assert (await asyncio.wait_for(first, LIVENESS_S)).policy_version == 4
    await play(client, range(1, len(run.steps)))
    await client.close()

    assert [a.policy_version for a in run.answers.values()] == [4] * 4
    assert_published(run, reference_trajectories(run, TIME_HORIZON), harness)


async def test_no_first_policy_in_time_fails_with_deadline_exceeded(start_processor: StartProcessor) -> None:
    runtime = {CONTINUOUS.behavior_name: BehaviorRuntime(time_horizon=TIME_HORIZON)}
    harness = await start(start_processor, itest_settings(behaviors=runtime, first_policy_timeout_s=0.05))
    run = ServedRun(CONTINUOUS, tuple(walker_steps("s", [1], count=1)))
    client = RecordingClient(harness, run, "s")
    await client.open()

    with pytest.raises(StepRejectedError) as refused:
        await client.send(0)
    await client.session.close()

    assert refused.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "behavior 'Walker': no policy arrived within 0.05 s" in refused.value.details
    assert harness.behavior(CONTINUOUS.behavior_name).batcher.counters.first_policy_timeouts == 1
    await wait_until(lambda: harness.session_count() == 0, "the refused session to be closed")


async def test_a_new_policy_version_is_used_for_later_steps(start_processor: StartProcessor) -> None:
    harness = await start(start_processor)
    harness.publish_policy(CONTINUOUS, version=1)
    run = ServedRun(CONTINUOUS, tuple(walker_steps("s", [1, 2], count=7, done_at=6)))
    client = RecordingClient(harness, run, "s")
    await client.open()
    await play(client, range(3))

    harness.publish_policy(CONTINUOUS, version=2, seed=1)  # other weights: log-probs tell the versions apart
    await harness.wait_for_acting_version(CONTINUOUS.behavior_name, 2)
    await play(client, range(3, len(run.steps)))
    await client.close()

    assert [a.policy_version for a in run.answers.values()] == [1, 1, 1, 2, 2, 2, 2]
    expected = reference_trajectories(run, TIME_HORIZON)  # time horizon 5: [1, 1, 1, 2, 2] then [2]
    assert [e.policy_versions.tolist() for e in expected if e.agent_id == 1] == [[1, 1, 1, 2, 2], [2]]
    assert_published(run, expected, harness)


async def test_a_full_topic_ends_the_session_and_counts_every_lost_trajectory(start_processor: StartProcessor) -> None:
    """One step cuts three trajectories into a topic with room for one (publish_timeout_s=0): the session ends
    with RESOURCE_EXHAUSTED, and the two cut trajectories that found no room, and agent 4's partial one flushed
    after, all count as unpublished: nothing leaks."""
    runtime = {CONTINUOUS.behavior_name: BehaviorRuntime(time_horizon=TIME_HORIZON)}
    settings = itest_settings(behaviors=runtime, trajectory_queue_size=1, publish_timeout_s=0.0)
    harness = await start(start_processor, settings)
    harness.publish_policy(CONTINUOUS, version=1)
    steps = (
        step(R(1, 1.0), R(2, 2.0), R(3, 3.0), R(4, 4.0)),
        step(R(1, 1.1, 1.0, done=True), R(2, 2.1, 1.0, done=True), R(3, 3.1, 1.0, done=True), R(4, 4.1, 1.0)),
    )
    run = ServedRun(CONTINUOUS, steps)
    client = RecordingClient(harness, run, "s")
    await client.open()
    await client.send(0)

    with pytest.raises(StepRejectedError) as refused:
        await client.send(1)  # the test's subscriber takes nothing until the end: its queue stays full
    await client.session.close()

    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"'{SUBSCRIBER}' (1/1, 0 unacked)" in refused.value.details
    counters = harness.behavior(CONTINUOUS.behavior_name).counters
    await wait_until(lambda: harness.session_count() == 0 and counters.flushed_trajectories == 1, "the session's flush")
    assert (counters.published_trajectories, counters.unpublished_trajectories, counters.flushed_trajectories) == (1, 3, 1)
    assert implied_experiences(steps) == counters.published_experiences + counters.unpublished_experiences == 4
    (published,) = await harness.claim(CONTINUOUS.behavior_name)
    assert published.id.agent_id == 1 and published.done_reached


async def test_a_disconnect_while_blocked_on_a_full_topic_counts_the_blocked_trajectories(
    start_processor: StartProcessor,
) -> None:
    """A step's publish waits for room (block, no timeout) when its client vanishes: what it held counts as unpublished."""
    runtime = {CONTINUOUS.behavior_name: BehaviorRuntime(time_horizon=TIME_HORIZON)}
    harness = await start(start_processor, itest_settings(behaviors=runtime, trajectory_queue_size=1))
    harness.publish_policy(CONTINUOUS, version=1)
    steps = (step(R(1, 1.0), R(2, 2.0), R(3, 3.0)), step(*(R(a, a + 0.1, 1.0, done=True) for a in (1, 2, 3))))
    run = ServedRun(CONTINUOUS, steps)
    client = RecordingClient(harness, run, "s")
    await client.open()
    await client.send(0)
    topic = harness.server.topics.trajectories(CONTINUOUS.behavior_name)

    blocked = asyncio.ensure_future(client.send(1))
    await wait_until(lambda: topic.stats().blocked_publishers == 1, "the step's publish to wait for room")
    await kill(client, "channel_closed")
    with pytest.raises(asyncio.CancelledError):  # its own channel closed under it
        await blocked

    counters = harness.behavior(CONTINUOUS.behavior_name).counters
    await wait_until(lambda: harness.session_count() == 0, "the session to be closed")
    assert (counters.published_trajectories, counters.unpublished_trajectories) == (1, 2)
    assert implied_experiences(steps) == counters.published_experiences + counters.unpublished_experiences
