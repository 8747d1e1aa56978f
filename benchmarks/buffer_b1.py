"""Workload B1 (../shared/yardsticks/README.md): update-buffer operations on our AgentBuffer.

Mirrors ``../shared/yardsticks/mlagents_b1.py`` op for op. Built before the clock starts: N / 64
per-trajectory AgentBuffers of 64 steps with the fields ``obs_0`` float32 [32],
``continuous_actions`` float32 [4], ``continuous_log_probs`` float32 [4], ``rewards``, ``done``,
``advantages`` and ``returns`` (float32 [] except ``done``, bool []). Then, timed in ms, on one
update buffer and in the peer's order:

    fill: the batched drain, as a trainer draining its queue would: every trajectory at once
        through ``AgentBuffer.extend_rows_many`` (one concatenate per field, straight into the
        update buffer's storage);
    fill_one_at_a_time: (extra) the peer's way, ``resequence_and_append(training_length=1)``
        once per trajectory;
    shuffle: ``shuffle(sequence_length=1)``;
    make_mini_batch_all: ``make_mini_batch`` over the whole buffer in slices of 256 (read-only
        views of the shuffled rows, no copy: the peer slices its lists of rows);
    sample_mini_batch_x100: 100 x ``sample_mini_batch(256, 1)``;
    get_batch_seq16: ``get_batch(training_length=16)`` of every field;
    hdf5_roundtrip: ``save_to_file`` then ``load_from_file`` through an in-memory ``io.BytesIO``;
    truncate: ``truncate(N // 2)``.

Timing, honestly: the peer times every op once. We run each op ``--repeats`` times and report the
minimum in ``ms``, and our first run of each op in ``ms_single_run`` (the figure to put beside the
peer's single run). The first run pays one-off costs: fresh storage's first-touch page faults
(``fill``: they cost more than the copy itself), h5py's first
file. The minimum is the steady state of a trainer, which refills its update buffer every update
cycle: each ``fill`` repeat fills a brand-new AgentBuffer, but the process's allocator hands back
memory the previous repeat freed. ``fill`` runs first, so its single run is the process's first
fill. Each ``truncate`` repeat truncates a fresh full copy (``extend_rows`` of every field, before
the clock starts); the other ops repeat on the one filled buffer, which the peer's single run
also uses.

Before the timed ops, the batched and the one-at-a-time fills are checked to give identical
buffers.

usage: buffer_b1.py [N=20480] [--repeats 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import time
from collections.abc import Callable

import numpy as np

from common.buffer import AgentBuffer

log = logging.getLogger("benchmarks.buffer_b1")

TRAJECTORY_LENGTH = 64
MINI_BATCH = 256
SAMPLES = 100
SEQUENCE_LENGTH = 16


def make_trajectories(n: int, seed: int = 0) -> list[AgentBuffer]:
    """The N / 64 per-trajectory AgentBuffers of B1: the peer's fields, shapes and dtypes, standard-normal values."""
    rng = np.random.default_rng(seed)
    trajectories = []
    for _ in range(n // TRAJECTORY_LENGTH):
        steps = TRAJECTORY_LENGTH
        buffer = AgentBuffer()
        buffer["obs_0"].extend(rng.standard_normal((steps, 32), dtype=np.float32))
        buffer["continuous_actions"].extend(rng.standard_normal((steps, 4), dtype=np.float32))
        buffer["continuous_log_probs"].extend(rng.standard_normal((steps, 4), dtype=np.float32))
        buffer["rewards"].extend(rng.standard_normal(steps, dtype=np.float32))
        buffer["done"].extend(np.zeros(steps, dtype=bool))
        buffer["advantages"].extend(rng.standard_normal(steps, dtype=np.float32))
        buffer["returns"].extend(rng.standard_normal(steps, dtype=np.float32))
        trajectories.append(buffer)
    return trajectories


def fill_batched(trajectories: list[AgentBuffer]) -> AgentBuffer:
    """A new update buffer holding every trajectory, appended in one batched drain."""
    update_buffer = AgentBuffer()
    update_buffer.extend_rows_many(trajectories)
    return update_buffer


def fill_one_at_a_time(trajectories: list[AgentBuffer]) -> AgentBuffer:
    """A new update buffer holding every trajectory, appended one trajectory at a time (the peer's way)."""
    update_buffer = AgentBuffer()
    for trajectory in trajectories:
        trajectory.resequence_and_append(update_buffer, training_length=1)
    return update_buffer


def check_same(a: AgentBuffer, b: AgentBuffer) -> None:
    """Raise if two buffers differ in keys, dtypes, shapes or values."""
    if list(a) != list(b):
        raise AssertionError(f"keys differ: {list(a)} != {list(b)}")
    for key in a:
        x, y = a[key].data, b[key].data
        if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y):
            raise AssertionError(f"field {key!r} differs between the batched and the one-at-a-time fill")


