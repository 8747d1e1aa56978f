"""A finished run ends: the trainer's ``FinishTraining`` reaches the processor, which ends its env clients.

* **in process**: a real processor on loopback; an env client blocked on a full trajectory queue (no
  trainer takes anything) is released when ``FinishTraining`` arrives, its session ends with
  ``TRAINING_FINISHED_STATUS`` and the client's ``run`` returns (no reconnect); a client that connects
  afterwards, and ``stepstream env`` as a subprocess, are told the same at Hello and end (exit 0). The
  processor, started without ``--exit-when-finished``, serves on; a new trainer subscription reopens
  the behavior.
* **three local processes**: ``stepstream processor --exit-when-finished``, ``stepstream trainer``
  with a tiny ``max_steps`` on ``simple:discrete`` and ``stepstream env`` all exit 0 by themselves,
  each with its "finished" line.

Liveness bounds are generous; no speed is asserted.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from pathlib import Path

import pytest

from common.topics.grpc_status import TRAINING_FINISHED_STATUS
from common.topics.grpc_transport import GrpcPolicyPublisher
from envclient.reconnect import RETRYABLE_STATUSES, ReconnectingEnvClient
from envclient.simple_env import SimpleEnv
from processor.behaviors import BehaviorRuntime
from protos import pb
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import SUBSCRIBER, itest_settings, policy_update, wait_until
from tests.integration.test_stack import STOP_TIMEOUT_S, Stack, _stepstream, serving
from tests.ports import PortReservation

BEHAVIOR = "Simple1D"
RUN_TIMEOUT_S = 240.0
"""Bound on the whole local run: TensorFlow's import, a few PPO updates, and every process's exit."""

TINY_CONFIG = """\
behaviors:
  Simple1D:
    trainer_type: ppo
    hyperparameters: {batch_size: 16, buffer_size: 64, learning_rate: 5.0e-3, num_epoch: 1}
    network_settings: {hidden_units: 16, num_layers: 1}
    max_steps: 256
    time_horizon: 16
    summary_freq: 128
    checkpoint_interval: 128
env_settings:
  env_path: simple:discrete
  num_envs: 2
  seed: 0
"""


def _write_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_CONFIG, encoding="utf-8")
    return path


def test_the_finished_status_is_not_a_reconnect() -> None:
    assert TRAINING_FINISHED_STATUS not in RETRYABLE_STATUSES


async def test_finish_releases_a_blocked_env_client_and_ends_every_later_one(
    start_processor: StartProcessor, tmp_path: Path
) -> None:
    # Nobody takes trajectories: the queue of one fills and holds the client back, for ever.
    runtime = BehaviorRuntime(time_horizon=4)
    settings = itest_settings(
        behaviors={BEHAVIOR: runtime}, strict=True, trajectory_queue_size=1, subscriber_release_after_s=None
    )
    server, address = await start_processor(settings)
    env = SimpleEnv(2, continuous=False, seed=0)
    assert server.topics.policies(BEHAVIOR).publish(policy_update(env.brain_parameters, 0), 0)
    stop = asyncio.Event()
    client = ReconnectingEnvClient(address, "blocked", BEHAVIOR, env, stop)
    running = asyncio.ensure_future(client.run())
    topic = server.topics.trajectories(BEHAVIOR)
    await wait_until(lambda: topic.stats().blocked_publishers == 1, "the env client to block on the full queue")

    with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
        status = await asyncio.to_thread(publisher.finish, 1000, 0)
    assert status.training_finished
    steps = await asyncio.wait_for(running, STOP_TIMEOUT_S)  # ended by the processor, not by `stop`
    assert not stop.is_set() and client.training_finished and client.retries == 0 and steps > 0
    assert topic.stats().blocked_publishers == 0
    await wait_until(lambda: len(server.sessions) == 0, "the session to close")
    assert server.behaviors.all_finished()

    late = ReconnectingEnvClient(address, "late", BEHAVIOR, SimpleEnv(1, continuous=False, seed=1), stop)
    assert await asyncio.wait_for(late.run(), STOP_TIMEOUT_S) == 0  # refused at Hello: no step taken
    assert late.training_finished and late.sessions == 0 and late.retries == 0

    config = _write_config(tmp_path)
    command = [*_stepstream(), "env", str(config), "--processor", address]
    process = await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
    assert process.returncode == 0, stderr.decode()
    assert f"training of {BEHAVIOR} finished" in stderr.decode()

    # A processor without --exit-when-finished serves on; a new trainer's subscription trains the behavior again.
    assert await asyncio.to_thread(serving, address)
    open_message = pb.SubscriberMessage(open=pb.SubscribeOpen(behavior_name=BEHAVIOR, subscriber_name=SUBSCRIBER))
    server.servicer._attach(open_message).detach()  # what Subscribe does first
    assert not server.behaviors.finished and not server.behaviors.all_finished()
    with GrpcPolicyPublisher(address, BEHAVIOR) as publisher:
        assert not (await asyncio.to_thread(publisher.status)).training_finished


def test_the_three_local_processes_end_by_themselves_after_max_steps(tmp_path: Path, ports: PortReservation) -> None:
    config = _write_config(tmp_path)
    port = ports.port()
    address = f"127.0.0.1:{port}"
    results = tmp_path / "results"
    with Stack(tmp_path) as stack:
        processor_args = ("processor", str(config), "--port", str(port), "--exit-when-finished")
        processor = stack.start("processor", *processor_args, oneshot=True)
        stack.wait_until(lambda: serving(address), "processor SERVING")
        trainer = stack.start(
            *("trainer", "trainer", str(config), "--behavior", BEHAVIOR, "--processor", address),
            *("--results-dir", str(results), "--run-id", "finished", "--seed", "0"),
            oneshot=True,
        )
        env = stack.start("env", "env", str(config), "--processor", address, "--client-id", "env-0", oneshot=True)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        for name, process in (("trainer", trainer), ("env", env), ("processor", processor)):
            remaining = max(deadline - time.monotonic(), 1.0)
            try:
                code = process.wait(remaining)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{name} did not exit by itself within {RUN_TIMEOUT_S:.0f} s:\n{stack.log_tails()}")
            assert code == 0, f"{name} exited {code}:\n{stack.log_tails()}"
        logs = {name: (tmp_path / f"{name}.log").read_text(encoding="utf-8") for name in ("processor", "trainer", "env")}
    assert re.search(rf"training of {BEHAVIOR} finished at step (\d+)", logs["trainer"]), logs["trainer"]
    assert f"training of behavior '{BEHAVIOR}' finished" in logs["processor"], logs["processor"]
    assert "training of every behavior finished and no session is open; stopping" in logs["processor"]
    assert f"training of {BEHAVIOR} finished; env client 'env-0' ends" in logs["env"], logs["env"]
    assert "Traceback" not in "".join(logs.values())
