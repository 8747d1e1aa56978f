"""Environment parameters as ML-Agents defines them: samplers, curricula and the lesson reached.

The YAML's ``environment_parameters`` maps a parameter name to one of:

- a number: a constant;
- a sampler, ``{sampler_type: uniform|gaussian|multirangeuniform|constant, sampler_parameters: {...}}``;
- a curriculum, ``{curriculum: [lesson, ...]}``: ordered lessons, each ``{name, value,
  completion_criteria}`` whose ``value`` is a number or a sampler. Every lesson but the last needs
  ``completion_criteria``; the last one's is ignored (a warning).

A plain number or sampler is a curriculum of one lesson, as in ML-Agents. Samplers (Unity's
``SamplerFactory`` draws them the same way):

- ``uniform``: ``min_value + u * (max_value - min_value)``, ``u ~ U[0, 1)``;
- ``gaussian``: ``N(mean, st_dev^2)``;
- ``multirangeuniform``: an interval picked with probability proportional to its length, then a
  uniform draw inside it;
- ``constant``: ``value``.

Seeding (ML-Agents' ``EnvironmentParameterManager``): every lesson's sampler whose ``seed`` is -1
(the default) gets ``run_seed + k``, ``k`` counting those samplers in file order (parameters, then
lessons). A client that draws values itself (:class:`ParameterDraws`) seeds one generator per
parameter from ``(sampler seed, env index)``, so each env instance draws its own reproducible
sequence; Unity is given the sampler and draws with its own generator.

Lesson advance (:meth:`Curriculum.update_lessons`, ML-Agents' ``CompletionCriteriaSettings.
need_increment``): a lesson is complete once the criteria's ``behavior`` has finished at least
``min_lesson_length`` episodes since the lesson began, and

- ``measure: progress``: its ``trainer steps / max_steps > threshold``;
- ``measure: reward``: the mean cumulative reward of its last ``min_lesson_length`` episodes
  (at least one) ``> threshold``; with ``signal_smoothing`` the measure is first smoothed,
  ``m = 0.25 * m_previous + 0.75 * mean`` (``m_previous`` starts at 0, kept per parameter).

On any advance every behavior's episode-reward window is cleared; ``require_reset`` asks the env
clients to reset at once instead of at their next episode.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from common.config_errors import ConfigKeyError, require
from common.errors import ProtocolError
from protos import pb

logger = logging.getLogger(__name__)

LESSON_NUMBER_TAG = "Environment/Lesson Number/{parameter}"
"""ML-Agents' TensorBoard tag of a parameter's current lesson (0-based)."""
ACCEPTS_METADATA = ("stepstream-accepts", "environment-parameters")
"""The Step call metadata with which an env client asks for ``StepResponse.environment_parameters``; an older
client, which does not send it, never gets one (it would take the message for the answer to its step)."""
UNSEEDED = -1
"""A sampler ``seed`` of -1: the run seed plus the sampler's place decides it."""


class SamplerType(str, Enum):
    """``sampler_type`` (ML-Agents' ``ParameterRandomizationType``)."""

    UNIFORM = "uniform"
    GAUSSIAN = "gaussian"
    MULTIRANGEUNIFORM = "multirangeuniform"
    CONSTANT = "constant"


@dataclass(frozen=True, kw_only=True)
class ConstantSampler:
    """``sampler_type: constant`` or a plain number: always ``value``."""

    value: float = 0.0
    """The parameter's value."""
    seed: int = UNSEEDED
    """Unused by a constant; kept so that every sampler takes a place in the seed order, as in ML-Agents."""

    def draw(self, rng: np.random.Generator) -> float:
        del rng
        return float(self.value)


@dataclass(frozen=True, kw_only=True)
class UniformSampler:
    """``sampler_type: uniform``: uniform in ``[min_value, max_value)``."""

    min_value: float = 0.0
    """Lower bound; <= max_value."""
    max_value: float = 1.0
    """Upper bound."""
    seed: int = UNSEEDED
    """Seed of the draws; -1: the run seed plus this sampler's place."""

    def __post_init__(self) -> None:
        require(self.min_value <= self.max_value, "min_value", f"{self.min_value} is greater than max_value {self.max_value}")

    def draw(self, rng: np.random.Generator) -> float:
        return float(self.min_value + rng.random() * (self.max_value - self.min_value))


