"""``export``, ``record`` and a ``train`` with an empty probe cache print nothing of TensorFlow's or LiteRT's own at
the default log level: no absl preamble, no ``cudart_stub``/``cpu_feature_guard``/oneDNN notices, no ``failed call
to cuInit``, no converter session lines, no ``Created TensorFlow Lite XNNPACK delegate`` (``cli.console``).

Each runs as a user runs it, by the console script, without the ``TF_CPP_MIN_LOG_LEVEL`` the other CLI tests set.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.simple_run import write_config
from tests.integration.test_cli import REPO, RUN_TIMEOUT_S, stepstream_command, subprocess_env, tail

NATIVE = re.compile(
    r"^[IWEF]\d{4} |absl|XNNPACK|cuInit|cuda|oneDNN|cpu_feature_guard|rebuild TensorFlow|tensorflow\.native|eligible GPUs",
    re.IGNORECASE | re.MULTILINE,
)


def run_as_a_user(args: list[str | Path], **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in subprocess_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [*stepstream_command(), *map(str, args)],
        cwd=REPO,
        env={**env, **extra_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("command", ["export", "record", "train-cold-cache"])
def test_no_native_noise_at_the_default_log_level(command: str, simple_ppo_run: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "simple.yaml", max_steps=300)
    extra_env = {}
    if command == "export":
        args: list[str | Path] = ["export", simple_ppo_run, "--out", tmp_path / "policy.onnx"]
    elif command == "record":
        args = ["record", config, "--checkpoint", simple_ppo_run, "--episodes", "2", "--out", tmp_path / "x.demo"]
    else:
        args = ["train", config, "--results-dir", tmp_path / "results", "--no-progress"]
        extra_env["STEPSTREAM_CACHE_DIR"] = str(tmp_path / "empty-cache")  # every probe converted again
    proc = run_as_a_user(args, **extra_env)
    assert proc.returncode == 0, tail(proc.stdout)
    assert NATIVE.search(proc.stdout) is None, tail(proc.stdout)
    if command == "train-cold-cache":
        assert any((tmp_path / "empty-cache").rglob("*")), "the premise: the probes were converted and cached"
