"""Load ML-Agents' trainer YAML into the typed :class:`RunOptions` (dataclasses in ``config_schema``).

``yaml.safe_load``, then one strict walk over the mapping. Every key falls in one of four groups:

- **supported**: a field of one of the dataclasses; it works as in ML-Agents 1.x;
- **ignored**: a valid ML-Agents key that changes nothing stepstream does (``threaded``,
  ``torch_settings``, ``env_settings.num_areas``, ...); accepted, and one log line names them all;
  the keys only a Unity build reads (``engine_settings``, ``env_settings.base_port`` and the restart
  keys) get a line of their own, since they matter there and nowhere else;
- **not supported yet**: a valid ML-Agents key or value stepstream does not implement yet
  (``network_settings.memory``, ``trainer_type: poca``, ...); a
  :class:`NotSupportedKeyError` naming the dotted key;
- **anything else**: a :class:`ConfigKeyError` naming the dotted key, with a did-you-mean.

Both error types carry ``key`` (the dotted path) and ``source`` (the file name), and their message
starts with ``"<source>: <key>: "``. ``default_settings`` is deep-merged under every behavior as in
ML-Agents: the behavior's own keys win, nested sections merge key by key, and a behavior whose
``trainer_type`` differs from the default's starts from that trainer's default hyperparameters.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import logging
import math
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import yaml

from common.config_schema import (
    ANY,
    EXTRA_KEYS,
    HYPERPARAMETERS_FOR,
    NOT_SUPPORTED_VALUES,
    VALUE_HINTS,
    BehaviorSettings,
    EnvPathEntry,
    EnvSettings,
    ExtraKey,
    RunOptions,
    behavior_name_for_env,
)
from common.config_sections import (
    REWARD_SIGNAL_SETTINGS_FOR,
    ActivationType,
    BCHyperparameters,
    BehavioralCloningSettings,
    ConfigKeyError,
    CuriositySettings,
    DemoActionTiming,
    EncoderType,
    GAILSettings,
    Hyperparameters,
    MemorySettings,
    NetworkSettings,
    NotSupportedKeyError,
    POCAHyperparameters,
    PPOHyperparameters,
    RewardSignalSettings,
    RewardSignalType,
    RNDSettings,
    SACHyperparameters,
    ScheduleType,
    SelfPlaySettings,
    StateDependentExploration,
    TrainerType,
)
from common.env_paths import GYM_PREFIX, SIMPLE_BEHAVIOR, SIMPLE_KINDS, SIMPLE_PREFIX
from common.environment_parameters import (
    SAMPLER_FOR,
    ConstantSampler,
    EnvironmentParameter,
    Lesson,
    Sampler,
    SamplerType,
)
from common.messages import MAX_RENDERED_CHARS, bounded_repr

__all__ = [
    "GYM_PREFIX",
    "SIMPLE_BEHAVIOR",
    "SIMPLE_KINDS",
    "SIMPLE_PREFIX",
    "ActivationType",
    "BCHyperparameters",
    "BehaviorSettings",
    "BehavioralCloningSettings",
    "ConfigKeyError",
    "CuriositySettings",
    "DemoActionTiming",
    "EncoderType",
    "EnvPathEntry",
    "EnvSettings",
    "GAILSettings",
    "Hyperparameters",
    "MemorySettings",
    "NetworkSettings",
    "NotSupportedKeyError",
    "POCAHyperparameters",
    "PPOHyperparameters",
    "RNDSettings",
    "RewardSignalSettings",
    "RewardSignalType",
    "RunOptions",
    "SACHyperparameters",
    "ScheduleType",
    "SelfPlaySettings",
    "StateDependentExploration",
    "TrainerType",
    "behavior_name_for_env",
    "load_config",
    "parse_config",
    "read_yaml",
]

logger = logging.getLogger(__name__)


@dataclass
class _Walk:
    """State of one parse: where the mapping came from, and the ignored keys met so far."""

    source: str
    ignored: list[str] = dataclasses.field(default_factory=list)
    unity_only: list[str] = dataclasses.field(default_factory=list)

    def error(self, key: str, detail: str) -> ConfigKeyError:
        return ConfigKeyError(key, detail, self.source)

    def not_yet(self, key: str, detail: str) -> NotSupportedKeyError:
        return NotSupportedKeyError(key, detail, self.source)


def _join(path: str, key: object) -> str:
    text = key if isinstance(key, str) and len(key) <= MAX_RENDERED_CHARS else bounded_repr(key)
    return f"{path}.{text}" if path else str(text)


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word[: MAX_RENDERED_CHARS * 2], list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {bounded_repr(value)}"


# --- scalars --------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a number or a numeric string (YAML 1.1 reads ``1e-3`` as a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _to_int(value: Any, key: str, walk: _Walk) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = _number(value)
    # ML-Agents reads max_steps as int(float(x)); legacy configs write 5.0e5.
    if number is None or not math.isfinite(number) or not number.is_integer():
        raise walk.error(key, f"expected an integer, got {_describe(value)}")
    return int(number)


def _to_float(value: Any, key: str, walk: _Walk) -> float:
    number = _number(value)
    if number is None or not math.isfinite(number):
        raise walk.error(key, f"expected a finite number, got {_describe(value)}")
    return number


def _to_enum(enum_type: type[Enum], value: Any, key: str, walk: _Walk) -> Enum:
    allowed = [member.value for member in enum_type]
    hint = ""
    if isinstance(value, str):
        if value in allowed:
            return enum_type(value)
        if value in NOT_SUPPORTED_VALUES.get(enum_type, {}):
            what = NOT_SUPPORTED_VALUES[enum_type][value]
            raise walk.not_yet(key, f"{value!r} is not supported yet ({what}); supported: {', '.join(allowed)}")
        hint = f" (did you mean {VALUE_HINTS[value]!r}?)" if value in VALUE_HINTS else _did_you_mean(value, allowed)
    raise walk.error(key, f"expected one of {', '.join(allowed)}, got {_describe(value)}{hint}")


def _to_union(args: tuple[Any, ...], value: Any, key: str, walk: _Walk) -> Any:
    if value is None and type(None) in args:
        return None
    arms = [arm for arm in args if arm is not type(None)]
    if len(arms) == 1:
        return _convert(arms[0], value, key, walk)
    for arm in arms:  # only env_path has several arms: str | EnvPathEntry | tuple[str | EnvPathEntry, ...]
        if get_origin(arm) is tuple and isinstance(value, list | tuple):
            return _convert(arm, value, key, walk)
        if arm is str and isinstance(value, str):
            return value
        if dataclasses.is_dataclass(arm) and isinstance(value, Mapping):
            return _convert(arm, value, key, walk)
    raise walk.error(key, f"expected {' or '.join(_arm_name(arm) for arm in arms)}, got {_describe(value)}")


def _arm_name(arm: Any) -> str:
    if get_origin(arm) is tuple:
        return "a list"
    return "a mapping" if dataclasses.is_dataclass(arm) else f"a {getattr(arm, '__name__', arm)}"


def _convert(hint: Any, value: Any, key: str, walk: _Walk) -> Any:
    """``value`` as the type ``hint`` of a dataclass field, or a ConfigKeyError naming ``key``."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return _to_union(get_args(hint), value, key, walk)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise walk.error(key, f"expected a list, got {_describe(value)}")
        return tuple(_convert(get_args(hint)[0], item, f"{key}[{i}]", walk) for i, item in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise walk.error(key, f"expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        return _to_int(value, key, walk)
    if hint is float:
        return _to_float(value, key, walk)
    if hint is str:
        if not isinstance(value, str):
            raise walk.error(key, f"expected a string, got {_describe(value)}")
        return value
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _to_enum(hint, value, key, walk)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _build(hint, value, key, walk)
    raise TypeError(f"{key}: no conversion for field type {hint!r}")  # a schema bug, not a user error


# --- sections -------------------------------------------------------------------------------


def _as_mapping(raw: Any, path: str, walk: _Walk) -> Mapping[str, Any]:
    """A section's mapping; an empty YAML value (None) is an empty section."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise walk.error(path, f"expected a mapping, got {_describe(raw)}")
    for key in raw:
        if not isinstance(key, str):
            raise walk.error(_join(path, key), f"keys must be strings, got {_describe(key)}")
    return raw


def _extra_key(rule: ExtraKey, value: Any, key: str, walk: _Walk) -> None:
    """Accept (and record) an ignored key, or raise for a not-supported-yet one."""
    if rule.only is not ANY and (type(value) is not type(rule.only) or value != rule.only):
        allowed = yaml.safe_dump(rule.only).splitlines()[0]  # as YAML spells it: null, false
        raise walk.not_yet(key, f"not supported yet ({rule.why}); remove it or set it to {allowed}")
    if rule.subkeys is not None:
        for sub in _as_mapping(value, key, walk):
            if sub not in rule.subkeys:
                raise walk.error(_join(key, sub), f"unknown key{_did_you_mean(sub, rule.subkeys)}")
    if rule.choices is not None and not (isinstance(value, str) and value in rule.choices):
        raise walk.error(key, f"expected one of {', '.join(sorted(rule.choices))}, got {_describe(value)}")
    (walk.unity_only if rule.unity else walk.ignored).append(key)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _unknown_key(cls: type, key: str, candidates: list[str]) -> str:
    """The detail of an unknown-key error: a did-you-mean, or the trainer type the key belongs to."""
    if cls in HYPERPARAMETERS_FOR.values():
        for kind, other in HYPERPARAMETERS_FOR.items():
            if other is not cls and key in {f.name for f in dataclasses.fields(other)}:
                return f"unknown key for this trainer_type ({bounded_repr(key)} is a {kind.value} hyperparameter)"
    return f"unknown key{_did_you_mean(key, candidates)}"


def _build(cls: type, raw: Any, path: str, walk: _Walk, prebuilt: Mapping[str, Any] | None = None) -> Any:
    """One dataclass from its mapping: fields converted, extra keys handled, errors given full paths.

    Args:
        cls: the section's dataclass.
        raw: the section's YAML value.
        path: its dotted path ("" for the whole file).
        walk: the parse state.
        prebuilt: fields already converted by the caller; their keys in ``raw`` are skipped.
    """
    mapping = _as_mapping(raw, path, walk)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    extras = EXTRA_KEYS.get(cls, {})
    kwargs: dict[str, Any] = dict(prebuilt or {})
    for key, value in mapping.items():
        key_path = _join(path, key)
        if key in kwargs:
            continue
        if key in fields:
            kwargs[key] = _convert(hints[key], value, key_path, walk)
        elif key in extras:
            _extra_key(extras[key], value, key_path, walk)
        else:
            raise walk.error(key_path, _unknown_key(cls, key, [*fields, *extras]))
    for name, spec in fields.items():
        if name not in kwargs and spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise walk.error(_join(path, name), "required key is missing")
    return _construct(cls, kwargs, path, walk)


def _construct(cls: type, kwargs: Mapping[str, Any], path: str, walk: _Walk) -> Any:
    """``cls(**kwargs)``, with a range error's key made a full dotted path and given the source."""
    try:
        return cls(**kwargs)
    except ConfigKeyError as exc:
        raise walk.error(_join(path, exc.key), exc.detail) from None
    except NotSupportedKeyError as exc:
        raise walk.not_yet(_join(path, exc.key), exc.detail) from None


def _build_reward_signals(raw: Any, path: str, walk: _Walk) -> dict[RewardSignalType, RewardSignalSettings]:
    signals: dict[RewardSignalType, RewardSignalSettings] = {}
    for name, value in _as_mapping(raw, path, walk).items():
        key = _join(path, name)
        kind = RewardSignalType(_to_enum(RewardSignalType, name, key, walk))
        section = dict(_as_mapping(value, key, walk))
        if section.get("encoding_size") is not None and "network_settings" not in section:
            # ML-Agents' deprecated spelling: encoding_size becomes the signal network's width.
            logger.warning("%s: %s.encoding_size is deprecated; use network_settings.hidden_units", walk.source, key)
            section["network_settings"] = {"hidden_units": section["encoding_size"]}
        signals[kind] = _build(REWARD_SIGNAL_SETTINGS_FOR[kind], section, key, walk)
    return signals


def _build_behavior(raw: Any, path: str, walk: _Walk) -> BehaviorSettings:
    mapping = _as_mapping(raw, path, walk)
    if "hyperparameters" in mapping and "trainer_type" not in mapping:
        raise walk.error(_join(path, "hyperparameters"), "given without trainer_type (add trainer_type: ppo, sac or bc)")
    trainer_type = TrainerType(_to_enum(TrainerType, mapping.get("trainer_type", "ppo"), _join(path, "trainer_type"), walk))
    hyper_class = HYPERPARAMETERS_FOR[trainer_type]
    prebuilt: dict[str, Any] = {
        "trainer_type": trainer_type,
        "hyperparameters": _build(hyper_class, mapping.get("hyperparameters"), _join(path, "hyperparameters"), walk),
    }
    if "reward_signals" in mapping:
        prebuilt["reward_signals"] = _build_reward_signals(mapping["reward_signals"], _join(path, "reward_signals"), walk)
    settings: BehaviorSettings = _build(BehaviorSettings, mapping, path, walk, prebuilt)
    _warn_risky(settings, path, walk)
    return settings


def _warn_risky(settings: BehaviorSettings, path: str, walk: _Walk) -> None:
    """Log legal but risky combinations, with the numbers."""
    hp = settings.hyperparameters
    where = f"{walk.source}: {_join(path, 'hyperparameters')}"
    if isinstance(hp, PPOHyperparameters | SACHyperparameters) and hp.batch_size > hp.buffer_size:
        logger.warning(
            "%s: batch_size %d > buffer_size %d: an update never has one full minibatch", where, hp.batch_size, hp.buffer_size
        )
    elif isinstance(hp, PPOHyperparameters) and hp.buffer_size % hp.batch_size:
        logger.warning(
            "%s: buffer_size %d is not a multiple of batch_size %d: %d minibatches per epoch, %d experiences left out",
            where,
            hp.buffer_size,
            hp.batch_size,
            hp.num_minibatches,
            hp.buffer_size % hp.batch_size,
        )
    if isinstance(hp, SACHyperparameters) and hp.buffer_init_steps > hp.buffer_size:
        logger.warning(
            "%s: buffer_init_steps %d > buffer_size %d: the replay buffer overflows before the first update",
            where,
            hp.buffer_init_steps,
            hp.buffer_size,
        )


def _deep_update(base: dict[str, Any], update: Mapping[str, Any]) -> None:
    """``base.update(update)``, merging nested mappings key by key (ML-Agents' ``deep_update_dict``)."""
    for key, value in update.items():
        if isinstance(base.get(key), Mapping) and isinstance(value, Mapping):
            merged = dict(base[key])
            _deep_update(merged, value)
            base[key] = merged
        else:
            base[key] = copy.deepcopy(value)


def _merge_default(default: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """A behavior's mapping with ``default_settings`` beneath it, as ML-Agents merges them."""
    merged = copy.deepcopy(dict(default))
    # ML-Agents merges over the *resolved* default, which always has its reward signals.
    merged.setdefault("reward_signals", {"extrinsic": {}})
    default_type = default.get("trainer_type", TrainerType.PPO.value)
    if own.get("trainer_type", default_type) != default_type:
        # Another trainer's hyperparameters would be unknown keys: start from this trainer's defaults.
        merged.pop("hyperparameters", None)
    _deep_update(merged, own)
    return merged


def _build_behaviors(raw: Any, default_raw: Any, walk: _Walk) -> dict[str, BehaviorSettings]:
    """Every entry under ``behaviors``, each merged over ``default_settings`` when there is one."""
    behaviors: dict[str, BehaviorSettings] = {}
    for name, own in _as_mapping(raw, "behaviors", walk).items():
        path = _join("behaviors", name)
        mapping = _as_mapping(own, path, walk)
        if default_raw is not None:
            mapping = _merge_default(_as_mapping(default_raw, "default_settings", walk), mapping)
        behaviors[name] = _build_behavior(mapping, path, walk)
    return behaviors


# --- entry points ---------------------------------------------------------------------------


def _build_sampler(raw: Any, path: str, walk: _Walk) -> Sampler:
    """A number (a constant) or ``{sampler_type, sampler_parameters}``."""
    if not isinstance(raw, Mapping):
        return ConstantSampler(value=_to_float(raw, path, walk))
    mapping = _as_mapping(raw, path, walk)
    for key in mapping:
        if key not in ("sampler_type", "sampler_parameters"):
            raise walk.error(_join(path, key), f"unknown key{_did_you_mean(key, ['sampler_type', 'sampler_parameters'])}")
    for key in ("sampler_type", "sampler_parameters"):
        if key not in mapping:
            raise walk.error(_join(path, key), "required key is missing")
    kind = SamplerType(_to_enum(SamplerType, mapping["sampler_type"], _join(path, "sampler_type"), walk))
    sampler: Sampler = _build(SAMPLER_FOR[kind], mapping["sampler_parameters"], _join(path, "sampler_parameters"), walk)
    return sampler


def _build_lesson(raw: Any, path: str, walk: _Walk) -> Lesson:
    mapping = _as_mapping(raw, path, walk)
    prebuilt: dict[str, Any] = {}
    if "value" in mapping:
        prebuilt["value"] = _build_sampler(mapping["value"], _join(path, "value"), walk)
    lesson: Lesson = _build(Lesson, mapping, path, walk, prebuilt)
    return lesson


def _build_environment_parameter(raw: Any, path: str, walk: _Walk) -> EnvironmentParameter:
    """One parameter: a number, a sampler, or ``{curriculum: [lessons]}`` (ML-Agents' ``EnvironmentParameterSettings``)."""
    if not (isinstance(raw, Mapping) and "curriculum" in raw):
        lesson = Lesson(name=path.rsplit(".", 1)[-1], value=_build_sampler(raw, path, walk))
        return EnvironmentParameter(lessons=(lesson,))
    for key in raw:
        if key != "curriculum":
            raise walk.error(_join(path, key), "unknown key (a curriculum holds only 'curriculum')")
    lessons_raw = raw["curriculum"]
    key = _join(path, "curriculum")
    if not isinstance(lessons_raw, list | tuple):
        raise walk.error(key, f"expected a list of lessons, got {_describe(lessons_raw)}")
    lessons = tuple(_build_lesson(item, f"{key}[{i}]", walk) for i, item in enumerate(lessons_raw))
    if lessons and lessons[-1].completion_criteria is not None:
        logger.warning(
            "%s: %s[%d].completion_criteria: the last lesson's criteria are ignored", walk.source, key, len(lessons) - 1
        )
    parameter: EnvironmentParameter = _construct(EnvironmentParameter, {"lessons": lessons, "curriculum": True}, path, walk)
    return parameter


def _build_environment_parameters(raw: Any, walk: _Walk) -> dict[str, EnvironmentParameter]:
    """``environment_parameters``: numbers, samplers and curricula, by parameter name (``common.environment_parameters``)."""
    return {
        name: _build_environment_parameter(value, _join("environment_parameters", name), walk)
        for name, value in _as_mapping(raw, "environment_parameters", walk).items()
    }


def _name_the_only_behavior(env_settings: EnvSettings, behaviors: Mapping[str, BehaviorSettings], walk: _Walk) -> EnvSettings:
    """One env and one behavior: the env declares that behavior, whatever the env's own name.

    An ML-Agents config names its behavior after the Unity env (``3DBall``); run on
    ``gym:Pendulum-v1`` the env would declare ``Pendulum``. With one plain ``env_path`` entry and
    one behavior, the entry is given that behavior's name, and one log line says so. Several
    behaviors name theirs with ``{env: ..., behavior: NAME}`` entries.
    """
    entries = env_settings.entries
    if len(entries) != 1 or len(behaviors) != 1 or entries[0].behavior is not None:
        return env_settings
    (only,) = behaviors
    derived = entries[0].behavior_name
    if derived == only:
        return env_settings
    logger.info(
        "%s: behavior %r trains on %s (one env, one behavior; its own name would be %r)",
        walk.source,
        only,
        entries[0].env,
        derived,
    )
    return dataclasses.replace(env_settings, env_path=EnvPathEntry(env=entries[0].env, behavior=only))


def parse_config(mapping: Any, source: str = "<string>", *, overrides: Mapping[str, Any] | None = None) -> RunOptions:
    """Build :class:`RunOptions` from a loaded trainer YAML mapping.

    Args:
        mapping: what ``yaml.safe_load`` returned (None for an empty file).
        source: where it came from; every error message starts with it.
        overrides: deep-merged over ``mapping`` first, e.g. ``{"env_settings": {"num_envs": 4}}`` from CLI flags.

    Returns:
        The run options; one info line names the ML-Agents keys that were ignored.

    Raises:
        ConfigKeyError: an unknown key, a wrong type or a value out of range (``.key`` is its dotted path).
        NotSupportedKeyError: a valid ML-Agents setting stepstream does not implement yet.
    """
    walk = _Walk(source)
    raw = dict(_as_mapping(mapping, "", walk))
    if overrides:
        _deep_update(raw, overrides)
    default_raw = raw.get("default_settings")
    default = None if default_raw is None else _build_behavior(default_raw, "default_settings", walk)
    env_settings: EnvSettings = _build(EnvSettings, raw.get("env_settings"), "env_settings", walk)
    behaviors = _build_behaviors(raw.get("behaviors"), default_raw, walk)
    env_settings = _name_the_only_behavior(env_settings, behaviors, walk)
    if default is not None:
        for name in env_settings.behavior_names:
            behaviors.setdefault(name, default)
    prebuilt = {
        "behaviors": behaviors,
        "env_settings": env_settings,
        "default_settings": default,
        "environment_parameters": _build_environment_parameters(raw.get("environment_parameters"), walk),
    }
    options: RunOptions = _build(RunOptions, raw, "", walk, prebuilt)
    if walk.ignored:
        names = ", ".join(dict.fromkeys(walk.ignored))
        logger.info("%s: ignoring ML-Agents settings that change nothing in stepstream: %s", source, names)
    if walk.unity_only:
        names = ", ".join(dict.fromkeys(walk.unity_only))
        logger.info("%s: settings only a Unity build uses (nothing else reads them): %s", source, names)
    return options


MAX_CONFIG_BYTES = 1 << 20
"""Largest config file read (1 MiB; ML-Agents' largest shipped config is under 10 KiB)."""
MAX_CONFIG_NODES = 20_000
"""Most YAML nodes a config may hold once its aliases are expanded (a 422-byte alias bomb expands to billions)."""


class _BoundedLoader(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):  # type: ignore[misc]
    """``yaml.safe_load``'s loader that refuses a document whose aliases expand past ``MAX_CONFIG_NODES``.

    The composed graph shares an anchored node among its aliases; the walk counts each node once
    per path to it, memoised by node, so it costs the graph's size, not the expansion's.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expanded_size(node)
        return super().construct_document(node)


def _check_expanded_size(root: yaml.Node) -> None:
    """Raise ConfigKeyError when ``root`` expands to more than ``MAX_CONFIG_NODES`` nodes, or refers to itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigKeyError("", "a YAML alias refers to its own anchor (a recursive structure)")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_CONFIG_NODES:
            raise ConfigKeyError(
                "", f"its YAML aliases expand to more than {MAX_CONFIG_NODES} nodes; a trainer config needs a few hundred"
            )
        sizes[key] = total
        return total

    size(root)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's data, read with bounded cost: at most ``MAX_CONFIG_BYTES`` bytes and ``MAX_CONFIG_NODES``
    nodes once its aliases are expanded, so a hostile file costs bounded time and memory.

    Raises:
        ConfigKeyError: the file is missing, too large, not UTF-8 or not YAML, or its aliases expand too far
            (the message starts with the file name as given).
    """
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigKeyError("", f"cannot read the config file: {exc.strerror or exc}", source) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigKeyError("", f"the config file is larger than {MAX_CONFIG_BYTES} bytes (1 MiB)", source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigKeyError("", f"not UTF-8 text (byte {exc.start})", source) from exc
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader: plain data only
    except ConfigKeyError as exc:
        raise ConfigKeyError(exc.key, exc.detail, source) from None
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())  # one line; PyYAML quotes at most one short snippet of the file
        raise ConfigKeyError("", f"not valid YAML: {detail[:400]}", source) from exc
    except RecursionError:
        raise ConfigKeyError("", "its YAML is nested too deeply", source) from None


def load_config(path: str | Path, *, overrides: Mapping[str, Any] | None = None) -> RunOptions:
    """Read (``read_yaml``: bounded size and alias expansion) and parse a trainer YAML file; errors start with the
    file name as given.

    Args:
        path: the YAML file, e.g. ``configs/cartpole_ppo.yaml``.
        overrides: see :func:`parse_config`.

    Raises:
        ConfigKeyError: the file is missing, too large, is not YAML, or fails :func:`parse_config`.
        NotSupportedKeyError: see :func:`parse_config`.
    """
    return parse_config(read_yaml(path), str(path), overrides=overrides)