class Timer:
    """Runs each op ``repeats`` times; keeps the first run and the minimum, in ms."""

    def __init__(self, repeats: int) -> None:
        self.repeats = repeats
        self.single_ms: dict[str, float] = {}
        self.best_ms: dict[str, float] = {}

    def time(self, name: str, op: Callable[[], object], prepare: Callable[[], None] | None = None) -> None:
        """Time ``op``; ``prepare`` runs untimed before each repetition."""
        runs = []
        for _ in range(self.repeats):
            if prepare is not None:
                prepare()
            start = time.perf_counter()
            op()
            runs.append((time.perf_counter() - start) * 1e3)
        self.single_ms[name] = runs[0]
        self.best_ms[name] = min(runs)


def run(n: int, repeats: int, seed: int) -> dict[str, object]:
    """All B1 ops; returns the JSON record."""
    trajectories = make_trajectories(n, seed)
    n = len(trajectories) * TRAJECTORY_LENGTH
    timer = Timer(repeats)
    filled: list[AgentBuffer] = []
    # Keep only the latest buffer alive, as a trainer would between update cycles.
    timer.time("fill", lambda: filled.append(fill_batched(trajectories)), prepare=filled.clear)
    buffer = filled[0]
    timer.time("fill_one_at_a_time", lambda: fill_one_at_a_time(trajectories))
    check_same(buffer, fill_one_at_a_time(trajectories))

    timer.time("shuffle", lambda: buffer.shuffle(sequence_length=1))

    def make_mini_batch_all() -> None:
        for start in range(0, n, MINI_BATCH):
            buffer.make_mini_batch(start, start + MINI_BATCH)

    timer.time("make_mini_batch_all", make_mini_batch_all)

    def sample_mini_batch_x100() -> None:
        for _ in range(SAMPLES):
            buffer.sample_mini_batch(MINI_BATCH, 1)

    timer.time("sample_mini_batch_x100", sample_mini_batch_x100)

    def get_batch_seq16() -> None:
        for key in list(buffer.keys()):
            buffer[key].get_batch(training_length=SEQUENCE_LENGTH)

    timer.time("get_batch_seq16", get_batch_seq16)

    def hdf5_roundtrip() -> None:
        file = io.BytesIO()
        buffer.save_to_file(file)
        file.seek(0)
        AgentBuffer().load_from_file(file)

    timer.time("hdf5_roundtrip", hdf5_roundtrip)

    victims: list[AgentBuffer] = []

    def fresh_copy() -> None:
        victims[:] = [AgentBuffer()]
        victims[0].extend_rows({key: field.data for key, field in buffer.items()})

    timer.time("truncate", lambda: victims[0].truncate(n // 2), prepare=fresh_copy)
    if victims[0].num_experiences != n // 2:
        raise AssertionError(f"truncate kept {victims[0].num_experiences} rows, not {n // 2}")

    return {
        "workload": "B1",
        "n": n,
        "fill_mode": "batched",
        "repeats": repeats,
        "ms": {k: round(v, 3) for k, v in timer.best_ms.items()},
        "ms_single_run": {k: round(v, 3) for k, v in timer.single_ms.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int, nargs="?", default=20480, help="experiences (a multiple of 64)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per op; 'ms' is their minimum")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.n < TRAJECTORY_LENGTH or args.repeats < 1:
        parser.error("n must be >= 64 and --repeats >= 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    record = run(args.n, args.repeats, args.seed)
    for label, figures in ((f"min of {args.repeats}", record["ms"]), ("single run", record["ms_single_run"])):
        assert isinstance(figures, dict)
        log.info(
            "stepstream AgentBuffer B1 N=%d (%s): %s",
            record["n"],
            label,
            ", ".join(f"{k}={v:.3f}ms" for k, v in figures.items()),
        )
    print(json.dumps(record))


if __name__ == "__main__":
    main()
