"""``network_settings.deterministic`` / ``--deterministic``: acting with the mode (``processor.inference``,
``processor.batching``), the flags that set it and ``init_path`` / ``--initialize-from`` (``cli.run_overrides``,
``trainer.loop.initialize_from``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from cli.run_overrides import check_init_paths, with_deterministic, with_initialize_from
from common.config import parse_config
from common.errors import ConfigError
from processor.batching import InferenceBatcher
from processor.behaviors import BehaviorRuntime
from tests.unit.test_inference import CONT, DISC, HALF_LOG_2PI, HYBRID, log_softmax, make_obs, policy


def test_continuous_deterministic_actions_are_the_mean_with_its_log_prob() -> None:
    p, obs = policy(CONT, clip=3.0), make_obs(64)
    outputs = p.forward(obs)
    out = p.act(obs, None, np.random.default_rng(0), deterministic=True)
    np.testing.assert_array_equal(out.continuous_actions, outputs["mean"])
    np.testing.assert_allclose(out.env_continuous_actions, np.clip(outputs["mean"], -3, 3) / 3, rtol=1e-6)
    np.testing.assert_allclose(out.continuous_log_probs, -outputs["log_std"] - HALF_LOG_2PI, rtol=1e-6)
    noise = np.full((64, 2), 5.0, np.float32)  # held noise is not used either
    again = p.act(obs, None, np.random.default_rng(1), noise=noise, deterministic=True)
    np.testing.assert_array_equal(again.continuous_actions, out.continuous_actions)


def test_discrete_deterministic_actions_are_the_allowed_arg_max() -> None:
    n = 256
    rng = np.random.default_rng(2)
    mask = rng.random((n, 5)) < 0.6
    mask[:, 0] |= ~mask[:, :3].any(axis=1)
    mask[:, 3] |= ~mask[:, 3:].any(axis=1)
    p, obs = policy(DISC), make_obs(n)
    logits = p.forward(obs)["logits"]
    out = p.act(obs, mask, rng, deterministic=True)
    for b, cols in enumerate([slice(0, 3), slice(3, 5)]):
        masked = np.where(mask[:, cols], logits[:, cols], -np.inf)
        np.testing.assert_array_equal(out.discrete_actions[:, b], masked.argmax(axis=1))
        lp = log_softmax(np.where(mask[:, cols], logits[:, cols], -1e9))
        np.testing.assert_allclose(out.discrete_log_probs[:, b], lp[np.arange(n), out.discrete_actions[:, b]], atol=1e-5)


def test_sampling_is_the_default_and_differs_from_the_mode() -> None:
    p, obs = policy(HYBRID), make_obs(64)
    sampled = p.act(obs, None, np.random.default_rng(0))
    greedy = p.act(obs, None, np.random.default_rng(0), deterministic=True)
    assert not np.array_equal(sampled.continuous_actions, greedy.continuous_actions)


async def test_the_batcher_acts_with_the_mode_when_deterministic() -> None:
    p, obs = policy(HYBRID), make_obs(8)
    batcher = InferenceBatcher("Walker", rng=np.random.default_rng(0), deterministic=True)
    batcher.set_policy(p)
    out = await batcher.act(obs, None)
    np.testing.assert_array_equal(out.continuous_actions, p.forward(obs)["mean"])


def test_the_key_and_the_flag_reach_the_processor() -> None:
    options = parse_config({"behaviors": {"A": {"network_settings": {"deterministic": True}}, "B": {}}})
    assert BehaviorRuntime.from_settings(options.behaviors["A"]).deterministic
    assert not BehaviorRuntime.from_settings(options.behaviors["B"]).deterministic
    flagged = with_deterministic(options, True)
    assert all(BehaviorRuntime.from_settings(s).deterministic for s in flagged.behaviors.values())
    assert with_deterministic(options, False) is options
    assert parse_config(flagged.to_dict()).behaviors["B"].network_settings.deterministic


def test_initialize_from_fills_the_init_paths_a_config_left_unset(tmp_path: Path) -> None:
    options = parse_config({"behaviors": {"A": {"init_path": "elsewhere/A"}, "B": {}}})
    out = with_initialize_from(options, tmp_path, "first")
    assert out.behaviors["A"].init_path == "elsewhere/A"
    assert out.behaviors["B"].init_path == str(tmp_path / "first" / "B")
    assert with_initialize_from(options, tmp_path, None) is options


def test_an_init_path_without_checkpoints_is_refused_naming_its_key(tmp_path: Path) -> None:
    options = parse_config({"behaviors": {"B": {"init_path": str(tmp_path / "none")}}})
    with pytest.raises(ConfigError, match=r"c\.yaml: behaviors\.B\.init_path: .* holds no checkpoints"):
        check_init_paths(Path("c.yaml"), options, ["B"])
    check_init_paths(Path("c.yaml"), options, ["B"], resume=True)  # --resume ignores it
    (tmp_path / "none" / "checkpoints").mkdir(parents=True)
    check_init_paths(Path("c.yaml"), options, ["B"])


def test_initialize_from_loads_the_weights_not_the_step(tmp_path: Path) -> None:
    from envclient.simple_env import simple_brain_parameters
    from trainer.checkpoint import Checkpointer
    from trainer.loop import initialize_from
    from trainer.ppo import PPOLearner

    options = parse_config({"behaviors": {"Simple1D": {"network_settings": {"hidden_units": 8, "num_layers": 1}}}})
    settings = options.behaviors["Simple1D"]
    params = simple_brain_parameters("Simple1D", True)
    first = PPOLearner(params, settings, seed=0, warm_up=False)
    first.set_step(700)
    Checkpointer(tmp_path / "Simple1D" / "checkpoints", first, 2).save(step=700, version=5)
    second = PPOLearner(params, dataclasses.replace(settings, init_path=str(tmp_path / "Simple1D")), seed=1, warm_up=False)
    weights = [w.numpy() for w in first.checkpoint_objects()["policy"].trainable_variables]
    before = [w.numpy() for w in second.checkpoint_objects()["policy"].trainable_variables]
    assert any(not np.array_equal(a, b) for a, b in zip(weights, before, strict=True))
    initialize_from(second, tmp_path / "Simple1D", keep_checkpoints=2)
    after = [w.numpy() for w in second.checkpoint_objects()["policy"].trainable_variables]
    for a, b in zip(weights, after, strict=True):
        np.testing.assert_array_equal(a, b)
    assert second.trainer_step == 0  # the weights, not the step (first's checkpoint holds 700)
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        (tmp_path / "empty").mkdir()
        initialize_from(second, tmp_path / "empty", keep_checkpoints=2)
