"""Learning-quality suite (issue 15): every Gymnasium classic-control task, stepstream beside SB3 + RL-Zoo.

Each task's config in ``configs/`` is an ML-Agents trainer YAML translated from RL-Zoo's tuned entry for it
(PPO, and SAC where the zoo has one); the peer, ``benchmarks/classic_control_sb3.py``, runs in the SB3 side
environment and reads the zoo's own ``hyperparams/<algo>.yml`` from the installed ``rl_zoo3`` package. For each
task and seed both sides run the same declared budget, one after the other in the same run (these 2-core
machines are noisy: compare within a run).

| algo_env | config | threshold | budget (zoo's) |
| --- | --- | --- | --- |
| ppo-cartpole | cartpole_ppo.yaml | 475 | 100k (1e5) |
| ppo-acrobot | acrobot_ppo.yaml | -100 | 200k (1e6) |
| ppo-mountaincar | mountaincar_ppo.yaml | -110 | 300k (1e6) |
| ppo-mountaincarcontinuous | mountaincarcontinuous_ppo.yaml | 90 | 20k (2e4) |
| ppo-pendulum | pendulum_ppo.yaml | -200 | 100k (1e5) |
| sac-mountaincarcontinuous | mountaincarcontinuous_sac.yaml | 90 | 50k (5e4) |
| sac-pendulum | pendulum_sac.yaml | -200 | 20k (2e4) |

Thresholds are Gymnasium's ``reward_threshold`` (Pendulum has none: T2's -200). The zoo has no SAC entry for
the discrete tasks. Our budget is the config's ``max_steps`` (which also sets the length of linear schedules);
the peer gets the same number as ``total_timesteps``.

Deviations of the translation (each config's comments say which apply):

* ``normalize``: the zoo's ``normalize: true`` wraps the envs in ``VecNormalize``, which scales observations
  *and* rewards (by the running std of the discounted return). ML-Agents' ``network_settings.normalize`` scales
  observations only; stepstream's PPO key ``normalize_reward`` (follows ``normalize`` when unset) adds the reward
  half. SB3 updates the observation statistics every env step; ML-Agents when the trainer takes a trajectory in;
  stepstream's PPO with all of an update's trajectories, just before the update.
* ``use_sde`` / ``sde_sample_freq`` / ``log_std_init`` / ``use_expln`` (MountainCarContinuous, Pendulum PPO):
  the PPO keys of the same names (gSDE, ``docs/design.md``; ``sde_sample_freq`` -1 = ``time_horizon``, the
  zoo's ``n_steps`` rollout). The zoo's ``log_std_init`` is sigma's, and the action std it gives scales with the
  latent features, so with the networks' start: ``orthogonal_init: false`` is PyTorch's, as SB3's (under Keras'
  Glorot with zero biases gSDE's noise vanishes where MountainCar's episodes start). Without gSDE, held white noise
  is the PPO key ``noise_hold_steps``, not set in the configs.
* ``vf_coef`` (MountainCarContinuous PPO, 0.19): stepstream's value loss weight is fixed at 0.5.
* SAC ``ent_coef`` fixed (MountainCarContinuous, 0.1) -> ``init_entcoef`` 0.1 with SAC's ``learn_entcoef: false``
  (ML-Agents always learns it); ``use_sde`` / ``log_std_init`` / ``use_expln`` -> SAC's keys of the same names, with
  ``sde_sample_freq`` 32 for the zoo's ``train_freq`` rollout; SB3's SAC networks use relu -> SAC's ``activation:
  relu`` (ML-Agents' swish is the default); ``train_freq`` / ``gradient_steps`` 32 / 32 -> ``steps_per_update`` 1
  (the same ratio).
* ``policy_kwargs`` ``ortho_init=False`` -> ``orthogonal_init: false`` (torch.nn.Linear's own start, as SB3's);
  ``max_grad_norm`` -> ``max_grad_norm``;
  ``net_arch`` -> ``hidden_units`` / ``num_layers``.
* ``n_envs`` -> ``num_envs``, with ``buffer_size = n_envs * n_steps`` and ``time_horizon = n_steps`` (CartPole:
  32 x 8 instead of 8 x 32, see its config).

Figures per seed: ``final`` = the mean of the last 20 finished episodes at the end of the budget; ``solve_s``
= seconds until that mean first reached the threshold, on both sides from the process start, imports included
(ours TensorFlow's, the peer's PyTorch's and SB3's: ``episodes.csv``'s ``wall_seconds`` and the peer's
``solve_s_from_process_start``); null if never (Infinity in the median). ``sb3_solve_s_after_imports`` keeps the
peer's own clock, which starts after its imports. ``held`` = the
fraction of the windows that end in the budget's second half at or above the threshold, one window after each
episode (``benchmarks/episode_window.py``, both sides): a first crossing can be a touch the run never holds again
(as on MountainCar); null if no window ended there (0 in the median).

usage: classic_control.py [--seeds 0 1 2] [--tasks ppo-acrobot ...] [--results-dir DIR] [--sb3-python PATH]
                          [--skip-sb3] [--config VARIANT.yaml (one task: our side runs it instead)]

Prints one JSON line last: ``{"workload": "classic_control", "date": ..., "<algo_env>": {"ours_final": [...],
"sb3_final": [...], "ours_solve_s": [...], "sb3_solve_s": [...], "ours_solve_steps": [...], "sb3_solve_steps":
[...], "sb3_solve_s_after_imports": [...], "ours_held": [...], "sb3_held": [...], "median_ours_final": ...,
"median_sb3_final": ..., "median_ours_solve_s": ..., "median_sb3_solve_s": ..., "median_sb3_solve_s_after_imports":
..., "median_ours_held": ..., "median_sb3_held": ...}, ...}``.

The latest figures, per task beside the peer, are on the documentation's benchmarks page (``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks.* as package modules

from benchmarks.episode_window import WINDOW, EpisodeWindow
from benchmarks.time_to_solve import REPO, Workload, run

log = logging.getLogger("benchmarks.classic_control")
SB3_PYTHON = Path.home() / ".cache" / "stepstream-yardsticks" / "sb3" / "bin" / "python"
PEER = REPO / "benchmarks" / "classic_control_sb3.py"


@dataclass(frozen=True)
class Task:
    """One suite entry: our config (its max_steps is the budget), the zoo's algo and env id, the threshold."""

    config: str
    algo: str
    gym_id: str
    threshold: float
    budget: int


