"""The processor's metrics endpoint, scraped over HTTP while a real server serves real sessions.

One run walks through what each documented ``stepstream_processor_*`` metric counts, scraping after
every phase, and then checks that every one of them *moved* (some sample took two values):

1. a call with a wrong token (refused);
2. a session steps one agent with policy v1: trajectories cut every ``TIME_HORIZON`` experiences pile
   up in the test's ``itest`` queue (never taken) and overflow a ``drop_oldest`` queue of one;
3. two trajectories are taken and not acked (in flight); policy v2 arrives, so the next trajectory,
   which holds v1's actions, is stale under ``max_policy_lag`` 0 and dropped;
4. the ``itest`` queue fills up: the next publish blocks (a blocked publisher, seen by a scrape), and
   after ``PUBLISH_TIMEOUT_S`` it is dropped as unpublished and the session ends (flushed, closed);
5. a session of a behavior with no policy times out waiting for its first one;
6. a session with a partial trajectory is replaced by a newer one with its client id (flushed);
7. a policy the processor cannot load (acting version stays behind: policy lag 1) and an old version
   (ignored).

Exempt: ``inference_failed_passes`` (it needs a policy whose forward pass raises) and the constant
``queue_capacity`` (checked against the configured size).
The multi-process run over TLS (``test_secure_stack.py``) scrapes the trainer and env endpoints.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import grpc
import numpy as np
import pytest

from common.security import ClientSecurity, ServerSecurity
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.topics import FullPolicy
from envclient.session import EnvSession, StepRejectedError
from processor.behaviors import BehaviorRuntime
from processor.server import ProcessorServer, ServerOptions
from protos import pb
from tests.integration.helpers import SUBSCRIBER, itest_settings, policy_update, wait_until
from tests.scrape import Scrapes, documented

TOKEN = "metrics-test-token"
TIME_HORIZON = 2
QUEUE_SIZE = 4
"""The ``itest`` queue's capacity (queued + in flight, ``block``)."""
PUBLISH_TIMEOUT_S = 3.0
"""How long a blocked publish waits before it is dropped: the window in which a scrape sees it blocked."""
FIRST_POLICY_TIMEOUT_S = 0.5
PARAMS = BrainParameters("Walker", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(0, (2,)))
ORPHAN = BrainParameters("Orphan", PARAMS.observation_specs, PARAMS.action_spec)
"""A behavior no trainer publishes a policy for."""
EXEMPT = {
    "stepstream_processor_inference_failed_passes_total": "needs a policy whose forward pass raises",
    "stepstream_processor_queue_capacity": "a constant; checked against the configured size instead",
    "stepstream_processor_queue_released": "needs a subscriber gone for a minute; test_topics_grpc checks it moves",
    "stepstream_processor_trajectories_in_doubt_total": "JetStream only; test_topics_jetstream checks it moves",
    "stepstream_processor_experiences_in_doubt_total": "JetStream only; test_topics_jetstream checks it moves",
}
STOP_GRACE_S = 0.5


