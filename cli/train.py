"""``stepstream train CONFIG``: the embedded mode, everything on this machine, no external service.

One process runs the processor (gRPC on a loopback port, so the env clients take the very path
remote ones do) and the env clients as coroutines of its event loop; each behavior's trainer runs
in a thread of its own with the in-process topics (docs/architecture.md, "Two topologies"). TensorFlow
releases the GIL inside its kernels, so the trainer's updates and the processor's event loop
share the two cores.

A ``bc`` behavior that no ``env_path`` entry hosts trains **offline** from its ``demo_path`` alone
(``trainer.offline``), in a thread like any trainer; a run with only such behaviors starts no
processor and exits when they reach ``max_steps``. A ``bc`` behavior with an env loads its
demonstrations before its trainer starts. With ``--inference`` each behavior acts with the ``.policy.pb`` saved
beside its newest checkpoint, and this process never loads TensorFlow (only a checkpoint saved without one is restored
into a learner); the env clients' episode returns are logged at the end (mean of the last 20 and 100 episodes).

``cli.train_plan`` decides the run from its options and config alone (``TrainPlan``: the mode, the services, the
envs and the trainers); ``run_train`` checks the plan's inputs and prepares its results folder, and ``EmbeddedRun``
runs it.

Results go to ``<results-dir>/<run-id>/`` as docs/architecture.md's "Results layout" says.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.console import (
    RATE_WINDOW_S,
    StepRate,
    SummaryThrottle,
    format_elapsed,
    load_tensorflow,
    progress_bar,
    route_native_stderr,
    terminal,
    write_result,
)
from cli.flags import metrics_from_args
from cli.ports import check_port_free
from cli.results import (
    can_act_with_checkpoint,
    check_resumable,
    check_resumed_spec,
    check_unfinished,
    load_saved_policy,
    newest_saved_policy,
    prepare_run_dir,
    removed_if_unstarted,
)
from cli.run_config import (
    EnvFlags,
    check_env_override,
    check_inputs,
    env_specs,
    resolve_seed,
    vector_env_settings,
)
from cli.run_overrides import check_init_paths
from cli.signals import StopSignals, set_soon
from cli.train_plan import Mode, TrainOptions, TrainPlan, load_train_config, plan_train
from cli.unity_train import UnitySource, unity_keys
from common.clock import process_start_time
from common.config import BehaviorSettings, TrainerType
from common.errors import ConfigError
from common.logs import log_context
from common.specs import BrainParameters
from common.topics import TRAINER_SUBSCRIBER, TopicRegistry
from envclient.envs import close_vector_env, make_vector_env
from envclient.runner import RunStats, VectorEnv, run_env
from envclient.session import EnvSession
from processor.behaviors import ProcessorSettings
from processor.environment_parameters import parameter_service
from processor.server import ProcessorServer, ServerOptions
from trainer.summaries import CUMULATIVE_REWARD, EPISODES, RUN_LOGS, TRAINING_STATUS

if TYPE_CHECKING:  # trainer.loop and trainer.metrics import TensorFlow, which the run imports after its checks
    from rich.progress import TaskID

    from common.metrics import MetricsServer
    from trainer.loop import TrainerLoop, TrainerResult
    from trainer.metrics import TrainerCollector

log = logging.getLogger(__name__)

CLIENT_STOP_TIMEOUT_S = 10.0
STOP_GRACE_S = 5.0
PROGRESS_INTERVAL_S = 0.5
INFERENCE_WINDOWS = (20, 100)
"""--inference logs the mean return of each behavior's last this-many episodes."""
IMPORTS_DONE = "start-up: imports done %.3f s after the process start"
"""Logged once the imports are done (TensorFlow's, unless --inference): the peers' clocks start after their imports
(``benchmarks/time_to_solve.py`` reads this line to count both ways); every ``wall_seconds`` of the run still counts
from the process start."""