TASKS = {
    "ppo-cartpole": Task("cartpole_ppo.yaml", "ppo", "CartPole-v1", 475.0, 100_000),
    "ppo-acrobot": Task("acrobot_ppo.yaml", "ppo", "Acrobot-v1", -100.0, 200_000),
    "ppo-mountaincar": Task("mountaincar_ppo.yaml", "ppo", "MountainCar-v0", -110.0, 300_000),
    "ppo-mountaincarcontinuous": Task("mountaincarcontinuous_ppo.yaml", "ppo", "MountainCarContinuous-v0", 90.0, 20_000),
    "ppo-pendulum": Task("pendulum_ppo.yaml", "ppo", "Pendulum-v1", -200.0, 100_000),
    "sac-mountaincarcontinuous": Task("mountaincarcontinuous_sac.yaml", "sac", "MountainCarContinuous-v0", 90.0, 50_000),
    "sac-pendulum": Task("pendulum_sac.yaml", "sac", "Pendulum-v1", -200.0, 20_000),
}


@dataclass
class Figures:
    """One side's figures for one seed."""

    final: float | None
    solve_steps: int | None
    solve_s: float | None
    solve_s_after_imports: float | None = None
    """The peer's own clock (after its imports); None on our side."""
    held: float | None = None
    """The fraction of the budget's second half's windows at or above the threshold (``benchmarks.episode_window``)."""


