"""``stepstream trainer`` and ``stepstream env``: the stack's service processes (docs/architecture.md, "Two topologies").

* ``stepstream trainer CONFIG --behavior NAME`` trains one behavior: it subscribes to the processor's
  ``trajectories/<NAME>`` over gRPC as ``"trainer"`` (the queue the processor declares at start, so
  nothing published earlier is lost), publishes each policy version back, and writes
  ``<results-dir>/<run-id>/<NAME>/`` as ``stepstream train`` does. It sizes its networks from the
  BrainParameters an env client declared, so it first waits for one (logging its progress). When the
  processor goes away the loop checkpoints, waits for it, and resumes above every version it has seen.
  A ``bc`` behavior loads its ``demo_path`` once the learner is built; a ``bc`` behavior that the
  config's ``env_path`` does not host trains **offline** from its demonstrations alone
  (``trainer.offline``): no processor is contacted, and the process exits at ``max_steps``.
* ``stepstream env CONFIG`` steps the config's environments (``gym:<id>``, or the built-in 1-D task
  ``simple:discrete`` / ``simple:continuous``) through one ``EnvSession`` per behavior. After a
  ``RETRYABLE_STATUSES`` failure (a refused connection gives UNAVAILABLE) it reconnects with capped
  exponential backoff and starts new episodes; any other status ends it with a clear error.

Both stop cleanly on SIGTERM or Ctrl-C: the trainer finishes its iteration and checkpoints (a second
signal interrupts it, still checkpointing); env clients finish the step in flight (at most
``ENV_STOP_GRACE_S``) and close their sessions, which flushes their partial trajectories.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.console import load_tensorflow
from cli.flags import MetricsEndpoint, broker_security_from_args, client_security_from_args, metrics_from_args
from cli.ports import check_port_free
from cli.processor_replicas import replica_security, replica_targets
from cli.results import has_checkpoint, prepare_behavior_dir, removed_if_unstarted
from cli.run_config import (
    EnvFlags,
    check_inputs,
    load_run_options,
    offline_behaviors,
    resolve_seed,
    select_behaviors,
    vector_env_settings,
)
from cli.signals import StopSignals, set_soon
from common.clock import process_start_time
from common.config import BehaviorSettings, TrainerType
from common.errors import ConfigError, DeadlineExceededError, StepstreamError, TopicClosedError
from common.logs import log_context
from common.metrics import serve_metrics
from common.security import BROKER_PLAINTEXT, PLAINTEXT, BrokerSecurity, ClientSecurity
from common.specs import BrainParameters
from envclient.envs import open_vector_envs
from envclient.reconnect import ReconnectingEnvClient
from envclient.runner import VectorEnv

log = logging.getLogger(__name__)

DEFAULT_PROCESSOR = "127.0.0.1:50051"
WAIT_POLL_S = 2.0
"""Longest single wait for BrainParameters: how soon a waiting trainer notices a stop."""
WAIT_LOG_INTERVAL_S = 10.0
PROBE_TIMEOUT_S = 2.0
"""How long a waiting trainer's health check of ``--processor`` may take before nothing is taken to answer there."""
RESUBSCRIBE_DELAY_S = 1.0
"""Pause of a trainer that lost the processor before it asks again (no busy loop against a flapping one)."""
ENV_STOP_GRACE_S = 5.0
"""How long a stopping env client lets a step in flight finish (one blocked on a full topic may never) before cancelling."""


@dataclass(frozen=True)
class TrainerOptions:
    """The ``trainer`` subcommand's flags."""

    config: Path
    behavior_name: str
    processor: str = DEFAULT_PROCESSOR
    run_id: str = "ppo"
    results_dir: Path = Path("results")
    resume: bool = False
    seed: int | None = None
    """The learner's seed; None: ``env_settings.seed`` (negative: random)."""
    security: ClientSecurity = PLAINTEXT
    """TLS and the shared token towards the processor."""
    metrics: MetricsEndpoint = field(default_factory=MetricsEndpoint)
    """The Prometheus endpoint (``trainer.metrics``); no port serves none."""
    topics: str | None = None
    """``nats://`` URL of the broker holding the topics; None: the processor's, over gRPC."""
    topics_security: BrokerSecurity = BROKER_PLAINTEXT
    """NATS's TLS and token towards the ``topics`` broker."""


