"""Smoke runs of the G1 benchmark scripts on a few steps, so the scripts behind docs/benchmarks.md keep running.

No figure is checked (speed belongs to the benchmarks themselves, run on a quiet machine): each script
exits 0 and its last line is the JSON it documents, with conserved counts where they are exact.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = Path(os.environ.get("STEPSTREAM_DEMO_DIR", REPO.parent / "shared" / "data" / "mlagents-demos"))


def last_json_line(script: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]  # e.g. a task that died unnoticed at the end
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def implied_experiences(clients: int, agents: int, steps: int, obs_shape: tuple[int, ...] = (32,)) -> int:
    """Experiences the first ``steps`` BrainInfos of each G1 client imply, all published once the sessions end:
    an agent's rows pair up, except across a done (the row after it starts a new episode) and after its last."""
    from benchmarks.grpc_g1 import brain_infos
    from common.tensors import from_tensor

    total = 0
    for index in range(clients):
        rows = list(itertools.islice(brain_infos(index, agents, obs_shape), steps))
        dones = sum(int(from_tensor(info.done).sum()) for info in rows[:-1])
        total += agents * (steps - 1) - dones
    return total


def test_grpc_g1_runs_end_to_end_and_reports_cpu_per_round_trip() -> None:
    out = last_json_line("grpc_g1.py", "--clients", "2", "--agents", "4", "--steps", "60", "--warmup", "10")
    assert out["workload"] == "G1" and out["server"] == "processor"
    assert out["agent_steps_per_s"] > 0 and 0 < out["p50_ms"] <= out["p99_ms"]
    assert out["server_cpu_us_per_round_trip"] > 0 and out["client_cpu_us_per_round_trip"] > 0
    assert out["experiences_published"] == implied_experiences(2, 4, 70) > 0


def test_grpc_g1_with_images_acts_with_a_nature_cnn_policy_and_publishes_every_experience() -> None:
    # 36x36: nature_cnn's minimum side; the frames travel as uint8 and the policy takes them so
    out = last_json_line("grpc_g1.py", "--clients", "2", "--agents", "3", "--steps", "40", "--warmup", "5", "--obs", "36x36x3")
    assert out["obs"] == "36x36x3" and out["agent_steps_per_s"] > 0
    assert out["experiences_published"] == implied_experiences(2, 3, 45, (36, 36, 3)) > 0


def test_grpc_g1_echo_hardened_serves_the_same_clients_through_the_processors_wiring() -> None:
    # 600 steps: an echo's window must hold two or more of the server's 20 ms CPU samples even when quick
    out = last_json_line(
        "grpc_g1.py", "--clients", "2", "--agents", "4", "--steps", "600", "--warmup", "10", "--server", "echo-hardened"
    )
    assert out["workload"] == "G1" and out["server"] == "echo-hardened"
    assert out["agent_steps_per_s"] > 0 and out["server_cpu_us_per_round_trip"] > 0
    assert out["experiences_published"] == 0  # an echo: nothing is assembled


def test_step_path_drives_the_servicer_without_grpc() -> None:
    out = last_json_line("step_path.py", "--clients", "2", "--agents", "4", "--steps", "70")
    assert out["workload"] == "G1-step-path"
    assert out["cpu_us_per_request"] > 0
    assert out["mean_rows_per_forward_pass"] == 8.0  # both sessions' rows in every pass
    assert out["experiences_published"] == implied_experiences(2, 4, 70) > 0


def test_step_path_part_assembly_times_the_assembler_of_the_tree_on_pythonpath() -> None:
    """``--part assembly`` measures the tree PYTHONPATH names (the before/after runs rely on it), here this one."""
    out = last_json_line("step_path.py", "--clients", "2", "--agents", "4", "--steps", "140", "--part", "assembly")
    assert out["workload"] == "G1-assembly" and out["cpu_us_per_add"] > 0
    assert out["trajectories"] > 0  # 140 steps of time_horizon 64: every agent cut at least once
    assert Path(out["tree"]) == Path(os.environ.get("PYTHONPATH", str(REPO)).split(os.pathsep)[0]).resolve()


