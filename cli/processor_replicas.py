"""Every processor replica behind one address, for a trainer whose topics are on a broker.

With ``--topics nats://...`` several processors serve one behavior, often behind one DNS name that
resolves to each of them (the stack's ``processor`` with ``docker compose up --scale processor=3``).
A gRPC channel to that name talks to one of its addresses, so a trainer that asked only the name
would miss the others where it matters:

* ``FinishTraining`` would end the env clients of one processor, and the other processors (and so
  ``docker compose up``) would run on;
* the BrainParameters wait would hang when the processor it reached has no env client yet.

:func:`replica_targets` gives each processor ``--processor`` names: each entry of a list of IP
literals (``a:50051,b:50051``, or the ``ipv4:``/``ipv6:`` target an env client's channel balances
over), each address a name resolves to (``processor:50051``, or ``dns:///processor:50051``). gRPC
Python does not hand out the addresses its resolver found, so a name is resolved here by the
system resolver (``getaddrinfo``: ``/etc/hosts``, then the system's DNS servers; Docker's embedded
DNS in the stack): a ``dns://SERVER/name`` target's own DNS server is not asked.
:func:`replica_security` keeps TLS checking the processor's certificate against the name the user
gave, not the address.
"""

from __future__ import annotations

import dataclasses
import socket

from common.security import ClientSecurity


def replica_targets(address: str) -> list[str]:
    """``host:port`` of each processor ``address`` names, in the order given or resolved.

    * a list (``"10.0.0.1:50051,10.0.0.2:50051"``, or ``"ipv4:..."``/``"ipv6:..."``): each entry;
    * ``dns:[//authority]/host:port``: as ``host:port``;
    * ``host:port``: each IPv4 address ``host`` resolves to (IPv6 where it has none).

    A host that does not resolve now, or a malformed address, gives ``[address]``: the caller's call
    then reports the failure as it would have without replicas.
    """
    target = address.strip()
    if target.startswith(("ipv4:", "ipv6:")):
        target = target.split(":", 1)[1]
    elif target.startswith("dns:"):
        target = target[len("dns:") :].lstrip("/")
        if "/" in target:  # dns://authority/host:port: the authority (a DNS server) is not asked, see the module
            target = target.split("/", 1)[1]
    parts = [part.strip() for part in target.split(",") if part.strip()]
    if len(parts) > 1:
        return list(dict.fromkeys(parts))
    if not parts:
        return [address]
    return _resolved(parts[0]) or [address]


def _resolved(address: str) -> list[str]:
    """Each address of ``host:port``'s host, one family; [] if it does not resolve."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return []
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
    return targets


def replica_security(security: ClientSecurity, address: str) -> ClientSecurity:
    """``security`` for a channel to one of ``address``'s replicas by IP: TLS verifies the name in ``address``.

    A list of IP literals names no host: each replica's certificate is checked against its own address.
    """
    if not security.tls or security.server_name:
        return security
    if address.startswith(("ipv4:", "ipv6:")) or len(address.split(",")) > 1:
        return security
    name = address.split("/")[-1] if address.startswith("dns:") else address
    return dataclasses.replace(security, server_name=name.rpartition(":")[0].strip("[]"))
