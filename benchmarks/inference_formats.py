"""Which artifact format and runtime the processor should act with: microseconds per forward pass.

The workload: a 2x64 tanh MLP policy, obs float32 [N, 32] -> mean [N, 4] + log_std [N, 4]
(continuous) and a variant with logits [N, 5] (discrete, branches 3 + 2), at N = 1, 32, 256.

Runtimes timed, each returning numpy outputs:

* ``tf_function``: the Keras model under a ``tf.function`` with an input signature, numpy in;
* ``litert_signature_runner``: the TFLite flatbuffer (``trainer.export``) through LiteRT's
  ``SignatureRunner`` (which resizes and reallocates on every call);
* ``litert_direct``: one LiteRT ``Interpreter`` allocated for N, ``set_tensor`` / ``invoke`` /
  ``get_tensor``; ``_1thread`` with ``num_threads=1``;
* ``litert_view``: the same through the zero-copy ``tensor()`` views (write input, copy outputs);
* ``litert_resize``: ``resize_tensor_input`` + ``allocate_tensors`` before each call (what a
  single interpreter pays when the batch size changes), and the resize + allocate alone;
* ``tf_lite_interpreter``: the deprecated ``tf.lite.Interpreter``, direct;
* ``numpy_mlp``: the same maths in numpy, as a floor;
* ``policy_act``: ``processor.inference.Policy.act`` end to end (normalisation, forward,
  sampling, log-probs);
* ``batcher_n32``: ``processor.batching.InferenceBatcher.act`` round trips (32 rows per request)
  for 1 and 8 concurrent sessions under each flush rule (round trip = wall time / calls per
  session, so with 8 sessions it is the time for all 8 to get one answer each);

plus the one-off costs: export (trace + freeze + convert) in seconds and interpreter creation in
milliseconds. Human lines go to the log; the last line on stdout is one JSON object.

    .venv/bin/python -m benchmarks.inference_formats [--calls 400] [--batches 1,32,256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from common.policy_contract import LOG_STD, LOGITS, MEAN, input_name
from processor.batching import InferenceBatcher
from processor.inference import Policy
from protos import pb
from trainer.export import TFLiteExporter, make_policy_update, normalizer_state

logger = logging.getLogger("benchmarks.inference_formats")

OBS_SIZE = 32
HIDDEN = 64
CONTINUOUS = 4
BRANCHES = (3, 2)


def build_model(discrete: bool, seed: int) -> keras.Model:
    """The 2x64 tanh MLP: obs [N, 32] -> {"mean", "log_std"} [N, 4] or {"logits"} [N, 5]."""
    keras.utils.set_random_seed(seed)
    obs = keras.Input((OBS_SIZE,), name=input_name(0))
    h = keras.layers.Dense(HIDDEN, activation="tanh")(obs)
    h = keras.layers.Dense(HIDDEN, activation="tanh")(h)
    if discrete:
        outputs = {LOGITS: keras.layers.Dense(sum(BRANCHES))(h)}
    else:
        outputs = {MEAN: keras.layers.Dense(CONTINUOUS)(h), LOG_STD: keras.layers.Dense(CONTINUOUS)(h)}
    return keras.Model(obs, outputs)


def time_per_call_us(fn: Callable[[], Any], calls: int, rounds: int = 7) -> float:
    """The fastest of ``rounds`` mean times of ``calls`` back-to-back calls, in microseconds.

    The minimum, as ``timeit`` advises: on a shared 2-core machine slower rounds measure the
    neighbours, not the code.
    """
    for _ in range(max(3, calls // 10)):
        fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return round(min(samples), 2)


def direct_runner(interp: Interpreter, n: int) -> Callable[[np.ndarray], list[np.ndarray]]:
    """set_tensor / invoke / get_tensor on an interpreter allocated once for batch n."""
    inp = interp.get_input_details()[0]["index"]
    outs = [d["index"] for d in interp.get_output_details()]
    interp.resize_tensor_input(inp, [n, OBS_SIZE])
    interp.allocate_tensors()

    def run(x: np.ndarray) -> list[np.ndarray]:
        interp.set_tensor(inp, x)
        interp.invoke()
        return [interp.get_tensor(i) for i in outs]

    return run


def view_runner(interp: Interpreter, n: int) -> Callable[[np.ndarray], list[np.ndarray]]:
    """The zero-copy ``tensor()`` views: write the input in place, copy the outputs out."""
    inp = interp.get_input_details()[0]["index"]
    outs = [d["index"] for d in interp.get_output_details()]
    interp.resize_tensor_input(inp, [n, OBS_SIZE])
    interp.allocate_tensors()
    in_view = interp.tensor(inp)
    out_views = [interp.tensor(i) for i in outs]

    def run(x: np.ndarray) -> list[np.ndarray]:
        in_view()[...] = x
        interp.invoke()
        return [v().copy() for v in out_views]

    return run


def numpy_mlp(model: keras.Model) -> Callable[[np.ndarray], list[np.ndarray]]:
    """The same network in plain numpy (the floor any runtime is compared with)."""
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    (w1, b1), (w2, b2) = (d.get_weights() for d in dense[:2])
    heads = [d.get_weights() for d in dense[2:]]

    def run(x: np.ndarray) -> list[np.ndarray]:
        h = np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2)
        return [h @ w + b for w, b in heads]

    return run


def bench_model(model: keras.Model, model_bytes: bytes, batches: list[int], calls: int) -> dict[str, dict[str, float]]:
    """Per-call microseconds of every runtime for one model, keyed by runtime then batch size."""
    fn = tf.function(model, input_signature=[tf.TensorSpec([None, OBS_SIZE], tf.float32)])
    results: dict[str, dict[str, float]] = {}
    for n in batches:
        for name, us in bench_batch(model, fn, model_bytes, n, calls).items():
            results.setdefault(name, {})[str(n)] = us
            logger.info("%-32s N=%-4d %9.2f us", name, n, us)
    return results


def bench_batch(model: keras.Model, fn: Any, model_bytes: bytes, n: int, calls: int) -> dict[str, float]:
    """Per-call microseconds of every runtime at batch size n."""
    x = np.random.default_rng(n).standard_normal((n, OBS_SIZE), dtype=np.float32)
    out = {"tf_function_us": time_per_call_us(lambda: {k: v.numpy() for k, v in fn(x).items()}, max(calls // 4, 20))}
    runner = Interpreter(model_content=model_bytes).get_signature_runner()
    out["litert_signature_runner_us"] = time_per_call_us(lambda: runner(**{input_name(0): x}), calls)
    for threads, suffix in ((None, ""), (1, "_1thread"), (2, "_2threads")):
        direct = direct_runner(Interpreter(model_content=model_bytes, num_threads=threads), n)
        out[f"litert_direct{suffix}_us"] = time_per_call_us(lambda d=direct: d(x), calls)  # type: ignore[misc]
    view = view_runner(Interpreter(model_content=model_bytes, num_threads=1), n)
    out["litert_view_1thread_us"] = time_per_call_us(lambda: view(x), calls)
    out["litert_resize_1thread_us"] = time_per_call_us(resize_each_call(model_bytes, n, x), calls)
    out["litert_resize_allocate_only_us"] = time_per_call_us(resize_only(model_bytes, n), calls)
    legacy = direct_runner(tf.lite.Interpreter(model_content=model_bytes, num_threads=1), n)  # type: ignore[arg-type]
    out["tf_lite_interpreter_1thread_us"] = time_per_call_us(lambda: legacy(x), calls)
    floor = numpy_mlp(model)
    out["numpy_mlp_us"] = time_per_call_us(lambda: floor(x), calls)
    return out


def resize_each_call(model_bytes: bytes, n: int, x: np.ndarray) -> Callable[[], Any]:
    """A single interpreter whose batch size alternates n+1, n: resize + allocate + run each call."""
    interp = Interpreter(model_content=model_bytes, num_threads=1)
    inp = interp.get_input_details()[0]["index"]
    outs = [d["index"] for d in interp.get_output_details()]
    x_big = np.concatenate([x, x[:1]])
    state = {"flip": False}

    def run() -> list[np.ndarray]:
        arr = x_big if state["flip"] else x
        state["flip"] = not state["flip"]
        interp.resize_tensor_input(inp, list(arr.shape))
        interp.allocate_tensors()
        interp.set_tensor(inp, arr)
        interp.invoke()
        return [interp.get_tensor(i) for i in outs]

    return run


def resize_only(model_bytes: bytes, n: int) -> Callable[[], None]:
    """resize_tensor_input + allocate_tensors alone, alternating between n and n+1 rows."""
    interp = Interpreter(model_content=model_bytes, num_threads=1)
    inp = interp.get_input_details()[0]["index"]
    state = {"flip": False}

    def run() -> None:
        state["flip"] = not state["flip"]
        interp.resize_tensor_input(inp, [n + int(state["flip"]), OBS_SIZE])
        interp.allocate_tensors()

    return run


def bench_policy_act(model_bytes: bytes, discrete: bool, batches: list[int], calls: int) -> dict[str, float]:
    """``Policy.act`` end to end (normalised obs, forward, sampling, log-probs), per call."""
    spec = pb.ActionSpec(discrete_branches=BRANCHES) if discrete else pb.ActionSpec(continuous_size=CONTINUOUS)
    norm = [normalizer_state(np.zeros(OBS_SIZE, np.float32), np.ones(OBS_SIZE, np.float32), 1)]
    policy = Policy.from_update(make_policy_update("bench", 1, 0, model_bytes, spec, norm, clip=3.0))
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    for n in batches:
        obs = [rng.standard_normal((n, OBS_SIZE), dtype=np.float32)]
        mask = np.ones((n, sum(BRANCHES)), np.bool_) if discrete else None
        out[str(n)] = time_per_call_us(lambda o=obs, m=mask: policy.act(o, m, rng), calls)  # type: ignore[misc]
        logger.info("%-32s N=%-4d %9.2f us", "policy_act_us" + (" (discrete)" if discrete else ""), n, out[str(n)])
    return out


async def _batcher_round_trips(policy: Policy, rows: int, calls: int, sessions: int, **settings: Any) -> dict[str, float]:
    """``sessions`` coroutines each awaiting ``act`` ``calls`` times: mean round trip and pass size."""
    active = settings.pop("active_sessions", 0)
    batcher = InferenceBatcher("bench", rng=np.random.default_rng(0), **settings)
    batcher.set_policy(policy)
    batcher.set_active_sessions(active)
    obs = [np.random.default_rng(1).standard_normal((rows, OBS_SIZE), dtype=np.float32)]

    async def session() -> None:
        for _ in range(calls):
            await batcher.act(obs, None)

    start = time.perf_counter()
    await asyncio.gather(*(session() for _ in range(sessions)))
    elapsed = time.perf_counter() - start
    return {
        "round_trip_us": round(elapsed / calls * 1e6, 2),
        "requests_per_pass": round(batcher.counters.requests / batcher.counters.forward_passes, 2),
    }


def bench_batcher(model_bytes: bytes, calls: int, rows: int = 32) -> dict[str, dict[str, float]]:
    """Round trip of ``InferenceBatcher.act`` (N = rows per request) under each flush policy."""
    spec = pb.ActionSpec(continuous_size=CONTINUOUS)
    policy = Policy.from_update(make_policy_update("bench", 1, 0, model_bytes, spec))
    rng = np.random.default_rng(0)
    obs = [rng.standard_normal((rows, OBS_SIZE), dtype=np.float32)]
    results = {"policy_act_alone": {"round_trip_us": time_per_call_us(lambda: policy.act(obs, None, rng), calls)}}
    cases: dict[str, tuple[int, dict[str, Any]]] = {
        "1_session_sessions_aware": (1, {"active_sessions": 1, "deadline_ms": 2.0}),
        "1_session_deadline_0ms": (1, {"deadline_ms": 0.0}),
        "1_session_deadline_2ms": (1, {"deadline_ms": 2.0}),
        "8_sessions_sessions_aware": (8, {"active_sessions": 8, "deadline_ms": 2.0}),
        "8_sessions_deadline_0ms": (8, {"deadline_ms": 0.0}),
        "8_sessions_no_batching": (8, {"max_batch_rows": 1}),
    }
    for name, (sessions, settings) in cases.items():
        n_calls = calls if settings.get("deadline_ms") != 2.0 or settings.get("active_sessions") else max(calls // 20, 10)
        results[name] = asyncio.run(_batcher_round_trips(policy, rows, n_calls, sessions, **settings))
        logger.info("batcher %-28s %s", name, results[name])
    return results


def one_off_costs(model: keras.Model) -> tuple[bytes, dict[str, float]]:
    """Export seconds (first and warm, fresh exporter and reused) and interpreter creation ms."""
    costs: dict[str, float] = {}
    start = time.perf_counter()
    exporter = TFLiteExporter(model, [(OBS_SIZE,)])
    model_bytes = exporter.export()
    costs["export_first_s"] = round(time.perf_counter() - start, 4)
    reused = []
    for _ in range(5):
        start = time.perf_counter()
        model_bytes = exporter.export()
        reused.append(time.perf_counter() - start)
    costs["export_reused_exporter_s"] = round(statistics.median(reused), 4)
    fresh = []
    for _ in range(3):
        start = time.perf_counter()
        TFLiteExporter(model, [(OBS_SIZE,)]).export()
        fresh.append(time.perf_counter() - start)
    costs["export_fresh_exporter_s"] = round(statistics.median(fresh), 4)
    creates = []
    for _ in range(20):
        start = time.perf_counter()
        interp = Interpreter(model_content=model_bytes, num_threads=1)
        interp.allocate_tensors()
        creates.append(time.perf_counter() - start)
    costs["interpreter_create_ms"] = round(statistics.median(creates) * 1e3, 3)
    costs["model_bytes"] = len(model_bytes)
    logger.info("one-off costs: %s", costs)
    return model_bytes, costs


def main(argv: list[str] | None = None) -> None:
    """Runs every runtime on both model variants; prints one JSON line last."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="calls per timing round (7 rounds, fastest kept)")
    parser.add_argument("--batches", default="1,32,256", help="comma-separated batch sizes N")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    batches = [int(b) for b in args.batches.split(",")]

    continuous = build_model(discrete=False, seed=args.seed)
    cont_bytes, costs = one_off_costs(continuous)
    result: dict[str, Any] = {"cores": os.cpu_count(), **costs}
    result.update(bench_model(continuous, cont_bytes, batches, args.calls))
    result["policy_act_us"] = bench_policy_act(cont_bytes, False, batches, args.calls)
    result["batcher_n32"] = bench_batcher(cont_bytes, args.calls)

    discrete = build_model(discrete=True, seed=args.seed + 1)
    disc_bytes = TFLiteExporter(discrete, [(OBS_SIZE,)]).export()
    for name, per_batch in bench_model(discrete, disc_bytes, batches, args.calls).items():
        result[f"discrete_{name}"] = per_batch
    result["discrete_policy_act_us"] = bench_policy_act(disc_bytes, True, batches, args.calls)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
