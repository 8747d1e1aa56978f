"""Workloads T1 / T2 (../shared/yardsticks/README.md): wall-clock time for ``stepstream train`` to solve.

* ``ppo-cartpole`` (T1): ``configs/cartpole_ppo.yaml``; solved = the mean of the last 20 finished
  episodes >= 475.
* ``sac-pendulum`` (T2): ``configs/pendulum_sac.yaml``; solved = the mean of the last 10 finished
  episodes >= -200.
* ``ppo-pixel`` (T3): ``configs/minigrid_ppo.yaml``, MiniGrid-Empty-5x5-v0 as 40x40x3 RGB images only
  (``envclient/examples/minigrid.py``; needs the ``bench`` extra); solved = the mean of the last 20
  finished episodes >= 0.9. Peer: ``sb3_pixel.py SEED``.

The run is the real command, ``stepstream train CONFIG --seed SEED --results-dir TMP --no-progress``,
in a subprocess. This script follows ``<behavior>/episodes.csv`` while it runs, row by row in the
order the trainer took the episodes in, and sends it SIGINT as soon as the window's mean reaches
the threshold (the run saves a checkpoint and exits; that is not timed). The figures mean what the
peer's (``sb3_time_to_solve.py``) do:

* ``solved``: the threshold was reached within the budget;
* ``steps``: agent steps (experiences, all env copies together, as SB3's ``num_timesteps``) at the
  episode that solved it: its ``agent_steps`` column; unsolved, the run's final step count;
* ``wall_s``: seconds from the start of the ``stepstream train`` process, imports included: the
  solving episode's ``wall_seconds`` column (which counts from the process start); unsolved, until
  the run ended.
* ``wall_s_after_imports``: the same less the run's imports (``cli.train.IMPORTS_DONE`` in
  ``train.log``: Python's and TensorFlow's), the way the peers count: their clock starts after they
  imported PyTorch, Gymnasium and Stable-Baselines3. ``benchmarks/peer_clock.py`` gives the peer's
  figure the other way, ``wall_s_from_process_start``; compare like with like.

Budget: the config's own ``max_steps`` (the run stops itself there; 100000 for CartPole and 20000 for
Pendulum, where the peer allows 200000 and 30000; 300000 for MiniGrid, as the peer), or ``--wall-limit-s``,
whichever comes first. An unsolved seed counts as infinite time. The configs are used as they are: ``max_steps`` also sets
the length of linear learning-rate schedules, so changing the budget would change the learning.

The peer, run beside it on the same machine (one after the other, in the same session: these
machines are noisy, compare ratios), from the repository root::

    bash ../shared/yardsticks/setup.sh      # once: builds ~/.cache/stepstream-yardsticks/{mla,sb3}
    ~/.cache/stepstream-yardsticks/sb3/bin/python ../shared/yardsticks/sb3_time_to_solve.py ppo-cartpole 0
    .venv/bin/python benchmarks/time_to_solve.py ppo-cartpole 0
    ~/.cache/stepstream-yardsticks/sb3/bin/python ../shared/yardsticks/sb3_pixel.py 0
    .venv/bin/python benchmarks/time_to_solve.py ppo-pixel 0
    # the peer on both clocks (its own wall_s, and wall_s_from_process_start):
    .venv/bin/python benchmarks/peer_clock.py ~/.cache/stepstream-yardsticks/sb3/bin/python ../shared/yardsticks/sb3_pixel.py 0

usage: time_to_solve.py ppo-cartpole|sac-pendulum|ppo-pixel [seed] [--wall-limit-s S] [--results-dir DIR] [--poll-s S]

The latest figures, each workload beside its peer, are on the documentation's benchmarks page
(``docs/benchmarks.md``).

Prints one JSON line last: ``{"algo_env", "solved", "steps", "wall_s", "wall_s_after_imports"}``. The run's own output goes
to ``<results-dir>/train.log`` (its tail is logged if the run fails); the load average is logged
at start and end, since the figures depend on what else runs on the machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cli.train import IMPORTS_DONE
from common.config import load_config

log = logging.getLogger("benchmarks.time_to_solve")

REPO = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_S = 60.0
"""How long the run may take to save its checkpoint and exit after SIGINT before it is killed."""
PROGRESS_EVERY_S = 15.0
IMPORTS_DONE_PATTERN = re.compile(re.escape(IMPORTS_DONE).replace(re.escape("%.3f"), r"([0-9.]+)"))
"""``cli.train``'s start-up line in ``train.log``: the seconds the run's imports took."""


@dataclass(frozen=True)
class Workload:
    """One time-to-solve workload: a config and its solved criterion."""

    config: Path
    window: int
    """Finished episodes averaged."""
    threshold: float


WORKLOADS = {
    "ppo-cartpole": Workload(REPO / "configs" / "cartpole_ppo.yaml", window=20, threshold=475.0),
    "sac-pendulum": Workload(REPO / "configs" / "pendulum_sac.yaml", window=10, threshold=-200.0),
    "ppo-pixel": Workload(REPO / "configs" / "minigrid_ppo.yaml", window=20, threshold=0.9),
}


@dataclass
class Outcome:
    """What the watch saw: solved or not, at which step and wall second (from the process start)."""

    solved: bool = False
    steps: int = 0
    wall_s: float = 0.0
    episodes: int = 0
    window_mean: float = float("nan")
    imports_s: float | None = None
    """Seconds from the process start to the end of its imports (``cli.train.IMPORTS_DONE``); None if not logged."""

    @property
    def wall_s_after_imports(self) -> float | None:
        """``wall_s`` on the peers' clock, which starts after their imports."""
        return None if self.imports_s is None else self.wall_s - self.imports_s


