"""Where a trainer's statistics go: TensorBoard, the console, ``episodes.csv`` and ``training_status.json``.

Files (docs/architecture.md, "Results layout"), under ``results/<run-id>/``:

* ``<behavior>/events.out.tfevents.*``: TensorBoard scalars as ML-Agents writes them (``simple_value``
  records, which ``EventAccumulator.Scalars(tag)`` returns), ML-Agents' tag names where one exists
  (the constants below), written every ``summary_freq`` agent steps;
* ``<behavior>/episodes.csv``: one row per finished episode,
  ``agent_steps,wall_seconds,episode_reward,episode_length,policy_version``;
* ``run_logs/training_status.json``: ``{behavior: {steps, episodes, mean_reward, wall_seconds,
  policy_version, checkpoints}}``. Each trainer rewrites only its own entry, under an exclusive
  ``fcntl.flock`` on ``training_status.json.lock`` and with an atomic ``os.replace``, so trainers
  in several processes (or containers sharing the volume) never lose each other's entries.

``wall_seconds`` always counts from ``run_started_at``, the start of the run's first process
(epoch seconds, ``time.time()``), imports included.
"""

from __future__ import annotations

import csv
import fcntl
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

logger = logging.getLogger(__name__)

# -- metric keys: ML-Agents' TensorBoard tags where one exists --------------------------------

