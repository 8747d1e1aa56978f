"""The build command line of ``stepstream unity --env`` (``envclient.unity.launcher``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import ConfigError
from envclient.unity.launcher import LaunchSettings, build_command, resolve_build


def test_build_command_order_and_a_user_log_file_wins() -> None:
    exe = Path("/games/Ball.x86_64")
    assert build_command(exe, 5005, LaunchSettings("Ball")) == [str(exe), "--mlagents-port", "5005"]
    settings = LaunchSettings("Ball", no_graphics=True, log_dir=Path("/logs"), env_args=("-logfile", "mine.log"))
    assert build_command(exe, 5006, settings) == [
        str(exe),
        "-nographics",
        "-batchmode",
        "--mlagents-port",
        "5006",
        "-logfile",
        "mine.log",
    ]


def test_resolve_build_finds_the_linux_executable_and_names_what_it_tried(tmp_path: Path) -> None:
    exe = tmp_path / "Ball.x86_64"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert resolve_build(str(tmp_path / "Ball")) == exe
    assert resolve_build(str(exe)) == exe
    with pytest.raises(ConfigError, match=r"--env '.*Nope': no executable Unity build found \(tried .*Nope\.x86_64"):
        resolve_build(str(tmp_path / "Nope"))
