"""Launching a Unity build as mlagents-learn does (``stepstream unity --env PATH``).

Facts from ML-Agents 1.1.0's ``UnityEnvironment`` and ``env_utils``: the build is told its trainer's
port with ``--mlagents-port PORT`` (a build's base port is 5005; the Editor's 5004); with no
graphics it gets ``-nographics -batchmode``; with a log folder and no ``-logFile`` among the user's
arguments, ``-logFile <folder>/Player-<worker>.log``; the user's arguments come last. A path names
the executable itself or, as ML-Agents resolves it, ``PATH.x86_64``, ``PATH.x86``, ``PATH.exe`` or
``PATH.app/Contents/MacOS/*``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from common.errors import ConfigError

log = logging.getLogger(__name__)

DEFAULT_BUILD_PORT = 5005
PORT_FLAG = "--mlagents-port"
BUILD_STOP_TIMEOUT_S = 10.0
"""How long a stopped build may take to exit after SIGTERM before it is killed."""


@dataclass(frozen=True)
class LaunchSettings:
    """How to start one build."""

    env_path: str
    """The build, as ``mlagents-learn --env`` takes it."""
    no_graphics: bool = False
    log_dir: Path | None = None
    """Where ``Player-<worker_id>.log`` goes (None: Unity's default log)."""
    env_args: tuple[str, ...] = ()
    """Passed to the build after stepstream's own arguments."""
    worker_id: int = 0


def resolve_build(env_path: str) -> Path:
    """The executable ``env_path`` names (module docstring).

    Raises:
        ConfigError: nothing executable there, naming what was tried.
    """
    base = env_path
    for suffix in (".app", ".exe", ".x86_64", ".x86"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    candidates = [Path(env_path), Path(base + ".x86_64"), Path(base + ".x86"), Path(base + ".exe")]
    macos = Path(base + ".app") / "Contents" / "MacOS"
    if macos.is_dir():
        candidates += sorted(macos.iterdir())
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise ConfigError(f"--env {env_path!r}: no executable Unity build found (tried {tried})")


def build_command(executable: Path, port: int, settings: LaunchSettings) -> list[str]:
    """The build's command line (module docstring for the order)."""
    args = [str(executable)]
    if settings.no_graphics:
        args += ["-nographics", "-batchmode"]
    args += [PORT_FLAG, str(port)]
    if settings.log_dir is not None and "-logfile" not in (a.lower() for a in settings.env_args):
        args += ["-logFile", str(settings.log_dir / f"Player-{settings.worker_id}.log")]
    return [*args, *settings.env_args]


class UnityBuild:
    """One running build; ``stop`` ends it (SIGTERM, then SIGKILL after ``BUILD_STOP_TIMEOUT_S``)."""

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings
        self.executable = resolve_build(settings.env_path)
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, port: int) -> None:
        if self.settings.log_dir is not None:
            self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        command = build_command(self.executable, port, self.settings)
        log.info("launching the Unity build: %s", " ".join(command))
        self.process = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.DEVNULL)

    async def wait(self) -> int:
        """The build's exit code, once it exits."""
        assert self.process is not None, "start the build first"
        return await self.process.wait()

    async def stop(self, timeout_s: float = BUILD_STOP_TIMEOUT_S) -> int | None:
        process = self.process
        if process is None or process.returncode is not None:
            return None if process is None else process.returncode
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except asyncio.TimeoutError:
            log.warning("the Unity build did not exit %g s after SIGTERM; killing it", timeout_s)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            return await process.wait()


__all__ = ["DEFAULT_BUILD_PORT", "LaunchSettings", "UnityBuild", "build_command", "resolve_build"]
