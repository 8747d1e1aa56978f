"""``stepstream demo inspect DIR`` through the real CLI, on folders of the shared ML-Agents demos.

A folder whose files' specs differ is listed file by file, each with its own spec and figures (the MANIFEST's),
and without folder totals; a folder whose files agree keeps its totals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))
MANIFEST_PATH = DEMO_DIR / "MANIFEST.json"
MANIFEST: dict[str, dict[str, Any]] = json.loads(MANIFEST_PATH.read_text()) if MANIFEST_PATH.is_file() else {}
pytestmark = pytest.mark.skipif(not MANIFEST, reason=f"no demo files at {DEMO_DIR} (set STEPSTREAM_DEMO_DIR)")

BALL, PYRAMID = "test.demo", "ExpertPyramid.demo"
"""3DBall (one [8] observation, 2 continuous actions) and Pyramids (four observations, one branch of 5)."""
FIGURES = ("records", "episodes_done", "observation_shapes", "continuous_actions", "discrete_branches")


def inspect(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cli.main", "demo", "inspect", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def folder(tmp_path: Path, *names: str) -> Path:
    """A folder of links to the shared demos, ``names`` as ``link name=target``, or a target's own name."""
    tmp_path.mkdir(exist_ok=True)
    for name in names:
        link, _, target = name.partition("=")
        (tmp_path / link).symlink_to(DEMO_DIR / (target or link))
    return tmp_path


def test_a_folder_of_two_specs_lists_each_file_with_its_own_spec_and_no_totals(tmp_path: Path) -> None:
    mixed = folder(tmp_path / "mixed", BALL, PYRAMID)
    result = inspect(str(mixed), "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["specs_agree"] is False
    assert set(got) == {"specs_agree", "files"}  # no folder-level figures
    by_file = {f["file"]: f for f in got["files"]}
    assert list(by_file) == [PYRAMID, BALL]  # name order, as the loaders read a folder
    for name, f in by_file.items():
        assert {k: f[k] for k in FIGURES} == {k: MANIFEST[name][k] for k in FIGURES}, name
        assert f["sum_reward"] == pytest.approx(MANIFEST[name]["sum_reward"], abs=1e-3)
        assert list(f["action_timing"]) == [name] and f["action_timing"][name]["timing"] in ("same", "next")
    assert by_file[BALL]["behavior"].startswith("3DBall") and by_file[PYRAMID]["behavior"].startswith("Pyramids")

    result = inspect(str(mixed))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "2 files whose specs differ: each file's figures, no folder totals" in text
    ball, pyramid = text.index(f"  {BALL}: "), text.index(f"  {PYRAMID}: ")
    ball_part, pyramid_part = text[ball:], text[pyramid:ball]
    assert f"records        {MANIFEST[BALL]['records']}" in ball_part
    assert "observation 0  [8]" in ball_part and "actions        2 continuous, discrete branches []" in ball_part
    assert f"records        {MANIFEST[PYRAMID]['records']}" in pyramid_part
    assert f"episodes done  {MANIFEST[PYRAMID]['episodes_done']}" in pyramid_part
    assert "observation 3  [4]" in pyramid_part and "0 continuous, discrete branches [5]" in pyramid_part
    assert text.count("action timing  ") == 2
    assert f"records        {MANIFEST[BALL]['records'] + MANIFEST[PYRAMID]['records']}" not in text


def test_a_folder_of_one_spec_keeps_its_totals_beside_each_file(tmp_path: Path) -> None:
    same = folder(tmp_path / "same", f"a.demo={BALL}", f"b.demo={BALL}")
    result = inspect(str(same), "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    assert got["specs_agree"] is True
    assert got["records"] == 2 * MANIFEST[BALL]["records"]
    assert got["episodes_done"] == 2 * MANIFEST[BALL]["episodes_done"]
    assert got["observation_shapes"] == MANIFEST[BALL]["observation_shapes"]
    assert list(got["action_timing"]) == ["a.demo", "b.demo"]
    assert [(f["file"], f["records"]) for f in got["files"]] == [(n, MANIFEST[BALL]["records"]) for n in ("a.demo", "b.demo")]

    result = inspect(str(same))
    assert result.returncode == 0, result.stderr
    assert f"records        {2 * MANIFEST[BALL]['records']}" in result.stdout and "2 file(s)" in result.stdout
