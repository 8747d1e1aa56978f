"""Smoke run of ``benchmarks/broker.py`` on a few trajectories: it exits 0 and its last line is the JSON it documents.

No figure is checked (speed belongs to the benchmark, run on a quiet machine).
"""

from __future__ import annotations

from tests.integration.test_benchmarks import last_json_line


def test_broker_benchmark_reports_both_transports() -> None:
    out = last_json_line(
        "broker.py",
        *("--count", "40", "--latency-count", "5", "--policies", "3", "--processors", "2"),
        *("--fleet-clients", "2", "--fleet-agents", "2", "--fleet-seconds", "1"),
    )
    assert out["workload"] == "broker"
    for key in (
        "jetstream_trajectories_per_s_16k",
        "grpc_trajectories_per_s_16k",
        "jetstream_trajectories_per_s_256k",
        "grpc_trajectories_per_s_256k",
        "publish_to_learner_p50_ms",
        "publish_to_learner_p99_ms",
        "policy_propagation_p99_ms",
        "agent_steps_per_s_1_processor",
        "agent_steps_per_s_2_processors",
        "processor_cpu_us_per_agent_step_2_processors",
    ):
        assert out[key] > 0, key
    assert 15_000 < out["trajectory_bytes_16k"] < 18_000 and 250_000 < out["trajectory_bytes_256k"] < 280_000
