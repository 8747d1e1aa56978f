"""The whole pipeline in one process, for learning tests on the 1-D task (``envclient.simple_env``).

``train_on_simple_env`` starts, on one asyncio event loop:

* a real ``ProcessorServer`` on ``127.0.0.1``, port 0, with in-process topics; its settings come
  from the test's ``BehaviorSettings`` (``time_horizon``, ``effective_max_policy_lag``);
* ``num_envs`` env clients, each a real ``EnvSession`` over gRPC driving a ``SimpleEnv`` of
  ``agents_per_env`` copies with ``run_env``;

and, in a thread of its own, the ``TrainerLoop`` with the learner, subscribed to the in-process
trajectory topic and publishing on the in-process policy topic (embedded mode's wiring). It
returns when the trainer stops (``max_steps``, or the test's ``should_stop``), after stopping the
clients (their sessions close, flushing partial trajectories), the server, and the thread, also
when something fails.

Seeding: the learner (``seed``), each env (``seed * 1000 + index``) and the processor's action
sampling are seeded; what stays free is timing (which client's step joins which inference batch,
when a policy version arrives), so runs are close to, not exactly, reproducible.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.buffer import AgentBuffer
from common.config import BehaviorSettings
from common.topics import TRAINER_SUBSCRIBER
from common.trajectory import CONTINUOUS_ACTIONS, DISCRETE_ACTIONS, obs_key
from envclient.runner import RunStats, run_env
from envclient.session import EnvSession
from envclient.simple_env import SimpleEnv, expert_actions, goal_of_images, simple_brain_parameters
from processor.behaviors import BehaviorCounters, BehaviorRuntime, ProcessorSettings
from processor.server import ProcessorServer, ServerOptions
from trainer.learner import Learner
from trainer.loop import CONDITION, TrainerLoop, TrainerResult, configure_tf_threads
from trainer.registry import make_learner

logger = logging.getLogger(__name__)

BEHAVIOR = "Simple1D"
STOP_GRACE_S = 1.0
CLIENT_STOP_TIMEOUT_S = 10.0
"""Liveness bound on env clients finishing their step in flight and closing after a stop."""


@dataclass
class LearningRun:
    """What one ``train_on_simple_env`` saw."""

    trainer: TrainerResult
    """The trainer loop's result: steps, versions, episode rewards as the trainer saw them."""
    envs: list[RunStats] = field(default_factory=list)
    """Each env client's own counts (returns computed env-side)."""
    processor: BehaviorCounters | None = None
    """The processor's counters for the behavior, after the sessions closed."""

    @property
    def episode_rewards(self) -> list[float]:
        return self.trainer.episode_rewards

    @property
    def env_experiences(self) -> int:
        """Experiences the env clients' rows imply (``RunStats.experiences``), summed."""
        return sum(s.experiences for s in self.envs)


def assert_stopped_at_condition(result: TrainerResult, window: int) -> np.ndarray:
    """Asserts that the run stopped at its ``should_stop`` condition (its threshold), saying where its last ``window``
    episodes stood if not; returns their returns."""
    last = np.asarray(result.episode_rewards[-window:])
    why = f"after {result.steps} steps and {result.updates} updates, the last {window} episodes average {last.mean():.3f}"
    assert result.stopped_by == CONDITION, why
    return last


def train_on_simple_env(
    settings: BehaviorSettings,
    *,
    continuous: bool,
    seed: int = 0,
    max_trainer_steps: int | None = None,
    num_envs: int = 2,
    agents_per_env: int = 8,
    learner: Learner | None = None,
    should_stop: Callable[[TrainerResult], bool] | None = None,
    results_dir: Path | None = None,
    trajectory_queue_size: int | None = None,
    timeout_s: float = 120.0,
    client: EnvClient | None = None,
    image_shape: tuple[int, int, int] | None = None,
) -> LearningRun:
    """Train ``settings``' trainer on the 1-D task through the real processor; blocks until done.

    Args:
        settings: the behavior's settings; ``max_steps`` is replaced by ``max_trainer_steps`` if given.
        continuous: one continuous action (True) or one discrete branch of 2.
        seed: seeds the learner, the envs and the processor's sampling.
        max_trainer_steps: the trainer's step budget (agent experiences taken in).
        num_envs: env clients (sessions), each with ``agents_per_env`` agents.
        learner: a ready learner (e.g. a pre-trained one); None builds ``settings.trainer_type``'s.
        should_stop: stops the trainer early when it returns True for the live result.
        results_dir: where the trainer writes summaries and checkpoints; None: nowhere.
        trajectory_queue_size: the processor's trajectory queue capacity; small values make env
            clients wait for the trainer (backpressure); None: the processor's default for the
            algorithm (``BehaviorRuntime.from_settings``: about one PPO update buffer).
        timeout_s: liveness bound on the whole run.
        client: runs one env client until its stop event (default: an ``EnvSession`` with ``run_env``);
            ``tests/learning/test_unity_learning.py`` puts a gateway and a fake Unity there.
        image_shape: the task seen as a uint8 image ``(H, W, C)`` only (``SimpleEnv``'s image mode); None: the vector.

    Returns:
        The trainer's result, the env clients' counts and the processor's counters.

    Raises:
        TimeoutError: the trainer did not stop within ``timeout_s``.
        Whatever an env client, the processor or the trainer raised.
    """
    configure_tf_threads()
    if max_trainer_steps is not None:
        settings = dataclasses.replace(settings, max_steps=max_trainer_steps)
    params = simple_brain_parameters(BEHAVIOR, continuous, image_shape)
    if learner is None:
        learner = make_learner(params, settings, seed)
    runtime = BehaviorRuntime.from_settings(settings)
    if trajectory_queue_size is not None:
        runtime = dataclasses.replace(runtime, trajectory_queue_size=trajectory_queue_size)
    processor_settings = ProcessorSettings(behaviors={BEHAVIOR: runtime}, strict=True, seed=seed)
    return asyncio.run(
        _run(
            processor_settings,
            settings,
            learner,
            continuous,
            seed,
            num_envs,
            agents_per_env,
            should_stop,
            results_dir,
            timeout_s,
            client or functools.partial(_client, image_shape=image_shape),
        )
    )


