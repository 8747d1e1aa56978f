"""ONNX export (trainer.onnx_export): ML-Agents 1.1.0's model contract, and parity with TensorFlow and the TFLite artifact.

* parity: on 1,000 observations, the ONNX model's ``deterministic_*`` outputs equal (within 1e-5,
  discrete choices exactly) the TensorFlow network's greedy env actions and the processor's
  (``processor.inference``, the TFLite artifact), for continuous (PPO clip 1, BC clip 3, SAC tanh),
  masked discrete and hybrid specs, with normaliser state embedded in the graph;
* the sampled outputs follow the same distribution as the processor's samples (means and standard
  deviations of many draws; discrete frequencies against the masked softmax; masked options never);
* names, shapes, dtypes, opset, IR version and constant outputs are those ML-Agents 1.1.0's exporter
  writes for the same spec (facts read from files its ``ModelSerializer`` exported, torch 2.13's
  TorchScript exporter, ``obs_*``/``action_masks`` in, opset 9, IR 4);
* every checkpoint writes ``ckpt-<step>.onnx`` (pruned with it) and the newest at ``onnx_path``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tensorflow as tf

from common.policy_contract import LOGITS, MASKED_LOGIT, MEAN, input_name
from common.specs import ActionSpec
from processor.inference import Policy
from protos import pb
from trainer.checkpoint import Checkpointer
from trainer.export import export_tflite, make_policy_update, normalizer_state
from trainer.networks import Normalizer, PolicyNetwork
from trainer.onnx_export import continuous_transform, policy_to_onnx

ROWS = 1000
TOLERANCE = 1e-5
SAMPLES = 20000


class Case(NamedTuple):
    observation_sizes: tuple[int, ...]
    action_spec: ActionSpec
    tanh_squash: bool = False
    clip: float = 1.0


CASES = {
    "continuous_ppo": Case((8,), ActionSpec(2)),
    "continuous_bc": Case((8,), ActionSpec(2), clip=3.0),
    "continuous_sac": Case((4, 3), ActionSpec(2), tanh_squash=True),
    "masked_discrete": Case((6, 3), ActionSpec(0, (3, 2))),
    "hybrid": Case((5,), ActionSpec(2, (3,))),
}


class Exported(NamedTuple):
    network: PolicyNetwork
    normalizers: list[Normalizer]
    update: pb.PolicyUpdate
    session: ort.InferenceSession
    model: onnx.ModelProto


def _export(case: Case, seed: int = 0) -> Exported:
    rng = np.random.default_rng(seed)
    tf.keras.utils.set_random_seed(seed)
    net = PolicyNetwork(
        list(case.observation_sizes), case.action_spec, 16, 2, state_dependent_std=case.tanh_squash, initial_log_std=-0.3
    )
    # Weights of order 1, so that actions, clips and masked choices are not all near 0 or uniform.
    for variable in net.variables:
        variable.assign(rng.normal(0.0, 0.4, variable.shape).astype(np.float32))
    normalizers = []
    for i, size in enumerate(case.observation_sizes):
        normalizer = Normalizer(size, name=f"normalizer_{i}")
        normalizer.update(rng.normal(1.5, 2.0, (200, size)))
        normalizers.append(normalizer)
    model = export_tflite(net, [(size,) for size in case.observation_sizes])
    update = make_policy_update(
        "Behavior",
        4,
        1000,
        model,
        case.action_spec.to_proto(),
        [normalizer_state(*n.state()) for n in normalizers],
        tanh_squash=case.tanh_squash,
        clip=case.clip,
    )
    onnx_model = policy_to_onnx(update)
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    return Exported(net, normalizers, update, session, onnx_model)


@functools.cache
def _shared_export(name: str) -> Exported:
    """One export per case for the whole module (a TFLite conversion and an ONNX translation each): the tests only
    read it; one that changes the update works on a copy (``_update_copy``)."""
    return _export(CASES[name])


def _update_copy(name: str) -> pb.PolicyUpdate:
    update = pb.PolicyUpdate()
    update.CopyFrom(_shared_export(name).update)
    return update


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request: pytest.FixtureRequest) -> tuple[Case, Exported]:
    return CASES[request.param], _shared_export(request.param)


def _observations(case: Case, rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    # Wide enough that the normaliser's clip at +-5 is reached on some rows.
    return [rng.normal(1.5, 6.0, (rows, size)).astype(np.float32) for size in case.observation_sizes]


def _masks(spec: ActionSpec, rows: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [rows, M], 1 = allowed, every branch of every row allowing at least one option."""
    masks = (rng.random((rows, spec.mask_width)) < 0.6).astype(np.float32)
    start = 0
    for size in spec.discrete_branches:
        keep = rng.integers(start, start + size, rows)
        masks[np.arange(rows), keep] = 1.0
        start += size
    return masks


