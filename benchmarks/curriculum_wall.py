"""A curriculum where it matters: a corridor whose goal distance is an environment parameter. (Issue 40's proof.)

``Corridor`` (``python:benchmarks.curriculum_wall:corridor``): the agent starts at 0 and must reach the goal at
``goal_distance`` (``reset(options=...)``, default ``HARD``) within ``goal_distance + SLACK`` steps; actions left,
stay, right; reward 1 on reaching the goal, less ``MOVE_COST`` (0.005) for every step moved; observation
``(position, goal, time left)``, scaled. A uniformly random policy reaches a goal 2 away in 30% of episodes, 6 away
in 0.24% and ``HARD`` = 24 away in 6e-10 (exactly, by dynamic programming over its walk): trained on the hard
corridor alone, PPO sees mostly the cost of moving. (Its updates still drift the policy: one drifting to "right" 70%
of the time reaches 24 in 0.6% of episodes, which is how one seed of three finds the goal anyway.) In the spirit of
ML-Agents' WallJump curriculum, the curriculum run starts at distance 2 and moves to 8, then 24, each lesson once
the mean episode reward passes 0.8. The best mean reward on the hard corridor is 1 - 24 * 0.005 = 0.88.

Both runs get the same budget (``--steps``, agent steps) and seed. The figure: the mean reward of the last 100
episodes, which in the curriculum run are on the hard corridor once its last lesson is reached (``lesson`` says).

    .venv/bin/python benchmarks/curriculum_wall.py [--steps 30000] [--seeds 0 1]

One line per run, then one JSON line: ``{"steps", "runs": [{"seed", "curriculum": {...}, "hard_only": {...}}]}``,
each with ``mean_reward_last_100``, ``lesson`` (the curriculum's last, 2 = hard) and ``agent_steps``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import yaml
from gymnasium import spaces

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HARD = 24
SLACK = 3
"""Steps beyond the distance the agent may waste."""
MOVE_COST = 0.005
"""Reward lost per step moved (left or right), like WallJump's per-step penalty: standing still is the safe bet."""
EASY_LESSONS = (2.0, 8.0)
THRESHOLD = 0.8
BEHAVIOR = "Corridor"


class Corridor(gymnasium.Env[Any, Any]):
    """The corridor (module docstring); ``goal_distance`` from ``reset(options=...)``."""

    observation_space = spaces.Box(-2.0, 2.0, (3,), np.float32)
    action_space = spaces.Discrete(3)

    def __init__(self) -> None:
        self.goal = HARD
        self.position = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        limit = self.goal + SLACK
        return np.array([self.position / HARD, self.goal / HARD, (limit - self.t) / limit], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.goal = max(1, round((options or {}).get("goal_distance", HARD)))
        self.position, self.t = 0, 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        move = int(action) - 1
        self.position = max(-SLACK, self.position + move)
        self.t += 1
        reached = self.position >= self.goal
        reward = (1.0 if reached else 0.0) - (MOVE_COST if move else 0.0)
        return self._obs(), reward, reached, self.t >= self.goal + SLACK, {}


def corridor() -> gymnasium.Env[Any, Any]:
    return Corridor()


def config(steps: int, seed: int, curriculum: bool) -> dict[str, Any]:
    behavior = {
        "trainer_type": "ppo",
        "hyperparameters": {"batch_size": 256, "buffer_size": 2048, "learning_rate": 1e-3, "beta": 0.01, "num_epoch": 4},
        "network_settings": {"hidden_units": 32, "num_layers": 2},
        "max_steps": steps,
        "time_horizon": 32,
        "summary_freq": 5000,
        "checkpoint_interval": steps,
    }
    out: dict[str, Any] = {
        "behaviors": {BEHAVIOR: behavior},
        "env_settings": {"env_path": "python:benchmarks.curriculum_wall:corridor", "num_envs": 8, "seed": seed},
    }
    if curriculum:
        criteria = {"behavior": BEHAVIOR, "measure": "reward", "threshold": THRESHOLD, "min_lesson_length": 50}
        lessons: list[dict[str, Any]] = [
            {"name": f"distance{int(d)}", "value": d, "completion_criteria": criteria} for d in EASY_LESSONS
        ]
        lessons.append({"name": f"distance{HARD}", "value": float(HARD)})
        out["environment_parameters"] = {"goal_distance": {"curriculum": lessons}}
    else:
        out["environment_parameters"] = {"goal_distance": float(HARD)}
    return out


def run(scratch: Path, steps: int, seed: int, curriculum: bool) -> dict[str, Any]:
    from cli.main import main

    name = f"{'curriculum' if curriculum else 'hard_only'}_{seed}"
    path = scratch / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config(steps, seed, curriculum)), encoding="utf-8")
    started = time.monotonic()
    code = main(["train", str(path), "--results-dir", str(scratch / "results"), "--run-id", name, "--no-progress"])
    run_dir = scratch / "results" / name
    with open(run_dir / BEHAVIOR / "episodes.csv", encoding="utf-8") as f:
        rewards = [float(row["episode_reward"]) for row in csv.DictReader(f)]
    status = json.loads((run_dir / "run_logs" / "training_status.json").read_text(encoding="utf-8"))[BEHAVIOR]
    return {
        "exit_code": code,
        "mean_reward_last_100": round(float(np.mean(rewards[-100:])), 3) if rewards else None,
        "episodes": len(rewards),
        "lesson": status.get("lessons", {}).get("goal_distance"),
        "agent_steps": status["steps"],
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30000, help="agent steps per run (the budget)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    runs = []
    with tempfile.TemporaryDirectory(prefix="curriculum-wall-") as scratch:
        for seed in args.seeds:
            result: dict[str, Any] = {"seed": seed}
            for curriculum in (True, False):
                key = "curriculum" if curriculum else "hard_only"
                result[key] = run(Path(scratch), args.steps, seed, curriculum)
                print(f"seed {seed} {key}: {result[key]}", flush=True)
            runs.append(result)
    print(json.dumps({"steps": args.steps, "hard_distance": HARD, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
