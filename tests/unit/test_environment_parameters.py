"""Environment parameters (``common.environment_parameters``): samplers, their seeding, parsing and lesson advance.

Lesson sequences are computed by hand from ML-Agents' rule (``CompletionCriteriaSettings.need_increment``):
smoothed measure ``m = 0.25 * m_previous + 0.75 * mean(last rewards)``, starting from 0.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.config import ConfigKeyError, load_config, parse_config
from common.environment_parameters import (
    LESSON_NUMBER_TAG,
    CompletionCriteria,
    ConstantSampler,
    Curriculum,
    EnvironmentParameter,
    GaussianSampler,
    Lesson,
    MeasureType,
    MultiRangeUniformSampler,
    ParameterDraws,
    UniformSampler,
    seeded,
)

MLAGENTS_CONFIGS = Path(__file__).resolve().parents[3] / "shared" / "data" / "mlagents-configs"
DRAWS = 20_000


def _draws(sampler: Any, n: int = DRAWS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([sampler.draw(rng) for _ in range(n)])


# --- samplers ---------------------------------------------------------------------------------


def test_uniform_stays_in_its_range_with_the_uniform_mean_and_variance() -> None:
    x = _draws(UniformSampler(min_value=0.5, max_value=10.0))
    assert x.min() >= 0.5 and x.max() < 10.0
    assert abs(x.mean() - 5.25) < 0.1
    assert abs(x.var() - 9.5**2 / 12) < 0.3


def test_gaussian_has_its_mean_and_standard_deviation() -> None:
    x = _draws(GaussianSampler(mean=3.0, st_dev=0.5))
    assert abs(x.mean() - 3.0) < 0.02
    assert abs(x.std() - 0.5) < 0.02


def test_multirangeuniform_picks_intervals_in_proportion_to_their_length() -> None:
    x = _draws(MultiRangeUniformSampler(intervals=((0.0, 1.0), (10.0, 13.0))))
    inside_first = (x >= 0) & (x < 1)
    inside_second = (x >= 10) & (x < 13)
    assert np.all(inside_first | inside_second)
    assert abs(inside_first.mean() - 0.25) < 0.02  # lengths 1 and 3
    assert abs(x[inside_second].mean() - 11.5) < 0.05


def test_multirangeuniform_of_points_picks_each_alike() -> None:
    x = _draws(MultiRangeUniformSampler(intervals=((1.0, 1.0), (2.0, 2.0))), n=2000)
    assert set(np.unique(x)) == {1.0, 2.0}
    assert abs((x == 1.0).mean() - 0.5) < 0.05


def test_constant_is_its_value() -> None:
    assert set(_draws(ConstantSampler(value=2.5), n=10)) == {2.5}


@pytest.mark.parametrize(
    "sampler",
    [
        UniformSampler(min_value=0, max_value=4, seed=7),
        GaussianSampler(mean=1, st_dev=2, seed=7),
        MultiRangeUniformSampler(intervals=((0, 1), (5, 6)), seed=7),
    ],
    ids=["uniform", "gaussian", "multirangeuniform"],
)
def test_draws_are_reproducible_per_seed_and_env(sampler: Any) -> None:
    def sequence(env_index: int, s: Any = sampler) -> list[float]:
        draws = ParameterDraws(env_index)
        draws.set_samplers({"p": s})
        return [draws.draw()["p"] for _ in range(20)]

    assert sequence(0) == sequence(0)
    assert sequence(0) != sequence(1)
    other_seed = type(sampler)(**{**sampler.__dict__, "seed": 8})
    assert sequence(0) != sequence(0, other_seed)


def test_an_unchanged_sampler_keeps_its_generator_and_a_new_one_restarts() -> None:
    first = UniformSampler(min_value=0, max_value=1, seed=3)
    draws = ParameterDraws()
    draws.set_samplers({"p": first})
    a = [draws.draw()["p"] for _ in range(3)]
    draws.set_samplers({"p": first})
    b = draws.draw()["p"]
    assert b not in a  # continued, not restarted
    draws.set_samplers({"p": UniformSampler(min_value=0, max_value=1, seed=4)})
    draws.set_samplers({"p": first})
    assert draws.draw()["p"] == a[0]


def test_unseeded_samplers_take_the_run_seed_plus_their_place_in_file_order() -> None:
    parameters = {
        "a": EnvironmentParameter(lessons=(Lesson(name="a", value=UniformSampler()),)),
        "b": EnvironmentParameter(
            lessons=(
                Lesson(name="l0", value=ConstantSampler(value=1), completion_criteria=CompletionCriteria(behavior="B")),
                Lesson(name="l1", value=GaussianSampler(seed=99), completion_criteria=CompletionCriteria(behavior="B")),
                Lesson(name="l2", value=UniformSampler()),
            ),
            curriculum=True,
        ),
    }
    out = seeded(parameters, run_seed=10)
    assert [lesson.value.seed for p in out.values() for lesson in p.lessons] == [10, 11, 99, 12]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"min_value": 2.0, "max_value": 1.0}, "min_value"),
    ],
)
def test_uniform_refuses_min_above_max(kwargs: dict[str, float], key: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        UniformSampler(**kwargs)
    assert info.value.key == key


# --- parsing ----------------------------------------------------------------------------------


def test_mlagents_sampler_and_curriculum_files_parse() -> None:
    if not MLAGENTS_CONFIGS.is_dir():
        pytest.skip("ML-Agents' example configs are not beside this checkout")
    randomize = load_config(MLAGENTS_CONFIGS / "ppo" / "3DBall_randomize.yaml").environment_parameters
    assert randomize["mass"].lessons[0].value == UniformSampler(min_value=0.5, max_value=10.0)
    wall = load_config(MLAGENTS_CONFIGS / "ppo" / "WallJump_curriculum.yaml").environment_parameters
    big = wall["big_wall_height"].lessons
    assert [lesson.name for lesson in big] == ["Lesson0", "Lesson1", "Lesson2", "Lesson3"]
    assert big[1].value == UniformSampler(min_value=4.0, max_value=7.0)
    assert big[3].value == ConstantSampler(value=8.0) and big[3].completion_criteria is None
    assert big[0].completion_criteria == CompletionCriteria(
        behavior="BigWallJump", measure=MeasureType.PROGRESS, signal_smoothing=True, min_lesson_length=100, threshold=0.1
    )
    sorter = load_config(MLAGENTS_CONFIGS / "ppo" / "Sorter_curriculum.yaml").environment_parameters
    assert len(sorter["num_tiles"].lessons) >= 2


def test_every_form_parses_and_round_trips() -> None:
    config = {
        "behaviors": {"B": {}},
        "environment_parameters": {
            "plain": 9.81,
            "const": {"sampler_type": "constant", "sampler_parameters": {"value": 2}},
            "gauss": {"sampler_type": "gaussian", "sampler_parameters": {"mean": 2, "st_dev": 0.5, "seed": 4}},
            "multi": {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[0, 1], [4, 6]]}},
            "lessons": {
                "curriculum": [
                    {"name": "easy", "value": 1, "completion_criteria": {"behavior": "B", "threshold": 0.5}},
                    {
                        "name": "hard",
                        "value": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 2, "max_value": 3}},
                    },
                ]
            },
        },
    }
    options = parse_config(config)
    params = options.environment_parameters
    assert params["plain"].lessons[0].value == ConstantSampler(value=9.81)
    assert params["const"].lessons[0].value == ConstantSampler(value=2.0)
    assert params["gauss"].lessons[0].value == GaussianSampler(mean=2.0, st_dev=0.5, seed=4)
    assert params["multi"].lessons[0].value == MultiRangeUniformSampler(intervals=((0.0, 1.0), (4.0, 6.0)))
    criteria = params["lessons"].lessons[0].completion_criteria
    assert criteria is not None and criteria.measure is MeasureType.REWARD and criteria.signal_smoothing
    assert params["lessons"].lessons[1].value == UniformSampler(min_value=2.0, max_value=3.0)
    assert parse_config(options.to_dict()).environment_parameters == params


def _curriculum(criteria: Any) -> dict[str, Any]:
    """Two lessons, the first with ``criteria`` (None: without completion_criteria)."""
    first: dict[str, Any] = {"name": "a", "value": 1}
    if criteria is not None:
        first["completion_criteria"] = criteria
    return {"curriculum": [first, {"name": "b", "value": 2}]}


ERROR_CASES: dict[str, tuple[Any, str, str]] = {
    "no-parameters": ({"sampler_type": "uniform"}, "p.sampler_parameters", "required key is missing"),
    "type-typo": ({"sampler_type": "unifrom", "sampler_parameters": {}}, "p.sampler_type", "did you mean 'uniform'"),
    "min-above-max": (
        {"sampler_type": "uniform", "sampler_parameters": {"min_value": 3, "max_value": 1}},
        "p.sampler_parameters.min_value",
        "greater than max_value",
    ),
    "key-typo": (
        {"sampler_type": "uniform", "sampler_parameters": {"min_valeu": 3}},
        "p.sampler_parameters.min_valeu",
        "did you mean 'min_value'",
    ),
    "interval-of-three": (
        {"sampler_type": "multirangeuniform", "sampler_parameters": {"intervals": [[0, 1, 2]]}},
        "p.sampler_parameters.intervals[0]",
        "exactly two values",
    ),
    "not-a-number": ("heavy", "p", "expected a finite number"),
    "criteria-missing": (_curriculum(None), "p.curriculum[0].completion_criteria", "required"),
    "progress-threshold": (
        _curriculum({"measure": "progress", "behavior": "B", "threshold": 2}),
        "p.curriculum[0].completion_criteria.threshold",
        "in [0, 1]",
    ),
    "behavior-missing": (
        _curriculum({"threshold": 0.5}),
        "p.curriculum[0].completion_criteria.behavior",
        "required key is missing",
    ),
    "name-missing": ({"curriculum": [{"value": 1}]}, "p.curriculum[0].name", "required key is missing"),
    "bad-measure": (
        _curriculum({"behavior": "B", "measure": "score"}),
        "p.curriculum[0].completion_criteria.measure",
        "expected one of progress, reward",
    ),
    "not-a-list": ({"curriculum": {"name": "a"}}, "p.curriculum", "expected a list of lessons"),
}


@pytest.mark.parametrize(("parameter", "key", "detail"), list(ERROR_CASES.values()), ids=list(ERROR_CASES))
def test_errors_name_the_dotted_key(parameter: Any, key: str, detail: str) -> None:
    with pytest.raises(ConfigKeyError) as info:
        parse_config({"environment_parameters": {"p": parameter}}, "e.yaml")
    assert info.value.key == f"environment_parameters.{key}"
    assert detail in str(info.value)
    assert str(info.value).startswith(f"e.yaml: environment_parameters.{key}: ")


def test_criteria_on_the_last_lesson_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    criteria = {"behavior": "B", "threshold": 0.1}
    config = {"environment_parameters": {"p": {"curriculum": [{"name": "only", "value": 1, "completion_criteria": criteria}]}}}
    with caplog.at_level(logging.WARNING, logger="common.config"):
        parse_config(config, "w.yaml")
    assert any("environment_parameters.p.curriculum[0].completion_criteria" in r.getMessage() for r in caplog.records)


# --- lesson advance ---------------------------------------------------------------------------


def _two_lessons(criteria: CompletionCriteria) -> dict[str, EnvironmentParameter]:
    lessons = (
        Lesson(name="easy", value=ConstantSampler(value=1.0), completion_criteria=criteria),
        Lesson(name="hard", value=ConstantSampler(value=2.0)),
    )
    return {"p": EnvironmentParameter(lessons=lessons, curriculum=True)}


def test_progress_advances_past_the_threshold_once_min_lesson_length_episodes_are_in() -> None:
    criteria = CompletionCriteria(behavior="B", measure=MeasureType.PROGRESS, threshold=0.3, min_lesson_length=2)
    curriculum = Curriculum(_two_lessons(criteria), run_seed=0)
    max_steps = {"B": 100}
    assert not curriculum.update_lessons({"B": 31}, max_steps).updated  # no episode yet
    curriculum.add_episode("B", 0.0)
    assert not curriculum.update_lessons({"B": 31}, max_steps).updated  # 1 < min_lesson_length
    curriculum.add_episode("B", 0.0)
    assert not curriculum.update_lessons({"B": 30}, max_steps).updated  # 0.30 is not > 0.3
    update = curriculum.update_lessons({"B": 31}, max_steps)
    assert update.updated and update.changed == ("p",) and not update.must_reset
    assert curriculum.lesson_numbers() == {"p": 1}
    assert curriculum.current_samplers()["p"] == ConstantSampler(value=2.0, seed=1)  # seeded: run seed 0 + place 1
    assert not curriculum.update_lessons({"B": 100}, max_steps).updated  # the last lesson stays


def test_reward_with_smoothing_follows_the_hand_computed_sequence() -> None:
    criteria = CompletionCriteria(behavior="B", threshold=0.5, min_lesson_length=2, signal_smoothing=True)
    curriculum = Curriculum(_two_lessons(criteria), run_seed=0)
    curriculum.add_episode("B", 0.2)
    curriculum.add_episode("B", 0.6)
    curriculum.add_episode("B", 0.6)  # the window keeps the last min_lesson_length = 2: mean 0.6
    steps, max_steps = {"B": 10}, {"B": 1000}
    # m1 = 0.25 * 0 + 0.75 * 0.6 = 0.45 <= 0.5
    assert not curriculum.update_lessons(steps, max_steps).updated
    # m2 = 0.25 * 0.45 + 0.75 * 0.6 = 0.5625 > 0.5
    assert curriculum.update_lessons(steps, max_steps).updated


def test_reward_without_smoothing_advances_on_the_plain_mean() -> None:
    criteria = CompletionCriteria(behavior="B", threshold=0.5, min_lesson_length=2, signal_smoothing=False)
    curriculum = Curriculum(_two_lessons(criteria), run_seed=0)
    curriculum.add_episode("B", 0.4)
    curriculum.add_episode("B", 0.6)
    assert not curriculum.update_lessons({"B": 1}, {"B": 10}).updated  # mean 0.5 is not > 0.5
    curriculum.add_episode("B", 0.7)  # window [0.6, 0.7]: mean 0.65
    assert curriculum.update_lessons({"B": 1}, {"B": 10}).updated


def test_an_advance_clears_the_episode_windows_and_require_reset_is_passed_on() -> None:
    first = CompletionCriteria(behavior="B", threshold=0.0, min_lesson_length=1, signal_smoothing=False, require_reset=True)
    lessons = (
        Lesson(name="0", value=ConstantSampler(value=0.0), completion_criteria=first),
        Lesson(name="1", value=ConstantSampler(value=1.0), completion_criteria=first),
        Lesson(name="2", value=ConstantSampler(value=2.0)),
    )
    curriculum = Curriculum({"p": EnvironmentParameter(lessons=lessons, curriculum=True)}, run_seed=0)
    curriculum.add_episode("B", 1.0)
    update = curriculum.update_lessons({"B": 1}, {"B": 10})
    assert update.updated and update.must_reset
    assert not curriculum.update_lessons({"B": 1}, {"B": 10}).updated  # the window was cleared: 0 < 1 episode
    curriculum.add_episode("B", 1.0)
    assert curriculum.update_lessons({"B": 1}, {"B": 10}).updated
    assert curriculum.lesson_stats() == {LESSON_NUMBER_TAG.format(parameter="p"): 2.0}


def test_a_behavior_without_steps_decides_nothing_and_others_episodes_do_not_count() -> None:
    criteria = CompletionCriteria(behavior="B", threshold=0.0, min_lesson_length=1, signal_smoothing=False)
    curriculum = Curriculum(_two_lessons(criteria), run_seed=0)
    curriculum.add_episode("Other", 5.0)
    assert not curriculum.update_lessons({"Other": 5}, {"Other": 10}).updated
    assert not curriculum.update_lessons({"B": 5}, {"B": 10}).updated


def test_resume_starts_at_the_lesson_given_clamped_to_the_last() -> None:
    criteria = CompletionCriteria(behavior="B", threshold=0.0)
    assert Curriculum(_two_lessons(criteria), run_seed=0, lessons={"p": 1}).lesson_numbers() == {"p": 1}
    assert Curriculum(_two_lessons(criteria), run_seed=0, lessons={"p": 7}).lesson_numbers() == {"p": 1}
    assert Curriculum(_two_lessons(criteria), run_seed=0, lessons={"gone": 3}).lesson_numbers() == {"p": 0}


# --- on the wire and into Gymnasium envs ------------------------------------------------------


def test_samplers_round_trip_through_the_step_response_message() -> None:
    from common.environment_parameters import from_proto, to_proto

    samplers = {
        "c": ConstantSampler(value=2.5, seed=3),
        "u": UniformSampler(min_value=0.1, max_value=0.7, seed=4),
        "g": GaussianSampler(mean=-1.0, st_dev=0.3, seed=5),
        "m": MultiRangeUniformSampler(intervals=((0.0, 1.0), (2.5, 3.5)), seed=6),
    }
    assert from_proto(to_proto(samplers, {"c": 1}, reset=True)) == (samplers, {"c": 1}, True)


def test_a_sampler_that_does_not_fit_its_type_is_a_protocol_error() -> None:
    from common.environment_parameters import from_proto
    from common.errors import ProtocolError
    from protos import pb

    msg = pb.EnvironmentParameters()
    msg.samplers["u"].type = pb.EnvironmentSampler.UNIFORM
    msg.samplers["u"].values.extend([3.0])
    with pytest.raises(ProtocolError, match=r"samplers\['u'\]: 1 values do not fit"):
        from_proto(msg)
    msg.samplers["u"].values.extend([1.0])  # min 3 > max 1
    with pytest.raises(ProtocolError, match="greater than max_value"):
        from_proto(msg)


def test_the_gymnasium_wrapper_draws_at_every_reset_and_merges_the_options() -> None:
    from common.environment_parameters import ReceivedParameters, to_proto
    from envclient.environment_parameters import EnvironmentParametersWrapper
    from tests.python_envs import Parameterized

    received = ReceivedParameters()
    env = EnvironmentParametersWrapper(Parameterized(), lambda: received, env_index=0)
    Parameterized.RESETS.clear()
    env.reset(options={"other": 1})
    assert Parameterized.RESETS[-1] == {"other": 1}  # nothing received yet: the caller's options only
    received.take(to_proto({"difficulty": UniformSampler(min_value=1.0, max_value=2.0, seed=7)}, {}))
    values = [env.reset()[0][0] for _ in range(3)]
    assert all(1.0 <= v < 2.0 for v in values) and len(set(values)) == 3
    draws = ParameterDraws(0)
    draws.set_samplers(received.samplers)
    assert values == pytest.approx([draws.draw()["difficulty"] for _ in range(3)])  # seeded by (seed, env index)


def test_the_service_flags_a_reset_only_to_sessions_that_had_an_older_version() -> None:
    from processor.environment_parameters import EnvironmentParameterService

    criteria = CompletionCriteria(behavior="B", threshold=0.0, min_lesson_length=1, signal_smoothing=False, require_reset=True)
    service = EnvironmentParameterService(_two_lessons(criteria), 0, {"B": 10})
    assert service.version == 0 and not service.message(-1).reset
    from tests.unit.test_reward_signals import trajectory

    ended = dataclasses.replace(trajectory(False, 4, 0), episode_reward=1.0, episode_length=4)
    assert service.observe("B", [ended], trainer_step=1)
    assert service.version == 1
    assert service.message(0).reset and not service.message(-1).reset and not service.message(1).reset
    assert dict(service.message(0).lessons) == {"p": 1}


async def test_require_reset_ends_every_episode_then_resets_every_copy() -> None:
    """``run_env``: the step after a ``require_reset`` lesson began sends every agent done (max_reached where it was
    mid-episode), then every copy is reset, drawing the new lesson's value."""
    from common.environment_parameters import ReceivedParameters, to_proto
    from envclient.gym_adapter import GymVectorEnv
    from envclient.runner import run_env
    from envclient.session import ActionResult
    from tests.python_envs import Parameterized, parameterized

    class Session:
        def __init__(self) -> None:
            self.environment_parameters = ReceivedParameters()
            self.environment_parameters.take(to_proto({"difficulty": ConstantSampler(value=1.0)}, {}))
            self.sent: list[tuple[list[bool], list[bool], list[float]]] = []

        async def step(self, name: str, ids: Any, obs: Any, rewards: Any, done: Any, max_reached: Any) -> ActionResult:
            self.sent.append((done.tolist(), max_reached.tolist(), obs[0][:, 0].tolist()))
            if len(self.sent) == 2:  # the answer to the second step comes with a require_reset lesson
                self.environment_parameters.take(to_proto({"difficulty": ConstantSampler(value=2.0)}, {}, reset=True))
            n = len(ids)
            return ActionResult(np.zeros((n, 0), np.float32), np.zeros((n, 1), np.int32), 1)

    session = Session()
    Parameterized.RESETS.clear()
    with GymVectorEnv("python:tests.python_envs:parameterized", 2, seed=0, env_fn=parameterized) as env:
        await run_env(session, env, "parameterized", max_env_steps=5)  # type: ignore[arg-type]
    flags = [(done, max_reached) for done, max_reached, _ in session.sent]
    assert flags[2] == ([True, True], [True, True])  # the third step ends both episodes, interrupted
    assert flags[3] == ([False, False], [False, False])  # ... then both copies start again
    assert [obs for _, _, obs in session.sent] == [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]
    assert not session.environment_parameters.reset_pending