class EpisodeFollower:
    """Reads ``episodes.csv`` as it grows; only complete lines, each once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""
        self._header: list[str] | None = None

    def new_rows(self) -> list[dict[str, str]]:
        """Rows appended since the last call, as header -> text (none while the file does not exist yet)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next call
        rows = []
        for line in lines:
            fields = line.decode("utf-8").strip().split(",")
            if self._header is None:
                self._header = fields
            elif fields != [""]:
                rows.append(dict(zip(self._header, fields, strict=True)))
        return rows


def imports_seconds(train_log: Path) -> float | None:
    """The run's import time, from its ``IMPORTS_DONE`` line in ``train_log``; None without one."""
    try:
        match = IMPORTS_DONE_PATTERN.search(train_log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return float(match.group(1)) if match else None


def stepstream_command() -> list[str]:
    """The console script beside this interpreter (the venv's), else ``python -m cli.main``."""
    script = Path(sys.executable).with_name("stepstream")
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]


def final_steps(run_dir: Path, behavior: str) -> int | None:
    """The run's step count from ``run_logs/training_status.json``, if it wrote one."""
    try:
        status = json.loads((run_dir / "run_logs" / "training_status.json").read_text(encoding="utf-8"))
        return int(status[behavior]["steps"])
    except (OSError, ValueError, KeyError):
        return None


def stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGINT (the run checkpoints and exits), then SIGKILL after STOP_TIMEOUT_S; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.error("the run did not exit %.0f s after SIGINT: killing it", STOP_TIMEOUT_S)
            proc.kill()
    return proc.wait()


def watch(
    proc: subprocess.Popen[bytes], csv_path: Path, workload: Workload, launched: float, wall_limit_s: float, poll_s: float
) -> Outcome:
    """Follow the episodes until solved, the run ends (max_steps) or the wall limit; the run is still up if solved."""
    follower = EpisodeFollower(csv_path)
    window: collections.deque[float] = collections.deque(maxlen=workload.window)
    outcome = Outcome()
    next_progress = time.monotonic() + PROGRESS_EVERY_S
    while True:
        finished = proc.poll() is not None  # read the rows once more after the run ended
        for row in follower.new_rows():
            window.append(float(row["episode_reward"]))
            outcome.episodes += 1
            outcome.steps, outcome.wall_s = int(row["agent_steps"]), float(row["wall_seconds"])
            if len(window) == window.maxlen:
                outcome.window_mean = sum(window) / len(window)
                if outcome.window_mean >= workload.threshold:
                    outcome.solved = True
                    return outcome
        if finished:
            return outcome
        if time.time() - launched > wall_limit_s:
            log.warning("wall limit of %.0f s reached unsolved", wall_limit_s)
            return outcome
        if time.monotonic() >= next_progress:
            next_progress += PROGRESS_EVERY_S
            log.info(
                "%.0f s: %d steps, %d episodes, mean of the last %d: %.1f",
                time.time() - launched,
                outcome.steps,
                outcome.episodes,
                workload.window,
                outcome.window_mean,
            )
        time.sleep(poll_s)


