"""A peer's time-to-solve on our clock: seconds from the peer's process start, imports included.

The peers (``../shared/yardsticks/sb3_time_to_solve.py``, ``sb3_pixel.py``) start their clock after their imports
(PyTorch, Gymnasium, MiniGrid, Stable-Baselines3), where ``time_to_solve.py``'s ``wall_s`` counts from the start
of the ``stepstream train`` process (TensorFlow's import included). This runs a peer command as it is, in a
subprocess, and adds to the JSON line it prints last ``wall_s_from_process_start``: the seconds from launching
it to reading that line (the peer prints it as soon as it solved, and exits). The peer's own ``wall_s`` stays;
``time_to_solve.py``'s ``wall_s_after_imports`` is ours on the peer's clock. So both count both ways.

usage: peer_clock.py PEER_PYTHON PEER_SCRIPT [ARGS...], e.g. from the repository root::

    .venv/bin/python benchmarks/peer_clock.py ~/.cache/stepstream-yardsticks/sb3/bin/python \
        ../shared/yardsticks/sb3_pixel.py 0

Prints the peer's JSON with the field added (the peer's stderr passes through); exit 1 if the peer printed no
JSON object or failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any


def timed_peer(command: Sequence[str]) -> tuple[dict[str, Any] | None, int]:
    """Run ``command``; its last JSON object line with ``wall_s_from_process_start`` added (None if it printed
    none), and its exit code. The clock stops when that line is read, not at the peer's exit."""
    launched = time.perf_counter()
    result: dict[str, Any] | None = None
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            read_at = time.perf_counter()
            try:
                parsed = json.loads(line)
            except ValueError:
                sys.stdout.write(line)  # anything else the peer prints passes through
                continue
            if isinstance(parsed, dict):
                result = {**parsed, "wall_s_from_process_start": round(read_at - launched, 2)}
    return result, proc.returncode


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        sys.stderr.write(__doc__.split("\n\n")[2] + "\n")
        return 2
    result, returncode = timed_peer(args)
    if result is None:
        sys.stderr.write(f"peer_clock: {' '.join(args)} printed no JSON object (exit {returncode})\n")
        return 1
    print(json.dumps(result))
    return 0 if returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
