"""The Makefile's install split: ``make train`` installs the runtime alone, ``make test`` adds the test and developer
tools, and each says what it is doing. Read with ``make -n`` (what would run) in a copy holding no venv."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def dry_run(folder: Path, target: str) -> str:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, folder / name)
    proc = subprocess.run(["make", "-n", target], cwd=folder, capture_output=True, text=True, check=True, timeout=30)
    return proc.stdout


def test_make_train_installs_the_runtime_alone(tmp_path: Path) -> None:
    commands = dry_run(tmp_path, "train")
    installs = [line for line in commands.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert len(installs) == 1 and installs[0].rstrip().endswith("-e ."), installs
    assert "[dev]" not in commands and "[test]" not in commands
    assert "echo" in commands.split("pip install", 1)[0], "a word of what is happening comes first"
    assert ".venv/bin" in commands  # where the commands are


def test_make_test_adds_the_tools(tmp_path: Path) -> None:
    commands = dry_run(tmp_path, "test")
    assert "-e ." in commands and "-e '.[dev]'" in commands


def test_the_package_builds_without_deprecation_banners(tmp_path: Path) -> None:
    """setuptools warns, in banners, about a ``license`` TOML table (PEP 639 wants an SPDX string)."""
    pytest.importorskip("setuptools")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    for package in ("protos", "common", "processor", "trainer", "envclient", "cli"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").touch()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel"), "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "deprecat" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
