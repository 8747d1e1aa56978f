"""How much of a continuous demo's actions the transition explains, and how much the observation (issue 6; not CI).

BC's held-out R^2 on ``test.demo`` (3DBall) stays at 0.35-0.36 and on ``Expert3DBall.demo`` at 0.19. This
script separates two reasons it could be low, with closed-form least squares scored on the rows
``bc_metrics.json`` holds out (``trainer.bc_metrics.split_rows`` over all rows, same fraction and seed):

* ``timing`` and ``inverse_dynamics_r2``: the library's detector (``common.demo_timing``, the code
  ``demo_to_buffer`` runs) says which record holds the action executed between obs_i and obs_{i+1}:
  ML-Agents' recorder stores with each agent info the action taken *before* it (``storedActions``:
  record i+1, ``next``, as in ``test.demo``), older files the one chosen at it (record i, ``same``,
  as in ``Expert3DBall.demo``). ``executed_action_record`` is "i+1" or "i"; ``inverse_dynamics_r2``
  the detector's out-of-fold R^2 of that record's action from the pair (``timing_evidence`` holds
  both fits). Near 1: the recorded actions are the executed ones, every per-step variation
  included, and they are no mystery given what they did;
* ``policy_r2``: that executed action from obs_i alone (what the agent saw when it chose it), and
  ``policy_r2_buffer_pairing`` for ``demo_to_buffer``'s pairing (action of record i with obs i, what BC
  trains on), each with linear and with quadratic features of the observation.

These fits are lower bounds on what a policy of the observation can reach, not a ceiling: BC's MLP does
better than the quadratic fit. Their use is the contrast: when the transition explains the actions almost
fully and neither least squares nor BC's MLP gets near that from the observation, the actions vary from
step to step in ways the observation does not show, as the samples of a stochastic recording policy do.

    .venv/bin/python benchmarks/demo_action_predictability.py [DEMO]   # default: $STEPSTREAM_DEMO_DIR/test.demo

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

from common.demo import demo_action_timings, demo_to_buffer, load_demonstration  # noqa: E402
from common.demo_timing import NEXT  # noqa: E402
from trainer.bc_metrics import HOLDOUT_FRACTION, HOLDOUT_SEED, r_squared, split_rows  # noqa: E402

DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))


def linear(x: np.ndarray) -> np.ndarray:
    """[K, D] -> [K, 1 + D]: a bias column, then the features."""
    return np.hstack([np.ones((len(x), 1)), x])


def quadratic(x: np.ndarray) -> np.ndarray:
    """[K, D] -> [K, 1 + D + D(D+1)/2]: a bias column, the features and every pairwise product."""
    products = [x[:, i : i + 1] * x[:, i:] for i in range(x.shape[1])]
    return np.hstack([np.ones((len(x), 1)), x, *products])


def held_out_r2(features: np.ndarray, actions: np.ndarray, held: np.ndarray) -> float:
    """Least squares fitted on the rows not in ``held`` (bool [K]), R^2 (uniform over action dims) on those in it.

    Args:
        features: [K, F], a bias column first (``linear``, ``quadratic``); actions: [K, C].
    """
    train_x, train_y = features[~held], actions[~held]
    # Standardised features keep the quadratic products' normal equations well conditioned.
    mean, std = train_x[:, 1:].mean(axis=0), train_x[:, 1:].std(axis=0) + 1e-8

    def scale(x: np.ndarray) -> np.ndarray:
        return np.hstack([x[:, :1], (x[:, 1:] - mean) / std])

    weights, *_ = np.linalg.lstsq(scale(train_x), train_y, rcond=None)
    return round(r_squared(scale(features[held]) @ weights, actions[held]), 3)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEMO_DIR / "test.demo"
    (evidence,) = demo_action_timings(load_demonstration(path))
    spec, rows = demo_to_buffer(path, 1, action_timing="same")  # ML-Agents' pairing: row i is record i -> i+1
    if spec.action_spec.continuous_size == 0 or len(spec.observation_specs) != 1:
        raise SystemExit(f"{path}: needs continuous actions and one vector observation")
    k = len(rows["obs_0"])
    obs = np.asarray(rows["obs_0"], np.float64).reshape(k, -1)
    actions = np.asarray(rows["continuous_actions"], np.float64)
    done = np.asarray(rows["done"]).astype(bool)
    _, held_rows = split_rows({"row": np.arange(k)}, HOLDOUT_FRACTION, HOLDOUT_SEED)  # bc_metrics.json's split
    held = np.zeros(k, bool)
    held[held_rows["row"]] = True
    # Row i is record i -> record i+1, and done[i] says record i+1 ends an episode, so row i+1 runs from that
    # terminal record into the next episode: drop such rows. The last row goes too: lag 1 reads row i+1's action.
    within = np.flatnonzero(~np.r_[False, done[:-1]][:-1])
    lag = 1 if evidence.timing == NEXT else 0
    executed = actions[within + lag]
    out = {
        "demo": path.name,
        "rows": k,
        "transitions": len(within),
        "timing": evidence.timing,
        "executed_action_record": "i+1" if lag else "i",
        "inverse_dynamics_r2": evidence.next_fit if lag else evidence.same_fit,
        "timing_evidence": evidence.to_dict(),
        "policy_r2": {
            "linear": held_out_r2(linear(obs[within]), executed, held[within]),
            "quadratic": held_out_r2(quadratic(obs[within]), executed, held[within]),
        },
        "policy_r2_buffer_pairing": {
            "linear": held_out_r2(linear(obs), actions, held),
            "quadratic": held_out_r2(quadratic(obs), actions, held),
        },
        "action_std": np.round(actions.std(axis=0), 3).tolist(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
