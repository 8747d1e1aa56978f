"""``benchmarks/time_to_solve.py``'s second clock: the run's import time, read back from ``train.log``."""

from __future__ import annotations

from pathlib import Path

from benchmarks.time_to_solve import Outcome, imports_seconds
from cli.train import IMPORTS_DONE


def test_the_import_time_cli_train_logs_is_read_back(tmp_path: Path) -> None:
    train_log = tmp_path / "train.log"
    line = "2026-12-02 06:00:00,000 INFO cli.train: " + IMPORTS_DONE % 3.25
    train_log.write_text(f"2026-12-02 05:59:57,000 INFO common.config: loaded\n{line}\nmore\n", encoding="utf-8")
    assert imports_seconds(train_log) == 3.25


def test_no_import_line_or_no_log_gives_none(tmp_path: Path) -> None:
    train_log = tmp_path / "train.log"
    train_log.write_text("2026-12-02 06:00:00,000 ERROR cli.main: the run failed before TensorFlow loaded\n", encoding="utf-8")
    assert imports_seconds(train_log) is None
    assert imports_seconds(tmp_path / "absent.log") is None


def test_wall_seconds_after_imports_count_as_the_peers_do() -> None:
    assert Outcome(solved=True, wall_s=30.5, imports_s=3.25).wall_s_after_imports == 27.25
    assert Outcome(solved=True, wall_s=30.5).wall_s_after_imports is None
