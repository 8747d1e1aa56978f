"""Self-play in the processor: who learns, which snapshot each opponent team acts with, and the ELO.

ML-Agents' ghost trainer and ``GhostController`` run beside the learner in one process; here the processor
does their serving part, since it acts for every team (``common.self_play`` holds the rules):

- **Teams.** A session declares each behavior's team in its Hello (``Hello.team_ids``; Unity's
  ``Name?team=N``, split by the gateway). One behavior's teams share one trainer.
- **The learning team** is global across behaviors, as ML-Agents' ``GhostController`` keeps it (asymmetric
  games such as StrikersVsGoalie have one behavior per team). ``SelfPlay`` owns it, one per processor: with
  several processors, each would rotate its own, so every session of the self-play behaviors must reach one
  processor (not enforced).
- **Acting.** The learning team's sessions act with the behavior's current policy (its own batcher, latest-wins);
  each opponent team with its pick: a snapshot, or ``LATEST`` (the current policy, pinned at the swap). One
  batcher per distinct policy version in use, so every policy runs one batched pass over its sessions.
- **Snapshots** arrive on ``snapshots/<behavior>`` (``TopicRegistry.snapshots``; over gRPC a ``PublishPolicy``
  with ``PolicyUpdate.snapshot`` > 0), keyed by snapshot number, never by version: they are older versions on
  purpose and never touch the policy topic's latest-wins. The newest ``window`` are kept loaded.
- **Swaps.** Every ``swap_steps`` opponent steps (agent rows acted for opponents), each opponent team gets a new
  pick (``common.self_play.choose_opponent``). Every ``team_change`` learning-team steps (experiences of the
  learning team's cut trajectories, the processor's count of what its trainer takes in) the learning team
  changes, and every opponent team gets a new pick at once, as ML-Agents swaps on a team change.
- **Trajectories.** Only the learning team's rows are assembled and published. The opponents' rows are
  counted, never assembled, so an agent's trajectory holds one team's role only. At a team change the old
  learning team's partial trajectories are cut as interrupted (marked, and counted in ``cuts``): a trajectory
  never runs on across a change of the policy that acts for its agent. The environment reset ML-Agents asks
  for at a team change is not sent (not built yet).
- **ELO** (``common.self_play.EloRatings``, one per behavior): each learning-team trajectory that ends its
  episode rates the learner against the opponent team's current pick, of its own behavior or, in an asymmetric
  game, of the other team's behavior (``common.self_play.record_result``); the rating is attached to the behavior's
  trajectories as the environment stat ``Self-play/ELO`` (most recent), so the trainer writes it to its
  summaries under ML-Agents' tag.
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from common.config import SelfPlaySettings
from common.environment_stats import EnvironmentStat
from common.errors import StepstreamError
from common.self_play import (
    ELO_TAG,
    LATEST,
    EloRatings,
    Every,
    TeamRotation,
    choose_opponent,
    episode_result,
    record_result,
)
from common.topics import TopicRegistry
from common.trajectory import Trajectory
from processor.batching import InferenceBatcher
from processor.behaviors import Behavior, ProcessorSettings
from processor.inference import ActionOutput, Policy
from processor.sessions import Session
from protos import pb

log = logging.getLogger(__name__)

BatcherFactory = Callable[[str], InferenceBatcher]
"""Makes an empty batcher for a behavior (the processor's batch settings)."""


@dataclass
class OpponentCounters:
    """One self-play behavior's running totals."""

    opponent_experiences: int = 0
    """Agent rows acted for opponent teams (counted, never published); what ``swap_steps`` counts."""
    learner_experiences: int = 0
    """Experiences of the learning team's cut trajectories; what ``team_change`` counts."""
    swaps: int = 0
    """Picks made for opponent teams (every swap and team change, one per opponent team)."""
    team_changes: int = 0
    """Team changes this behavior's count set off."""
    cuts: int = 0
    """Trajectories cut as interrupted because their team stopped learning."""
    snapshots: int = 0
    """Snapshots taken in (loaded and kept)."""
    elo_results: int = 0
    """Finished episodes rated."""


@dataclass(frozen=True)
class Pick:
    """What one opponent team acts with until the next swap."""

    snapshot: int
    """The snapshot number, ``LATEST`` for the current policy pinned at the swap."""
    policy: Policy


class BehaviorOpponents:
    """One self-play behavior: its snapshots, ratings, opponent picks, batchers and counters."""

    def __init__(
        self,
        behavior: Behavior,
        settings: SelfPlaySettings,
        rng: np.random.Generator,
        make_batcher: BatcherFactory,
        incoming: collections.deque[tuple[int, pb.PolicyUpdate]],
    ) -> None:
        self.behavior = behavior
        self.settings = settings
        self.ratings = EloRatings(settings.initial_elo, settings.window)
        self.counters = OpponentCounters()
        self.snapshots: dict[int, Policy] = {}
        """Snapshot number -> its policy, the newest ``window``, oldest first."""
        self.picks: dict[int, Pick] = {}
        """Opponent team -> its pick."""
        self.sessions: dict[str, tuple[Session, int]] = {}
        """Session id -> (session, its team for this behavior)."""
        self.swap_clock = Every(settings.swap_steps)
        self.team_clock = Every(settings.effective_team_change)
        self._rng = rng
        self._make_batcher = make_batcher
        self._batchers: dict[int, InferenceBatcher] = {}
        """Policy version -> the batcher of the opponents acting with it."""
        self._incoming = incoming
        """Snapshots published and not loaded yet (filled by the topic's listener, in any thread)."""

    def take_snapshots(self) -> None:
        """Load the snapshots published since the last look (a failing one is logged and skipped)."""
        while self._incoming:
            number, update = self._incoming.popleft()
            try:
                policy = Policy.from_update(update)
                self.behavior.check_policy(policy, int(update.version))
            except StepstreamError as err:
                log.error("behavior '%s': snapshot %d not kept: %s", self.behavior.name, number, err)
                continue
            rating = update.elo if update.HasField("elo") else None
            if rating is not None and self.counters.elo_results == 0:  # a resumed trainer's: go on from its rating
                self.ratings.learner = rating
            self.add_snapshot(number, policy, rating)

    def add_snapshot(self, number: int, policy: Policy, rating: float | None = None) -> None:
        """Keep ``policy`` as snapshot ``number``, rated ``rating`` (None: the learner's rating); the oldest beyond
        ``window`` goes."""
        self.snapshots.pop(number, None)
        self.snapshots[number] = policy
        while len(self.snapshots) > self.settings.window:
            del self.snapshots[next(iter(self.snapshots))]
        self.ratings.add_snapshot(number, rating)
        self.counters.snapshots += 1

    def team_of(self, session: Session) -> int:
        return self.sessions[session.session_id][1]

    def swap(self, learning_team: int | None) -> None:
        """Give every opponent team a new pick (those of ``learning_team`` lose theirs)."""
        self.take_snapshots()
        teams = {team for _, team in self.sessions.values()}
        self.picks = {team: pick for team, pick in self.picks.items() if team in teams and team != learning_team}
        for team in sorted(teams - {learning_team}):
            pick = self._pick()
            if pick is not None:
                self.picks[team] = pick
                self.counters.swaps += 1
                log.debug("behavior '%s': team %d acts with snapshot %d", self.behavior.name, team, pick.snapshot)
        self.rebalance(learning_team)

    def _pick(self) -> Pick | None:
        number = choose_opponent(list(self.snapshots), self.settings.play_against_latest_model_ratio, self._rng)
        if number != LATEST:
            return Pick(number, self.snapshots[number])
        current = self.behavior.batcher.policy
        return None if current is None else Pick(LATEST, current)

    def rebalance(self, learning_team: int | None) -> None:
        """Tell each batcher how many sessions act through it, so a pass runs once all have asked."""
        users: collections.Counter[int] = collections.Counter()
        learners = 0
        for _, team in self.sessions.values():
            if team == learning_team:
                learners += 1
            elif team in self.picks:
                users[self.picks[team].policy.version] += 1
            else:
                learners += 1  # no pick yet (no policy arrived): acts through the behavior's batcher
        self.behavior.batcher.set_active_sessions(learners)
        for version in [v for v in self._batchers if v not in users]:
            self._batchers.pop(version).close()
        for pick in self.picks.values():
            if pick.policy.version not in self._batchers:
                batcher = self._batchers[pick.policy.version] = self._make_batcher(self.behavior.name)
                batcher.set_policy(pick.policy)
        for version, count in users.items():
            self._batchers[version].set_active_sessions(count)

    def batcher_for(self, team: int) -> InferenceBatcher:
        """The batcher an opponent team acts through: its pick's, or the behavior's own before any pick."""
        pick = self.picks.get(team)
        return self.behavior.batcher if pick is None else self._batchers[pick.policy.version]

    def rate(self, trajectories: list[Trajectory], opponents: BehaviorOpponents, opponent: int) -> None:
        """Rate each trajectory that ends its episode against snapshot ``opponent`` of ``opponents`` (this behavior,
        or in an asymmetric game the other team's); attach the learner's new rating."""
        changed = False
        for trajectory in trajectories:
            if not trajectory.done_reached or trajectory.length == 0:
                continue
            # The group reward joins the last reward once trajectories carry it (teams of agents).
            result = episode_result(float(trajectory.rewards[-1]))
            if record_result(self.ratings, opponents.ratings, opponent, result) is not None:
                self.counters.elo_results += 1
                changed = True
        if changed:
            self.behavior.add_environment_stats([EnvironmentStat(ELO_TAG, self.ratings.learner, "most_recent")])


def _arrived(into: collections.deque[tuple[int, pb.PolicyUpdate]], number: int, update: pb.PolicyUpdate) -> None:
    """A snapshot topic's listener (any thread): the snapshot waits to be loaded on the event loop."""
    into.append((number, update))


def batcher_factory(settings: ProcessorSettings) -> BatcherFactory:
    """Opponent batchers with the processor's batch settings, each its own generator from the run's seed."""
    seeds = np.random.SeedSequence(settings.seed)

    def make(name: str) -> InferenceBatcher:
        return InferenceBatcher(
            name,
            max_batch_rows=settings.max_batch_rows,
            deadline_ms=settings.batch_deadline_ms,
            first_policy_timeout_s=settings.first_policy_timeout_s,
            rng=np.random.default_rng(seeds.spawn(1)[0]),
        )

    return make


class SelfPlay:
    """The processor's self-play: the learning team (global across behaviors) and each behavior's opponents.

    Built with the servicer; only behaviors whose config has ``self_play`` take part. Used from the
    processor's event loop, except the snapshot listener (any thread: it only appends to a deque).
    """

    def __init__(
        self,
        settings: Mapping[str, SelfPlaySettings],
        topics: TopicRegistry,
        make_batcher: BatcherFactory,
        seed: int | None = None,
    ) -> None:
        self.settings = dict(settings)
        self.rotation = TeamRotation()
        self.behaviors: dict[str, BehaviorOpponents] = {}
        self._rng = np.random.default_rng(seed)
        self._make_batcher = make_batcher
        self._incoming: dict[str, collections.deque[tuple[int, pb.PolicyUpdate]]] = {}
        for name in self.settings:  # before any trainer can publish: no snapshot is missed
            # only the newest window can be kept: older ones waiting to be loaded give way
            incoming: collections.deque[tuple[int, pb.PolicyUpdate]] = collections.deque(maxlen=self.settings[name].window)
            self._incoming[name] = incoming
            topics.snapshots(name).add_listener(functools.partial(_arrived, incoming))

    @classmethod
    def from_settings(cls, settings: ProcessorSettings, topics: TopicRegistry) -> SelfPlay:
        """The configured behaviors with ``self_play`` (``BehaviorRuntime.self_play``)."""
        configured = {name: r.self_play for name, r in settings.behaviors.items() if r.self_play is not None}
        return cls(configured, topics, batcher_factory(settings), settings.seed)

    def configured(self, name: str) -> bool:
        return name in self.settings

    @property
    def learning_team(self) -> int | None:
        return self.rotation.learning_team

    def join(self, session: Session, team_ids: Mapping[str, int]) -> None:
        """A session opened: its self-play behaviors' teams take part (the first team seen learns first)."""
        for name, behavior in session.behaviors.items():
            if name not in self.settings:
                continue
            opponents = self.behaviors.get(name)
            if opponents is None or opponents.behavior is not behavior:  # first, or declared anew after a release
                opponents = self.behaviors[name] = BehaviorOpponents(
                    behavior, self.settings[name], self._rng, self._make_batcher, self._incoming[name]
                )
            team = team_ids.get(name, 0)
            self.rotation.add(team)
            opponents.sessions[session.session_id] = (session, team)
            opponents.take_snapshots()
            if team != self.learning_team and team not in opponents.picks:
                opponents.swap(self.learning_team)
            opponents.rebalance(self.learning_team)

    def leave(self, session: Session) -> None:
        """A session closed (after the behavior counted it out): its batchers wait for one session fewer."""
        for opponents in self.behaviors.values():
            if opponents.sessions.pop(session.session_id, None) is not None:
                opponents.rebalance(self.learning_team)

    def opponents_of(self, session: Session, name: str) -> BehaviorOpponents | None:
        """The behavior's self-play state when ``session`` acts for an opponent team of it; None when it learns
        (or the behavior has no self-play)."""
        opponents = self.behaviors.get(name)
        if opponents is None or opponents.team_of(session) == self.learning_team:
            return None
        return opponents

    async def act_for_opponent(
        self, opponents: BehaviorOpponents, session: Session, observations: list[np.ndarray], mask: np.ndarray | None
    ) -> ActionOutput:
        """Act with the team's pick; the rows are counted, not assembled; a due swap follows."""
        opponents.take_snapshots()
        out = await opponents.batcher_for(opponents.team_of(session)).act(observations, mask)
        opponents.counters.opponent_experiences += len(out.discrete_actions)
        if opponents.swap_clock.due(opponents.counters.opponent_experiences):
            opponents.swap(self.learning_team)
        return out

    def learner_cut(self, name: str, trajectories: list[Trajectory]) -> list[tuple[Behavior, list[Trajectory]]]:
        """The learning team cut ``trajectories`` of behavior ``name``: rate them, count their experiences, and
        change the learning team when due. Returns the trajectories a team change cut (interrupted), by behavior,
        for the caller to publish."""
        opponents = self.behaviors.get(name)
        if opponents is None or not trajectories:
            return []
        opponents.rate(trajectories, *self._opponent_of(opponents))
        opponents.counters.learner_experiences += sum(t.length for t in trajectories)
        if not opponents.team_clock.due(opponents.counters.learner_experiences):
            return []
        opponents.counters.team_changes += 1
        return self.change_team()

    def _opponent_of(self, learner: BehaviorOpponents) -> tuple[BehaviorOpponents, int]:
        """Whom the learning team of ``learner`` plays: its own behavior's opponent pick; where that behavior has no
        opponent team (an asymmetric game), another behavior's; ``LATEST`` of its own when nobody has a pick. With
        more than two teams the first pick stands for all (ML-Agents' ELO is for two)."""
        for opponents in (learner, *self.behaviors.values()):
            if opponents.picks:
                return opponents, next(iter(opponents.picks.values())).snapshot
        return learner, LATEST

    def change_team(self) -> list[tuple[Behavior, list[Trajectory]]]:
        """The next team learns: the old learning team's partial trajectories are cut (interrupted, counted), and
        every self-play behavior's opponents get new picks. Returns the cut trajectories by behavior."""
        old = self.learning_team
        new = self.rotation.change()
        if new == old:
            return []
        log.info("self-play: team %s learns (was team %s)", new, old)
        cut: list[tuple[Behavior, list[Trajectory]]] = []
        for name, opponents in self.behaviors.items():
            for session, team in opponents.sessions.values():
                assembler = session.assemblers.get(name)  # none where the session never had agents of it
                if team == old and not session.closed and assembler is not None:
                    trajectories = assembler.flush()
                    opponents.counters.cuts += len(trajectories)
                    if trajectories:
                        cut.append((opponents.behavior, trajectories))
            opponents.swap(new)
        return cut
