"""processor.inference against the real TF model it was exported from, and against hand formulas."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from common.errors import ProtocolError
from common.policy_contract import NORMALIZATION_CLIP
from processor import inference
from processor.inference import Policy
from protos import pb
from tests.policies import build_mlp_model, build_mlp_policy_update

ROOT = Path(__file__).resolve().parents[2]
OBS = [(8,), (3,)]
CONT = pb.ActionSpec(continuous_size=2)
DISC = pb.ActionSpec(discrete_branches=[3, 2])
HYBRID = pb.ActionSpec(continuous_size=2, discrete_branches=[3, 2])
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def tf_outputs(action_spec: pb.ActionSpec, observations: list[np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """The original Keras model's outputs (float32) on the given observations."""
    model = build_mlp_model(tuple(OBS), (action_spec.continuous_size, tuple(action_spec.discrete_branches)), seed)
    return {k: np.asarray(v) for k, v in model(observations).items()}


def make_obs(n: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *shape), dtype=np.float32) for shape in OBS]


def tiled(n: int) -> list[np.ndarray]:
    """One observation row repeated n times: every row has the same distribution."""
    return [np.repeat(o, n, axis=0) for o in make_obs(1, seed=7)]


def policy(action_spec: pb.ActionSpec = HYBRID, **kwargs: object) -> Policy:
    return Policy.from_update(build_mlp_policy_update("Walker", OBS, action_spec, 3, 0, **kwargs))  # type: ignore[arg-type]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def test_import_needs_no_tensorflow() -> None:
    code = (
        "import sys, processor.inference, processor.batching\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'keras', 'trainer'})\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_attributes() -> None:
    p = policy()
    assert (p.behavior_name, p.version, p.observation_shapes) == ("Walker", 3, OBS)
    assert p.action_spec == HYBRID


@pytest.mark.parametrize("n", [1, 5, 64, 5])  # back to 5 after 64: the reallocated tensors still agree
def test_forward_matches_tf_model(n: int) -> None:
    p, obs = policy(), make_obs(n)
    got, want = p.forward(obs), tf_outputs(HYBRID, obs)
    assert set(got) == {"mean", "log_std", "logits"}
    for key in got:
        np.testing.assert_allclose(got[key], want[key], atol=1e-5, err_msg=key)


def test_forward_applies_mlagents_normalisation() -> None:
    rng = np.random.default_rng(2)
    norms = [(rng.standard_normal(s).astype(np.float32), rng.uniform(0.01, 4, s).astype(np.float32)) for s in OBS]
    norms[0][1][0] = 0.0  # zero variance: the epsilon keeps it finite, the clip bounds it
    p, obs = policy(normalizers=norms), make_obs(16)
    normalised = [
        np.clip((o - m) / np.sqrt(v + 1e-8), -NORMALIZATION_CLIP, NORMALIZATION_CLIP)
        for o, (m, v) in zip(obs, norms, strict=True)
    ]
    want = tf_outputs(HYBRID, normalised)
    for key, value in p.forward(obs).items():
        np.testing.assert_allclose(value, want[key], atol=1e-5, err_msg=key)


def test_act_equals_tf_model_with_the_same_noise() -> None:
    obs = make_obs(6)
    out = policy(CONT).act(obs, None, np.random.default_rng(11))
    want = tf_outputs(CONT, obs)
    eps = np.random.default_rng(11).standard_normal((6, 2), dtype=np.float32)  # the policy's first draw
    u = want["mean"] + np.exp(want["log_std"]) * eps
    np.testing.assert_allclose(out.continuous_actions, u, atol=1e-5)
    np.testing.assert_allclose(out.env_continuous_actions, np.clip(u, -3, 3) / 3, atol=1e-5)
    assert out.policy_version == 3


def test_continuous_clip_mode_log_probs_and_clipping() -> None:
    p, obs = policy(CONT, clip=0.5), make_obs(256)
    out = p.act(obs, None, np.random.default_rng(0))
    f = p.forward(obs)
    std = np.exp(f["log_std"].astype(np.float64))
    z = (out.continuous_actions - f["mean"]) / std
    np.testing.assert_allclose(out.continuous_log_probs, -0.5 * z**2 - np.log(std) - HALF_LOG_2PI, atol=1e-4)
    np.testing.assert_array_equal(out.env_continuous_actions, np.clip(out.continuous_actions, -0.5, 0.5) / np.float32(0.5))
    assert np.abs(out.continuous_actions).max() > 0.5  # the stored sample is not clipped
    assert out.discrete_actions.shape == (256, 0) and out.discrete_log_probs.shape == (256, 0)
    for a in out[:5]:
        assert a.dtype == (np.int32 if a is out.discrete_actions else np.float32)


def test_continuous_squash_mode_log_probs() -> None:
    p, obs = policy(CONT, tanh_squash=True), make_obs(128)
    out = p.act(obs, None, np.random.default_rng(4))
    f = p.forward(obs)
    eps = np.random.default_rng(4).standard_normal((128, 2), dtype=np.float32)
    u = f["mean"].astype(np.float64) + np.exp(f["log_std"].astype(np.float64)) * eps
    np.testing.assert_allclose(out.continuous_actions, np.tanh(u), atol=1e-5)
    a = out.continuous_actions.astype(np.float64)  # the correction is of the stored action
    want = -0.5 * eps.astype(np.float64) ** 2 - f["log_std"] - HALF_LOG_2PI - np.log(1 - a**2 + 1e-6)
    np.testing.assert_array_equal(out.env_continuous_actions, out.continuous_actions)
    np.testing.assert_allclose(out.continuous_log_probs, want, atol=1e-4)
    assert np.all(np.abs(out.continuous_actions) <= 1)


def test_env_continuous_actions_of_a_greedy_mean_in_every_mode() -> None:
    # What `record --deterministic` sends the env for the policy's mean: the same mapping as sampled actions.
    u = np.array([[-3.0, -0.25], [0.0, 2.0]], np.float32)
    np.testing.assert_array_equal(policy(CONT, clip=0.5).env_continuous_actions(u), [[-1.0, -0.5], [0.0, 1.0]])
    np.testing.assert_array_equal(policy(CONT, clip=float("inf")).env_continuous_actions(u), u)  # neither clip nor scale
    np.testing.assert_allclose(policy(CONT, tanh_squash=True).env_continuous_actions(u), np.tanh(u), rtol=1e-6)


def test_continuous_sample_moments_match_the_model() -> None:
    n = 20000
    p, obs = policy(CONT), tiled(n)
    out = p.act(obs, None, np.random.default_rng(5))
    f = tf_outputs(CONT, [o[:1] for o in obs])
    std = np.exp(f["log_std"][0])
    np.testing.assert_array_less(np.abs(out.continuous_actions.mean(axis=0) - f["mean"][0]), 5 * std / math.sqrt(n))
    np.testing.assert_allclose(out.continuous_actions.std(axis=0), std, rtol=0.03)


def test_discrete_log_probs_follow_the_masked_log_softmax() -> None:
    n = 512
    rng = np.random.default_rng(9)
    mask = rng.random((n, 5)) < 0.6
    mask[:, 0] |= ~mask[:, :3].any(axis=1)  # every branch keeps an option
    mask[:, 3] |= ~mask[:, 3:].any(axis=1)
    p, obs = policy(DISC), make_obs(n)
    out = p.act(obs, mask, rng)
    logits = p.forward(obs)["logits"]
    for b, cols in enumerate([slice(0, 3), slice(3, 5)]):
        lp = log_softmax(np.where(mask[:, cols], logits[:, cols], -1e9))
        chosen = out.discrete_actions[:, b]
        np.testing.assert_allclose(out.discrete_log_probs[:, b], lp[np.arange(n), chosen], atol=1e-5)
        assert mask[:, cols][np.arange(n), chosen].all()


def test_masked_options_are_never_sampled() -> None:
    n = 20000
    rng = np.random.default_rng(3)
    mask = np.zeros((n, 5), np.uint8)  # uint8 masks are accepted as well as bool
    mask[np.arange(n), rng.integers(0, 3, n)] = 1  # one allowed option in branch 0 ...
    mask[:, 3:] = rng.random((n, 2)) < 0.5
    mask[mask[:, 3:].sum(axis=1) == 0, 4] = 1  # ... and one or two in branch 1
    out = policy(DISC).act(make_obs(n), mask, rng)
    assert mask[np.arange(n), out.discrete_actions[:, 0]].all()
    assert mask[np.arange(n), 3 + out.discrete_actions[:, 1]].all()
    single = mask[:, 3:].sum(axis=1) == 1
    np.testing.assert_allclose(out.discrete_log_probs[:, 0], 0.0, atol=1e-6)  # one allowed option: probability 1
    np.testing.assert_allclose(out.discrete_log_probs[single, 1], 0.0, atol=1e-6)


def test_discrete_frequencies_match_the_softmax() -> None:
    n = 40000
    p, obs = policy(DISC), tiled(n)
    mask = np.tile(np.array([[1, 0, 1, 1, 1]], np.bool_), (n, 1))
    out = p.act(obs, mask, np.random.default_rng(6))
    logits = tf_outputs(DISC, [o[:1] for o in obs])["logits"][0]
    for b, (cols, allowed) in enumerate([(slice(0, 3), mask[0, :3]), (slice(3, 5), mask[0, 3:])]):
        probs = np.exp(log_softmax(np.where(allowed, logits[cols], -np.inf)[None]))[0]
        freq = np.bincount(out.discrete_actions[:, b], minlength=len(probs)) / n
        np.testing.assert_array_less(np.abs(freq - probs), 5 * np.sqrt(probs * (1 - probs) / n) + 1e-9)
    assert (out.discrete_actions[:, 0] != 1).all()


def test_batch_size_changes_and_empty_requests() -> None:
    p = policy()
    for n in (3, 5, 3, 1):
        obs = make_obs(n, seed=n)
        np.testing.assert_allclose(p.forward(obs)["mean"], tf_outputs(HYBRID, obs)["mean"], atol=1e-5)
    out = p.act([np.zeros((0, 8), np.float32), np.zeros((0, 3), np.float32)], None, np.random.default_rng(0))
    assert [a.shape for a in out[:5]] == [(0, 2), (0, 2), (0, 2), (0, 2), (0, 2)]


def test_a_wide_batch_runs_on_the_second_interpreter_with_the_same_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``WIDE_BATCH_VALUES`` values on (here lowered to 40 rows of 11 values), a pass runs on a ``WIDE_THREADS``
    interpreter made at the first such batch; smaller ones stay on the first, and normalisation applies on both."""
    monkeypatch.setattr(inference, "WIDE_BATCH_VALUES", 40 * sum(math.prod(s) for s in OBS))
    rng = np.random.default_rng(3)
    norms = [(rng.standard_normal(s).astype(np.float32), rng.uniform(0.5, 2, s).astype(np.float32)) for s in OBS]
    p, single = (
        policy(normalizers=norms),
        Policy.from_update(build_mlp_policy_update("Walker", OBS, HYBRID, 3, 0, normalizers=norms), wide_threads=1),
    )
    made = False
    for n in (5, 39, 40, 64, 5, 64, 1):
        obs = make_obs(n, seed=n)
        normalised = [
            np.clip((o - m) / np.sqrt(v + 1e-8), -NORMALIZATION_CLIP, NORMALIZATION_CLIP)
            for o, (m, v) in zip(obs, norms, strict=True)
        ]
        want = tf_outputs(HYBRID, normalised)
        for got in (p.forward(obs), single.forward(obs)):
            for key in want:
                np.testing.assert_allclose(got[key], want[key], atol=1e-5, err_msg=f"{key} at N={n}")
        made = made or n >= 40
        assert (p._wide is not None) == made, n
    assert p._wide_batch == 64 and p._batch == 1
    assert single._wide is None  # wide_threads=1: every pass on one thread


def update_with(**artifact_fields: object) -> pb.PolicyUpdate:
    update = build_mlp_policy_update("Walker", OBS, HYBRID, 1, 0)
    for name, value in artifact_fields.items():
        field = getattr(update.artifact, name)
        if isinstance(value, pb.ActionSpec):
            field.CopyFrom(value)
        else:
            setattr(update.artifact, name, value)
    return update


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"format": "onnx"}, "format 'onnx' is not supported"),
        ({"model": b""}, "model is empty"),
        ({"model": b"not a flatbuffer" * 8}, "not a loadable TFLite model"),
        ({"action_spec": pb.ActionSpec(continuous_size=3)}, "output 'mean': expected float32 [N, 3]"),
        ({"action_spec": pb.ActionSpec(discrete_branches=[3, 3])}, "output 'logits': expected float32 [N, 6]"),
        ({"action_spec": pb.ActionSpec()}, "no continuous dimensions and no discrete branches"),
        ({"clip": 0.0}, "artifact.clip"),
    ],
)
def test_malformed_artifacts_raise_protocol_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ProtocolError, match=message.replace("[", r"\[").replace("(", r"\(")):
        Policy.from_update(update_with(**fields))


def test_missing_output_and_bad_normalizers_raise() -> None:
    cont_only = build_mlp_policy_update("Walker", OBS, CONT, 1, 0)
    cont_only.artifact.action_spec.CopyFrom(HYBRID)
    with pytest.raises(ProtocolError, match="no output 'logits'"):
        Policy.from_update(cont_only)
    bad = build_mlp_policy_update(
        "Walker", OBS, HYBRID, 1, 0, normalizers=[(np.zeros(8), np.ones(8)), (np.zeros(4), np.ones(4))]
    )
    with pytest.raises(ProtocolError, match=r"normalizers\[1\]"):
        Policy.from_update(bad)


def test_bad_requests_raise_protocol_errors() -> None:
    p, obs = policy(), make_obs(4)
    rng = np.random.default_rng(0)
    with pytest.raises(ProtocolError, match="1 given, the policy takes 2"):
        p.act(obs[:1], None, rng)
    with pytest.raises(ProtocolError, match=r"observations\[1\]: shape \[3, 3\]"):
        p.act([obs[0], obs[1][:3]], None, rng)
    with pytest.raises(ProtocolError, match="action_mask: shape"):
        p.act(obs, np.ones((4, 4), np.bool_), rng)
    mask = np.ones((4, 5), np.bool_)
    mask[2, 3:] = False
    with pytest.raises(ProtocolError, match="row 2 allows no option in branch 1"):
        p.act(obs, mask, rng)


def test_export_broadcasts_a_state_independent_log_std() -> None:
    import tensorflow as tf

    from trainer.export import export_tflite, make_policy_update

    kernel = tf.Variable(np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32))
    log_std = tf.Variable([-0.5, 0.25])

    def forward(obs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"mean": obs @ kernel, "log_std": log_std, "value": tf.reduce_sum(obs, axis=1)}

    update = make_policy_update("Lin", 1, 10, export_tflite(forward, [(8,)]), CONT)
    obs = np.random.default_rng(1).standard_normal((3, 8), dtype=np.float32)
    out = Policy.from_update(update).forward([obs])
    np.testing.assert_allclose(out["mean"], obs @ kernel.numpy(), atol=1e-5)
    np.testing.assert_array_equal(out["log_std"], np.tile([[-0.5, 0.25]], (3, 1)).astype(np.float32))
    with pytest.raises(ValueError, match="model_bytes is empty"):
        make_policy_update("Lin", 1, 10, b"", CONT)


def test_uneven_branches_including_a_single_option_branch() -> None:
    spec = pb.ActionSpec(discrete_branches=[1, 4, 2])
    p, obs = policy(spec), make_obs(300)
    mask = np.ones((300, 7), np.bool_)
    mask[:150, 1:4] = False  # rows 0..149: only the last option of branch 1
    out = p.act(obs, mask, np.random.default_rng(8))
    logits = p.forward(obs)["logits"]
    assert (out.discrete_actions[:, 0] == 0).all() and (out.discrete_actions[:150, 1] == 3).all()
    for b, cols in enumerate([slice(0, 1), slice(1, 5), slice(5, 7)]):
        lp = log_softmax(np.where(mask[:, cols], logits[:, cols], -1e9))
        np.testing.assert_allclose(out.discrete_log_probs[:, b], lp[np.arange(300), out.discrete_actions[:, b]], atol=1e-5)
    assert len(np.unique(out.discrete_actions[150:, 1])) == 4
