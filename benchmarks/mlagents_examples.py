"""Does every ML-Agents example config parse, and start? (Issue 40's proof; not CI.)

Reads the 39 trainer configs ML-Agents ships (``../shared/data/mlagents-configs/``: ``ppo``, ``sac``, ``poca`` and
``imitation``, as ``SOURCES.tsv`` there names them), in place. For each:

* **parses**: ``common.config.load_config`` accepts it;
* **starts**: ``stepstream train`` runs it for ``--steps`` (2,000) agent steps with no error, against a stand-in
  env of each behavior's spec, as ML-Agents' ``docs/Learning-Environment-Examples.md`` gives it (``STANDINS``):
  random observations of the scene's shapes, random rewards, episodes of ``EPISODE_STEPS`` steps. The config is
  run unedited but for ``env_settings.env_path``, which maps each behavior to its stand-in (a temporary copy of the
  YAML beside the run, in a scratch folder; ``--max-steps`` gives the budget). A demonstration path in it
  (GAIL, behavioral cloning) gets a demo of the stand-in, recorded with a random policy.

A stand-in is a Gymnasium env, so it has one observation and one action type; where a scene has more
(``STANDINS`` says which), the stand-in keeps the main one, and the JSON line lists those as ``approximated``.
Sorter's variable-length (buffer sensor) observation is flattened to a vector, and GridWorld's goal signal
dropped: attention and goal conditioning are not built yet.

    .venv/bin/python benchmarks/mlagents_examples.py [--steps 2000] [--parse-only] [--only NAME ...]

Prints one line per config and, last, one JSON line: ``{"configs", "parse", "start", "refused", "failed",
"approximated", "seconds"}`` (``refused``: config -> the one-line error).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import yaml
from gymnasium import spaces

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIGS = REPO.parent / "shared" / "data" / "mlagents-configs"
STEPS = 2000
EPISODE_STEPS = 50
"""Stand-in episode length (agent steps): long enough for a trajectory, short enough for episodes in 2,000 steps."""
MODULE = "benchmarks.mlagents_examples"


@dataclass(frozen=True)
class StandIn:
    """One behavior's spec: its observation (a vector ``(D,)`` or an image ``(H, W, C)``) and its actions."""

    observation: tuple[int, ...]
    continuous: int = 0
    branches: tuple[int, ...] = ()
    approximated: str = ""
    """What of the scene's spec the stand-in leaves out (empty: the spec itself)."""
    uint8: bool = False
    """An image of uint8 pixels (a camera) rather than float32 values (a grid sensor)."""


STANDINS: dict[str, StandIn] = {
    "3DBall": StandIn((8,), continuous=2),
    "3DBallHard": StandIn((5,), continuous=2),
    "Visual3DBall": StandIn((84, 84, 3), continuous=2, uint8=True),
    "Basic": StandIn((1,), branches=(3,)),
    "Crawler": StandIn((172,), continuous=20),
    "Worm": StandIn((64,), continuous=9),
    "Walker": StandIn((243,), continuous=39),
    "PushBlock": StandIn((70,), branches=(7,)),
    "Hallway": StandIn((30,), branches=(4,)),
    "Pyramids": StandIn((148,), branches=(4,)),
    "BigWallJump": StandIn((74,), branches=(3, 3, 3, 2)),
    "SmallWallJump": StandIn((74,), branches=(3, 3, 3, 2)),
    "GridWorld": StandIn((84, 84, 3), branches=(5,), uint8=True, approximated="goal signal (one-hot) dropped"),
    "GridFoodCollector": StandIn(
        (40, 40, 6), continuous=3, approximated="the laser's discrete branch and the vector observation dropped"
    ),
    "VisualFoodCollector": StandIn(
        (84, 84, 3), continuous=3, uint8=True, approximated="the laser's discrete branch and the frozen flag dropped"
    ),
    "Match3SimpleHeuristic": StandIn((8, 8, 6), branches=(112,)),
    "Match3SmartHeuristic": StandIn((8, 8, 6), branches=(112,)),
    "Sorter": StandIn((4 + 20 * 23,), branches=(3, 3, 3), approximated="buffer sensor (20 x 23 entities) flattened"),
    "SoccerTwos": StandIn((336,), branches=(3, 3, 3)),
    "Striker": StandIn((294,), branches=(3, 3, 3)),
    "Goalie": StandIn((738,), branches=(3, 3, 3)),
    "PushBlockCollab": StandIn((32, 32, 6), branches=(7,)),
    "DungeonEscape": StandIn((105,), branches=(7,)),
}
"""Each behavior of the 39 configs, by name, from ML-Agents' ``docs/Learning-Environment-Examples.md``."""


class StandInEnv(gymnasium.Env[Any, Any]):
    """Random observations of a spec, rewards uniform in [-0.1, 0.1], episodes of ``EPISODE_STEPS`` steps."""

    def __init__(self, spec: StandIn) -> None:
        if spec.uint8:
            self.observation_space = spaces.Box(0, 255, spec.observation, np.uint8)
        else:
            self.observation_space = spaces.Box(-5.0, 5.0, spec.observation, np.float32)
        if spec.continuous:
            self.action_space = spaces.Box(-1.0, 1.0, (spec.continuous,), np.float32)
        elif len(spec.branches) == 1:
            self.action_space = spaces.Discrete(spec.branches[0])
        else:
            self.action_space = spaces.MultiDiscrete(list(spec.branches))
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        del action
        self.t += 1
        reward = float(self.np_random.uniform(-0.1, 0.1))
        return self.observation_space.sample(), reward, False, self.t >= EPISODE_STEPS, {}


