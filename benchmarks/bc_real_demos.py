"""BC on real ML-Agents demonstrations, and a CartPole expert recorded, cloned and run (issue 6's proof; not CI).

Part 1, real files (``STEPSTREAM_DEMO_DIR``, default ``../shared/data/mlagents-demos``): offline BC
(``trainer.offline``, the code ``stepstream train`` runs for a bc behavior without an env) on
ExpertPyramid, ExpertHallway, test.demo (3DBall, continuous), ExpertBasic and Expert3DBall, each
scored on its held-out 10% (``bc_metrics.json``). Targets: discrete held-out accuracy >= 2x chance, where chance
is a uniform random choice among the allowed options (1/5 for Pyramid's and Hallway's one branch
of 5: 0.2). The majority-class accuracy is reported beside it. test.demo's former target (R^2 >= 0.5)
was set on ML-Agents' pairing, where BC learns an echo of the previous action; on its detected
``next`` pairing the observation explains about 0.2 of the expert's choice (issue 18), so it is
reported only, and judged by the ceiling below.

Beside BC, off-the-shelf fits of the action from the observation on the same rows, split and
pairing (``demo_to_buffer``'s detected action timing, ``common.demo_timing``): scikit-learn's
histogram gradient boosting and k-nearest neighbours (standardised inputs), each tuned by 3-fold
cross-validation on the training rows only, then scored once on the held-out rows (accuracy, mean
over branches; R^2, mean over dimensions). scikit-learn is the ``bench`` extra
(``pip install -e '.[bench]'``). The last line's ``files`` maps each file to ``{"timing", "bc"
(median over the seeds), "best_fit" (the better of the two fits), "metric"}``; ``reference_fits``
holds both fits and their chosen settings; ``bc_within_0_03_of_best_fit`` says whether BC is
within 0.03 of ``best_fit`` on every file (issue 18's goal).

Part 2, CartPole, every step through the ``stepstream`` command in subprocesses:

1. ``stepstream train configs/cartpole_ppo.yaml`` (PPO, 100k steps);
2. ``stepstream record ... --checkpoint RUN --deterministic --episodes E --out expert.demo``;
3. ``stepstream train bc.yaml`` (trainer_type bc, demo_path = that file, no env: offline BC);
4. ``stepstream train bc_act.yaml --inference --env gym:CartPole-v1`` (the same behavior, a smaller
   max_steps as the acting budget); target: mean return of the last 20 episodes >= 475, read from
   the run's "inference ran N episodes; mean return X (last 20)" line.

    .venv/bin/python benchmarks/bc_real_demos.py [--seeds 0] [--skip-cartpole] [--skip-real]

Prints progress lines and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))
REAL_DEMOS = {
    # name: (metric, whether a target applies)
    "ExpertPyramid.demo": ("accuracy", True),
    "ExpertHallway.demo": ("accuracy", True),
    "test.demo": ("r2", False),  # judged against the fits' ceiling (module docstring)
    "ExpertBasic.demo": ("accuracy", False),  # 73 records, 7 held out: reported only
    "Expert3DBall.demo": ("r2", False),  # reported beside test.demo: the other 3DBall recording
    "Expert3DBallHard.demo": ("r2", False),
    "ExpertPushBlock.demo": ("accuracy", False),
}
REAL_EPOCHS = 40
"""Passes over each real demo's training rows (max_steps = epochs x rows)."""
CARTPOLE_EXPERT_EPISODES = 20
CARTPOLE_BC_EPOCHS = 30
CARTPOLE_ACT_STEPS = 24_000
"""Agent steps the BC policy acts for under --inference (at least 48 episodes of at most 500)."""
SOLVED = 475.0
INFERENCE_LINE = re.compile(r"inference ran (\d+) episodes; mean return ([-\d.]+) \(last (\d+)\)")


