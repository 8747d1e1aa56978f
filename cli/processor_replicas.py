"""Every processor replica behind one address, for a trainer whose topics are on a broker.

With ``--topics nats://...`` several processors serve one behavior, often behind one DNS name that
resolves to each of them (the stack's ``processor`` with ``docker compose up --scale processor=3``).
A gRPC channel to that name talks to one of its addresses, so a trainer that asked only the name
would miss the others where it matters:

* ``FinishTraining`` would end the env clients of one processor, and the other processors (and so
  ``docker compose up``) would run on;
* the BrainParameters wait would hang when the processor it reached has no env client yet.

:func:`replica_targets` resolves the name to each address; :func:`replica_security` keeps TLS
checking the processor's certificate against the name the user gave, not the address.
"""

from __future__ import annotations

import dataclasses
import socket

from common.security import ClientSecurity


def replica_targets(address: str) -> list[str]:
    """``host:port`` of each IPv4 address ``address``'s host resolves to (IPv6 where it has none), in resolver order.

    A host that does not resolve now, or a malformed address, gives ``[address]``: the caller's call
    then reports the failure as it would have without replicas.
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return [address]
    # One family only: `localhost` gives 127.0.0.1 and ::1, one processor reached twice (or once, and once refused).
    family = socket.AF_INET if any(info[0] == socket.AF_INET for info in infos) else socket.AF_INET6
    targets: list[str] = []
    for info_family, _, _, _, sockaddr in infos:
        if info_family != family:
            continue
        ip = str(sockaddr[0])
        target = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        if target not in targets:
            targets.append(target)
    return targets or [address]


def replica_security(security: ClientSecurity, address: str) -> ClientSecurity:
    """``security`` for a channel to one of ``address``'s replicas by IP: TLS verifies the name in ``address``."""
    if not security.tls or security.server_name:
        return security
    return dataclasses.replace(security, server_name=address.rpartition(":")[0].strip("[]"))
