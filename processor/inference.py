"""Acting from a ``PolicyUpdate``'s artifact, with no trainer code and no TensorFlow.

The artifact is a TFLite flatbuffer (``trainer.export``) run by the LiteRT interpreter; this
module imports only ``ai_edge_litert`` and numpy, so the processor starts in a fraction of a
second and a forward pass of a 2x64 MLP costs 2-50 us instead of a ``tf.function``'s 400-600 us
(``benchmarks/inference_formats.py``).

Shapes: ``N`` agent rows in one call, ``C`` continuous action dimensions, ``B`` discrete branches,
``M = sum(branches)`` mask / logits columns.

What ``act`` computes, per row:

The model's inputs and outputs, and the constants below, follow ``common.policy_contract``.

* **Observation normalisation** (when the update carries ``normalizers``): ML-Agents' rule,
  ``clip((obs - mean) / sqrt(variance + 1e-8), -5, 5)``, applied here before the forward pass, to
  vector observations only. Images (``[H, W, C]``) go to the model as they are, uint8 or float32:
  the model scales a uint8 one itself (``common.policy_contract.IMAGE_SCALE``).
* **Continuous** (Gaussian ``N(mean, exp(log_std))``): ``u = mean + exp(log_std) * eps``. Clip
  mode (PPO): the env gets ``clip(u, -clip, clip) / clip`` (in [-1, 1], as ML-Agents'
  ``clamp(u, -3, 3) / 3``; PPO exports clip 1), the trajectory stores ``u`` and its log-prob.
  Squash mode (SAC): env and trajectory both get ``a = tanh(u)``, whose log-prob adds the
  change-of-variables term ``-log(1 - a^2 + 1e-6)`` per dimension. gSDE (an artifact with ``SDE_NOISE_SCALE``,
  acting with an agent's held standard-normal matrix ``E`` [L, C]): the noise is ``sum_j scale[j, c] * E[j, c]``
  (``latent(s) @ W``), so ``eps`` is that noise over ``exp(log_std)``, the state's std of it, and the log-prob is
  the same Gaussian's. Without held matrices such a policy acts with white ``eps``: the same distribution per step.
* **Recurrent state** (an artifact with ``memory_size`` R > 0): the model also takes ``RECURRENT_IN`` [N, R], each
  row's state as the processor holds it per agent (``processor.assembly``), and returns ``RECURRENT_OUT`` [N, R]; a
  row that brings no state of width R (a first sighting, or states of another memory size) acts from zeros.
  ``ActionOutput.memories`` is the state each row acted with, ``next_memories`` the one returned.
* **Discrete**: per branch, masked options (mask 0) get their logits set to a large negative
  before a stable log-softmax, and are excluded outright (score -inf) from the Gumbel-max draw
  ``argmax(logits + Gumbel noise)``, which samples the softmax with no loop over rows (the
  branches share each numpy call, split by ``reduceat`` at the branch starts). Every branch of
  every row must allow at least one option.

Runtime choices, by measurement on 2 cores: one interpreter per policy with ``num_threads=1``
(for vector policies a second thread only pays off from ~256 rows, and the cores are shared with the
event loop and the trainers); ``set_tensor``/``invoke``/``get_tensor`` on tensors allocated once per
batch size, reallocated only when ``N`` changes (3-5 us, less than padding to a size bucket costs in
compute). A batch of at least ``WIDE_BATCH_VALUES`` observation values (N x the values of one row: ten
84x84x3 frames; a vector batch never gets there) runs on a second interpreter of the same model with
``WIDE_THREADS`` threads, made at the first such batch (see ``WIDE_BATCH_VALUES`` for the figures).
A ``Policy`` is not thread-safe: call it from one thread (the processor's event loop).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from common.errors import ProtocolError
from common.policy_contract import (
    LOG_STD,
    LOGITS,
    MASKED_LOGIT,
    MEAN,
    NORMALIZATION_CLIP,
    NORMALIZATION_EPSILON,
    RECURRENT_IN,
    RECURRENT_OUT,
    SDE_NOISE_SCALE,
    TANH_LOG_EPSILON,
    TFLITE_FORMAT,
    input_name,
    is_image_shape,
)
from common.tensors import from_tensor
from processor.wire import MAX_ROW_WIDTH
from protos import pb

logger = logging.getLogger(__name__)

#: The artifact formats this module runs.
SUPPORTED_FORMATS = (TFLITE_FORMAT,)
_HALF_LOG_2PI = np.float32(0.5 * math.log(2.0 * math.pi))
_MIN_UNIFORM = np.float32(2.0**-25)


class ActionOutput(NamedTuple):
    """The actions and log-probs for ``N`` rows, all from one policy version."""

    env_continuous_actions: np.ndarray
    """float32 [N, C]: what the env receives, in [-1, 1] (clip(u) / clip in clip mode, tanh(u) in squash mode)."""
    continuous_actions: np.ndarray
    """float32 [N, C]: what the trajectory stores, the value whose log-prob is given (the raw
    Gaussian sample in clip mode, the squashed action in squash mode)."""
    continuous_log_probs: np.ndarray
    """float32 [N, C]: per-dimension log-prob of ``continuous_actions``."""
    discrete_actions: np.ndarray
    """int32 [N, B]: the chosen option per branch."""
    discrete_log_probs: np.ndarray
    """float32 [N, B]: log-prob of the chosen option per branch, under the masked distribution."""
    policy_version: int
    memories: np.ndarray | None = None
    """float32 [N, R]: the recurrent state each row acted with; None for a policy without memory."""
    next_memories: np.ndarray | None = None
    """float32 [N, R]: the state the model returned for each row (``RECURRENT_OUT``); None without memory."""


class _BranchLayout(NamedTuple):
    """Where each discrete branch's columns lie in the logits / mask ``[N, M]``."""

    slices: list[slice]
    """[B] each branch's columns."""
    starts: np.ndarray
    """intp [B]: each branch's first column."""
    branch_of_column: np.ndarray
    """intp [M]: the branch each column belongs to."""
    padded_columns: np.ndarray
    """intp [B, K = max branch size]: each branch's columns, padded with column M (a -inf filler)."""

    @classmethod
    def of(cls, branches: Sequence[int]) -> _BranchLayout:
        sizes = np.asarray(branches, dtype=np.intp)
        bounds = [0, *np.cumsum(sizes).tolist()]
        slices = [slice(a, b) for a, b in itertools.pairwise(bounds)]
        padded = np.full((len(sizes), max(sizes.tolist(), default=0)), bounds[-1], np.intp)
        for b, cols in enumerate(slices):
            padded[b, : cols.stop - cols.start] = np.arange(cols.start, cols.stop)
        return cls(slices, np.asarray(bounds[:-1], np.intp), np.repeat(np.arange(len(sizes)), sizes), padded)


