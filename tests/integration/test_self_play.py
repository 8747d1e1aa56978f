"""Self-play through the real server (``processor.opponents``): a scripted two-team client.

Two sessions declare one behavior, team 0 and team 1 (``Hello.team_ids``). The current policy is version 10;
two snapshots (of versions 3 and 5) arrive over gRPC ``PublishPolicy`` with ``PolicyUpdate.snapshot``. Each
answer's ``policy_version`` tells the agents which policy acted for them. The test replays the processor's
seeded random source to know every pick in advance, and checks after each step that the right policy acted
per team, that only the learning team's trajectories are published, that none of them holds a step acted by
a snapshot, that the team change cuts (and counts) the old learning team's trajectories, and that team 0,
which wins every episode, gains ELO.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import numpy as np
import pytest

from common.config import SelfPlaySettings
from common.self_play import ELO_TAG, LATEST, Every, choose_opponent
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import to_tensor
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime
from processor.metrics import ProcessorCollector
from protos import pb
from protos import stepstream_pb2_grpc as pb_grpc
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings, policy_update
from tests.scrape import documented as documented_names

DUEL = BrainParameters("Duel", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(0, (2,)))
CURRENT = 10
SNAPSHOTS = {1: 3, 2: 5}
"""Snapshot number -> the policy version it holds."""
AGENTS = 2
EPISODE_ROWS = (5, 4)
"""Agent i is done on every EPISODE_ROWS[i]-th row, team 0 winning (+1), team 1 losing (-1): the agents are out
of phase, so a team change finds one of them mid-trajectory."""
SEED = 7
SELF_PLAY = SelfPlaySettings(save_steps=100, team_change=20, swap_steps=5, window=2, play_against_latest_model_ratio=0.5)
STEPS = 40


def done(step: int, agent: int) -> bool:
    return (step + 1) % EPISODE_ROWS[agent] == 0


def brain_info(step: int, team: int) -> pb.BrainInfo:
    dones = np.array([done(step, agent) for agent in range(AGENTS)])
    msg = pb.BrainInfo(behavior_name=DUEL.behavior_name)
    to_tensor(np.arange(AGENTS, dtype=np.int64), msg.agent_ids)
    to_tensor(np.full((AGENTS, 3), step / 10, np.float32), msg.observations.add())
    to_tensor(np.where(dones, 1.0 if team == 0 else -1.0, 0.0).astype(np.float32), msg.rewards)
    to_tensor(dones, msg.done)
    to_tensor(np.zeros(AGENTS, bool), msg.max_reached)
    return msg


@dataclass
class Replay:
    """What the processor must do, replayed by the rules of ``common.self_play`` with its seeded random source."""

    versions: dict[int, list[int]]
    """Team -> the policy version that acts for it at each step."""
    learning: list[int]
    """The learning team after each step."""
    cuts: int
    changes: int
    opponent_rows: int


def replay() -> Replay:
    """Each step team 1 sends first, then team 0 (the test sends them in turn). Team 0 joined first and learns; team
    1 got a pick when it joined. An opponent's rows count toward ``swap_steps``; the learning team's cut trajectories'
    experiences toward ``team_change`` (time_horizon is long: trajectories are cut at done, or at a team change)."""
    rng = np.random.default_rng(SEED)

    def pick() -> int:
        number = choose_opponent(list(SNAPSHOTS), SELF_PLAY.play_against_latest_model_ratio, rng)
        return CURRENT if number == LATEST else SNAPSHOTS[number]

    learning, picks = 0, {1: pick()}
    swap_clock, team_clock = Every(SELF_PLAY.swap_steps), Every(SELF_PLAY.effective_team_change)
    opponent_rows = learner_experiences = cuts = changes = 0
    held = [0] * AGENTS  # the learning team's rows per agent since its trajectory began
    versions: dict[int, list[int]] = {0: [], 1: []}
    learning_after: list[int] = []
    for step in range(STEPS):
        for team in (1, 0):
            if team != learning:
                versions[team].append(picks[team])
                opponent_rows += AGENTS
                if swap_clock.due(opponent_rows):
                    picks = {team: pick()}
                continue
            versions[team].append(CURRENT)
            experiences = 0
            for agent in range(AGENTS):
                held[agent] += 1
                if done(step, agent):
                    experiences, held[agent] = experiences + held[agent] - 1, 0
            if experiences:
                learner_experiences += experiences
                if team_clock.due(learner_experiences):
                    cuts += sum(1 for rows in held if rows > 1)
                    held, learning, changes = [0] * AGENTS, 1 - learning, changes + 1
                    picks = {1 - learning: pick()}
                    swap_clock.last = opponent_rows
        learning_after.append(learning)
    return Replay(versions, learning_after, cuts, changes, opponent_rows)


async def test_each_team_acts_with_its_pick_and_only_the_learning_team_is_published(start_processor: StartProcessor) -> None:
    runtime = BehaviorRuntime(time_horizon=64, self_play=SELF_PLAY)
    server, address = await start_processor(itest_settings(behaviors={"Duel": runtime}, strict=True, seed=SEED))
    harness = Harness(server, address)
    harness.publish_policy(DUEL, CURRENT)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.AgentProcessorStub(channel)
        for number, version in SNAPSHOTS.items():
            update = policy_update(DUEL, version, seed=version)
            update.snapshot = number
            reply = await stub.PublishPolicy(update)
            assert reply.accepted and reply.current_version == CURRENT  # the policy topic is untouched
    blue = EnvSession(address, "blue", [DUEL], team_ids={"Duel": 0})
    purple = EnvSession(address, "purple", [DUEL], team_ids={"Duel": 1})
    blue_id = await blue.open()
    purple_id = await purple.open()
    self_play = server.servicer.self_play
    assert self_play.learning_team == 0

    want = replay()
    assert want.changes >= 2 and want.cuts >= 1, "the scenario must change teams mid-trajectory, and back"
    assert set(want.versions[1]) > {CURRENT}, "a snapshot must act for the opponents"
    got: dict[int, list[int]] = {0: [], 1: []}
    learning_after: list[int] = []
    for step in range(STEPS):
        got[1].append((await purple.send(brain_info(step, 1))).policy_version)
        got[0].append((await blue.send(brain_info(step, 0))).policy_version)
        learning = self_play.learning_team
        learning_after.append(learning)
        picks = self_play.behaviors["Duel"].picks
        assert learning not in picks and set(picks) == {1 - learning}, f"step {step}: one pick, for the opponents"
    assert got == want.versions
    assert learning_after == want.learning

    published = await harness.claim("Duel")
    duel = self_play.behaviors["Duel"]
    assert {t.id.session_id for t in published} == {blue_id, purple_id}
    for trajectory in published:  # only the current policy's steps, never a snapshot's
        assert set(trajectory.policy_versions.tolist()) == {CURRENT}
    assert duel.counters.team_changes == want.changes
    assert duel.counters.cuts == want.cuts == sum(t.interrupted for t in published)
    assert duel.counters.opponent_experiences == want.opponent_rows
    assert duel.counters.learner_experiences == sum(t.length for t in published if not t.interrupted)

    # Team 0 wins every episode: while it learns against a snapshot its rating rises, and rides on the trajectories.
    blue_elo = [s.value for t in published if t.id.session_id == blue_id for s in t.environment_stats if s.key == ELO_TAG]
    assert blue_elo and max(blue_elo) > SELF_PLAY.initial_elo

    # The counters on the metrics endpoint, under the names docs/operations.md lists.
    samples = {(s.name, tuple(s.labels.values())): s.value for m in ProcessorCollector(server).collect() for s in m.samples}
    documented = documented_names("stepstream_self_play_")
    assert len(documented) == 7 and set(documented) <= {name for name, _ in samples}
    assert samples[("stepstream_self_play_cuts_total", ("Duel",))] == want.cuts
    assert samples[("stepstream_self_play_team_changes_total", ("Duel",))] == want.changes
    assert samples[("stepstream_self_play_opponent_experiences_total", ("Duel",))] == want.opponent_rows
    assert samples[("stepstream_self_play_elo", ("Duel",))] == duel.ratings.learner
    assert samples[("stepstream_self_play_learning_team", ())] == self_play.learning_team
    await blue.close()
    await purple.close()


async def test_a_snapshot_for_a_behavior_without_self_play_is_refused(start_processor: StartProcessor) -> None:
    server, address = await start_processor(itest_settings(behaviors={"Duel": BehaviorRuntime()}, strict=True))
    async with grpc.aio.insecure_channel(address) as channel:
        update = policy_update(DUEL, 3)
        update.snapshot = 1
        try:
            await pb_grpc.AgentProcessorStub(channel).PublishPolicy(update)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "has no self_play" in (err.details() or "")
        else:
            raise AssertionError("a snapshot without self_play was accepted")
    assert server.topics.policies("Duel").highest_version == -1


async def test_a_trainer_process_publishes_snapshots_keeping_their_versions(start_processor: StartProcessor) -> None:
    """The stack's trainer (``stepstream trainer``) sends its snapshots with ``GrpcPolicyPublisher(snapshots=True)``."""
    from common.topics.grpc_transport import GrpcPolicyPublisher

    runtime = BehaviorRuntime(self_play=SELF_PLAY)
    server, address = await start_processor(itest_settings(behaviors={"Duel": runtime}, strict=True))
    Harness(server, address).publish_policy(DUEL, CURRENT)
    with GrpcPolicyPublisher(address, "Duel", snapshots=True) as publisher:
        for number, version in SNAPSHOTS.items():
            assert await asyncio.to_thread(publisher.publish, policy_update(DUEL, version), number)
        assert not await asyncio.to_thread(publisher.publish, policy_update(DUEL, 4), 1)  # a number already taken
    latest = server.topics.snapshots("Duel").latest()
    assert latest is not None and (latest[0], latest[1].version, latest[1].snapshot) == (2, 5, 2)
    assert server.topics.policies("Duel").highest_version == CURRENT


