"""What a pixel policy costs the processor: milliseconds per inference pass at 84x84x3, batches 1, 32 and 256.

The workload (issue 19, point 3): PPO's policy network for one uint8 RGB camera ``[N, 84, 84, 3]`` encoded by
``nature_cnn`` (``network_settings.vis_encode_type``; ``trainer.encoders``), then the MLP body
(``hidden_units`` 128 x ``num_layers`` 2, ML-Agents' defaults) and one discrete branch of 5 options,
exported by ``trainer.export.TFLiteExporter`` exactly as a trainer publishes it. Timed per batch size N:

* ``forward_ms``: ``processor.inference.Policy.forward``, the LiteRT pass the processor runs (uint8 frames go
  in as they are; the model scales them), with the processor's threads: one, or ``WIDE_THREADS`` for a batch of
  ``WIDE_BATCH_VALUES`` values or more (``threads`` says which);
* ``forward_1thread_ms``: the same pass always on one thread (``wide_threads=1``, the processor before), timed in
  rounds alternating with ``forward_ms``'s, so both see the same load;
* ``act_ms``: ``Policy.act``, the pass plus masking and sampling;
* ``tf_function_ms``: the same network under a ``tf.function`` in TensorFlow (all cores), for comparison;

each the median of ``--rounds`` rounds of at least ``--min-seconds`` (after a warm-up call), with
``per_row_us`` = forward_ms / N. Also the export's first and patched costs and the artifact's size.
Human lines go to the log; the last line on stdout is one JSON object.

    .venv/bin/python -m benchmarks.inference_pixels [--batches 1,32,256] [--encoder nature_cnn]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from common.config import EncoderType
from common.specs import ActionSpec, ObservationSpec
from processor.inference import WIDE_BATCH_VALUES, WIDE_THREADS, Policy
from protos import pb
from trainer.encoders import ObservationEncoder
from trainer.export import TFLiteExporter, make_policy_update
from trainer.networks import PolicyNetwork

logger = logging.getLogger("benchmarks.inference_pixels")

FRAME = (84, 84, 3)
HIDDEN_UNITS, NUM_LAYERS = 128, 2
BRANCHES = (5,)


def seconds_per_call(fn: Callable[[], Any], rounds: int, min_seconds: float) -> float:
    """Median over ``rounds`` of the mean seconds per call in a round of at least ``min_seconds``."""
    fn()
    medians = []
    for _ in range(rounds):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds and calls >= 2:
                break
        medians.append(elapsed / calls)
    return statistics.median(medians)


def alternating_seconds_per_call(fns: list[Callable[[], Any]], rounds: int, min_seconds: float) -> list[float]:
    """``seconds_per_call`` of each of ``fns``, their rounds interleaved (A B A B ...): one median per function."""
    per_round = [[seconds_per_call(fn, 1, min_seconds) for fn in fns] for _ in range(rounds)]
    return [statistics.median(times[k] for times in per_round) for k in range(len(fns))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,32,256", help="comma-separated batch sizes N")
    parser.add_argument("--encoder", default=EncoderType.NATURE_CNN.value, choices=[e.value for e in EncoderType])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.5, help="least wall time of one timing round")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    batches = [int(b) for b in args.batches.split(",")]
    encoder_type = EncoderType(args.encoder)

    specs = [ObservationSpec(FRAME, np.dtype(np.uint8), "camera")]
    action_spec = ActionSpec(0, BRANCHES)
    encoder = ObservationEncoder(specs, encoder_type, HIDDEN_UNITS)
    network = PolicyNetwork([0], action_spec, HIDDEN_UNITS, NUM_LAYERS, encoder=encoder)
    exporter = TFLiteExporter(network, [FRAME], observation_dtypes=[np.uint8])
    start = time.perf_counter()
    model = exporter.export()
    export_first_s = time.perf_counter() - start
    start = time.perf_counter()
    model = exporter.export()
    export_patched_ms = (time.perf_counter() - start) * 1e3
    update = make_policy_update("Pixels", 1, 0, model, pb.ActionSpec(discrete_branches=BRANCHES))
    policy = Policy.from_update(update)
    one_thread = Policy.from_update(update, wide_threads=1)
    serve = tf.function(network, input_signature=[tf.TensorSpec([None, *FRAME], tf.uint8)], autograph=False)

    rng = np.random.default_rng(0)
    result: dict[str, Any] = {
        "encoder": encoder_type.value,
        "frame": list(FRAME),
        "cores": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
        "model_bytes": len(model),
        "export_first_s": round(export_first_s, 3),
        "export_patched_ms": round(export_patched_ms, 3),
        "patches_weights": exporter.patches_weights,
    }
    for n in batches:
        frames = [rng.integers(0, 256, (n, *FRAME)).astype(np.uint8)]
        tensor = tf.constant(frames[0])

        def forward_pass(frames: list[np.ndarray] = frames) -> object:
            return policy.forward(frames)

        def one_thread_pass(frames: list[np.ndarray] = frames) -> object:
            return one_thread.forward(frames)

        def act_pass(frames: list[np.ndarray] = frames) -> object:
            return policy.act(frames, None, rng, check=False)

        def tf_pass(tensor: tf.Tensor = tensor) -> object:
            return serve(tensor)["logits"].numpy()

        forward, forward_1thread = alternating_seconds_per_call([forward_pass, one_thread_pass], args.rounds, args.min_seconds)
        act = seconds_per_call(act_pass, args.rounds, args.min_seconds)
        tf_time = seconds_per_call(tf_pass, args.rounds, args.min_seconds)
        result[f"n{n}"] = {
            "forward_ms": round(forward * 1e3, 3),
            "per_row_us": round(forward * 1e6 / n, 1),
            "threads": WIDE_THREADS if n * math.prod(FRAME) >= WIDE_BATCH_VALUES else 1,
            "forward_1thread_ms": round(forward_1thread * 1e3, 3),
            "act_ms": round(act * 1e3, 3),
            "tf_function_ms": round(tf_time * 1e3, 3),
        }
        logger.info("N=%d: %s", n, result[f"n{n}"])
    result["load_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
