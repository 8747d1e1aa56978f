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


def test_a_list_gives_each_processor_it_names() -> None:
    # the --processor list an env client's round_robin channel balances over: FinishTraining goes to each
    assert replica_targets("127.0.0.1:1,127.0.0.2:2") == ["127.0.0.1:1", "127.0.0.2:2"]
    assert replica_targets("127.0.0.1:1, 127.0.0.2:2,127.0.0.1:1") == ["127.0.0.1:1", "127.0.0.2:2"]  # once each
    assert replica_targets("ipv4:127.0.0.1:1,127.0.0.2:2") == ["127.0.0.1:1", "127.0.0.2:2"]
    assert replica_targets("ipv6:[::1]:1,[::1]:2") == ["[::1]:1", "[::1]:2"]


def test_a_dns_target_resolves_its_name() -> None:
    assert replica_targets("dns:///localhost:50051") == ["127.0.0.1:50051"]
    assert replica_targets("dns:localhost:50051") == ["127.0.0.1:50051"]
    assert replica_targets("dns://8.8.8.8/localhost:50051") == ["127.0.0.1:50051"]  # by the system resolver
    assert replica_targets("dns:///no-such-host.invalid:1") == ["dns:///no-such-host.invalid:1"]


def test_an_address_that_does_not_resolve_is_kept_as_given() -> None:
    assert replica_targets("no-such-host.invalid:50051") == ["no-such-host.invalid:50051"]
    assert replica_targets("processor") == ["processor"]  # no port: the caller's call reports it


def test_tls_to_a_replica_checks_the_name_that_was_given() -> None:
    tls = ClientSecurity(tls=True)
    assert replica_security(tls, "processor:50051").server_name == "processor"
    named = ClientSecurity(tls=True, server_name="stepstream.example")
    assert replica_security(named, "processor:50051") is named
    assert replica_security(PLAINTEXT, "processor:50051") is PLAINTEXT
    assert replica_security(tls, "dns:///processor:50051").server_name == "processor"
    assert replica_security(tls, "10.0.0.1:1,10.0.0.2:1") is tls  # no name given: each address is checked
