"""When this process started: the zero of every run's ``wall_seconds``, imports included.

Standard library only, so that a peer in another environment (``benchmarks/classic_control_sb3.py``, in the SB3
one) reads the same clock without importing the rest of stepstream.
"""

from __future__ import annotations

import os
import time


def process_start_time() -> float:
    """Epoch seconds when this process started (imports included), from /proc where it exists."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime_s = float(f.read().split()[0])
        return time.time() - uptime_s + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()
