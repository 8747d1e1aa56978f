"""Behavioural cloning from ``demo_path`` alone, with no env: a bc behavior that no env hosts.

``OfflineTrainer.run`` is ``trainer.loop.TrainerLoop``'s twin for a ``BCLearner`` without an env:
each iteration is one ``BCLearner.offline_update`` (``num_epoch`` shuffled passes over the
training rows in minibatches of ``batch_size``), then the next policy version is exported and,
when a sink is given, published. Steps count the demonstration experiences trained on
(``num_epoch`` x training rows per update), so ``max_steps`` bounds the run: about
``max_steps / rows`` epochs, the last update may overshoot by less than one. Summaries (console,
TensorBoard, ``training_status.json``) every ``summary_freq`` steps, checkpoints every
``checkpoint_interval`` steps and at the end, each with its ``.policy.pb`` (which
``stepstream train --inference`` and ``stepstream record --checkpoint`` run), then
``<behavior>/bc_metrics.json``.

The helpers here also load demonstrations for online BC (``load_demonstrations``), turning the
reader's errors into ``ConfigError``s that name the config key.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path

from common.config import BehaviorSettings
from common.demo import DemoError, load_demonstration
from common.errors import ConfigError, NotSupportedYetError
from common.specs import BrainParameters
from common.topics import PolicySink
from protos import pb
from trainer.bc import BCLearner
from trainer.checkpoint import Checkpointer
from trainer.learner import Learner
from trainer.loop import CHECKPOINTS_DIR, INTERRUPTED, MAX_STEPS, STOPPED, TrainerResult, next_multiple
from trainer.summaries import POLICY_VERSION, UPDATE_SECONDS, PeriodStats, Summaries

logger = logging.getLogger(__name__)


def demo_key(behavior_name: str) -> str:
    """The dotted config key of a bc behavior's demonstrations."""
    return f"behaviors.{behavior_name}.hyperparameters.demo_path"


def _demo_path(behavior_name: str, settings: BehaviorSettings) -> str:
    if settings.demo_path is None:
        raise ConfigError(f"behaviors.{behavior_name}.trainer_type: {settings.trainer_type.value} has no demo_path")
    return settings.demo_path


def offline_brain_parameters(behavior_name: str, settings: BehaviorSettings) -> BrainParameters:
    """The spec of an offline bc behavior: its demonstration's, under the behavior's name.

    Raises:
        ConfigError: the demonstration cannot be read (the message names the config key).
        NotSupportedYetError: it holds image observations.
    """
    path = _demo_path(behavior_name, settings)
    try:
        spec = load_demonstration(path).spec
    except DemoError as err:
        raise ConfigError(f"{demo_key(behavior_name)}: {err}") from err
    if any(len(o.shape) == 3 for o in spec.observation_specs):
        shapes = [list(o.shape) for o in spec.observation_specs]
        raise NotSupportedYetError(f"{demo_key(behavior_name)}: image observations {shapes} are not supported yet")
    return BrainParameters(behavior_name, spec.observation_specs, spec.action_spec)


def load_demonstrations(learner: Learner, behavior_name: str, settings: BehaviorSettings) -> int:
    """``learner.load_demonstrations(demo_path)`` for a ``BCLearner``; returns the training rows.

    Raises:
        ConfigError: a missing path, a wrong extension, a bad file, or a spec that differs from the
            behavior's; the message names the config key.
        TypeError: ``learner`` is not a ``BCLearner``.
    """
    if not isinstance(learner, BCLearner):
        raise TypeError(f"{behavior_name}: demonstrations need a BCLearner, got {type(learner).__name__}")
    path = _demo_path(behavior_name, settings)
    try:
        return learner.load_demonstrations(path)
    except DemoError as err:
        raise ConfigError(f"{demo_key(behavior_name)}: {err}") from err


def make_offline_learner(behavior_name: str, settings: BehaviorSettings, seed: int) -> BCLearner:
    """A ``BCLearner`` shaped by the demonstration's spec, its demonstrations loaded (errors as above)."""
    learner = BCLearner(offline_brain_parameters(behavior_name, settings), settings, seed)
    load_demonstrations(learner, behavior_name, settings)
    return learner


