"""The stack through NATS JetStream, as local processes: ``--topics nats://...`` on the processor and the trainer.

A real ``nats-server`` (``tests.nats_server``), ``stepstream processor --topics``, ``stepstream
trainer --topics`` and two ``stepstream env`` on ``configs/simple_ppo.yaml`` (PPO on the 1-D goal
task), with two processors on the one broker, each serving one env client: trajectories from both
go into the behavior's one stream and policies come to both from its one bucket; the trainer still
asks a processor for the BrainParameters. The run learns past the threshold, then the broker is SIGKILLed and restarted
on the same store: the processor and the trainer reconnect by themselves, and new episodes, acted by
policy versions above those from before the kill, pass the threshold again. Liveness bounds are
generous; no speed is asserted.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.test_stack import (
    CONFIG,
    LIVENESS_TIMEOUT_S,
    POLL_S,
    WINDOW,
    Stack,
    reached,
    read_episodes,
    serving,
)
from tests.nats_server import NatsServer
from tests.ports import PortReservation

pytestmark = pytest.mark.learning

logger = logging.getLogger(__name__)

BEHAVIOR = "Simple1D"
RUN_ID = "stack-nats"
BROKER_DOWN_S = 2.0
"""How long the broker stays dead: the processor's publishes wait (env clients with them), none fails."""


def test_stack_learns_through_jetstream_and_survives_a_broker_sigkill(tmp_path: Path, ports: PortReservation) -> None:
    results = tmp_path / "results"
    episodes_csv = results / RUN_ID / BEHAVIOR / "episodes.csv"
    broker = NatsServer(tmp_path / "nats").start()
    addresses = [f"127.0.0.1:{ports.port()}" for _ in range(2)]
    topics = ("--topics", broker.url)
    started = time.monotonic()
    try:
        with Stack(tmp_path) as stack:
            for i, address in enumerate(addresses):
                port = address.rsplit(":", 1)[1]
                stack.start(f"processor{i}", "processor", str(CONFIG), "--port", port, "--grace-s", "1", *topics)
            for address in addresses:
                stack.wait_until(lambda address=address: serving(address), f"processor at {address} SERVING")
            stack.start(
                *("trainer", "trainer", str(CONFIG), "--behavior", BEHAVIOR, "--processor", ",".join(addresses), *topics),
                *("--results-dir", str(results), "--run-id", RUN_ID, "--seed", "0"),
            )
            for i, address in enumerate(addresses):
                stack.start(f"env{i}", "env", str(CONFIG), "--processor", address, "--client-id", f"env-{i}", "--seed", "0")
            stack.wait_until(lambda: reached(read_episodes(episodes_csv)), f"mean of the last {WINDOW} episodes passes")
            learned_s = time.monotonic() - started
            logger.info("threshold through JetStream after %.1f s", learned_s)

            broker.kill()
            before = read_episodes(episodes_csv)
            version_before = max(version for _, _, version in before)
            time.sleep(BROKER_DOWN_S)  # fault injection: the broker is away for a while
            broker.start()

            def recovered() -> bool:
                after = read_episodes(episodes_csv)[len(before) :]
                fresh = [row for row in after if row[2] > version_before]
                return len(fresh) >= WINDOW and reached(fresh)

            stack.wait_until(recovered, "new episodes, acted by versions above those before the broker's SIGKILL")
            logger.info("recovered from the broker SIGKILL in %.1f s", time.monotonic() - started - learned_s)
            for name in ("env0", "env1", "trainer", "processor0", "processor1"):
                assert stack.stop(name) == 0, f"{name} did not exit cleanly:\n{stack.log_tails()}"
    finally:
        broker.stop()


FINISH_STEPS = 1500
"""max_steps of the finished-run test: a few updates of the 1-D task, then the end."""


@pytest.mark.parametrize("processors", [1, 2])
def test_a_finished_run_ends_every_service_through_jetstream(tmp_path: Path, processors: int, ports: PortReservation) -> None:
    """The compose stack's end (``docker compose up`` returns) as local processes on the broker: the trainer
    reaches max_steps and exits 0; the env clients, blocked on the full ``block`` stream as the trainer stops
    taking trajectories, are woken (the finished behavior's durable consumer is removed, the broker frees its
    messages), told to end and exit 0; the processor, with ``--exit-when-finished``, exits 0 once no session is
    open. No process is signalled; no traceback is logged.

    With two processors the trainer is given both (``--processor A,B``, the list an env client balances over
    with round_robin): its FinishTraining reaches each, so each processor and its env client end too."""
    config = tmp_path / "simple_ppo.yaml"
    settings = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    settings["behaviors"][BEHAVIOR].update(max_steps=FINISH_STEPS, summary_freq=500, checkpoint_interval=FINISH_STEPS)
    config.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    broker = NatsServer(tmp_path / "nats").start()
    addresses = [f"127.0.0.1:{ports.port()}" for _ in range(processors)]
    topics = ("--topics", broker.url)
    try:
        with Stack(tmp_path) as stack:
            for i, address in enumerate(addresses):
                port = address.rsplit(":", 1)[1]
                stack.start(f"processor{i}", "processor", str(config), "--port", port, *topics, "--exit-when-finished")
            for address in addresses:
                stack.wait_until(lambda address=address: serving(address), f"processor at {address} SERVING")
            stack.start(
                *("trainer", "trainer", str(config), "--behavior", BEHAVIOR, "--processor", ",".join(addresses), *topics),
                *("--results-dir", str(tmp_path / "results"), "--run-id", RUN_ID, "--seed", "0"),
            )
            for i in range(2):
                address = addresses[i % processors]
                stack.start(f"env{i}", "env", str(config), "--processor", address, "--client-id", f"env-{i}", "--seed", "0")
            deadline = time.monotonic() + LIVENESS_TIMEOUT_S
            while any(p.poll() is None for p in stack.processes.values()):
                running = sorted(name for name, p in stack.processes.items() if p.poll() is None)
                bound = f"still running after {LIVENESS_TIMEOUT_S:.0f} s: {running}"
                assert time.monotonic() < deadline, f"{bound}\n{stack.log_tails()}"
                time.sleep(POLL_S)
            codes = {name: p.returncode for name, p in stack.processes.items()}
            assert codes == dict.fromkeys(codes, 0), f"exit codes {codes}:\n{stack.log_tails()}"
            for name in codes:
                log_text = (tmp_path / f"{name}.log").read_text(encoding="utf-8", errors="replace")
                assert "Traceback" not in log_text, f"{name} logged a traceback:\n{stack.log_tails()}"
    finally:
        broker.stop()
