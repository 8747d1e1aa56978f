"""Soak: many env clients for a fixed time against a real ``stepstream processor`` process, on loopback only.

``--clients`` sessions (default 32) of ``--agents`` agents each (default 16) step for ``--seconds`` (default 60),
spread over ``--client-processes`` processes (default 2), each one asyncio loop speaking the real SDK
(``EnvSession``), as env clients do. The processor is ``stepstream processor`` in a process of its own, with its
metrics endpoint; it acts with a real TensorFlow-produced 2x64 MLP (TFLite artifact, as ``grpc_g1.py``), and a new
policy version is published every ``--policy-every-s`` seconds (PPO's ``max_policy_lag`` 2 applies). A subscriber
on the ``trainer`` queue counts the trajectories it receives (by unique id) and acknowledges them.

Observations are W1's (32 float32), 4 continuous actions, time_horizon 64. Each agent's episode lasts uniform
[50, 300] steps; one in five ends by a time limit (done + max_reached); the same id comes back as a new episode.
At the end every client closes its session, so the processor flushes the partial trajectories.

Conservation is counted by the clients themselves from the rows they sent (docs/architecture.md's rules): an agent's row
is an experience unless it is a first sighting (its first row, or its first after a done row); done rows are
experiences. The processor reports where each went (``stepstream_processor_*`` metrics): published on the topic, or
dropped (``stale``: ``max_policy_lag``; ``unpublished``: the topic stayed full or closed). Flushed experiences (the
partial trajectories of ended sessions) are published or dropped like any other, so they are a part of those two,
reported beside them. ``conserved``: implied == published + dropped, to the single experience, and the subscriber
received every published experience.

Prints one JSON line last: agent_steps_per_s, p50_ms / p99_ms (client round trip of one BrainInfo), peak processor
RSS (MB, sampled every 0.1 s from /proc), and the conservation counts.

usage: soak.py [--clients 32] [--agents 16] [--seconds 60] [--client-processes 2] [--policy-every-s 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

log = logging.getLogger("benchmarks.soak")
OBS_SIZE, ACTION_SIZE, TIME_HORIZON, BEHAVIOR = 32, 4, 64, "Soak"
EPISODE_STEPS = (50, 300)
MAX_REACHED_FRACTION = 0.2
START_DELAY_S = 5.0
"""Time the client processes get to import and connect before the clock starts."""
DRAIN_TIMEOUT_S = 60.0
RSS_POLL_S = 0.1
REPO = Path(__file__).resolve().parents[1]
CONFIG = f"""
behaviors:
  {BEHAVIOR}:
    trainer_type: ppo
    time_horizon: {TIME_HORIZON}
"""


class ClientResult(NamedTuple):
    """What one client measured: round trips (s), rows sent, experiences implied, its timed window (perf_counter)."""

    round_trips_s: list[float]
    rows: int
    implied_experiences: int
    window_start: float
    window_end: float


def _brain_parameters() -> Any:
    from common.specs import ActionSpec, BrainParameters, ObservationSpec

    return BrainParameters(BEHAVIOR, (ObservationSpec((OBS_SIZE,), np.dtype(np.float32)),), ActionSpec(ACTION_SIZE))


async def _client(address: str, index: int, agents: int, start_at: float, stop_at: float) -> ClientResult:
    """One env client session, stepping from ``start_at`` to ``stop_at`` (epoch seconds), then closing cleanly."""
    from envclient import EnvSession
    from envclient.session import brain_info_message

    rng = np.random.default_rng(index)
    ids = np.arange(agents, dtype=np.int64)
    obs = rng.standard_normal((64, agents, OBS_SIZE), dtype=np.float32)
    rewards = rng.standard_normal((64, agents)).astype(np.float32)
    left = rng.integers(*EPISODE_STEPS, endpoint=True, size=agents)
    truncates = rng.random(agents) < MAX_REACHED_FRACTION
    seen = np.zeros(agents, bool)
    timings: list[float] = []
    rows = implied = 0
    async with EnvSession(address, f"soak-{index}", [_brain_parameters()]) as session:
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        window_start = time.perf_counter()
        t = 0
        while time.time() < stop_at:
            done = left <= 0
            message = brain_info_message(BEHAVIOR, ids, [obs[t % 64]], rewards[t % 64], done, done & truncates)
            implied += int(seen.sum())  # a row of an agent seen since its last done is an experience
            seen = ~done  # after a done row the agent's next row is a first sighting
            rows += agents
            left = np.where(done, rng.integers(*EPISODE_STEPS, endpoint=True, size=agents), left - 1)
            truncates = np.where(done, rng.random(agents) < MAX_REACHED_FRACTION, truncates)
            started = time.perf_counter()
            await session.send(message)
            timings.append(time.perf_counter() - started)
            t += 1
        window_end = time.perf_counter()
    return ClientResult(timings, rows, implied, window_start, window_end)


def _client_process(address: str, first: int, count: int, agents: int, start_at: float, stop_at: float, out: Any) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    async def run_all() -> list[ClientResult]:
        return await asyncio.gather(*[_client(address, first + i, agents, start_at, stop_at) for i in range(count)])

    out.put([tuple(r) for r in asyncio.run(run_all())])


_MODEL: bytes | None = None
"""The policy's TFLite flatbuffer, built on first use."""


