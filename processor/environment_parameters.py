"""The run's environment parameters as the processor serves them: lessons advanced, samplers sent to env clients.

The processor sees what a curriculum's completion criteria need (``common.environment_parameters``):
every episode's end with its cumulative reward (on the trajectory that ends it) and each trainer's
step (on the policy it publishes, ``trainer_step``). So the :class:`Curriculum` lives here, for
both topologies, and the current samplers go to every env client that asked for them on its Step
stream (``StepResponse.environment_parameters``): right after its HelloReply, and again before the
next ActionInfo once a lesson changes, so a change reaches every client within its next episode
(or at once where the lesson asked for ``require_reset``). The lesson of each parameter rides on
each behavior's trajectories as the environment stat ``Environment/Lesson Number/<parameter>``
(most recent), which the trainer writes to TensorBoard, as ML-Agents does for every trainer.

Progress (``measure: progress``) is checked whenever a behavior's acting policy changes: its
``trainer_step`` is the trainer's own count of agent steps, so it is right after a ``--resume``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from common.config import RunOptions
from common.environment_parameters import (
    ACCEPTS_METADATA,
    Curriculum,
    EnvironmentParameter,
    lessons_from_status,
    to_proto,
)
from common.environment_stats import EnvironmentStat
from common.trajectory import Trajectory
from protos import pb

log = logging.getLogger(__name__)


class EnvironmentParameterService:
    """The curriculum, fed from the Step path, and the message that tells clients its current samplers.

    Args:
        parameters: ``RunOptions.environment_parameters``.
        run_seed: the run's resolved seed (unseeded samplers take ``run_seed + k``).
        max_steps: each behavior's ``max_steps`` (progress is ``trainer_step / max_steps``).
        lessons: lessons to start at (``--resume``: what ``run_logs/training_status.json`` recorded).
    """

    def __init__(
        self,
        parameters: Mapping[str, EnvironmentParameter],
        run_seed: int,
        max_steps: Mapping[str, int],
        lessons: Mapping[str, int] | None = None,
    ) -> None:
        self.curriculum = Curriculum(parameters, run_seed, lessons)
        self.max_steps = dict(max_steps)
        self.version = 0
        """Goes up with every lesson change; a session sends the message again when its copy is older."""
        self._steps: dict[str, int] = {}
        self._reset_version = -1
        self._message = self._build(reset=False)
        if lessons:
            log.info("environment parameters resume at lessons %s", self.curriculum.lesson_numbers())

    def _build(self, reset: bool) -> pb.EnvironmentParameters:
        return to_proto(self.curriculum.current_samplers(), self.curriculum.lesson_numbers(), reset)

    def message(self, since_version: int) -> pb.EnvironmentParameters:
        """The current message; ``reset`` is set when a ``require_reset`` lesson began after ``since_version``."""
        if self._reset_version > since_version >= 0:
            out = pb.EnvironmentParameters()
            out.CopyFrom(self._message)
            out.reset = True
            return out
        return self._message

    def lesson_stats(self) -> list[EnvironmentStat]:
        """``Environment/Lesson Number/<parameter>`` of every parameter, for a behavior's trainer summaries."""
        return [EnvironmentStat(key, value, "most_recent") for key, value in self.curriculum.lesson_stats().items()]

    def observe(self, behavior: str, cut: Sequence[Trajectory], trainer_step: int | None) -> bool:
        """Take one step's cut trajectories and the acting policy's trainer step; advance lessons if due.

        Returns:
            Whether a lesson changed (``version`` went up).
        """
        fresh = False
        for trajectory in cut:
            if trajectory.episode_reward is not None:
                self.curriculum.add_episode(behavior, trajectory.episode_reward)
                fresh = True
        if trainer_step is not None and self._steps.get(behavior) != trainer_step:
            self._steps[behavior] = trainer_step
            fresh = True
        if not fresh:
            return False
        update = self.curriculum.update_lessons(self._steps, self.max_steps)
        if not update.updated:
            return False
        self.version += 1
        if update.must_reset:
            self._reset_version = self.version
        self._message = self._build(reset=False)
        log.info("environment parameters: lessons now %s", self.curriculum.lesson_numbers())
        return True


def parameter_service(
    run_options: RunOptions, run_seed: int, status_path: Path | None = None
) -> EnvironmentParameterService | None:
    """The service of a run whose config has ``environment_parameters`` (None without).

    Args:
        run_options: the run's config (its behaviors' ``max_steps`` give the progress measure).
        run_seed: the run's resolved seed.
        status_path: ``run_logs/training_status.json`` of a run being resumed: its lessons are the start.
    """
    if not run_options.environment_parameters:
        return None
    named = {
        lesson.completion_criteria.behavior
        for parameter in run_options.environment_parameters.values()
        for lesson in parameter.lessons
        if lesson.completion_criteria is not None
    }
    max_steps = {name: settings.max_steps for name, settings in run_options.behaviors.items()}
    if run_options.default_settings is not None:  # a criteria's behavior outside the config trains with these
        max_steps.update({name: run_options.default_settings.max_steps for name in named - set(max_steps)})
    lessons = lessons_from_status(status_path) if status_path is not None else None
    return EnvironmentParameterService(run_options.environment_parameters, run_seed, max_steps, lessons)


def accepts_environment_parameters(metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
    """Whether a Step call's invocation metadata asks for ``StepResponse.environment_parameters``."""
    key, value = ACCEPTS_METADATA
    return any(k == key and (v.decode() if isinstance(v, bytes) else v) == value for k, v in metadata or ())