def trainer_options_from_args(args: Any) -> TrainerOptions:
    """The ``TrainerOptions`` of the ``trainer`` subcommand's flags."""
    return TrainerOptions(
        Path(args.config),
        args.behavior,
        args.processor,
        args.run_id,
        Path(args.results_dir),
        args.resume,
        args.seed,
        security=client_security_from_args(args),
        metrics=metrics_from_args(args),
        topics=args.topics,
        topics_security=broker_security_from_args(args),
    )


def run_trainer(options: TrainerOptions) -> int:
    """Train one behavior of the stack until max_steps or SIGTERM/Ctrl-C (module docstring).

    Returns:
        0 after max_steps or a stop signal; 130 when interrupted by a second signal.

    Raises:
        ConfigError: the config does not configure the behavior, or its results folder exists
            without ``--resume``, or the declared BrainParameters changed across a reconnect.
    """
    started_at = process_start_time()
    run_options = load_run_options(options.config)  # config errors surface before TensorFlow's import
    settings = run_options.settings_for(options.behavior_name)
    seed = resolve_seed(options.seed if options.seed is not None else run_options.env_settings.seed)
    check_inputs(options.config, run_options, [options.behavior_name], env_ids=False)
    check_port_free(options.metrics.host, options.metrics.port, "--metrics-port")
    run_dir = options.results_dir / options.run_id
    behavior_dir = run_dir / options.behavior_name
    fresh = not has_checkpoint(behavior_dir)
    if options.resume and fresh:
        log.warning("%s: --resume, but %s holds no checkpoint; starting from scratch", options.behavior_name, behavior_dir)
    prepare_behavior_dir(run_dir, options.behavior_name, run_options, resume=options.resume)
    stop = threading.Event()
    with (
        removed_if_unstarted(behavior_dir, fresh=fresh),
        StopSignals(stop.set, interrupt_on_second=True, what="stopping after the current iteration"),
    ):
        load_tensorflow()  # its native start-up noise filtered out of stderr
        if options.behavior_name in offline_behaviors(run_options):
            return _run_offline(options, settings, run_dir, started_at, seed, stop)
        return TrainerService(options, settings, run_dir, started_at, seed).run(stop)


def _run_offline(
    options: TrainerOptions, settings: BehaviorSettings, run_dir: Path, started_at: float, seed: int, stop: threading.Event
) -> int:
    """Offline BC of a behavior no env hosts; 0 at max_steps or a stop signal, 130 when interrupted."""
    from trainer.loop import INTERRUPTED
    from trainer.offline import offline_loop

    trainer = offline_loop(
        options.behavior_name, settings, seed=seed, results_dir=run_dir, run_started_at=started_at, resume=options.resume
    )
    try:
        trainer.run(stop)
    except KeyboardInterrupt:
        return 130
    return 130 if trainer.result.stopped_by == INTERRUPTED else 0


