"""The worked SDK example (examples/custom_simulator.py) runs against the real processor, and as its docstring says.

* in process, against a processor on loopback: its agents of two behaviors (continuous, and discrete with masks),
  stepped concurrently on one session, finish episodes at different steps and are replaced by new ids; every
  finished episode comes out as a trajectory segment that ends it, time-limited ones marked interrupted;
* as its run instructions say: ``stepstream train examples/custom_simulator.yaml --serve PORT`` trains both
  behaviors from it, tells it when training finished (it ends on ``TrainingFinishedError``) and exits 0 itself.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from examples.custom_simulator import BEHAVIOR, STEPPER, STEPPER_PARAMS, WALKER, run
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from tests.integration.conftest import StartProcessor
from tests.integration.test_cli import REPO, RUN_TIMEOUT_S, stepstream_command, subprocess_env, tail
from tests.policies import build_mlp_policy_update
from tests.ports import PortReservation

STEPS = 120
AGENTS = 8
EXAMPLE_CONFIG = REPO / "examples" / "custom_simulator.yaml"


async def test_custom_simulator_example_streams_every_episode(start_processor: StartProcessor) -> None:
    runtime = BehaviorRuntime(time_horizon=16)
    settings = ProcessorSettings(behaviors={BEHAVIOR: runtime, STEPPER: runtime}, strict=True, declared_subscribers=("t",))
    server, address = await start_processor(settings)
    subscriptions = {}
    for params in (WALKER, STEPPER_PARAMS):
        update = build_mlp_policy_update(params.behavior_name, [(2,)], params.action_spec.to_proto(), version=1, seed=0)
        server.topics.policies(params.behavior_name).publish(update, 1)
        subscriptions[params.behavior_name] = server.topics.trajectories(params.behavior_name).subscribe("t")

    episodes = await run(address, agents=AGENTS, steps=STEPS)

    for name, subscription in subscriptions.items():
        trajectories = []
        while deliveries := await subscription.aget(timeout_s=0.5):
            trajectories += [d.item for d in deliveries]
            subscription.ack([d.tag for d in deliveries])
        ended = [t for t in trajectories if t.done_reached]
        assert episodes[name] > AGENTS and len(ended) == episodes[name], name
        assert len({t.episode_length for t in ended}) > 1, "agents finish at different steps"
        for t in ended:
            position, target = t.next_obs[0]
            reached = abs(position - target) < 0.05
            # A time limit (max_reached) ends an episode as done + interrupted, after exactly 50 steps.
            assert t.interrupted == (not reached)
            assert reached or t.episode_length == 50
        # Every row after an agent's first implies an experience: the live agents x (STEPS - 1) steps, all published.
        assert server.behaviors[name].counters.published_experiences == AGENTS * (STEPS - 1), name


def test_the_run_instructions_train_both_behaviors_and_end_by_themselves(tmp_path: Path, ports: PortReservation) -> None:
    port = ports.port()
    results = tmp_path / "results"
    log = tmp_path / "train.log"
    args = ["train", EXAMPLE_CONFIG, "--serve", str(port), "--max-steps", "1500", "--results-dir", results, "--no-progress"]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [*stepstream_command(), *map(str, args)], cwd=REPO, env=subprocess_env(), stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while "serving SDK env clients" not in log.read_text(encoding="utf-8"):
            assert proc.poll() is None and time.monotonic() < deadline, tail(log.read_text(encoding="utf-8"))
            time.sleep(0.1)
        episodes = asyncio.run(asyncio.wait_for(run(f"127.0.0.1:{port}", agents=AGENTS), RUN_TIMEOUT_S))
        assert proc.wait(RUN_TIMEOUT_S) == 0, tail(log.read_text(encoding="utf-8"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text(encoding="utf-8")
    assert all(count > 0 for count in episodes.values()), episodes
    for name in (BEHAVIOR, STEPPER):
        assert any((results / "ppo" / name / "checkpoints").glob("ckpt-*.index")), (name, tail(output))
        assert f"training of behavior '{name}' finished" in output, tail(output)
    assert "Traceback" not in output, tail(output)


def test_served_training_waits_for_a_client_that_left_and_ctrl_c_says_how_to_continue(
    tmp_path: Path, ports: PortReservation
) -> None:
    port = ports.port()
    log = tmp_path / "train.log"
    args = ["train", EXAMPLE_CONFIG, "--serve", str(port), "--results-dir", tmp_path / "results", "--no-progress"]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [*stepstream_command(), *map(str, args)], cwd=REPO, env=subprocess_env(), stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while "serving SDK env clients" not in log.read_text(encoding="utf-8"):
            assert proc.poll() is None and time.monotonic() < deadline, tail(log.read_text(encoding="utf-8"))
            time.sleep(0.1)
        asyncio.run(run(f"127.0.0.1:{port}", agents=AGENTS, steps=40))  # the simulator stops long before max_steps
        while "no SDK client is connected" not in log.read_text(encoding="utf-8"):
            assert proc.poll() is None and time.monotonic() < deadline, tail(log.read_text(encoding="utf-8"))
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(RUN_TIMEOUT_S) == 130, tail(log.read_text(encoding="utf-8"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text(encoding="utf-8")
    assert f"--serve 127.0.0.1:{port} --resume" in output.splitlines()[-1], tail(output)