CUMULATIVE_REWARD = "Environment/Cumulative Reward"
"""Mean undiscounted return of the episodes that ended in the summary period."""
EPISODE_LENGTH = "Environment/Episode Length"
"""Mean length (agent steps) of the episodes that ended in the summary period."""
CUMULATIVE_REWARD_STD = "Environment/Cumulative Reward Std"
"""Standard deviation of those returns (stepstream's; ML-Agents shows it on the console only)."""
EPISODES = "Environment/Episodes"
"""Episodes that ended in the summary period (stepstream's)."""
LEARNING_RATE = "Policy/Learning Rate"
"""The learning rate an update used, after its schedule (ML-Agents' tag)."""
POLICY_LOSS = "Losses/Policy Loss"
"""PPO: mean |clipped surrogate loss| over an update's minibatches; SAC: mean policy loss of its gradient steps."""
VALUE_LOSS = "Losses/Value Loss"
"""PPO: mean value loss over an update's minibatches (ML-Agents' tag)."""
ENTROPY = "Policy/Entropy"
"""Mean entropy of the policy over an update's rows (ML-Agents' tag)."""
EPSILON = "Policy/Epsilon"
"""PPO: the clip range an update used, after its schedule (ML-Agents' tag)."""
BETA = "Policy/Beta"
"""PPO: the entropy bonus an update used, after its schedule (ML-Agents' tag)."""
EXTRINSIC_VALUE_ESTIMATE = "Policy/Extrinsic Value Estimate"
"""PPO: mean of the extrinsic value head over the update buffer (ML-Agents' tag)."""
Q1_LOSS = "Losses/Q1 Loss"
"""SAC: mean 0.5 * squared error of the first critic (ML-Agents' tag)."""
Q2_LOSS = "Losses/Q2 Loss"
"""SAC: mean 0.5 * squared error of the second critic (ML-Agents' tag)."""
ENTROPY_COEFFICIENT_LOSS = "Losses/Entropy Coefficient Loss"
"""SAC: mean loss of the entropy coefficients' tuning (stepstream's)."""
ENTROPY_COEFF = "Policy/Entropy Coeff"
"""SAC: mean entropy coefficient over the action kinds (ML-Agents' tag)."""
CONTINUOUS_ENTROPY_COEFF = "Policy/Continuous Entropy Coeff"
"""SAC: the continuous actions' entropy coefficient (ML-Agents' tag)."""
DISCRETE_ENTROPY_COEFF = "Policy/Discrete Entropy Coeff"
"""SAC: mean entropy coefficient of the discrete branches (ML-Agents' tag)."""
CLONING_LOSS = "Losses/Cloning Loss"
PRETRAINING_LOSS = "Losses/Pretraining Loss"
"""Mean cloning loss of the behavioral_cloning component's steps in one PPO or SAC update (ML-Agents' tag)."""
BC_STRENGTH = "Policy/BC Strength"
"""behavioral_cloning's strength after annealing (stepstream's)."""
EXTRINSIC_REWARD = "Policy/Extrinsic Reward"
"""Mean extrinsic reward per agent step (times strength) of the experiences an update used: PPO's update
buffer, SAC's sampled minibatches. ML-Agents' tag, where it is each episode's sum instead (that figure is
``Environment/Cumulative Reward`` times strength)."""
GAIL_LOSS = "Losses/GAIL Loss"
"""Discriminator loss: binary cross-entropy of expert vs agent, plus the gradient penalty (ML-Agents' tag)."""
GAIL_POLICY_ESTIMATE = "Policy/GAIL Policy Estimate"
"""Mean D(agent experience), the discriminator's probability that it is expert (ML-Agents' tag)."""
GAIL_EXPERT_ESTIMATE = "Policy/GAIL Expert Estimate"
"""Mean D(expert experience) (ML-Agents' tag)."""
GAIL_REWARD = "Policy/GAIL Reward"
"""Mean GAIL reward per agent step (times strength) of the experiences an update used (stepstream's)."""
GAIL_VALUE_ESTIMATE = "Policy/GAIL Value Estimate"
"""PPO: mean of the GAIL value head over the update buffer (ML-Agents' tag)."""
CURIOSITY_FORWARD_LOSS = "Losses/Curiosity Forward Loss"
"""Mean 0.5 * squared error of the forward model's next-state encoding (ML-Agents' tag)."""
CURIOSITY_INVERSE_LOSS = "Losses/Curiosity Inverse Loss"
"""Mean action-prediction loss of the inverse model (ML-Agents' tag)."""
CURIOSITY_REWARD = "Policy/Curiosity Reward"
"""Mean curiosity reward per agent step (times strength) of the experiences an update used (stepstream's)."""
CURIOSITY_VALUE_ESTIMATE = "Policy/Curiosity Value Estimate"
"""PPO: mean of the curiosity value head over the update buffer (ML-Agents' tag)."""
POLICY_VERSION = "Policy/Version"
"""The trainer's newest published policy version (stepstream's)."""
POLICY_VERSION_LAG = "Policy/Version Lag"
"""Mean over the period's trajectories of (newest published version - version that acted) (stepstream's)."""
AGENT_STEPS_PER_S = "Trainer/Agent Steps per Second"
"""Experiences taken in per wall second over the summary period (stepstream's)."""
STALE_TRAJECTORIES = "Trainer/Stale Trajectories Dropped"
"""Trajectories dropped by max_policy_lag so far (stepstream's)."""
DUPLICATE_TRAJECTORIES = "Trainer/Duplicate Trajectories Dropped"
"""Redelivered trajectories dropped so far (stepstream's)."""
UPDATE_SECONDS = "Trainer/Update Seconds"
"""Mean wall seconds of one learner update plus its policy export in the period (stepstream's)."""

EPISODES_CSV = "episodes.csv"
EPISODES_CSV_HEADER = ("agent_steps", "wall_seconds", "episode_reward", "episode_length", "policy_version")
RUN_LOGS = "run_logs"
TRAINING_STATUS = "training_status.json"
MEAN_REWARD_WINDOW = 100
"""Episodes averaged for ``mean_reward`` in training_status.json."""