def bc_settings(demo_path: Path, rows: int, epochs: int, hidden: int = 128) -> Any:
    from common.config import BCHyperparameters, BehaviorSettings, NetworkSettings, TrainerType

    return BehaviorSettings(
        trainer_type=TrainerType.BC,
        hyperparameters=BCHyperparameters(demo_path=str(demo_path), batch_size=64, num_epoch=1, learning_rate=1e-3),
        network_settings=NetworkSettings(hidden_units=hidden, num_layers=2, normalize=True),
        max_steps=max(1, epochs * rows),
        summary_freq=10**9,
        checkpoint_interval=10**9,
    )


def real_demo(name: str, metric: str, required: bool, seed: int, results: Path) -> dict[str, Any]:
    """Offline BC on one real file; its bc_metrics.json plus the verdict."""
    from common.demo import demo_action_timings, load_demonstration
    from trainer.offline import offline_loop

    path = DEMO_DIR / name
    rows = load_demonstration(path).records - 1
    behavior = Path(name).stem
    settings = bc_settings(path, round(rows * 0.9), REAL_EPOCHS)
    started = time.monotonic()
    offline_loop(behavior, settings, seed=seed, results_dir=results, run_started_at=time.time()).run()
    metrics = json.loads((results / behavior / "bc_metrics.json").read_text())
    out: dict[str, Any] = {k: metrics.get(k) for k in ("train_rows", "held_out_rows", "cloning_loss", "updates")}
    out["wall_s"] = round(time.monotonic() - started, 2)
    out["timing"] = demo_action_timings(load_demonstration(path))[0].timing  # the pairing BC trained on (auto)
    if metric == "accuracy":
        accuracy, chance = metrics["held_out_accuracy"], metrics["held_out_chance_accuracy"]
        out |= {
            "held_out_accuracy": accuracy,
            "chance_accuracy": chance,
            "majority_accuracy": metrics["held_out_majority_accuracy"],
            "accuracy_over_chance": accuracy / chance,
            "pass": accuracy >= 2 * chance if required else None,
        }
    else:
        out |= {"held_out_r2": metrics["held_out_r2"], "pass": metrics["held_out_r2"] >= 0.5 if required else None}
    print(f"{name}: {json.dumps(out)}", flush=True)
    return out


