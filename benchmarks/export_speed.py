"""How long a trainer's ``export_policy`` spends in ``TFLiteExporter.export``: full conversion vs weight patching.

The workload: ``trainer.networks.PolicyNetwork``, a 2x64 swish MLP on obs float32 [N, 8], continuous
(C = 2, PPO's state-independent log_std) and discrete (branches 3 + 2). Between exports the weights
change, as after a trainer update. Timed per network, in milliseconds:

* ``full_ms``: a full conversion (freeze + convert), ``TFLiteExporter(..., patch_weights=False)``;
* ``first_ms``: the patching exporter's first export (three probe conversions, slot search, check);
* ``patched_ms``: a later export without the periodic check (``verify_every=0``): read the variables,
  patch, copy out;
* ``patched_amortized_ms``: later exports with the default check every ``VERIFY_EVERY`` exports;
* ``check_ms``: one check (LiteRT vs the TF forward on fixed random observations).

Human lines go to the log; stdout gets one JSON line.

    .venv/bin/python -m benchmarks.export_speed [--full 10] [--patched 2000]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from common.specs import ActionSpec
from trainer.export import VERIFY_EVERY, TFLiteExporter
from trainer.networks import PolicyNetwork

logger = logging.getLogger("benchmarks.export_speed")

OBS_SIZE = 8
NETWORKS = {"continuous": ActionSpec(2), "discrete": ActionSpec(0, (3, 2))}


def _ms_per_call(fn: Callable[[], object], calls: int, between: Callable[[], None]) -> float:
    """Median milliseconds of ``fn`` over ``calls``, ``between`` (untimed) before each."""
    times = []
    for _ in range(calls):
        between()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _mean_ms(fn: Callable[[], object], calls: int, between: Callable[[], None]) -> float:
    """Mean milliseconds of ``fn`` (periodic costs included), ``between`` (untimed) before each."""
    total = 0.0
    for _ in range(calls):
        between()
        start = time.perf_counter()
        fn()
        total += time.perf_counter() - start
    return 1e3 * total / calls


def measure(action_spec: ActionSpec, full_calls: int, patched_calls: int) -> dict[str, float]:
    """The timings above for one network."""
    net = PolicyNetwork([OBS_SIZE], action_spec, hidden_units=64, num_layers=2)
    rng = np.random.default_rng(0)
    variables = net.trainable_variables

    def update() -> None:  # what a trainer update does to the weights, untimed
        for v in variables:
            v.assign_add(rng.normal(0.0, 1e-3, v.shape).astype(np.float32))

    shapes = [(OBS_SIZE,)]
    full = TFLiteExporter(net, shapes, patch_weights=False)
    full.export()  # trace once, as a trainer's exporter does
    result = {"full_ms": _ms_per_call(full.export, full_calls, update)}
    unchecked, checked = TFLiteExporter(net, shapes, verify_every=0), TFLiteExporter(net, shapes)
    start = time.perf_counter()
    unchecked.export()
    result["first_ms"] = 1e3 * (time.perf_counter() - start)
    checked.export()
    result["patched_ms"] = _ms_per_call(unchecked.export, patched_calls, update)
    result["patched_amortized_ms"] = _mean_ms(checked.export, patched_calls, update)
    model = unchecked.export()
    result["check_ms"] = _ms_per_call(lambda: unchecked._check(model), 50, lambda: None)
    if not (unchecked.patches_weights and checked.patches_weights):
        raise RuntimeError("the exporter fell back to full conversion; see the warning above")
    return {k: round(v, 4) for k, v in result.items()}


def main(argv: list[str] | None = None) -> None:
    """Runs the benchmark and prints one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", type=int, default=10, help="full conversions timed per network")
    parser.add_argument("--patched", type=int, default=2000, help="patched exports timed per network")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    result: dict[str, object] = {"network": f"PolicyNetwork 2x64, obs [N, {OBS_SIZE}]", "verify_every": VERIFY_EVERY}
    result["tf_version"] = tf.__version__
    for name, spec in NETWORKS.items():
        result[name] = timings = measure(spec, args.full, args.patched)
        logger.info("%s: %s (%.0fx)", name, timings, timings["full_ms"] / timings["patched_ms"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
