"""The soak's behavior, its policy and its processor process, shared by ``soak.py`` and ``hostile.py``.

The behavior: observations of W1 (32 float32), 4 continuous actions, time_horizon 64; the policy a real
TensorFlow-made 2x64 MLP exported to TFLite, as ``grpc_g1.py`` makes it. The processor runs as a process of
its own (``stepstream processor``): ``wait_serving`` waits for its health to say SERVING, ``rss_bytes``
reads its memory, ``free_port`` gives it a port.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from tests.ports import PortReservation

OBS_SIZE, ACTION_SIZE, TIME_HORIZON, BEHAVIOR = 32, 4, 64, "Soak"
REPO = Path(__file__).resolve().parents[1]

_MODEL: bytes | None = None
"""The policy's TFLite flatbuffer, built on first use."""


def policy_update(version: int) -> Any:
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


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid``, bytes (0 where its status gives none)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


_PORTS = PortReservation()
"""Held until the process exits: a port probed free and released could be taken by a concurrent test's server."""


def free_port() -> int:
    """A loopback port no other test or benchmark of this machine takes meanwhile."""
    return _PORTS.port()


def wait_serving(address: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Wait until the processor at ``address`` (``process``) says SERVING; an error if it exits or takes longer."""
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