def reference_fits(name: str, metric: str) -> dict[str, Any]:
    """Gradient boosting and k-NN on BC's rows, split and detected pairing (module docstring)."""
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.model_selection import GridSearchCV
    from sklearn.multioutput import MultiOutputClassifier, MultiOutputRegressor
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from common.demo import demo_action_timings, demo_to_buffer, load_demonstration
    from common.trajectory import CONTINUOUS_ACTIONS, DISCRETE_ACTIONS, obs_key
    from trainer.bc_metrics import HOLDOUT_FRACTION, HOLDOUT_SEED, r_squared, split_rows

    path = DEMO_DIR / name
    (evidence,) = demo_action_timings(load_demonstration(path))
    spec, buffer = demo_to_buffer(path, 1)  # the detected pairing, as BC's learner reads it
    k = buffer.num_experiences
    x = np.hstack([np.asarray(buffer[obs_key(i)].data, np.float32).reshape(k, -1) for i in range(len(spec.observation_specs))])
    key = CONTINUOUS_ACTIONS if metric == "r2" else DISCRETE_ACTIONS
    y = np.asarray(buffer[key].data)
    train, held = split_rows({"x": x, "y": y}, HOLDOUT_FRACTION, HOLDOUT_SEED)  # BC's split: same rows, same seed
    if metric == "accuracy" and y.shape[1] == 1:  # one branch: a plain classifier of 1-D labels
        y_train, y_held = train["y"][:, 0], held["y"][:, 0]
        boosting: Any = HistGradientBoostingClassifier(early_stopping=True, random_state=0)
        neighbours: Any = KNeighborsClassifier()
    else:
        y_train, y_held = train["y"], held["y"]
        wrap = MultiOutputRegressor if metric == "r2" else MultiOutputClassifier
        booster = HistGradientBoostingRegressor if metric == "r2" else HistGradientBoostingClassifier
        boosting = wrap(booster(early_stopping=True, random_state=0))
        neighbours = KNeighborsRegressor() if metric == "r2" else KNeighborsClassifier()
    prefix = "estimator__" if y_train.ndim == 2 else ""
    # Small grids: this runs on 2 shared cores. Boosting stops early on its own validation split.
    models = {
        "gradient_boosting": (boosting, {f"{prefix}learning_rate": [0.1], f"{prefix}max_leaf_nodes": [15, 31]}),
        "knn": (
            make_pipeline(StandardScaler(), neighbours),
            {f"{type(neighbours).__name__.lower()}__n_neighbors": [5, 15, 40],
             f"{type(neighbours).__name__.lower()}__weights": ["uniform", "distance"]},
        ),
    }  # fmt: skip
    out: dict[str, Any] = {"timing": evidence.timing, "rows": k}
    for model_name, (model, grid) in models.items():
        search = GridSearchCV(model, grid, cv=3, n_jobs=1).fit(train["x"], y_train)
        pred = search.predict(held["x"]).reshape(y_held.shape)
        score = r_squared(pred, y_held) if metric == "r2" else float(np.mean(pred == y_held))
        params = {p.split("__")[-1]: v for p, v in search.best_params_.items()}
        out[model_name] = {"score": round(float(score), 4), "params": params}
    out["best_fit"] = max(out["gradient_boosting"]["score"], out["knn"]["score"])
    print(f"{name} reference fits: {json.dumps(out)}", flush=True)
    return out