def run(
    algo_env: str,
    seed: int,
    results_dir: Path,
    wall_limit_s: float,
    poll_s: float,
    config: Path | None = None,
    workload: Workload | None = None,
) -> tuple[Outcome, bool]:
    """Train until solved or out of budget; ``(outcome, run_ok)``, run_ok False if the run failed.

    ``config`` replaces the workload's own config (same task and threshold), for trying settings;
    ``workload`` replaces ``WORKLOADS[algo_env]`` (benchmarks/classic_control.py's tasks)."""
    workload = workload or WORKLOADS[algo_env]
    if config is not None:
        workload = Workload(config, workload.window, workload.threshold)
    options = load_config(workload.config)
    behavior = next(iter(options.env_settings.behavior_names))
    max_steps = options.settings_for(behavior).max_steps
    run_id = f"{algo_env}-seed{seed}"
    run_dir = results_dir / run_id
    train_log = results_dir / "train.log"
    command = [
        *stepstream_command(),
        "train",
        str(workload.config),
        "--run-id",
        run_id,
        "--results-dir",
        str(results_dir),
        "--seed",
        str(seed),
        "--no-progress",
        "--force",
    ]
    log.info("%s seed %d: budget %d steps or %.0f s; load average %s", algo_env, seed, max_steps, wall_limit_s, _load())
    log.info("running %s (output in %s)", " ".join(command), train_log)
    with open(train_log, "wb") as out:
        launched = time.time()
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        outcome = watch(proc, run_dir / behavior / "episodes.csv", workload, launched, wall_limit_s, poll_s)
    finally:
        returncode = stop(proc)
    ended = time.time() - launched
    outcome.imports_s = imports_seconds(train_log)
    if not outcome.solved:
        outcome.steps = final_steps(run_dir, behavior) or outcome.steps
        outcome.wall_s = ended
    run_ok = returncode in (0, 130)
    if not run_ok:
        tail = train_log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
        log.error("the run failed (exit %d); the end of %s:\n%s", returncode, train_log, "\n".join(tail))
    log.info(
        "%s after %d steps, %.1f s (%d episodes, mean of the last %d %.1f); run exit %d after %.1f s; load average %s",
        "solved" if outcome.solved else "not solved",
        outcome.steps,
        outcome.wall_s,
        outcome.episodes,
        workload.window,
        outcome.window_mean,
        returncode,
        ended,
        _load(),
    )
    return outcome, run_ok


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algo_env", choices=sorted(WORKLOADS))
    parser.add_argument("seed", nargs="?", type=int, default=0)
    parser.add_argument("--wall-limit-s", type=float, default=1800.0, help="stop unsolved after this (default 1800)")
    parser.add_argument("--results-dir", type=Path, help="keep the run here (default: a temporary folder, deleted)")
    parser.add_argument("--poll-s", type=float, default=0.1, help="how often episodes.csv is read (default 0.1)")
    parser.add_argument("--config", type=Path, help="another config for the same task (default: the workload's own)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.results_dir is not None:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        outcome, run_ok = run(
            args.algo_env, args.seed, args.results_dir.resolve(), args.wall_limit_s, args.poll_s, args.config
        )
    else:
        with tempfile.TemporaryDirectory(prefix="stepstream-tts-") as tmp:
            outcome, run_ok = run(args.algo_env, args.seed, Path(tmp), args.wall_limit_s, args.poll_s, args.config)
    after_imports = outcome.wall_s_after_imports
    result = {
        "algo_env": args.algo_env,
        "solved": outcome.solved,
        "steps": outcome.steps,
        "wall_s": round(outcome.wall_s, 2),
        "wall_s_after_imports": None if after_imports is None else round(after_imports, 2),
    }
    print(json.dumps(result))
    return 0 if run_ok else 1


if __name__ == "__main__":
    sys.exit(main())