def run_train(options: TrainOptions) -> int:
    """Train (or, with --inference, act) until every trainer reaches max_steps or Ctrl-C."""
    started_at = process_start_time()
    plan = plan_train(options, *load_train_config(options))
    _check_inputs(plan)  # everything that can be checked in seconds is, before TensorFlow's import and the folder
    run_dir = _prepare_run_dir(plan)
    source = None if plan.unity is None else UnitySource(plan.unity, run_dir / "run_logs")
    with removed_if_unstarted(run_dir, fresh=not (options.resume or options.inference)):
        _import_runtime(inference=options.inference)
        log.info(IMPORTS_DONE, time.time() - started_at)
        code = asyncio.run(EmbeddedRun(plan, run_dir, started_at, source).run())
    if code != 0 and not options.inference:  # stopped by a signal, its checkpoints saved
        write_result(f"stopped; to continue this run: {resume_command(options)}", __name__)
    return code


def _check_inputs(plan: TrainPlan) -> None:
    """The config's inputs (demos, env ids, ``--env`` against the config's envs) and the ports to serve on."""
    options = plan.options
    check_inputs(options.config, plan.run_options, plan.checked)
    if plan.checks_env_override:
        check_env_override(options.config, options.env_flags, plan.run_options)
    check_init_paths(options.config, plan.run_options, plan.checked, resume=options.resume, inference=plan.inference)
    check_port_free(options.metrics.host, options.metrics.port, "--metrics-port")
    if options.serve is not None:
        check_port_free(*options.serve, "--serve")


def _prepare_run_dir(plan: TrainPlan) -> Path:
    """The run's results folder, ready (``cli.results.prepare_run_dir``); a resumed or acting run's checked first,
    before anything is written into it.

    Raises:
        ConfigError: the folder cannot be resumed or acted with, or (Unity, --inference) no behavior has a checkpoint.
    """
    options = plan.options
    run_dir = options.results_dir / options.run_id
    if (options.resume or options.inference) and run_dir.is_dir():
        _check_resumed_run(plan, run_dir)
    run_dir = prepare_run_dir(
        run_dir,
        plan.run_options,
        resume=options.resume,
        force=options.force,
        inference=options.inference,
        unity_keys=None if plan.unity is None else unity_keys(plan.unity),
    )
    if plan.mode is Mode.UNITY and plan.inference:
        if not any(can_act_with_checkpoint(run_dir / n) for n in plan.run_options.behaviors):
            raise ConfigError(f"{run_dir}: no behavior under behaviors has a checkpoint to run with --inference")
    return run_dir


def _import_runtime(*, inference: bool) -> None:
    """TensorFlow, its native start-up noise filtered out of stderr; with --inference, which acts with saved policies
    and needs no TensorFlow (``EmbeddedRun._publish_checkpoint_policy``), only LiteRT's notices filtered."""
    if inference:
        route_native_stderr()
    else:
        load_tensorflow()


def _check_resumed_run(plan: TrainPlan, run_dir: Path) -> None:
    """--resume / --inference of an existing run folder: refused, before anything is written into it, when it holds
    no checkpoint of these behaviors, is finished, or (``plan.probe_envs``: one copy of each env made) was trained on
    envs of another spec."""
    trained = list(plan.checked)
    check_resumable(run_dir, trained, inference=plan.inference)
    if not plan.options.resume:
        return
    check_unfinished(run_dir, plan.run_options, trained)
    if plan.probe_envs:
        hosted = plan.run_options.env_settings.behavior_names
        for name, params in env_specs(plan.run_options, [n for n in trained if n in hosted]).items():
            check_resumed_spec(run_dir, params, hosted[name])


def resume_command(options: TrainOptions) -> str:
    """The ``stepstream train`` command that continues the run of ``options``, its flags that matter kept."""
    words = ["stepstream", "train", str(options.config), "--run-id", options.run_id]
    if options.results_dir != Path("results"):
        words += ["--results-dir", str(options.results_dir)]
    flags = options.env_flags
    serve = None if options.serve is None else f"{options.serve[0]}:{options.serve[1]}"
    for flag, value in (
        ("--env", flags.env),
        ("--num-envs", flags.num_envs),
        ("--max-steps", options.max_steps),
        ("--serve", serve),
    ):
        if value is not None:
            words += [flag, str(value)]
    return shlex.join([*words, "--resume"])


