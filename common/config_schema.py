"""The run configuration: behaviors, env_settings and default_settings (ML-Agents' ``RunOptions``).

Also the table of valid ML-Agents keys that are not fields here (:data:`EXTRA_KEYS`): what the
parser in :mod:`common.config` accepts as ignored, or rejects as not supported yet. ``max_policy_lag``
and ``gym:<id>`` env paths are stepstream's own. Import these names from :mod:`common.config`.

Units: "agent steps" counts agent experiences (one agent, one step), never env steps.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from common.config_sections import (
    BCHyperparameters,
    BehavioralCloningSettings,
    ConfigKeyError,
    DemoActionTiming,
    Hyperparameters,
    NetworkSettings,
    NotSupportedKeyError,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    SACHyperparameters,
    TrainerType,
    at_least,
    require,
)

HYPERPARAMETERS_FOR: dict[TrainerType, type[Hyperparameters]] = {
    TrainerType.PPO: PPOHyperparameters,
    TrainerType.SAC: SACHyperparameters,
    TrainerType.BC: BCHyperparameters,
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
    }
    """Per-algorithm max_policy_lag when unset. Provisional: to be set by the trainers' measurements."""

    trainer_type: TrainerType = TrainerType.PPO
    """Which trainer learns this behavior: ppo, sac or bc."""
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
        """
        hp = self.hyperparameters
        if isinstance(hp, PPOHyperparameters):
            return max(2, math.ceil(hp.buffer_size / self.time_horizon))
        if isinstance(hp, SACHyperparameters):
            return max(4, math.ceil(hp.batch_size / self.time_horizon))
        return None

    @property
    def demo_path(self) -> str | None:
        """The demonstrations a ``bc`` trainer learns from; None for other trainer types."""
        return self.hyperparameters.demo_path if isinstance(self.hyperparameters, BCHyperparameters) else None

    @property
    def demo_action_timing(self) -> DemoActionTiming:
        """A ``bc`` trainer's ``demo_action_timing`` (``common.demo_timing``); ``auto`` for other trainer types."""
        hp = self.hyperparameters
        return hp.demo_action_timing if isinstance(hp, BCHyperparameters) else DemoActionTiming.AUTO

    def resolved(self) -> dict[str, Any]:
        """Fields whose written value is derived: what ``to_dict`` records instead of None."""
        return {"max_policy_lag": self.effective_max_policy_lag}


GYM_PREFIX = "gym:"
# Gymnasium's own env-id grammar: [namespace/]name[-vN].
_GYM_ID = re.compile(r"^(?:(?P<namespace>[\w:-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?$")
SIMPLE_PREFIX = "simple:"
"""The built-in 1-D goal task (``envclient.simple_env``): ``simple:discrete`` or ``simple:continuous``."""
SIMPLE_KINDS = ("discrete", "continuous")
"""The action kinds of ``simple:<kind>``."""
SIMPLE_BEHAVIOR = "Simple1D"
"""The behavior name of a ``simple:`` env path."""


def behavior_name_for_env(env_path: str) -> str:
    """The default behavior name of an env path: for ``gym:<id>``, the id without namespace and version.

    Args:
        env_path: ``gym:<id>``, e.g. ``gym:CartPole-v1`` or ``gym:ALE/Pong-v5``; or the built-in
            1-D task, ``simple:discrete`` / ``simple:continuous`` (behavior ``Simple1D``).

    Returns:
        The behavior name, e.g. ``CartPole``, ``Pong`` or ``Simple1D``.

    Raises:
        NotSupportedKeyError: ``env_path`` is neither a ``gym:`` nor a ``simple:`` path (an
            ML-Agents Unity build path).
        ConfigKeyError: the id after ``gym:`` is not a Gymnasium env id, or the kind after
            ``simple:`` is not one of ``SIMPLE_KINDS``.
    """
    if env_path.startswith(SIMPLE_PREFIX):
        kind = env_path[len(SIMPLE_PREFIX) :]
        if kind not in SIMPLE_KINDS:
            choices = " or ".join(SIMPLE_PREFIX + k for k in SIMPLE_KINDS)
            raise ConfigKeyError("env_path", f"{env_path!r}: the built-in 1-D task is {choices}")
        return SIMPLE_BEHAVIOR
    if not env_path.startswith(GYM_PREFIX):
        detail = (
            f"{env_path!r} is not supported yet: only gym:<id>, simple:discrete or simple:continuous"
            " (or no env_path, for external env clients)"
        )
        raise NotSupportedKeyError("env_path", detail)
    match = _GYM_ID.match(env_path[len(GYM_PREFIX) :])
    if match is None:
        raise ConfigKeyError("env_path", f"{env_path!r} is not gym:<id> with a Gymnasium id like CartPole-v1")
    return match.group("name")


