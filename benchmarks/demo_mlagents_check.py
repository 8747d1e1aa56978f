"""Does ML-Agents 1.1.0's own loader read the .demo files ``stepstream record`` writes? (Not CI.)

Writes three demos with ``cli.record``'s recorder and writer (``record_episodes`` + ``demo_bytes``):

* ``simple_discrete``: the 1-D task, one branch of 2, its scripted expert;
* ``simple_continuous``: the 1-D task, C = 1, its scripted expert;
* ``hybrid_two_obs``: a random env with two observations ([3] and [2, 2]) and a hybrid action spec
  (C = 2 plus branches [3, 2]) acted by a random scripted policy, with time limits, so every
  field and the ``max_step_reached`` flag are exercised.

Then ML-Agents' ``mlagents.trainers.demo_loader.load_demonstration`` and ``demo_to_buffer`` read each
one in the side environment (``../shared/yardsticks/setup.sh``: ``~/.cache/stepstream-yardsticks/mla``)
and the figures are compared with ours (``common.demo``): records, header steps, action spec,
observation shapes, buffer rows, and the sums of rewards, dones, actions and each observation
(relative tolerance 1e-5).

    .venv/bin/python benchmarks/demo_mlagents_check.py [--mla-python PATH] [--keep DIR]

Prints one line per demo and, last, one JSON line ``{"demos", "all_match", "results"}``; exits 1
on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli.record import demo_bytes, record_episodes, scripted_actor  # noqa: E402
from common import trajectory as tr  # noqa: E402
from common.demo import demo_to_buffer, load_demonstration  # noqa: E402
from common.specs import ActionSpec, BrainParameters, ObservationSpec  # noqa: E402
from envclient.simple_env import SimpleEnv, scripted_expert  # noqa: E402

DEFAULT_MLA_PYTHON = Path.home() / ".cache" / "stepstream-yardsticks" / "mla" / "bin" / "python"
RTOL = 1e-5

MLA_READER = r"""
import json, sys
import numpy as np
from mlagents.trainers.buffer import BufferKey
from mlagents.trainers.demo_loader import demo_to_buffer, load_demonstration
from mlagents.trainers.trajectory import ObsUtil

out = {}
for path in sys.argv[1:]:
    spec, pairs, expected = load_demonstration(path)
    _, buffer = demo_to_buffer(path, 1)
    def total(key):
        return float(np.sum(np.asarray(buffer[key].get_batch(), dtype=np.float64))) if key in buffer else 0.0
    out[path] = {
        "records": len(pairs),
        "header_steps": int(expected),
        "continuous_actions": int(spec.action_spec.continuous_size),
        "discrete_branches": [int(b) for b in spec.action_spec.discrete_branches],
        "observation_shapes": [list(o.shape) for o in spec.observation_specs],
        "rows": int(buffer.num_experiences),
        "reward_sum": total(BufferKey.ENVIRONMENT_REWARDS),
        "done_sum": total(BufferKey.DONE),
        "continuous_action_sum": total(BufferKey.CONTINUOUS_ACTION),
        "discrete_action_sum": total(BufferKey.DISCRETE_ACTION),
        "obs_sums": [total(ObsUtil.get_name_at(i)) for i in range(len(spec.observation_specs))],
    }
