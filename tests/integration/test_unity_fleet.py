"""``stepstream unity --env PATH --num-envs N``: copies of a fake build on consecutive ports, restarted after a crash.

The fake build (a Python script named like a Linux build) plays ``tests.unity_fake``'s sequence
against its ``--mlagents-port``, as a Unity build does, and records each launch. With a crash file
it SIGKILLs itself mid-session on its first launch (as a crashed player dies, without a Stop); the
gateway must have the copy started again on the same port, as a new Unity session, within
ML-Agents' restart quota.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from envclient.unity import translate
from tests.integration.conftest import StartProcessor
from tests.integration.helpers import Harness, itest_settings
from tests.integration.test_cli import REPO, run_cli, stepstream_command, subprocess_env
from tests.unity_fake import agent_info, brain_proto

WALKER = brain_proto("Walker", continuous=2)
STEPS = 3

FAKE_BUILD = """#!{python}
import asyncio, json, os, signal, sys
sys.path.insert(0, {repo!r})
from tests.unity_fake import FakeUnity, agent_info, brain_proto

argv = sys.argv[1:]
port = int(argv[argv.index("--mlagents-port") + 1])
crash = {crash!r} and not os.path.exists({crash!r})
with open({record!r}, "a") as f:
    f.write(json.dumps({{"port": port, "crash": bool(crash)}}) + "\\n")


