"""BC clones the scripted expert of the 1-D task well enough to act through the real processor."""

from __future__ import annotations

import pytest

from common.config import BCHyperparameters, BehaviorSettings, NetworkSettings, TrainerType
from envclient.simple_env import BEST_RETURN, simple_brain_parameters
from tests.learning.harness import BEHAVIOR, collect_expert_rows, train_on_simple_env
from trainer.bc import BCLearner
from trainer.summaries import CLONING_LOSS

pytestmark = pytest.mark.learning

EPISODES = 5
THRESHOLD = 0.9
"""Mean return over EPISODES episodes (best 1.02; a policy that walks the wrong way gets -1.10)."""


def bc_settings() -> BehaviorSettings:
    return BehaviorSettings(
        trainer_type=TrainerType.BC,
        hyperparameters=BCHyperparameters(demo_path="scripted-expert", batch_size=64, num_epoch=3, learning_rate=1e-3),
        network_settings=NetworkSettings(hidden_units=32, num_layers=2),
        max_steps=100_000,
        summary_freq=1_000,
    )


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_pretrained_bc_policy_acts_like_the_expert(continuous: bool, seed: int) -> None:
    settings = bc_settings()
    learner = BCLearner(simple_brain_parameters(BEHAVIOR, continuous), settings, seed)
    assert learner.load_rows(collect_expert_rows(continuous, seed)) > 400
    losses = [learner.update()[CLONING_LOSS] for _ in range(8)]
    assert losses[-1] < losses[0]

    run = train_on_simple_env(
        settings,
        continuous=continuous,
        seed=seed,
        learner=learner,
        num_envs=1,
        agents_per_env=EPISODES,
        should_stop=lambda result: result.episodes >= EPISODES,
    )
    rewards = run.episode_rewards[:EPISODES]
    assert len(rewards) == EPISODES
    assert run.trainer.episode_policy_versions[:EPISODES] == [0] * EPISODES  # the pre-trained policy, published at start
    assert sum(rewards) / EPISODES > THRESHOLD, rewards
    assert max(rewards) <= BEST_RETURN + 1e-6
    # The env client's own returns agree, and every experience it sent reached the processor's counts.
    assert sorted(run.envs[0].episode_returns[:EPISODES]) == pytest.approx(sorted(rewards), abs=1e-5)
    counters = run.processor
    assert counters is not None
    assert (
        run.env_experiences
        == counters.published_experiences + counters.stale_dropped_experiences + counters.unpublished_experiences
    )


def test_bc_trained_inside_the_loop_improves() -> None:
    """The untrained first version acts; BC updates in the trainer loop until version 8 acts near the expert."""
    settings = bc_settings()
    learner = BCLearner(simple_brain_parameters(BEHAVIOR, False), settings, seed=0)
    learner.load_rows(collect_expert_rows(False, seed=0))
    target_version = 8

    def late_episodes(result: object) -> list[float]:
        versions = result.episode_policy_versions  # type: ignore[attr-defined]
        return [r for r, v in zip(result.episode_rewards, versions, strict=True) if v >= target_version]  # type: ignore[attr-defined]

    run = train_on_simple_env(
        settings,
        continuous=False,
        seed=0,
        learner=learner,
        num_envs=2,
        agents_per_env=4,
        should_stop=lambda r: len(late_episodes(r)) >= EPISODES,
    )
    assert run.trainer.updates >= target_version
    late = late_episodes(run.trainer)[:EPISODES]
    assert sum(late) / len(late) > THRESHOLD, late
