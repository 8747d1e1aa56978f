"""``cli.results.newest_saved_policy``: which saved policy ``stepstream train --inference`` acts with.

It must be the newest *committed* checkpoint's (the one a TensorFlow restore would take), never an older one, and
none when that checkpoint saved no policy (the caller then restores the TensorFlow checkpoint instead).
"""

from __future__ import annotations

import json
from pathlib import Path

from cli.results import newest_saved_policy


def _checkpoint(folder: Path, step: int, version: int, *, policy: bool = True, record: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"step": step, "version": version, "wall_time": 0.0, "path": f"ckpt-{step}"})
    (folder / f"ckpt-{step}.json").write_text(text if record is None else record, encoding="utf-8")
    if policy:
        (folder / f"ckpt-{step}.policy.pb").write_bytes(b"")


def test_the_newest_committed_checkpoint_s_policy(tmp_path: Path) -> None:
    folder = tmp_path / "Behavior" / "checkpoints"
    for step, version in ((900, 3), (10000, 40), (2000, 7)):  # 10000 sorts before 2000 as text
        _checkpoint(folder, step, version)

    assert newest_saved_policy(tmp_path / "Behavior") == (folder / "ckpt-10000.policy.pb", 10000, 40)


def test_a_record_cut_short_or_naming_another_step_is_not_committed(tmp_path: Path) -> None:
    folder = tmp_path / "Behavior" / "checkpoints"
    _checkpoint(folder, 100, 1)
    _checkpoint(folder, 300, 3, record='{"step": 3')  # a save killed while writing its record
    _checkpoint(folder, 200, 2, record=json.dumps({"step": 250, "version": 2}))

    assert newest_saved_policy(tmp_path / "Behavior") == (folder / "ckpt-100.policy.pb", 100, 1)


def test_none_when_the_newest_committed_checkpoint_saved_no_policy(tmp_path: Path) -> None:
    folder = tmp_path / "Behavior" / "checkpoints"
    _checkpoint(folder, 100, 1)
    _checkpoint(folder, 200, 2, policy=False)  # an older policy would act behind the checkpoint: none instead

    assert newest_saved_policy(tmp_path / "Behavior") is None
    assert newest_saved_policy(tmp_path / "Missing") is None