def __getattr__(name: str) -> Any:
    """``standin_<Behavior>``: the env factory ``python:benchmarks.mlagents_examples:standin_<Behavior>`` names."""
    if name.startswith("standin_") and name[len("standin_") :] in STANDINS:
        spec = STANDINS[name[len("standin_") :]]
        return lambda: StandInEnv(spec)
    raise AttributeError(name)


def config_files(only: list[str]) -> list[Path]:
    files = sorted(CONFIGS.glob("*/*.yaml"))
    return [f for f in files if not only or f.stem in only or f"{f.parent.name}/{f.stem}" in only]


def _record_demos(options: Any, workdir: Path) -> None:
    """A demo of each behavior's stand-in at every demo path the config reads (relative to ``workdir``)."""
    from cli.record import demo_bytes, record_episodes
    from envclient.gym_adapter import GymVectorEnv

    for name, settings in options.behaviors.items():
        for demo_path in set(settings.demo_paths().values()):
            path = workdir / demo_path
            env_path = f"python:{MODULE}:standin_{name}"
            with GymVectorEnv(env_path, 1, seed=0, behavior_name=name, env_fn=__getattr__(f"standin_{name}")) as env:
                spec = env.brain_parameters.action_spec
                rng = np.random.default_rng(0)

                def act(observations: list[np.ndarray], spec: Any = spec, rng: Any = rng) -> tuple[np.ndarray, np.ndarray]:
                    n = len(observations[0])
                    c = rng.uniform(-1, 1, (n, spec.continuous_size)).astype(np.float32)
                    d = [rng.integers(0, b, n) for b in spec.discrete_branches]
                    return c, (np.stack(d, axis=1) if d else np.zeros((n, 0))).astype(np.int32)

                pairs, returns = record_episodes(env, act, 3)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(demo_bytes(path.stem, env.brain_parameters, pairs, returns))


def start(config: Path, options: Any, steps: int, scratch: Path) -> str | None:
    """Run ``config`` for ``steps`` agent steps against its stand-ins; None when it ran, else the error."""
    from cli.main import main
    from common.config import read_yaml

    mapping = dict(read_yaml(config))
    missing = [name for name in options.behaviors if name not in STANDINS]
    if missing:
        return f"no stand-in for {missing}"
    env_path = [{"env": f"python:{MODULE}:standin_{name}", "behavior": name} for name in options.behaviors]
    mapping["env_settings"] = {**(mapping.get("env_settings") or {}), "env_path": env_path, "num_envs": 1}
    workdir = scratch / f"{config.parent.name}_{config.stem}"
    workdir.mkdir(parents=True)
    copy = workdir / config.name
    copy.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    cwd = Path.cwd()
    os.chdir(workdir)  # ML-Agents resolves demo paths against the working directory
    try:
        _record_demos(options, workdir)
        args = ["train", str(copy), "--max-steps", str(steps), "--results-dir", str(workdir / "results")]
        code = main([*args, "--run-id", config.stem, "--seed", "0", "--no-progress"])
    except Exception as err:  # a benchmark reports every failure and goes on to the next config
        return f"{type(err).__name__}: {err}"
    finally:
        os.chdir(cwd)
    return None if code == 0 else f"exit code {code}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help="agent steps each config runs (default 2000)")
    parser.add_argument("--parse-only", action="store_true", help="only parse the configs")
    parser.add_argument("--only", nargs="*", default=[], help="config stems (3DBall) or dir/stem (sac/3DBall)")
    args = parser.parse_args(argv)
    from common.config import load_config
    from common.errors import StepstreamError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started_at = time.monotonic()
    files = config_files(args.only)
    parsed, started, refused, failed = 0, 0, {}, {}
    approximated = sorted({f"{n}: {s.approximated}" for n, s in STANDINS.items() if s.approximated})
    with tempfile.TemporaryDirectory(prefix="mlagents-examples-") as scratch:
        for config in files:
            key = f"{config.parent.name}/{config.stem}"
            try:
                with contextlib.redirect_stderr(sys.stdout):
                    options = load_config(config)
            except StepstreamError as err:
                refused[key] = str(err).replace(str(CONFIGS) + "/", "")
                print(f"{key}: refused: {refused[key]}", flush=True)
                continue
            parsed += 1
            if args.parse_only:
                print(f"{key}: parses", flush=True)
                continue
            error = start(config, options, args.steps, Path(scratch))
            if error is None:
                started += 1
            else:
                failed[key] = error
            print(f"{key}: {'starts' if error is None else 'fails: ' + error}", flush=True)
    result = {
        "configs": len(files),
        "parse": parsed,
        "start": None if args.parse_only else started,
        "steps": args.steps,
        "refused": refused,
        "failed": failed,
        "approximated": approximated,
        "seconds": round(time.monotonic() - started_at, 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
