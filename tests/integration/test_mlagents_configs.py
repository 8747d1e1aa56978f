"""ML-Agents' own trainer configs run unchanged with ``stepstream train FILE --env gym:...`` (issue 14).

Every file of ``tests/data/mlagents_configs/`` (the keys and values of ML-Agents' ``config/ppo``,
``config/sac`` and ``config/imitation`` files, releases 6 to 20) trains for a few hundred agent steps
on a Gymnasium env of its action type: discrete behaviors on CartPole-v1, continuous ones on
Pendulum-v1. Nothing in the files is edited: the behavior is named after the Unity env (``3DBall``)
and the one-env-one-behavior rule maps it; only ``--env``, ``--max-steps`` (the short budget) and
``--num-envs`` come from the command line. Their demonstration paths are ML-Agents' own; the test
records a demo of the Gymnasium env at each, in the run's working directory.

The runs go through ``cli.main.main`` in this process, so TensorFlow loads once for all of them
(the subprocess smoke runs of ``train`` are in ``test_cli.py``); a ``demo_path`` that does not exist
is refused before anything slow, naming its dotted key.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from cli.main import main
from cli.record import demo_bytes, record_episodes
from cli.run_config import load_run_options
from common.specs import ActionSpec
from envclient.gym_adapter import GymVectorEnv

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "mlagents_configs"
DISCRETE_ENV = "CartPole-v1"
CONTINUOUS_ENV = "Pendulum-v1"
DISCRETE_BEHAVIORS = {"Basic", "Pyramids", "PushBlock"}
"""ML-Agents' example envs with discrete actions; the others here are continuous."""
MAX_STEPS = 300
"""Agent steps per run: a few hundred, so that every config builds, steps, checkpoints and exits."""
DEMO_EPISODES = 4
CONFIG_ERROR_EXIT_CODE = 2


def env_id_for(behavior: str) -> str:
    return DISCRETE_ENV if behavior in DISCRETE_BEHAVIORS else CONTINUOUS_ENV


def random_actions(observations: list[np.ndarray], spec: ActionSpec) -> tuple[np.ndarray, np.ndarray]:
    """A scripted policy for the demos: uniform actions (the demo's content does not matter here, its spec does)."""
    rng = np.random.default_rng(len(observations[0]))
    n = len(observations[0])
    continuous = rng.uniform(-1, 1, (n, spec.continuous_size)).astype(np.float32)
    discrete = (
        np.stack([rng.integers(0, b, n) for b in spec.discrete_branches], axis=1) if spec.num_branches else np.zeros((n, 0))
    )
    return continuous, discrete.astype(np.int32)


def write_demo(path: Path, env_id: str, behavior: str) -> None:
    """A .demo of ``env_id`` declared as ``behavior``, at ``path``."""
    with GymVectorEnv(env_id, 1, seed=0, behavior_name=behavior) as env:
        spec = env.brain_parameters.action_spec
        pairs, returns = record_episodes(env, lambda obs: random_actions(obs, spec), DEMO_EPISODES)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(demo_bytes(path.stem, env.brain_parameters, pairs, returns))


KNOWN_REFUSALS: dict[str, str] = {}
"""Configs that still fail, each with why: strict xfails, so that the fix flips them."""


def config_files() -> list[Path]:
    return sorted(CONFIGS.glob("*.yaml"))


def config_params() -> list[object]:
    return [
        pytest.param(p, id=p.stem, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_REFUSALS[p.stem])])
        if p.stem in KNOWN_REFUSALS
        else pytest.param(p, id=p.stem)
        for p in config_files()
    ]


def test_the_set_covers_ppo_sac_and_imitation_across_releases() -> None:
    names = [p.name for p in config_files()]
    assert len(names) >= 10
    for prefix in ("ppo_", "sac_", "imitation_"):
        assert any(n.startswith(prefix) for n in names), prefix
    texts = {p.name: p.read_text(encoding="utf-8") for p in config_files()}
    for key in (
        "output_path",
        "threaded",
        "encoding_size",
        "environment_parameters",
        "behavioral_cloning",
        "gail",
        "curiosity",
    ):
        assert any(key in text for text in texts.values()), key


@pytest.mark.parametrize("config", config_params())
def test_an_mlagents_config_trains_unchanged(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (behavior,) = load_run_options(config).behaviors
    env_id = env_id_for(behavior)
    monkeypatch.chdir(tmp_path)  # ML-Agents resolves demo_path against the working directory
    for demo_path in set(load_run_options(config).behaviors[behavior].demo_paths().values()):
        write_demo(tmp_path / demo_path, env_id, behavior)
    results = tmp_path / "results"
    args = [
        "train", str(config), "--env", f"gym:{env_id}", "--max-steps", str(MAX_STEPS), "--num-envs", "2",
        "--results-dir", str(results), "--run-id", config.stem, "--seed", "0", "--no-progress",
    ]  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert main(args) == 0, caplog.text[-3000:]
    status = json.loads((results / config.stem / "run_logs" / "training_status.json").read_text(encoding="utf-8"))
    assert status[behavior]["steps"] >= MAX_STEPS
    assert status[behavior]["checkpoints"]
    if behavior != env_id.split("-")[0]:
        assert f"behavior {behavior!r} trains on gym:{env_id}" in caplog.text  # the one log line of the rule


def test_a_missing_demo_path_is_refused_once_naming_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # no demo recorded here
    args = ["train", str(CONFIGS / "imitation_Crawler.yaml"), "--env", f"gym:{CONTINUOUS_ENV}", "--results-dir", "results"]
    with caplog.at_level(logging.INFO):
        assert main(args) == CONFIG_ERROR_EXIT_CODE
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "behaviors.Crawler.reward_signals.gail.demo_path: demonstration path" in errors[0]
    assert "does not exist" in errors[0]
    assert not (tmp_path / "results").exists()