def _policy_update(version: int) -> Any:
    """A real 2x64 MLP policy (TFLite), as ``grpc_g1.py`` makes it; built once, restamped per version."""
    global _MODEL
    from common.specs import ActionSpec
    from trainer.export import TFLiteExporter, make_policy_update

    if _MODEL is None:
        import tensorflow as tf

        from trainer.networks import PolicyNetwork

        tf.random.set_seed(0)
        network = PolicyNetwork([OBS_SIZE], ActionSpec(ACTION_SIZE), hidden_units=64, num_layers=2)
        _MODEL = TFLiteExporter(network, [(OBS_SIZE,)]).export()
    return make_policy_update(BEHAVIOR, version, 0, _MODEL, ActionSpec(ACTION_SIZE).to_proto())


class CountingSubscriber:
    """The ``trainer`` queue's subscriber: counts unique trajectories and their experiences, and acks each batch."""

    def __init__(self, address: str) -> None:
        from common.topics.grpc_transport import GrpcTrajectorySubscription

        self.trajectories = self.experiences = self.duplicates = 0
        self._ids: set[tuple[str, int, int]] = set()
        self._stop = threading.Event()
        self._subscription = GrpcTrajectorySubscription(address, BEHAVIOR, "trainer")
        self._thread = threading.Thread(target=self._run, name="soak-subscriber", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            deliveries = self._subscription.get(1024, 0.1)
            for delivery in deliveries:
                key = (delivery.item.id.session_id, delivery.item.id.agent_id, delivery.item.id.sequence)
                if key in self._ids:
                    self.duplicates += 1
                    continue
                self._ids.add(key)
                self.trajectories += 1
                self.experiences += delivery.item.length
            self._subscription.ack([d.tag for d in deliveries])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10.0)
        self._subscription.detach()