class MetricsWriter(Protocol):
    """A sink of scalar metrics, keyed by tag, at an agent-step count."""

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` at ``step`` (agent steps of this behavior)."""
        ...

    def close(self) -> None: ...


class TensorBoardWriter:
    """Scalars to a TensorBoard event file in ``directory``, as ML-Agents writes them.

    Each ``write`` is one event of ``Summary.Value(tag, simple_value)`` records, the form
    ML-Agents' ``TensorboardWriter`` (PyTorch's ``SummaryWriter.add_scalar``) produces. So the
    scripts written for ML-Agents' event files read ours unchanged:
    ``EventAccumulator.Tags()["scalars"]`` lists the tags and ``EventAccumulator.Scalars(tag)``
    returns ``(wall_time, step, value)`` rows; TensorBoard's scalar dashboard reads them too. TF2's
    ``tf.summary.scalar`` would write tensor summaries instead, which ``EventAccumulator`` files
    under ``Tags()["tensors"]`` and ``Scalars`` never returns. The events go through TF's own
    writer (``tf.summary.experimental.write_raw_pb``); the ``tensorboard`` package is not needed.
    """

    def __init__(self, directory: Path) -> None:
        import tensorflow as tf  # only trainers need it; keeps this module importable without TF

        directory.mkdir(parents=True, exist_ok=True)
        self._tf = tf
        self._writer = tf.summary.create_file_writer(str(directory))

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        tf = self._tf
        values = [tf.compat.v1.Summary.Value(tag=tag, simple_value=v) for tag, v in metrics.items() if math.isfinite(v)]
        if values:
            with self._writer.as_default(step=step):
                tf.summary.experimental.write_raw_pb(tf.compat.v1.Summary(value=values).SerializeToString(), step=step)
            self._writer.flush()

    def write_histograms(self, histograms: Mapping[str, Sequence[float]], step: int) -> None:
        """Each tag's values as one ``HistogramProto`` (``EventAccumulator.Histograms(tag)``), as ML-Agents'
        ``add_histogram`` writes them."""
        tf = self._tf
        values = []
        for tag, seen in histograms.items():
            data = np.asarray([v for v in seen if math.isfinite(v)], dtype=np.float64)
            if data.size:
                values.append(tf.compat.v1.Summary.Value(tag=tag, histo=_histogram_proto(tf, data)))
        if values:
            with self._writer.as_default(step=step):
                tf.summary.experimental.write_raw_pb(tf.compat.v1.Summary(value=values).SerializeToString(), step=step)
            self._writer.flush()

    def close(self) -> None:
        self._writer.close()


HISTOGRAM_SUFFIX = "_hist"
"""What ML-Agents appends to a histogram stat's key for its TensorBoard histogram."""
HISTOGRAM_BUCKETS = 30


def _histogram_proto(tf: Any, data: np.ndarray) -> Any:
    """A ``HistogramProto`` of ``data`` (float64 [K], finite): ``HISTOGRAM_BUCKETS`` equal buckets over its range."""
    low, high = float(data.min()), float(data.max())
    counts, edges = np.histogram(data, bins=HISTOGRAM_BUCKETS, range=(low, high if high > low else low + 1.0))
    return tf.compat.v1.HistogramProto(
        min=low,
        max=high,
        num=float(data.size),
        sum=float(data.sum()),
        sum_squares=float(np.square(data).sum()),
        bucket_limit=edges[1:].tolist(),
        bucket=counts.astype(np.float64).tolist(),
    )


class ConsoleWriter:
    """One log line per summary in ML-Agents' style, at INFO on this module's logger.

    ``3DBall. Step: 12000. Time Elapsed: 25.413 s. Mean Reward: 1.227. Std of Reward: 0.716. ...``
    """

    def __init__(self, behavior_name: str, run_started_at: float) -> None:
        self.behavior_name = behavior_name
        self.run_started_at = run_started_at

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        elapsed = time.time() - self.run_started_at
        parts = [f"{self.behavior_name}. Step: {step}. Time Elapsed: {elapsed:.3f} s."]
        if metrics.get(EPISODES, 0) > 0:
            parts.append(
                f"Mean Reward: {metrics[CUMULATIVE_REWARD]:.3f}. Std of Reward: {metrics[CUMULATIVE_REWARD_STD]:.3f}."
            )
        else:
            parts.append("No episode was completed since last summary.")
        if AGENT_STEPS_PER_S in metrics:
            parts.append(f"Agent steps/s: {metrics[AGENT_STEPS_PER_S]:.0f}.")
        if POLICY_VERSION in metrics:
            # The lag is a property of acted trajectories: a learner fed demonstrations (offline BC) has none.
            lag = f" (lag {metrics[POLICY_VERSION_LAG]:.2f})" if POLICY_VERSION_LAG in metrics else ""
            parts.append(f"Policy version: {metrics[POLICY_VERSION]:.0f}{lag}.")
        logger.info("%s", " ".join(parts))

    def close(self) -> None:
        pass


class EpisodeRecord(NamedTuple):
    """One finished episode, as a row of ``episodes.csv``."""

    agent_steps: int
    """The trainer's agent steps when it took the episode's last trajectory in."""
    wall_seconds: float
    """Seconds since ``run_started_at``."""
    episode_reward: float
    episode_length: int
    """Experiences in the episode."""
    policy_version: int
    """The version that acted on the episode's last step."""


class EpisodeCsv:
    """Appends rows to ``<behavior>/episodes.csv``; writes the header when the file is new or empty (a resume appends)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        new = not path.exists() or path.stat().st_size == 0
        self._file = path.open("a", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)
        if new:
            self._csv.writerow(EPISODES_CSV_HEADER)
            self._file.flush()

    def read(self, up_to_step: int) -> list[EpisodeRecord]:
        """The rows already in the file whose ``agent_steps`` is at most ``up_to_step`` (what a resume
        from that step had finished; rows a killed process wrote after its last checkpoint are left out)."""
        records = []
        with self.path.open(newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                try:
                    record = EpisodeRecord(int(row[0]), float(row[1]), float(row[2]), int(row[3]), int(row[4]))
                except (ValueError, IndexError):  # the header, or a line cut by a crash
                    continue
                if record.agent_steps <= up_to_step:
                    records.append(record)
        return records

    def append(self, records: Iterable[EpisodeRecord]) -> None:
        """Write the rows and flush (a crash loses no finished episode)."""
        self._csv.writerows(
            (r.agent_steps, f"{r.wall_seconds:.3f}", repr(r.episode_reward), r.episode_length, r.policy_version)
            for r in records
        )
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def update_training_status(path: Path, behavior_name: str, entry: Mapping[str, Any]) -> None:
    """Replace ``behavior_name``'s entry in the JSON file at ``path``, keeping every other entry.

    Safe across processes: an exclusive ``fcntl.flock`` on ``<path>.lock`` serialises the
    read-modify-write, and the new content is written to a temporary file in the same folder and
    moved over ``path`` with ``os.replace``, so readers never see a half-written file. A file that
    is not valid JSON is logged and replaced.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            status: dict[str, Any] = {}
            if path.exists():
                try:
                    loaded = json.loads(path.read_text(encoding="utf-8"))
                    status = loaded if isinstance(loaded, dict) else {}
                except (OSError, ValueError):
                    logger.warning("%s is not valid JSON; rewriting it", path)
            status[behavior_name] = dict(entry)
            fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(status, out, indent=2, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


class PeriodStats:
    """What happened since the last summary: episodes, learner metrics, version lags, steps."""

    def __init__(self, step: int) -> None:
        self.start_step = step
        self.started = time.monotonic()
        self.rewards: list[float] = []
        self.lengths: list[int] = []
        self.lags: list[float] = []
        self.learner: dict[str, list[float]] = {}

    def add_learner_metrics(self, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.learner.setdefault(key, []).append(float(value))

    def summary(self, step: int) -> dict[str, float]:
        """The period's metrics: episode means, learner metric means, throughput and lag."""
        out: dict[str, float] = {key: sum(v) / len(v) for key, v in self.learner.items() if v}
        out[EPISODES] = float(len(self.rewards))
        if self.rewards:
            out[CUMULATIVE_REWARD], out[CUMULATIVE_REWARD_STD] = _mean_std(self.rewards)
            # ML-Agents' AgentProcessor counts an episode's steps but its terminal one: experiences - 1.
            out[EPISODE_LENGTH] = sum(max(n - 1, 0) for n in self.lengths) / len(self.lengths)
        if self.lags:
            out[POLICY_VERSION_LAG] = sum(self.lags) / len(self.lags)
        seconds = time.monotonic() - self.started
        if seconds > 0:
            out[AGENT_STEPS_PER_S] = (step - self.start_step) / seconds
        return out


class EnvironmentStats:
    """Values an environment reported itself (Unity's stats side channel) since the last summary, by key.

    Thread-safe: the gateway adds on the event loop, the trainer takes in its thread at each summary.
    A period's value per key follows its aggregation as ML-Agents' ``StatsAggregationMethod`` does:
    ``average`` the mean, ``most_recent`` the last, ``sum`` the sum; ``histogram`` the mean, and, as
    ML-Agents' ``TensorboardWriter`` adds, the period's values as a TensorBoard histogram tagged
    ``<key>_hist`` (``take_period``). The scalar's tag is the key as Unity sent it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, tuple[str, list[float]]] = {}

    def add(self, key: str, value: float, aggregation: str) -> None:
        with self._lock:
            self._values.setdefault(key, (aggregation, []))[1].append(float(value))

    def take(self) -> dict[str, float]:
        """The period's value per key, and a fresh period."""
        return self.take_period()[0]

    def take_period(self) -> tuple[dict[str, float], dict[str, list[float]]]:
        """The period's value per key and the values of each histogram key (tagged ``<key>_hist``); a fresh period."""
        with self._lock:
            values, self._values = self._values, {}
        histograms = {
            f"{key}{HISTOGRAM_SUFFIX}": seen for key, (aggregation, seen) in values.items() if aggregation == "histogram"
        }
        return self._scalars(values), histograms

    @staticmethod
    def _scalars(values: Mapping[str, tuple[str, list[float]]]) -> dict[str, float]:
        out = {}
        for key, (aggregation, seen) in values.items():
            if aggregation == "most_recent":
                out[key] = seen[-1]
            elif aggregation == "sum":
                out[key] = math.fsum(seen)
            else:
                out[key] = math.fsum(seen) / len(seen)
        return out


class Summaries:
    """A trainer's summary outputs for one behavior: metric writers, the episode log and the status file.

    With ``results_dir`` None only the console line is written (tests, ``--inference`` dry runs).

    Args:
        behavior_name: the behavior; its folder is ``results_dir / behavior_name``.
        results_dir: ``results/<run-id>``, or None.
        run_started_at: epoch seconds at the start of the run's first process.
        writers: extra metric sinks (tests); TensorBoard and the console are added by default.
    """

    def __init__(
        self,
        behavior_name: str,
        results_dir: Path | None,
        run_started_at: float,
        writers: Iterable[MetricsWriter] = (),
    ) -> None:
        self.behavior_name = behavior_name
        self.run_started_at = run_started_at
        self.writers: list[MetricsWriter] = [ConsoleWriter(behavior_name, run_started_at), *writers]
        self._episodes: EpisodeCsv | None = None
        self._status_path: Path | None = None
        if results_dir is not None:
            behavior_dir = results_dir / behavior_name
            self.writers.append(TensorBoardWriter(behavior_dir))
            self._episodes = EpisodeCsv(behavior_dir / EPISODES_CSV)
            self._status_path = results_dir / RUN_LOGS / TRAINING_STATUS

    def past_episodes(self, up_to_step: int) -> list[EpisodeRecord]:
        """The episodes ``episodes.csv`` records up to ``up_to_step`` (none without results_dir)."""
        return [] if self._episodes is None else self._episodes.read(up_to_step)

    def wall_seconds(self) -> float:
        return time.time() - self.run_started_at

    def record_episodes(self, records: Iterable[EpisodeRecord]) -> None:
        if self._episodes is not None:
            self._episodes.append(records)

    def write(self, metrics: Mapping[str, float], step: int) -> None:
        for writer in self.writers:
            try:
                writer.write(metrics, step)
            except Exception:  # a broken sink must not stop training
                logger.exception("metrics writer %r failed at step %d", writer, step)

    def write_histograms(self, histograms: Mapping[str, Sequence[float]], step: int) -> None:
        """Histograms to the writers that take them (TensorBoard)."""
        for writer in self.writers:
            write = getattr(writer, "write_histograms", None)
            if write is None:
                continue
            try:
                write(histograms, step)
            except Exception:  # a broken sink must not stop training
                logger.exception("metrics writer %r failed at step %d", writer, step)

    def update_status(self, entry: Mapping[str, Any]) -> None:
        """Rewrite this behavior's entry of ``run_logs/training_status.json`` (no file without results_dir)."""
        if self._status_path is not None:
            update_training_status(self._status_path, self.behavior_name, entry)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self._episodes is not None:
            self._episodes.close()
