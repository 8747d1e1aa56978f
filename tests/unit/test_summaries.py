"""Summary outputs: episodes.csv, training_status.json (shared by processes), TensorBoard (read back with
TensorBoard's ``EventAccumulator``, as ML-Agents users read event files), the console line."""

from __future__ import annotations

import csv
import json
import logging
import math
import multiprocessing
import time
from pathlib import Path

import pytest

from trainer.summaries import (
    AGENT_STEPS_PER_S,
    CUMULATIVE_REWARD,
    CUMULATIVE_REWARD_STD,
    EPISODE_LENGTH,
    EPISODES,
    EPISODES_CSV_HEADER,
    EXTRINSIC_REWARD,
    LEARNING_RATE,
    POLICY_VERSION,
    POLICY_VERSION_LAG,
    ConsoleWriter,
    EpisodeCsv,
    EpisodeRecord,
    PeriodStats,
    Summaries,
    update_training_status,
)


def test_episodes_csv_header_once_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "Walker" / "episodes.csv"
    log = EpisodeCsv(path)
    log.append([EpisodeRecord(64, 1.5, 1.02, 5, 3), EpisodeRecord(128, 2.25, -0.5, 100, 4)])
    log.close()
    again = EpisodeCsv(path)  # a resumed run appends, without a second header
    again.append([EpisodeRecord(192, 3.0, 0.25, 7, 5)])
    again.close()
    rows = list(csv.reader(path.open()))
    assert (
        tuple(rows[0])
        == EPISODES_CSV_HEADER
        == (
            "agent_steps",
            "wall_seconds",
            "episode_reward",
            "episode_length",
            "policy_version",
        )
    )
    assert rows[1:] == [
        ["64", "1.500", "1.02", "5", "3"],
        ["128", "2.250", "-0.5", "100", "4"],
        ["192", "3.000", "0.25", "7", "5"],
    ]


def test_training_status_keeps_other_behaviors(tmp_path: Path) -> None:
    path = tmp_path / "run_logs" / "training_status.json"
    update_training_status(path, "A", {"steps": 1})
    update_training_status(path, "B", {"steps": 2})
    update_training_status(path, "A", {"steps": 3, "episodes": 1})
    assert json.loads(path.read_text()) == {"A": {"steps": 3, "episodes": 1}, "B": {"steps": 2}}


def test_training_status_replaces_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "training_status.json"
    path.write_text("{not json")
    update_training_status(path, "A", {"steps": 1})
    assert json.loads(path.read_text()) == {"A": {"steps": 1}}


def _write_many(path: str, behavior: str, count: int) -> None:
    for i in range(count):
        update_training_status(Path(path), behavior, {"steps": i, "padding": "x" * 2000})