class TrainerService:
    """One behavior's ``TrainerLoop`` against ``options.processor``, reconnecting when it goes away; ``run_dir``
    is ``results/<run-id>``, ``started_at`` this process's start (epoch seconds)."""

    def __init__(
        self, options: TrainerOptions, settings: BehaviorSettings, run_dir: Path, started_at: float, seed: int
    ) -> None:
        self.options = options
        self.settings = settings
        self.run_dir = run_dir
        self.started_at = started_at
        self.seed = seed
        self.name = options.behavior_name
        from trainer.metrics import TrainerCollector

        self.metrics = TrainerCollector(self.name)
        self.last_result: Any = None
        """The newest loop's ``TrainerResult`` (its steps and version go to ``FinishTraining``)."""
        """What the metrics endpoint (``--metrics-port``) reports; each new loop is attached to it."""

    def run(self, stop: threading.Event) -> int:
        """Serve the metrics endpoint (if asked for) and train, logging with the behavior; see ``_run``."""
        endpoint = serve_metrics(self.options.metrics.host, self.options.metrics.port, self.metrics)
        try:
            with log_context(behavior=self.name):
                return self._run(stop)
        finally:
            if endpoint is not None:
                endpoint.stop()

    def _run(self, stop: threading.Event) -> int:
        """Wait for the behavior's BrainParameters, build the learner, train; see ``run_trainer``."""
        target: Any = self.options.processor
        if self.options.topics:
            # Through a broker any processor of the behavior knows its BrainParameters: --processor may name several
            # (as an env client's does), and each query goes to the next one, balanced by gRPC's round_robin.
            from envclient.reconnect import processor_channel

            target = processor_channel(self.options.processor, self.options.security)
        try:
            return self._run_with(target, stop)
        finally:
            if not isinstance(target, str):
                target.close()

    def _run_with(self, target: Any, stop: threading.Event) -> int:
        """``_run`` with the processor's address or channel ``target``."""
        from common.topics.grpc_transport import GrpcPolicyPublisher
        from trainer.loop import INTERRUPTED, MAX_STEPS
        from trainer.registry import make_learner

        with GrpcPolicyPublisher(target, self.name, security=self.options.security) as publisher:
            params = self._wait_for_brain_parameters(publisher, stop)
            if params is None:
                return 0
            learner = make_learner(params, self.settings, self.seed)
            if self.settings.trainer_type is TrainerType.BC:
                from trainer.offline import load_demonstrations

                load_demonstrations(learner, self.name, self.settings)
            resume = self.options.resume
            while True:
                stopped_by, lost = self._train(learner, publisher, resume, stop)
                if not lost or stop.is_set():
                    break
                resume = True
                self.metrics.reconnects += 1
                log.warning("%s: lost the processor; resuming from the checkpoint once it is back", self.name)
                stop.wait(RESUBSCRIBE_DELAY_S)
                again = self._wait_for_brain_parameters(publisher, stop)
                if again is None:
                    break
                if again != params:
                    raise ConfigError(
                        f"behavior {self.name!r}: the env clients now declare {again}, the trainer was built for {params}"
                    )
            if stopped_by == MAX_STEPS:
                self._report_finished(publisher)
        return 130 if stopped_by == INTERRUPTED else 0

    def _report_finished(self, publisher: Any) -> None:
        """Tell the processor the behavior's training is over, so it ends the env clients (``FinishTraining``);
        with the topics on a broker, every processor replica behind ``--processor`` (``cli.processor_replicas``)."""
        steps, version = self.last_result.steps, self.last_result.policy_version
        told = 0
        for target, each in self._replica_publishers(publisher):
            try:
                each.finish(steps, version)
                told += 1
            except StepstreamError as err:  # the run is done either way; the env clients then end with the processor
                log.warning("%s: could not tell the processor at %s that training finished: %s", self.name, target, err)
            finally:
                if each is not publisher:
                    each.close()
        if told:
            log.info(
                "training of %s finished at step %d (policy version %d); env clients of %d processor(s) told to end",
                self.name, steps, version, told,
            )  # fmt: skip

    def _replica_publishers(self, publisher: Any) -> list[tuple[str, Any]]:
        """``(target, publisher)`` per processor: ``publisher`` alone, unless the topics are on a broker and
        ``--processor`` resolves to several replicas (a new publisher each; the caller closes them)."""
        from common.topics.grpc_transport import GrpcPolicyPublisher

        targets = replica_targets(self.options.processor) if self.options.topics else []
        if len(targets) <= 1:
            return [(self.options.processor, publisher)]
        security = replica_security(self.options.security, self.options.processor)
        return [(target, GrpcPolicyPublisher(target, self.name, security=security)) for target in targets]

    def _wait_for_brain_parameters(self, publisher: Any, stop: threading.Event) -> BrainParameters | None:
        """The behavior's BrainParameters once an env client declared them; None if stopped first."""
        started = last_log = time.monotonic()
        log.info("%s: waiting for an env client to declare the behavior at %s", self.name, self.options.processor)
        self._say_if_nothing_answers()
        while not stop.is_set():
            # Any replica will do (the one `publisher` reached may have no env client yet); asked in turn.
            replicas = self._replica_publishers(publisher)
            try:
                for _, source in replicas:
                    try:
                        params: BrainParameters = source.wait_for_brain_parameters(self.name, timeout_s=WAIT_POLL_S)
                        return params
                    except DeadlineExceededError:
                        pass
            finally:
                for _, source in replicas:
                    if source is not publisher:
                        source.close()
            now = time.monotonic()
            if now - last_log >= WAIT_LOG_INTERVAL_S:
                last_log = now
                log.info("%s: still waiting for an env client to declare it (%.0f s)", self.name, now - started)
                self._say_if_nothing_answers()
        return None

    def _say_if_nothing_answers(self) -> None:
        """A warning when nothing answers at ``--processor``: the wait is then for a processor, not an env client."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        security = self.options.security
        try:
            with security.channel(self.options.processor) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S, metadata=security.metadata())
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):  # type: ignore[attr-defined]
                log.warning(
                    "%s: nothing answers at %s: start the processor there (`stepstream processor CONFIG`), or pass "
                    "--processor HOST:PORT; waiting for it",
                    self.name,
                    self.options.processor,
                )

    def _train(self, learner: Any, publisher: Any, resume: bool, stop: threading.Event) -> tuple[str, bool]:
        """One ``TrainerLoop`` on a new subscription; returns ``(stopped_by, processor_lost)``."""
        from common.topics import TRAINER_SUBSCRIBER
        from common.topics.grpc_transport import GrpcTrajectorySubscription
        from trainer.loop import TOPIC_CLOSED, TrainerLoop

        broker = None
        if self.options.topics:  # trajectories and policies through the broker; BrainParameters still from the processor
            from common.topics.jetstream import open_topics

            broker = open_topics(
                self.options.topics, name=f"trainer/{self.name}", follow_policies=False, security=self.options.topics_security
            )
            subscription: Any = broker.trajectories(self.name).subscribe(TRAINER_SUBSCRIBER)
            publisher = broker.policies(self.name)
        else:
            subscription = GrpcTrajectorySubscription(
                self.options.processor, self.name, TRAINER_SUBSCRIBER, security=self.options.security
            )
        loop = TrainerLoop(
            self.name,
            learner,
            subscription,
            publisher,
            self.settings,
            results_dir=self.run_dir,
            run_started_at=self.started_at,
            seed=self.seed,
            resume=resume,
        )
        self.metrics.attach(loop, subscription)
        self.last_result = loop.result
        try:
            result = loop.run(stop)
        except (TopicClosedError, DeadlineExceededError) as err:
            # A publish failed as the processor went away: keep what was learned since the last checkpoint.
            log.warning("%s: %s", self.name, err)
            if loop.checkpointer is not None and loop.result.policy_version >= 0:
                loop.checkpointer.save(loop.result.steps, loop.result.policy_version)
            return TOPIC_CLOSED, True
        finally:
            subscription.detach()
            if broker is not None:
                broker.close()
        return result.stopped_by, result.stopped_by == TOPIC_CLOSED


@dataclass(frozen=True)
class EnvOptions:
    """The ``env`` subcommand's flags."""

    config: Path
    processor: str = DEFAULT_PROCESSOR
    behavior_name: str | None = None
    """Host only this behavior's env_path entry; None: every entry."""
    num_envs: int | None = None
    """Copies per env_path entry; None: ``env_settings.num_envs``."""
    client_id: str | None = None
    seed: int | None = None
    """None: ``env_settings.seed`` (negative: random)."""
    max_env_steps: int | None = None
    """BrainInfos per behavior at most; None: until stopped."""
    security: ClientSecurity = PLAINTEXT
    """TLS and the shared token towards the processor."""
    metrics: MetricsEndpoint = field(default_factory=MetricsEndpoint)
    """The Prometheus endpoint (``envclient.metrics``); no port serves none."""