def _feed(case: Case, observations: list[np.ndarray], masks: np.ndarray | None) -> dict[str, np.ndarray]:
    feed = {input_name(i): obs for i, obs in enumerate(observations)}
    if case.action_spec.discrete_branches:
        assert masks is not None
        feed["action_masks"] = masks
    return feed


def _run(exported: Exported, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in exported.session.get_outputs()]
    return dict(zip(names, exported.session.run(None, feed), strict=True))


def _greedy_discrete(logits: np.ndarray, masks: np.ndarray, branches: tuple[int, ...]) -> np.ndarray:
    """int [N, B]: per branch, the argmax of the logits with masked options at MASKED_LOGIT (the processor's rule)."""
    masked = np.where(masks > 0, logits, np.float32(MASKED_LOGIT))
    starts = np.cumsum([0, *branches[:-1]])
    return np.stack([masked[:, s : s + n].argmax(axis=1) for s, n in zip(starts, branches, strict=True)], axis=1)


def _tf_greedy(
    case: Case, exported: Exported, observations: list[np.ndarray], masks: np.ndarray | None
) -> dict[str, np.ndarray]:
    """The TensorFlow network's greedy env actions (normalised in TF, transformed in TF)."""
    with tf.device("/CPU:0"):
        normed = [n.normalize(tf.constant(obs)) for n, obs in zip(exported.normalizers, observations, strict=True)]
        out = exported.network(*normed)
        result = {}
        if case.action_spec.continuous_size:
            mean = out[MEAN]
            if case.tanh_squash:
                actions = tf.tanh(mean)
            else:
                actions = tf.clip_by_value(mean, -case.clip, case.clip) / case.clip
            result["deterministic_continuous_actions"] = actions.numpy()
        if case.action_spec.discrete_branches:
            assert masks is not None
            result["deterministic_discrete_actions"] = _greedy_discrete(
                out[LOGITS].numpy(), masks, case.action_spec.discrete_branches
            )
    return result


def _tflite_greedy(
    case: Case, exported: Exported, observations: list[np.ndarray], masks: np.ndarray | None
) -> dict[str, np.ndarray]:
    """The processor's greedy env actions from the TFLite artifact (as ``stepstream record --deterministic``)."""
    policy = Policy.from_update(exported.update)
    raw = policy.forward(observations)
    result = {}
    if case.action_spec.continuous_size:
        result["deterministic_continuous_actions"] = policy.env_continuous_actions(raw[MEAN])
    if case.action_spec.discrete_branches:
        assert masks is not None
        result["deterministic_discrete_actions"] = _greedy_discrete(raw[LOGITS], masks, case.action_spec.discrete_branches)
    return result


def test_deterministic_actions_match_tensorflow_and_the_tflite_artifact(exported: tuple[Case, Exported]) -> None:
    case, model = exported
    rng = np.random.default_rng(1)
    observations = _observations(case, ROWS, rng)
    masks = _masks(case.action_spec, ROWS, rng) if case.action_spec.discrete_branches else None
    onnx_out = _run(model, _feed(case, observations, masks))
    for reference in (_tf_greedy(case, model, observations, masks), _tflite_greedy(case, model, observations, masks)):
        assert set(reference) == {k for k in onnx_out if k.startswith("deterministic_")}
        if "deterministic_continuous_actions" in reference:
            got, want = onnx_out["deterministic_continuous_actions"], reference["deterministic_continuous_actions"]
            assert got.shape == want.shape == (ROWS, case.action_spec.continuous_size)
            np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=TOLERANCE)
            if not case.tanh_squash:  # the clip bound is reached on some rows: the transform is really tested
                assert np.any(np.abs(got) >= 1.0 - 1e-6) and np.any(np.abs(got) < 0.9)
        if "deterministic_discrete_actions" in reference:
            got, want = onnx_out["deterministic_discrete_actions"], reference["deterministic_discrete_actions"]
            assert got.dtype == np.int64 and got.shape == (ROWS, case.action_spec.num_branches)
            np.testing.assert_array_equal(got, want)
    if masks is not None:  # a greedy choice is never a masked option
        starts = np.cumsum([0, *case.action_spec.discrete_branches[:-1]])
        chosen = onnx_out["deterministic_discrete_actions"] + starts
        assert np.all(np.take_along_axis(masks, chosen, axis=1) == 1.0)