class OfflineTrainer:
    """Clones ``demo_path`` for one behavior until ``max_steps`` or ``stop`` (module docstring).

    Args:
        behavior_name: the behavior.
        learner: a ``BCLearner`` with its demonstrations loaded.
        settings: the behavior's settings.
        results_dir: ``results/<run-id>``; None writes no files.
        run_started_at: epoch seconds at the start of the run's first process.
        policy_sink: where each version goes, or None (the checkpoints keep them).
        resume: restore the newest checkpoint first.
    """

    def __init__(
        self,
        behavior_name: str,
        learner: BCLearner,
        settings: BehaviorSettings,
        *,
        results_dir: Path | None,
        run_started_at: float,
        policy_sink: PolicySink[pb.PolicyUpdate] | None = None,
        resume: bool = False,
    ) -> None:
        self.behavior_name = behavior_name
        self.learner = learner
        self.settings = settings
        self._results_dir = results_dir
        self._sink = policy_sink
        self._resume = resume
        self.checkpointer = (
            None
            if results_dir is None
            else Checkpointer(results_dir / behavior_name / CHECKPOINTS_DIR, learner, settings.keep_checkpoints)
        )
        self.summaries = Summaries(behavior_name, results_dir, run_started_at)
        self.result = TrainerResult(behavior_name)
        """Live while running (read it from another thread only for monitoring)."""
        self._policy: pb.PolicyUpdate | None = None
        self._summarized_step: int | None = None

    def run(self, stop: threading.Event | None = None) -> TrainerResult:
        """Train until ``max_steps``, ``stop`` or Ctrl-C; then summary, checkpoint and ``bc_metrics.json``."""
        started = time.monotonic()
        result = self.result
        try:
            period = self._start()
            try:
                period = self._train(period, stop)
                result.stopped_by = MAX_STEPS if result.steps >= self.settings.max_steps else STOPPED
            except KeyboardInterrupt:
                result.stopped_by = INTERRUPTED
                logger.info("%s: interrupted; saving a checkpoint", self.behavior_name)
            result.wall_seconds = time.monotonic() - started
            self._finish(period)
        finally:
            self.summaries.close()
        logger.info(
            "%s: offline BC stopped (%s) at step %d, policy version %d, %d updates, final cloning loss %.4f",
            self.behavior_name,
            result.stopped_by,
            result.steps,
            result.policy_version,
            result.updates,
            self.learner.last_loss,
        )
        return result

    def _start(self) -> PeriodStats:
        result = self.result
        if self._resume and self.checkpointer is not None:
            restored = self.checkpointer.restore_latest()
            if restored is not None:
                result.steps, result.policy_version = restored
                result.resumed_from = restored[0]
        if self._sink is not None:
            result.policy_version = max(result.policy_version, self._sink.highest_version)
        logger.info(
            "%s: offline BC from %s, %d training rows, until %d demonstration steps",
            self.behavior_name,
            self.learner.demo_path,
            self.learner.demonstrations.num_experiences,
            self.settings.max_steps,
        )
        return PeriodStats(result.steps)

    def _train(self, period: PeriodStats, stop: threading.Event | None) -> PeriodStats:
        """Updates until max_steps or ``stop``; returns the summary period still open."""
        result, settings = self.result, self.settings
        next_summary = next_multiple(result.steps, settings.summary_freq)
        next_checkpoint = next_multiple(result.steps, settings.checkpoint_interval)
        while result.steps < settings.max_steps and not (stop is not None and stop.is_set()):
            update_started = time.monotonic()
            metrics, steps = self.learner.offline_update()
            result.steps += steps
            result.updates += 1
            self._publish()
            period.add_learner_metrics({**metrics, UPDATE_SECONDS: time.monotonic() - update_started})
            if result.steps >= next_summary:
                self._summarize(period)
                period = PeriodStats(result.steps)
                next_summary = next_multiple(result.steps, settings.summary_freq)
            if result.steps >= next_checkpoint:
                self._checkpoint()
                next_checkpoint = next_multiple(result.steps, settings.checkpoint_interval)
        return period

    def _finish(self, period: PeriodStats) -> None:
        result = self.result
        if period.learner or self._summarized_step != result.steps:
            self._summarize(period)
        if self._policy is None:  # nothing trained (resumed at max_steps): still leave a runnable policy
            self._publish()
        if self.checkpointer is not None and (not result.checkpoints or result.checkpoints[-1] != result.steps):
            self._checkpoint()
        if self._results_dir is not None:
            self.learner.write_report(self._results_dir / self.behavior_name)

    def _publish(self) -> None:
        version = self.result.policy_version + 1
        self._policy = self.learner.export_policy(version, self.result.steps)
        if self._sink is not None and not self._sink.publish(self._policy, version):
            raise RuntimeError(f"{self.behavior_name}: policy sink refused version {version}")
        self.result.policy_version = version

    def _summarize(self, period: PeriodStats) -> None:
        metrics = period.summary(self.result.steps)
        metrics[POLICY_VERSION] = float(self.result.policy_version)
        self.summaries.write(metrics, self.result.steps)
        self._summarized_step = self.result.steps
        self._write_status()

    def _checkpoint(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.save(self.result.steps, self.result.policy_version, self._policy)
            self.result.checkpoints.append(self.result.steps)
            self._write_status()

    def _write_status(self) -> None:
        checkpoints = [] if self.checkpointer is None else self.checkpointer.checkpoints()
        self.summaries.update_status(
            {
                "steps": self.result.steps,
                "episodes": 0,
                "mean_reward": None,
                "wall_seconds": round(self.summaries.wall_seconds(), 3),
                "policy_version": self.result.policy_version,
                "updates": self.result.updates,
                "cloning_loss": None if math.isnan(self.learner.last_loss) else self.learner.last_loss,
                "checkpoints": [
                    {"steps": c.step, "policy_version": c.version, "path": c.path, "wall_time": c.wall_time}
                    for c in checkpoints
                ],
            }
        )