@dataclass(frozen=True, kw_only=True)
class GaussianSampler:
    """``sampler_type: gaussian``: normal with ``mean`` and standard deviation ``st_dev``."""

    mean: float = 1.0
    """Mean of the draws."""
    st_dev: float = 1.0
    """Standard deviation; >= 0."""
    seed: int = UNSEEDED
    """Seed of the draws; -1: the run seed plus this sampler's place."""

    def __post_init__(self) -> None:
        require(self.st_dev >= 0, "st_dev", f"must be >= 0, got {self.st_dev!r}")

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.normal(self.mean, self.st_dev))


@dataclass(frozen=True, kw_only=True)
class MultiRangeUniformSampler:
    """``sampler_type: multirangeuniform``: an interval chosen in proportion to its length, then uniform in it."""

    intervals: tuple[tuple[float, ...], ...] = ((0.0, 1.0),)
    """``[[min, max], ...]``; each of two values, min <= max; at least one."""
    seed: int = UNSEEDED
    """Seed of the draws; -1: the run seed plus this sampler's place."""

    def __post_init__(self) -> None:
        require(len(self.intervals) > 0, "intervals", "needs at least one [min, max] interval")
        for i, interval in enumerate(self.intervals):
            require(len(interval) == 2, f"intervals[{i}]", f"must hold exactly two values, got {list(interval)}")
            require(
                interval[0] <= interval[1], f"intervals[{i}]", f"minimum {interval[0]} is greater than maximum {interval[1]}"
            )

    def draw(self, rng: np.random.Generator) -> float:
        lengths = np.array([high - low for low, high in self.intervals], dtype=np.float64)
        total = lengths.sum()
        weights = lengths / total if total > 0 else np.full(len(lengths), 1.0 / len(lengths))
        low, high = self.intervals[int(rng.choice(len(lengths), p=weights))]
        return float(low + rng.random() * (high - low))


Sampler = ConstantSampler | UniformSampler | GaussianSampler | MultiRangeUniformSampler

SAMPLER_FOR: dict[SamplerType, type[Sampler]] = {
    SamplerType.UNIFORM: UniformSampler,
    SamplerType.GAUSSIAN: GaussianSampler,
    SamplerType.MULTIRANGEUNIFORM: MultiRangeUniformSampler,
    SamplerType.CONSTANT: ConstantSampler,
}
"""The ``sampler_parameters`` class of each ``sampler_type``."""


def sampler_type(sampler: Sampler) -> SamplerType:
    """The ``sampler_type`` that names ``sampler``'s class."""
    return next(kind for kind, cls in SAMPLER_FOR.items() if isinstance(sampler, cls))


class MeasureType(str, Enum):
    """``completion_criteria.measure``: what a lesson's threshold is compared with."""

    PROGRESS = "progress"
    REWARD = "reward"