def _step_args(step: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """One agent (id 0), never done: agent ids, obs, rewards, done."""
    return np.zeros(1, np.int64), [np.full((1, 3), step, np.float32)], np.ones(1, np.float32), np.zeros(1, bool)


class Walker:
    """One env session of ``PARAMS`` (token included) that counts the steps it sent."""

    def __init__(self, address: str, client_id: str, params: BrainParameters = PARAMS) -> None:
        self.session = EnvSession(address, client_id, [params], security=ClientSecurity(token=TOKEN))
        self.params = params
        self.steps = 0

    async def step(self, count: int = 1) -> None:
        for _ in range(count):
            self.steps += 1  # sent: a step that then fails on a full topic was still acted on
            await self.session.step(self.params.behavior_name, *_step_args(self.steps))


@pytest.fixture
async def server() -> AsyncIterator[ProcessorServer]:
    runtime = BehaviorRuntime(time_horizon=TIME_HORIZON, max_policy_lag=0)
    settings = itest_settings(
        # Configured: a behavior outside the config is freed, metrics and all, when its last session ends.
        behaviors={PARAMS.behavior_name: runtime, ORPHAN.behavior_name: runtime},
        default_runtime=runtime,
        trajectory_queue_size=QUEUE_SIZE,
        publish_timeout_s=PUBLISH_TIMEOUT_S,
        first_policy_timeout_s=FIRST_POLICY_TIMEOUT_S,
    )
    server = ProcessorServer(settings, ServerOptions(port=0, security=ServerSecurity(token=TOKEN), metrics_port=0))
    await server.start()
    yield server
    await server.stop(STOP_GRACE_S)


async def _refused_call(address: str) -> None:
    session = EnvSession(address, "intruder", [PARAMS], security=ClientSecurity(token="wrong"))
    with pytest.raises(StepRejectedError):
        await session.open()
    await session.close(1.0)


async def test_every_documented_processor_metric_moves(server: ProcessorServer) -> None:
    address = f"127.0.0.1:{server.port}"
    assert server.options.metrics_host == "127.0.0.1", "the endpoint binds loopback by default"
    scrapes = Scrapes(f"http://127.0.0.1:{server.metrics_port}/metrics")

    async def scrape() -> None:
        await asyncio.to_thread(scrapes.take)

    name = PARAMS.behavior_name
    topic = server.topics.trajectories(name)
    topic.declare("sampler", 1, FullPolicy.DROP_OLDEST)
    policies = server.topics.policies(name)
    await scrape()

    # 1. refused
    await _refused_call(address)
    # 2. one agent with v1: 3 trajectories queued (capacity 4), the drop_oldest queue overflows
    policies.publish(policy_update(PARAMS, 1), 1)
    walker = Walker(address, "walker")
    await walker.session.open()
    await scrape()
    await walker.step(1 + 3 * TIME_HORIZON)
    await scrape()
    # 3. two in flight; v2 makes the next trajectory (v1's actions) stale
    subscription = topic.subscribe(SUBSCRIBER)
    assert len(await subscription.aget(max_items=2, timeout_s=5.0)) == 2
    policies.publish(policy_update(PARAMS, 2), 2)
    behavior = server.behaviors[name]
    await wait_until(lambda: behavior.batcher.policy is not None and behavior.batcher.policy.version == 2, "v2 acting")
    await walker.step(TIME_HORIZON)
    assert behavior.counters.stale_dropped_trajectories >= 1
    await scrape()
    # 4. the queue fills (3 + 1 in all); the next publish blocks, then is dropped as unpublished
    stepping = asyncio.ensure_future(walker.step(4 * TIME_HORIZON))
    while scrapes.value("stepstream_processor_blocked_publishers", behavior=name) != 1:
        assert not stepping.done(), "the session ended before a scrape saw it blocked"
        await scrape()
    with pytest.raises(StepRejectedError) as full:
        await stepping
    assert full.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    await walker.session.close()
    await scrape()
    # 5. no first policy for the orphan behavior
    orphan = Walker(address, "orphan", ORPHAN)
    await orphan.session.open()
    with pytest.raises(StepRejectedError) as timed_out:
        await orphan.step(2)
    assert timed_out.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    await orphan.session.close()
    # 6. replaced, with a partial trajectory to flush (room made for it in the queue first)
    while taken := await subscription.aget(max_items=QUEUE_SIZE, timeout_s=0):
        subscription.ack(d.tag for d in taken)
    subscription.ack(range(1_000))  # the two taken in phase 3
    first = Walker(address, "twin")
    await first.session.open()
    await first.step(2)
    await scrape()
    second = Walker(address, "twin")
    await second.session.open()
    await wait_until(lambda: server.sessions.replaced == 1, "the first twin replaced")
    await scrape()
    await first.session.close(1.0)
    await second.session.close()
    # 7. v3 cannot be loaded (acting stays at v2: lag 1); v1 again is ignored
    broken = policy_update(PARAMS, 3)
    broken.artifact.model = b"not a model"
    policies.publish(broken, 3)
    assert not policies.publish(policy_update(PARAMS, 1), 1)
    await scrape()
    assert scrapes.value("stepstream_processor_policy_lag", behavior=name) == 1  # highest 3, acting 2

    wanted = documented("stepstream_processor_")
    assert len(wanted) > 20, "docs/operations.md's processor metrics table"
    absent = [metric for metric, kind in wanted.items() if not scrapes.present(metric, kind)]
    assert not absent, f"documented but not exported: {absent}"
    still = [metric for metric, kind in wanted.items() if metric not in EXEMPT and not scrapes.moved(metric, kind)]
    assert not still, f"documented metrics that did not move: {still}"
    assert scrapes.value("stepstream_processor_agent_steps_total", behavior=name) == walker.steps + first.steps
    assert scrapes.value("stepstream_processor_queue_capacity", behavior=name, subscriber=SUBSCRIBER) == QUEUE_SIZE
    rows_count = scrapes.value("stepstream_processor_inference_batch_rows_count", behavior=name)
    assert rows_count is not None and rows_count == scrapes.value("stepstream_processor_inference_passes_total", behavior=name)
    assert not math.isnan(scrapes.value("process_resident_memory_bytes") or math.nan), "the standard process metrics"
    subscription.detach()


def test_an_unloadable_policy_message_is_what_the_test_thinks() -> None:
    """The broken policy of phase 7 must be refused by the processor's loader, not by the test."""
    from common.errors import StepstreamError
    from processor.inference import Policy

    update = pb.PolicyUpdate()
    update.CopyFrom(policy_update(PARAMS, 3))
    update.artifact.model = b"not a model"
    with pytest.raises(StepstreamError):
        Policy.from_update(update)
