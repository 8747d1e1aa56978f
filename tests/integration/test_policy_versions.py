"""Policy versions rise by one per publish, through the real server: no publisher can end a run.

The rule (``processor.behaviors``): ``PublishPolicy`` accepts a behavior's next version, the highest it holds + 1,
or a first version up to ``MAX_FIRST_POLICY_VERSION``; anything higher is not accepted. A stranger's publishes
at the top of the range change nothing, and a real ``TrainerLoop`` (gRPC subscription and publisher, fed by a
real env client) trains on past every one of them to its ``max_steps``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from common.config import BehaviorSettings
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.topics import MAX_POLICY_VERSION, TRAINER_SUBSCRIBER
from common.topics.grpc_transport import GrpcPolicyPublisher, GrpcTrajectorySubscription
from common.trajectory import Trajectory
from envclient.session import EnvSession, brain_info_message
from processor.behaviors import MAX_FIRST_POLICY_VERSION, BehaviorRuntime, ProcessorSettings
from protos import pb
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import LIVENESS_S, policy_update, wait_until
from trainer.loop import MAX_STEPS, TrainerLoop, TrainerResult

PARAMS = BrainParameters("Walker", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(2))
OTHER = BrainParameters("Runner", PARAMS.observation_specs, PARAMS.action_spec)
TIME_HORIZON = 4


def settings() -> ProcessorSettings:
    runtime = BehaviorRuntime(time_horizon=TIME_HORIZON)
    return ProcessorSettings(behaviors={PARAMS.behavior_name: runtime, OTHER.behavior_name: runtime})


def publish(address: str, params: BrainParameters, version: int) -> pb.PublishPolicyReply:
    """One raw PublishPolicy of a real policy at ``version``: the reply, accepted or not."""
    import grpc

    from protos import stepstream_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        return pb_grpc.AgentProcessorStub(channel).PublishPolicy(policy_update(params, version), timeout=LIVENESS_S)


async def test_a_publish_above_the_next_version_is_not_accepted_and_changes_nothing(start_processor: StartProcessor) -> None:
    server, address = await start_processor(settings())
    topic = server.topics.policies(PARAMS.behavior_name)

    first = await asyncio.to_thread(publish, address, PARAMS, 5)  # a first version continues a resumed count
    assert first.accepted and first.current_version == 5
    for version in (MAX_POLICY_VERSION, MAX_POLICY_VERSION - 1000, 7):
        reply = await asyncio.to_thread(publish, address, PARAMS, version)
        assert not reply.accepted and reply.current_version == 5, f"version {version}: {reply}"
    assert topic.highest_version == 5

    for expected in range(6, 16):  # repeated publishes: each raises the version by one, never more
        reply = await asyncio.to_thread(publish, address, PARAMS, expected + 1000)
        assert not reply.accepted
        reply = await asyncio.to_thread(publish, address, PARAMS, expected)
        assert reply.accepted and reply.current_version == expected
    assert not (await asyncio.to_thread(publish, address, PARAMS, 12)).accepted  # older: ignored (latest-wins)
    assert topic.highest_version == 15

    # The first version is bounded too: half the range, whatever the publisher.
    other = server.topics.policies(OTHER.behavior_name)
    for version in (MAX_POLICY_VERSION, MAX_FIRST_POLICY_VERSION + 1):
        reply = await asyncio.to_thread(publish, address, OTHER, version)
        assert not reply.accepted and reply.current_version == -1
    assert (await asyncio.to_thread(publish, address, OTHER, MAX_FIRST_POLICY_VERSION)).accepted
    assert other.highest_version == MAX_FIRST_POLICY_VERSION


class PolicyLearner:
    """A trivial learner whose exports are real policies of ``PARAMS`` (the processor loads and acts with each)."""

    def __init__(self, update_every: int) -> None:
        self.update_every = update_every
        self.pending = 0

    def add_trajectories(self, trajectories: Sequence[Trajectory]) -> int:
        n = sum(t.length for t in trajectories)
        self.pending += n
        return n

    def ready_to_update(self) -> bool:
        return self.pending >= self.update_every

    def update(self) -> Mapping[str, float]:
        self.pending = 0
        return {}

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        update = policy_update(PARAMS, version)
        update.trainer_step = trainer_step
        return update

    def checkpoint_objects(self) -> Mapping[str, object]:
        return {}

    def save_extra(self, directory: Path) -> None:
        del directory

    def load_extra(self, directory: Path) -> None:
        del directory


async def _env_client(address: str, stop: threading.Event) -> int:
    """Two agents of ``PARAMS`` stepping until ``stop``; episodes of 10 steps. Returns the steps sent."""
    ids = np.arange(2)
    sent = 0
    async with EnvSession(address, "env-0", [PARAMS]) as session:
        while not stop.is_set():
            done = np.full(2, sent % 10 == 9)
            obs = np.full((2, 3), sent % 7, np.float32)
            await session.send(brain_info_message(PARAMS.behavior_name, ids, [obs], np.ones(2, np.float32), done))
            sent += 1
    return sent


async def test_a_strangers_publishes_never_stop_the_trainer(start_processor: StartProcessor) -> None:
    """A publish at 2**53 stopped the running trainer (its next version passed the bound), and its resume too."""
    server, address = await start_processor(settings())
    topic = server.topics.policies(PARAMS.behavior_name)
    max_steps = 600
    behavior_settings = BehaviorSettings(max_steps=max_steps, time_horizon=TIME_HORIZON, summary_freq=10_000)
    result: list[TrainerResult] = []
    failure: list[BaseException] = []

    def train() -> None:
        with (
            GrpcPolicyPublisher(address, PARAMS.behavior_name) as sink,
            GrpcTrajectorySubscription(address, PARAMS.behavior_name, TRAINER_SUBSCRIBER) as subscription,
        ):
            loop = TrainerLoop(
                PARAMS.behavior_name, PolicyLearner(update_every=40), subscription, sink, behavior_settings,
                results_dir=None, run_started_at=time.time(), poll_s=0.02,
            )  # fmt: skip
            try:
                result.append(loop.run())
            except BaseException as err:  # the test reports it; the thread must not swallow it
                failure.append(err)

    trainer = threading.Thread(target=train, name="trainer")
    trainer.start()
    stop = threading.Event()
    env = asyncio.ensure_future(_env_client(address, stop))
    try:
        await wait_until(lambda: topic.highest_version >= 2, "the trainer's first updates")
        strangers = []
        for version in (MAX_POLICY_VERSION, MAX_POLICY_VERSION - 1000):
            strangers.append(await asyncio.to_thread(publish, address, PARAMS, version))
        assert not any(reply.accepted for reply in strangers), strangers
        # A stranger that plays by the rule takes the next versions: the trainer republishes above them.
        for _ in range(5):
            await asyncio.to_thread(publish, address, PARAMS, topic.highest_version + 1)
        stolen = topic.highest_version
        await wait_until(lambda: not trainer.is_alive(), "the trainer to reach max_steps", timeout_s=3 * LIVENESS_S)
    finally:
        stop.set()
        await asyncio.wait_for(env, LIVENESS_S)
        await asyncio.to_thread(trainer.join, LIVENESS_S)
    assert not failure, f"the trainer stopped with {failure[0]!r}"
    (trained,) = result
    assert trained.stopped_by == MAX_STEPS and trained.steps >= max_steps
    assert trained.policy_version > stolen, "the trainer published past the stranger's versions"
    assert topic.highest_version == trained.policy_version < 2 * max_steps