def collect_expert_rows(
    continuous: bool,
    seed: int,
    *,
    num_agents: int = 16,
    env_steps: int = 40,
    image_shape: tuple[int, int, int] | None = None,
) -> AgentBuffer:
    """Demonstration rows of the scripted expert (``envclient.simple_env.expert_actions``) on the 1-D task.

    One row per experience, as a demonstration records it: ``obs_0`` [K, 1] (the obs the action was
    chosen on; uint8 [K, H, W, C] with ``image_shape``), ``continuous_actions`` [K, C] env actions,
    ``discrete_actions`` [K, B]. The rows of auto-reset steps (whose actions the env ignores) are left out.
    """
    env = SimpleEnv(num_agents, continuous=continuous, behavior_name=BEHAVIOR, seed=seed, image_shape=image_shape)
    (obs,) = env.reset()
    acting = np.ones(num_agents, bool)  # False on the step after a done: that action is ignored
    columns: dict[str, list[np.ndarray]] = {obs_key(0): [], CONTINUOUS_ACTIONS: [], DISCRETE_ACTIONS: []}
    for _ in range(env_steps):
        continuous_actions, discrete_actions = expert_actions(goal_of_images(obs) if image_shape else obs, continuous)
        columns[obs_key(0)].append(obs[acting])
        columns[CONTINUOUS_ACTIONS].append(continuous_actions[acting])
        columns[DISCRETE_ACTIONS].append(discrete_actions[acting])
        (obs,), _, terminated, truncated = env.step(continuous_actions, discrete_actions)
        acting = ~(terminated | truncated)
    buffer = AgentBuffer()
    buffer.extend_rows({key: np.concatenate(parts) for key, parts in columns.items()})
    return buffer


EnvClient = Callable[[str, int, bool, int, int, asyncio.Event], Awaitable[RunStats]]
"""``(address, index, continuous, agents, seed, stop) -> RunStats``: one env client of a learning run."""


async def _client(
    address: str,
    index: int,
    continuous: bool,
    agents: int,
    seed: int,
    stop: asyncio.Event,
    image_shape: tuple[int, int, int] | None = None,
) -> RunStats:
    env = SimpleEnv(agents, continuous=continuous, behavior_name=BEHAVIOR, seed=seed * 1000 + index, image_shape=image_shape)
    async with EnvSession(address, f"simple-env-{index}", [env.brain_parameters]) as session:
        return await run_env(session, env, BEHAVIOR, stop=stop)


async def _run(
    processor_settings: ProcessorSettings,
    settings: BehaviorSettings,
    learner: Learner,
    continuous: bool,
    seed: int,
    num_envs: int,
    agents_per_env: int,
    should_stop: Callable[[TrainerResult], bool] | None,
    results_dir: Path | None,
    timeout_s: float,
    client: EnvClient,
) -> LearningRun:
    server = ProcessorServer(processor_settings, ServerOptions(port=0))
    port = await server.start()
    topics = server.topics
    subscription = topics.trajectories(BEHAVIOR).subscribe(TRAINER_SUBSCRIBER)
    loop = TrainerLoop(
        BEHAVIOR,
        learner,
        subscription,
        topics.policies(BEHAVIOR),
        settings,
        results_dir=results_dir,
        run_started_at=time.time(),
        seed=seed,
        poll_s=0.05,
    )
    trainer_stop = threading.Event()
    env_stop = asyncio.Event()
    trainer = asyncio.ensure_future(asyncio.to_thread(loop.run, trainer_stop, should_stop=should_stop))
    clients = [
        asyncio.ensure_future(client(f"127.0.0.1:{port}", k, continuous, agents_per_env, seed, env_stop))
        for k in range(num_envs)
    ]
    run = LearningRun(loop.result)
    try:
        await _wait_for_trainer(trainer, clients, timeout_s)
        run.trainer = trainer.result()
    finally:
        trainer_stop.set()
        await asyncio.gather(trainer, return_exceptions=True)
        # The trainer no longer acks: drop its queue so no publish (and no env client) waits for room.
        topics.trajectories(BEHAVIOR).remove(TRAINER_SUBSCRIBER)
        env_stop.set()
        finished, pending = await asyncio.wait(clients, timeout=CLIENT_STOP_TIMEOUT_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        behavior = server.behaviors.get(BEHAVIOR)
        await server.stop(STOP_GRACE_S)
        run.processor = None if behavior is None else behavior.counters
    run.envs = [task.result() for task in clients if task in finished and not task.cancelled()]
    if pending:
        raise TimeoutError(f"{len(pending)} env client(s) did not stop within {CLIENT_STOP_TIMEOUT_S} s")
    return run


async def _wait_for_trainer(
    trainer: asyncio.Future[TrainerResult], clients: Sequence[asyncio.Future[RunStats]], timeout_s: float
) -> None:
    """Wait for the trainer to stop; fail at once if an env client fails first, or after ``timeout_s``."""
    pending: set[asyncio.Future[Any]] = {trainer, *clients}
    deadline = time.monotonic() + timeout_s
    while not trainer.done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"the trainer did not stop within {timeout_s} s (steps so far: see the log)")
        done, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not trainer:
                task.result()  # raises the client's error
                raise RuntimeError("an env client ended before the trainer stopped")
