"""Behavioural cloning from ``demo_path`` alone, with no env: a bc behavior that no env hosts.

Offline BC is ``trainer.loop.TrainerLoop`` like every trainer, with ``DemonstrationPasses`` as its
source instead of a trajectory subscription: each iteration the source queues one update's data
on the ``BCLearner`` (``num_epoch`` shuffled passes over the training rows; ``BCLearner.add_passes``),
the loop runs the update and publishes the next policy version. Steps count the demonstration
experiences trained on (rows per pass, partial last minibatches included, as in an online update),
and the last update's passes are cut so that the run ends exactly at ``max_steps``. The loop writes
the summaries (console, TensorBoard, ``training_status.json``, with no episodes and no reward),
checkpoints every ``checkpoint_interval`` steps and at the end, each with its ``.policy.pb`` (which
``stepstream train --inference`` and ``stepstream record --checkpoint`` run), then
``<behavior>/bc_metrics.json``. The versions go to a private latest-wins ``PolicyTopic`` unless a
sink is given (the checkpoints keep them).

The helpers here also load demonstrations for online BC (``load_demonstrations``), turning the
reader's errors into ``ConfigError``s that name the config key.
"""

from __future__ import annotations

import logging
from pathlib import Path

from common.config import BehaviorSettings
from common.demo import DemoError, load_demonstration
from common.errors import ConfigError, NotSupportedYetError
from common.specs import BrainParameters
from common.topics import PolicySink, PolicyTopic, policy_topic_name
from protos import pb
from trainer.bc import BCLearner
from trainer.learner import Learner
from trainer.loop import TrainerLoop

logger = logging.getLogger(__name__)

OFFLINE_BC = "offline BC"
"""How the loop's start and stop lines name an offline BC trainer."""


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
        return learner.load_demonstrations(path, action_timing=settings.demo_action_timing)
    except DemoError as err:
        raise ConfigError(f"{demo_key(behavior_name)}: {err}") from err


def make_offline_learner(behavior_name: str, settings: BehaviorSettings, seed: int) -> BCLearner:
    """A ``BCLearner`` shaped by the demonstration's spec, its demonstrations loaded (errors as above)."""
    learner = BCLearner(offline_brain_parameters(behavior_name, settings), settings, seed)
    load_demonstrations(learner, behavior_name, settings)
    return learner


class DemonstrationPasses:
    """The offline source of a ``TrainerLoop`` (an ``ExperienceFeed``): one update's passes over the demonstrations per feed.

    Args:
        learner: a ``BCLearner`` with its demonstrations loaded.

    Raises:
        ConfigError: the learner has no training rows (the message names ``demo_path``'s key).
    """

    kind = OFFLINE_BC

    def __init__(self, learner: BCLearner) -> None:
        behavior_name = learner.brain_parameters.behavior_name
        if learner.demonstrations.num_experiences == 0:
            raise ConfigError(f"{demo_key(behavior_name)}: {learner.demo_path} holds no training rows")
        self.learner = learner
        logger.info(
            "%s: offline BC from %s, %d training rows, %d passes per update",
            behavior_name,
            learner.demo_path,
            learner.demonstrations.num_experiences,
            learner.hyperparameters.num_epoch,
        )

    def feed(self, budget: int) -> int:
        """``num_epoch`` passes, the last cut at ``budget`` rows in all; returns the rows queued."""
        return self.learner.add_passes(budget)


def offline_loop(
    behavior_name: str,
    settings: BehaviorSettings,
    *,
    seed: int,
    results_dir: Path | None,
    run_started_at: float,
    resume: bool = False,
    policy_sink: PolicySink[pb.PolicyUpdate] | None = None,
) -> TrainerLoop:
    """The ``TrainerLoop`` of offline BC for ``behavior_name`` (module docstring), its learner built from the demo.

    Args:
        behavior_name: the bc behavior that no env hosts.
        settings: its settings.
        seed: seeds the learner (network initialisation, shuffling).
        results_dir: ``results/<run-id>``; None writes no files.
        run_started_at: epoch seconds at the start of the run's first process.
        resume: restore the newest checkpoint first.
        policy_sink: where each version goes; None: a private ``PolicyTopic``.

    Raises:
        ConfigError: the demonstration cannot be read, or holds no training rows (the message names the key).
        NotSupportedYetError: it holds image observations.
    """
    learner = make_offline_learner(behavior_name, settings, seed)
    sink = policy_sink if policy_sink is not None else PolicyTopic[pb.PolicyUpdate](policy_topic_name(behavior_name))
    return TrainerLoop(
        behavior_name,
        learner,
        DemonstrationPasses(learner),
        sink,
        settings,
        results_dir=results_dir,
        run_started_at=run_started_at,
        seed=seed,
        resume=resume,
    )