class EmbeddedRun:
    """The runner of a ``TrainPlan``: the processor, the env clients and one trainer thread per behavior, in this
    process."""

    def __init__(self, plan: TrainPlan, run_dir: Path, started_at: float, unity: UnitySource | None = None) -> None:
        self.plan = plan
        self.options = plan.options
        self.unity = unity
        """Unity builds or the Editor (``cli.unity_train``): trainers start as Unity declares behaviors."""
        self.run_options = plan.run_options
        self.run_dir = run_dir
        self.started_at = started_at
        self.seed = resolve_seed(plan.run_options.env_settings.seed)
        self.envs: dict[str, VectorEnv] = {}
        self.offline = list(plan.offline)
        self.loops: dict[str, TrainerLoop] = {}
        self.threads: dict[str, asyncio.Future[TrainerResult]] = {}
        self.collectors: list[TrainerCollector] = []
        """The trainers' collectors, served beside the processor's (``--metrics-port``)."""
        self.metrics: MetricsServer | None = None
        """The run's metrics endpoint, while one serves."""
        self.trainer_stop = threading.Event()
        self.env_stop = asyncio.Event()
        self.declared: list[str] = []
        """The behaviors Unity declared so far, in order (``_declared``)."""
        self.released: set[str] = set()
        """Online behaviors whose trainer finished while others train (``_release_finished``)."""
        self.summaries: dict[str, LatestSummary] = {}
        """Each trained behavior's latest summary: the bar's R and the run's last line."""
        self.progress: _Progress | None = None
        self._clients_connected = False
        """--serve: whether an SDK client was connected at the last look (``_serve_tick``)."""

    def _make_envs(self) -> None:
        """A vector env for each behavior of the plan's ``envs`` (none where only offline BC, Unity or SDK clients)."""
        for settings in vector_env_settings(self.run_options, list(self.plan.envs), self.seed):
            self.run_options.settings_for(settings.behavior_name)  # a behavior without settings is a config error now
            self.envs[settings.behavior_name] = make_vector_env(settings)

    def _settings(self, name: str) -> BehaviorSettings:
        return self.run_options.settings_for(name)

    def _start_trainer(self, name: str, params: BrainParameters, topics: TopicRegistry) -> None:
        from trainer.loop import TrainerLoop
        from trainer.registry import make_learner

        settings = self._settings(name)
        learner = make_learner(params, settings, self.seed)
        if settings.trainer_type is TrainerType.BC:
            from trainer.offline import load_demonstrations

            load_demonstrations(learner, name, settings)
        subscription = topics.trajectories(name).subscribe(TRAINER_SUBSCRIBER)
        loop = TrainerLoop(
            name,
            learner,
            subscription,
            topics.policies(name),
            settings,
            results_dir=self.run_dir,
            run_started_at=self.started_at,
            seed=self.seed,
            resume=self.options.resume,
            writers=[self.summaries.setdefault(name, LatestSummary())],
            snapshot_sink=topics.snapshots(name) if settings.self_play is not None else None,
        )
        self.loops[name] = loop
        if self.options.metrics.port is not None:
            from trainer.metrics import TrainerCollector

            collector = TrainerCollector(name)
            collector.attach(loop, subscription)
            self.collectors.append(collector)
        self.threads[name] = asyncio.ensure_future(asyncio.to_thread(self._in_thread, name, loop.run))

    def _start_offline(self, name: str) -> None:
        """Offline BC for ``name`` (no env hosts it) in a thread of its own."""
        from trainer.offline import offline_loop

        settings = self._settings(name)
        loop = offline_loop(
            name,
            settings,
            seed=self.seed,
            results_dir=self.run_dir,
            run_started_at=self.started_at,
            resume=self.options.resume,
        )
        self.loops[name] = loop
        self.threads[name] = asyncio.ensure_future(asyncio.to_thread(self._in_thread, name, loop.run))

    def _in_thread(self, name: str, run: Callable[[threading.Event], TrainerResult]) -> TrainerResult:
        """A trainer's ``run`` in its thread, its log lines (the summaries too) carrying the behavior."""
        with log_context(behavior=name):
            return run(self.trainer_stop)

    def _publish_checkpoint_policy(self, name: str, params: BrainParameters, topics: TopicRegistry) -> None:
        """--inference: the newest checkpoint's policy, published once; no trainer runs.

        The policy saved beside the checkpoint (``ckpt-<step>.policy.pb``) is published as it is: no TensorFlow, no
        learner. Only a checkpoint without one (an earlier layout) is restored into a learner, after TensorFlow's
        import, and its policy exported.
        """
        saved = newest_saved_policy(self.run_dir / name)
        if saved is not None:
            path, step, version = saved
            update, _ = load_saved_policy(path, params, str(path))
            topics.policies(name).publish(update, version)
            log.info(
                "%s: acting with the checkpoint of step %d (policy version %d), not training: %s",
                name,
                step,
                version,
                path.name,
            )
            return
        load_tensorflow()  # the run's start left it out for --inference (a no-op after the first)
        from trainer.checkpoint import Checkpointer
        from trainer.loop import CHECKPOINTS_DIR
        from trainer.registry import make_learner

        settings = self._settings(name)
        learner = make_learner(params, settings, self.seed)
        restored = Checkpointer(self.run_dir / name / CHECKPOINTS_DIR, learner, settings.keep_checkpoints).restore_latest()
        if restored is None:
            raise ConfigError(f"{self.run_dir / name / CHECKPOINTS_DIR}: no checkpoint to run with --inference")
        step, version = restored
        topics.policies(name).publish(learner.export_policy(version, step), version)
        log.info("%s: acting with the checkpoint of step %d (policy version %d), not training", name, step, version)

    async def run(self) -> int:
        """Run until done; 0, or 128 + the signal after a SIGINT (130) or SIGTERM (143), as a shell reports
        it (checkpoints saved, as after max_steps).

        Whatever fails once the envs or the server exist (a missing checkpoint for --inference, a
        learner that cannot be built) still stops the server and closes the envs before it propagates.
        """
        interrupted = asyncio.Event()
        server: ProcessorServer | None = None
        clients: list[asyncio.Future[Any]] = []
        with StopSignals(set_soon(interrupted), what="saving checkpoints and stopping") as signals:
            try:
                self._make_envs()
                for name in self.offline:
                    self._start_offline(name)
                if self.plan.processor is not None:  # else only offline BC
                    server, clients = await self._start_online(*self.plan.processor)
                await self._wait(server, clients, interrupted)
            finally:
                await self._shutdown(server, clients)
        return signals.exit_code

    async def _start_online(self, host: str, port: int) -> tuple[ProcessorServer, list[asyncio.Future[Any]]]:
        """The processor on ``host:port`` (0: a free one), a trainer (or, with --inference, a checkpoint's policy) per
        env, and the env clients."""
        processor_settings = ProcessorSettings.from_run_options(
            self.run_options, seed=self.seed, declared_subscribers=() if self.plan.inference else (TRAINER_SUBSCRIBER,)
        )
        server = ProcessorServer(processor_settings, ServerOptions(host=host, port=port))
        status = self.run_dir / RUN_LOGS / TRAINING_STATUS if self.options.resume else None
        server.servicer.environment_parameters = parameter_service(self.run_options, self.seed, status)
        port = await server.start()
        if self.plan.mode is Mode.SERVE:
            log.info(
                "serving SDK env clients at %s:%d: trainers start as they declare %s; the run ends at max_steps",
                host,
                port,
                ", ".join(n for n in self.run_options.behaviors if n not in self.offline),
            )
        try:
            for name, env in self.envs.items():
                if self.plan.inference:
                    server.topics.trajectories(name).expect_no_subscribers()  # acting only: nothing trains on them
                    self._publish_checkpoint_policy(name, env.brain_parameters, server.topics)
                else:
                    self._start_trainer(name, env.brain_parameters, server.topics)
            if self.options.metrics.port is not None:
                from common.metrics import serve_metrics
                from processor.metrics import ProcessorCollector

                self.metrics = serve_metrics(  # it logs its address
                    self.options.metrics.host, self.options.metrics.port, ProcessorCollector(server), *self.collectors
                )
        except BaseException:
            await server.stop(STOP_GRACE_S)
            raise
        clients: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(self._env_client(f"127.0.0.1:{port}", name, env)) for name, env in self.envs.items()
        ]
        if self.unity is not None:
            try:
                declared = lambda spec: self._declared(spec, server)  # noqa: E731
                self_play = frozenset(n for n, b in self.run_options.behaviors.items() if b.self_play is not None)
                clients.append(await self.unity.start(f"127.0.0.1:{port}", self.seed, declared, self_play))
            except BaseException:
                await self.unity.stop()
                await server.stop(STOP_GRACE_S)
                raise
        return server, clients

    def _declared(self, params: BrainParameters, server: ProcessorServer) -> None:
        """Unity declared a behavior: start its trainer (--inference: publish its checkpoint's policy), once
        (another copy, or Play again, declares it again); the bar and the metrics endpoint show it from then on."""
        name = params.behavior_name
        if name in self.declared or name in self.loops:  # in loops: a bc behavior training offline from its demos
            return
        self.run_options.settings_for(name)  # a behavior without settings is refused, naming it
        if self.plan.inference:
            server.topics.trajectories(name).expect_no_subscribers()  # acting only: nothing trains on them
            self._publish_checkpoint_policy(name, params, server.topics)  # none: refused, naming its folder
        else:
            self._start_trainer(name, params, server.topics)
            if self.metrics is not None:
                self.metrics.registry.register(self.collectors[-1])
        self.declared.append(name)

    async def _env_client(self, address: str, name: str, env: VectorEnv) -> Any:
        async with EnvSession(address, f"embedded-{name}", [env.brain_parameters]) as session:
            max_env_steps = None
            if self.plan.inference:
                max_env_steps = math.ceil(self._settings(name).max_steps / env.num_agents)
            return await run_env(session, env, name, max_env_steps=max_env_steps, stop=self.env_stop)

    async def _wait(
        self, server: ProcessorServer | None, clients: list[asyncio.Future[Any]], interrupted: asyncio.Event
    ) -> None:
        """Until every trainer finished (or, with --inference, every env client), or a signal."""
        watched = list(self.threads.values()) if self.threads else clients
        self.progress = progress = _Progress(self, server) if self.options.progress else None
        serving = server if self.plan.mode is Mode.SERVE else None
        while not interrupted.is_set() and not self._finished(watched, clients):
            if server is not None:
                self._release_finished(server)
            _raise_failed(clients)
            if serving is not None:
                self._serve_tick(serving)
            if progress is not None:
                progress.update()
            await asyncio.sleep(PROGRESS_INTERVAL_S)
        if serving is not None and not interrupted.is_set():
            await self._sessions_drained(serving)
        if interrupted.is_set():
            log.info("interrupted: saving checkpoints and stopping")
        _raise_failed(clients)  # one that failed as the last ended (a Unity player told to quit on a refusal) too
        for task in self.threads.values():
            if task.done():
                task.result()  # a trainer that failed fails the run

    def _serve_tick(self, server: ProcessorServer) -> None:
        """--serve: a trainer for each behavior an SDK client declared, and, for each trainer that reached max_steps,
        the end of its behavior's training, which ends its clients' sessions with ``SessionFinishedError``. When the
        last client leaves before the end, a warning says that the run waits for one."""
        for behavior in server.behaviors.values():
            self._declared(behavior.params, server)
        connected = len(server.sessions) > 0
        if self._clients_connected and not connected and not server.behaviors.all_finished():
            log.warning("no SDK client is connected: training waits for one to reconnect (Ctrl-C saves checkpoints and exits)")
        self._clients_connected = connected
        from trainer.loop import MAX_STEPS

        for name, task in self.threads.items():
            loop = self.loops[name]
            if task.done() and name not in server.behaviors.finished and loop.result.stopped_by == MAX_STEPS:
                server.behaviors.finish(name, loop.result.steps, loop.result.policy_version)

    async def _sessions_drained(self, server: ProcessorServer) -> None:
        """--serve, training over: give the SDK clients up to ``CLIENT_STOP_TIMEOUT_S`` to read that it is."""
        self._serve_tick(server)  # the last trainers' ends
        deadline = time.monotonic() + CLIENT_STOP_TIMEOUT_S
        while server.sessions and time.monotonic() < deadline:
            await asyncio.sleep(PROGRESS_INTERVAL_S / 5)

    def _release_finished(self, server: ProcessorServer) -> None:
        """A behavior whose trainer finished goes on being served with its last policy, publishing nothing, until every
        trainer has (as mlagents-learn steps every agent until then): its trainer queue goes, so its env clients never
        wait for room on it, and what it would publish is dropped."""
        for name, task in self.threads.items():
            if task.done() and name not in self.offline and name not in self.released:
                self.released.add(name)
                topic = server.topics.trajectories(name)
                topic.remove(TRAINER_SUBSCRIBER)
                topic.expect_no_subscribers()
                log.info("%s: training finished; acting with its last policy until every behavior has finished", name)

    def _finished(self, watched: list[asyncio.Future[Any]], clients: list[asyncio.Future[Any]]) -> bool:
        """Every watched task is done; with Unity, every trainer started so far (one online at least), or Unity's end;
        with --serve, the trainer of every configured behavior."""
        if self.plan.mode is Mode.SERVE:
            wanted = [n for n in self.run_options.behaviors if n not in self.offline]
            return all(n in self.threads and self.threads[n].done() for n in wanted)
        if self.unity is None:
            return all(task.done() for task in watched)
        online = [task for name, task in self.threads.items() if name not in self.offline]
        return (bool(online) and all(task.done() for task in self.threads.values())) or all(c.done() for c in clients)

    async def _shutdown(self, server: ProcessorServer | None, clients: list[asyncio.Future[Any]]) -> None:
        """Stop the trainers (each saves a checkpoint), then the env clients, the server and the envs.

        ``server`` is None when the run failed before creating it.
        """
        self.trainer_stop.set()
        await asyncio.gather(*self.threads.values(), return_exceptions=True)
        if self.progress is not None:  # after the trainers' last summaries: the last bar shows their figures
            self.progress.close()
            self.progress = None
        if server is not None:
            self._drop_trainer_queues(server)
        await self._stop_clients(clients)
        if server is not None:
            await server.stop(STOP_GRACE_S)
        if self.metrics is not None:
            self.metrics.stop()
        for env in self.envs.values():
            close_vector_env(env)
        self._write_results()

    def _drop_trainer_queues(self, server: ProcessorServer) -> None:
        """No trainer acks any more: its queues go, so no env client waits for room on a full topic, and the sessions'
        last flushes are dropped without a warning."""
        for name in self.envs or [n for n in self.loops if n not in self.offline]:
            topic = server.topics.trajectories(name)
            topic.remove(TRAINER_SUBSCRIBER)  # logs how many it discards
            topic.expect_no_subscribers()

    async def _stop_clients(self, clients: list[asyncio.Future[Any]]) -> None:
        """The env clients (and Unity) told to stop, given ``CLIENT_STOP_TIMEOUT_S``, then cancelled; with
        --inference, the episode returns of each env client that ended cleanly are logged."""
        self.env_stop.set()
        if self.unity is not None:
            await self.unity.stop()  # the builds first (SIGTERM), then their gateways, which close their sessions
        _, pending = await asyncio.wait(clients, timeout=CLIENT_STOP_TIMEOUT_S) if clients else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        if self.plan.inference:
            for name, task in zip(self.envs, clients, strict=False):
                if task.done() and not task.cancelled() and task.exception() is None:
                    _log_inference_returns(name, task.result())

    def _write_results(self) -> None:
        """Each trainer's last line: steps, episodes, its latest mean reward (offline BC: none), policy version."""
        for name, loop in self.loops.items():
            result = loop.result
            summary = self.summaries.get(name, LatestSummary())
            reward = "" if summary.latest is None else f", mean reward {summary.describe(result.steps)}"
            write_result(
                f"{name}: {result.steps} steps, {result.episodes} episodes{reward}, policy version {result.policy_version}",
                __name__,
            )