class RssSampler:
    """Peak resident set size of a process, sampled every ``RSS_POLL_S`` from ``/proc/<pid>/status``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = Path(f"/proc/{self.pid}/status").read_text(encoding="utf-8")
            except OSError:
                return
            for line in text.splitlines():
                if line.startswith("VmRSS:"):
                    self.peak_bytes = max(self.peak_bytes, int(line.split()[1]) * 1024)
            self._stop.wait(RSS_POLL_S)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5.0) as reply:
        text = reply.read().decode("utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> int:
    """Sum of the samples ``stepstream_processor_<name>`` whose labels include ``labels`` (0 if none)."""
    full = f"stepstream_processor_{name}"
    return int(sum(v for (n, ls), v in samples.items() if n == full and set(labels.items()) <= set(ls)))


def _wait_serving(address: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the processor exited with {process.returncode}")
        with grpc.insecure_channel(address) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
        time.sleep(0.2)
    raise TimeoutError(f"the processor at {address} did not serve within {timeout_s} s")


def _run_clients(args: argparse.Namespace, address: str, publish: Any) -> list[ClientResult]:
    """Start the client processes, publish a new policy version every ``--policy-every-s`` while they run."""
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    start_at = time.time() + START_DELAY_S
    stop_at = start_at + args.seconds
    processes, first = [], 0
    for p in range(args.client_processes):
        count = args.clients // args.client_processes + (p < args.clients % args.client_processes)
        child = ctx.Process(target=_client_process, args=(address, first, count, args.agents, start_at, stop_at, out))
        child.start()
        processes.append(child)
        first += count
    version = 1
    next_policy = start_at + args.policy_every_s
    while time.time() < stop_at:
        time.sleep(min(0.2, max(0.0, next_policy - time.time())))
        if time.time() >= next_policy:
            version += 1
            publish(version)
            next_policy += args.policy_every_s
    results = [ClientResult(*r) for _ in processes for r in out.get()]
    for child in processes:
        child.join()
    return results


def soak(args: argparse.Namespace) -> dict[str, Any]:
    from common.topics.grpc_transport import GrpcPolicyPublisher

    port, metrics_port = _free_port(), _free_port()
    address = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        config = Path(tmp) / "soak.yaml"
        config.write_text(CONFIG, encoding="utf-8")
        command = [sys.executable, "-m", "cli.main", "--log-level", "WARNING", "processor", str(config)]
        command += ["--port", str(port), "--metrics-port", str(metrics_port), "--grace-s", "10"]
        with open(Path(tmp) / "processor.log", "wb") as log_file:
            processor = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            _wait_serving(address, processor)
            rss = RssSampler(processor.pid)
            with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
                publisher.publish(_policy_update(1), 1)
                subscriber = CountingSubscriber(address)
                results = _run_clients(args, address, lambda v: publisher.publish(_policy_update(v), v))
            # Every session is closed (flushed); wait until the subscriber has taken everything published.
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while True:
                samples = _scrape(metrics_port)
                settled = _metric(samples, "sessions") == 0 and subscriber.experiences == _metric(
                    samples, "experiences_published_total"
                )
                if settled or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            subscriber.close()
            rss.close()
        finally:
            processor.send_signal(signal.SIGTERM)
            try:
                processor.wait(30.0)
            except subprocess.TimeoutExpired:
                processor.kill()
                processor.wait()
    timings = np.concatenate([np.asarray(r.round_trips_s) for r in results])
    wall = max(r.window_end for r in results) - min(r.window_start for r in results)
    implied = sum(r.implied_experiences for r in results)
    published = _metric(samples, "experiences_published_total")
    dropped = _metric(samples, "experiences_dropped_total")
    return {
        "agent_steps_per_s": sum(r.rows for r in results) / wall,
        "p50_ms": float(np.percentile(timings, 50) * 1e3),
        "p99_ms": float(np.percentile(timings, 99) * 1e3),
        "peak_processor_rss_mb": rss.peak_bytes / 2**20,
        "agent_steps": sum(r.rows for r in results),
        "experiences_implied": implied,
        "experiences_accounted": published + dropped,
        "experiences_published": published,
        "experiences_dropped_stale": _metric(samples, "experiences_dropped_total", reason="stale"),
        "experiences_dropped_unpublished": _metric(samples, "experiences_dropped_total", reason="unpublished"),
        "experiences_flushed": _metric(samples, "experiences_flushed_total"),
        "experiences_received": subscriber.experiences,
        "trajectories_received": subscriber.trajectories,
        "duplicates_received": subscriber.duplicates,
        "queue_dropped": _metric(samples, "queue_dropped_total"),
        "policy_versions": _metric(samples, "policy_updates_total"),
        "conserved": implied == published + dropped and subscriber.experiences == published,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32, help="env-client sessions")
    parser.add_argument("--agents", type=int, default=16, help="agents per session")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the clients step")
    parser.add_argument("--client-processes", type=int, default=2, help="processes the sessions are spread over")
    parser.add_argument("--policy-every-s", type=float, default=10.0, help="seconds between new policy versions")
    args = parser.parse_args()
    if not 1 <= args.client_processes <= args.clients:
        parser.error("--client-processes must be between 1 and --clients")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    figures = soak(args)
    logging.getLogger().setLevel(logging.INFO)
    log.info(
        "soak K=%d A=%d %.0f s: %.0f agent-steps/s, p50 %.2f ms, p99 %.2f ms, peak processor RSS %.0f MB; "
        "implied %d, published %d + dropped %d, flushed %d, received %d: conserved %s",
        args.clients,
        args.agents,
        args.seconds,
        figures["agent_steps_per_s"],
        figures["p50_ms"],
        figures["p99_ms"],
        figures["peak_processor_rss_mb"],
        figures["experiences_implied"],
        figures["experiences_published"],
        figures["experiences_accounted"] - figures["experiences_published"],
        figures["experiences_flushed"],
        figures["experiences_received"],
        figures["conserved"],
    )
    rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
    print(json.dumps({"workload": "soak", "clients": args.clients, "agents": args.agents, "seconds": args.seconds, **rounded}))


if __name__ == "__main__":
    main()