def test_training_status_merges_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "run_logs" / "training_status.json"
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold TF threads
    writers = [context.Process(target=_write_many, args=(str(path), name, 60)) for name in ("A", "B")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    status = json.loads(path.read_text())
    assert {name: entry["steps"] for name, entry in status.items()} == {"A": 59, "B": 59}
    assert not list(path.parent.glob("*.tmp"))


def test_period_stats_summary() -> None:
    period = PeriodStats(step=100)
    period.rewards += [1.0, 3.0]
    period.lengths += [4, 6]
    period.lags += [0.0, 1.0, 2.0]
    period.add_learner_metrics({"Losses/Value Loss": 2.0})
    period.add_learner_metrics({"Losses/Value Loss": 4.0})
    time.sleep(0.01)
    metrics = period.summary(step=300)
    assert metrics[CUMULATIVE_REWARD] == 2.0 and metrics[CUMULATIVE_REWARD_STD] == 1.0
    assert metrics[EPISODE_LENGTH] == 4.0 and metrics[EPISODES] == 2.0  # ML-Agents: the terminal step not counted
    assert metrics[POLICY_VERSION_LAG] == 1.0 and metrics["Losses/Value Loss"] == 3.0
    assert 0 < metrics[AGENT_STEPS_PER_S] < 200 / 0.01
    empty = PeriodStats(step=0).summary(step=0)
    assert empty[EPISODES] == 0.0 and CUMULATIVE_REWARD not in empty


def _scalars(directory: Path) -> dict[tuple[int, str], float]:
    """(step, tag) -> value of every scalar in ``directory``'s event files, read as ML-Agents users read them.

    TensorBoard's ``EventAccumulator``: ``Tags()["scalars"]`` lists the tags and ``Scalars(tag)`` returns
    the values; summaries of any other kind (TF2's tensor summaries) would leave both empty.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    assert accumulator.Tags()["tensors"] == []
    return {(e.step, tag): e.value for tag in accumulator.Tags()["scalars"] for e in accumulator.Scalars(tag)}


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []
        self.closed = False

    def write(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append((dict(metrics), step))

    def close(self) -> None:
        self.closed = True


def test_summaries_write_tensorboard_console_and_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recorder = _Recorder()
    summaries = Summaries("Walker", tmp_path, run_started_at=time.time() - 5.0, writers=[recorder])
    summaries.record_episodes([EpisodeRecord(10, summaries.wall_seconds(), 1.0, 5, 0)])
    metrics = {CUMULATIVE_REWARD: 1.0, CUMULATIVE_REWARD_STD: 0.5, EPISODES: 2.0, POLICY_VERSION: 3.0, POLICY_VERSION_LAG: 0.5}
    with caplog.at_level(logging.INFO, logger="trainer.summaries"):
        summaries.write(metrics, 1000)
        summaries.write({EPISODES: 0.0, CUMULATIVE_REWARD: math.nan}, 2000)
    summaries.update_status({"steps": 2000})
    summaries.close()
    assert recorder.calls[0] == (metrics, 1000) and recorder.closed
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("Walker. Step: 1000. Time Elapsed: ")
    assert "Mean Reward: 1.000. Std of Reward: 0.500." in lines[0] and "Policy version: 3 (lag 0.50)." in lines[0]
    assert "No episode was completed since last summary." in lines[1]
    expected = {(1000, tag): value for tag, value in metrics.items()}
    expected[(2000, EPISODES)] = 0.0  # the NaN reward is left out
    assert _scalars(tmp_path / "Walker") == expected
    assert (tmp_path / "Walker" / "episodes.csv").read_text().count("\n") == 2
    assert json.loads((tmp_path / "run_logs" / "training_status.json").read_text()) == {"Walker": {"steps": 2000}}


def test_tensorboard_scalars_under_ml_agents_tags(tmp_path: Path) -> None:
    """A script written for ML-Agents' event files reads ours: ML-Agents' tags, through ``Scalars(tag)``."""
    ml_agents_tags = {
        CUMULATIVE_REWARD: 12.5,  # "Environment/Cumulative Reward"
        EPISODE_LENGTH: 40.0,  # "Environment/Episode Length"
        LEARNING_RATE: 3e-4,  # "Policy/Learning Rate"
        EXTRINSIC_REWARD: 0.3125,  # "Policy/Extrinsic Reward"
        "Losses/Value Loss": 0.75,
        "Losses/Policy Loss": -0.015625,
        "Policy/Entropy": 1.25,
    }
    assert {CUMULATIVE_REWARD, EPISODE_LENGTH, LEARNING_RATE, EXTRINSIC_REWARD} == {
        "Environment/Cumulative Reward",
        "Environment/Episode Length",
        "Policy/Learning Rate",
        "Policy/Extrinsic Reward",
    }
    summaries = Summaries("3DBall", tmp_path, run_started_at=time.time())
    summaries.write(ml_agents_tags, 12000)
    summaries.write({CUMULATIVE_REWARD: 20.0}, 24000)
    summaries.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tmp_path / "3DBall"))
    accumulator.Reload()
    assert set(accumulator.Tags()["scalars"]) == set(ml_agents_tags)
    assert [(e.step, e.value) for e in accumulator.Scalars(CUMULATIVE_REWARD)] == [(12000, 12.5), (24000, 20.0)]
    for tag, value in ml_agents_tags.items():
        assert accumulator.Scalars(tag)[0].value == pytest.approx(value), tag


def test_summaries_without_results_dir_write_no_files(tmp_path: Path) -> None:
    summaries = Summaries("Walker", None, run_started_at=time.time())
    summaries.record_episodes([EpisodeRecord(1, 0.0, 1.0, 1, 0)])
    summaries.update_status({"steps": 1})
    summaries.write({EPISODES: 0.0}, 1)
    summaries.close()
    assert not list(tmp_path.iterdir())


def test_the_console_line_of_a_learner_without_acted_trajectories_has_no_lag(caplog: pytest.LogCaptureFixture) -> None:
    writer = ConsoleWriter("Simple1D", run_started_at=time.time())
    with caplog.at_level(logging.INFO, logger="trainer.summaries"):
        writer.write({POLICY_VERSION: 4.0}, 300)  # offline BC: versions, no trajectories, so no lag
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.endswith("Policy version: 4.") and "nan" not in line


def test_environment_stats_follow_their_aggregation_and_start_afresh_each_period() -> None:
    from trainer.summaries import EnvironmentStats

    stats = EnvironmentStats()
    for value in (1.0, 2.0, 6.0):
        stats.add("Env/Mean", value, "average")
        stats.add("Env/Last", value, "most_recent")
        stats.add("Env/Total", value, "sum")
        stats.add("Env/Hist", value, "histogram")
    assert stats.take() == {"Env/Mean": 3.0, "Env/Last": 6.0, "Env/Total": 9.0, "Env/Hist": 3.0}
    assert stats.take() == {}
