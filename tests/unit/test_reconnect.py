"""``envclient.reconnect.processor_target``: the gRPC target of ``--processor``, one or several processors."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from envclient.reconnect import LOAD_BALANCING_OPTIONS, processor_target


def test_one_address_or_a_target_with_a_scheme_is_passed_to_grpc_as_given() -> None:
    for address in ("127.0.0.1:50051", "processor:50051", "dns:///processor:50051", "ipv4:10.0.0.1:1,10.0.0.2:1"):
        assert processor_target(address) == address


def test_a_list_of_ip_literals_becomes_one_ipv4_or_ipv6_target() -> None:
    assert processor_target("127.0.0.1:50051, 127.0.0.1:50052") == "ipv4:127.0.0.1:50051,127.0.0.1:50052"
    assert processor_target("[::1]:50051,[::1]:50052") == "ipv6:[::1]:50051,[::1]:50052"


@pytest.mark.parametrize(
    ("address", "names"),
    [
        ("processor-a:50051,processor-b:50051", "'processor-a:50051' is not IP:PORT"),
        ("127.0.0.1:50051,[::1]:50051", "mixes IPv4 and IPv6"),
        ("127.0.0.1:50051,127.0.0.1", "'127.0.0.1' is not IP:PORT"),
        ("127.0.0.1:50051,127.0.0.1:x", "has no port"),
    ],
)
def test_a_list_grpc_cannot_resolve_is_refused_naming_the_entry(address: str, names: str) -> None:
    with pytest.raises(ConfigError, match="--processor") as refused:
        processor_target(address)
    assert names in str(refused.value)


def test_sessions_balance_with_grpcs_round_robin() -> None:
    assert ("grpc.lb_policy_name", "round_robin") in LOAD_BALANCING_OPTIONS
