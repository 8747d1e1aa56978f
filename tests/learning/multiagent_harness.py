"""One behavior of a PettingZoo parallel env trained through the whole pipeline, in one process.

``train_pettingzoo`` starts, on one asyncio event loop, a real ``ProcessorServer`` on loopback port 0 and one
``envclient.pettingzoo_adapter.PettingZooClient`` (its copies in one session, one group per team per copy), and
in a thread of its own the ``TrainerLoop`` with the behavior's learner (embedded mode's wiring, as
``tests/learning/harness.py`` for the 1-D task). It returns when the trainer reaches ``max_steps``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from common.config import BehaviorSettings
from common.topics import TRAINER_SUBSCRIBER
from envclient.pettingzoo_adapter import PettingZooClient, PettingZooStats
from envclient.session import EnvSession
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.server import ProcessorServer, ServerOptions
from trainer.loop import TrainerLoop, configure_tf_threads
from trainer.registry import make_learner

CLIENT_STOP_TIMEOUT_S = 10.0


def train_pettingzoo(
    make_env: Callable[[], Any],
    behavior: str,
    settings: BehaviorSettings,
    *,
    seed: int,
    num_envs: int,
    teams: Mapping[str, int] | None = None,
    timeout_s: float = 300.0,
) -> tuple[PettingZooStats, float]:
    """Train ``behavior`` (the env's only behavior) to ``settings.max_steps``; returns (the env client's statistics,
    wall seconds).

    Raises:
        TimeoutError: the trainer did not stop within ``timeout_s``.
    """
    configure_tf_threads()
    return asyncio.run(_run(make_env, behavior, settings, seed, num_envs, teams, timeout_s))


async def _run(
    make_env: Callable[[], Any],
    behavior: str,
    settings: BehaviorSettings,
    seed: int,
    num_envs: int,
    teams: Mapping[str, int] | None,
    timeout_s: float,
) -> tuple[PettingZooStats, float]:
    started = time.monotonic()
    client = PettingZooClient(make_env, num_envs=num_envs, seed=seed, teams=teams)
    params = client.brain_parameters[behavior]
    learner = make_learner(params, settings, seed)
    runtime = BehaviorRuntime.from_settings(settings)
    server = ProcessorServer(ProcessorSettings(behaviors={behavior: runtime}, strict=True, seed=seed), ServerOptions(port=0))
    port = await server.start()
    topics = server.topics
    subscription = topics.trajectories(behavior).subscribe(TRAINER_SUBSCRIBER)
    loop = TrainerLoop(
        behavior,
        learner,
        subscription,
        topics.policies(behavior),
        settings,
        results_dir=None,
        run_started_at=time.time(),
        seed=seed,
        poll_s=0.05,
    )
    trainer_stop, env_stop = threading.Event(), asyncio.Event()
    trainer = asyncio.ensure_future(asyncio.to_thread(loop.run, trainer_stop))

    async def play() -> PettingZooStats:
        async with EnvSession(f"127.0.0.1:{port}", f"pettingzoo-{behavior}", [params]) as session:
            return await client.run(session, stop=env_stop)

    env = asyncio.ensure_future(play())
    try:
        await asyncio.wait_for(asyncio.shield(trainer), timeout=timeout_s)
    finally:
        trainer_stop.set()
        await asyncio.gather(trainer, return_exceptions=True)
        # The trainer no longer acks: drop its queue so no publish (and no env client) waits for room.
        topics.trajectories(behavior).remove(TRAINER_SUBSCRIBER)
        env_stop.set()
        stats = await asyncio.wait_for(env, timeout=CLIENT_STOP_TIMEOUT_S)
        await server.stop(1.0)
        client.close()
    return stats, time.monotonic() - started