class _Normalizer(NamedTuple):
    mean: np.ndarray  # float32 [*shape]
    inv_std: np.ndarray  # float32 [*shape]: 1 / sqrt(variance + eps)


def _protocol_guard(what: str, fn: Any, *args: Any) -> Any:
    """Calls ``fn(*args)``, turning the runtime's ValueError/RuntimeError into a ProtocolError."""
    try:
        return fn(*args)
    except (ValueError, RuntimeError) as err:
        raise ProtocolError(f"{what}: {err}") from err


def _load_normalizers(artifact: pb.InferenceArtifact, shapes: list[tuple[int, ...]]) -> list[_Normalizer | None] | None:
    """Normaliser state per observation (None for an image: the artifact holds one per vector observation,
    in order), or None when the artifact carries none."""
    if not artifact.normalizers:
        return None
    vectors = [i for i, shape in enumerate(shapes) if not is_image_shape(shape)]
    if len(artifact.normalizers) != len(vectors):
        raise ProtocolError(f"artifact.normalizers: {len(artifact.normalizers)} given for {len(vectors)} vector observations")
    loaded: list[_Normalizer | None] = [None] * len(shapes)
    for i, state in zip(vectors, artifact.normalizers, strict=True):
        shape = shapes[i]
        mean = from_tensor(state.mean, f"artifact.normalizers[{i}].mean").astype(np.float32)
        variance = from_tensor(state.variance, f"artifact.normalizers[{i}].variance").astype(np.float32)
        if mean.shape != shape or variance.shape != shape:
            raise ProtocolError(
                f"artifact.normalizers[{i}]: mean {list(mean.shape)} / variance {list(variance.shape)} "
                f"do not match observation shape {list(shape)}"
            )
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(variance)) and np.all(variance >= 0)):
            raise ProtocolError(f"artifact.normalizers[{i}]: mean and variance must be finite, variance >= 0")
        loaded[i] = _Normalizer(mean, (1.0 / np.sqrt(variance + NORMALIZATION_EPSILON)).astype(np.float32))
    return loaded


