"""The run configuration: behaviors, env_settings and default_settings (ML-Agents' ``RunOptions``).

Also the table of valid ML-Agents keys that are not fields here (:data:`EXTRA_KEYS`): what the
parser in :mod:`common.config` accepts as ignored, or rejects as not supported yet. ``max_policy_lag``
and ``gym:<id>`` env paths are stepstream's own. Import these names from :mod:`common.config`.

Units: "agent steps" counts agent experiences (one agent, one step), never env steps.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from common import env_paths
from common.config_sections import (
    BCHyperparameters,
    BehavioralCloningSettings,
    ConfigKeyError,
    DemoActionTiming,
    Hyperparameters,
    NetworkSettings,
    NotSupportedKeyError,
    POCAHyperparameters,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    SelfPlaySettings,
    StateDependentExploration,
    TrainerType,
    at_least,
    require,
)
from common.environment_parameters import EnvironmentParameter
from common.errors import ConfigError, NotSupportedYetError
from common.messages import MAX_RENDERED_CHARS, bounded_names, bounded_repr

HYPERPARAMETERS_FOR: dict[TrainerType, type[Hyperparameters]] = {
    TrainerType.PPO: PPOHyperparameters,
    TrainerType.SAC: SACHyperparameters,
    TrainerType.BC: BCHyperparameters,
    TrainerType.POCA: POCAHyperparameters,
}
"""The hyperparameters class of each trainer type."""


def _default_reward_signals() -> dict[RewardSignalType, RewardSignalSettings]:
    return {RewardSignalType.EXTRINSIC: RewardSignalSettings()}


@dataclass(frozen=True, kw_only=True)
class BehaviorSettings:
    """One entry under ``behaviors`` (ML-Agents' ``TrainerSettings``), also ``default_settings``."""

    DEFAULT_MAX_POLICY_LAG: ClassVar[Mapping[TrainerType, int | None]] = {
        TrainerType.PPO: 2,
        TrainerType.SAC: None,
        TrainerType.BC: None,
        TrainerType.POCA: 2,
    }
    """Per-algorithm max_policy_lag when unset. Provisional: to be set by the trainers' measurements."""

    trainer_type: TrainerType = TrainerType.PPO
    """Which trainer learns this behavior: ppo, sac, bc or poca."""
    hyperparameters: Hyperparameters = field(default_factory=PPOHyperparameters)
    """The trainer's hyperparameters; their class must match trainer_type."""
    network_settings: NetworkSettings = field(default_factory=NetworkSettings)
    """Policy and critic network."""
    reward_signals: Mapping[RewardSignalType, RewardSignalSettings] = field(default_factory=_default_reward_signals)
    """Reward signals by name; at least one."""
    behavioral_cloning: BehavioralCloningSettings | None = None
    """Optional BC loss alongside PPO or SAC."""
    max_steps: int = 500000
    """Training stops after this many experiences of this behavior (agent steps); >= 0."""
    time_horizon: int = 64
    """Longest trajectory cut before bootstrapping (agent steps); >= 1."""
    summary_freq: int = 50000
    """Statistics are written every this many experiences (agent steps); >= 1."""
    checkpoint_interval: int = 500000
    """A checkpoint is saved every this many experiences (agent steps); >= 1."""
    keep_checkpoints: int = 5
    """Newest checkpoints kept on disk; >= 1."""
    max_policy_lag: int | None = None
    """Drop (and count) trajectories whose oldest acting policy version is more than this many versions
    behind the newest (policy versions); >= 0; None: the per-algorithm default, see effective_max_policy_lag."""
    init_path: str | None = None
    """Start this behavior's networks (and optimisers) from the newest checkpoint of another run's behavior folder,
    ``<results-dir>/<run-id>/<behavior>`` (or its ``checkpoints`` folder), at step 0; None: fresh weights. ``--resume``
    takes precedence; ``--initialize-from RUN_ID`` sets it for every behavior that has none (ML-Agents' key)."""
    self_play: SelfPlaySettings | None = None
    """Self-play against past snapshots (ML-Agents' ``self_play``); ppo or sac; None: no self-play."""
    max_queued_trajectories: int | None = None
    """The trainer's trajectory queue in the processor holds at most this many (trajectories, queued +
    unacknowledged); >= 1; None: the size derived from the trainer's settings, see trajectory_queue_size."""

    def __post_init__(self) -> None:
        expected = HYPERPARAMETERS_FOR[self.trainer_type]
        if not isinstance(self.hyperparameters, expected):
            got = type(self.hyperparameters).__name__
            raise ConfigKeyError("hyperparameters", f"{got} does not fit trainer_type {self.trainer_type.value!r}")
        require(len(self.reward_signals) > 0, "reward_signals", "needs at least one reward signal, got none")
        at_least(self.max_steps, 0, "max_steps")
        at_least(self.time_horizon, 1, "time_horizon")
        at_least(self.summary_freq, 1, "summary_freq")
        at_least(self.checkpoint_interval, 1, "checkpoint_interval")
        at_least(self.keep_checkpoints, 1, "keep_checkpoints")
        if self.max_policy_lag is not None:
            at_least(self.max_policy_lag, 0, "max_policy_lag")
        if self.max_queued_trajectories is not None:
            at_least(self.max_queued_trajectories, 1, "max_queued_trajectories")
        memory = self.network_settings.memory
        if memory is not None:
            batch_size = self.hyperparameters.batch_size
            require(
                memory.sequence_length <= batch_size,
                "network_settings.memory.sequence_length",
                f"must be <= hyperparameters.batch_size ({batch_size}): a minibatch holds whole sequences,"
                f" got {memory.sequence_length}",
            )
        if self.self_play is not None:
            self._check_self_play(self.self_play)

    def _check_self_play(self, self_play: SelfPlaySettings) -> None:
        """Refuse what ML-Agents only warns about: a team that never changes before ``max_steps``, and a trainer
        self-play cannot wrap."""
        require(
            self.trainer_type in (TrainerType.PPO, TrainerType.SAC),
            "self_play",
            f"needs trainer_type ppo or sac, got {self.trainer_type.value!r}",
        )
        team_change = self_play.effective_team_change
        require(
            team_change <= self.max_steps,
            "self_play.team_change",
            f"{team_change} is above max_steps ({self.max_steps}): the other team would never learn",
        )

    @property
    def effective_max_policy_lag(self) -> int | None:
        """The staleness bound in policy versions; None means unbounded (ppo 2, sac and bc None by default)."""
        if self.max_policy_lag is not None:
            return self.max_policy_lag
        return self.DEFAULT_MAX_POLICY_LAG[self.trainer_type]

    @property
    def trajectory_queue_size(self) -> int | None:
        """Capacity (trajectories, queued + unacknowledged) of this behavior's subscriber queues in the
        processor; None: the processor-wide default.

        PPO is on-policy, so its queue holds about one update buffer of trajectories,
        ``max(2, ceil(buffer_size / time_horizon))``: env clients then wait (``block``) while the trainer
        updates, instead of acting on with a policy that is about to be replaced and whose data
        ``max_policy_lag`` would drop. SAC is off-policy but its sample efficiency still needs data from a
        recent policy: about one minibatch, ``max(4, ceil(batch_size / time_horizon))``; with 1024 the env
        clients outran the trainer and 1000 steps on the 1-D task bought 2 updates (8 of 8 runs failed).
        BC keeps the processor-wide default.

        ``max_queued_trajectories`` overrules the derived size. PPO's counts trajectories as if each were
        ``time_horizon`` long; where episodes end sooner, the envs act on for up to that many trajectories while the
        trainer updates, and the next update takes their rows one version stale. ``configs/minigrid_ppo.yaml`` sets
        2: its 8 envs' trajectories (episodes of 5-100 steps) are mostly shorter than its time_horizon of 128.
        """
        if self.max_queued_trajectories is not None:
            return self.max_queued_trajectories
        hp = self.hyperparameters
        if isinstance(hp, PPOHyperparameters):
            return max(2, math.ceil(hp.buffer_size / self.time_horizon))
        if isinstance(hp, SACHyperparameters):
            return max(4, math.ceil(hp.batch_size / self.time_horizon))
        return None

    @property
    def noise_hold_steps(self) -> int:
        """Steps the processor holds each agent's action noise (``PPOHyperparameters.noise_hold_steps``; with
        ``use_sde``, PPO's or SAC's, gSDE's ``sde_sample_freq``, -1 meaning ``time_horizon``); 1 otherwise (fresh
        noise every step)."""
        hp = self.hyperparameters
        if isinstance(hp, StateDependentExploration) and hp.use_sde:
            return self.time_horizon if hp.sde_sample_freq == -1 else hp.sde_sample_freq
        return hp.noise_hold_steps if isinstance(hp, PPOHyperparameters) else 1

    @property
    def sde_latent_size(self) -> int:
        """Rows L of the gSDE exploration matrix the processor holds per agent (the policy's last hidden layer,
        ``hidden_units``) with PPO's or SAC's ``use_sde``; 0 without gSDE."""
        hp = self.hyperparameters
        return self.network_settings.hidden_units if isinstance(hp, StateDependentExploration) and hp.use_sde else 0

    @property
    def demo_path(self) -> str | None:
        """The demonstrations a ``bc`` trainer learns from; None for other trainer types."""
        return self.hyperparameters.demo_path if isinstance(self.hyperparameters, BCHyperparameters) else None

    @property
    def demo_action_timing(self) -> DemoActionTiming:
        """A ``bc`` trainer's ``demo_action_timing`` (``common.demo_timing``); ``auto`` for other trainer types."""
        hp = self.hyperparameters
        return hp.demo_action_timing if isinstance(hp, BCHyperparameters) else DemoActionTiming.AUTO

    def demo_paths(self) -> dict[str, str]:
        """Every demonstration path this behavior reads, by its dotted key under the behavior."""
        paths: dict[str, str] = {}
        if self.demo_path is not None:
            paths["hyperparameters.demo_path"] = self.demo_path
        for kind, signal in self.reward_signals.items():
            demo_path = getattr(signal, "demo_path", None)
            if demo_path is not None:
                paths[f"reward_signals.{kind.value}.demo_path"] = demo_path
        if self.behavioral_cloning is not None:
            paths["behavioral_cloning.demo_path"] = self.behavioral_cloning.demo_path
        return paths

    def resolved(self) -> dict[str, Any]:
        """Fields whose written value is derived: what ``to_dict`` records instead of None."""
        return {"max_policy_lag": self.effective_max_policy_lag}


def behavior_name_for_env(env_path: str) -> str:
    """``common.env_paths.behavior_name_for_env``, its errors keyed ``env_path`` for the config parser.

    Raises:
        NotSupportedKeyError: a Unity build path (neither ``gym:`` nor ``simple:``).
        ConfigKeyError: a malformed ``gym:`` id or ``simple:`` kind.
    """
    try:
        return env_paths.behavior_name_for_env(env_path)
    except NotSupportedYetError as exc:
        raise NotSupportedKeyError("env_path", str(exc)) from None
    except ConfigError as exc:
        raise ConfigKeyError("env_path", str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class EnvPathEntry:
    """An ``env_path`` entry that names its behavior: ``{env: gym:Pendulum-v1, behavior: 3DBall}``.

    So a config written for a Unity env (whose behavior is ``3DBall``) trains on a Gymnasium env,
    and several behaviors map to several envs.
    """

    env: str
    """``gym:<id>`` or ``simple:<discrete|continuous>``."""
    behavior: str | None = None
    """The behavior the env declares; None: ``behavior_name_for_env(env)`` (``gym:Pendulum-v1`` -> ``Pendulum``)."""

    def __post_init__(self) -> None:
        # ``env`` is checked by EnvSettings, which names the key env_path for plain and mapped entries alike.
        if self.behavior is not None:
            require(bool(self.behavior.strip()), "behavior", "must name a behavior, got ''")

    @property
    def behavior_name(self) -> str:
        """The behavior the env declares."""
        return self.behavior if self.behavior is not None else behavior_name_for_env(self.env)


EnvPath = str | EnvPathEntry
"""One ``env_path`` entry: a plain path (behavior named after the env) or an ``EnvPathEntry``."""


@dataclass(frozen=True, kw_only=True)
class EnvSettings:
    """``env_settings``: which environments the run starts itself (embedded mode)."""

    env_path: str | EnvPathEntry | tuple[str | EnvPathEntry, ...] | None = None
    """``gym:<id>`` or ``simple:<discrete|continuous>`` (or ``{env: ..., behavior: NAME}``), or a list of them for
    several behaviors; None: env clients connect on their own."""
    num_envs: int = 1
    """Environment instances per env_path entry; >= 1, and 1 when env_path is None."""
    seed: int = -1
    """Random seed of the run; -1 picks one at random."""

    def __post_init__(self) -> None:
        at_least(self.num_envs, 1, "num_envs")
        if self.env_path is None:
            require(self.num_envs == 1, "num_envs", f"must be 1 when env_path is not set, got {self.num_envs}")
        require(len(self.entries) > 0 or self.env_path is None, "env_path", "is an empty list")
        seen: dict[str, str] = {}
        for entry in self.entries:
            behavior_name_for_env(entry.env)  # validates the path
            name = entry.behavior_name
            detail = f"{bounded_repr(seen.get(name))} and {bounded_repr(entry.env)} both give behavior {bounded_repr(name)}"
            require(name not in seen, "env_path", detail)
            seen[name] = entry.env

    @property
    def entries(self) -> tuple[EnvPathEntry, ...]:
        """``env_path`` as a tuple of entries (empty when None)."""
        if self.env_path is None:
            return ()
        paths = self.env_path if isinstance(self.env_path, tuple) else (self.env_path,)
        return tuple(EnvPathEntry(env=path) if isinstance(path, str) else path for path in paths)

    @property
    def env_paths(self) -> tuple[str, ...]:
        """The env of every ``env_path`` entry, in order (empty when None)."""
        return tuple(entry.env for entry in self.entries)

    @property
    def behavior_names(self) -> dict[str, str]:
        """Behavior name -> the env path that hosts it, in env_path order."""
        return {entry.behavior_name: entry.env for entry in self.entries}


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """The whole trainer YAML: behaviors, default_settings and env_settings (ML-Agents' ``RunOptions``).

    ``behaviors`` already has ``default_settings`` merged in, and holds an entry for every behavior
    named by ``env_settings.env_path``.
    """

    behaviors: Mapping[str, BehaviorSettings] = field(default_factory=dict)
    """Settings per behavior name."""
    env_settings: EnvSettings = field(default_factory=EnvSettings)
    """Environments this run starts itself."""
    default_settings: BehaviorSettings | None = None
    """Settings for a behavior not under ``behaviors`` (e.g. one an external env client declares)."""
    environment_parameters: Mapping[str, EnvironmentParameter] = field(default_factory=dict)
    """``environment_parameters`` by name: each a constant, a sampler or a curriculum of lessons
    (``common.environment_parameters``)."""

    def __post_init__(self) -> None:
        for name, env_path in self.env_settings.behavior_names.items():
            if name not in self.behaviors and self.default_settings is None:
                detail = (
                    f"behavior {bounded_repr(name)} (from {bounded_repr(env_path)}) has no entry under behaviors and there"
                    f" is no default_settings (behaviors: {bounded_names(sorted(self.behaviors))})"
                )
                raise ConfigKeyError("env_settings.env_path", detail)

    def settings_for(self, behavior_name: str) -> BehaviorSettings:
        """The settings of ``behavior_name``: its own entry, else ``default_settings``.

        Raises:
            ConfigKeyError: neither exists (as ML-Agents does for an unconfigured behavior).
        """
        if behavior_name in self.behaviors:
            return self.behaviors[behavior_name]
        if self.default_settings is not None:
            return self.default_settings
        known = bounded_names(sorted(self.behaviors))
        key = f"behaviors.{bounded_repr(behavior_name) if len(behavior_name) > MAX_RENDERED_CHARS else behavior_name}"
        raise ConfigKeyError(key, f"not configured and there is no default_settings (known: {known})")

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain YAML-able data, derived defaults written out.

        ``parse_config(options.to_dict())`` gives options with the same effective values, and its
        ``to_dict()`` is equal. This is what ``results/<run-id>/configuration.yaml`` holds.
        """
        out: dict[str, Any] = {}
        if self.default_settings is not None:
            out["default_settings"] = _plain(self.default_settings)
        out["behaviors"] = {name: _plain(settings) for name, settings in self.behaviors.items()}
        out["env_settings"] = _plain(self.env_settings)
        if self.environment_parameters:
            out["environment_parameters"] = {name: p.to_dict() for name, p in self.environment_parameters.items()}
        return out


def _plain(value: Any) -> Any:
    """Dataclasses, enums, mappings and tuples as dicts, strings and lists; derived fields resolved."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        resolved = getattr(value, "resolved", None)
        if resolved is not None:
            out.update(resolved())
        return {key: _plain(item) for key, item in out.items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


# --- ML-Agents keys that are not fields ------------------------------------------------------


ANY: Any = object()
"""``ExtraKey.only`` when any value is ignored."""


@dataclass(frozen=True)
class ExtraKey:
    """A valid ML-Agents key that is not a field here: ignored, or not supported yet.

    Ignored when ``only`` is ``ANY`` or equals the value; otherwise not supported yet. ``subkeys``
    (for an ignored section) and ``choices`` (for an ignored scalar) are still checked.
    """

    only: Any = ANY
    subkeys: frozenset[str] | None = None
    choices: frozenset[str] | None = None
    why: str = ""
    unity: bool = False
    """Read only where the env is a Unity build (``cli.unity_train``, ``cli.unity``): logged as such, not as ignored."""


_ENGINE_KEYS = frozenset(
    {
        "width",
        "height",
        "quality_level",
        "time_scale",
        "target_frame_rate",
        "capture_frame_rate",
        "no_graphics",
        "no_graphics_monitor",
    }
)
_CHECKPOINT_KEYS = frozenset(
    {"run_id", "initialize_from", "load_model", "resume", "force", "train_model", "inference", "results_dir"}
)
_ENV_IGNORED = ("env_args", "num_areas", "timeout_wait")
_ENV_UNITY = ("base_port", "max_lifetime_restarts", "restarts_rate_limit_n", "restarts_rate_limit_period_s")

EXTRA_KEYS: dict[type, dict[str, ExtraKey]] = {
    RunOptions: {
        "debug": ExtraKey(),
        "engine_settings": ExtraKey(subkeys=_ENGINE_KEYS, unity=True),
        "checkpoint_settings": ExtraKey(subkeys=_CHECKPOINT_KEYS),
        "torch_settings": ExtraKey(subkeys=frozenset({"device"})),
    },
    EnvSettings: {key: ExtraKey() for key in _ENV_IGNORED} | {key: ExtraKey(unity=True) for key in _ENV_UNITY},
    BehaviorSettings: {
        "threaded": ExtraKey(),
        "even_checkpoints": ExtraKey(),
        "framework": ExtraKey(),
        # ML-Agents releases 2-10 (TrainerSettings.output_path): where a behavior's results went; stepstream
        # writes them to <results-dir>/<run-id>/<behavior>.
        "output_path": ExtraKey(),
    },
    NetworkSettings: {
        "goal_conditioning_type": ExtraKey(choices=frozenset({"hyper", "none"})),
        "max_num_agents": ExtraKey(),
    },
}
"""Per section: the ML-Agents keys that are ignored, or not supported yet unless at their default."""

NOT_SUPPORTED_VALUES: dict[type[Enum], dict[str, str]] = {}
"""Valid ML-Agents values of an enum field that are not supported yet, with what they would need."""
VALUE_HINTS: dict[str, str] = {"offline_bc": "bc"}
"""Old ML-Agents spellings and the value to use instead."""
