"""A recurrent artifact: exported with its state in and out, checked on load, run from zeros when no state fits."""

from __future__ import annotations

import asyncio
import functools
import math
from pathlib import Path

import numpy as np
import pytest

from common.errors import ProtocolError
from common.policy_contract import RECURRENT_OUT
from common.specs import ActionSpec
from processor.batching import InferenceBatcher
from processor.inference import Policy
from protos import pb

SPEC = ActionSpec(1, (3,))
R = 6


@functools.lru_cache(maxsize=1)
def model_and_network() -> tuple[bytes, object]:
    from trainer.export import export_tflite
    from trainer.recurrent import RecurrentPolicyNetwork

    network = RecurrentPolicyNetwork([2], SPEC, hidden_units=8, num_layers=1, memory_size=R)
    return export_tflite(network, [(2,)], memory_size=R), network


def update(memory_size: int = R, version: int = 1) -> pb.PolicyUpdate:
    from trainer.export import make_policy_update

    model, _ = model_and_network()
    return make_policy_update("B", version, 0, model, SPEC.to_proto(), clip=math.inf, memory_size=memory_size)


def test_the_artifact_steps_as_the_network_does() -> None:
    _, network = model_and_network()
    policy = Policy.from_update(update())
    assert policy.memory_size == R
    rng = np.random.default_rng(0)
    memories = np.zeros((3, R), np.float32)
    for _ in range(5):  # a few steps, each fed the state the last returned
        obs = rng.standard_normal((3, 2)).astype(np.float32)
        out = policy.act([obs], None, rng, memories=memories)
        want = network(obs, memories)  # type: ignore[operator]
        np.testing.assert_array_equal(out.memories, memories)
        assert out.next_memories is not None
        np.testing.assert_allclose(out.next_memories, want[RECURRENT_OUT].numpy(), atol=1e-5)
        memories = out.next_memories
    assert np.abs(memories).max() > 0.01


@pytest.mark.parametrize("given", [None, np.ones((2, 4), np.float32)], ids=["none", "another-size"])
def test_rows_without_a_fitting_state_act_from_zeros(given: np.ndarray | None) -> None:
    policy = Policy.from_update(update())
    obs = np.ones((2, 2), np.float32)
    out = policy.act([obs], None, np.random.default_rng(0), memories=given)
    np.testing.assert_array_equal(out.memories, np.zeros((2, R)))
    zero = policy.forward([obs], np.zeros((2, R), np.float32))[RECURRENT_OUT]
    np.testing.assert_array_equal(out.next_memories, zero)


@pytest.mark.parametrize(("memory_size", "match"), [(0, "has a 'recurrent_in' input for artifact.memory_size 0"),
                                                     (4, "expected float32 \\[N, 4\\]"),
                                                     (3, "must be even"), (1 << 17, "in \\[0, 65536\\]")])  # fmt: skip
def test_an_artifact_whose_memory_size_disagrees_with_its_model_is_refused(memory_size: int, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        Policy.from_update(update(memory_size))


def test_a_feed_forward_artifact_claiming_memory_is_refused() -> None:
    from tests.policies import build_mlp_policy_update

    plain = build_mlp_policy_update("B", [(2,)], SPEC.to_proto(), 1, 0, tanh_squash=False, clip=math.inf)
    plain.artifact.memory_size = 4
    with pytest.raises(ProtocolError, match=r"has no input for artifact\.memory_size 4"):
        Policy.from_update(plain)


def test_the_batcher_joins_states_and_gives_zeros_to_requests_without_one() -> None:
    policy = Policy.from_update(update())
    rng = np.random.default_rng(1)
    obs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (2, 1, 3)]
    states = [rng.standard_normal((2, R)).astype(np.float32), None, np.ones((3, 2), np.float32)]

    async def main() -> list:
        batcher = InferenceBatcher("B", deadline_ms=50.0)
        batcher.set_policy(policy)
        batcher.set_active_sessions(3)
        return await asyncio.gather(*(batcher.act([o], None, None, m) for o, m in zip(obs, states, strict=True)))

    outs = asyncio.run(main())
    for o, m, out in zip(obs, states, outs, strict=True):
        fed = m if m is not None and m.shape[1] == R else np.zeros((len(o), R), np.float32)
        np.testing.assert_array_equal(out.memories, fed)
        np.testing.assert_allclose(out.next_memories, policy.forward([o], fed)[RECURRENT_OUT], atol=1e-6)


def test_the_onnx_model_steps_as_the_artifact_over_an_episode() -> None:
    """ML-Agents' contract: ``recurrent_in`` [batch, 1, R] in, ``recurrent_out`` of that shape out (last), and
    ``memory_size`` R; fed its own states step by step, the ONNX model's equal the artifact's."""
    import onnxruntime as ort

    from common.policy_contract import LOGITS, MEAN
    from trainer.onnx_export import policy_to_onnx

    model = policy_to_onnx(update())
    assert [i.name for i in model.graph.input] == ["obs_0", "action_masks", "recurrent_in"]
    assert model.graph.output[-1].name == "recurrent_out"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    policy = Policy.from_update(update())
    rng = np.random.default_rng(3)
    ours = np.zeros((3, R), np.float32)
    theirs = np.zeros((3, 1, R), np.float32)
    names = [o.name for o in session.get_outputs()]
    for _ in range(8):
        obs = rng.standard_normal((3, 2)).astype(np.float32)
        feed = {"obs_0": obs, "action_masks": np.ones((3, 3), np.float32), "recurrent_in": theirs}
        got = dict(zip(names, session.run(None, feed), strict=True))
        want = policy.forward([obs], ours)
        assert float(got["memory_size"][0]) == R
        np.testing.assert_allclose(got["recurrent_out"][:, 0], want[RECURRENT_OUT], atol=1e-5)
        np.testing.assert_allclose(got["deterministic_continuous_actions"], want[MEAN], atol=1e-5)
        np.testing.assert_array_equal(got["deterministic_discrete_actions"][:, 0], want[LOGITS].argmax(axis=1))
        ours, theirs = want[RECURRENT_OUT], got["recurrent_out"]
    assert np.abs(ours).max() > 0.01


def test_recording_refuses_a_recurrent_policy_rather_than_run_it_without_state(tmp_path: Path) -> None:
    from cli.record import checkpoint_actor
    from common.errors import ConfigError
    from common.specs import BrainParameters, ObservationSpec

    path = tmp_path / "ckpt-1.policy.pb"
    path.write_bytes(update().SerializeToString())
    params = BrainParameters("B", (ObservationSpec((2,), np.dtype(np.float32)),), SPEC)
    with pytest.raises(ConfigError, match=r"a recurrent policy \(memory_size 6\) is not recorded yet"):
        checkpoint_actor(path, params, seed=0, deterministic=False)
