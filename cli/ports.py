"""A port a command will bind, checked before anything slow starts: "in use" is one clear line, not a traceback.

The check binds a plain socket (``SO_REUSEADDR``, as the servers do, so a closing connection's
``TIME_WAIT`` does not count) and closes it at once. Another process may still take the port in
between; then the server's own bind fails, which ``cli.main`` reports as one line too.
"""

from __future__ import annotations

import errno
import socket

from common.errors import ConfigError


def check_port_free(host: str, port: int | None, flag: str) -> None:
    """Raise ConfigError naming ``flag`` when ``host:port`` cannot be bound; nothing to check for None or 0.

    Raises:
        ConfigError: the port is in use, or the host is not an address of this machine.
    """
    if not port:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise ConfigError(f"{flag} {port}: cannot resolve host {host!r}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"{flag} {port}: {host}:{port} is already in use (another stepstream process?); "
                    "choose another port or stop that process"
                ) from None
            raise ConfigError(f"{flag} {port}: cannot bind {host}:{port}: {err.strerror or err}") from None
