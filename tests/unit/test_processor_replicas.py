"""``cli.processor_replicas``: one address resolved to each processor replica, TLS still checking the name.

The real case (Docker's DNS name ``processor`` resolving to each ``--scale processor=N`` replica) runs in
``benchmarks/compose_up.sh``; here the resolver's own answers for loopback names and literals.
"""

from __future__ import annotations

from cli.processor_replicas import replica_security, replica_targets
from common.security import PLAINTEXT, ClientSecurity


def test_a_name_resolves_to_each_address_once_and_in_one_family() -> None:
    assert replica_targets("localhost:50051") == ["127.0.0.1:50051"]  # not ::1 too: one processor, reached once
    assert replica_targets("127.0.0.2:7") == ["127.0.0.2:7"]
    assert replica_targets("[::1]:50051") == ["[::1]:50051"]


def test_an_address_that_does_not_resolve_is_kept_as_given() -> None:
    assert replica_targets("no-such-host.invalid:50051") == ["no-such-host.invalid:50051"]
    assert replica_targets("processor") == ["processor"]  # no port: the caller's call reports it


def test_tls_to_a_replica_checks_the_name_that_was_given() -> None:
    tls = ClientSecurity(tls=True)
    assert replica_security(tls, "processor:50051").server_name == "processor"
    named = ClientSecurity(tls=True, server_name="stepstream.example")
    assert replica_security(named, "processor:50051") is named
    assert replica_security(PLAINTEXT, "processor:50051") is PLAINTEXT