def _raise_failed(clients: list[asyncio.Future[Any]]) -> None:
    """Raise the error of an env client (or Unity source) that ended with one: it fails the run."""
    for task in clients:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


def _log_inference_returns(name: str, stats: RunStats) -> None:
    returns = stats.episode_returns
    means = ", ".join(
        f"{sum(returns[-k:]) / len(returns[-k:]):.3f} (last {min(k, len(returns))})" for k in INFERENCE_WINDOWS if returns
    )
    write_result(f"{name}: inference ran {len(returns)} episodes; mean return {means or 'n/a'}", __name__)


class LatestSummary:
    """A trainer's metric sink that keeps its latest summary with a finished episode (``trainer.summaries``).

    The bar's R and the run's last line show this figure, the very one of the summary lines and of
    TensorBoard's ``Environment/Cumulative Reward``: the mean reward of the episodes that ended in one
    ``summary_freq`` period. A period without an episode leaves the one before. Written from the trainer's
    thread, read from the event loop's: one tuple, replaced whole.
    """

    def __init__(self) -> None:
        self.latest: tuple[float, int] | None = None
        """``(mean reward, step of the summary)``."""

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        if metrics.get(EPISODES, 0) > 0:
            self.latest = (float(metrics[CUMULATIVE_REWARD]), step)

    def close(self) -> None:
        pass

    def shown(self) -> str:
        """The bar's R: one decimal, or ``n/a`` before the first summary with an episode."""
        return "n/a" if self.latest is None else f"{self.latest[0]:.1f}"

    def describe(self, final_step: int) -> str:
        """The run's last line: ``500.000``, with ``(summary at step N)`` when that summary came before
        ``final_step``; ``n/a`` before the first summary with an episode."""
        if self.latest is None:
            return "n/a"
        reward, step = self.latest
        return f"{reward:.3f}" if step == final_step else f"{reward:.3f} (summary at step {step})"


