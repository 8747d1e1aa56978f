"""Checkpointer: save, keep the newest, restore everything into a fresh learner."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from common.errors import ConfigError
from common.trajectory import Trajectory
from protos import pb
from trainer.checkpoint import Checkpointer


class TinyLearner:
    """A learner made of real TF state: a weight, an Adam optimiser over it, and a counter.

    ``save_extra`` writes a small file, standing in for SAC's replay buffer.
    """

    def __init__(self) -> None:
        self.weight = tf.Variable(np.zeros(3, np.float32), name="weight")
        self.optimizer = tf.keras.optimizers.Adam(0.1)
        self.optimizer.build([self.weight])
        self.counter = tf.Variable(0, dtype=tf.int64, name="counter")
        self.extra = b""

    def train(self, steps: int) -> None:
        for _ in range(steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(self.weight - 1.0))
            self.optimizer.apply_gradients([(tape.gradient(loss, self.weight), self.weight)])
            self.counter.assign_add(1)

    def add_trajectories(self, trajectories: Sequence[Trajectory]) -> int:
        return 0

    def ready_to_update(self) -> bool:
        return False

    def update(self) -> Mapping[str, float]:
        return {}

    def export_policy(self, version: int, trainer_step: int) -> pb.PolicyUpdate:
        return pb.PolicyUpdate(behavior_name="B", version=version, trainer_step=trainer_step)

    def checkpoint_objects(self) -> Mapping[str, object]:
        return {"weight": self.weight, "optimizer": self.optimizer, "counter": self.counter}

    def save_extra(self, directory: Path) -> None:
        (directory / "extra.bin").write_bytes(self.extra)

    def load_extra(self, directory: Path) -> None:
        path = directory / "extra.bin"
        self.extra = path.read_bytes() if path.exists() else b""


def test_save_then_restore_into_a_fresh_learner(tmp_path: Path) -> None:
    learner = TinyLearner()
    learner.train(3)
    learner.extra = b"replay"
    policy = learner.export_policy(7, 300)
    info = Checkpointer(tmp_path, learner, keep_checkpoints=2).save(step=300, version=7, policy=policy)
    assert (info.step, info.version) == (300, 7) and info.path.endswith("ckpt-300")
    assert json.loads(Path(info.path + ".json").read_text())["version"] == 7
    assert pb.PolicyUpdate.FromString(Path(info.path + ".policy.pb").read_bytes()) == policy

    fresh = TinyLearner()
    assert Checkpointer(tmp_path, fresh, keep_checkpoints=2).restore_latest() == (300, 7)
    np.testing.assert_array_equal(fresh.weight.numpy(), learner.weight.numpy())
    assert int(fresh.counter.numpy()) == 3 and fresh.extra == b"replay"
    assert int(fresh.optimizer.iterations.numpy()) == 3
    # The optimiser's moments came back too: one more step lands where the original's does.
    learner.train(1)
    fresh.train(1)
    np.testing.assert_allclose(fresh.weight.numpy(), learner.weight.numpy())


def test_keeps_only_the_newest(tmp_path: Path) -> None:
    learner = TinyLearner()
    checkpointer = Checkpointer(tmp_path, learner, keep_checkpoints=2)
    for step in (10, 20, 30):
        learner.train(1)
        checkpointer.save(step, step // 10, learner.export_policy(step // 10, step))
    assert [c.step for c in checkpointer.checkpoints()] == [20, 30]
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.json")) == ["ckpt-20.json", "ckpt-30.json"]
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.policy.pb")) == ["ckpt-20.policy.pb", "ckpt-30.policy.pb"]
    assert not list(tmp_path.glob("ckpt-10.*"))
    # A new checkpointer (a resumed process) sees the same ones and restores the newest.
    again = Checkpointer(tmp_path, TinyLearner(), keep_checkpoints=2)
    assert [c.step for c in again.checkpoints()] == [20, 30]
    assert again.restore_latest() == (30, 3)


def test_restore_with_nothing_saved(tmp_path: Path) -> None:
    assert Checkpointer(tmp_path / "new", TinyLearner(), keep_checkpoints=1).restore_latest() is None


def test_restore_refuses_a_different_learner(tmp_path: Path) -> None:
    Checkpointer(tmp_path, TinyLearner(), keep_checkpoints=1).save(1, 0)
    other = TinyLearner()
    other.weight = tf.Variable(np.zeros(5, np.float32))  # another network size
    with pytest.raises((AssertionError, ValueError)):
        Checkpointer(tmp_path, other, keep_checkpoints=1).restore_latest()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_checkpoints"):
        Checkpointer(tmp_path, TinyLearner(), keep_checkpoints=0)

    class Clashing(TinyLearner):
        def checkpoint_objects(self) -> Mapping[str, object]:
            return {"step": self.counter}

    with pytest.raises(ValueError, match="step"):
        Checkpointer(tmp_path, Clashing(), keep_checkpoints=1)


def test_bc_learner_round_trip(tmp_path: Path) -> None:
    """A real learner's checkpoint_objects restore its policy, optimiser and counters."""
    from common.config import BCHyperparameters, BehaviorSettings, NetworkSettings, TrainerType
    from envclient.simple_env import simple_brain_parameters
    from tests.learning.harness import collect_expert_rows
    from trainer.bc import BCLearner

    config = BehaviorSettings(
        trainer_type=TrainerType.BC,
        hyperparameters=BCHyperparameters(demo_path="scripted", batch_size=64),
        network_settings=NetworkSettings(hidden_units=8, num_layers=1, normalize=True),
    )
    params = simple_brain_parameters("S", continuous=False)
    learner = BCLearner(params, config, seed=0)
    learner.load_rows(collect_expert_rows(False, seed=0, env_steps=10))
    learner.update()
    Checkpointer(tmp_path, learner, keep_checkpoints=1).save(10, 1)

    fresh = BCLearner(params, config, seed=1)  # other initial weights
    assert Checkpointer(tmp_path, fresh, keep_checkpoints=1).restore_latest() == (10, 1)
    obs = tf.constant([[1.0], [-1.0]])
    np.testing.assert_allclose(fresh.policy(obs)["logits"].numpy(), learner.policy(obs)["logits"].numpy())
    assert int(fresh.optimizer.iterations.numpy()) == int(learner.optimizer.iterations.numpy()) > 0
    assert fresh.state.normalizers[0].state()[2] == learner.state.normalizers[0].state()[2] > 0


