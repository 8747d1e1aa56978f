"""The classic-control suite's per-run figures (benchmarks/episode_window.py), which both sides compute alike."""

from __future__ import annotations

import csv
from pathlib import Path

from benchmarks.classic_control import episode_figures
from benchmarks.episode_window import EpisodeWindow


def test_the_solve_is_the_first_full_window_at_the_threshold_and_is_reported_once() -> None:
    episodes = EpisodeWindow(threshold=-110.0, budget=2000, window=4)
    assert [episodes.add(-100.0, step) for step in (10, 20, 30)] == [False, False, False]  # not full yet
    assert episodes.solve_steps is None and episodes.mean == -100.0
    assert episodes.add(-100.0, 40) and episodes.solve_steps == 40
    assert not episodes.add(-100.0, 50) and episodes.solve_steps == 40


def test_held_counts_the_full_windows_of_the_second_half_only() -> None:
    episodes = EpisodeWindow(threshold=-110.0, budget=200, window=2)
    for step, episode_return in [(40, -100.0), (80, -100.0), (120, -200.0), (160, -100.0), (200, -100.0)]:
        episodes.add(episode_return, step)
    # Windows ending at 120, 160, 200: means -150, -150, -100; the early window at 80 (-100) does not count.
    assert episodes.solve_steps == 80
    assert episodes.held == 1 / 3
    assert EpisodeWindow(threshold=0.0, budget=200).held is None  # no window ended in the second half


def test_episode_figures_reads_a_runs_episodes_csv(tmp_path: Path) -> None:
    path = tmp_path / "episodes.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["agent_steps", "wall_seconds", "episode_reward", "episode_length", "policy_version"])
        for i in range(1, 41):  # episode i ends at step 100 i, second 0.5 i: twenty -200s, then twenty -90s
            writer.writerow([100 * i, 0.5 * i, -200.0 if i <= 20 else -90.0, 100, i])
    figures = episode_figures(path, threshold=-110.0, budget=6000)
    # A window with n -90s has the mean -200 + 5.5 n: first >= -110 at n = 17, episode 37.
    assert (figures.solve_steps, figures.solve_s, figures.final) == (3700, 18.5, -90.0)
    assert figures.held == 4 / 11  # the windows of episodes 30-40 end in the second half; 37-40 hold
