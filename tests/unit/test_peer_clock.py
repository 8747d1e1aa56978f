"""``benchmarks/peer_clock.py``: a peer's JSON line, with the seconds from its process start added."""

from __future__ import annotations

import sys

from benchmarks.peer_clock import main, timed_peer

PEER = (
    "import json, sys, time\n"
    "print('Using cpu device')\n"  # what SB3 prints besides its JSON
    "time.sleep(0.2)\n"
    "print(json.dumps({'algo_env': 'ppo-pixel', 'solved': True, 'steps': 7, 'wall_s': 0.1}))\n"
)


def test_the_clock_counts_from_the_launch_and_keeps_the_peers_own_fields() -> None:
    result, returncode = timed_peer([sys.executable, "-c", PEER])
    assert returncode == 0 and result is not None
    assert {k: result[k] for k in ("algo_env", "solved", "steps", "wall_s")} == {
        "algo_env": "ppo-pixel",
        "solved": True,
        "steps": 7,
        "wall_s": 0.1,
    }
    assert result["wall_s_from_process_start"] >= 0.2  # the peer's start-up and its sleep, before its own clock


def test_a_peer_without_json_or_that_fails_exits_1() -> None:
    assert main([sys.executable, "-c", "print('no json here')"]) == 1
    assert main([sys.executable, "-c", PEER + "sys.exit(3)"]) == 1
    assert main([sys.executable]) == 2  # usage: a script is needed
