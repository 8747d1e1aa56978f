"""An env client for the fault tests: a separate process speaking the real SDK (``EnvSession``), rows known in advance.

``python -m tests.fault_client ADDRESS CLIENT_ID --agents N --steps K --then hold|close|run``

It declares ``BRAIN_PARAMETERS`` (obs float32 [3], C = 2) and sends K BrainInfos of N agents. The row of agent
``a`` at step ``k`` of a run started with ``--offset o`` has obs ``[o, a, k]``, reward 0.5 and is never done
(with ``--done-every D`` every agent is done at steps D-1, 2D-1, ...: the next row is a first sighting), so
the tests know every trajectory a session implies. After the K steps it prints ``READY <session id>`` and
then, by ``--then``:

* ``hold``: keeps the session open, sending nothing, until killed (agents stay mid-episode);
* ``close``: closes the session cleanly (the processor flushes it) and exits 0;
* ``run``: goes on stepping (one BrainInfo every ``--interval-s``) until SIGTERM, then closes.

Every line it prints is flushed at once, so a test can read them from its log file.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import numpy as np

from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.session import EnvSession, brain_info_message

BEHAVIOR = "Faults"
BRAIN_PARAMETERS = BrainParameters(BEHAVIOR, (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(2))
REWARD = 0.5


def rows(offset: float, agents: int, k: int, done_every: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step ``k``'s obs float32 [N, 3], rewards float32 [N] and done bool [N]."""
    obs = np.stack([np.full(agents, offset), np.arange(agents), np.full(agents, k)], axis=1).astype(np.float32)
    done = np.full(agents, done_every is not None and (k + 1) % done_every == 0)
    return obs, np.full(agents, REWARD, np.float32), done


async def main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    ids = np.arange(args.agents, dtype=np.int64)
    async with EnvSession(args.address, args.client_id, [BRAIN_PARAMETERS]) as session:
        k = 0
        while k < args.steps or (args.then == "run" and not stop.is_set()):
            if k >= args.steps:
                await asyncio.sleep(args.interval_s)
            obs, rewards, done = rows(args.offset, args.agents, k, args.done_every)
            await session.send(brain_info_message(BEHAVIOR, ids, [obs], rewards, done))
            k += 1
            if k == args.steps:
                print(f"READY {session.session_id}", flush=True)
        if args.then == "hold":
            await asyncio.Event().wait()  # until killed
    print(f"CLOSED after {k} steps", flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address")
    parser.add_argument("client_id")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--offset", type=float, default=0.0, help="first obs component, to tell runs apart")
    parser.add_argument("--done-every", type=int, default=None)
    parser.add_argument("--then", choices=("hold", "close", "run"), default="close")
    parser.add_argument("--interval-s", type=float, default=0.02)
    sys.exit(asyncio.run(main(parser.parse_args())))
