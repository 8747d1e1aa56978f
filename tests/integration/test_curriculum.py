"""A curriculum advances in a short ``stepstream train`` run, and ``--resume`` continues at the lesson reached.

The env (``tests.python_envs:parameterized``) reads ``difficulty`` from ``reset(options=...)`` and
pays 5 per episode, so each reward-measured lesson (threshold 4, two episodes at least, smoothed)
ends after its second check: 0.75 * 5 = 3.75, then 0.25 * 3.75 + 0.75 * 5 = 4.69 > 4. The lessons
reach the env through the processor's ``StepResponse.environment_parameters``, the TensorBoard
tag ``Environment/Lesson Number/difficulty`` and ``run_logs/training_status.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cli.main import main
from tests.python_envs import Parameterized

CRITERIA = {"behavior": "Walls", "measure": "reward", "threshold": 4.0, "min_lesson_length": 2}
CONFIG = {
    "behaviors": {
        "Walls": {
            "trainer_type": "ppo",
            "hyperparameters": {"batch_size": 32, "buffer_size": 64},
            "network_settings": {"hidden_units": 16, "num_layers": 1},
            "max_steps": 400,
            "time_horizon": 16,
            "summary_freq": 100,
        }
    },
    "env_settings": {"env_path": "python:tests.python_envs:parameterized", "num_envs": 2, "seed": 1},
    "environment_parameters": {
        "difficulty": {
            "curriculum": [
                {"name": "flat", "value": 0.0, "completion_criteria": CRITERIA},
                {
                    "name": "low",
                    "value": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 1.0, "max_value": 2.0}},
                    "completion_criteria": CRITERIA,
                },
                {"name": "high", "value": 3.0},
            ]
        }
    },
}
TAG = "Environment/Lesson Number/difficulty"


def _lesson_values(run_dir: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "Walls"))
    events.Reload()
    return [e.value for e in events.Scalars(TAG)]


def test_a_curriculum_advances_is_logged_and_resumes_at_the_lesson_reached(tmp_path: Path) -> None:
    config = tmp_path / "walls.yaml"
    config.write_text(yaml.safe_dump(CONFIG), encoding="utf-8")
    args = ["train", str(config), "--results-dir", str(tmp_path / "results"), "--run-id", "walls", "--no-progress"]
    Parameterized.RESETS.clear()
    assert main(args) == 0
    given = [options["difficulty"] for options in Parameterized.RESETS]
    assert given[0] == 0.0  # the first reset already has the first lesson's value
    low = [value for value in given if 0.0 < value < 3.0]
    assert low and all(1.0 <= value < 2.0 for value in low)  # the second lesson's sampler
    assert given[-1] == 3.0 and given.index(3.0) > given.index(low[0])  # lessons in order
    run_dir = tmp_path / "results" / "walls"
    status = json.loads((run_dir / "run_logs" / "training_status.json").read_text(encoding="utf-8"))
    assert status["Walls"]["lessons"] == {"difficulty": 2}
    assert max(_lesson_values(run_dir)) == 2.0

    Parameterized.RESETS.clear()
    assert main([*args, "--resume", "--max-steps", "600"]) == 0
    assert Parameterized.RESETS[0]["difficulty"] == 3.0  # the last lesson, from the first reset on
    assert {options["difficulty"] for options in Parameterized.RESETS} == {3.0}
