"""PettingZoo parallel envs as env clients: ``env_path: pettingzoo:MODULE:FUNCTION``.

``FUNCTION()`` of the imported ``MODULE`` makes one env of PettingZoo's parallel API (``reset``,
``step`` over dicts keyed by agent name, ``possible_agents``, ``observation_space(agent)``,
``action_space(agent)``); ``num_envs`` copies run in one session, stepped together.

**The one rule for behaviors, teams and groups** (docs/environments.md, "PettingZoo"):

* an agent's **behavior** is its name's prefix: the name without a trailing ``_<digits>``
  (``adversary_0`` -> ``adversary``; a name without such a tail is its own behavior);
* its **team** comes from a map prefix -> team (``teams``), default 0;
* there is **one group per team per env copy**: group id ``copy * (most_team + 1) + team + 1``;
* ``behaviors`` (agent name -> behavior) and ``teams`` override the defaults.

Agents of one behavior must share their observation and action spaces (one ``BrainParameters``
each, spaces mapped as ``envclient.gym_adapter`` maps Gymnasium's). Per step and behavior one
BrainInfo goes out, rows over every copy. An agent that leaves (terminated, or gone from the next
step's observations) is sent once more as done; truncation is done + ``max_reached`` (interrupted,
not terminal). A copy whose agents are all gone is reset at the next step, as Gymnasium's next-step
auto-reset does, and its agents come back as first sightings. Rewards are the env's own per agent; a
``group_reward`` entry in an agent's info dict is sent as its group reward (PettingZoo has no field
for one). Agent ids are ``copy * len(possible_agents) + index in possible_agents``.

Shapes: ``N`` rows of one behavior in one step.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.env_paths import parse_pettingzoo_path
from common.errors import ConfigError
from common.specs import BrainParameters
from envclient.gym_adapter import _action_adapter, _observation_adapter
from envclient.session import EnvSession

_TAIL = re.compile(r"_\d+$")


def behavior_of(agent: str) -> str:
    """The behavior of agent ``agent`` by the rule: its name without a trailing ``_<digits>``."""
    return _TAIL.sub("", agent) or agent


def load_parallel_env_factory(env_path: str) -> Callable[[], Any]:
    """``FUNCTION`` of ``pettingzoo:MODULE:FUNCTION``, imported.

    Raises:
        ConfigError: a malformed path, a module that does not import, or no such callable in it; each names them.
    """
    module_name, function_name = parse_pettingzoo_path(env_path)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any failure to import is a config error naming it
        raise ConfigError(
            f"env_path: {env_path}: module '{module_name}' does not import: {type(exc).__name__}: {exc}"
        ) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(function_name, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"env_path: {env_path}: module '{module_name}' has no function '{function_name}'{hint}")
    return function


@dataclass
class _Copy:
    """One env copy: the rows it reports at the next step."""

    env: Any
    obs: dict[str, Any]
    rewards: dict[str, float] = field(default_factory=dict)
    group_rewards: dict[str, float] = field(default_factory=dict)
    done: dict[str, bool] = field(default_factory=dict)
    max_reached: dict[str, bool] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)
    """Agents that get an action at this step."""
    seen: set[str] = field(default_factory=set)
    """Agents seen since the copy's reset: one that left is not reported again, whatever the env returns."""
    needs_reset: bool = False


@dataclass
class PettingZooStats:
    """What one ``PettingZooClient.run`` sent and saw."""

    env_steps: int = 0
    """Steps of every copy (one BrainInfo per behavior each)."""
    episode_returns: dict[str, list[float]] = field(default_factory=dict)
    """Per agent name, the sum of its own rewards over each episode that ended."""
    group_returns: list[float] = field(default_factory=list)
    """Per group episode (a team of a copy, from reset to its last agent leaving), the group rewards summed once per step."""


