"""configs/minigrid_ppo.yaml and its env factory, envclient/examples/minigrid.py (workload T3, pixels only)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from common.config import load_config
from common.config_sections import EncoderType, PPOHyperparameters
from common.errors import ConfigError
from common.specs import ActionSpec
from envclient.envs import VectorEnvSettings, close_vector_env, make_vector_env
from envclient.examples import minigrid as minigrid_example

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "minigrid_ppo.yaml"


def test_the_config_trains_ppo_with_nature_cnn_on_the_factory_for_300k_steps() -> None:
    options = load_config(CONFIG)
    (entry,) = options.env_settings.entries
    assert entry.env == "python:envclient.examples.minigrid:empty_5x5_rgb"
    assert options.env_settings.num_envs == 8
    settings = options.settings_for("MiniGridEmpty5x5")
    assert settings.max_steps == 300000 and settings.time_horizon == 128
    assert settings.network_settings.vis_encode_type is EncoderType.NATURE_CNN
    assert settings.network_settings.hidden_units == 512
    hyperparameters = settings.hyperparameters
    assert isinstance(hyperparameters, PPOHyperparameters)
    assert hyperparameters.buffer_size == 1024 and hyperparameters.batch_size == 64 and hyperparameters.num_epoch == 10


def test_the_factory_env_is_a_40x40x3_uint8_image_with_seven_actions() -> None:
    pytest.importorskip("minigrid", reason="the bench extra (pip install 'stepstream[bench]')")
    settings = load_config(CONFIG).env_settings
    env = make_vector_env(VectorEnvSettings(settings.entries[0].env, "MiniGridEmpty5x5", num_envs=2, seed=0))
    try:
        (spec,) = env.brain_parameters.observation_specs
        assert spec.shape == (40, 40, 3) and spec.dtype == np.uint8
        assert env.brain_parameters.action_spec == ActionSpec(0, (7,))
        (obs,) = env.reset()
        assert obs.shape == (2, 40, 40, 3) and obs.dtype == np.uint8
        assert obs.max() > 0  # drawn: walls, agent and goal are not black
    finally:
        close_vector_env(env)


def test_without_minigrid_the_factory_names_the_bench_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "minigrid", None)  # None in sys.modules: `import minigrid` raises ImportError
    with pytest.raises(ConfigError, match=r"stepstream\[bench\]"):
        minigrid_example.empty_5x5_rgb()