def _check_action_spec(spec: pb.ActionSpec, tanh_squash: bool, clip: float) -> None:
    if spec.continuous_size < 0 or any(b < 1 for b in spec.discrete_branches):
        raise ProtocolError(f"artifact.action_spec: invalid sizes {spec.continuous_size}, {list(spec.discrete_branches)}")
    if spec.continuous_size == 0 and not spec.discrete_branches:
        raise ProtocolError("artifact.action_spec: no continuous dimensions and no discrete branches")
    if spec.continuous_size > 0 and not tanh_squash and not clip > 0:
        raise ProtocolError(f"artifact.clip: {clip} must be > 0 (or inf) for clipped continuous actions")


MAX_MEMORY_SIZE = MAX_ROW_WIDTH
"""The widest recurrent state a policy may have (floats; the processor holds ``4 * R`` bytes per agent and step)."""

WIDE_THREADS = 2
"""LiteRT threads of a pass over a batch of at least ``WIDE_BATCH_VALUES`` values (the machine's 2 cores)."""
WIDE_BATCH_VALUES = 200_000
"""Observation values in a batch (N x the values of one row) from which a pass takes ``WIDE_THREADS`` threads.

Ten 84x84x3 frames: there a pass is long enough to share between two threads, while a vector batch never gets near
it (ML-Agents' 3DBall needs 25,000 rows), and T3's 40x40x3 frames from 8 envs (38,400 values) stay on one thread.
``benchmarks/grpc_g1.py --obs 84x84x3`` and ``benchmarks/inference_pixels.py`` show the gain (``docs/benchmarks.md``)."""


