"""A run's results folder, ``<results-dir>/<run-id>/`` (ARCHITECTURE.md, "Results layout"), for ``train`` and ``trainer``.

``train`` owns the whole run folder; the stack's trainers share one, each owning its behavior's
folder. Both write the resolved ``configuration.yaml`` atomically.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from common.config import RunOptions
from common.errors import ConfigError

RUN_LOGS_DIR = "run_logs"


def process_start_time() -> float:
    """Epoch seconds when this process started (imports included), from /proc where it exists."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime_s = float(f.read().split()[0])
        return time.time() - uptime_s + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


def write_configuration(run_dir: Path, run_options: RunOptions) -> None:
    """Write the resolved ``configuration.yaml`` atomically (stack trainers share the run folder)."""
    fd, tmp = tempfile.mkstemp(prefix="configuration.yaml", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yaml.safe_dump(run_options.to_dict(), out, sort_keys=False)
        os.replace(tmp, run_dir / "configuration.yaml")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prepare_run_dir(
    run_dir: Path, run_options: RunOptions, *, resume: bool = False, force: bool = False, inference: bool = False
) -> Path:
    """Create (or reuse with ``resume`` / ``inference``, or wipe with ``force``) ``run_dir`` for ``stepstream train``.

    Raises:
        ConfigError: the run exists and neither resume, force nor inference was given, or
            resume/inference name a run that does not exist.
    """
    if run_dir.exists() and force:
        shutil.rmtree(run_dir)
    elif run_dir.exists() and not (resume or inference):
        raise ConfigError(f"{run_dir} already exists: pass --resume to continue it, or --force to overwrite it")
    elif not run_dir.exists() and (resume or inference):
        raise ConfigError(f"{run_dir} does not exist: nothing to {'resume' if resume else 'run'}")
    (run_dir / RUN_LOGS_DIR).mkdir(parents=True, exist_ok=True)
    if not inference:
        write_configuration(run_dir, run_options)
    return run_dir


def prepare_behavior_dir(run_dir: Path, behavior_name: str, run_options: RunOptions, *, resume: bool = False) -> Path:
    """Create ``run_dir/<behavior>`` for a stack trainer and write ``configuration.yaml``; returns ``run_dir``.

    Trainers share the run folder, so only this behavior's must be new (or resumed).

    Raises:
        ConfigError: the behavior's folder holds an earlier run and ``resume`` is false.
    """
    behavior_dir = run_dir / behavior_name
    if not resume and behavior_dir.is_dir() and any(behavior_dir.iterdir()):
        raise ConfigError(f"{behavior_dir} already exists: pass --resume to continue it, or choose another --run-id")
    behavior_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_LOGS_DIR).mkdir(exist_ok=True)
    write_configuration(run_dir, run_options)
    return run_dir