def env_options_from_args(args: Any) -> EnvOptions:
    """The ``EnvOptions`` of the ``env`` subcommand's flags."""
    return EnvOptions(
        Path(args.config),
        args.processor,
        args.behavior,
        args.num_envs,
        args.client_id,
        args.seed,
        args.max_env_steps,
        security=client_security_from_args(args),
        metrics=metrics_from_args(args),
    )


def default_client_id() -> str:
    """``<hostname>-<pid>``: distinct for every replica of a scaled service (each has its own hostname)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def run_env_client(options: EnvOptions) -> int:
    """Step the config's environments through the processor until SIGTERM/Ctrl-C or ``max_env_steps``; returns 0.

    Raises:
        ConfigError: no env_path in the config, or ``--behavior`` names none of its behaviors.
        StepstreamError: the processor refused a session with a status retrying cannot fix.
    """
    run_options = load_run_options(options.config, EnvFlags(num_envs=options.num_envs, seed=options.seed))
    behaviors = select_behaviors(options.config, run_options, "env", options.behavior_name)
    check_port_free(options.metrics.host, options.metrics.port, "--metrics-port")
    client_id = options.client_id or default_client_id()
    env_settings = vector_env_settings(run_options, behaviors, run_options.env_settings.seed, client_id)
    with open_vector_envs(env_settings) as envs:
        session_ids = {name: client_id if len(envs) == 1 else f"{client_id}/{name}" for name in envs}
        return asyncio.run(_serve_envs(options, session_ids, envs))


async def _serve_envs(options: EnvOptions, session_ids: Mapping[str, str], envs: Mapping[str, VectorEnv]) -> int:
    """Run one ``ReconnectingEnvClient`` per behavior until all finish, one fails, or a signal."""
    stop = asyncio.Event()
    clients = [
        ReconnectingEnvClient(
            options.processor,
            session_ids[name],
            name,
            env,
            stop,
            max_env_steps=options.max_env_steps,
            security=options.security,
        )
        for name, env in envs.items()
    ]
    from envclient.metrics import EnvCollector

    endpoint = serve_metrics(options.metrics.host, options.metrics.port, EnvCollector(clients))
    try:
        with StopSignals(set_soon(stop)):
            return await _step_until_done(clients, stop)
    finally:
        if endpoint is not None:
            endpoint.stop()


async def _step_until_done(clients: list[ReconnectingEnvClient], stop: asyncio.Event) -> int:
    """Run the clients until all finish, one fails (which stops the others), or ``stop``; 0, or the first failure."""
    tasks = [asyncio.ensure_future(client.run()) for client in clients]
    stopped = asyncio.ensure_future(stop.wait())
    try:
        pending: set[asyncio.Future[Any]] = set(tasks)
        while pending and not stop.is_set():
            done, pending = await asyncio.wait(pending | {stopped}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stopped)
            if any(task is not stopped and task.exception() is not None for task in done):
                stop.set()  # one behavior failed: stop the others
        if pending:
            _, late = await asyncio.wait(pending, timeout=ENV_STOP_GRACE_S)
            for task in late:
                task.cancel()
            if late:
                log.warning("%d env client(s) did not finish their step within %.0f s; cancelled", len(late), ENV_STOP_GRACE_S)
            await asyncio.gather(*late, return_exceptions=True)
    finally:
        stopped.cancel()
    for c in clients:
        log.info("%s: %d env steps, %d episodes, %d retries", c.behavior_name, c.env.steps, c.env.episodes, c.retries)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    return 0
