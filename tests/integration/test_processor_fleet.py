"""Two real ``stepstream processor`` processes on one real ``nats-server``, one trainer subscription, env clients across both.

The fleet (``tests.processor_fleet``): both processors publish into the same stream and follow the
same policy bucket; the env clients dial one target naming both (gRPC's ``round_robin``). The run
swaps a policy version in on both, SIGKILLs one processor, watches its clients move to the other,
swaps again, then stops the clients and checks the counts (issue 16, "Conservation across
processors"): every session and trajectory id carries its processor's identity and none is taken in
twice; ``max_policy_lag: 0`` holds for what the trainer took in from either processor, and both
dropped (and counted) stale experiences; the surviving processor's sessions conserve exactly (sent =
taken in + dropped), and the killed one's loss, counted from what its clients sent, is bounded by its
agents' partial trajectories. Liveness bounds are generous; no speed is asserted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from common.topics.grpc_transport import GrpcPolicyPublisher
from envclient.reconnect import processor_channel
from envclient.simple_env import simple_brain_parameters
from tests.integration.helpers import policy_update, wait_until
from tests.processor_fleet import BEHAVIOR, CountingTrainer, Fleet, FleetClients, fleet_config

LIVENESS_S = 120.0
CLIENTS = 4
AGENTS = 4
TIME_HORIZON = 16


async def test_two_processors_share_the_broker_and_conserve_experiences_across_a_processor_sigkill(tmp_path: Path) -> None:
    config = fleet_config(tmp_path / "fleet.yaml", max_policy_lag=0, time_horizon=TIME_HORIZON)
    params = simple_brain_parameters(BEHAVIOR, continuous=False)
    fleet = Fleet(tmp_path, config, 2)
    await asyncio.to_thread(fleet.start)
    trainer: CountingTrainer | None = None
    try:
        trainer = (await asyncio.to_thread(CountingTrainer, fleet.broker.url)).start()
        await asyncio.to_thread(trainer.policies.publish, policy_update(params, 0), 0)
        clients = FleetClients(fleet.target, CLIENTS, AGENTS)
        await clients.place(fleet)

        def all_act_with(version: int) -> bool:
            return clients.newest_versions() == [version] * CLIENTS

        await wait_until(lambda: all_act_with(0), "every client acting with version 0", LIVENESS_S)
        assert clients.current_processors() == ["p0", "p1"] * (CLIENTS // 2)
        await asyncio.to_thread(trainer.policies.publish, policy_update(params, 1, seed=1), 1)
        await wait_until(lambda: all_act_with(1), "both processors swapped version 1 in", LIVENESS_S)
        # max_policy_lag 0: each processor drops the trajectories that began under version 0 as they are cut
        # (within a time_horizon of steps); p0 must have before its SIGKILL, or its count is lost with it.
        await wait_until(
            lambda: fleet.dropped_experiences(0) > 0 and fleet.dropped_experiences(1) > 0,
            "both processors dropping stale trajectories",
            LIVENESS_S,
        )

        on_p0 = [c.client_id for c, p in zip(clients.clients, clients.current_processors(), strict=True) if p == "p0"]
        await asyncio.to_thread(fleet.kill, 0)
        await wait_until(
            lambda: clients.current_processors() == ["p1"] * CLIENTS and all_act_with(1),
            "every client stepping on p1 after p0's SIGKILL",
            LIVENESS_S,
        )
        assert all(c.retries >= 1 for c in clients.clients if c.client_id in on_p0)
        await asyncio.to_thread(trainer.policies.publish, policy_update(params, 2, seed=2), 2)
        await wait_until(lambda: all_act_with(2), "p1 swapped version 2 in", LIVENESS_S)
        await clients.finish()
        # The trainer's query through the broker (``stepstream trainer --topics --processor P0,P1``) finds a live one.
        with processor_channel(fleet.target) as channel, GrpcPolicyPublisher(channel, BEHAVIOR) as status:
            assert await asyncio.to_thread(status.wait_for_brain_parameters, timeout_s=LIVENESS_S) == params

        sent = clients.sent_by_session()
        on = {p: {s for s in sent if s.startswith(f"{p}:")} for p in ("p0", "p1")}
        assert on["p0"] | on["p1"] == set(sent), f"every session id carries its processor: {sorted(sent)}"
        ledger = trainer.ledger

        def survivor_conserves() -> bool:
            taken = sum(ledger.experiences_by_session.get(s, 0) for s in on["p1"])
            return sum(sent[s] for s in on["p1"]) == taken + fleet.dropped_experiences(1)

        await wait_until(survivor_conserves, "p1's sessions: sent = taken in + dropped", LIVENESS_S)
        assert set(ledger.experiences_by_session) <= set(sent)
        assert ledger.duplicates == 0
        assert max(ledger.version_spans) == 0, "max_policy_lag 0: no trajectory taken in spans two versions"
        assert fleet.dropped_experiences(0) > 0 and fleet.dropped_experiences(1) > 0, "both dropped stale ones"
        lost = sum(sent[s] for s in on["p0"]) - sum(ledger.experiences_by_session.get(s, 0) for s in on["p0"])
        lost -= int(fleet.dropped_experiences(0))
        assert 0 <= lost <= len(on_p0) * AGENTS * 2 * TIME_HORIZON, f"lost with p0: {lost}"
    finally:
        if trainer is not None:
            await asyncio.to_thread(trainer.close)
        await asyncio.to_thread(fleet.stop)
