"""The stack over mutual TLS with the shared token, as local processes, with every metrics endpoint scraped.

A short run of ``configs/simple_ppo.yaml`` (PPO on the 1-D task): no reward threshold, only that
training works through TLS. The security settings reach each process the ways users give them:
flags (processor certificates, trainer), environment variables (env client certificates, the
processor's token) and a token file (trainer).

1. The env client starts first: the processor is not up, so it retries (``stepstream_env_reconnects_total``).
2. The processor comes up with mutual TLS and the token; ``stepstream health`` with a client certificate
   says SERVING, without one it fails (the handshake is refused). An env client with a wrong token is
   refused with UNAUTHENTICATED and exits 2, without retrying.
3. The trainer trains and publishes policy versions through TLS until the processor reports version
   >= 2 and the env client has finished episodes.
4. Every process stops cleanly on SIGTERM; the processor is scraped once more after its clients left.

Each endpoint is scraped throughout; every documented trainer and env metric must be exported and
must have moved, but for ``NEED_NOT_MOVE`` (fault counters, and gauges a healthy trainer keeps at 0).
``test_metrics.py`` moves every processor metric.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

import pytest

from tests.certs import make_certs
from tests.integration.test_stack import CONFIG, STOP_TIMEOUT_S, Stack, _stepstream
from tests.ports import PortReservation
from tests.scrape import Scrapes, documented

pytestmark = pytest.mark.learning

logger = logging.getLogger(__name__)

BEHAVIOR = "Simple1D"
TOKEN = "stack-token-0123456789"
LIVENESS_TIMEOUT_S = 180.0
POLL_S = 0.5
NEED_NOT_MOVE = {
    "stepstream_trainer_reconnects_total": "a fault counter: the processor must go away (test_stack.py restarts it)",
    "stepstream_trainer_trajectories_dropped_total": "a fault counter: redeliveries or stale trajectories",
    "stepstream_trainer_queue_depth": "transient: a healthy trainer takes what arrives at once",
    "stepstream_trainer_queue_in_flight": "transient: a healthy trainer acks what it took at once",
}
PROCESSOR_MOVES = (
    "stepstream_processor_agent_steps_total",
    "stepstream_processor_experiences_published_total",
    "stepstream_processor_policy_version",
    "stepstream_processor_inference_batch_rows",
    "stepstream_processor_trajectories_flushed_total",
)
"""What this run must move at the processor, however late its first scrape (all of them: ``test_metrics.py``)."""


def test_a_short_run_trains_over_mutual_tls_with_a_token_and_every_endpoint_reports(
    tmp_path: Path, ports: PortReservation
) -> None:
    certs = make_certs(tmp_path / "certs")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    # Held, not bound and released: the env client dials the processor's port before the processor binds it.
    port, metrics = ports.port(), {name: ports.port() for name in ("processor", "trainer", "env")}
    address = f"localhost:{port}"  # the server certificate names localhost
    client_flags = ("--tls-ca", str(certs.ca), "--tls-cert", str(certs.client_cert), "--tls-key", str(certs.client_key))
    client_env = {
        "STEPSTREAM_TLS_CA": str(certs.ca),
        "STEPSTREAM_TLS_CERT": str(certs.client_cert),
        "STEPSTREAM_TLS_KEY": str(certs.client_key),
        "STEPSTREAM_TOKEN": TOKEN,
    }
    scrapes = {name: Scrapes(f"http://127.0.0.1:{p}/metrics") for name, p in metrics.items()}
    results = tmp_path / "results"
    with Stack(tmp_path) as stack:

        def scrape(*names: str) -> None:
            for name in names:
                try:
                    scrapes[name].take()
                except OSError:  # not up yet
                    pass

        def wait_for(condition: object, what: str, *names: str) -> None:
            deadline = time.monotonic() + LIVENESS_TIMEOUT_S
            while True:
                scrape(*names)
                if condition():  # type: ignore[operator]
                    return
                stack.check_running()
                assert time.monotonic() < deadline, f"{what}: not within {LIVENESS_TIMEOUT_S:.0f} s"
                time.sleep(POLL_S)

        # 1. the env client first: it retries until the processor is up
        stack._env.update(client_env)
        stack.start(
            *("env", "env", str(CONFIG), "--processor", address, "--client-id", "env-0", "--seed", "0"),
            *("--metrics-port", str(metrics["env"])),
        )
        for key in client_env:
            del stack._env[key]
        wait_for(lambda: scrapes["env"].moved("stepstream_env_reconnects_total", "counter"), "env retrying", "env")

        # 2. the processor, mutual TLS from flags, the token from the environment
        stack._env["STEPSTREAM_TOKEN"] = TOKEN
        stack.start(
            *("processor", "processor", str(CONFIG), "--port", str(port), "--grace-s", "1"),
            *("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key), "--tls-client-ca", str(certs.ca)),
            *("--metrics-port", str(metrics["processor"])),
        )
        del stack._env["STEPSTREAM_TOKEN"]

        def health(*flags: str) -> int:
            command = [*_stepstream(), "health", address, "--timeout-s", "2", *flags]
            return subprocess.run(command, capture_output=True, timeout=STOP_TIMEOUT_S, cwd=tmp_path).returncode

        wait_for(lambda: health(*client_flags, "--token-file", str(token_file)) == 0, "processor SERVING over mTLS")
        assert health("--tls-ca", str(certs.ca)) != 0, "a client without a certificate must be refused"
        wrong = stack.start(
            "wrong-token", "env", str(CONFIG), "--processor", address, *client_flags, "--token", "wrong", oneshot=True
        )

        # 3. the trainer, with flags and a token file
        stack.start(
            *("trainer", "trainer", str(CONFIG), "--behavior", BEHAVIOR, "--processor", address, *client_flags),
            *("--token-file", str(token_file), "--metrics-port", str(metrics["trainer"])),
            *("--results-dir", str(results), "--run-id", "secure", "--seed", "0"),
        )
        assert wrong.wait(STOP_TIMEOUT_S) == 2, "a wrong token must end the env client, not make it retry"

        def trained() -> bool:
            version = scrapes["processor"].value("stepstream_processor_policy_version", behavior=BEHAVIOR) or -1
            episodes = scrapes["trainer"].value("stepstream_trainer_episodes_total", behavior=BEHAVIOR) or 0
            return version >= 2 and episodes >= 1 and len(scrapes["trainer"].history) >= 3

        wait_for(trained, "policy version >= 2 through TLS", "processor", "trainer", "env")

        # 4. clean stop; the processor is scraped after its clients left (flushes, closed sessions)
        for name in ("env", "trainer"):
            assert stack.stop(name) == 0, f"{name} did not exit cleanly:\n{stack.log_tails()}"
        scrape("processor")
        assert stack.stop("processor") == 0

    processor = scrapes["processor"]
    assert (processor.value("stepstream_processor_calls_unauthenticated_total") or 0) >= 1, "the wrong token's call"
    assert (processor.value("stepstream_processor_sessions_opened_total") or 0) >= 1
    not_moved = [m for m in PROCESSOR_MOVES if not processor.moved(m, documented("stepstream_processor_")[m])]
    assert not not_moved, f"processor metrics that did not move: {not_moved}"
    for role in ("trainer", "env"):
        wanted = documented(f"stepstream_{role}_")
        absent = [m for m, kind in wanted.items() if not scrapes[role].present(m, kind)]
        assert not absent, f"{role}: documented but not exported: {absent}"
        still = [m for m, kind in wanted.items() if m not in NEED_NOT_MOVE and not scrapes[role].moved(m, kind)]
        assert not still, f"{role}: documented metrics that did not move: {still}"
