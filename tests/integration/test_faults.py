"""Faults with real processes on loopback: what each does to the stack, and how long recovery takes.

Every service runs as ``test_stack.py`` runs it (the real ``stepstream`` commands, one process each); the
processor's state is read from its Prometheus endpoint (``--metrics-port``), never from inside it. Each
test logs one ``FAULT`` line per fault: what happened, and the recovery time in seconds.

1. **An env client killed with SIGKILL** mid-episode (``tests.fault_client``, the real SDK, rows known in
   advance): the processor reclaims its session within ``RECLAIM_DEADLINE_S`` (2 s, the issue's bound),
   flushes each agent's partial trajectory as interrupted (README, "Session end flushes"), keeps serving
   another client, and the client restarted with the same id starts clean: its agents are first sightings.
2. **A SAC trainer killed with SIGKILL, restarted with --resume**, then **the processor killed with SIGKILL
   and restarted** on the same port, in one run (each trainer start costs a TensorFlow import): the
   processor keeps acting with the last policy while the trainer is gone; the trainer resumes from its
   newest checkpoint with its step, policy version and replay buffer; after the processor's restart the
   env client reconnects with backoff, the trainer resubscribes and publishes above every earlier
   version, new episodes arrive, and every process still stops cleanly (nothing deadlocked).
3. **A trainer paused** (SIGSTOP, then SIGCONT) under ``block`` and under ``drop_oldest``
   (``stepstream processor --full-policy``): under ``block`` the env client stalls, and stays stalled after the
   processor drops the hung trainer's connection (the trainer stays paused until then, and ``STALL_SETTLE_S``
   more); under ``drop_oldest`` (``DROP_PAUSE_S``) it goes on and the drops are counted; either way the processor's
   RSS grows by at most its queue capacity in bytes plus ``RSS_MARGIN_BYTES``, and training carries on after
   SIGCONT. The pauses make these ``learning`` tests (``make test`` and CI run them, ``make test-fast`` does not).
4. **An env client hung** (SIGSTOP, socket open): the processor reclaims its session within its keepalive bound
   (``HUNG_RECLAIM_DEADLINE_S``), and **the processor stopped with SIGTERM** while a session is open: the session's
   partial trajectories reach the attached subscriber before its stream ends, and the log holds no traceback.

The only timed assertions are the issue's 2 s reclaim bound and the hung peers' 30 s (an env client's, a paused
trainer's; each polled against a deadline); every other wait is a generous liveness bound. The processor processes
are stopped (or killed) at teardown, also on failure.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from common.buffer import AgentBuffer
from common.errors import TopicClosedError
from common.topics import TRAINER_SUBSCRIBER
from common.topics.grpc_transport import GrpcPolicyPublisher, GrpcTrajectorySubscription
from common.trajectory import Trajectory
from tests import fault_client
from tests.integration.test_stack import REPO, STOP_TIMEOUT_S, Stack, serving
from tests.policies import build_mlp_policy_update
from tests.ports import PortReservation
from tests.scrape import scrape

logger = logging.getLogger(__name__)

RECLAIM_DEADLINE_S = 2.0
"""The issue's bound: a SIGKILLed env client's session is reclaimed (sessions, flush counters) within it."""
LIVENESS_S = 90.0
"""Bound on every other wait (processes up, training, recovered); generous: the machine is shared."""
POLL_S = 0.1
RECLAIM_POLL_S = 0.02
DROP_PAUSE_S = 10.0
"""The pause under ``drop_oldest``: long enough for drops, which is all it shows beyond ``block``."""
STALL_SETTLE_S = 5.0
"""Time a paused trainer's queue takes to fill; after it, a ``block`` env client must not step."""
HUNG_RECLAIM_DEADLINE_S = 30.0
"""Bound on dropping a SIGSTOPped peer (an env client's session, a paused trainer's subscription). The processor
disconnects a hung peer within ``ServerOptions.hung_peer_bound_s`` (15 s) of its last frame, 20 s in the README;
30 s here is generous. Before the server bounded every ping's timeout (not only the keepalive's), it took 60 s."""
RSS_MARGIN_BYTES = 50 * 1024 * 1024
SIMPLE_BEHAVIOR = "Simple1D"

FAULTS_CONFIG = """
behaviors:
  Faults:
    trainer_type: ppo
    time_horizon: 64
"""
"""The processor's config for ``tests.fault_client`` (no trainer runs: the test publishes the policy)."""

