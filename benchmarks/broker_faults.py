"""Faults with two processors on one NATS broker: broker SIGKILL and restart, trainer SIGKILL, processor SIGKILL.

The fleet of ``tests.processor_fleet``: a real ``nats-server``, two real ``stepstream processor
--topics`` processes, ``--clients`` env clients on the 1-D task spread over both (one target naming
both, gRPC's ``round_robin``), and the trainer's side as a ``CountingTrainer`` *process* (the trainer's
durable subscription, acking once a trajectory is recorded, "training" every 1024 experiences), so
that it can be SIGKILLed. Policy versions are published to the bucket now and then, as a trainer does.
The sequence, ``--phase-s`` apart while the clients step:

1. the broker is SIGKILLed, stays down ``--broker-down-s``, and restarts on the same store;
2. the trainer is SIGKILLed and a new one starts: what the old one had not acked comes again;
3. processor p0 is SIGKILLed: its clients move to p1, and its sessions' partials are lost with it.

Then the clients stop (flushing their partials on p1) and the last trainer takes what is left.
The counts (issue 16, "Conservation across processors"):

* ``experiences_implied``: what the clients' rows imply, every session, answered or not;
* ``experiences_taken_in``: the trajectories taken in (acked) over all trainer lifetimes, each id once;
  ``duplicates_taken_in`` counts ids taken in by two lifetimes, and must be 0;
* ``experiences_dropped``: what the processors dropped and counted (``experiences_dropped``: stale,
  unpublished; p0's as last scraped before its kill); ``experiences_dropped_by_reason`` splits it per
  processor and ``reason`` label;
* ``experiences_in_doubt``: in trajectories whose publish failed with an attempt unanswered (the broker
  killed mid-publish past ``publish_timeout_s``, or a processor stopping): the broker may have stored
  them. Each is logged with its id, so the ledger tells which way it went: those taken in are part of
  ``experiences_taken_in``, the rest is ``experiences_in_doubt_lost``, a fourth term (never "dropped":
  counting one as dropped that the trainer took in counted it twice);
* ``experiences_lost_processor_kill``: counted from the clients' side: what p0's sessions sent, less
  what of it was taken in, dropped, or lost in doubt;
* ``experiences_lost_trainer_kill``: acked by the killed trainer but not yet "trained" on: a part of
  taken_in, reported for the record.

``conserved`` is implied == taken_in + dropped + lost_processor_kill + in_doubt_lost with the loss between
0 and what p0's agents could hold (``lost_processor_kill_bound``: ``time_horizon`` + 1 per agent and session
it had, and its stream's queue), and p1's sessions conserving on their own (sent == taken in + dropped +
their in_doubt_lost).

usage: broker_faults.py [--clients 4] [--agents 4] [--phase-s 6] [--broker-down-s 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.grpc_g1 import positive_int
from common.topics.jetstream import JetStreamTopics
from envclient.simple_env import simple_brain_parameters
from tests.processor_fleet import BEHAVIOR, REPO, Fleet, FleetClients, Ledger, fleet_config

log = logging.getLogger("benchmarks.broker_faults")

TIME_HORIZON = 16
QUEUE = 64
"""The stream's queue (``fleet_config``): trajectories stored and unacked at most."""
SETTLE_TIMEOUT_S = 120.0


