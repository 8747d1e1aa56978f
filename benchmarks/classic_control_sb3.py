"""Peer of benchmarks/classic_control.py: Stable-Baselines3 with RL-Zoo's own tuned hyperparameters.

Runs in the SB3 side environment (``bash ../shared/yardsticks/setup.sh`` builds
``~/.cache/stepstream-yardsticks/sb3``; ``rl_zoo3`` installed into it, ``pip install --no-deps rl_zoo3``).
The hyperparameters are read from the ``rl_zoo3`` package's own ``hyperparams/<algo>.yml`` (located without
importing the package, which pulls in optuna and the hub client), and applied as the zoo's ``exp_manager``
does: ``n_envs``, ``normalize`` (``VecNormalize``, observations and rewards unless the entry says otherwise),
``lin_<x>`` schedules, ``policy_kwargs`` evaluated; ``n_timesteps`` is replaced by the budget given.

usage: classic_control_sb3.py ALGO GYM_ID SEED BUDGET THRESHOLD

Prints one JSON line last: ``{"final", "solve_steps", "held", "solve_s", "solve_s_from_process_start", "steps",
"wall_s", "hyperparams"}``: the mean of the last 20 finished episodes at the end, the env steps (``num_timesteps``)
and seconds at which that mean first reached THRESHOLD (null if never), the fraction of the windows in the budget's
second half at or above it (``benchmarks.episode_window``, as our side computes them), and the run's totals.
``solve_s`` and ``wall_s`` count after the imports; ``solve_s_from_process_start`` counts from this process's start,
imports included, as our side's ``episodes.csv`` ``wall_seconds`` does. ``common.clock`` and
``benchmarks.episode_window`` are standard library only: the repository root goes on ``sys.path`` for them, as this
runs in the SB3 environment without stepstream installed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: stdlib-only modules
from benchmarks.episode_window import EpisodeWindow
from common.clock import process_start_time


def zoo_hyperparams(algo: str, gym_id: str) -> dict[str, Any]:
    """RL-Zoo's entry for ``gym_id`` in its ``hyperparams/<algo>.yml``."""
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("rl_zoo3 is not installed in this environment: pip install --no-deps rl_zoo3")
    path = Path(next(iter(spec.submodule_search_locations))) / "hyperparams" / f"{algo}.yml"
    entry = yaml.safe_load(path.read_text(encoding="utf-8"))[gym_id]
    return dict(entry)


def linear(initial: float):  # SB3 schedule: progress_remaining (1 -> 0) -> value
    return lambda progress_remaining: progress_remaining * initial


class Watch(BaseCallback):
    """The finished episodes' window (``benchmarks.episode_window``), and when its mean first reached the threshold."""

    def __init__(self, threshold: float, budget: int, start: float) -> None:
        super().__init__()
        self.episodes = EpisodeWindow(threshold, budget)
        self.start = start
        self.solve_s: float | None = None
        self.solved_at: float | None = None

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            if "episode" in info and self.episodes.add(float(info["episode"]["r"]), self.num_timesteps):
                self.solve_s = time.perf_counter() - self.start
                self.solved_at = time.time()  # epoch seconds: against the process start
        return True


def main(argv: list[str]) -> int:
    algo, gym_id, seed, budget, threshold = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    torch.set_num_threads(1)
    hp = zoo_hyperparams(algo, gym_id)
    recorded = dict(hp)
    hp.pop("n_timesteps", None)
    policy = hp.pop("policy", "MlpPolicy")
    n_envs = int(hp.pop("n_envs", 1))
    normalize = hp.pop("normalize", False)
    for key in ("learning_rate", "clip_range"):
        if isinstance(hp.get(key), str) and hp[key].startswith("lin_"):
            hp[key] = linear(float(hp[key][len("lin_") :]))
    if isinstance(hp.get("policy_kwargs"), str):
        hp["policy_kwargs"] = eval(hp["policy_kwargs"], {"dict": dict, "nn": torch.nn})  # the zoo evaluates it too
    start = time.perf_counter()
    env = make_vec_env(gym_id, n_envs=n_envs, seed=seed)
    if normalize:
        kwargs = eval(normalize) if isinstance(normalize, str) else {}  # e.g. "{'norm_obs': True, 'norm_reward': False}"
        env = VecNormalize(env, gamma=hp.get("gamma", 0.99), **kwargs)
    model_class = {"ppo": PPO, "sac": SAC}[algo]
    model = model_class(policy, env, seed=seed, device="cpu", **hp)
    watch = Watch(threshold, budget, start)
    model.learn(budget, callback=watch)
    result = {
        "final": watch.episodes.mean,
        "solve_steps": watch.episodes.solve_steps,
        "held": watch.episodes.held,
        "solve_s": None if watch.solve_s is None else round(watch.solve_s, 2),
        "solve_s_from_process_start": None if watch.solved_at is None else round(watch.solved_at - process_start_time(), 2),
        "steps": int(model.num_timesteps),
        "wall_s": round(time.perf_counter() - start, 2),
        "hyperparams": {k: str(v) for k, v in recorded.items()},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