def _expected_io(case: Case) -> tuple[list[tuple[str, int, list[object]]], list[tuple[str, int, list[object]]]]:
    """ML-Agents 1.1.0's inputs and outputs for this spec: (name, dtype, shape), in its order."""
    c, branches = case.action_spec.continuous_size, case.action_spec.discrete_branches
    f, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    inputs: list[tuple[str, int, list[object]]] = [
        (f"obs_{i}", f, ["batch", size]) for i, size in enumerate(case.observation_sizes)
    ]
    outputs: list[tuple[str, int, list[object]]] = [("version_number", f, [1]), ("memory_size", f, [1])]
    if c:
        outputs += [
            ("continuous_actions", f, ["batch", c]),
            ("continuous_action_output_shape", f, [1]),
            ("deterministic_continuous_actions", f, ["batch", c]),
        ]
    if branches:
        inputs.append(("action_masks", f, ["batch", sum(branches)]))
        outputs += [
            ("discrete_actions", i64, ["batch", len(branches)]),
            ("discrete_action_output_shape", f, [1, len(branches)]),
            ("deterministic_discrete_actions", i64, ["batch", len(branches)]),
        ]
    return inputs, outputs


def _io(values: list[onnx.ValueInfoProto]) -> list[tuple[str, int, list[object]]]:
    return [
        (v.name, v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
        for v in values
    ]


def test_names_shapes_dtypes_and_constants_are_ml_agents(exported: tuple[Case, Exported]) -> None:
    case, model = exported
    inputs, outputs = _expected_io(case)
    assert _io(list(model.model.graph.input)) == inputs
    assert _io(list(model.model.graph.output)) == outputs
    assert [(o.domain, o.version) for o in model.model.opset_import] == [("", 9)]
    assert model.model.ir_version == 4
    # onnxruntime reports the same dtypes and shapes, and the outputs have them at run time.
    assert [i.name for i in model.session.get_inputs()] == [name for name, _, _ in inputs]
    rng = np.random.default_rng(2)
    masks = _masks(case.action_spec, 7, rng) if case.action_spec.discrete_branches else None
    out = _run(model, _feed(case, _observations(case, 7, rng), masks))
    c, branches = case.action_spec.continuous_size, case.action_spec.discrete_branches
    np.testing.assert_array_equal(out["version_number"], np.array([3.0], np.float32))
    np.testing.assert_array_equal(out["memory_size"], np.array([0.0], np.float32))
    if c:
        np.testing.assert_array_equal(out["continuous_action_output_shape"], np.array([c], np.float32))
        assert out["continuous_actions"].dtype == np.float32 and out["continuous_actions"].shape == (7, c)
    if branches:
        np.testing.assert_array_equal(out["discrete_action_output_shape"], np.array([branches], np.float32))
        assert out["discrete_actions"].dtype == np.int64 and out["discrete_actions"].shape == (7, len(branches))
    metadata = {p.key: p.value for p in model.model.metadata_props}
    want = continuous_transform(case.tanh_squash, case.clip) if c else "none"
    assert metadata["stepstream.continuous_transform"] == want
    assert metadata["stepstream.policy_version"] == "4"


def test_the_transform_names_what_the_processor_sends() -> None:
    assert continuous_transform(False, 1.0) == "clip(u, -1, 1)"
    assert continuous_transform(False, 3.0) == "clip(u, -3, 3) / 3"
    assert continuous_transform(True, 3.0) == "tanh(u)"
    assert continuous_transform(False, float("inf")) == "u"


def _std_error(samples: np.ndarray) -> np.ndarray:
    """[rows, C]: the standard error of the sample standard deviation over axis 1, from the fourth central moment
    (``se(var) = sqrt((m4 - var^2) / n)``, ``se(std) = se(var) / (2 std)``; any distribution, clipped ones included)."""
    centred = samples - samples.mean(axis=1, keepdims=True)
    var, m4 = (centred**2).mean(axis=1), (centred**4).mean(axis=1)
    return np.sqrt(np.maximum(m4 - var**2, 0.0) / samples.shape[1]) / (2 * np.sqrt(var) + 1e-12)


def test_sampled_actions_follow_the_processors_distribution(exported: tuple[Case, Exported]) -> None:
    """Many draws on a few repeated observations: the ONNX samples' per-row means and standard deviations equal the
    processor's samples' (within 6 standard errors of their difference), discrete frequencies equal the masked
    softmax and the processor's, and masked options are never drawn."""
    case, model = exported
    rng = np.random.default_rng(3)
    base = _observations(case, 4, rng)
    observations = [np.repeat(obs, SAMPLES // 4, axis=0) for obs in base]
    masks = None
    if case.action_spec.discrete_branches:
        masks = np.repeat(_masks(case.action_spec, 4, rng), SAMPLES // 4, axis=0)
    onnx_out = _run(model, _feed(case, observations, masks))
    policy = Policy.from_update(model.update)
    processor = policy.act(observations, None if masks is None else masks.astype(bool), np.random.default_rng(4))
    if case.action_spec.continuous_size:
        ours = onnx_out["continuous_actions"].reshape(4, SAMPLES // 4, -1)
        theirs = processor.env_continuous_actions.reshape(4, SAMPLES // 4, -1)
        assert np.all(np.abs(ours) <= 1.0 + 1e-6)  # float32 tanh may round a hair above 1
        n = ours.shape[1]
        mean_error = np.sqrt((ours.var(axis=1) + theirs.var(axis=1)) / n)
        assert np.all(np.abs(ours.mean(axis=1) - theirs.mean(axis=1)) <= 6 * mean_error + 1e-3)
        assert np.all(
            np.abs(ours.std(axis=1) - theirs.std(axis=1)) <= 6 * np.hypot(_std_error(ours), _std_error(theirs)) + 1e-3
        )
        assert np.any(ours.std(axis=1) > 0.1)  # really sampled, not the mean (where the mean is not clipped)
    if case.action_spec.discrete_branches:
        assert masks is not None
        raw = policy.forward(observations)
        masked = np.where(masks > 0, raw[LOGITS], np.float32(MASKED_LOGIT))
        drawn = onnx_out["discrete_actions"]
        start = 0
        for b, size in enumerate(case.action_spec.discrete_branches):
            part = masked[:, start : start + size]
            probs = np.exp(part - part.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            for row in range(4):
                rows = slice(row * (SAMPLES // 4), (row + 1) * (SAMPLES // 4))
                freq = np.bincount(drawn[rows, b], minlength=size) / (SAMPLES // 4)
                processor_freq = np.bincount(processor.discrete_actions[rows, b], minlength=size) / (SAMPLES // 4)
                np.testing.assert_allclose(freq, probs[rows.start], atol=0.045)  # 6 standard errors at p = 0.5
                np.testing.assert_allclose(freq, processor_freq, atol=0.06)
                assert np.all(freq[masks[rows.start, start : start + size] == 0] == 0)
            start += size


def test_an_artifact_of_another_format_is_refused() -> None:
    update = _update_copy("hybrid")
    update.artifact.format = "onnx"
    with pytest.raises(ValueError, match=r"artifact\.format 'onnx'"):
        policy_to_onnx(update)


def test_without_normalizers_the_graph_takes_the_observations_as_they_are() -> None:
    model = _shared_export("continuous_ppo")
    update = _update_copy("continuous_ppo")
    del update.artifact.normalizers[:]
    session = ort.InferenceSession(policy_to_onnx(update).SerializeToString(), providers=["CPUExecutionProvider"])
    observations = [np.random.default_rng(5).normal(0, 1, (50, 8)).astype(np.float32)]
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"obs_0": observations[0]}), strict=True))
    with tf.device("/CPU:0"):
        want = tf.clip_by_value(model.network(tf.constant(observations[0]))[MEAN], -1.0, 1.0).numpy()
    np.testing.assert_allclose(got["deterministic_continuous_actions"], want, atol=TOLERANCE, rtol=TOLERANCE)


class _TinyLearner:
    """Real TF state (one weight) and nothing else: what the checkpointer needs."""

    def __init__(self) -> None:
        self.weight = tf.Variable(np.zeros(3, np.float32), name="weight")

    def checkpoint_objects(self) -> dict[str, object]:
        return {"weight": self.weight}

    def save_extra(self, directory: Path) -> None:
        del directory

    def load_extra(self, directory: Path) -> None:
        del directory


def test_every_checkpoint_writes_its_onnx_model_and_the_newest_beside_the_behavior(tmp_path: Path) -> None:
    update = _update_copy("hybrid")
    checkpoints = tmp_path / "Behavior" / "checkpoints"
    newest = tmp_path / "Behavior.onnx"
    checkpointer = Checkpointer(checkpoints, _TinyLearner(), keep_checkpoints=2, onnx_path=newest)  # type: ignore[arg-type]
    for step, version in ((100, 1), (200, 2), (300, 3)):
        update.version = version
        checkpointer.save(step, version, update)
    assert sorted(p.name for p in checkpoints.glob("*.onnx")) == ["ckpt-200.onnx", "ckpt-300.onnx"]
    assert newest.read_bytes() == (checkpoints / "ckpt-300.onnx").read_bytes()
    model = onnx.load(str(newest))
    assert {p.key: p.value for p in model.metadata_props}["stepstream.policy_version"] == "3"
    assert not list(tmp_path.glob("*.tmp"))