@dataclass(frozen=True, kw_only=True)
class CompletionCriteria:
    """``completion_criteria`` of a lesson (ML-Agents' ``CompletionCriteriaSettings``)."""

    behavior: str
    """The behavior whose training decides (required)."""
    measure: MeasureType = MeasureType.REWARD
    """``progress`` (trainer steps / max_steps) or ``reward`` (mean episode reward)."""
    min_lesson_length: int = 0
    """Episodes of ``behavior`` the lesson lasts at least (episodes); >= 0."""
    signal_smoothing: bool = True
    """Smooth the reward measure: ``0.25 * previous + 0.75 * mean``."""
    threshold: float = 0.0
    """The lesson is complete when the measure exceeds this; in [0, 1] for ``progress``."""
    require_reset: bool = False
    """Reset the env clients as soon as the lesson changes, instead of at their next episode."""

    def __post_init__(self) -> None:
        require(bool(self.behavior), "behavior", "must name a behavior, got ''")
        require(self.min_lesson_length >= 0, "min_lesson_length", f"must be >= 0, got {self.min_lesson_length!r}")
        if self.measure is MeasureType.PROGRESS:
            require(
                0.0 <= self.threshold <= 1.0, "threshold", f"must be in [0, 1] with measure progress, got {self.threshold!r}"
            )

    def need_increment(self, progress: float, rewards: Sequence[float], smoothing: float) -> tuple[bool, float]:
        """Whether the lesson is complete, and the new smoothed reward measure.

        Args:
            progress: the behavior's trainer steps / max_steps.
            rewards: its last episodes' cumulative rewards, at most ``min_lesson_length`` (or 1) of them.
            smoothing: the parameter's previous smoothed measure.
        """
        if len(rewards) < self.min_lesson_length:
            return False, smoothing
        if self.measure is MeasureType.PROGRESS:
            return progress > self.threshold, smoothing
        if not rewards:
            return False, smoothing
        measure = float(np.mean(rewards))
        if math.isnan(measure):
            return False, smoothing
        if self.signal_smoothing:
            measure = 0.25 * smoothing + 0.75 * measure
            smoothing = measure
        return measure > self.threshold, smoothing


@dataclass(frozen=True, kw_only=True)
class Lesson:
    """One lesson of a curriculum: its name, its value (a sampler) and when it is complete."""

    name: str
    """The lesson's name, logged when it starts."""
    value: Sampler
    """What the parameter takes during the lesson."""
    completion_criteria: CompletionCriteria | None = None
    """When the next lesson starts; None for the last lesson."""


@dataclass(frozen=True, kw_only=True)
class EnvironmentParameter:
    """One entry of ``environment_parameters``: its lessons in order (one for a number or a sampler)."""

    lessons: tuple[Lesson, ...]
    """At least one; all but the last have completion criteria."""
    curriculum: bool = False
    """Whether the YAML gave a ``curriculum`` (else a number or a sampler); only how ``to_dict`` writes it."""

    def __post_init__(self) -> None:
        require(len(self.lessons) > 0, "curriculum", "needs at least one lesson")
        for i, lesson in enumerate(self.lessons[:-1]):
            require(
                lesson.completion_criteria is not None,
                f"curriculum[{i}].completion_criteria",
                "is required on every lesson but the last",
            )

    def to_dict(self) -> Any:
        """As the YAML writes it: a number, a sampler mapping, or ``{curriculum: [...]}``."""
        if not self.curriculum:
            return _sampler_dict(self.lessons[0].value)
        lessons = []
        for lesson in self.lessons:
            out: dict[str, Any] = {"name": lesson.name, "value": _sampler_dict(lesson.value)}
            if lesson.completion_criteria is not None:
                out["completion_criteria"] = {
                    f.name: _enum_value(getattr(lesson.completion_criteria, f.name))
                    for f in dataclasses.fields(lesson.completion_criteria)
                }
            lessons.append(out)
        return {"curriculum": lessons}