SAC_CONFIG = """
behaviors:
  Simple1D:
    trainer_type: sac
    hyperparameters:
      batch_size: 256      # with time_horizon 4: a queue of 64 trajectories
      buffer_size: 1000000 # never truncated: the replay buffer holds exactly the trainer's steps
      buffer_init_steps: 0
      steps_per_update: 50 # few gradient steps: a quick trainer
      save_replay_buffer: true
    network_settings:
      hidden_units: 16
      num_layers: 1
    max_steps: 10000000
    time_horizon: 4
    summary_freq: 200
    checkpoint_interval: 200
    keep_checkpoints: 3
env_settings:
  env_path: simple:continuous
  num_envs: 4
  seed: 0
"""

PPO_CONFIG = """
behaviors:
  Simple1D:
    trainer_type: ppo
    hyperparameters:
      batch_size: 16
      buffer_size: 64
      num_epoch: 1
    network_settings:
      hidden_units: 16
      num_layers: 1
    max_steps: 10000000
    time_horizon: 16
    summary_freq: 500
    checkpoint_interval: 500
    keep_checkpoints: 2
env_settings:
  env_path: simple:discrete
  num_envs: 8
  seed: 0
"""
"""The paused trainer's config: PPO's queue is max(2, buffer_size / time_horizon) = 4 trajectories."""


# -- harness -------------------------------------------------------------------------------------


class FaultStack(Stack):
    """``Stack`` plus ``tests.fault_client`` processes, signals, and reading a service's log."""

    def __enter__(self) -> FaultStack:
        return self

    def start(self, name: str, *args: str, oneshot: bool = False) -> subprocess.Popen[bytes]:
        """``Stack.start``; a service started again after ``kill`` is watched by ``check_running`` again."""
        self.oneshots.discard(name)
        return super().start(name, *args, oneshot=oneshot)

    def start_client(self, name: str, *args: str, oneshot: bool = False) -> subprocess.Popen[bytes]:
        """Run ``python -m tests.fault_client *args`` as service ``name``."""
        assert name not in self.processes or self.processes[name].poll() is not None, f"{name} is running"
        self.oneshots.discard(name)
        with open(self.log_dir / f"{name}.log", "ab") as log_file:
            command = [sys.executable, "-m", "tests.fault_client", *args]
            process = subprocess.Popen(command, cwd=REPO, env=self._env, stdout=log_file, stderr=subprocess.STDOUT)
        self.processes[name] = process
        if oneshot:
            self.oneshots.add(name)
        return process

    def kill(self, name: str) -> float:
        """SIGKILL service ``name`` and reap it; returns the monotonic time of the signal."""
        process = self.processes[name]
        killed_at = time.monotonic()
        process.kill()
        process.wait(STOP_TIMEOUT_S)
        self.oneshots.add(name)  # exited on purpose: check_running must not complain until it is restarted
        return killed_at

    def log_offset(self, name: str) -> int:
        path = self.log_dir / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def log_text(self, name: str, offset: int = 0) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_bytes()[offset:].decode("utf-8", errors="replace") if path.exists() else ""

    def wait_for_log(self, name: str, pattern: str, offset: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in service ``name``'s log after ``offset`` (waits for it)."""
        found: list[re.Match[str]] = []

        def matched() -> bool:
            match = re.search(pattern, self.log_text(name, offset))
            if match is not None:
                found.append(match)
            return match is not None

        self.wait_until(matched, f"{name} to log {pattern!r}", LIVENESS_S)
        return found[0]

    @contextmanager
    def paused(self, name: str) -> Iterator[None]:
        """SIGSTOP service ``name`` while inside; SIGCONT on the way out, also on failure."""
        process = self.processes[name]
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)


class Metrics:
    """One service's Prometheus endpoint; every read is a fresh scrape."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the first sample ``name`` whose labels include ``labels``; None if absent or unreachable."""
        try:
            samples = scrape(self.url)
        except (OSError, ValueError):  # not up (yet), or cut off mid-reply
            return None
        for (sample, sample_labels), value in samples.items():
            if sample == name and set(labels.items()) <= set(sample_labels):
                return value
        return None

    def get(self, name: str, **labels: str) -> float:
        """Like ``value``, with an absent sample read as 0 (a counter not yet exported, or a server not up)."""
        value = self.value(name, **labels)
        return 0.0 if value is None else value


def processor_metric(short: str) -> str:
    return f"stepstream_processor_{short}"


