"""Unity's stats and episodes in the summaries as mlagents-learn writes them: a histogram stat also as a TensorBoard
histogram ``<key>_hist``, and ``Environment/Episode Length`` without the terminal step (``AgentProcessor``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.summaries import EPISODE_LENGTH, EnvironmentStats, PeriodStats, TensorBoardWriter


def test_a_histogram_stat_is_its_mean_and_its_values_under_key_hist() -> None:
    stats = EnvironmentStats()
    for value in (1.0, 2.0, 6.0):
        stats.add("Env/Speed", value, "histogram")
        stats.add("Env/Laps", value, "average")
    scalars, histograms = stats.take_period()
    assert scalars == {"Env/Speed": 3.0, "Env/Laps": 3.0}
    assert histograms == {"Env/Speed_hist": [1.0, 2.0, 6.0]}
    assert stats.take_period() == ({}, {})


def test_the_histogram_reaches_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = TensorBoardWriter(tmp_path)
    writer.write({"Env/Speed": 3.0}, step=10)
    writer.write_histograms({"Env/Speed_hist": [1.0, 2.0, 6.0]}, step=10)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert "Env/Speed_hist" in events.Tags()["histograms"] and "Env/Speed" in events.Tags()["scalars"]
    (event,) = events.Histograms("Env/Speed_hist")
    value = event.histogram_value
    assert (event.step, value.num, value.min, value.max, value.sum) == (10, 3.0, 1.0, 6.0, 9.0)


@pytest.mark.parametrize(("lengths", "expected"), [([4, 6], 4.0), ([1], 0.0)])
def test_episode_length_leaves_out_the_terminal_step_as_mlagents_does(lengths: list[int], expected: float) -> None:
    """An episode of ``n`` experiences (``n - 1`` decisions after the first, then the terminal row) is ``n - 1``
    long in ML-Agents' ``Environment/Episode Length``."""
    period = PeriodStats(step=0)
    period.rewards += [1.0] * len(lengths)
    period.lengths += lengths
    assert period.summary(step=10)[EPISODE_LENGTH] == expected