class Policy:
    """One policy version of one behavior, ready to act.

    Attributes:
        behavior_name: the behavior it acts for.
        version: the policy version (``PolicyUpdate.version``).
        trainer_step: agent experiences the trainer had consumed when it published it.
        action_spec: the action spec (C continuous dimensions, discrete branch sizes).
        observation_shapes: the shape of each observation, without the agent axis.
        tanh_squash, clip: how continuous samples become env actions (module docstring).
    """

    def __init__(self, update: pb.PolicyUpdate, interpreter: Interpreter, wide_threads: int = WIDE_THREADS) -> None:
        """Use ``Policy.from_update``; this assumes the artifact's format is already checked."""
        artifact = update.artifact
        self.behavior_name: str = update.behavior_name
        self.version: int = int(update.version)
        self.trainer_step: int = int(update.trainer_step)
        self.action_spec = pb.ActionSpec()
        self.action_spec.CopyFrom(artifact.action_spec)
        self.tanh_squash: bool = artifact.tanh_squash
        self.clip = np.float32(artifact.clip)
        _check_action_spec(self.action_spec, self.tanh_squash, float(artifact.clip))
        self.memory_size: int = int(artifact.memory_size)
        """R, the recurrent state's width (``InferenceArtifact.memory_size``); 0 for a feed-forward policy."""
        if not 0 <= self.memory_size <= MAX_MEMORY_SIZE or self.memory_size % 2:
            raise ProtocolError(f"artifact.memory_size: {self.memory_size} must be even (h and c), in [0, {MAX_MEMORY_SIZE}]")
        self._interpreter = interpreter
        self._memory_input = -1  # RECURRENT_IN's tensor index (_read_inputs)
        self._inputs, self.observation_shapes, self.observation_dtypes = self._read_inputs()
        self._outputs = self._read_outputs()
        self._normalizers = _load_normalizers(artifact, self.observation_shapes)
        self._branches = _BranchLayout.of(self.action_spec.discrete_branches)
        self._rows = np.zeros((0, 1), np.intp)  # np.arange(N)[:, None], kept for the last N
        self._batch = -1  # rows the interpreter's tensors are allocated for
        self._in_buffers: list[np.ndarray] = []
        self._buffer_rows = -1  # rows of the normalisation scratch
        self._model = artifact.model
        self._wide_threads = wide_threads
        self._wide: Interpreter | None = None  # the WIDE_THREADS interpreter, made at the first wide batch
        self._wide_batch = -1
        self._row_values = sum(math.prod(shape) for shape in self.observation_shapes)

    @classmethod
    def from_update(cls, update: pb.PolicyUpdate, wide_threads: int = WIDE_THREADS) -> Policy:
        """Loads the artifact of a ``PolicyUpdate``; ``wide_threads``: the threads of a pass over a batch of at least
        ``WIDE_BATCH_VALUES`` values (1: every pass on one thread).

        Raises:
            ProtocolError: an unknown format, a model the runtime cannot load, or one whose
                inputs/outputs do not match ``common.policy_contract`` and the action spec.
        """
        artifact = update.artifact
        if artifact.format not in SUPPORTED_FORMATS:
            raise ProtocolError(
                f"artifact.format {artifact.format!r} is not supported (supported: {', '.join(SUPPORTED_FORMATS)})"
            )
        if not artifact.model:
            raise ProtocolError("artifact.model is empty")
        interpreter = _protocol_guard(
            "artifact.model is not a loadable TFLite model", lambda: Interpreter(model_content=artifact.model, num_threads=1)
        )
        # Reading the model's tensors can fail too (a name that is not UTF-8): refuse it the same way.
        policy: Policy = _protocol_guard("artifact.model", cls, update, interpreter, wide_threads)
        logger.debug("loaded policy %s v%d (%d bytes)", policy.behavior_name, policy.version, len(artifact.model))
        return policy

    def _signature(self) -> Any:
        signatures = self._interpreter.get_signature_list()
        if len(signatures) != 1:
            raise ProtocolError(f"artifact.model must have exactly one signature, found {sorted(signatures)}")
        return _protocol_guard("artifact.model signature", self._interpreter.get_signature_runner)

    def _read_inputs(self) -> tuple[list[int], list[tuple[int, ...]], list[np.dtype]]:
        """Tensor index, shape and dtype of each observation input (``input_name(i)``: ``obs_0``, ``obs_1``, ...):
        float32, or for an image ``[N, H, W, C]`` uint8 too."""
        details = dict(self._signature().get_input_details())
        main_indices = {d["index"] for d in self._interpreter.get_input_details()}
        self._read_memory_input(details.pop(RECURRENT_IN, None), main_indices)
        if not details:
            raise ProtocolError("artifact.model has no inputs")
        indices, shapes, dtypes = [], [], []
        for i in range(len(details)):
            d = details.get(input_name(i))
            if d is None:
                names = f"{input_name(0)}..{input_name(len(details) - 1)}"
                raise ProtocolError(f"artifact.model inputs must be named {names}, got {sorted(details)}")
            signature = [int(x) for x in d["shape_signature"]]
            allowed = (np.float32, np.uint8) if len(signature) == 4 else (np.float32,)
            if d["dtype"] not in allowed or len(signature) < 2 or signature[0] != -1 or d["index"] not in main_indices:
                raise ProtocolError(
                    f"artifact.model input {input_name(i)}: expected float32 [N, ...] (or uint8 [N, H, W, C]) with "
                    f"dynamic N, got {np.dtype(d['dtype']).name} {signature}"
                )
            indices.append(int(d["index"]))
            shapes.append(tuple(signature[1:]))
            dtypes.append(np.dtype(d["dtype"]))
        return indices, shapes, dtypes

    def _read_memory_input(self, recurrent: dict[str, Any] | None, main_indices: set[int]) -> None:
        """Checks the ``RECURRENT_IN`` input's details (None: the model has none) against ``memory_size``."""
        if (recurrent is None) != (self.memory_size == 0):
            have = "no" if recurrent is None else f"a {RECURRENT_IN!r}"
            raise ProtocolError(f"artifact.model has {have} input for artifact.memory_size {self.memory_size}")
        if recurrent is None:
            return
        signature = [int(x) for x in recurrent["shape_signature"]]
        if recurrent["dtype"] != np.float32 or signature != [-1, self.memory_size] or recurrent["index"] not in main_indices:
            raise ProtocolError(
                f"artifact.model input {RECURRENT_IN!r}: expected float32 [N, {self.memory_size}], got {signature}"
            )
        self._memory_input = int(recurrent["index"])

    def _needed_outputs(self) -> dict[str, int]:
        """Output name -> its width, for every output the action spec (and the memory) needs."""
        needed = {}
        if self.action_spec.continuous_size:
            needed[MEAN] = needed[LOG_STD] = int(self.action_spec.continuous_size)
        if self.action_spec.discrete_branches:
            needed[LOGITS] = int(sum(self.action_spec.discrete_branches))
        if self.memory_size:
            needed[RECURRENT_OUT] = self.memory_size
        return needed

    def _read_outputs(self) -> dict[str, int]:
        """Tensor index of each output the action spec needs, checked against its width."""
        details = self._signature().get_output_details()
        needed = self._needed_outputs()
        outputs = {}
        self.sde_latent_size = 0
        """L of the artifact's gSDE output ``SDE_NOISE_SCALE`` [N, L, C]; 0 when it has none."""
        sde = details.get(SDE_NOISE_SCALE)
        if sde is not None and self.action_spec.continuous_size:
            signature = [int(x) for x in sde["shape_signature"]]
            c = int(self.action_spec.continuous_size)
            if sde["dtype"] != np.float32 or len(signature) != 3 or signature[1] < 1 or signature[2] != c:
                expected = f"expected float32 [N, L, {c}], got {signature}"
                raise ProtocolError(f"artifact.model output {SDE_NOISE_SCALE!r}: {expected}")
            outputs[SDE_NOISE_SCALE] = int(sde["index"])
            self.sde_latent_size = signature[1]
        for name, width in needed.items():
            d = details.get(name)
            if d is None:
                raise ProtocolError(f"artifact.model has no output {name!r} (outputs: {sorted(details)})")
            signature = [int(x) for x in d["shape_signature"]]
            if d["dtype"] != np.float32 or signature[1:] != [width]:
                raise ProtocolError(f"artifact.model output {name!r}: expected float32 [N, {width}], got {signature}")
            outputs[name] = int(d["index"])
        return outputs

    def check_request(self, observations: list[np.ndarray], action_mask: np.ndarray | None) -> int:
        """Checks one request against this policy's specs and returns its row count N.

        Raises:
            ProtocolError: wrong number or shape of observations, a mask of the wrong shape, or a
                mask row that allows no option in some branch.
        """
        if len(observations) != len(self.observation_shapes):
            raise ProtocolError(f"observations: {len(observations)} given, the policy takes {len(self.observation_shapes)}")
        n = observations[0].shape[0] if observations[0].ndim else -1
        for i, (obs, shape) in enumerate(zip(observations, self.observation_shapes, strict=True)):
            if obs.shape != (n, *shape):
                raise ProtocolError(
                    f"observations[{i}]: shape {list(obs.shape)}, expected [{n}, {', '.join(map(str, shape))}]"
                )
        if action_mask is not None and self._branches.slices:
            width = self._branches.slices[-1].stop
            if action_mask.shape != (n, width):
                raise ProtocolError(f"action_mask: shape {list(action_mask.shape)}, expected [{n}, {width}]")
            allowed = np.logical_or.reduceat(action_mask, self._branches.starts, axis=1)  # [N, B]
            if not allowed.all():
                row, branch = np.argwhere(~allowed)[0]
                raise ProtocolError(f"action_mask: row {row} allows no option in branch {branch}")
        return n

    def forward(self, observations: list[np.ndarray], memories: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """One forward pass on (normalised) observations.

        Args:
            observations: one array ``[N, *shape_i]`` per observation (any real dtype; an image with
                a uint8 input should be uint8 already, else it is cast), N >= 1.
            memories: float32 [N, R], each row's recurrent state (required when R > 0, else ignored).

        Returns:
            The raw outputs the action spec needs: ``"mean"``, ``"log_std"`` float32 [N, C] (and gSDE's
            ``"sde_noise_scale"`` [N, L, C] where the artifact has it); ``"logits"`` float32 [N, M] (unmasked).
        """
        n = observations[0].shape[0]
        if self._wide_threads > 1 and n * self._row_values >= WIDE_BATCH_VALUES:
            interp = self._wide_interpreter(n)
        else:
            interp = self._interpreter
            if n != self._batch:
                self._allocate(interp, n)
                self._batch = n
        if n != self._buffer_rows:
            # Normalisation scratch, for vectors only: images go in as they are.
            self._in_buffers = [
                np.empty((n, *shape) if not is_image_shape(shape) else 0, np.float32) for shape in self.observation_shapes
            ]
            self._buffer_rows = n
        for i, (index, obs) in enumerate(zip(self._inputs, observations, strict=True)):
            norm = self._normalizers[i] if self._normalizers is not None else None
            if norm is None:  # no normalisation, or an image: as it came, in the input's dtype
                interp.set_tensor(index, np.ascontiguousarray(obs, self.observation_dtypes[i]))
                continue
            buf = self._in_buffers[i]
            np.subtract(obs, norm.mean, out=buf, casting="unsafe")
            np.multiply(buf, norm.inv_std, out=buf)
            np.clip(buf, -NORMALIZATION_CLIP, NORMALIZATION_CLIP, out=buf)
            interp.set_tensor(index, buf)
        if self.memory_size:
            interp.set_tensor(self._memory_input, np.ascontiguousarray(memories, np.float32))
        interp.invoke()
        return {name: interp.get_tensor(index) for name, index in self._outputs.items()}

    def _allocate(self, interp: Interpreter, n: int) -> None:
        """Sizes ``interp``'s input tensors for ``n`` rows."""
        for index, shape in zip(self._inputs, self.observation_shapes, strict=True):
            interp.resize_tensor_input(index, [n, *shape])
        if self.memory_size:
            interp.resize_tensor_input(self._memory_input, [n, self.memory_size])
        interp.allocate_tensors()

    def _wide_interpreter(self, n: int) -> Interpreter:
        """The ``wide_threads`` interpreter (the same model: the same tensor indices), sized for ``n`` rows."""
        if self._wide is None:
            self._wide = Interpreter(model_content=self._model, num_threads=self._wide_threads)
        if n != self._wide_batch:
            self._allocate(self._wide, n)
            self._wide_batch = n
        return self._wide

    def act(
        self,
        observations: list[np.ndarray],
        action_mask: np.ndarray | None,
        rng: np.random.Generator,
        *,
        check: bool = True,
        noise: np.ndarray | None = None,
        deterministic: bool = False,
        memories: np.ndarray | None = None,
    ) -> ActionOutput:
        """Samples actions for N rows (or, ``deterministic``, takes the distribution's mode).

        Args:
            observations: one array ``[N, *shape_i]`` per observation.
            action_mask: bool/uint8 [N, M], 1 = allowed, or None (everything allowed).
            rng: the random generator for the samples.
            check: validate shapes and mask first (``check_request``); callers that already did,
                per request, pass False.
            noise: float32 [N, C], the standard-normal ``eps`` of the continuous actions (held per agent,
                ``processor.exploration``), or [N, L, C], gSDE's held standard-normal exploration matrices (the
                artifact must have ``SDE_NOISE_SCALE`` of that L), or None to draw ``eps`` from ``rng``.
            deterministic: act with the Gaussian's mean and each branch's arg-max over the allowed options
                (ML-Agents' ``deterministic``); ``noise`` and ``rng`` are unused, and the log-probs are those of
                the actions taken.
            memories: float32 [N, R], each row's recurrent state, for a policy with memory; None or another width
                (states held for another memory size): every row acts from zeros.

        Returns:
            The actions and log-probs (see ``ActionOutput`` for shapes), with this version.

        Raises:
            ProtocolError: (with ``check``) the request does not match the policy's specs.
        """
        n = self.check_request(observations, action_mask) if check else observations[0].shape[0]
        c, b = int(self.action_spec.continuous_size), len(self._branches.slices)
        r = self.memory_size
        if r and (memories is None or memories.shape != (n, r)):
            memories = np.zeros((n, r), np.float32)
        elif not r:
            memories = None
        if n == 0:
            empty_c = np.zeros((0, c), np.float32)
            return ActionOutput(
                empty_c, empty_c, empty_c, np.zeros((0, b), np.int32), np.zeros((0, b), np.float32), self.version,
                memories, memories,
            )  # fmt: skip
        outputs = self.forward(observations, memories)
        if c:
            if deterministic:
                noise = np.zeros_like(outputs[MEAN])  # eps = 0: u is the mean
            elif noise is not None and noise.ndim == 3:
                noise = self._sde_eps(outputs, noise)
            env_actions, actions, log_probs = self._sample_continuous(outputs[MEAN], outputs[LOG_STD], rng, noise)
        else:
            env_actions = actions = log_probs = np.zeros((n, 0), np.float32)
        if b:
            discrete, discrete_log_probs = self._sample_discrete(outputs[LOGITS], action_mask, rng, greedy=deterministic)
        else:
            discrete, discrete_log_probs = np.zeros((n, 0), np.int32), np.zeros((n, 0), np.float32)
        next_memories = outputs[RECURRENT_OUT] if r else None  # get_tensor's own copy
        return ActionOutput(
            env_actions, actions, log_probs, discrete, discrete_log_probs, self.version, memories, next_memories
        )

    def _sde_eps(self, outputs: dict[str, np.ndarray], matrices: np.ndarray) -> np.ndarray:
        """gSDE's noise ``latent(s) @ (sigma * E)`` as a standard-normal ``eps`` [N, C] of the state's Gaussian:
        over its std ``exp(log_std)``; ``matrices`` E [N, L, C]."""
        scale = outputs.get(SDE_NOISE_SCALE)
        if scale is None or scale.shape != matrices.shape:
            have = "no" if scale is None else f"a {list(scale.shape[1:])}"
            raise ProtocolError(
                f"gSDE noise {list(matrices.shape[1:])} per agent, but the policy has {have} {SDE_NOISE_SCALE!r} output "
                "(is use_sde set for both the processor and the trainer?)"
            )
        noise = np.einsum("nlc,nlc->nc", scale, matrices, dtype=np.float32)
        return (noise * np.exp(-outputs[LOG_STD])).astype(np.float32, copy=False)

    def _sample_continuous(
        self, mean: np.ndarray, log_std: np.ndarray, rng: np.random.Generator, noise: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(env actions, stored actions, log-probs), each float32 [N, C]; ``noise`` [N, C]: the eps to use."""
        eps = rng.standard_normal(mean.shape, dtype=np.float32) if noise is None else noise
        u = mean + np.exp(log_std) * eps
        # log N(u; mean, std) = -(u - mean)^2 / (2 std^2) - log std - log(2 pi) / 2, with (u - mean) / std = eps.
        log_probs = -0.5 * eps * eps - log_std - _HALF_LOG_2PI
        if self.tanh_squash:
            squashed = np.tanh(u)
            # Change of variables a = tanh(u): log p(a) = log p(u) - log |da/du|, da/du = 1 - tanh(u)^2.
            # In float64 from the stored float32 a: 1 - a^2 in float32 loses ~3 digits near |a| = 1,
            # and this is exactly what a trainer recomputes from the stored action.
            a64 = squashed.astype(np.float64)
            log_probs -= np.log(1.0 - a64 * a64 + TANH_LOG_EPSILON).astype(np.float32)
            return squashed, squashed, log_probs
        # The trajectory keeps the unclipped sample: clipping is the env's view, not the distribution's.
        return self.env_continuous_actions(u), u, log_probs

    def env_continuous_actions(self, u: np.ndarray) -> np.ndarray:
        """float32 [N, C]: what the env receives for continuous actions ``u`` [N, C] (a sample, or the mean when
        acting greedily): ``tanh(u)`` in squash mode; in clip mode ``clip(u, -clip, clip) / clip``, in [-1, 1] as
        ML-Agents sends it, and ``u`` itself with an infinite clip (neither clipping nor scaling)."""
        if self.tanh_squash:
            return np.tanh(u)
        if np.isinf(self.clip):
            return u
        return np.minimum(np.maximum(u, -self.clip), self.clip) / self.clip

    def _sample_discrete(
        self, logits: np.ndarray, action_mask: np.ndarray | None, rng: np.random.Generator, greedy: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(actions int32 [N, B], log-probs float32 [N, B]) by Gumbel-max, all branches at once; ``greedy``: the
        arg-max of the allowed logits (no noise)."""
        n, m = logits.shape
        if greedy:
            gumbel = np.zeros((n, m), np.float32)
        else:
            # Gumbel noise -log(-log U) from float32 uniforms, U floored above 0 so the noise stays
            # finite: it truncates the Gumbel tails at about -2.9 and +16.6 (probability ~1e-7 in all).
            uniform = rng.random((n, m), dtype=np.float32)
            np.maximum(uniform, _MIN_UNIFORM, out=uniform)
            gumbel = -np.log(-np.log(uniform))
        # scores [N, M + 1]: masked options and the last (padding) column stay -inf, so they never win.
        scores = np.full((n, m + 1), -np.inf, np.float32)
        if action_mask is None:
            masked = logits
            np.add(logits, gumbel, out=scores[:, :m])
        else:
            allowed = action_mask.astype(np.bool_, copy=False)
            masked = np.where(allowed, logits, np.float32(MASKED_LOGIT))
            np.add(logits, gumbel, out=scores[:, :m], where=allowed)
        choice = scores[:, self._branches.padded_columns].argmax(axis=2)  # [N, B, K] -> [N, B]
        # Stable log-softmax normaliser per branch: lse = max + log(sum(exp(x - max))), split by reduceat.
        maxes = np.maximum.reduceat(masked, self._branches.starts, axis=1)
        sums = np.add.reduceat(np.exp(masked - maxes[:, self._branches.branch_of_column]), self._branches.starts, axis=1)
        if self._rows.shape[0] != n:
            self._rows = np.arange(n)[:, None]
        chosen_logits = masked[self._rows, choice + self._branches.starts]
        return choice.astype(np.int32), (chosen_logits - maxes - np.log(sums)).astype(np.float32)
