"""``stepstream train`` with ``tests.unity_player`` (a player written from ML-Agents' C# sources), as a build and in
Editor mode, with an ML-Agents config that names behaviors as ML-Agents configs do (``3DBall:``) while Unity sends
``3DBall?team=0``.

The build is a script named like a Linux build that plays a scene against its ``--mlagents-port``; the Editor is the
same player dialing port 5004 once the run listens. Each run ends as mlagents-learn ends one: the gateway answers
status 400 once every behavior has finished, the player quits (writing its report, exit 0), and the run exits 0.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.integration.test_cli import REPO, run_cli, stepstream_command, subprocess_env
from tests.unity_player import BehaviorScene, Scene

BUILD = """#!{python}
import sys
sys.path.insert(0, {repo!r})
from tests.unity_player import main

sys.exit(main([{scene!r}, {report!r}, *sys.argv[1:]]))
"""

BEHAVIOR = """
  {name}:
    trainer_type: ppo
    hyperparameters: {{batch_size: 32, buffer_size: 128}}
    network_settings: {{hidden_units: 16, num_layers: 1}}
    time_horizon: 16
    max_steps: {max_steps}
    summary_freq: {max_steps}
    checkpoint_interval: {max_steps}
"""

MLAGENTS_3DBALL = REPO / "tests" / "data" / "mlagents_configs" / "ppo_3DBall.yaml"
BALL = BehaviorScene("3DBall?team=0", agents=4, observation_size=8, continuous=2, decision_period=2, max_step=25)
WALKER = BehaviorScene("Walker?team=0", agents=2, observation_size=3, continuous=0, branches=(3,), episode_lengths=(5, 8))


def _config(tmp_path: Path, budgets: dict[str, int], env: str = "") -> Path:
    config = tmp_path / "config.yaml"
    behaviors = "".join(BEHAVIOR.format(name=name, max_steps=steps) for name, steps in budgets.items())
    config.write_text(f"behaviors:{behaviors}\nengine_settings: {{time_scale: 20}}\n{env}")
    return config


def _stopped_at(text: str, name: str) -> int:
    found = re.search(rf"{name}: \w+ stopped \(max_steps\) at step (\d+)", text)
    assert found, text
    return int(found.group(1))


def test_a_build_trains_3dball_team_0_under_its_bare_name_and_exports_it(tmp_path: Path) -> None:
    scene, report = tmp_path / "scene.json", tmp_path / "report.json"
    scene.write_text(Scene((BALL,)).to_json())
    build = tmp_path / "Ball.x86_64"
    build.write_text(BUILD.format(python=sys.executable, repo=str(REPO), scene=str(scene), report=str(report)))
    build.chmod(0o755)
    config = tmp_path / "3DBall.yaml"  # ML-Agents' own config/ppo/3DBall.yaml, on any free port
    config.write_text(MLAGENTS_3DBALL.read_text() + "env_settings: {base_port: 0}\n")
    results = tmp_path / "results"
    run_args = ["--results-dir", results, "--run-id", "ball", "--no-progress", "--max-steps", "200"]
    done = run_cli(["train", config, "--env", tmp_path / "Ball", *run_args])
    assert done.returncode == 0, done.stdout
    assert _stopped_at(done.stdout, "3DBall") >= 200
    played = json.loads(report.read_text())  # written as the player quit
    assert played["quit_reason"] == "status 400" and played["errors"] == [] and played["unanswered"] == {}, played
    run = results / "ball"
    assert (run / "3DBall" / "checkpoints").is_dir() and (run / "3DBall.onnx").is_file()
    assert not [p for p in run.iterdir() if "?" in p.name], list(run.iterdir())
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "3DBall"))
    events.Reload()
    assert "Env/Speed" in events.Tags()["scalars"] and "Env/Speed_hist" in events.Tags()["histograms"], events.Tags()
    exported = run_cli(["export", run, "--out", tmp_path / "ball.onnx", "--behavior", "3DBall"])
    assert exported.returncode == 0, exported.stdout
    assert (tmp_path / "ball.onnx").stat().st_size > 0


def test_the_editor_with_two_behaviors_of_different_max_steps_trains_each_to_its_budget(tmp_path: Path) -> None:
    """3DBall's trainer finishes first; its agents are served on with its last policy while Walker trains to its own
    budget; then the Editor is told to quit (status 400) and the run exits 0."""
    config = _config(tmp_path, {"3DBall": 160, "Walker": 480})
    proc = subprocess.Popen(
        [*stepstream_command(), "train", str(config), "--results-dir", str(tmp_path / "results"), "--no-progress"],
        cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "Listening on port 5004" in line:
                break
        else:
            raise AssertionError("".join(lines))
        scene, report = tmp_path / "scene.json", tmp_path / "report.json"
        scene.write_text(Scene((BALL, WALKER)).to_json())
        player = subprocess.run(
            [sys.executable, "-m", "tests.unity_player", str(scene), str(report)],
            cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines) + rest
    assert player.returncode == 0, player.stdout + player.stderr + text
    assert proc.returncode == 0, text
    played = json.loads(report.read_text())
    assert played["quit_reason"] == "status 400" and played["unanswered"] == {}, played  # 3DBall acted on to the end
    assert _stopped_at(text, "3DBall") >= 160 and _stopped_at(text, "Walker") >= 480
    run = tmp_path / "results" / "ppo"
    assert (run / "3DBall.onnx").is_file() and (run / "Walker.onnx").is_file(), list(run.iterdir())
    assert "3DBall: training finished; acting with its last policy until every behavior has finished" in text


def test_a_refused_behavior_stops_the_run_naming_it(tmp_path: Path) -> None:
    """A behavior the config does not name is refused; as mlagents-learn, the run stops (the player is told to quit)
    rather than serving it empty actions forever."""
    scene, report = tmp_path / "scene.json", tmp_path / "report.json"
    scene.write_text(Scene((BALL, WALKER)).to_json())
    build = tmp_path / "Ball.x86_64"
    build.write_text(BUILD.format(python=sys.executable, repo=str(REPO), scene=str(scene), report=str(report)))
    build.chmod(0o755)
    config = _config(tmp_path, {"3DBall": 100000}, "env_settings: {base_port: 0}\n")
    done = run_cli(["train", config, "--env", tmp_path / "Ball", "--results-dir", tmp_path / "results", "--no-progress"])
    assert done.returncode != 0, done.stdout
    assert "behavior 'Walker?team=0' is refused: behaviors.Walker: not configured" in done.stdout, done.stdout
    assert json.loads(report.read_text())["quit_reason"] == "status 400"