class PettingZooClient:
    """``num_envs`` copies of a PettingZoo parallel env, driven through one ``EnvSession`` (module docstring)."""

    def __init__(
        self,
        make_env: Callable[[], Any],
        num_envs: int = 1,
        seed: int | None = None,
        teams: Mapping[str, int] | None = None,
        behaviors: Mapping[str, str] | None = None,
        env_path: str = "pettingzoo",
    ) -> None:
        """Raises:
        ConfigError: ``num_envs`` < 1, a negative team, or agents of one behavior with different spaces.
        NotSupportedYetError: a space outside ``envclient.gym_adapter``'s table.
        """
        if num_envs < 1:
            raise ConfigError(f"{env_path}: num_envs must be >= 1, got {num_envs}")
        self.seed = seed
        self.envs = [make_env() for _ in range(num_envs)]
        first = self.envs[0]
        self.possible_agents: list[str] = list(first.possible_agents)
        overrides = dict(behaviors or {})
        self.behavior = {a: overrides.get(a, behavior_of(a)) for a in self.possible_agents}
        teams = dict(teams or {})
        if any(t < 0 for t in teams.values()):
            raise ConfigError(f"{env_path}: teams must be >= 0, got {teams}")
        self.team = {a: teams.get(self.behavior[a], 0) for a in self.possible_agents}
        self._team_stride = max(self.team.values(), default=0) + 1
        self.brain_parameters: dict[str, BrainParameters] = {}
        self._obs_convert: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
        self._action_convert: dict[str, Any] = {}
        self._spaces: dict[str, tuple[Any, Any]] = {}
        for agent in self.possible_agents:
            name = self.behavior[agent]
            spaces = (first.observation_space(agent), first.action_space(agent))
            if name in self._spaces:
                if spaces != self._spaces[name]:
                    raise ConfigError(f"{env_path}: agents of behavior '{name}' have different spaces ({agent}: {spaces})")
                continue
            self._spaces[name] = spaces
            obs_spec, convert = _observation_adapter(env_path, spaces[0])
            actions = _action_adapter(env_path, spaces[1])
            self.brain_parameters[name] = BrainParameters(name, (obs_spec,), actions.spec)
            self._obs_convert[name] = convert
            self._action_convert[name] = actions
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self._copies: list[_Copy] = []

    def agent_id(self, copy: int, agent: str) -> int:
        return copy * len(self.possible_agents) + self._index[agent]

    def group_id(self, copy: int, agent: str) -> int:
        return copy * self._team_stride + self.team[agent] + 1

    def _reset(self, c: int) -> dict[str, Any]:
        seed = None if self.seed is None else self.seed + c
        obs, _ = self.envs[c].reset(seed=seed) if seed is not None else self.envs[c].reset()
        if self.seed is not None:
            self.seed += len(self.envs)  # the next episode of each copy gets a seed of its own
        return dict(obs)

    def _start(self) -> None:
        self._copies = []
        for c, env in enumerate(self.envs):
            obs = self._reset(c)
            self._copies.append(_Copy(env, obs, live=set(obs), seen=set(obs)))

    def _rows(self, name: str) -> list[tuple[int, str]]:
        """(copy, agent) of every row of behavior ``name`` this step, in a fixed order."""
        return [
            (c, a)
            for c, copy in enumerate(self._copies)
            for a in self.possible_agents
            if self.behavior[a] == name and a in copy.obs
        ]

    async def run(
        self, session: EnvSession, max_env_steps: int | None = None, stop: asyncio.Event | None = None
    ) -> PettingZooStats:
        """Step every copy through an open ``session`` that declared ``brain_parameters``' behaviors.

        Raises:
            StepRejectedError: the processor ended the session.
            ValueError: neither ``max_env_steps`` nor ``stop``.
        """
        if max_env_steps is None and stop is None:
            raise ValueError("give max_env_steps or stop, or the run never ends")
        stats = PettingZooStats()
        self._start()
        returns: dict[tuple[int, str], float] = {}
        group_return: dict[tuple[int, int], float] = {}
        while (max_env_steps is None or stats.env_steps < max_env_steps) and not (stop is not None and stop.is_set()):
            actions: list[dict[str, Any]] = [{} for _ in self._copies]
            for name in self.brain_parameters:
                rows = self._rows(name)
                if rows:
                    await self._send(session, name, rows, actions)
            stats.env_steps += 1
            for c, copy in enumerate(self._copies):
                self._account(c, copy, stats, returns, group_return)
                if copy.needs_reset:
                    obs = self._reset(c)
                    self._copies[c] = _Copy(copy.env, obs, live=set(obs), seen=set(obs))
                    continue
                self._step_copy(copy, actions[c])
        return stats

    async def _send(self, session: EnvSession, name: str, rows: list[tuple[int, str]], actions: list[dict[str, Any]]) -> None:
        copies = self._copies
        obs = self._obs_convert[name](np.stack([np.asarray(copies[c].obs[a]) for c, a in rows]))
        result = await session.step(
            name,
            np.array([self.agent_id(c, a) for c, a in rows], np.int64),
            [obs],
            np.array([copies[c].rewards.get(a, 0.0) for c, a in rows], np.float32),
            np.array([copies[c].done.get(a, False) for c, a in rows], bool),
            np.array([copies[c].max_reached.get(a, False) for c, a in rows], bool),
            group_ids=np.array([self.group_id(c, a) for c, a in rows], np.int32),
            group_rewards=np.array([copies[c].group_rewards.get(a, 0.0) for c, a in rows], np.float32),
        )
        env_actions = self._action_convert[name].to_env(result.continuous_actions, result.discrete_actions, len(rows))
        for (c, a), action in zip(rows, env_actions, strict=True):
            if a in copies[c].live:
                actions[c][a] = action if np.ndim(action) else action.item()

    def _account(
        self,
        c: int,
        copy: _Copy,
        stats: PettingZooStats,
        returns: dict[tuple[int, str], float],
        group_return: dict[tuple[int, int], float],
    ) -> None:
        """Fold the rows just sent into the episode statistics."""
        teams_seen: set[int] = set()
        for a in copy.obs:
            returns[(c, a)] = returns.get((c, a), 0.0) + copy.rewards.get(a, 0.0)
            team = self.team[a]
            if team not in teams_seen:  # the group reward counted once per group and step
                teams_seen.add(team)
                group_return[(c, team)] = group_return.get((c, team), 0.0) + max(
                    (copy.group_rewards.get(m, 0.0) for m in copy.obs if self.team[m] == team), key=abs, default=0.0
                )
            if copy.done.get(a, False):
                stats.episode_returns.setdefault(a, []).append(returns.pop((c, a)))
        if copy.needs_reset:
            for team in sorted({self.team[a] for a in self.possible_agents}):
                stats.group_returns.append(group_return.pop((c, team), 0.0))

    def _step_copy(self, copy: _Copy, actions: dict[str, Any]) -> None:
        """Step one copy with its live agents' actions; set what its next rows report."""
        before = copy.live
        obs, rewards, terminated, truncated, infos = copy.env.step(actions)
        obs = dict(obs)
        copy.rewards = {a: float(r) for a, r in rewards.items()}
        copy.group_rewards = {a: float(i.get("group_reward", 0.0)) for a, i in infos.items() if isinstance(i, Mapping)}
        copy.done, copy.max_reached = {}, {}
        for a in before:
            ended = bool(terminated.get(a, False)) or bool(truncated.get(a, False)) or a not in obs
            if ended:
                copy.done[a] = True
                # Truncation alone is a time limit: interrupted, not terminal.
                copy.max_reached[a] = bool(truncated.get(a, False)) and not bool(terminated.get(a, False))
                obs.setdefault(a, copy.obs[a])  # an agent gone without a last obs reports its previous one
        obs = {a: o for a, o in obs.items() if a in before or a not in copy.seen}  # a new agent joins; a gone one stays gone
        copy.seen.update(obs)
        copy.live = {a for a in obs if a not in copy.done}
        copy.obs = obs
        copy.needs_reset = not copy.live

    def close(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()


def from_pettingzoo_path(
    env_path: str,
    num_envs: int = 1,
    seed: int | None = None,
    teams: Mapping[str, int] | None = None,
    behaviors: Mapping[str, str] | None = None,
) -> PettingZooClient:
    """A ``PettingZooClient`` of ``num_envs`` envs made by ``pettingzoo:MODULE:FUNCTION``.

    Raises:
        ConfigError: as ``load_parallel_env_factory``, or the factory raised (naming it).
    """
    factory = load_parallel_env_factory(env_path)

    def make() -> Any:
        try:
            return factory()
        except Exception as exc:  # the user's factory: its failure is reported with its name
            raise ConfigError(f"env_path: {env_path}: the factory raised {type(exc).__name__}: {exc}") from exc

    return PettingZooClient(make, num_envs, seed, teams, behaviors, env_path)


def behavior_names(client: PettingZooClient) -> Sequence[str]:
    """The behaviors the client's env hosts, in first-agent order."""
    return list(client.brain_parameters)
