"""trainer.export's weight patching: a patched export acts exactly as a fresh full conversion.

Every case changes the weights after the first export (which builds the template), then compares
the patched flatbuffer with a full conversion of the same weights, through the processor's
``Policy.from_update`` + ``forward`` on random observations, and with the TF forward itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import pytest
import tensorflow as tf

import trainer.weight_template as weight_template
from common.config import EncoderType
from common.specs import ActionSpec, ObservationSpec
from processor.inference import Policy
from protos import pb
from trainer import probe_cache
from trainer.encoders import ObservationEncoder
from trainer.export import TFLiteExporter, make_policy_update
from trainer.networks import LOG_STD_MAX, PolicyNetwork, WeightInit
from trainer.probe_cache import PROBE_CACHE_ENV
from trainer.weight_template import NotPatchableError, constant_buffers

ATOL = 1e-5
Shapes = list[tuple[int, ...]]
ONE_OBS: Shapes = [(6,)]
TWO_OBS: Shapes = [(4,), (3,)]


def policy_outputs(model: bytes, action_spec: pb.ActionSpec, observations: list[np.ndarray]) -> dict[str, np.ndarray]:
    """What the processor's policy computes from ``model`` (the raw forward outputs)."""
    update = make_policy_update("b", 1, 0, model, action_spec)
    return {k: np.array(v) for k, v in Policy.from_update(update).forward(observations).items()}


def random_observations(shapes: list[tuple[int, ...]], n: int = 9, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, *shape)).astype(np.float32) * 2 for shape in shapes]


def perturb(variables: tuple[tf.Variable, ...] | list[tf.Variable], seed: int, log_std_shift: float = 0.0) -> None:
    """New weights for every variable, as a trainer update would give (log_std optionally shifted)."""
    rng = np.random.default_rng(seed)
    for v in variables:
        shift = log_std_shift if v.name.split(":")[0] == "log_std" else 0.0
        v.assign(rng.normal(shift, 0.3, v.shape).astype(np.float32))


def assert_same_as_full_conversion(
    forward: Callable[..., object], shapes: list[tuple[int, ...]], patched: bytes, action_spec: pb.ActionSpec
) -> None:
    """``patched`` matches a fresh full conversion and the TF forward, on random observations."""
    full = TFLiteExporter(forward, shapes, patch_weights=False).export()
    observations = random_observations(shapes)
    got, want = policy_outputs(patched, action_spec, observations), policy_outputs(full, action_spec, observations)
    assert sorted(got) == sorted(want)
    reference = TFLiteExporter(forward, shapes)._serve(*observations)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=ATOL, rtol=0, err_msg=name)
        np.testing.assert_allclose(got[name], np.asarray(reference[name]), atol=ATOL, rtol=1e-5, err_msg=name)


POLICY_CASES = {
    "continuous_state_independent_log_std": (dict(state_dependent_std=False), ActionSpec(2)),
    "continuous_state_dependent_log_std": (dict(state_dependent_std=True), ActionSpec(3)),
    "discrete": (dict(), ActionSpec(0, (3, 2))),
    "hybrid": (dict(), ActionSpec(2, (4,))),
    # PPO's orthogonal_init false: non-zero biases from the first export on.
    "hybrid_pytorch_start": (dict(init=WeightInit.PYTORCH), ActionSpec(2, (4,))),
}


@pytest.mark.parametrize("case", sorted(POLICY_CASES))
@pytest.mark.parametrize("shapes", [ONE_OBS, TWO_OBS], ids=["one_obs", "two_obs"])
def test_patched_export_equals_full_conversion(case: str, shapes: list[tuple[int, ...]]) -> None:
    kwargs, action_spec = POLICY_CASES[case]
    net = PolicyNetwork([s[0] for s in shapes], action_spec, hidden_units=64, num_layers=2, **kwargs)
    exporter = TFLiteExporter(net, shapes, verify_every=0)
    spec = action_spec.to_proto()
    first = exporter.export()
    assert exporter.patches_weights
    assert_same_as_full_conversion(net, shapes, first, spec)  # initial weights in the general layout
    for seed in (1, 2):
        # A shift of 3 pushes the state-independent log_std past LOG_STD_MAX: the folded clip must follow.
        perturb(net.trainable_variables, seed, log_std_shift=3.0 if seed == 2 else 0.0)
        patched = exporter.export()
        assert exporter.patches_weights
        assert_same_as_full_conversion(net, shapes, patched, spec)
    if case == "continuous_state_independent_log_std":
        np.testing.assert_array_equal(policy_outputs(patched, spec, random_observations(shapes))["log_std"], LOG_STD_MAX)