def _enum_value(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _sampler_dict(sampler: Sampler) -> Any:
    if isinstance(sampler, ConstantSampler) and sampler.seed == UNSEEDED:
        return sampler.value
    parameters = {f.name: getattr(sampler, f.name) for f in dataclasses.fields(sampler)}
    if "intervals" in parameters:
        parameters["intervals"] = [list(interval) for interval in parameters["intervals"]]
    return {"sampler_type": sampler_type(sampler).value, "sampler_parameters": parameters}


def seeded(parameters: Mapping[str, EnvironmentParameter], run_seed: int) -> dict[str, EnvironmentParameter]:
    """``parameters`` with every sampler seed of -1 replaced by ``run_seed + k`` (k-th such sampler, file order)."""
    out: dict[str, EnvironmentParameter] = {}
    offset = 0
    for name, parameter in parameters.items():
        lessons = []
        for lesson in parameter.lessons:
            if lesson.value.seed == UNSEEDED:
                lesson = dataclasses.replace(lesson, value=dataclasses.replace(lesson.value, seed=run_seed + offset))
                offset += 1
            lessons.append(lesson)
        out[name] = dataclasses.replace(parameter, lessons=tuple(lessons))
    return out


@dataclass(frozen=True)
class LessonUpdate:
    """What :meth:`Curriculum.update_lessons` changed."""

    updated: bool = False
    """Some parameter moved to its next lesson."""
    must_reset: bool = False
    """One of those lessons asked for ``require_reset``."""
    changed: tuple[str, ...] = ()
    """The parameters that moved, in file order."""


@dataclass
class Curriculum:
    """The lesson each parameter is in, and what decides the next one (ML-Agents' ``EnvironmentParameterManager``).

    Thread-safe: trainers report episodes and steps from their threads while env clients read the
    current samplers.

    Args:
        parameters: ``RunOptions.environment_parameters``.
        run_seed: the run's resolved seed (samplers with seed -1 take ``run_seed + k``).
        lessons: lesson numbers to start at, by parameter (``--resume``); missing ones start at 0,
            and a number past a parameter's last lesson is clamped to it.
    """

    parameters: Mapping[str, EnvironmentParameter]
    run_seed: int
    lessons: Mapping[str, int] | None = None
    _lesson: dict[str, int] = field(init=False)
    _smoothed: dict[str, float] = field(init=False)
    _rewards: dict[str, deque[float]] = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.parameters = seeded(self.parameters, self.run_seed)
        start = dict(self.lessons or {})
        self._lesson = {name: min(max(0, int(start.get(name, 0))), len(p.lessons) - 1) for name, p in self.parameters.items()}
        self._smoothed = dict.fromkeys(self.parameters, 0.0)
        self._rewards = {}

    def reward_window(self, behavior: str) -> int:
        """Episodes of ``behavior`` kept for the criteria: the largest ``min_lesson_length`` naming it, at least 1."""
        lengths = [
            lesson.completion_criteria.min_lesson_length
            for parameter in self.parameters.values()
            for lesson in parameter.lessons
            if lesson.completion_criteria is not None and lesson.completion_criteria.behavior == behavior
        ]
        return max([1, *lengths])

    def add_episode(self, behavior: str, reward: float) -> None:
        """Record one finished episode of ``behavior`` with its cumulative reward."""
        with self._lock:
            window = self._rewards.get(behavior)
            if window is None:
                window = self._rewards[behavior] = deque(maxlen=self.reward_window(behavior))
            window.append(float(reward))

    def lesson_numbers(self) -> dict[str, int]:
        """The current lesson of each parameter (0-based)."""
        with self._lock:
            return dict(self._lesson)

    def current_samplers(self) -> dict[str, Sampler]:
        """Each parameter's sampler in its current lesson."""
        with self._lock:
            return {name: self.parameters[name].lessons[n].value for name, n in self._lesson.items()}

    def update_lessons(self, steps: Mapping[str, int], max_steps: Mapping[str, int]) -> LessonUpdate:
        """Move every parameter whose lesson is complete to its next one.

        Args:
            steps: trainer steps (agent steps) per behavior; a behavior absent here decides nothing yet.
            max_steps: each behavior's ``max_steps``.
        """
        changed: list[str] = []
        must_reset = False
        with self._lock:
            for name, parameter in self.parameters.items():
                number = self._lesson[name]
                criteria = parameter.lessons[number].completion_criteria
                if criteria is None or number + 1 >= len(parameter.lessons) or criteria.behavior not in steps:
                    continue
                limit = max_steps.get(criteria.behavior, 0)
                progress = steps[criteria.behavior] / limit if limit > 0 else 1.0
                rewards = list(self._rewards.get(criteria.behavior, ()))
                done, self._smoothed[name] = criteria.need_increment(progress, rewards, self._smoothed[name])
                if done:
                    self._lesson[name] = number + 1
                    changed.append(name)
                    must_reset = must_reset or criteria.require_reset
                    logger.info("parameter %r has changed: now in lesson %r", name, parameter.lessons[number + 1].name)
            if changed:
                for window in self._rewards.values():
                    window.clear()
        return LessonUpdate(updated=bool(changed), must_reset=must_reset, changed=tuple(changed))

    def lesson_stats(self) -> dict[str, float]:
        """``Environment/Lesson Number/<parameter>`` -> lesson, for TensorBoard."""
        return {LESSON_NUMBER_TAG.format(parameter=name): float(n) for name, n in self.lesson_numbers().items()}


class ParameterDraws:
    """Values drawn from the current samplers for one env instance, reproducibly.

    One generator per parameter, seeded with ``(sampler seed, env_index)`` and made anew whenever
    that parameter's sampler changes (a lesson change), as Unity makes a new sampler from the
    seed it is sent.
    """

    def __init__(self, env_index: int = 0) -> None:
        self.env_index = env_index
        self._samplers: dict[str, Sampler] = {}
        self._rngs: dict[str, np.random.Generator] = {}

    def set_samplers(self, samplers: Mapping[str, Sampler]) -> None:
        """Take the current samplers; a parameter whose sampler is unchanged keeps its generator."""
        for name, sampler in samplers.items():
            if self._samplers.get(name) != sampler:
                self._samplers[name] = sampler
                self._rngs[name] = np.random.default_rng([max(sampler.seed, 0), self.env_index])
        for name in set(self._samplers) - set(samplers):
            del self._samplers[name], self._rngs[name]

    def draw(self) -> dict[str, float]:
        """One value per parameter: what an env gets at an episode reset."""
        return {name: sampler.draw(self._rngs[name]) for name, sampler in self._samplers.items()}


_PROTO_TYPE = {
    SamplerType.CONSTANT: pb.EnvironmentSampler.CONSTANT,
    SamplerType.UNIFORM: pb.EnvironmentSampler.UNIFORM,
    SamplerType.GAUSSIAN: pb.EnvironmentSampler.GAUSSIAN,
    SamplerType.MULTIRANGEUNIFORM: pb.EnvironmentSampler.MULTIRANGEUNIFORM,
}


def _sampler_values(sampler: Sampler) -> list[float]:
    if isinstance(sampler, ConstantSampler):
        return [sampler.value]
    if isinstance(sampler, UniformSampler):
        return [sampler.min_value, sampler.max_value]
    if isinstance(sampler, GaussianSampler):
        return [sampler.mean, sampler.st_dev]
    return [value for interval in sampler.intervals for value in interval]


def to_proto(samplers: Mapping[str, Sampler], lessons: Mapping[str, int], reset: bool = False) -> pb.EnvironmentParameters:
    """The ``StepResponse.environment_parameters`` message of the current samplers and lessons."""
    msg = pb.EnvironmentParameters(reset=reset)
    for name, sampler in samplers.items():
        entry = msg.samplers[name]
        entry.type = _PROTO_TYPE[sampler_type(sampler)]
        entry.seed = sampler.seed
        entry.values.extend(_sampler_values(sampler))
    for name, number in lessons.items():
        msg.lessons[name] = number
    return msg


def _sampler_from_proto(name: str, entry: pb.EnvironmentSampler) -> Sampler:
    values = list(entry.values)
    where = f"environment_parameters.samplers[{name!r}]"
    if not all(math.isfinite(v) for v in values):
        raise ProtocolError(f"{where}: values {values} are not all finite")
    expected = {pb.EnvironmentSampler.CONSTANT: 1, pb.EnvironmentSampler.UNIFORM: 2, pb.EnvironmentSampler.GAUSSIAN: 2}
    count = expected.get(entry.type)
    if (count is not None and len(values) != count) or (count is None and (not values or len(values) % 2)):
        raise ProtocolError(f"{where}: {len(values)} values do not fit sampler type {entry.type}")
    try:
        if entry.type == pb.EnvironmentSampler.CONSTANT:
            return ConstantSampler(value=values[0], seed=entry.seed)
        if entry.type == pb.EnvironmentSampler.UNIFORM:
            return UniformSampler(min_value=values[0], max_value=values[1], seed=entry.seed)
        if entry.type == pb.EnvironmentSampler.GAUSSIAN:
            return GaussianSampler(mean=values[0], st_dev=values[1], seed=entry.seed)
        if entry.type == pb.EnvironmentSampler.MULTIRANGEUNIFORM:
            intervals = tuple(zip(values[::2], values[1::2], strict=True))
            return MultiRangeUniformSampler(intervals=intervals, seed=entry.seed)
    except ConfigKeyError as err:
        raise ProtocolError(f"{where}: {err}") from None
    raise ProtocolError(f"{where}: unknown sampler type {entry.type}")


def from_proto(msg: pb.EnvironmentParameters) -> tuple[dict[str, Sampler], dict[str, int], bool]:
    """``(samplers, lessons, reset)`` of a received message.

    Raises:
        ProtocolError: a sampler whose values do not fit its type, are not finite or out of range.
    """
    samplers = {name: _sampler_from_proto(name, entry) for name, entry in msg.samplers.items()}
    return samplers, dict(msg.lessons), bool(msg.reset)


LESSONS_STATUS_KEY = "lessons"
"""Where a behavior's entry of ``run_logs/training_status.json`` records the lessons its trajectories last carried."""


def lessons_from_status(path: Path) -> dict[str, int]:
    """The lessons a run had reached, from its ``training_status.json`` (none when it is missing or unreadable).

    Each trainer records the lesson numbers its trajectories carried (``Environment/Lesson Number/<parameter>``);
    the highest recorded for a parameter is where it resumes.
    """
    try:
        status = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    lessons: dict[str, int] = {}
    for entry in status.values() if isinstance(status, dict) else ():
        recorded = entry.get(LESSONS_STATUS_KEY) if isinstance(entry, dict) else None
        for name, number in (recorded or {}).items():
            if isinstance(number, int) and not isinstance(number, bool):
                lessons[name] = max(lessons.get(name, 0), number)
    return lessons


def lesson_of_stat(key: str) -> str | None:
    """The parameter whose lesson the environment stat ``key`` is (``Environment/Lesson Number/<parameter>``), or None."""
    prefix = LESSON_NUMBER_TAG.format(parameter="")
    return key[len(prefix) :] if key.startswith(prefix) else None


class ReceivedParameters:
    """What an env client holds of the processor's ``StepResponse.environment_parameters``: the latest samplers.

    ``version`` counts the messages taken, so an env wrapper can tell a change; ``reset_pending`` is
    set by a message whose lesson asked for ``require_reset`` and cleared by whoever resets the envs.
    """

    def __init__(self) -> None:
        self.samplers: dict[str, Sampler] = {}
        self.lessons: dict[str, int] = {}
        self.version = 0
        self.reset_pending = False

    def take(self, msg: pb.EnvironmentParameters) -> None:
        """Hold a received message.

        Raises:
            ProtocolError: a sampler that does not decode (``from_proto``).
        """
        self.samplers, self.lessons, reset = from_proto(msg)
        self.version += 1
        self.reset_pending = self.reset_pending or reset
        logger.debug("environment parameters received: lessons %s", self.lessons)


__all__ = [
    "ACCEPTS_METADATA",
    "LESSONS_STATUS_KEY",
    "LESSON_NUMBER_TAG",
    "SAMPLER_FOR",
    "CompletionCriteria",
    "ConfigKeyError",
    "ConstantSampler",
    "Curriculum",
    "EnvironmentParameter",
    "GaussianSampler",
    "Lesson",
    "LessonUpdate",
    "MeasureType",
    "MultiRangeUniformSampler",
    "ParameterDraws",
    "ReceivedParameters",
    "Sampler",
    "SamplerType",
    "UniformSampler",
    "from_proto",
    "lesson_of_stat",
    "lessons_from_status",
    "sampler_type",
    "seeded",
    "to_proto",
]