@dataclass(frozen=True, kw_only=True)
class EnvSettings:
    """``env_settings``: which environments the run starts itself (embedded mode)."""

    env_path: str | tuple[str, ...] | None = None
    """``gym:<id>`` or ``simple:<discrete|continuous>``, or a list of them for several behaviors; None: env
    clients connect on their own."""
    num_envs: int = 1
    """Environment instances per env_path entry; >= 1, and 1 when env_path is None."""
    seed: int = -1
    """Random seed of the run; -1 picks one at random."""

    def __post_init__(self) -> None:
        at_least(self.num_envs, 1, "num_envs")
        if self.env_path is None:
            require(self.num_envs == 1, "num_envs", f"must be 1 when env_path is not set, got {self.num_envs}")
        require(len(self.env_paths) > 0 or self.env_path is None, "env_path", "is an empty list")
        seen: dict[str, str] = {}
        for path in self.env_paths:
            name = behavior_name_for_env(path)
            require(name not in seen, "env_path", f"{seen.get(name)!r} and {path!r} both give behavior {name!r}")
            seen[name] = path

    @property
    def env_paths(self) -> tuple[str, ...]:
        """``env_path`` as a tuple (empty when None)."""
        if self.env_path is None:
            return ()
        return (self.env_path,) if isinstance(self.env_path, str) else tuple(self.env_path)

    @property
    def behavior_names(self) -> dict[str, str]:
        """Behavior name -> the env path that hosts it, in env_path order."""
        return {behavior_name_for_env(path): path for path in self.env_paths}


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

    def __post_init__(self) -> None:
        for name, env_path in self.env_settings.behavior_names.items():
            if name not in self.behaviors and self.default_settings is None:
                detail = (
                    f"behavior {name!r} (from {env_path!r}) has no entry under behaviors and there is no default_settings"
                    f" (behaviors: {', '.join(sorted(self.behaviors)) or 'none'})"
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
        known = ", ".join(sorted(self.behaviors)) or "none"
        raise ConfigKeyError(f"behaviors.{behavior_name}", f"not configured and there is no default_settings (known: {known})")

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
_ENV_IGNORED = (
    "env_args",
    "base_port",
    "num_areas",
    "timeout_wait",
    "max_lifetime_restarts",
    "restarts_rate_limit_n",
    "restarts_rate_limit_period_s",
)

EXTRA_KEYS: dict[type, dict[str, ExtraKey]] = {
    RunOptions: {
        "debug": ExtraKey(),
        "engine_settings": ExtraKey(subkeys=_ENGINE_KEYS),
        "checkpoint_settings": ExtraKey(subkeys=_CHECKPOINT_KEYS),
        "torch_settings": ExtraKey(subkeys=frozenset({"device"})),
        "environment_parameters": ExtraKey(only=None, why="environment parameters and curricula"),
    },
    EnvSettings: {key: ExtraKey() for key in _ENV_IGNORED},
    BehaviorSettings: {
        "threaded": ExtraKey(),
        "even_checkpoints": ExtraKey(),
        "framework": ExtraKey(),
        "init_path": ExtraKey(only=None, why="initialising from another run's checkpoint"),
        "self_play": ExtraKey(only=None, why="self-play"),
    },
    NetworkSettings: {
        "goal_conditioning_type": ExtraKey(choices=frozenset({"hyper", "none"})),
        "max_num_agents": ExtraKey(),
    },
    PPOHyperparameters: {"shared_critic": ExtraKey(only=False, why="a critic shared with the policy")},
}
"""Per section: the ML-Agents keys that are ignored, or not supported yet unless at their default."""

NOT_SUPPORTED_VALUES: dict[type[Enum], dict[str, str]] = {
    TrainerType: {"poca": "the MA-POCA trainer"},
    RewardSignalType: {"rnd": "the RND reward signal"},
}
"""Valid ML-Agents values of an enum field that are not supported yet, with what they would need."""
VALUE_HINTS: dict[str, str] = {"offline_bc": "bc"}
"""Old ML-Agents spellings and the value to use instead."""
