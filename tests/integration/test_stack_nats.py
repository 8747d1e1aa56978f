"""The stack through NATS JetStream, as local processes: ``--topics nats://...`` on the processor and the trainer.

A real ``nats-server`` (``tests.nats_server``), ``stepstream processor --topics``, ``stepstream
trainer --topics`` and two ``stepstream env`` on ``configs/simple_ppo.yaml`` (PPO on the 1-D goal
task). Trajectories and policies go through the broker; the trainer still asks the processor for
the BrainParameters. The run learns past the threshold, then the broker is SIGKILLed and restarted
on the same store: the processor and the trainer reconnect by themselves, and new episodes, acted by
policy versions above those from before the kill, pass the threshold again. Liveness bounds are
generous; no speed is asserted.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from tests.integration.test_stack import (
    CONFIG,
    WINDOW,
    Stack,
    _free_port,
    reached,
    read_episodes,
    serving,
)
from tests.nats_server import NatsServer

pytestmark = pytest.mark.learning

logger = logging.getLogger(__name__)

BEHAVIOR = "Simple1D"
RUN_ID = "stack-nats"
BROKER_DOWN_S = 2.0
"""How long the broker stays dead: the processor's publishes wait (env clients with them), none fails."""


def test_stack_learns_through_jetstream_and_survives_a_broker_sigkill(tmp_path: Path) -> None:
    results = tmp_path / "results"
    episodes_csv = results / RUN_ID / BEHAVIOR / "episodes.csv"
    broker = NatsServer(tmp_path / "nats").start()
    port = _free_port()
    address = f"127.0.0.1:{port}"
    topics = ("--topics", broker.url)
    started = time.monotonic()
    try:
        with Stack(tmp_path) as stack:
            stack.start("processor", "processor", str(CONFIG), "--port", str(port), "--grace-s", "1", *topics)
            stack.wait_until(lambda: serving(address), "processor SERVING")
            stack.start(
                *("trainer", "trainer", str(CONFIG), "--behavior", BEHAVIOR, "--processor", address, *topics),
                *("--results-dir", str(results), "--run-id", RUN_ID, "--seed", "0"),
            )
            for i in range(2):
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
            for name in ("env0", "env1", "trainer", "processor"):
                assert stack.stop(name) == 0, f"{name} did not exit cleanly:\n{stack.log_tails()}"
    finally:
        broker.stop()