print(json.dumps(out))
"""


class RandomTwoObsEnv:
    """``N`` copies of a random env: obs [3] and [2, 2] floats, hybrid actions; episodes end at random or at a time limit."""

    def __init__(self, n: int, seed: int) -> None:
        self._n = n
        self._rng = np.random.default_rng(seed)
        self._steps = np.zeros(n, np.int64)
        self._needs_reset = np.zeros(n, bool)
        self.params = BrainParameters(
            "HybridTwoObs",
            (ObservationSpec((3,), np.dtype(np.float32), "vector"), ObservationSpec((2, 2), np.dtype(np.float32), "grid")),
            ActionSpec(2, (3, 2)),
        )

    @property
    def num_agents(self) -> int:
        return self._n

    @property
    def brain_parameters(self) -> BrainParameters:
        return self.params

    def _obs(self) -> list[np.ndarray]:
        return [
            self._rng.normal(size=(self._n, 3)).astype(np.float32),
            self._rng.normal(size=(self._n, 2, 2)).astype(np.float32),
        ]

    def reset(self) -> list[np.ndarray]:
        self._steps[:] = 0
        return self._obs()

    def step(
        self, continuous: np.ndarray, discrete: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        resetting = self._needs_reset.copy()
        self._steps[resetting] = 0
        self._steps[~resetting] += 1
        rewards = np.where(resetting, 0.0, continuous.sum(axis=1) + discrete.sum(axis=1)).astype(np.float32)
        terminated = ~resetting & (self._rng.random(self._n) < 0.1)
        truncated = ~resetting & ~terminated & (self._steps >= 8)
        self._needs_reset = terminated | truncated
        return self._obs(), rewards, terminated, truncated


def random_policy(seed: int) -> Any:
    rng = np.random.default_rng(seed)

    def act(observations: list[np.ndarray], spec: ActionSpec) -> tuple[np.ndarray, np.ndarray]:
        n = len(observations[0])
        discrete = np.stack([rng.integers(0, b, size=n) for b in spec.discrete_branches], axis=1)
        return rng.uniform(-1, 1, size=(n, spec.continuous_size)).astype(np.float32), discrete

    return act


def write_demos(folder: Path) -> list[Path]:
    cases: list[tuple[str, Any, Any, int]] = [
        ("simple_discrete", SimpleEnv(4, continuous=False, seed=0), scripted_expert, 25),
        ("simple_continuous", SimpleEnv(4, continuous=True, seed=1), scripted_expert, 25),
        ("hybrid_two_obs", RandomTwoObsEnv(3, seed=2), random_policy(3), 30),
    ]
    paths = []
    for name, env, policy, episodes in cases:
        pairs, returns = record_episodes(env, scripted_actor(policy, env.brain_parameters, name), episodes)
        path = folder / f"{name}.demo"
        path.write_bytes(demo_bytes(name, env.brain_parameters, pairs, returns))
        paths.append(path)
    return paths


def our_figures(path: Path) -> dict[str, Any]:
    demo = load_demonstration(path)
    spec, buffer = demo_to_buffer(path, 1, action_timing="same")  # ML-Agents' pairing, whatever the file's timing

    def total(key: str) -> float:
        return float(np.asarray(buffer[key].data, dtype=np.float64).sum()) if key in buffer else 0.0

    return {
        "records": demo.records,
        "header_steps": demo.files[0].number_steps,
        "continuous_actions": spec.action_spec.continuous_size,
        "discrete_branches": list(spec.action_spec.discrete_branches),
        "observation_shapes": [list(o.shape) for o in spec.observation_specs],
        "rows": buffer.num_experiences,
        "reward_sum": total(tr.REWARDS),
        "done_sum": total(tr.DONE),
        "continuous_action_sum": total(tr.CONTINUOUS_ACTIONS),
        "discrete_action_sum": total(tr.DISCRETE_ACTIONS),
        "obs_sums": [total(tr.obs_key(i)) for i in range(len(spec.observation_specs))],
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=RTOL, abs_tol=1e-4)
    return bool(a == b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mla-python", type=Path, default=DEFAULT_MLA_PYTHON, help="python of the ML-Agents 1.1.0 venv")
    parser.add_argument("--keep", type=Path, help="write the demos here (default: a temporary folder)")
    args = parser.parse_args()
    if not args.mla_python.exists():
        print(f"no ML-Agents interpreter at {args.mla_python}: run ../shared/yardsticks/setup.sh", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        paths = write_demos(folder)
        proc = subprocess.run(
            [str(args.mla_python), "-c", MLA_READER, *map(str, paths)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            return 1
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
        results = {}
        for path in paths:
            ours, mla = our_figures(path), theirs[str(path)]
            mismatched = sorted(k for k in ours if not _same(ours[k], mla[k]))
            results[path.stem] = {"match": not mismatched, "mismatched": mismatched, "ours": ours, "mlagents": mla}
            print(f"{path.stem}: {'match' if not mismatched else 'MISMATCH ' + str(mismatched)}: {json.dumps(ours)}")
    all_match = all(r["match"] for r in results.values())
    print(json.dumps({"demos": len(results), "all_match": all_match, "results": results}))
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main())