def fault(name: str, happened: str, recovered_s: float) -> None:
    """The test's record of one fault (collected for the README's fault table)."""
    logger.warning("FAULT %s | %s | recovered in %.2f s", name, happened, recovered_s)


def write_config(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def start_processor(stack: FaultStack, config: Path, port: int, metrics_port: int, *extra: str) -> None:
    stack.start(
        *("processor", "processor", str(config), "--port", str(port), "--grace-s", "1"),
        *("--metrics-port", str(metrics_port), *extra),
    )
    stack.wait_until(lambda: serving(f"127.0.0.1:{port}"), "processor SERVING", LIVENESS_S)


class Collector:
    """A subscriber on the processor's ``trainer`` queue in a thread of the test: keeps and acks every trajectory."""

    def __init__(self, address: str, behavior_name: str) -> None:
        self.trajectories: list[Trajectory] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._subscription = GrpcTrajectorySubscription(address, behavior_name, TRAINER_SUBSCRIBER)
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                deliveries = self._subscription.get(256, 0.1)
            except TopicClosedError:  # the processor stopped (or went away): nothing more to collect
                return
            with self._lock:
                self.trajectories.extend(d.item for d in deliveries)
            self._subscription.ack([d.tag for d in deliveries])

    def of_session(self, session_id: str) -> list[Trajectory]:
        with self._lock:
            return [t for t in self.trajectories if t.id.session_id == session_id]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        self._subscription.detach()


# -- 1. an env client killed mid-episode ---------------------------------------------------------


def assert_flushed_from_first_sighting(trajectories: list[Trajectory], agents: int, steps: int, offset: float) -> None:
    """One interrupted trajectory per agent, holding exactly the experiences of a session that sent ``steps`` rows.

    Agent ``a``'s experiences pair rows 0..steps-1 (obs ``[offset, a, k]``), so its trajectory starts at row 0's obs
    (a first sighting: nothing of an earlier session) and ends with next_obs = the last row's obs.
    """
    assert sorted(t.id.agent_id for t in trajectories) == list(range(agents)), [t.id for t in trajectories]
    for t in trajectories:
        a = t.id.agent_id
        assert t.length == steps - 1 and t.interrupted and not t.done_reached, (t.id, t.length, t.interrupted)
        want_obs = np.array([[offset, a, k] for k in range(steps - 1)], np.float32)
        np.testing.assert_array_equal(t.obs[0], want_obs, err_msg=f"agent {a}: obs")
        np.testing.assert_array_equal(t.next_obs[0], np.array([offset, a, steps - 1], np.float32), err_msg=f"agent {a}")
        np.testing.assert_array_equal(t.rewards, np.full(steps - 1, fault_client.REWARD, np.float32))
        assert t.episode_reward is None, "an interrupted segment does not end an episode"


def test_env_client_killed_mid_episode_is_reclaimed_and_its_restart_starts_clean(
    tmp_path: Path, ports: PortReservation
) -> None:
    agents, steps, restarted_steps = 4, 10, 6
    port, metrics_port = ports.port(), ports.port()
    address = f"127.0.0.1:{port}"
    processor = Metrics(metrics_port)
    behavior = {"behavior": fault_client.BEHAVIOR}
    config = write_config(tmp_path, "faults.yaml", FAULTS_CONFIG)
    params = fault_client.BRAIN_PARAMETERS
    with FaultStack(tmp_path) as stack:
        start_processor(stack, config, port, metrics_port)
        update = build_mlp_policy_update(params.behavior_name, [(3,)], params.action_spec.to_proto(), version=1, seed=0)
        with GrpcPolicyPublisher(address, params.behavior_name) as publisher:
            assert publisher.publish(update, 1)
        collector = Collector(address, params.behavior_name)
        try:
            stack.start_client(
                "good", address, "good", "--agents", str(agents), "--steps", "3", "--done-every", "5", "--then", "run"
            )
            victim_args = (address, "victim", "--agents", str(agents), "--then")
            stack.start_client("victim", *victim_args, "hold", "--steps", str(steps), "--offset", "1")
            old_session = stack.wait_for_log("victim", r"READY (\S+)").group(1)
            stack.wait_for_log("good", r"READY")
            assert processor.get(processor_metric("sessions")) == 2
            assert processor.get(processor_metric("trajectories_flushed_total"), **behavior) == 0

            # SIGKILL while every agent is mid-episode: each holds steps - 1 experiences, none cut yet.
            killed_at = stack.kill("victim")

            def reclaimed() -> bool:
                return (
                    processor.get(processor_metric("sessions")) == 1
                    and processor.get(processor_metric("trajectories_flushed_total"), **behavior) == agents
                    and processor.get(processor_metric("experiences_flushed_total"), **behavior) == agents * (steps - 1)
                )

            deadline = killed_at + RECLAIM_DEADLINE_S + 5.0  # poll past the bound, to report the real time
            while not reclaimed():
                assert time.monotonic() < deadline, "the killed client's session was never reclaimed"
                time.sleep(RECLAIM_POLL_S)
            reclaim_s = time.monotonic() - killed_at
            assert reclaim_s <= RECLAIM_DEADLINE_S, f"reclaimed after {reclaim_s:.2f} s"
            assert processor.get(processor_metric("behavior_sessions"), **behavior) == 1
            assert processor.get(processor_metric("sessions_closed_total")) == 1

            # The other client is still served.
            served = processor.get(processor_metric("agent_steps_total"), **behavior)
            stack.wait_until(
                lambda: processor.get(processor_metric("agent_steps_total"), **behavior) >= served + 10 * agents,
                "the other client to go on stepping",
                LIVENESS_S,
            )
            fault(
                "env client SIGKILL (4 agents mid-episode)",
                f"session reclaimed, {agents} partial trajectories ({agents * (steps - 1)} experiences) flushed as "
                "interrupted; the other client kept stepping",
                reclaim_s,
            )

            # Restarted with the same id: a new session whose agents are first sightings (no state of the old one).
            offset = stack.log_offset("victim")
            restarted = stack.start_client(
                "victim", *victim_args, "close", "--steps", str(restarted_steps), "--offset", "2", oneshot=True
            )
            assert restarted.wait(LIVENESS_S) == 0, stack.log_tails()
            new_session_id = stack.wait_for_log("victim", r"READY (\S+)", offset).group(1)
            assert new_session_id != old_session
            stack.wait_until(
                lambda: (
                    processor.get(processor_metric("experiences_flushed_total"), **behavior)
                    == agents * (steps - 1 + restarted_steps - 1)
                ),
                "the restarted client's clean close to flush its agents",
                LIVENESS_S,
            )
            assert processor.get(processor_metric("sessions_replaced_total")) == 0, "the dead session was already gone"
            assert processor.get(processor_metric("sessions_opened_total")) == 3
            stack.wait_until(
                lambda: len(collector.of_session(old_session)) == agents == len(collector.of_session(new_session_id)),
                "the subscriber to receive both sessions' flushed trajectories",
                LIVENESS_S,
            )
            assert_flushed_from_first_sighting(collector.of_session(old_session), agents, steps, offset=1.0)
            assert_flushed_from_first_sighting(collector.of_session(new_session_id), agents, restarted_steps, offset=2.0)
            stack.check_running()
        finally:
            collector.close()


# -- 2. a trainer killed and resumed, then the processor killed and restarted --------------------


def newest_complete_checkpoint(checkpoints: Path) -> tuple[int, int] | None:
    """``(step, version)`` of the newest checkpoint whose JSON commit record is written (the checkpointer writes
    the replay buffer, the TF files, then the record, atomically); None while none is."""
    records = [json.loads(path.read_text(encoding="utf-8")) for path in checkpoints.glob("ckpt-*.json")]
    if not records:
        return None
    newest = max(records, key=lambda data: int(data["step"]))
    return int(newest["step"]), int(newest["version"])


def replay_size(checkpoints: Path, step: int) -> int:
    """Experiences in the replay buffer kept with the checkpoint of ``step`` (``extra-<step>/``)."""
    buffer = AgentBuffer()
    buffer.load_from_file(str(checkpoints / f"extra-{step}" / "replay_buffer.hdf5"))
    return buffer.num_experiences


def snapshot_and_kill(stack: FaultStack, checkpoints: Path) -> tuple[int, int, int, float]:
    """Pause the trainer, read its newest complete checkpoint and replay buffer, SIGKILL it.

    Pausing first makes the snapshot consistent: a checkpoint half written when the signal lands is seen
    as incomplete, and the trainer is let run on a little before the next try.

    Returns:
        ``(step, version, replay experiences, monotonic time of the kill)``.
    """
    deadline = time.monotonic() + LIVENESS_S
    while True:
        with stack.paused("trainer"):
            newest = newest_complete_checkpoint(checkpoints)
            if newest is not None:
                size = replay_size(checkpoints, newest[0])
                return (*newest, size, stack.kill("trainer"))
        assert time.monotonic() < deadline, "no complete checkpoint to kill the trainer after"
        time.sleep(0.2)


def test_trainer_killed_resumes_and_processor_killed_restarts(tmp_path: Path, ports: PortReservation) -> None:
    port, metrics_port, trainer_port, env_port = (ports.port() for _ in range(4))
    address = f"127.0.0.1:{port}"
    processor, trainer, env = Metrics(metrics_port), Metrics(trainer_port), Metrics(env_port)
    behavior = {"behavior": SIMPLE_BEHAVIOR}
    queue = {"behavior": SIMPLE_BEHAVIOR, "subscriber": TRAINER_SUBSCRIBER}
    config = write_config(tmp_path, "sac.yaml", SAC_CONFIG)
    results = tmp_path / "results"
    checkpoints = results / "faults" / SIMPLE_BEHAVIOR / "checkpoints"
    trainer_args = (
        *("trainer", str(config), "--behavior", SIMPLE_BEHAVIOR, "--processor", address, "--seed", "0"),
        *("--results-dir", str(results), "--run-id", "faults", "--metrics-port", str(trainer_port)),
    )
    with FaultStack(tmp_path) as stack:
        start_processor(stack, config, port, metrics_port)
        stack.start("trainer", *trainer_args)
        stack.start("env", "env", str(config), "--processor", address, "--client-id", "env-0", "--metrics-port", str(env_port))
        stack.wait_until(
            lambda: (
                (newest_complete_checkpoint(checkpoints) or (0, 0))[0] >= 400
                and processor.get(processor_metric("policy_version"), **behavior) >= 2
            ),
            "two checkpoints and policy version 2",
            LIVENESS_S,
        )

        # -- the trainer dies: the processor acts on with its last policy.
        step, version, saved_replay, killed_at = snapshot_and_kill(stack, checkpoints)
        assert saved_replay == step, "a fresh SAC trainer's replay buffer holds every experience it took in"
        last_version = int(processor.get(processor_metric("policy_version"), **behavior))
        stack.wait_until(
            lambda: processor.get(processor_metric("queue_attached"), **queue) == 0,
            "the processor to notice the trainer's subscription is gone",
            LIVENESS_S,
        )
        detached_s = time.monotonic() - killed_at
        # The dead trainer held the whole queue unacknowledged (its reader buffers what it has not taken yet), so
        # under `block` the running env client waits for room. A new one is still answered, with the last policy,
        # for the steps that cut no trajectory (its first 3: time_horizon 4); its close then waits on the full queue.
        requests = processor.get(processor_metric("inference_requests_total"), **behavior)
        probe = stack.start(
            *("probe", "env", str(config), "--processor", address, "--client-id", "probe", "--max-env-steps", "3"),
            oneshot=True,
        )
        assert probe.wait(LIVENESS_S) == 0
        assert processor.get(processor_metric("inference_requests_total"), **behavior) >= requests + 3
        assert processor.get(processor_metric("blocked_publishers"), **behavior) >= 1
        assert processor.get(processor_metric("acting_policy_version"), **behavior) == last_version
        assert processor.get(processor_metric("policy_version"), **behavior) == last_version
        assert serving(address)

        # -- restarted with --resume: the checkpoint's step, version and replay buffer come back.
        offset = stack.log_offset("trainer")
        restarted_at = time.monotonic()
        stack.start("trainer", *trainer_args, "--resume")
        restored = stack.wait_for_log("trainer", r"restored \S+ \(step (\d+), policy version (\d+)\)", offset)
        assert (int(restored.group(1)), int(restored.group(2))) == (step, version)
        started = stack.wait_for_log("trainer", r"trainer started at step (\d+) with policy version (\d+)", offset)
        assert int(started.group(1)) == step and int(started.group(2)) > last_version, started.group(0)
        stack.wait_until(
            lambda: (
                processor.get(processor_metric("acting_policy_version"), **behavior) > last_version
                and trainer.get("stepstream_trainer_step", **behavior) > step
            ),
            "the resumed trainer to publish above the last version and take in new experiences",
            LIVENESS_S,
        )
        fault(
            "SAC trainer SIGKILL, restarted with --resume",
            f"processor kept acting with version {last_version} (noticed the detach in {detached_s:.2f} s); "
            f"resumed at step {step}, version {version}, replay buffer {saved_replay} experiences, "
            f"published {int(started.group(2))}",
            time.monotonic() - restarted_at,
        )

        # -- the processor dies and restarts on the same port.
        versions_before = int(processor.get(processor_metric("policy_version"), **behavior))
        episodes_before = trainer.get("stepstream_trainer_episodes_total", **behavior)
        stack.kill("processor")
        restarted_at = time.monotonic()
        start_processor(stack, config, port, metrics_port)

        def recovered() -> bool:
            return (
                processor.get(processor_metric("acting_policy_version"), **behavior) > versions_before
                and processor.get(processor_metric("agent_steps_total"), **behavior) > 0
                and trainer.get("stepstream_trainer_episodes_total", **behavior) > episodes_before + 4
                and trainer.get("stepstream_trainer_reconnects_total", **behavior) >= 1
                and env.get("stepstream_env_sessions_total", behavior=SIMPLE_BEHAVIOR, client_id="env-0") >= 2
            )

        stack.wait_until(recovered, "env client and trainer back, new episodes above the old versions", LIVENESS_S)
        recovered_s = time.monotonic() - restarted_at
        assert env.get("stepstream_env_reconnects_total", behavior=SIMPLE_BEHAVIOR, client_id="env-0") >= 1
        fault(
            "processor SIGKILL, restarted on the same port",
            f"env client reconnected ({int(env.get('stepstream_env_reconnects_total', **behavior))} retries), trainer "
            f"resubscribed and published {int(processor.get(processor_metric('policy_version'), **behavior))} "
            f"> {versions_before}, new episodes",
            recovered_s,
        )

        # -- nothing deadlocked: every service stops cleanly; the final replay buffer still holds every step.
        for name in ("env", "trainer", "processor"):
            assert stack.stop(name) == 0, f"{name} did not exit cleanly"
    status = json.loads((results / "faults" / "run_logs" / "training_status.json").read_text(encoding="utf-8"))[
        SIMPLE_BEHAVIOR
    ]
    final = newest_complete_checkpoint(checkpoints)
    assert final is not None and final[0] == status["steps"], "the trainer's last checkpoint is at its last step"
    assert replay_size(checkpoints, final[0]) == status["steps"] > step, "the replay buffer did not come back whole at resume"


# -- 3. a trainer paused ---------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


TRAJECTORY_OVERHEAD_BYTES = 4096
"""A trajectory's Python objects beyond its arrays (dataclass, ndarray headers, id), generously."""


def trajectory_bytes(time_horizon: int) -> int:
    """Upper bound of one simple:discrete trajectory in memory: per experience obs and next obs (float32 [1]), action,
    previous action and log-prob (one branch: int32 / float32), mask [2], reward, done and version (int64)."""
    per_experience = 4 + 4 + 3 * 4 + 2 + 4 + 1 + 8
    return time_horizon * per_experience + TRAJECTORY_OVERHEAD_BYTES


def sample_while(seconds: float, every_s: float, sample: Callable[[], None]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sample()
        time.sleep(every_s)


def sample_until(done: Callable[[], bool], what: str, deadline_s: float, every_s: float, sample: Callable[[], None]) -> float:
    """``sample()`` every ``every_s`` until ``done()``; returns the seconds that took, fails after ``deadline_s``."""
    start = time.monotonic()
    while True:
        sample()
        took = time.monotonic() - start
        if done():
            return took
        assert took < deadline_s, f"not {what} after {deadline_s:.0f} s"
        time.sleep(every_s)


@pytest.mark.learning
@pytest.mark.parametrize("full_policy", ["block", "drop_oldest"])
def test_paused_trainer_stalls_or_drops_within_the_queue_capacity(
    full_policy: str, tmp_path: Path, ports: PortReservation
) -> None:
    port, metrics_port, trainer_port = (ports.port() for _ in range(3))
    address = f"127.0.0.1:{port}"
    processor, trainer = Metrics(metrics_port), Metrics(trainer_port)
    behavior = {"behavior": SIMPLE_BEHAVIOR}
    queue = {"behavior": SIMPLE_BEHAVIOR, "subscriber": "trainer"}
    config = write_config(tmp_path, "ppo.yaml", PPO_CONFIG)
    with FaultStack(tmp_path) as stack:
        start_processor(stack, config, port, metrics_port, "--full-policy", full_policy)
        pid = stack.processes["processor"].pid
        stack.start(
            *("trainer", "trainer", str(config), "--behavior", SIMPLE_BEHAVIOR, "--processor", address, "--seed", "0"),
            *("--results-dir", str(tmp_path / "results"), "--run-id", "pause", "--metrics-port", str(trainer_port)),
        )
        stack.start("env", "env", str(config), "--processor", address, "--client-id", "env-0")
        stack.wait_until(
            lambda: processor.get(processor_metric("policy_version"), **behavior) >= 3, "training under way", LIVENESS_S
        )
        capacity = int(processor.get(processor_metric("queue_capacity"), **queue))
        capacity_bytes = capacity * trajectory_bytes(time_horizon=16)
        baseline = rss_bytes(pid)
        peak = baseline
        steps: list[tuple[float, float]] = []
        attached: list[float] = []

        def sample() -> None:
            nonlocal peak
            peak = max(peak, rss_bytes(pid))
            steps.append((time.monotonic(), processor.get(processor_metric("agent_steps_total"), **behavior)))
            attached.append(processor.get(processor_metric("queue_attached"), **queue))

        dropped_before = processor.get(processor_metric("queue_dropped_total"), **queue)  # a queue of 4 drops even so
        with stack.paused("trainer"):
            paused_at = time.monotonic()
            if full_policy == "block":
                # The pause lasts past the processor's drop of the hung trainer (``hung_peer_bound_s``), so the env
                # client is shown held back by a queue whose subscriber is gone (released only after 60 s).
                detached_s = sample_until(
                    lambda: attached[-1] == 0, "the stalled trainer dropped", HUNG_RECLAIM_DEADLINE_S, 0.5, sample
                )
                sample_while(max(STALL_SETTLE_S, paused_at + 2 * STALL_SETTLE_S - time.monotonic()), 0.5, sample)
            else:
                sample_while(DROP_PAUSE_S, 0.5, sample)
            versions_paused = int(processor.get(processor_metric("policy_version"), **behavior))
            blocked = processor.get(processor_metric("blocked_publishers"), **behavior)
            dropped = processor.get(processor_metric("queue_dropped_total"), **queue) - dropped_before
        resumed_at = time.monotonic()
        pause_s = resumed_at - paused_at
        settled = [value for at, value in steps if at >= paused_at + STALL_SETTLE_S]
        stepped_while_paused = settled[-1] - settled[0]
        growth = peak - baseline
        logger.info(
            "%s: RSS %.1f MB -> peak %.1f MB (growth %.1f MB; bound %.1f MB = %d trajectories x %d B + %d MB)",
            full_policy,
            baseline / 2**20,
            peak / 2**20,
            growth / 2**20,
            (capacity_bytes + RSS_MARGIN_BYTES) / 2**20,
            capacity,
            capacity_bytes // max(capacity, 1),
            RSS_MARGIN_BYTES // 2**20,
        )
        assert growth <= capacity_bytes + RSS_MARGIN_BYTES
        if full_policy == "block":
            assert stepped_while_paused == 0, f"the env client stepped {stepped_while_paused} agent steps while stalled"
            assert blocked >= 1
            assert dropped == 0
        else:
            assert stepped_while_paused > 0, "under drop_oldest the env client must go on"
            assert dropped > 0
            assert (
                processor.get(processor_metric("experiences_dropped_total"), behavior=SIMPLE_BEHAVIOR, reason="unpublished")
                == 0
            )

        # After SIGCONT training carries on: the trainer is subscribed (again, if the processor dropped its stalled
        # connection), two newer policy versions reach the processor (a first one may have been mid-update at
        # SIGSTOP), and the env client steps.
        before = steps[-1][1]
        stack.wait_until(
            lambda: (
                processor.get(processor_metric("queue_attached"), **queue) == 1
                and processor.get(processor_metric("policy_version"), **behavior) >= versions_paused + 2
                and processor.get(processor_metric("agent_steps_total"), **behavior) > before
            ),
            "training to carry on after SIGCONT",
            LIVENESS_S,
        )
        recovered_s = time.monotonic() - resumed_at
        reconnects = trainer.get("stepstream_trainer_reconnects_total", **behavior)
        fault(
            f"trainer SIGSTOP {pause_s:.0f} s under {full_policy}",
            (f"the processor dropped it after {detached_s:.1f} s, " if full_policy == "block" else "")
            + f"env client {'stalled' if full_policy == 'block' else 'went on'} ({stepped_while_paused:.0f} agent steps "
            f"after the first {STALL_SETTLE_S:.0f} s), {dropped:.0f} trajectories dropped in the pause, "
            f"RSS +{growth / 2**20:.1f} MB (bound {(capacity_bytes + RSS_MARGIN_BYTES) / 2**20:.1f} MB), "
            f"trainer resubscribed {reconnects:.0f}x",
            recovered_s,
        )
        for name in ("env", "trainer", "processor"):
            assert stack.stop(name) == 0, f"{name} did not exit cleanly"


# -- 4. a hung env client; the processor's SIGTERM with a session open ---------------------------


def test_hung_env_client_is_reclaimed_within_the_keepalive_bound(tmp_path: Path, ports: PortReservation) -> None:
    agents, steps = 4, 10
    port, metrics_port = ports.port(), ports.port()
    address = f"127.0.0.1:{port}"
    processor = Metrics(metrics_port)
    behavior = {"behavior": fault_client.BEHAVIOR}
    params = fault_client.BRAIN_PARAMETERS
    with FaultStack(tmp_path) as stack:
        start_processor(stack, write_config(tmp_path, "faults.yaml", FAULTS_CONFIG), port, metrics_port)
        update = build_mlp_policy_update(params.behavior_name, [(3,)], params.action_spec.to_proto(), version=1, seed=0)
        with GrpcPolicyPublisher(address, params.behavior_name) as publisher:
            assert publisher.publish(update, 1)
        stack.start_client("hung", address, "hung", "--agents", str(agents), "--steps", str(steps), "--then", "hold")
        stack.wait_for_log("hung", r"READY")
        assert processor.get(processor_metric("sessions")) == 1
        with stack.paused("hung"):
            paused_at = time.monotonic()
            stack.wait_until(
                lambda: (
                    processor.get(processor_metric("sessions")) == 0
                    and processor.get(processor_metric("trajectories_flushed_total"), **behavior) == agents
                ),
                "the hung client's session to be reclaimed and flushed",
                HUNG_RECLAIM_DEADLINE_S,
            )
            reclaim_s = time.monotonic() - paused_at
        fault("env client SIGSTOP (socket open)", f"session reclaimed, {agents} partial trajectories flushed", reclaim_s)
        stack.kill("hung")  # in `hold` it would wait for ever after SIGCONT
        assert stack.stop("processor") == 0


def test_sigterm_delivers_an_open_sessions_flush_before_ending_subscriptions_and_logs_no_traceback(
    tmp_path: Path, ports: PortReservation
) -> None:
    """The flush of a session still open at the end of the grace period was counted as published, but the
    Subscribe streams were cancelled at the same moment: the items were requeued and lost with the process."""
    agents, steps = 4, 10
    port, metrics_port = ports.port(), ports.port()
    address = f"127.0.0.1:{port}"
    params = fault_client.BRAIN_PARAMETERS
    with FaultStack(tmp_path) as stack:
        start_processor(stack, write_config(tmp_path, "faults.yaml", FAULTS_CONFIG), port, metrics_port)
        update = build_mlp_policy_update(params.behavior_name, [(3,)], params.action_spec.to_proto(), version=1, seed=0)
        with GrpcPolicyPublisher(address, params.behavior_name) as publisher:
            assert publisher.publish(update, 1)
        collector = Collector(address, params.behavior_name)
        try:
            stack.start_client("open", address, "open", "--agents", str(agents), "--steps", str(steps), "--then", "hold")
            session_id = stack.wait_for_log("open", r"READY (\S+)").group(1)
            assert collector.of_session(session_id) == [], "nothing is cut before the flush"
            stopped_at = time.monotonic()
            assert stack.stop("processor") == 0  # --grace-s 1: the session outlives it
            stopped_s = time.monotonic() - stopped_at
            flushed = collector.of_session(session_id)
            assert len(flushed) == agents, f"the subscriber got {len(flushed)} of the {agents} flushed trajectories"
            assert_flushed_from_first_sighting(flushed, agents, steps, offset=0.0)
            log = stack.log_text("processor")
            assert "Traceback" not in log, log
            fault("processor SIGTERM with a session open", f"{agents} flushed trajectories delivered, no traceback", stopped_s)
        finally:
            collector.close()
            if stack.processes["open"].poll() is None:
                stack.kill("open")
