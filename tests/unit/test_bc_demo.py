"""BC from .demo files: the held-out split and scores, offline BC in the trainer loop (``bc_metrics.json``, a
runnable policy, exactly ``max_steps``), and errors that name the config key."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cli.record import demo_bytes, record_episodes, scripted_actor
from common import trajectory as tr
from common.config import BCHyperparameters, BehaviorSettings, NetworkSettings, TrainerType
from common.errors import ConfigError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from envclient.simple_env import SimpleEnv, scripted_expert, simple_brain_parameters
from trainer.bc import BCLearner
from trainer.bc_metrics import BC_METRICS_FILE, HOLDOUT_SEED, branch_accuracy, r_squared, split_rows
from trainer.loop import MAX_STEPS
from trainer.offline import DemonstrationPasses, load_demonstrations, make_offline_learner, offline_loop
from trainer.summaries import CLONING_LOSS

BEHAVIOR = "Simple1D"


def _demo(tmp_path: Path, continuous: bool, episodes: int = 17) -> Path:
    env = SimpleEnv(4, continuous=continuous, behavior_name=BEHAVIOR, seed=0)
    pairs, returns = record_episodes(env, scripted_actor(scripted_expert, env.brain_parameters, "expert"), episodes)
    path = tmp_path / f"expert_{'c' if continuous else 'd'}.demo"
    path.write_bytes(demo_bytes(path.stem, env.brain_parameters, pairs, returns))
    return path


def _settings(demo_path: Path | str, max_steps: int = 6000) -> BehaviorSettings:
    return BehaviorSettings(
        trainer_type=TrainerType.BC,
        hyperparameters=BCHyperparameters(demo_path=str(demo_path), batch_size=16, num_epoch=3, learning_rate=1e-3),
        network_settings=NetworkSettings(hidden_units=32, num_layers=2),
        max_steps=max_steps,
        summary_freq=2000,
        checkpoint_interval=4000,
    )


def test_split_is_fixed_and_disjoint() -> None:
    rows = {"x": np.arange(101)}
    train, held = split_rows(rows, 0.1, HOLDOUT_SEED)
    again_train, again_held = split_rows(rows, 0.1, HOLDOUT_SEED)
    assert len(held["x"]) == 10 and len(train["x"]) == 91
    np.testing.assert_array_equal(held["x"], again_held["x"])
    assert sorted([*train["x"], *held["x"]]) == list(range(101))
    assert np.all(np.diff(held["x"]) > 0)  # file order kept
    np.testing.assert_array_equal(train["x"], again_train["x"])


def test_scores() -> None:
    logits = np.array([[2.0, 1.0, 0.0, 5.0], [0.0, 3.0, 1.0, 0.0], [9.0, 0.0, 0.0, 1.0]], np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]], np.float32)  # row 2: option 0 masked in branch 0
    expert = np.array([[0, 1], [1, 1], [1, 1]])  # row 1 branch 1 picks 0, the expert 1
    got = branch_accuracy(logits, mask, expert, (2, 2))
    assert got["branch_accuracy"] == [1.0, pytest.approx(2 / 3)]
    assert got["chance_accuracy"] == pytest.approx(np.mean([(0.5 + 0.5 + 1.0) / 3, 0.5]))
    assert got["majority_accuracy"] == pytest.approx(np.mean([2 / 3, 1.0]))
    target = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]])
    assert r_squared(target, target) == 1.0
    assert r_squared(np.full_like(target, 1.0), target) == pytest.approx(0.0)  # the constant dim is left out
    assert math.isnan(r_squared(target[:, 1:], target[:, 1:]))


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_offline_trainer_writes_metrics_and_a_runnable_policy(continuous: bool, tmp_path: Path) -> None:
    settings = _settings(_demo(tmp_path, continuous))
    loop = offline_loop(BEHAVIOR, settings, seed=0, results_dir=tmp_path / "run", run_started_at=0.0)
    learner = loop.learner
    assert isinstance(learner, BCLearner)
    assert learner.brain_parameters == simple_brain_parameters(BEHAVIOR, continuous)
    assert learner.demonstrations.num_experiences == 91 and len(learner.held_out[tr.CONTINUOUS_ACTIONS]) == 10
    result = loop.run()
    # The last update's passes are cut: the run ends exactly at max_steps (21 whole updates of 3 x 91 rows, then 267).
    assert result.stopped_by == MAX_STEPS and result.steps == settings.max_steps == int(learner.state.env_steps.numpy())
    assert result.updates == math.ceil(settings.max_steps / (91 * 3))
    metrics = json.loads((tmp_path / "run" / BEHAVIOR / BC_METRICS_FILE).read_text())
    assert metrics["train_rows"] == 91 and metrics["held_out_rows"] == 10 and metrics["held_out_fraction"] == 0.1
    assert metrics["cloning_loss"] < 0.5 and metrics["updates"] == result.updates
    if continuous:
        assert metrics["held_out_r2"] > 0.5 and "held_out_accuracy" not in metrics
    else:
        assert metrics["held_out_accuracy"] == 1.0 and metrics["held_out_chance_accuracy"] == 0.5
    policies = sorted(p.name for p in (tmp_path / "run" / BEHAVIOR / "checkpoints").glob("*.policy.pb"))
    assert policies == ["ckpt-4095.policy.pb", f"ckpt-{result.steps}.policy.pb"]  # the interval's and the final one
    status = json.loads((tmp_path / "run" / "run_logs" / "training_status.json").read_text())[BEHAVIOR]
    assert status["steps"] == result.steps and status["policy_version"] == result.policy_version
    assert status["episodes"] == 0 and status["mean_reward"] is None  # no episodes offline: no reward, not NaN


def test_passes_are_cut_at_the_budget(tmp_path: Path) -> None:
    settings = _settings(_demo(tmp_path, continuous=False))
    learner = make_offline_learner(BEHAVIOR, settings, seed=0)  # 91 rows, num_epoch 3
    source = DemonstrationPasses(learner)
    assert source.feed(1000) == 273 and learner.ready_to_update()
    learner.update()
    assert int(learner.state.env_steps.numpy()) == 273
    assert source.feed(100) == 100  # one whole pass of 91, then 9 rows
    metrics = learner.update()
    assert int(learner.state.env_steps.numpy()) == 373
    assert metrics[CLONING_LOSS] == learner.last_loss > 0
    assert source.feed(5) == 5
    assert CLONING_LOSS not in learner.update()  # 5 rows: below one minibatch of 16, nothing trains
    assert learner.last_loss == metrics[CLONING_LOSS] and int(learner.state.env_steps.numpy()) == 378


def test_a_demo_without_training_rows_is_a_config_error(tmp_path: Path) -> None:
    learner = make_offline_learner(BEHAVIOR, _settings(_demo(tmp_path, continuous=False)), seed=0)
    learner.demonstrations = type(learner.demonstrations)()
    with pytest.raises(ConfigError, match=rf"behaviors.{BEHAVIOR}.hyperparameters.demo_path: .*no training rows"):
        DemonstrationPasses(learner)


def test_demo_errors_name_the_config_key(tmp_path: Path) -> None:
    key = f"behaviors.{BEHAVIOR}.hyperparameters.demo_path"
    discrete = _demo(tmp_path, continuous=False, episodes=2)
    learner = BCLearner(simple_brain_parameters(BEHAVIOR, continuous=True), _settings(discrete), seed=0)
    with pytest.raises(ConfigError, match=rf"{key}: .*does not fit behavior 'Simple1D': actions"):
        load_demonstrations(learner, BEHAVIOR, _settings(discrete))
    with pytest.raises(ConfigError, match=rf"{key}: .*does not exist"):
        make_offline_learner(BEHAVIOR, _settings(tmp_path / "absent.demo"), seed=0)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=rf"{key}: .*\.demo extension"):
        load_demonstrations(learner, BEHAVIOR, _settings(tmp_path / "notes.txt"))


def test_held_out_report_without_demo_path_rows() -> None:
    """Rows fed by ``load_rows`` (tests, tools) hold nothing out: the report has no held-out scores."""
    params = BrainParameters(BEHAVIOR, (ObservationSpec((1,), np.dtype(np.float32)),), ActionSpec(0, (2,)))
    learner = BCLearner(params, _settings("unused.demo"), seed=0)
    report = learner.report()
    assert report["held_out_rows"] == 0 and math.isnan(report["cloning_loss"])
    assert not any(k.startswith("held_out_accuracy") for k in report)
