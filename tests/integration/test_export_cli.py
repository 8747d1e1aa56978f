"""``stepstream export`` on the session's short PPO run of the 1-D task (``conftest.simple_ppo_run``).

* the run itself leaves ``<run>/Simple1D.onnx`` and a ``ckpt-<step>.onnx`` beside each checkpoint;
* ``stepstream export RUN --out FILE.onnx`` writes the same policy: onnxruntime's greedy choices
  equal the processor's on the checkpoint's ``.policy.pb``, under ML-Agents' names;
* an existing ``--out`` needs ``--force``; a CHECKPOINT with no saved policy is an error naming it. Both are
  refused before TensorFlow (tf2onnx) loads.

The first export runs the real console script in a subprocess; the others run one after another in one
interpreter through the same entry point (``tests.cli_batch``), so TensorFlow loads once for them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from common.policy_contract import LOGITS
from processor.inference import Policy
from protos import pb
from tests.cli_batch import run_batch
from tests.integration.simple_run import BEHAVIOR, checkpoints_dir
from tests.integration.test_cli import run_cli, subprocess_env, tail


def _greedy(path: Path, obs: np.ndarray, masks: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs_0", "action_masks"]
    names = [o.name for o in session.get_outputs()]
    assert names == [
        "version_number",
        "memory_size",
        "discrete_actions",
        "discrete_action_output_shape",
        "deterministic_discrete_actions",
    ]
    out = dict(zip(names, session.run(None, {"obs_0": obs, "action_masks": masks}), strict=True))
    assert out["version_number"].tolist() == [3.0] and out["discrete_action_output_shape"].tolist() == [[2.0]]
    return out["deterministic_discrete_actions"]


def test_a_trained_checkpoint_exports_to_onnx(simple_ppo_run: Path, tmp_path: Path) -> None:
    run_dir = simple_ppo_run
    checkpoints = checkpoints_dir(run_dir)
    assert sorted(checkpoints.glob("ckpt-*.onnx")), sorted(p.name for p in checkpoints.iterdir())
    assert (run_dir / f"{BEHAVIOR}.onnx").is_file()

    out = tmp_path / "exported" / "policy.onnx"
    proc = run_cli(["export", run_dir, "--out", out])
    assert proc.returncode == 0, tail(proc.stdout)
    assert "continuous transform none" in proc.stdout

    newest = max(checkpoints.glob("ckpt-*.policy.pb"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    policy = Policy.from_update(pb.PolicyUpdate.FromString(newest.read_bytes()))
    shape = policy.observation_shapes[0]
    obs = np.random.default_rng(0).uniform(-2.0, 2.0, (200, *shape)).astype(np.float32)
    masks = np.ones((200, 2), np.float32)
    want = policy.forward([obs])[LOGITS].argmax(axis=1)[:, None]
    np.testing.assert_array_equal(_greedy(out, obs, masks), want)
    np.testing.assert_array_equal(_greedy(run_dir / f"{BEHAVIOR}.onnx", obs, masks), want)
    # A mask that leaves one option forces it.
    only_second = np.tile(np.array([[0.0, 1.0]], np.float32), (200, 1))
    assert np.all(_greedy(out, obs, only_second) == 1)

    again, missing, forced = run_batch(
        [
            ["export", newest, "--out", out],
            ["export", tmp_path / "nothing", "--out", tmp_path / "x.onnx"],
            ["export", newest, "--out", out, "--force"],
        ],
        env=subprocess_env(),
    )
    assert again.returncode == 2 and "exists (use --force to overwrite)" in again.stdout
    assert missing.returncode == 2 and f"CHECKPOINT {tmp_path / 'nothing'}: does not exist" in missing.stdout
    assert not again.tensorflow_loaded and not missing.tensorflow_loaded  # refused before tf2onnx loads
    assert forced.returncode == 0, tail(forced.stdout)