@pytest.mark.skipif(not (DEMO_DIR / "test.demo").exists(), reason=f"no test.demo at {DEMO_DIR} (set STEPSTREAM_DEMO_DIR)")
def test_demo_action_predictability_on_test_demo() -> None:
    out = last_json_line("demo_action_predictability.py", str(DEMO_DIR / "test.demo"))
    assert out["rows"] == 2143 and out["executed_action_record"] == "i+1"
    assert out["inverse_dynamics_r2"] > 0.9 > out["policy_r2"]["quadratic"]


def test_soak_with_a_hostile_minority_conserves_the_good_clients_experiences() -> None:
    from benchmarks.hostile import HOSTILE_KINDS

    out = last_json_line(
        "soak.py",
        *("--clients", "2", "--agents", "4", "--seconds", "3", "--client-processes", "1", "--policy-every-s", "1"),
        *("--hostile", "2", "--flood-agents", "8192", "--flood-twice-agents", "256"),
    )
    for key in ("peak_processor_rss_mb", "conserved", "hostile_clients", "hostile_kinds", "good_agent_steps_per_s"):
        assert key in out, key
    assert out["hostile_clients"] == 2
    assert {(k["kind"], k["issue_point"]) for k in out["hostile_kinds"]} == {(n, k.point) for n, k in HOSTILE_KINDS.items()}
    assert set(out["hostile_outcomes"]) == set(HOSTILE_KINDS), "a kind never completed an attempt"
    assert out["good_agent_steps_per_s"] > 0 and out["good_experiences_implied"] > 0
    assert out["good_conserved"] is True and out["conserved"] is True
    assert out["rss_bound_mb"] > out["baseline_rss_mb"] > 0


def test_unity_check_measures_the_gateways_added_latency() -> None:
    # The ML-Agents side (transcripts, its exporter) needs ../shared/yardsticks' environment: not run here.
    out = last_json_line("unity_mlagents_check.py", "--skip-transcripts", "--skip-onnx", "--steps", "50")
    assert out["workload"] == "unity_check" and out["latency_steps"] == 50
    assert 0 < out["gateway_p50_ms"] <= out["gateway_p99_ms"] and 0 < out["direct_p50_ms"] <= out["direct_p99_ms"]
    assert out["gateway_added_p50_ms"] == out["gateway_p50_ms"] - out["direct_p50_ms"]
    assert out["gateway_cpu_us_per_exchange"] >= 0


def test_unity_check_times_the_echo_floor() -> None:
    out = last_json_line(
        "unity_mlagents_check.py", "--skip-transcripts", "--skip-onnx", "--skip-latency", "--echo-floor", "--steps", "50"
    )
    for mode in ("aio", "sync"):
        assert 0 < out[f"echo_{mode}_p50_ms"] <= out[f"echo_{mode}_p99_ms"] and out[f"echo_{mode}_server_cpu_us_per_call"] >= 0
        assert out[f"stream_{mode}_client_p50_ms"] > 0 and out[f"stream_{mode}_client_cpu_us_per_step"] > 0


def test_inference_pixels_times_a_visual_policy_pass() -> None:
    result = last_json_line("inference_pixels.py", "--batches", "1,2", "--rounds", "1", "--min-seconds", "0.01")
    assert result["encoder"] == "nature_cnn" and result["frame"] == [84, 84, 3] and result["patches_weights"]
    for n in ("n1", "n2"):
        assert set(result[n]) == {"forward_ms", "forward_1thread_ms", "threads", "per_row_us", "act_ms", "tf_function_ms"}
        assert result[n]["threads"] == 1  # one or two 84x84x3 frames stay below the wide-batch interpreter's size


def test_mlagents_examples_parses_every_config_and_starts_one() -> None:
    if not (REPO.parent / "shared" / "data" / "mlagents-configs").is_dir():
        pytest.skip("ML-Agents' example configs are not beside this checkout")
    parsed = last_json_line("mlagents_examples.py", "--parse-only")
    assert parsed["configs"] == 39 and parsed["parse"] + len(parsed["refused"]) == 39
    started = last_json_line("mlagents_examples.py", "--only", "ppo/PyramidsRND", "--steps", "300")
    assert (started["parse"], started["start"], started["failed"]) == (1, 1, {})
