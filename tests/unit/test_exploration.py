"""Held per-agent action noise (processor.exploration), and how inference and batching use it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from common.config import BehaviorSettings, PPOHyperparameters, SACHyperparameters, TrainerType
from processor.batching import InferenceBatcher
from processor.behaviors import BehaviorRuntime
from processor.exploration import HeldNoise
from processor.inference import Policy
from protos import pb
from tests.policies import build_mlp_policy_update

NO_DONE = np.zeros(2, bool)


def held(hold_steps: int, size: int = 2) -> HeldNoise:
    return HeldNoise(size, hold_steps, np.random.default_rng(0))


def test_an_agents_noise_is_held_for_hold_steps_then_drawn_anew() -> None:
    noise = held(3)
    ids = np.array([4, 9])
    draws = [noise.draw(ids, NO_DONE) for _ in range(7)]
    for start in (0, 3):
        for step in (1, 2):
            np.testing.assert_array_equal(draws[start + step], draws[start])
    assert not np.any(draws[3] == draws[0]) and not np.any(draws[6] == draws[3])
    assert not np.any(draws[0][0] == draws[0][1])  # each agent its own draw
    assert draws[0].dtype == np.float32 and draws[0].shape == (2, 2)


def test_the_noise_is_drawn_anew_at_episode_start_and_the_done_agent_is_forgotten() -> None:
    noise = held(5)
    ids = np.array([4, 9])
    first = noise.draw(ids, NO_DONE)
    at_done = noise.draw(ids, np.array([True, False]))
    np.testing.assert_array_equal(at_done, first)  # the done row still acts with its noise (its action is discarded)
    assert len(noise) == 1
    new_episode = noise.draw(ids, NO_DONE)
    assert not np.any(new_episode[0] == first[0])  # agent 4 is back: a first sighting, a fresh draw
    np.testing.assert_array_equal(new_episode[1], first[1])  # agent 9 still holds its draw (3rd of 5 steps)


def test_an_absent_agent_keeps_its_noise_and_its_count() -> None:
    noise = held(2)
    both, one = np.array([1, 2]), np.array([1])
    first = noise.draw(both, NO_DONE)
    for _ in range(3):
        noise.draw(one, np.zeros(1, bool))  # agent 2 absent: its own steps do not advance
    second = noise.draw(both, NO_DONE)
    np.testing.assert_array_equal(second[1], first[1])
    assert not np.any(noise.draw(both, NO_DONE)[1] == first[1])  # its third step: a new draw


def test_state_stays_bounded_by_the_live_agents_and_goes_at_clear() -> None:
    noise = held(4, size=1)
    for episode in range(50):  # 50 episodes of 6 agents with fresh ids each time
        ids = np.arange(6) + 6 * episode
        for _ in range(3):
            noise.draw(ids, np.zeros(6, bool))
        noise.draw(ids, np.ones(6, bool))
    assert len(noise) == 0 and noise.capacity == 8  # the slots of finished agents are reused
    noise.draw(np.arange(3), np.zeros(3, bool))
    assert len(noise) == 3
    noise.clear()
    assert len(noise) == 0 and noise.capacity == 0


def test_each_draw_is_a_standard_normal() -> None:
    """Held or fresh, a row's eps is N(0, 1): the per-step action stays N(mean, std), its log-prob unchanged."""
    noise = held(8, size=1)
    ids = np.arange(4000)
    rows = np.concatenate([noise.draw(ids, np.zeros(4000, bool)) for _ in range(9)])  # 8 held steps, then new ones
    assert abs(float(rows.mean())) < 0.05 and abs(float(rows.std()) - 1.0) < 0.05


@pytest.mark.parametrize("bad", [(0, 3), (2, 0)], ids=["no-dimensions", "no-steps"])
def test_held_noise_refuses_empty_sizes(bad: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        HeldNoise(*bad, np.random.default_rng(0))


SPEC = pb.ActionSpec(continuous_size=2, discrete_branches=[3])


def policy() -> Policy:
    return Policy.from_update(build_mlp_policy_update("Walker", [(5,)], SPEC, 1, seed=0))


def test_policy_act_uses_the_given_noise_with_the_gaussian_log_prob() -> None:
    walker = policy()
    obs = [np.random.default_rng(1).standard_normal((3, 5), dtype=np.float32)]
    eps = np.random.default_rng(2).standard_normal((3, 2), dtype=np.float32)
    out = walker.act(obs, None, np.random.default_rng(3), noise=eps)
    raw = walker.forward(obs)
    np.testing.assert_allclose(out.continuous_actions, raw["mean"] + np.exp(raw["log_std"]) * eps, rtol=1e-6)
    want = -0.5 * eps * eps - raw["log_std"] - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(out.continuous_log_probs, want, rtol=1e-5, atol=1e-6)


async def test_a_pass_mixes_requests_with_held_noise_and_without() -> None:
    b = InferenceBatcher("Walker", deadline_ms=10_000.0, rng=np.random.default_rng(4))
    b.set_policy(policy())
    b.set_active_sessions(2)
    obs = [np.zeros((2, 5), np.float32)]
    eps = np.array([[0.5, -1.0], [2.0, 0.0]], np.float32)
    with_noise, fresh = await asyncio.gather(b.act(obs, None, eps), b.act(obs, None))
    assert b.counters.forward_passes == 1
    raw = policy().forward(obs)
    np.testing.assert_allclose(with_noise.continuous_actions, raw["mean"] + np.exp(raw["log_std"]) * eps, rtol=1e-6)
    assert not np.allclose(fresh.continuous_actions, with_noise.continuous_actions)


def test_the_processor_reads_noise_hold_steps_from_the_ppo_config() -> None:
    held = BehaviorSettings(hyperparameters=PPOHyperparameters(noise_hold_steps=8))
    assert BehaviorRuntime.from_settings(held).noise_hold_steps == 8
    assert BehaviorRuntime.from_settings(BehaviorSettings()).noise_hold_steps == 1
    sac = BehaviorSettings(trainer_type=TrainerType.SAC, hyperparameters=SACHyperparameters())
    assert BehaviorRuntime.from_settings(sac).noise_hold_steps == 1