def episode_figures(csv_path: Path, threshold: float, budget: int) -> Figures:
    """The figures of ``benchmarks.episode_window`` from a run's ``episodes.csv`` (rows in the order the trainer took
    the episodes in), and the ``wall_seconds`` of the first window at or above ``threshold``."""
    episodes = EpisodeWindow(threshold, budget)
    solve_s: float | None = None
    with open(csv_path, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if episodes.add(float(row["episode_reward"]), int(row["agent_steps"])):
                solve_s = float(row["wall_seconds"])
    return Figures(episodes.mean, episodes.solve_steps, solve_s, held=episodes.held)


def run_ours(name: str, task: Task, seed: int, results_dir: Path, config: Path | None = None) -> Figures:
    """``stepstream train`` for the whole budget (no early stop: the final mean is a figure too); ``config``
    replaces the task's own (an A/B variant)."""
    config = config or REPO / "configs" / task.config
    never = Workload(config, window=WINDOW, threshold=math.inf)
    outcome, run_ok = run(name, seed, results_dir, wall_limit_s=7200.0, poll_s=1.0, workload=never)
    if not run_ok:
        return Figures(None, None, None)
    del outcome
    behavior_dirs = [p for p in (results_dir / f"{name}-seed{seed}").iterdir() if (p / "episodes.csv").exists()]
    return episode_figures(behavior_dirs[0] / "episodes.csv", task.threshold, task.budget)


def run_sb3(task: Task, seed: int, sb3_python: Path) -> Figures:
    """The peer in the SB3 environment; its last output line is its JSON."""
    command = [str(sb3_python), str(PEER), task.algo, task.gym_id, str(seed), str(task.budget), str(task.threshold)]
    log.info("peer: %s", " ".join(command))
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log.error("the peer failed (exit %d):\n%s", done.returncode, done.stderr[-4000:])
        return Figures(None, None, None)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return Figures(
        result["final"], result["solve_steps"], result["solve_s_from_process_start"], result["solve_s"], result.get("held")
    )


def median(values: list[float | None], missing: float | None) -> float:
    """The median, with None counted as ``missing`` (Infinity for times) or left out (``missing`` None: returns of a
    run that failed); NaN when nothing is left."""
    kept = [v for v in values if v is not None]
    if missing is not None:
        kept += [missing] * (len(values) - len(kept))
    return statistics.median(kept) if kept else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    parser.add_argument("--results-dir", type=Path, help="keep our runs here (default: a temporary folder)")
    parser.add_argument("--sb3-python", type=Path, default=SB3_PYTHON, help=f"the peer's interpreter ({SB3_PYTHON})")
    parser.add_argument("--skip-sb3", action="store_true", help="our side only (A/B runs); sb3 lists stay empty")
    parser.add_argument("--config", type=Path, help="our side runs this config instead of the task's (one task only)")
    args = parser.parse_args(argv)
    if args.config is not None and len(args.tasks) != 1:
        parser.error("--config needs exactly one --tasks entry")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in args.tasks:  # the budget lives in the config: check they agree before hours of running
        from common.config import load_config

        path = args.config or REPO / "configs" / TASKS[name].config
        options = load_config(path)
        behavior = next(iter(options.env_settings.behavior_names))
        if options.settings_for(behavior).max_steps != TASKS[name].budget:
            raise SystemExit(f"{name}: {path} max_steps differs from the budget {TASKS[name].budget}")
    with tempfile.TemporaryDirectory(prefix="stepstream-cc-") as tmp:
        results_dir = (args.results_dir or Path(tmp)).resolve()
        results_dir.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {"workload": "classic_control", "date": datetime.datetime.now(datetime.UTC).isoformat()}
        report["load_average"] = [round(x, 2) for x in os.getloadavg()]
        for name in args.tasks:
            task = TASKS[name]
            entry: dict[str, list[Any]] = {k: [] for k in ("ours_final", "sb3_final", "ours_solve_s", "sb3_solve_s")}
            entry.update({"ours_solve_steps": [], "sb3_solve_steps": [], "sb3_solve_s_after_imports": []})
            entry.update({"ours_held": [], "sb3_held": []})
            for seed in args.seeds:
                sides = [("ours", run_ours(name, task, seed, results_dir, args.config))]
                if not args.skip_sb3:
                    sides.append(("sb3", run_sb3(task, seed, args.sb3_python)))
                for side, figures in sides:
                    entry[f"{side}_final"].append(figures.final)
                    entry[f"{side}_solve_s"].append(figures.solve_s)
                    entry[f"{side}_solve_steps"].append(figures.solve_steps)
                    entry[f"{side}_held"].append(figures.held)
                    if side == "sb3":
                        entry["sb3_solve_s_after_imports"].append(figures.solve_s_after_imports)
                    log.info("%s seed %d %s: %s", name, seed, side, figures)
            summary: dict[str, Any] = dict(entry)
            for side in ("ours", "sb3"):
                summary[f"median_{side}_final"] = median(entry[f"{side}_final"], None)
                summary[f"median_{side}_solve_s"] = median(entry[f"{side}_solve_s"], math.inf)
                summary[f"median_{side}_held"] = median(entry[f"{side}_held"], 0.0)
            summary["median_sb3_solve_s_after_imports"] = median(entry["sb3_solve_s_after_imports"], math.inf)
            report[name] = summary
    print(json.dumps(report))  # json writes inf as Infinity
    return 0


if __name__ == "__main__":
    sys.exit(main())