class _Progress:
    """A live bar per behavior toward max_steps (``cli.console.progress_bar``): agent steps/s over the last
    ``RATE_WINDOW_S`` (offline BC: demonstration steps/s), the latest summary's mean reward (``LatestSummary``),
    policy version, time since the process started. ``server`` is None when only offline BC runs.

    On a terminal the log lines print above the bar (one console, ``cli.console.terminal``), and the summary
    lines, which the bar shows live, are thinned to one per ``CONSOLE_SUMMARY_INTERVAL_S`` per behavior.
    """

    def __init__(self, run: EmbeddedRun, server: ProcessorServer | None) -> None:
        self.run = run
        self.server = server
        self.progress = progress_bar()
        self.tasks: dict[str, TaskID] = {}
        self._rates: dict[str, StepRate] = {}
        self._add_new()
        log.info(
            "progress: steps/s over the last %.0f s, R = mean reward of the latest summary, v = policy version, "
            "time since start",
            RATE_WINDOW_S,
        )
        self._throttled: list[logging.Handler] = []
        if terminal().is_terminal:
            self._throttle = SummaryThrottle()
            self._throttled = list(logging.getLogger().handlers)
            for handler in self._throttled:
                handler.addFilter(self._throttle)
        self.progress.start()

    def _add_new(self) -> None:
        """A bar for every behavior without one: the envs' and offline ones at the start, Unity's as it declares them."""
        for name in [*self.run.envs, *self.run.offline, *self.run.declared]:
            if name not in self.tasks:
                total = self.run._settings(name).max_steps
                self.tasks[name] = self.progress.add_task(
                    name, total=total, rate=0.0, reward="n/a", version=-1, elapsed="0:00:00"
                )
                self._rates[name] = StepRate()

    def update(self) -> None:
        self._add_new()
        now = time.monotonic()
        elapsed = format_elapsed(time.time() - self.run.started_at)
        for name, task in self.tasks.items():
            loop = self.run.loops.get(name)
            steps = loop.result.steps if loop is not None else self._processed(name)
            rate = self._rates[name].update(now, steps)
            if loop is not None:
                version = loop.result.policy_version
            else:
                version = -1 if self.server is None else self.server.topics.policies(name).highest_version
            shown = self.run.summaries.get(name, LatestSummary()).shown()  # n/a: no episode yet, or none (offline BC)
            self.progress.update(task, completed=steps, rate=rate, reward=shown, version=version, elapsed=elapsed)

    def _processed(self, name: str) -> int:
        behavior = None if self.server is None else self.server.behaviors.get(name)
        return 0 if behavior is None else behavior.counters.published_experiences

    def close(self) -> None:
        self.update()
        self.progress.stop()
        for handler in self._throttled:
            handler.removeFilter(self._throttle)


def options_from_args(args: argparse.Namespace) -> TrainOptions:
    """The ``TrainOptions`` of the ``train`` subcommand's flags."""
    return replace(
        TrainOptions(Path(args.config)),
        run_id=args.run_id,
        results_dir=Path(args.results_dir),
        resume=args.resume,
        force=args.force,
        inference=args.inference,
        env_flags=EnvFlags(args.env, args.num_envs, args.seed),
        max_steps=args.max_steps,
        deterministic=args.deterministic,
        initialize_from=args.initialize_from,
        # JSON logs are one object per line: no live bar among them.
        progress=not args.no_progress and getattr(args, "log_format", "text") != "json",
        metrics=metrics_from_args(args),
        serve=getattr(args, "serve", None),
    )