class TrainerProcess:
    """``python -m tests.processor_fleet trainer``: one lifetime per ledger file."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.lifetimes: list[tuple[Path, bool]] = []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        ledger = self.root / f"trainer{len(self.lifetimes)}.jsonl"
        self.lifetimes.append((ledger, False))
        with open(self.root / "trainer.log", "ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.processor_fleet", "trainer", self.url, BEHAVIOR, str(ledger)],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(20)
        self.lifetimes[-1] = (self.lifetimes[-1][0], True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def ledger(self) -> Ledger:
        return Ledger.of_lifetimes(self.lifetimes)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.integration.helpers import policy_update  # TensorFlow: a real exported policy

    params = simple_brain_parameters(BEHAVIOR, continuous=False)
    with tempfile.TemporaryDirectory(prefix="broker-faults-") as tmp:
        root = Path(tmp)
        config = fleet_config(root / "fleet.yaml", max_policy_lag=args.max_policy_lag, time_horizon=TIME_HORIZON)
        fleet = Fleet(root, config, 2)
        await asyncio.to_thread(fleet.start)
        trainer = TrainerProcess(root, fleet.broker.url)
        publisher = await asyncio.to_thread(JetStreamTopics, fleet.broker.url, name="faults-publisher", follow_policies=False)
        version = 0
        try:
            policies = await asyncio.to_thread(publisher.policies, BEHAVIOR)
            await asyncio.to_thread(policies.publish, policy_update(params, version), version)
            trainer.start()
            clients = FleetClients(fleet.target, args.clients, args.agents)
            await clients.place(fleet)
            started = time.monotonic()

            async def phase() -> None:
                nonlocal version
                await asyncio.sleep(args.phase_s / 2)
                version += 1
                await asyncio.to_thread(policies.publish, policy_update(params, version, seed=version), version)
                await asyncio.sleep(args.phase_s / 2)

            await phase()
            log.info("broker SIGKILL")
            await asyncio.to_thread(fleet.broker.kill)
            await asyncio.sleep(args.broker_down_s)
            await asyncio.to_thread(fleet.broker.start)
            await phase()
            log.info("trainer SIGKILL")
            await asyncio.to_thread(trainer.kill)
            trainer.start()
            await phase()
            p0_sessions = sum(1 for c in clients.clients for r in c.session_records if r.session_id.startswith("p0:"))
            log.info("processor p0 SIGKILL")
            await asyncio.to_thread(fleet.kill, 0)
            await phase()
            await clients.finish()
            seconds = time.monotonic() - started

            sent = clients.sent_by_session()
            on_p0 = {s for s in sent if s.startswith("p0:")}
            on_p1 = set(sent) - on_p0

            def p1_conserves() -> tuple[bool, Ledger]:
                ledger = trainer.ledger()
                taken = sum(ledger.experiences_by_session.get(s, 0) for s in on_p1)
                lost_in_doubt = in_doubt_lost(fleet.in_doubt(1), ledger)
                return sum(sent[s] for s in on_p1) == taken + fleet.dropped_experiences(1) + lost_in_doubt, ledger

            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            settled, ledger = p1_conserves()
            while not settled and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                settled, ledger = p1_conserves()
            await asyncio.to_thread(trainer.stop)
            ledger = trainer.ledger()
        finally:
            await asyncio.to_thread(trainer.stop)
            await asyncio.to_thread(publisher.close)
            await asyncio.to_thread(fleet.stop)

    implied = sum(sent.values())
    dropped = int(fleet.dropped_experiences(0) + fleet.dropped_experiences(1))
    doubt = [fleet.in_doubt(i) for i in range(len(fleet.ids))]
    in_doubt = sum(sum(d.values()) for d in doubt)
    lost_in_doubt = [in_doubt_lost(d, ledger) for d in doubt]
    taken_p0 = sum(ledger.experiences_by_session.get(s, 0) for s in on_p0)
    lost_processor_kill = sum(sent[s] for s in on_p0) - taken_p0 - int(fleet.dropped_experiences(0)) - lost_in_doubt[0]
    bound = p0_sessions * args.agents * (TIME_HORIZON + 1) + QUEUE * TIME_HORIZON
    return {
        "workload": "broker_faults",
        "experiences_implied": implied,
        "experiences_taken_in": ledger.experiences,
        "experiences_dropped": dropped,
        "experiences_dropped_by_reason": {
            fleet.ids[i]: {reason: int(v) for reason, v in sorted(fleet.last_dropped_by_reason.get(i, {}).items()) if v}
            for i in range(len(fleet.ids))
        },
        "experiences_in_doubt": in_doubt,
        "experiences_in_doubt_lost": sum(lost_in_doubt),
        "experiences_lost_processor_kill": lost_processor_kill,
        "experiences_lost_trainer_kill": ledger.lost_trainer_kill,
        "duplicates_taken_in": ledger.duplicates,
        "conserved": bool(
            settled
            and implied == ledger.experiences + dropped + lost_processor_kill + sum(lost_in_doubt)
            and 0 <= lost_processor_kill <= bound
            and ledger.duplicates == 0
        ),
        "lost_processor_kill_bound": bound,
        "p1_sessions_conserved": settled,
        "sessions": len(sent),
        "policy_versions": version + 1,
        "seconds": round(seconds, 1),
    }


def in_doubt_lost(in_doubt: dict[str, int], ledger: Ledger) -> int:
    """The experiences of the trajectories counted in doubt (id -> experiences) that no trainer took in."""
    return sum(length for trajectory_id, length in in_doubt.items() if trajectory_id not in ledger.ids)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("envclient.reconnect").setLevel(logging.ERROR)  # every reconnect after a fault warns
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=positive_int, default=4)
    parser.add_argument("--agents", type=positive_int, default=4)
    parser.add_argument("--phase-s", type=float, default=6.0)
    parser.add_argument("--broker-down-s", type=float, default=2.0)
    parser.add_argument("--max-policy-lag", type=int, default=1, help="the processors' max_policy_lag (default 1)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))  # the benchmark's one JSON line


if __name__ == "__main__":
    main()