async def main():
    unity = FakeUnity(f"127.0.0.1:{{port}}")
    unity.brains["Walker"] = brain_proto("Walker", continuous=2)
    await unity.start()
    for t in range({steps}):
        reply = await unity.step({{"Walker": [agent_info(port, [[t, 1.0, 0.5]])]}})
        assert reply.header.status == 200 and len(reply.unity_input.rl_input.agent_actions["Walker"].value) == 1
        if crash:
            open({crash!r}, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    await unity.stop()


asyncio.run(main())
sys.exit({code})
"""


def _fake_build(tmp_path: Path, crash: bool, code: int = 0) -> tuple[Path, Path]:
    record = tmp_path / "launches.jsonl"
    build = tmp_path / "Game.x86_64"
    crash_file = str(tmp_path / "crashed") if crash else ""
    text = FAKE_BUILD.format(
        python=sys.executable, repo=str(REPO), record=str(record), crash=crash_file, steps=STEPS, code=code
    )
    build.write_text(text)
    build.chmod(0o755)
    return build, record


async def _run_unity(address: str, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *stepstream_command(), "unity", "--processor", address, *args,
        cwd=REPO, env=subprocess_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(proc.communicate(), 90.0)
    assert proc.returncode is not None
    return proc.returncode, output.decode()


async def test_two_copies_on_consecutive_ports_and_a_crashed_copy_is_restarted(
    start_processor: StartProcessor, tmp_path: Path
) -> None:
    server, address = await start_processor(itest_settings())
    harness = Harness(server, address)
    harness.publish_policy(translate.behavior_spec(WALKER, agent_info(1, [[0.0, 1.0, 0.5]])), 1)
    _, record = _fake_build(tmp_path, crash=True)
    code, text = await _run_unity(address, "--env", str(tmp_path / "Game"), "--num-envs", "2", "--base-port", "0")
    assert code == 0, text
    launches = [json.loads(line) for line in record.read_text().splitlines()]
    by_port: dict[int, list[bool]] = {}
    for launch in launches:
        by_port.setdefault(launch["port"], []).append(launch["crash"])
    assert len(by_port) == 2, launches  # one port per copy
    # A copy that crashed was started again on its port; the copies that never saw the crash file
    # both crashed, a copy started after one crashed did not.
    for crashes in by_port.values():
        assert crashes in ([True, False], [False]), launches
    restarted = sum(len(crashes) == 2 for crashes in by_port.values())
    assert restarted >= 1
    assert len(re.findall(r"copy \d \(port \d+\) exited with code -9: restarting it \(restart 1\)", text)) == restarted, text
    # Every launch's steps reached the processor: the crashed one 1, the others all of theirs.
    experiences = 0
    deadline = asyncio.get_running_loop().time() + 20.0
    while experiences < 2 * (STEPS - 1) and asyncio.get_running_loop().time() < deadline:
        experiences += sum(t.length for t in await harness.claim("Walker"))
        await asyncio.sleep(0.05)
    assert experiences >= 2 * (STEPS - 1), experiences


async def test_a_copy_past_its_restarts_fails_the_command_naming_the_quota(
    start_processor: StartProcessor, tmp_path: Path
) -> None:
    server, address = await start_processor(itest_settings())
    Harness(server, address).publish_policy(translate.behavior_spec(WALKER, agent_info(1, [[0.0, 1.0, 0.5]])), 1)
    _, record = _fake_build(tmp_path, crash=False, code=3)
    code, text = await _run_unity(
        address, "--env", str(tmp_path / "Game"), "--base-port", "0",
        "--max-lifetime-restarts", "2", "--restarts-rate-limit-n", "-1",
    )  # fmt: skip
    assert code == 2, text
    assert len(record.read_text().splitlines()) == 3  # the first launch and two restarts
    assert "exited with code 3 and has no restart left (2 restarts; max_lifetime_restarts 2" in text, text


@pytest.mark.parametrize("extra", [[], ["--num-envs", "2"]])
async def test_without_a_build_it_waits_for_the_editor_with_mlagents_learns_hint(
    start_processor: StartProcessor, extra: list[str]
) -> None:
    _, address = await start_processor(itest_settings())
    proc = await asyncio.create_subprocess_exec(
        *stepstream_command(), "unity", "--port", "0", "--processor", address, *extra,
        cwd=REPO, env=subprocess_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    if extra:  # copies need a build
        output, _ = await asyncio.wait_for(proc.communicate(), 30.0)
        assert proc.returncode == 2 and "--num-envs 2: copies need a build to launch (--env PATH)" in output.decode()
        return
    try:
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30.0)).decode()
            assert line, "stepstream unity exited before listening"
            if "Listening on port" in line:
                assert re.search(
                    r"Listening on port \d+\. Start training by pressing the Play button in the Unity Editor\.", line
                )
                break
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30.0) == 0


TRAINING_BUILD = """#!{python}
import asyncio, json, os, signal, sys
sys.path.insert(0, {repo!r})
import struct
import numpy as np
from envclient.unity.side_channels import STATS, frame
from tests.unity_fake import FakeUnity, agent_info, brain_proto

argv = sys.argv[1:]
port = int(argv[argv.index("--mlagents-port") + 1])
# The first copy to create the marker is the one that crashes: O_EXCL, since both copies start at once.
try:
    os.close(os.open({crash!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    crash = True
except FileExistsError:
    crash = False
with open({record!r}, "a") as f:
    f.write(json.dumps({{"port": port, "crash": crash, "argv": argv}}) + "\\n")


async def main():
    rng = np.random.default_rng(port)
    unity = FakeUnity(f"127.0.0.1:{{port}}")
    unity.brains["Walker"] = brain_proto("Walker", continuous=2)
    await unity.start()
    ids, t = list(range(4)), 0
    while True:
        t += 1
        done = t % 10 == 0
        obs = rng.standard_normal((4, 3)).tolist()
        infos = [agent_info(port * 1000 + i, [obs[k]], float(rng.standard_normal()), done) for k, i in enumerate(ids)]
        laps = frame(STATS, struct.pack("<i", 8) + b"Env/Laps" + struct.pack("<fi", 2.0, 0))  # 2.0, average
        reply = await unity.step({{"Walker": infos}}, side_channel=laps)
        if reply.header.status != 200:
            return
        if done:
            ids = [i + 4 for i in ids]
        if crash and t == 25:
            os.kill(os.getpid(), signal.SIGKILL)


asyncio.run(main())
"""

TRAIN_CONFIG = """
behaviors:
  Walker:
    trainer_type: ppo
    hyperparameters: {batch_size: 32, buffer_size: 128}
    network_settings: {hidden_units: 16, num_layers: 1}
    time_horizon: 16
    max_steps: 600
    summary_freq: 300
    checkpoint_interval: 600
env_settings:
  base_port: 0
  max_lifetime_restarts: 1
engine_settings: {time_scale: 20}
"""


def test_train_launches_two_copies_of_a_build_restarts_a_crashed_one_and_trains(tmp_path: Path) -> None:
    import subprocess

    record = tmp_path / "launches.jsonl"
    build = tmp_path / "Game.x86_64"
    build.write_text(
        TRAINING_BUILD.format(python=sys.executable, repo=str(REPO), record=str(record), crash=str(tmp_path / "c"))
    )
    build.chmod(0o755)
    config = tmp_path / "walker.yaml"
    config.write_text(TRAIN_CONFIG)
    done = subprocess.run(
        [*stepstream_command(), "train", str(config), "--env", str(tmp_path / "Game"), "--num-envs", "2",
         "--results-dir", str(tmp_path / "results"), "--run-id", "unity", "--no-progress"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    launches = [json.loads(line) for line in record.read_text().splitlines()]
    assert len({launch["port"] for launch in launches}) == 2, launches
    assert sum(launch["crash"] for launch in launches) == 1 and len(launches) == 3, launches  # the crashed copy, again
    assert "restarting it (restart 1)" in text, text
    logs = tmp_path / "results" / "unity" / "run_logs"
    assert {launch["argv"][-1] for launch in launches} == {str(logs / "Player-0.log"), str(logs / "Player-1.log")}
    assert (tmp_path / "results" / "unity" / "Walker.onnx").exists(), text  # the trainer started on declare and finished
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "results" / "unity" / "Walker"))
    events.Reload()
    assert "Env/Laps" in events.Tags()["scalars"], events.Tags()  # Unity's stats channel, in the trainer's summaries
    assert {s.value for s in events.Scalars("Env/Laps")} == {2.0}


def test_train_with_an_online_behavior_and_no_env_waits_for_the_editor(tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "walker.yaml"
    config.write_text(TRAIN_CONFIG.replace("  base_port: 0\n", ""))
    proc = subprocess.Popen(
        [*stepstream_command(), "train", str(config), "--results-dir", str(tmp_path / "results"), "--no-progress"],
        cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "Listening on port" in line:
                assert "Listening on port 5004. Start training by pressing the Play button in the Unity Editor." in line
                break
        else:
            raise AssertionError("".join(lines))
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=90)
    assert proc.returncode == 143, rest  # SIGTERM: checkpoints saved (none yet), 128 + 15 as a shell reports it


LATE_BUILD = """#!{python}
import asyncio, json, os, sys
sys.path.insert(0, {repo!r})
from tests.unity_fake import FakeUnity, agent_info, brain_proto

argv = sys.argv[1:]
port = int(argv[argv.index("--mlagents-port") + 1])
steps = int(open({mode!r}).read())  # 0: until the gateway stops answering 200
with open({record!r}, "a") as f:
    f.write(json.dumps({{"port": port}}) + "\\n")


async def main():
    unity = FakeUnity(f"127.0.0.1:{{port}}")
    unity.brains["Walker"] = brain_proto("Walker", continuous=2)
    unity.brains["Late"] = brain_proto("Late", branches=[3])
    await unity.start()
    t = 0
    while steps == 0 or t < steps:
        t += 1
        done, episode = t % 10 == 0, (t - 1) // 10  # a new id per episode (valid; Unity keeps an agent's id)
        infos = {{"Walker": [agent_info(port * 1000 + episode * 4 + i, [[t % 7, 1.0, 0.5]], 0.1, done) for i in range(4)]}}
        if t > {late_at}:  # a behavior that appears mid-run: Unity declares it with its first agents
            late = [agent_info(port * 1000 + 500 + episode * 2 + i, [[1.0, t % 5, 0.0]], 1.0, done) for i in range(2)]
            infos["Late"] = late
        reply = await unity.step(infos)
        if reply.header.status != 200:
            return
        actions = reply.unity_input.rl_input.agent_actions
        want = 0 if done else 4
        assert len(actions["Walker"].value) == want, (t, actions)
        if "Late" in infos:
            assert len(actions["Late"].value) == (0 if done else 2), (t, actions)
    await unity.stop()


asyncio.run(main())
"""

LATE_CONFIG = """
default_settings:
  trainer_type: ppo
  hyperparameters: {{batch_size: 32, buffer_size: 128}}
  network_settings: {{hidden_units: 16, num_layers: 1}}
  time_horizon: 16
  max_steps: 1000000
  summary_freq: 100000
  checkpoint_interval: 1000000
behaviors:
  Walker: {{}}
  Late: {{}}
env_settings:
  env_path: {build}
  num_envs: 2
  base_port: 0
  max_lifetime_restarts: 0
"""


def test_train_launches_the_yaml_env_path_build_shows_a_late_behavior_then_acts_with_inference(tmp_path: Path) -> None:
    """``env_settings.env_path`` naming a build launches its ``num_envs`` copies as ``--env`` does; a behavior Unity
    declares mid-run gets its bar and its trainer metrics; ``--inference`` then acts with the checkpoints."""
    import subprocess
    import urllib.request

    record, mode = tmp_path / "launches.jsonl", tmp_path / "mode"
    build = tmp_path / "Game.x86_64"
    build.write_text(LATE_BUILD.format(python=sys.executable, repo=str(REPO), record=str(record), mode=str(mode), late_at=20))
    build.chmod(0o755)
    config = tmp_path / "late.yaml"
    config.write_text(LATE_CONFIG.format(build=tmp_path / "Game"))
    results = ["--results-dir", str(tmp_path / "results"), "--run-id", "late"]
    mode.write_text("0")
    proc = subprocess.Popen(
        [*stepstream_command(), "train", str(config), *results, "--metrics-port", "0"],
        cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if found := re.search(r"metrics on (http://\S+/metrics)", line):
                break
        else:
            raise AssertionError("".join(lines))
        deadline = time.monotonic() + 120.0
        scraped = ""
        while time.monotonic() < deadline and proc.poll() is None:
            scraped = urllib.request.urlopen(found.group(1), timeout=10).read().decode()
            late = re.search(r'^stepstream_trainer_experiences_total\{behavior="Late"\} (\S+)$', scraped, re.M)
            if late and float(late.group(1)) > 0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(scraped + "".join(lines))
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=120)
    text = "".join(lines) + rest
    assert proc.returncode == 143, text  # SIGTERM: checkpoints saved
    assert len({json.loads(line)["port"] for line in record.read_text().splitlines()}) == 2, text  # num_envs from YAML
    assert re.search(r"^Late .* v\d+", text, re.M), text  # the late behavior's bar (its final state)
    assert re.search(r"^Walker .* v\d+", text, re.M), text
    recorded = tmp_path / "results" / "late" / "configuration.yaml"
    env_settings = yaml.safe_load(recorded.read_text())["env_settings"]
    assert (env_settings["env_path"], env_settings["num_envs"], env_settings["base_port"]) == (str(tmp_path / "Game"), 2, 0)

    # --inference, from the run's own configuration.yaml (it names the build): both behaviors act with their
    # checkpoints (the build asserts their actions) until the copies exit.
    mode.write_text("40")
    done = subprocess.run(
        [*stepstream_command(), "train", str(recorded), *results, "--inference"],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    for name in ("Walker", "Late"):
        assert re.search(rf"{name}: acting with the checkpoint of step \d+ \(policy version \d+\), not training", text), text
    assert re.search(r"^Late .* v\d+", text, re.M), text
    assert "refused" not in text, text


def test_train_inference_with_unity_and_no_checkpoint_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "late.yaml"
    config.write_text(LATE_CONFIG.format(build=tmp_path / "Game"))
    (tmp_path / "results" / "late").mkdir(parents=True)
    done = run_cli(["train", config, "--results-dir", tmp_path / "results", "--run-id", "late", "--inference"])
    assert done.returncode == 2, done.stdout
    assert "no behavior under behaviors has a checkpoint to run with --inference" in done.stdout, done.stdout