def test_a_kill_between_extra_state_and_checkpoint_restores_a_matching_pair(tmp_path: Path) -> None:
    """Extra state is written before the TF checkpoint: killed in between, the newest complete
    checkpoint comes back with the extra state of its own step, not the newer one."""
    learner = TinyLearner()
    checkpointer = Checkpointer(tmp_path, learner, keep_checkpoints=2)
    learner.extra = b"replay at 100"
    checkpointer.save(step=100, version=1)
    learner.extra = b"replay at 200"
    checkpointer.save(step=200, version=2)
    assert sorted(p.name for p in tmp_path.glob("extra-*")) == ["extra-200"], "only the newest extra state is kept"

    # The next save is killed after writing its extra state, before its TF checkpoint.
    learner.extra = b"replay at 300"
    (tmp_path / "extra-300").mkdir()
    learner.save_extra(tmp_path / "extra-300")

    fresh = TinyLearner()
    assert Checkpointer(tmp_path, fresh, keep_checkpoints=2).restore_latest() == (200, 2)
    assert fresh.extra == b"replay at 200"


class Killed(BaseException):
    """Stands in for a SIGKILL: nothing after it runs."""


@pytest.mark.parametrize("kill_at", [".policy.pb", ".json"], ids=["writing-the-policy", "committing-the-record"])
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_complete(
    tmp_path: Path, kill_at: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed after its TF files, before its record: the new checkpoint is skipped (one WARNING), the previous
    one restores and is the only one listed, and the next save deletes the leftovers."""
    import trainer.checkpoint as checkpoint_module

    learner = TinyLearner()
    checkpointer = Checkpointer(tmp_path, learner, keep_checkpoints=2)
    checkpointer.save(step=100, version=1, policy=learner.export_policy(1, 100))
    write = checkpoint_module._write_atomically

    def killed_at(path: Path, data: bytes) -> None:
        if path.name.endswith(kill_at):
            raise Killed
        write(path, data)

    monkeypatch.setattr(checkpoint_module, "_write_atomically", killed_at)
    with pytest.raises(Killed):
        checkpointer.save(step=200, version=2, policy=learner.export_policy(2, 200))
    monkeypatch.setattr(checkpoint_module, "_write_atomically", write)
    assert (tmp_path / "ckpt-200.index").exists() and not (tmp_path / "ckpt-200.json").exists()

    again = Checkpointer(tmp_path, TinyLearner(), keep_checkpoints=2)
    assert [c.step for c in again.checkpoints()] == [100]
    assert again.restore_latest() == (100, 1)
    skipped = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(skipped) == 1 and "ckpt-200" in skipped[0].getMessage(), skipped
    again.save(step=150, version=3)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-100.index", "ckpt-150.index"]
    assert not list(tmp_path.glob("ckpt-200*"))


def test_no_complete_checkpoint_is_a_config_error(tmp_path: Path) -> None:
    Checkpointer(tmp_path, TinyLearner(), keep_checkpoints=1).save(step=5, version=0)
    (data,) = tmp_path.glob("ckpt-5.data-*")
    data.write_bytes(data.read_bytes()[:3])
    with pytest.raises(ConfigError, match=rf"{tmp_path}: no complete checkpoint to restore \(ckpt-5: its TensorFlow data"):
        Checkpointer(tmp_path, TinyLearner(), keep_checkpoints=1).restore_latest()