@pytest.mark.parametrize(
    ("encoder_type", "frame_dtype"),
    [(EncoderType.SIMPLE, np.uint8), (EncoderType.RESNET, np.float32)],
    ids=["simple-uint8", "resnet-float32"],
)
def test_patched_export_of_a_visual_policy_equals_full_conversion(encoder_type: EncoderType, frame_dtype: type) -> None:
    """Conv kernels sit in the flatbuffer as OHWI, and a uint8 frame's 1/255 is folded into the first one's
    filter: the template writes both layouts, so a camera policy exports in milliseconds too."""
    frame, dtype = (20, 20, 3), np.dtype(frame_dtype)
    specs = [ObservationSpec((2,), np.dtype(np.float32)), ObservationSpec(frame, dtype)]
    net = PolicyNetwork([2, 0], ActionSpec(1, (3,)), 16, 1, encoder=ObservationEncoder(specs, encoder_type, 8))
    exporter = TFLiteExporter(net, [(2,), frame], verify_every=0, observation_dtypes=[np.float32, dtype])
    exporter.export()
    perturb(net.trainable_variables, seed=5)
    patched = exporter.export()
    assert exporter.patches_weights
    full = TFLiteExporter(net, [(2,), frame], patch_weights=False, observation_dtypes=[np.float32, dtype]).export()
    rng = np.random.default_rng(2)
    pixels = rng.integers(0, 256, (5, *frame)) if dtype == np.uint8 else rng.random((5, *frame))
    observations: list[np.ndarray] = [rng.standard_normal((5, 2)).astype(np.float32), pixels.astype(dtype)]
    spec = pb.ActionSpec(continuous_size=1, discrete_branches=[3])
    got, want = policy_outputs(patched, spec, observations), policy_outputs(full, spec, observations)
    reference = net(*[tf.constant(o) for o in observations])
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=ATOL, rtol=0, err_msg=name)
        np.testing.assert_allclose(got[name], np.asarray(reference[name]), atol=1e-4, rtol=1e-4, err_msg=name)


def _keras_policy(shapes: list[tuple[int, ...]]) -> keras.Model:
    inputs = [keras.Input(shape) for shape in shapes]
    h = keras.layers.Dense(16, activation="tanh")(keras.layers.Concatenate()(inputs))
    return keras.Model(
        inputs, {"mean": keras.layers.Dense(2)(h), "log_std": keras.layers.Dense(2)(h), "logits": keras.layers.Dense(5)(h)}
    )


def test_keras_model_with_two_inputs() -> None:
    model = _keras_policy(TWO_OBS)
    exporter = TFLiteExporter(model, TWO_OBS)
    exporter.export()
    perturb(model.trainable_variables, seed=4)
    patched = exporter.export()
    assert exporter.patches_weights
    assert_same_as_full_conversion(model, TWO_OBS, patched, pb.ActionSpec(continuous_size=2, discrete_branches=[3, 2]))


def test_template_build_restores_the_weights() -> None:
    """Probing assigns random values to the live variables; the trainer's weights must come back bit for bit."""
    net = PolicyNetwork([5], ActionSpec(2), hidden_units=32, num_layers=2)
    perturb(net.trainable_variables, seed=7)
    before = [v.numpy().copy() for v in net.trainable_variables]
    TFLiteExporter(net, [(5,)]).export()
    for v, value in zip(net.trainable_variables, before, strict=True):
        np.testing.assert_array_equal(v.numpy(), value)