async def test_a_fresh_processor_continues_the_ratings_the_snapshots_carry(start_processor: StartProcessor) -> None:
    """A resumed trainer's ring carries each snapshot's ELO, and its newest the learner's: the processor goes on."""
    server, address = await start_processor(
        itest_settings(behaviors={"Duel": BehaviorRuntime(self_play=SELF_PLAY)}, strict=True)
    )
    Harness(server, address).publish_policy(DUEL, CURRENT)
    for number, (version, elo) in {1: (3, 1290.0), 2: (5, 1310.0), 3: (CURRENT, 1325.5)}.items():
        update = policy_update(DUEL, version)
        update.snapshot, update.elo = number, elo
        server.topics.snapshots("Duel").publish(update, number)
    async with (
        EnvSession(address, "blue", [DUEL], team_ids={"Duel": 0}) as blue,
        EnvSession(address, "purple", [DUEL], team_ids={"Duel": 1}) as purple,
    ):
        await asyncio.gather(blue.send(brain_info(0, 0)), purple.send(brain_info(0, 1)))
        duel = server.servicer.self_play.behaviors["Duel"]
        assert duel.ratings.learner == 1325.5
        assert duel.ratings.snapshots == {2: 1310.0, 3: 1325.5}  # window 2: the newest two


async def test_asymmetric_teams_rate_against_the_other_behaviors_snapshot(start_processor: StartProcessor) -> None:
    """StrikersVsGoalie's shape: one behavior per team. The learning team's results move the other behavior's
    snapshot rating, as ML-Agents' GhostController asks the other trainer."""
    striker = BrainParameters("Striker", DUEL.observation_specs, DUEL.action_spec)
    goalie = BrainParameters("Goalie", DUEL.observation_specs, DUEL.action_spec)
    only_snapshots = SelfPlaySettings(save_steps=100, team_change=1000, swap_steps=1000, play_against_latest_model_ratio=0.0)
    runtime = BehaviorRuntime(self_play=only_snapshots)
    server, address = await start_processor(itest_settings(behaviors={"Striker": runtime, "Goalie": runtime}, strict=True))
    harness = Harness(server, address)
    harness.publish_policy(striker, CURRENT)
    harness.publish_policy(goalie, CURRENT)
    update = policy_update(goalie, 3)
    update.snapshot = 1
    server.topics.snapshots("Goalie").publish(update, 1)
    strikers = EnvSession(address, "strikers", [striker], team_ids={"Striker": 0})
    goalies = EnvSession(address, "goalies", [goalie], team_ids={"Goalie": 1})
    await strikers.open()  # team 0 learns
    await goalies.open()
    for step in range(10):  # strikers win an episode every 5 steps (agent 0) and every 4 (agent 1)
        info = brain_info(step, 0)
        info.behavior_name = "Striker"
        acted = await strikers.send(info)
        info = brain_info(step, 1)
        info.behavior_name = "Goalie"
        defended = await goalies.send(info)
        assert (acted.policy_version, defended.policy_version) == (CURRENT, 3)
    self_play = server.servicer.self_play
    strikers_ratings, goalies_ratings = self_play.behaviors["Striker"].ratings, self_play.behaviors["Goalie"].ratings
    won = strikers_ratings.learner - 1200.0
    assert won > 0 and self_play.behaviors["Striker"].counters.elo_results == 4  # episodes at steps 3, 4, 7, 9
    assert goalies_ratings.snapshots[1] == pytest.approx(1200.0 - won) and goalies_ratings.learner == 1200.0
    published = await harness.claim("Striker") + await harness.claim("Goalie")
    assert published and {t.behavior_name for t in published} == {"Striker"}
    await strikers.close()
    await goalies.close()
