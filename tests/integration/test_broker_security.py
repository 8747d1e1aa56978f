"""TLS and the token on the broker connection: a real ``nats-server`` with ``tls {}`` and ``authorization { token }``.

The certificates come from ``tests.certs`` (a CA and a server certificate for 127.0.0.1), the
broker from ``tests.nats_server``. ``common.security.BrokerSecurity`` gives nats-py its ssl context
and token; the processor's ``--topics-tls-ca`` and ``--topics-token`` flags build it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import ConfigError
from common.security import BrokerSecurity
from common.topics import TRAINER_SUBSCRIBER
from common.topics.jetstream import open_topics
from tests.certs import CertFiles, make_certs
from tests.integration.test_topics_grpc import BEHAVIOR, make_trajectory, sequences
from tests.nats_server import NatsServer

TOKEN = "broker-s3cret"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def certs(tmp_path: Path) -> CertFiles:
    return make_certs(tmp_path / "certs")


@pytest.fixture
def secure_broker(tmp_path: Path, certs: CertFiles) -> Iterator[NatsServer]:
    """A broker that requires TLS (its certificate for 127.0.0.1) and the token."""
    config = (
        f'tls {{\n  cert_file: "{certs.server_cert}"\n  key_file: "{certs.server_key}"\n}}\n'
        f'authorization {{\n  token: "{TOKEN}"\n}}'
    )
    server = NatsServer(tmp_path / "nats-secure", extra_config=config).start()
    try:
        yield server
    finally:
        server.stop()


def test_topics_pass_over_tls_with_the_token(secure_broker: NatsServer, certs: CertFiles) -> None:
    security = BrokerSecurity.from_paths(ca=certs.ca, token=TOKEN)
    with open_topics(secure_broker.url, name="processor", security=security) as processor:
        with open_topics(secure_broker.url, name="trainer", follow_policies=False, security=security) as trainer:
            topic = processor.trajectories(BEHAVIOR)
            topic.declare(TRAINER_SUBSCRIBER)
            topic.publish_blocking(make_trajectory(0), timeout_s=30)
            with trainer.trajectories(BEHAVIOR).subscribe(TRAINER_SUBSCRIBER) as subscription:
                deliveries = subscription.get(10, timeout_s=30)
                assert sequences(deliveries) == [0]
                subscription.ack(d.tag for d in deliveries)


@pytest.mark.parametrize(
    ("token", "with_ca"), [("wrong-token", True), (None, True), (TOKEN, False)], ids=["wrong-token", "no-token", "no-ca"]
)
def test_a_wrong_token_or_an_untrusted_broker_is_refused_at_once(
    secure_broker: NatsServer, certs: CertFiles, token: str | None, with_ca: bool
) -> None:
    """Refused as a ConfigError naming the flags, not retried for ``CONNECT_TIMEOUT_S`` (retrying cannot fix it)."""
    security = BrokerSecurity.from_paths(ca=certs.ca if with_ca else None, tls=True, token=token)
    with pytest.raises(ConfigError, match="--topics-t"):
        open_topics(secure_broker.url, name="processor", security=security).close()


def test_broker_security_refuses_half_a_client_certificate_and_unreadable_files(certs: CertFiles, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--topics-tls-cert and --topics-tls-key"):
        BrokerSecurity.from_paths(ca=certs.ca, cert=certs.client_cert)
    with pytest.raises(ConfigError, match="--topics-tls-ca"):
        BrokerSecurity.from_paths(ca=tmp_path / "missing.pem")
    assert BrokerSecurity.from_paths(ca=certs.ca).tls and not BrokerSecurity().tls


def test_the_processor_flags_reach_the_broker(secure_broker: NatsServer, certs: CertFiles) -> None:
    """``processor --topics ... --topics-tls-ca ... --topics-token-file``: a wrong token exits 2 naming the flags."""
    token_file = certs.ca.parent / "token"
    token_file.write_text("not-the-token\n")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "cli.main", "processor", "--port", "0", "--topics", secure_broker.url),
            *("--topics-tls-ca", str(certs.ca), "--topics-token-file", str(token_file)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "refused the connection" in done.stderr and "--topics-token" in done.stderr, done.stderr[-2000:]
