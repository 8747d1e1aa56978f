"""BC alone, from a recorded 100-step expert demo of the 1-D task, publishes a policy that scores above 0.9.

The demo is recorded by ``stepstream record``'s loop with the task's scripted expert (17 episodes
of 6 records: 102 records, 101 rows, 10 of them held out). Offline BC (``trainer.offline.offline_loop``,
the trainer loop with demonstration passes as its source) clones it with no env
and checkpoints the policy it published; that very ``.policy.pb`` then acts through the real
processor (gRPC, batched TFLite inference, sampling), as ``stepstream train --inference`` runs it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli.record import demo_bytes, record_episodes, scripted_actor
from common.config import BCHyperparameters, BehaviorSettings, NetworkSettings, TrainerType
from envclient.runner import run_env
from envclient.session import EnvSession
from envclient.simple_env import BEST_RETURN, SimpleEnv, scripted_expert
from processor.behaviors import BehaviorRuntime, ProcessorSettings
from processor.server import ProcessorServer, ServerOptions
from protos import pb
from trainer.bc_metrics import BC_METRICS_FILE
from trainer.loop import configure_tf_threads
from trainer.offline import offline_loop

pytestmark = pytest.mark.learning

BEHAVIOR = "Simple1D"
DEMO_EPISODES = 17
"""17 expert episodes of 6 records: the 100-step demo."""
EVAL_AGENTS = 10
EVAL_ENV_STEPS = 14
"""Two 6-step episodes per agent at least (an episode ends at step 5, the next row starts the next one)."""
THRESHOLD = 0.9


def _settings(demo_path: Path) -> BehaviorSettings:
    return BehaviorSettings(
        trainer_type=TrainerType.BC,
        hyperparameters=BCHyperparameters(demo_path=str(demo_path), batch_size=16, num_epoch=3, learning_rate=1e-3),
        network_settings=NetworkSettings(hidden_units=32, num_layers=2),
        max_steps=6000,
        summary_freq=2000,
        checkpoint_interval=100_000,
    )


async def _act(update: pb.PolicyUpdate, settings: BehaviorSettings, continuous: bool, seed: int) -> list[float]:
    """Episode returns of EVAL_AGENTS copies acting with ``update`` through a real processor."""
    processor = ProcessorSettings(
        behaviors={BEHAVIOR: BehaviorRuntime.from_settings(settings)}, strict=True, seed=seed, declared_subscribers=()
    )
    server = ProcessorServer(processor, ServerOptions(port=0))
    port = await server.start()
    try:
        assert server.topics.policies(BEHAVIOR).publish(update, update.version)
        env = SimpleEnv(EVAL_AGENTS, continuous=continuous, behavior_name=BEHAVIOR, seed=seed + 100)
        async with EnvSession(f"127.0.0.1:{port}", "bc-eval", [env.brain_parameters]) as session:
            stats = await run_env(session, env, BEHAVIOR, max_env_steps=EVAL_ENV_STEPS)
    finally:
        await server.stop(1.0)
    assert all(v == update.version for v in stats.policy_versions)
    return stats.episode_returns


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_bc_from_recorded_demo_scores_like_the_expert(continuous: bool, tmp_path: Path) -> None:
    configure_tf_threads()
    env = SimpleEnv(4, continuous=continuous, behavior_name=BEHAVIOR, seed=0)
    pairs, returns = record_episodes(env, scripted_actor(scripted_expert, env.brain_parameters, "expert"), DEMO_EPISODES)
    demo = tmp_path / "expert.demo"
    demo.write_bytes(demo_bytes("expert", env.brain_parameters, pairs, returns))
    assert len(pairs) == 102

    settings = _settings(demo)
    result = offline_loop(BEHAVIOR, settings, seed=0, results_dir=tmp_path, run_started_at=0.0).run()
    metrics = json.loads((tmp_path / BEHAVIOR / BC_METRICS_FILE).read_text())
    assert metrics["held_out_rows"] == 10
    assert metrics[("held_out_r2" if continuous else "held_out_accuracy")] > 0.9, metrics

    (policy_file,) = (tmp_path / BEHAVIOR / "checkpoints").glob("*.policy.pb")
    update = pb.PolicyUpdate.FromString(policy_file.read_bytes())
    assert update.version == result.policy_version
    rewards = asyncio.run(_act(update, settings, continuous, seed=1))
    assert len(rewards) >= EVAL_AGENTS
    assert sum(rewards) / len(rewards) > THRESHOLD, rewards
    assert max(rewards) <= BEST_RETURN + 1e-6