def stepstream(*args: Any, timeout_s: float = 600.0) -> str:
    """Run ``stepstream ARGS``; its output; raises on a non-zero exit."""
    command = [str(Path(sys.executable).with_name("stepstream")), *map(str, args)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    print("$ stepstream " + " ".join(map(str, args)), flush=True)
    proc = subprocess.run(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"stepstream {args[0]} exited {proc.returncode}:\n" + "\n".join(proc.stdout.splitlines()[-30:]))
    return proc.stdout


def cartpole(seed: int, work: Path) -> dict[str, Any]:
    """PPO -> record an expert -> offline BC -> act with --inference (module docstring)."""
    from common.demo import demo_action_timings, load_demonstration

    results = work / "results"
    started = time.monotonic()
    stepstream(
        "train", "configs/cartpole_ppo.yaml", "--results-dir", results, "--run-id", "ppo", "--seed", seed, "--no-progress"
    )
    ppo_status = json.loads((results / "ppo" / "run_logs" / "training_status.json").read_text())["CartPole"]
    ppo_s = time.monotonic() - started

    expert = work / "cartpole_expert.demo"
    stepstream(
        "record", "configs/cartpole_ppo.yaml", "--checkpoint", results / "ppo", "--deterministic",
        "--episodes", CARTPOLE_EXPERT_EPISODES, "--num-envs", 4, "--seed", seed, "--out", expert,
    )  # fmt: skip
    recorded = load_demonstration(expert)
    header = recorded.files[0]
    expert_timing = demo_action_timings(recorded)[0].timing  # our recorder's order: must read as same

    rows = header.number_steps - 1
    behavior = {
        "trainer_type": "bc",
        "hyperparameters": {"demo_path": str(expert), "batch_size": 64, "num_epoch": 1, "learning_rate": 1e-3},
        "network_settings": {"hidden_units": 64, "num_layers": 2, "normalize": True},
        "max_steps": CARTPOLE_BC_EPOCHS * round(rows * 0.9),
        "summary_freq": 50_000,
        "checkpoint_interval": 10**9,
    }
    bc_config = work / "bc.yaml"
    bc_config.write_text(yaml.safe_dump({"behaviors": {"CartPole": behavior}, "env_settings": {"seed": seed}}))
    bc_started = time.monotonic()
    stepstream("train", bc_config, "--results-dir", results, "--run-id", "bc", "--no-progress")
    bc_s = time.monotonic() - bc_started
    metrics = json.loads((results / "bc" / "CartPole" / "bc_metrics.json").read_text())

    act_config = work / "bc_act.yaml"  # the same behavior; max_steps is the acting budget under --inference
    act_config.write_text(yaml.safe_dump({"behaviors": {"CartPole": {**behavior, "max_steps": CARTPOLE_ACT_STEPS}}}))
    output = stepstream(
        "train", act_config, "--results-dir", results, "--run-id", "bc", "--inference", "--env", "gym:CartPole-v1",
        "--num-envs", 4, "--seed", seed, "--no-progress",
    )  # fmt: skip
    match = INFERENCE_LINE.search(output)
    if match is None:
        raise RuntimeError("no inference summary line in:\n" + output[-3000:])
    episodes, last20 = int(match.group(1)), float(match.group(2))
    out = {
        "ppo_mean_reward_last100": ppo_status["mean_reward"],
        "ppo_wall_s": round(ppo_s, 1),
        "expert_records": header.number_steps,
        "expert_episodes": header.number_episodes,
        "expert_mean_return": round(header.mean_reward, 2),
        "expert_action_timing": expert_timing,
        "bc_train_rows": metrics["train_rows"],
        "bc_held_out_accuracy": metrics["held_out_accuracy"],
        "bc_wall_s": round(bc_s, 1),
        "inference_episodes": episodes,
        "inference_mean_return_last20": last20,
        "pass": last20 >= SOLVED,
    }
    print(f"CartPole: {json.dumps(out)}", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default: 0)")
    parser.add_argument("--skip-real", action="store_true", help="skip part 1 (the real ML-Agents files)")
    parser.add_argument("--skip-cartpole", action="store_true", help="skip part 2 (CartPole)")
    parser.add_argument("--skip-fits", action="store_true", help="skip the scikit-learn fits beside BC on the real files")
    args = parser.parse_args()
    from trainer.loop import configure_tf_threads

    configure_tf_threads()
    summary: dict[str, Any] = {"demo_dir": str(DEMO_DIR), "chance": "uniform over allowed options; 0.2 for 1 branch of 5"}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            per_seed: dict[str, Any] = {}
            if not args.skip_real:
                for name, (metric, required) in REAL_DEMOS.items():
                    per_seed[name] = real_demo(name, metric, required, seed, Path(tmp) / f"real-{seed}")
            if not args.skip_cartpole:
                per_seed["CartPole"] = cartpole(seed, Path(tmp) / f"cartpole-{seed}")
            summary[f"seed_{seed}"] = per_seed
    if not args.skip_real:
        fits = {} if args.skip_fits else {name: reference_fits(name, metric) for name, (metric, _) in REAL_DEMOS.items()}
        summary["reference_fits"] = fits
        summary["files"] = {}
        for name, (metric, _) in REAL_DEMOS.items():
            score_key = "held_out_r2" if metric == "r2" else "held_out_accuracy"
            scores = [summary[f"seed_{seed}"][name][score_key] for seed in args.seeds]
            summary["files"][name] = {
                "timing": summary[f"seed_{seed}"][name]["timing"],
                "bc": round(float(statistics.median(scores)), 4),
                "best_fit": fits[name]["best_fit"] if name in fits else None,
                "metric": metric,
            }
        if fits:
            summary["bc_within_0_03_of_best_fit"] = all(f["bc"] >= f["best_fit"] - 0.03 for f in summary["files"].values())
    summary["all_pass"] = all(r["pass"] is not False for k, v in summary.items() if k.startswith("seed_") for r in v.values())
    print(json.dumps(summary, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
