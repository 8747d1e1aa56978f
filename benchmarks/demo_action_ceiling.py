"""How much of a continuous demo's actions any policy of the observation could explain (issue 6; not CI).

BC's held-out R^2 on ``test.demo`` (3DBall) stays near 0.3-0.4 however it is trained. This script
asks whether that is the model or the data, with closed-form least squares on the same held-out
10% that ``bc_metrics.json`` holds out (``trainer.bc_metrics.split_rows``, same fraction and seed):

* ``inverse_dynamics_r2``: the action executed between obs_i and obs_{i+1}, within an episode,
  predicted from the pair. Which record holds that action depends on the recorder: ML-Agents
  stores with each agent info the action taken *before* it (``storedActions``; record i+1, as in
  ``test.demo``), older files the one chosen at it (record i, as in ``Expert3DBall.demo``). Both
  are fitted and the better one is the ``executed_action_record`` ("i+1" or "i"). A value near 1
  says the recorded actions are the executed ones, noise included;
* ``policy_r2``: that executed action predicted from obs_i alone (what the agent saw when it
  chose it), and ``policy_r2_buffer_pairing`` for ``demo_to_buffer``'s pairing (action of record
  i with obs i, what BC trains on), each with linear and with quadratic features.

When the inverse dynamics explain almost everything and no function of the observation explains
much, the rest is per-step sampling noise of the stochastic policy that recorded the demo: no
cloned policy can predict it, so it bounds BC's R^2 from above.

    .venv/bin/python benchmarks/demo_action_ceiling.py [DEMO]   # default: $STEPSTREAM_DEMO_DIR/test.demo

Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.demo import demo_to_buffer  # noqa: E402
from trainer.bc_metrics import HOLDOUT_FRACTION, HOLDOUT_SEED, r_squared, split_rows  # noqa: E402

DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))


def quadratic(x: np.ndarray) -> np.ndarray:
    """[K, D] -> [K, 1 + D + D(D+1)/2]: a bias, the features and every pairwise product."""
    products = [x[:, i : i + 1] * x[:, i:] for i in range(x.shape[1])]
    return np.hstack([np.ones((len(x), 1)), x, *products])


def linear(x: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((len(x), 1)), x])


def held_out_r2(features: np.ndarray, actions: np.ndarray) -> float:
    """Least-squares fit on the training rows, R^2 (uniform over action dims) on the held-out ones."""
    train, held = split_rows({"x": features, "y": actions}, HOLDOUT_FRACTION, HOLDOUT_SEED)
    # Standardised features keep the quadratic products' normal equations well conditioned.
    mean, std = train["x"][:, 1:].mean(axis=0), train["x"][:, 1:].std(axis=0) + 1e-8
    scale = lambda x: np.hstack([x[:, :1], (x[:, 1:] - mean) / std])  # noqa: E731
    weights, *_ = np.linalg.lstsq(scale(train["x"]), train["y"], rcond=None)
    return round(r_squared(scale(held["x"]) @ weights, held["y"]), 3)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEMO_DIR / "test.demo"
    spec, rows = demo_to_buffer(path, 1)
    if spec.action_spec.continuous_size == 0 or len(spec.observation_specs) != 1:
        raise SystemExit(f"{path}: needs continuous actions and one vector observation")
    obs = np.asarray(rows["obs_0"], np.float64).reshape(len(rows["obs_0"]), -1)
    next_obs = np.asarray(rows["next_obs_0"], np.float64).reshape(len(obs), -1)
    actions = np.asarray(rows["continuous_actions"], np.float64)
    done = np.asarray(rows["done"]).astype(bool)
    # Row i's next_obs is record i+1's obs; the action executed between them is row i's or row i+1's.
    within = np.flatnonzero(~done[:-1])
    transition = linear(np.hstack([obs[within], next_obs[within]]))
    fits = {lag: held_out_r2(transition, actions[within + lag]) for lag in (0, 1)}
    lag = max(fits, key=lambda k: fits[k])
    executed = actions[within + lag]
    out = {
        "demo": path.name,
        "rows": len(obs),
        "transitions": len(within),
        "executed_action_record": "i+1" if lag else "i",
        "inverse_dynamics_r2": fits[lag],
        "policy_r2": {
            "linear": held_out_r2(linear(obs[within]), executed),
            "quadratic": held_out_r2(quadratic(obs[within]), executed),
        },
        "policy_r2_buffer_pairing": {
            "linear": held_out_r2(linear(obs), actions),
            "quadratic": held_out_r2(quadratic(obs), actions),
        },
        "action_std": np.round(actions.std(axis=0), 3).tolist(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
