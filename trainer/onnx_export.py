"""ONNX export: a ``PolicyUpdate`` in, the ``.onnx`` model Unity's inference runs out (ML-Agents' contract).

Unity's ML-Agents package runs ``.onnx`` models with the graph contract ML-Agents 1.1.0's exporter
(``torch_entities/model_serialization.py``, ``SimpleActor.forward``) writes; this module writes the
same contract (``common.policy_contract``: names, shapes, dtypes, opset 9, IR version 4, model API
version 3) from the self-contained policy the trainer publishes and checkpoints, so a checkpoint's
``ckpt-<step>.policy.pb`` is all it needs (no config, no rebuilt network).

Shapes: ``batch`` rows (the dynamic first axis), ``C`` continuous action dimensions, ``B`` discrete
branches, ``M = sum(branches)`` logits / mask columns.

How the graph is made: ``tf2onnx`` converts the artifact's TFLite network (normalised observations
-> ``mean``, ``log_std`` ``[batch, C]``, ``logits`` ``[batch, M]``) at opset 9, and the ``onnx``
helper API wraps it in what the processor does around that network (``processor.inference``), with
ML-Agents' names:

* **inputs** ``obs_0`` ... float32 ``[batch, *shape_i]``, raw observations: when the update carries
  normaliser state the graph applies ``clip((obs - mean) * (1 / sqrt(variance + 1e-8)), -5, 5)``
  itself, with the processor's float32 constants, as ML-Agents' graph embeds its normaliser.
  ``action_masks`` float32 ``[batch, M]``, 1 = allowed (present only with discrete actions, as
  ML-Agents' exporter leaves it out of a continuous model). The normaliser acts on vector observations only.
* **images** ``[H, W, C]`` enter as float32 ``[batch, C, H, W]`` in [0, 1], ML-Agents' boundary
  (``common.policy_contract.onnx_input_shape``: its ``ModelSerializer`` exports NCHW inputs, as Sentis
  feeds camera pixels, and its encoders skip their NHWC permute while exporting). The graph transposes
  them to the network's NHWC; for a network trained on uint8 frames it also takes them back to the
  uint8 the network reads, ``uint8(clip(x, 0, 1) * 255 + 0.5)`` (opset 9 has no Round; exact for
  the k / 255 values a camera's pixels have), which the network itself scales by 1 / 255 again.
* **continuous**: ``continuous_actions`` is ``T(mean + exp(log_std) * eps)`` with ``eps`` from
  ``RandomNormalLike``; ``deterministic_continuous_actions`` is ``T(mean)``. ``T`` is the transform
  the policy was trained with, from ``InferenceArtifact.tanh_squash`` / ``clip``, so Unity applies
  the same env action the processor sent during training:

  - PPO (clip 1): ``clip(u, -1, 1)``;
  - BC (clip 3): ``clip(u, -3, 3) / 3``, ML-Agents' own transform;
  - any other clip ``c``: ``clip(u, -c, c) / c``; an infinite clip: ``u`` itself;
  - SAC (tanh squash): ``tanh(u)``, and ``tanh(mean)`` for the deterministic output (ML-Agents
    1.1.0's SAC graph sends the *unsquashed* mean there; ours is the action the processor's greedy
    path sends).

  The transform is also written to the model's metadata (``stepstream.continuous_transform``).
* **discrete**: masked logits ``logits * mask - 1e8 * (1 - mask)`` (ML-Agents' rule; the
  processor's ``-1e9`` for masked options gives the same argmax and, both underflowing to
  probability 0, the same distribution); per branch ``Multinomial`` (one sample) for
  ``discrete_actions`` and ``ArgMax`` for ``deterministic_discrete_actions``, int64 ``[batch, B]``.
* **constants**: ``version_number`` [3], ``memory_size`` [R] (0 for a feed-forward policy),
  ``continuous_action_output_shape`` [C] (float32 ``[1]``), ``discrete_action_output_shape`` the
  branch sizes (float32 ``[1, B]``).
* **memory** (a recurrent policy, ``InferenceArtifact.memory_size`` R > 0): the input ``recurrent_in`` float32
  ``[batch, 1, R]`` after ``action_masks``, and the output ``recurrent_out`` of the same shape, last, as ML-Agents'
  ``ModelSerializer`` names and orders them; the network's own state is ``[batch, R]`` (``common.policy_contract``),
  so the graph squeezes and unsqueezes the middle axis. Unity holds each agent's state between decisions.

``tf2onnx`` 1.17 installs beside this project's protobuf 7 and TensorFlow 2.21 (it asks for
``protobuf>=3.20`` with no upper bound) and converts the LiteRT flatbuffer directly.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import tf2onnx
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper, numpy_helper

from common.policy_contract import (
    ACTION_MASKS,
    CONTINUOUS_ACTION_OUTPUT_SHAPE,
    CONTINUOUS_ACTIONS,
    DETERMINISTIC_CONTINUOUS_ACTIONS,
    DETERMINISTIC_DISCRETE_ACTIONS,
    DISCRETE_ACTION_OUTPUT_SHAPE,
    DISCRETE_ACTIONS,
    LOG_STD,
    LOGITS,
    MEAN,
    MEMORY_SIZE,
    MODEL_API_VERSION,
    NORMALIZATION_CLIP,
    NORMALIZATION_EPSILON,
    ONNX_BATCH_AXIS,
    ONNX_MASKED_LOGIT_OFFSET,
    ONNX_OPSET,
    ONNX_OUTPUTS,
    RECURRENT_IN,
    RECURRENT_OUT,
    TFLITE_FORMAT,
    VERSION_NUMBER,
    input_name,
    is_image_shape,
    onnx_input_shape,
)
from common.tensors import from_tensor
from protos import pb
from trainer.export import quiet_logger

logger = logging.getLogger(__name__)

#: ML-Agents 1.1.0's files carry IR version 4, the one of opset 9.
ONNX_IR_VERSION = 4
_CONSTANT_OUTPUTS = (VERSION_NUMBER, MEMORY_SIZE, CONTINUOUS_ACTION_OUTPUT_SHAPE, DISCRETE_ACTION_OUTPUT_SHAPE)


def continuous_transform(tanh_squash: bool, clip: float) -> str:
    """The env-action transform of a continuous sample ``u``, as the graph embeds it (module docstring)."""
    if tanh_squash:
        return "tanh(u)"
    if math.isinf(clip):
        return "u"
    if clip == 1.0:
        return "clip(u, -1, 1)"
    return f"clip(u, -{clip:g}, {clip:g}) / {clip:g}"


def _signature_tensors(
    model: bytes,
) -> tuple[list[str], list[tuple[int, ...]], dict[str, str], list[np.dtype], str | None]:
    """The TFLite tensor names behind the signature: (input names per ``obs_i``, their shapes, output name per key,
    the inputs' dtypes, the name of the ``RECURRENT_IN`` input or None)."""
    interpreter = Interpreter(model_content=model, num_threads=1)
    runner = interpreter.get_signature_runner()
    names = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
    inputs = dict(runner.get_input_details())
    recurrent = inputs.pop(RECURRENT_IN, None)
    outputs = runner.get_output_details()
    in_names, shapes, dtypes = [], [], []
    for i in range(len(inputs)):
        detail = inputs.get(input_name(i))
        if detail is None:
            raise ValueError(
                f"the TFLite model has inputs {sorted(inputs)}, not {input_name(0)}..{input_name(len(inputs) - 1)}"
            )
        in_names.append(names[detail["index"]])
        shapes.append(tuple(int(d) for d in detail["shape_signature"][1:]))
        dtypes.append(np.dtype(detail["dtype"]))
    recurrent_name = None if recurrent is None else names[recurrent["index"]]
    return in_names, shapes, {key: names[d["index"]] for key, d in outputs.items()}, dtypes, recurrent_name


def _convert_core(model: bytes, in_names: list[str], out_names: list[str]) -> onnx.ModelProto:
    """tf2onnx's conversion of the TFLite network at ``ONNX_OPSET``."""
    with tempfile.TemporaryDirectory(prefix="stepstream-onnx-") as folder:
        path = Path(folder) / "policy.tflite"
        path.write_bytes(model)
        # tf2onnx reads the flatbuffer's signatures with tf.lite.Interpreter, which warns of its deprecation.
        with quiet_logger("tf2onnx"), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*tf.lite.Interpreter is deprecated.*")
            proto, _ = tf2onnx.convert.from_tflite(str(path), input_names=in_names, output_names=out_names, opset=ONNX_OPSET)
    return proto


class _Graph:
    """The wrapper's nodes, initializers, inputs and outputs, added in topological order."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: dict[str, onnx.ValueInfoProto] = {}
        self._count = 0

    def name(self, what: str) -> str:
        self._count += 1
        return f"{self._prefix}{what}_{self._count}"

    def constant(self, what: str, value: np.ndarray) -> str:
        name = self.name(what)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], output: str | None = None, **attributes: Any) -> str:
        out = output or self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.name(f"{op}_node"), **attributes))
        return out

    def output(self, name: str, elem_type: int, shape: list[int | str]) -> None:
        self.outputs[name] = helper.make_tensor_value_info(name, elem_type, shape)


def _transformed(g: _Graph, u: str, tanh_squash: bool, clip: float, output: str) -> None:
    """``output = T(u)``, the env-action transform (module docstring), as the processor computes it."""
    if tanh_squash:
        g.node("Tanh", [u], output)
    elif math.isinf(clip):
        g.node("Identity", [u], output)
    elif clip == 1.0:
        g.node("Clip", [u], output, min=-1.0, max=1.0)
    else:
        clipped = g.node("Clip", [u], min=-float(clip), max=float(clip))
        g.node("Div", [clipped, g.constant("clip", np.asarray(clip, np.float32))], output)


def _normalizer_constants(artifact: pb.InferenceArtifact, index: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean, 1 / sqrt(variance + eps)) float32, computed exactly as ``processor.inference`` does."""
    state = artifact.normalizers[index]
    mean = from_tensor(state.mean, f"artifact.normalizers[{index}].mean").astype(np.float32)
    variance = from_tensor(state.variance, f"artifact.normalizers[{index}].variance").astype(np.float32)
    return mean, (1.0 / np.sqrt(variance + NORMALIZATION_EPSILON)).astype(np.float32)


def policy_to_onnx(update: pb.PolicyUpdate) -> onnx.ModelProto:
    """The ONNX model of a ``PolicyUpdate``'s policy, in ML-Agents' contract (module docstring).

    Args:
        update: a published or checkpointed policy (``InferenceArtifact`` format ``"tflite"``).

    Returns:
        The checked model: opset 9, IR version 4, inputs ``obs_i`` [and ``action_masks``], the
        outputs of ``common.policy_contract.ONNX_OUTPUTS`` that the action spec has, in that order.

    Raises:
        ValueError: another artifact format, or a model / normaliser state / memory size that does not match it.
    """
    artifact = update.artifact
    if artifact.format != TFLITE_FORMAT:
        raise ValueError(f"artifact.format {artifact.format!r}: only {TFLITE_FORMAT!r} artifacts convert to ONNX")
    spec = artifact.action_spec
    c, branches = int(spec.continuous_size), [int(b) for b in spec.discrete_branches]
    in_names, shapes, out_tensors, dtypes, recurrent = _signature_tensors(artifact.model)
    memory_size = _memory_size(artifact, recurrent)
    needed = _needed_outputs(c, branches, memory_size)
    missing = [key for key in needed if key not in out_tensors]
    if missing:
        raise ValueError(f"the TFLite model has outputs {sorted(out_tensors)}; {missing} missing")
    vectors = [i for i, shape in enumerate(shapes) if not is_image_shape(shape)]  # the normalised observations
    if artifact.normalizers and len(artifact.normalizers) != len(vectors):
        raise ValueError(f"artifact.normalizers: {len(artifact.normalizers)} given for {len(vectors)} vector observations")
    core_names = in_names + ([recurrent] if recurrent is not None else [])
    core = _convert_core(artifact.model, core_names, [out_tensors[key] for key in needed])
    core_inputs = {i.name for i in core.graph.input}
    if core_inputs != set(core_names):
        raise ValueError(f"tf2onnx kept inputs {sorted(core_inputs)} of {core_names}")

    # The wrapper's own names start with "stepstream/", apart from tf2onnx's.
    g = _Graph("stepstream/")
    pre = _Graph("stepstream/input/")  # inputs and the normaliser, which feeds the core's (former) inputs
    for i, (core_input, shape) in enumerate(zip(in_names, shapes, strict=True)):
        obs = input_name(i)
        pre.inputs.append(helper.make_tensor_value_info(obs, TensorProto.FLOAT, [ONNX_BATCH_AXIS, *onnx_input_shape(shape)]))
        if is_image_shape(shape):
            _image_input(pre, obs, core_input, dtypes[i])
            continue
        if not artifact.normalizers:
            pre.node("Identity", [obs], core_input)
            continue
        mean, inv_std = _normalizer_constants(artifact, vectors.index(i))
        if mean.shape != shape:
            raise ValueError(f"artifact.normalizers[{i}]: shape {list(mean.shape)}, observation {input_name(i)} {list(shape)}")
        centred = pre.node("Sub", [obs, pre.constant("mean", mean)])
        scaled = pre.node("Mul", [centred, pre.constant("inv_std", inv_std)])
        pre.node("Clip", [scaled], core_input, min=-NORMALIZATION_CLIP, max=NORMALIZATION_CLIP)

    g.node("Identity", [g.constant("version", np.asarray([MODEL_API_VERSION], np.float32))], VERSION_NUMBER)
    g.output(VERSION_NUMBER, TensorProto.FLOAT, [1])
    g.node("Identity", [g.constant("memory", np.asarray([memory_size], np.float32))], MEMORY_SIZE)
    g.output(MEMORY_SIZE, TensorProto.FLOAT, [1])
    if c:
        mean_t, log_std_t = out_tensors[MEAN], out_tensors[LOG_STD]
        eps = g.node("RandomNormalLike", [mean_t], dtype=TensorProto.FLOAT)
        u = g.node("Add", [mean_t, g.node("Mul", [g.node("Exp", [log_std_t]), eps])])
        _transformed(g, u, artifact.tanh_squash, artifact.clip, CONTINUOUS_ACTIONS)
        g.output(CONTINUOUS_ACTIONS, TensorProto.FLOAT, [ONNX_BATCH_AXIS, c])
        g.node("Identity", [g.constant("continuous_shape", np.asarray([c], np.float32))], CONTINUOUS_ACTION_OUTPUT_SHAPE)
        g.output(CONTINUOUS_ACTION_OUTPUT_SHAPE, TensorProto.FLOAT, [1])
        _transformed(g, mean_t, artifact.tanh_squash, artifact.clip, DETERMINISTIC_CONTINUOUS_ACTIONS)
        g.output(DETERMINISTIC_CONTINUOUS_ACTIONS, TensorProto.FLOAT, [ONNX_BATCH_AXIS, c])
    if branches:
        _discrete_outputs(g, pre, out_tensors[LOGITS], branches)
    if recurrent is not None:  # after action_masks, as ML-Agents orders them
        _recurrent_io(g, pre, recurrent, out_tensors[RECURRENT_OUT], memory_size)

    graph = helper.make_graph(
        [*pre.nodes, *core.graph.node, *g.nodes],
        "stepstream_policy",
        pre.inputs,
        [g.outputs[name] for name in (*ONNX_OUTPUTS, RECURRENT_OUT) if name in g.outputs],
        initializer=[*pre.initializers, *core.graph.initializer, *g.initializers],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        producer_name="stepstream",
        ir_version=ONNX_IR_VERSION,
        doc_string=f"policy {update.behavior_name} v{update.version}",
    )
    transform = continuous_transform(artifact.tanh_squash, artifact.clip) if c else "none"
    onnx.helper.set_model_props(
        model,
        {
            "stepstream.behavior_name": update.behavior_name,
            "stepstream.policy_version": str(update.version),
            "stepstream.trainer_step": str(update.trainer_step),
            "stepstream.continuous_transform": transform,
        },
    )
    onnx.checker.check_model(model, full_check=True)
    _check_runs(model, shapes, branches, memory_size)
    return model


def _needed_outputs(continuous_size: int, branches: list[int], memory_size: int) -> list[str]:
    """The network outputs the wrapper reads: the action spec's, and the next state of a recurrent policy."""
    return (
        ([MEAN, LOG_STD] if continuous_size else [])
        + ([LOGITS] if branches else [])
        + ([RECURRENT_OUT] if memory_size else [])
    )


def _memory_size(artifact: pb.InferenceArtifact, recurrent: str | None) -> int:
    """``artifact.memory_size``, checked against the model's ``RECURRENT_IN`` input (None: it has none)."""
    memory_size = int(artifact.memory_size)
    if (recurrent is None) != (memory_size == 0):
        have = "no" if recurrent is None else "an"
        raise ValueError(f"artifact.memory_size {memory_size} with {have} {RECURRENT_IN!r} input")
    return memory_size


def _recurrent_io(g: _Graph, pre: _Graph, core_in: str, core_out: str, memory_size: int) -> None:
    """``recurrent_in`` and ``recurrent_out`` ``[batch, 1, R]`` at the model's boundary, the network's ``[batch, R]``."""
    pre.inputs.append(helper.make_tensor_value_info(RECURRENT_IN, TensorProto.FLOAT, [ONNX_BATCH_AXIS, 1, memory_size]))
    pre.node("Squeeze", [RECURRENT_IN], core_in, axes=[1])
    g.node("Unsqueeze", [core_out], RECURRENT_OUT, axes=[1])
    g.output(RECURRENT_OUT, TensorProto.FLOAT, [ONNX_BATCH_AXIS, 1, memory_size])


def _image_input(pre: _Graph, obs: str, core_input: str, dtype: np.dtype) -> None:
    """``core_input`` (NHWC, the network's dtype) from the model's image input ``obs`` (NCHW float32 in [0, 1])."""
    if dtype != np.uint8:
        pre.node("Transpose", [obs], core_input, perm=[0, 2, 3, 1])
        return
    nhwc = pre.node("Transpose", [obs], perm=[0, 2, 3, 1])
    pixels = pre.node(
        "Mul", [pre.node("Clip", [nhwc], min=0.0, max=1.0), pre.constant("pixel_max", np.asarray(255.0, np.float32))]
    )
    rounded = pre.node("Add", [pixels, pre.constant("half", np.asarray(0.5, np.float32))])  # Cast truncates: +0.5 rounds
    pre.node("Cast", [rounded], core_input, to=TensorProto.UINT8)


def _check_runs(model: onnx.ModelProto, shapes: list[tuple[int, ...]], branches: list[int], memory_size: int) -> None:
    """Loads the model in onnxruntime and runs it on two rows: the checker passes graphs that no runtime loads
    (two nodes of one name), and Unity's only message would be a failed import."""
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feed = {input_name(i): np.zeros((2, *onnx_input_shape(shape)), np.float32) for i, shape in enumerate(shapes)}
        if branches:
            feed[ACTION_MASKS] = np.ones((2, sum(branches)), np.float32)
        if memory_size:
            feed[RECURRENT_IN] = np.zeros((2, 1, memory_size), np.float32)
        outputs = session.run(None, feed)
    except Exception as err:  # onnxruntime raises its own exception types
        raise ValueError(f"onnxruntime cannot run the exported model: {err}") from err
    names = [o.name for o in session.get_outputs()]
    short = [n for n, value in zip(names, outputs, strict=True) if n not in _CONSTANT_OUTPUTS and value.shape[0] != 2]
    if short:
        raise ValueError(f"outputs {short} of the exported model do not have one row per observation row")


def _discrete_outputs(g: _Graph, pre: _Graph, logits: str, branches: list[int]) -> None:
    """``discrete_actions``, its shape constant and ``deterministic_discrete_actions`` from masked logits."""
    m = sum(branches)
    pre.inputs.append(helper.make_tensor_value_info(ACTION_MASKS, TensorProto.FLOAT, [ONNX_BATCH_AXIS, m]))
    # ML-Agents' masking: kept logits unchanged, masked ones -1e8 (probability 0 once exponentiated).
    blocked = g.node("Sub", [g.constant("one", np.asarray(1.0, np.float32)), ACTION_MASKS])
    offset = g.node("Mul", [blocked, g.constant("offset", np.asarray(ONNX_MASKED_LOGIT_OFFSET, np.float32))])
    masked = g.node("Sub", [g.node("Mul", [logits, ACTION_MASKS]), offset])
    sampled, greedy = [], []
    start = 0
    for size in branches:
        part = g.node("Slice", [masked], starts=[start], ends=[start + size], axes=[1])
        start += size
        sampled.append(g.node("Multinomial", [part], dtype=TensorProto.INT64, sample_size=1))
        greedy.append(g.node("ArgMax", [part], axis=1, keepdims=1))
    g.node("Concat", sampled, DISCRETE_ACTIONS, axis=1)
    g.output(DISCRETE_ACTIONS, TensorProto.INT64, [ONNX_BATCH_AXIS, len(branches)])
    g.node("Identity", [g.constant("discrete_shape", np.asarray([branches], np.float32))], DISCRETE_ACTION_OUTPUT_SHAPE)
    g.output(DISCRETE_ACTION_OUTPUT_SHAPE, TensorProto.FLOAT, [1, len(branches)])
    g.node("Concat", greedy, DETERMINISTIC_DISCRETE_ACTIONS, axis=1)
    g.output(DETERMINISTIC_DISCRETE_ACTIONS, TensorProto.INT64, [ONNX_BATCH_AXIS, len(branches)])


def write_onnx(update: pb.PolicyUpdate, path: Path) -> Path:
    """Writes ``policy_to_onnx(update)`` to ``path`` atomically (a reader never sees half a file).

    Raises:
        ValueError: as ``policy_to_onnx``.
        OSError: the file cannot be written.
    """
    data = policy_to_onnx(update).SerializeToString()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    logger.info("wrote %s (%d bytes, policy %s v%d)", path, len(data), update.behavior_name, update.version)
    return path