def test_constant_buffers_locate_the_weights() -> None:
    net = PolicyNetwork([5], ActionSpec(0, (4,)), hidden_units=8, num_layers=1)
    perturb(net.trainable_variables, seed=8)
    model = TFLiteExporter(net, [(5,)], patch_weights=False).export()
    contents = [np.frombuffer(model, "<f4", length // 4, offset) for offset, length in constant_buffers(model)]
    assert net.logits_head is not None
    kernel = net.logits_head.kernel.numpy()  # [8, 4] -> FULLY_CONNECTED weights [4, 8]
    assert any(np.array_equal(c, kernel.T.reshape(-1)) for c in contents if c.size == kernel.size)


# -- fallbacks -----------------------------------------------------------------------------------


def _fallback_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "trainer.export" and r.levelno == logging.WARNING]


def test_fallback_forced_off_converts_every_export() -> None:
    net = PolicyNetwork([4], ActionSpec(2), hidden_units=16, num_layers=2)
    exporter = TFLiteExporter(net, [(4,)], patch_weights=False)
    exporter.export()
    perturb(net.trainable_variables, seed=5)
    assert not exporter.patches_weights
    assert_same_as_full_conversion(net, [(4,)], exporter.export(), pb.ActionSpec(continuous_size=2))


class _ExpScale(tf.Module):
    """A forward whose variable the converter folds through ``exp``: no slot can replay that."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(3)
        self.dense.build((None, 4))
        self.log_scale = tf.Variable(tf.zeros([3]), name="log_scale")

    def __call__(self, obs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"logits": self.dense(obs) * tf.exp(self.log_scale)}


def test_unpatchable_network_falls_back_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    net = _ExpScale()
    exporter = TFLiteExporter(net, [(4,)])
    with caplog.at_level(logging.WARNING, logger="trainer.export"):
        exporter.export()
        assert not exporter.patches_weights
        for seed in (1, 2):
            perturb([net.log_scale, *net.dense.trainable_variables], seed)
            model = exporter.export()
    assert len(_fallback_warnings(caplog)) == 1
    assert_same_as_full_conversion(net, [(4,)], model, pb.ActionSpec(discrete_branches=[3]))


def test_offset_buffer_layout_falls_back(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def offset_layout(model: bytes) -> list[tuple[int, int]]:
        raise NotPatchableError("buffer 1 is stored outside the flatbuffer (offset-buffer layout)")

    monkeypatch.setattr(weight_template, "constant_buffers", offset_layout)
    net = PolicyNetwork([4], ActionSpec(0, (2,)), hidden_units=16, num_layers=2)
    exporter = TFLiteExporter(net, [(4,)])
    with caplog.at_level(logging.WARNING, logger="trainer.export"):
        exporter.export()
    assert not exporter.patches_weights
    assert "offset-buffer" in _fallback_warnings(caplog)[0].getMessage()
    perturb(net.trainable_variables, seed=6)
    assert_same_as_full_conversion(net, [(4,)], exporter.export(), pb.ActionSpec(discrete_branches=[2]))


def test_verification_mismatch_falls_back_to_a_correct_export(caplog: pytest.LogCaptureFixture) -> None:
    """A slot gone missing (a stale weight) is caught by the periodic check; that export is converted in full."""
    net = PolicyNetwork([4], ActionSpec(2), hidden_units=16, num_layers=2)
    exporter = TFLiteExporter(net, [(4,)], verify_every=2)
    exporter.export()
    assert exporter._template is not None
    exporter._template._writes.pop(0)  # simulate a weight buffer the template failed to find
    perturb(net.trainable_variables, seed=9)
    with caplog.at_level(logging.WARNING, logger="trainer.export"):
        exporter.export()  # unchecked: the 2nd patched export is the next one checked
        assert exporter.patches_weights
        model = exporter.export()
        assert not exporter.patches_weights
        exporter.export()
    assert len(_fallback_warnings(caplog)) == 1
    assert "differs from the TF forward" in _fallback_warnings(caplog)[0].getMessage()
    assert_same_as_full_conversion(net, [(4,)], model, pb.ActionSpec(continuous_size=2))


def test_probe_conversions_are_cached_and_a_damaged_entry_is_converted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A second exporter of the same graph reads the probe conversions instead of converting; the
    export is the same bytes. A damaged entry is noticed, converted again and rewritten. (A fresh
    conversion of a later trace differs in bytes only by the layer names Keras numbers per process.)"""
    monkeypatch.setenv(PROBE_CACHE_ENV, str(tmp_path))
    conversions: list[int] = []
    convert = TFLiteExporter._convert

    def counting_convert(self: TFLiteExporter, concrete: object) -> bytes:
        conversions.append(1)
        return convert(self, concrete)

    monkeypatch.setattr(TFLiteExporter, "_convert", counting_convert)

    def fresh_export() -> bytes:
        tf.keras.utils.set_random_seed(4)  # the same weights and, traced the same way, the same graph
        net = PolicyNetwork([4], ActionSpec(2), hidden_units=16, num_layers=2)
        return TFLiteExporter(net, [(4,)]).export()

    first = fresh_export()
    entries = list((tmp_path / "tflite-probes").glob("*.npz"))
    assert len(conversions) == 3 and len(entries) == 1
    second = fresh_export()
    assert len(conversions) == 3, "the second exporter read the cached probe conversions"
    assert second == first

    entries[0].write_bytes(b"not an npz file")
    with caplog.at_level(logging.WARNING, logger="trainer.probe_cache"):
        third = fresh_export()
    assert len(conversions) == 6
    assert any("unreadable probe cache" in r.getMessage() for r in caplog.records)
    spec, observations = pb.ActionSpec(continuous_size=2), random_observations([(4,)])
    for name, value in policy_outputs(third, spec, observations).items():
        np.testing.assert_allclose(value, policy_outputs(first, spec, observations)[name], atol=ATOL, rtol=0, err_msg=name)
    assert fresh_export() == third and len(conversions) == 6, "the rewritten entry serves again"


def test_the_probe_cache_keeps_the_most_recently_used_entries(tmp_path: Path) -> None:
    for i in range(probe_cache.MAX_ENTRIES + 3):
        entry = tmp_path / f"{i:03d}.npz"
        probe_cache.store_probes(entry, [bytes([i])])
        os.utime(entry, (i, i))  # stored one second apart, oldest first
    first = tmp_path / "000.npz"
    assert not first.exists(), "the oldest entries were removed"
    kept = sorted(p.name for p in tmp_path.glob("*.npz"))
    assert len(kept) == probe_cache.MAX_ENTRIES and kept[-1] == f"{probe_cache.MAX_ENTRIES + 2:03d}.npz"
    oldest_kept = tmp_path / kept[0]
    assert probe_cache.load_probes(oldest_kept, 1) is not None  # a hit makes it the most recent
    probe_cache.store_probes(tmp_path / "new.npz", [b"x"])
    assert oldest_kept.exists() and len(list(tmp_path.glob("*.npz"))) == probe_cache.MAX_ENTRIES
