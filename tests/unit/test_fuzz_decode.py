"""Bad input, fuzzed: well-typed-but-wrong messages straight into the decode and validation functions.

Random bytes mostly die in protobuf parsing, before our code, so the strategies build the protobuf
messages themselves: tensors of any dtype code, shape (negative, huge, more than numpy's 64
dimensions) and byte length; Hellos with any protocol version, names, specs and sizes; BrainInfos
that start valid for drawn BrainParameters and then get a few mutations (a field dropped, retyped,
reshaped, cut short, NaN/Inf, duplicate ids, max_reached without done, masks too wide or with a
branch allowing nothing, an observation too many...); PolicyUpdates with wrong formats, models,
normalisers, clips and action specs. The property everywhere: either a valid result whose arrays
have exactly the declared shapes and dtypes, or a ``StepstreamError`` that ``STATUS_TABLE`` maps to
a status other than INTERNAL/UNKNOWN; never another exception type. A small raw-bytes test covers
what does get through protobuf parsing.

Shapes: ``N`` rows in a BrainInfo, ``M = sum(branches)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import grpc
import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from common.errors import ProtocolError, StepstreamError
from common.specs import ActionSpec, BrainParameters, ObservationSpec
from common.tensors import SUPPORTED_DTYPES, dtype_from_wire, dtype_to_wire, from_tensor, to_tensor
from processor.servicer import status_for
from processor.wire import MAX_ROW_WIDTH, DecodedBrainInfo, decode_brain_info, decode_hello
from protos import PROTOCOL_VERSION, pb

F32 = np.dtype(np.float32)
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
UINT32 = st.integers(0, 2**32 - 1)
NOT_CLEAN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
EXAMPLES = 300
"""Examples per property: the whole file runs in a few seconds on one core."""


def assert_clean(err: StepstreamError) -> None:
    """A refusal the server turns into a clean status."""
    assert status_for(err) not in NOT_CLEAN, f"{type(err).__name__} maps to {status_for(err).name}: {err}"


# -- strategies: tensors -------------------------------------------------------------------------

DTYPE_CODES = st.one_of(st.sampled_from([dtype_to_wire(d) for d in SUPPORTED_DTYPES]), st.sampled_from([0, 13, -1]), INT32)
DIMS = st.one_of(
    st.integers(0, 4),
    st.sampled_from([-1, 2**31, 2**40, 2**62, 2**63 - 1]),
    INT64,
)
SHAPES = st.one_of(
    st.lists(st.integers(0, 4), max_size=4),
    st.lists(DIMS, max_size=4),
    st.lists(st.just(1), min_size=60, max_size=70),  # around numpy's 64 dimensions, with 1 element
    st.lists(st.sampled_from([0, 2**40, 2**62]), min_size=2, max_size=4),  # empty, but too big for numpy
)


@st.composite
def tensors(draw: st.DrawFn) -> pb.Tensor:
    """Any Tensor message; about half have a byte length that matches their dtype and shape."""
    code, shape = draw(DTYPE_CODES), draw(SHAPES)
    try:
        itemsize = dtype_from_wire(code).itemsize
    except ProtocolError:
        itemsize = 1
    size = math.prod(shape) * itemsize if all(d >= 0 for d in shape) else -1
    if 0 <= size <= 256 and draw(st.booleans()):
        data = draw(st.binary(min_size=size, max_size=size))
    else:
        data = draw(st.binary(max_size=32))
    return pb.Tensor(dtype=code, shape=shape, data=data)  # type: ignore[arg-type]


@settings(max_examples=EXAMPLES)
@given(tensors())
def test_from_tensor_gives_the_declared_array_or_a_protocol_error(msg: pb.Tensor) -> None:
    try:
        arr = from_tensor(msg, "fuzzed")
    except ProtocolError as err:
        assert_clean(err)
        return
    assert arr.shape == tuple(msg.shape)
    assert arr.dtype == dtype_from_wire(msg.dtype)
    assert arr.nbytes == len(msg.data)


@pytest.mark.parametrize(
    "shape",
    [[1] * 65, [0, 2**62, 2**62], [0, 2**63 - 1]],
    ids=["65_dimensions", "empty_but_too_big", "empty_with_int64_max"],
)
def test_from_tensor_refuses_shapes_numpy_cannot_hold(shape: list[int]) -> None:
    """Regression (found by the fuzzer): these raised numpy's ValueError, which the server answers UNKNOWN."""
    msg = pb.Tensor(dtype=pb.FLOAT32, shape=shape, data=b"\0" * 4 * math.prod(shape))
    with pytest.raises(ProtocolError, match="is not a valid array shape"):
        from_tensor(msg, "observations[0]")


# -- strategies: Hello ---------------------------------------------------------------------------

NAMES = st.one_of(st.sampled_from(["", "Walker", "Gridder"]), st.text(max_size=6))
SIZES = st.one_of(st.integers(-2, 6), st.sampled_from([MAX_ROW_WIDTH, MAX_ROW_WIDTH + 1, 2**31 - 1]), INT32)


@st.composite
def observation_spec_protos(draw: st.DrawFn) -> pb.ObservationSpec:
    if draw(st.booleans()):  # a valid vector spec
        shape, code = [draw(st.integers(1, 6))], int(pb.FLOAT32)
    else:
        shape, code = draw(st.lists(st.one_of(st.integers(-2, 6), DIMS), max_size=4)), draw(DTYPE_CODES)
    return pb.ObservationSpec(shape=shape, dtype=code, name=draw(st.text(max_size=3)))  # type: ignore[arg-type]


@st.composite
def brain_parameter_protos(draw: st.DrawFn) -> pb.BrainParameters:
    msg = pb.BrainParameters(behavior_name=draw(NAMES))
    msg.observation_specs.extend(draw(st.lists(observation_spec_protos(), max_size=3)))
    msg.action_spec.continuous_size = draw(SIZES)
    msg.action_spec.discrete_branches.extend(draw(st.lists(SIZES, max_size=4)))
    return msg


@st.composite
def hellos(draw: st.DrawFn) -> pb.Hello:
    msg = pb.Hello(
        protocol_version=draw(st.one_of(st.just(PROTOCOL_VERSION), UINT32)),
        client_id=draw(st.one_of(st.just("env-0"), st.text(max_size=4))),
    )
    params = draw(st.lists(brain_parameter_protos(), max_size=3))
    twice = draw(st.booleans())
    if params and twice:
        params.append(params[draw(st.integers(0, len(params) - 1))])  # a behavior declared twice
    msg.brain_parameters.extend(params)
    return msg


def assert_valid_params(params: BrainParameters) -> None:
    assert params.behavior_name
    assert params.observation_specs
    for spec in params.observation_specs:
        assert len(spec.shape) == 1 and spec.shape[0] >= 1 and spec.dtype == F32
    assert sum(math.prod(s.shape) for s in params.observation_specs) <= MAX_ROW_WIDTH
    action = params.action_spec
    assert 0 <= action.continuous_size <= MAX_ROW_WIDTH and action.mask_width <= MAX_ROW_WIDTH
    assert all(b >= 1 for b in action.discrete_branches) and (action.continuous_size or action.discrete_branches)


@settings(max_examples=EXAMPLES)
@given(hellos())
def test_decode_hello_gives_valid_declarations_or_a_clean_error(msg: pb.Hello) -> None:
    try:
        hello = decode_hello(msg)
    except StepstreamError as err:
        assert_clean(err)
        return
    assert msg.protocol_version == PROTOCOL_VERSION
    assert hello.client_id == msg.client_id != ""
    names = [p.behavior_name for p in hello.brain_parameters]
    assert names and len(set(names)) == len(names)
    for params in hello.brain_parameters:
        assert_valid_params(params)


@pytest.mark.parametrize(
    "params",
    [
        BrainParameters("Wide", (ObservationSpec((2**40,), F32),), ActionSpec(1)),
        BrainParameters("Wide", (ObservationSpec((MAX_ROW_WIDTH,), F32), ObservationSpec((1,), F32)), ActionSpec(1)),
        BrainParameters("Wide", (ObservationSpec((4,), F32),), ActionSpec(2**31 - 1)),
        BrainParameters("Wide", (ObservationSpec((4,), F32),), ActionSpec(0, (2**31 - 1,))),
        BrainParameters("Wide", (ObservationSpec((4,), F32),), ActionSpec(0, (MAX_ROW_WIDTH, 1))),
    ],
    ids=["huge_observation", "observations_together_too_wide", "huge_continuous", "huge_branch", "branches_together_too_wide"],
)
def test_decode_hello_refuses_rows_wider_than_the_limit(params: BrainParameters) -> None:
    """Regression (found by the fuzzer): such a Hello got through, and the processor's per-agent buffers
    then failed to allocate at session open, which the server answered UNKNOWN."""
    msg = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[params.to_proto()])
    with pytest.raises(ProtocolError, match=f"behavior 'Wide' declares .* per agent; at most {MAX_ROW_WIDTH}"):
        decode_hello(msg)


def test_decode_hello_accepts_rows_as_wide_as_the_limit() -> None:
    params = BrainParameters("Wide", (ObservationSpec((MAX_ROW_WIDTH,), F32),), ActionSpec(MAX_ROW_WIDTH, (MAX_ROW_WIDTH,)))
    msg = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[params.to_proto()])
    assert decode_hello(msg).brain_parameters == (params,)


# -- strategies: BrainInfo -----------------------------------------------------------------------


@st.composite
def valid_params(draw: st.DrawFn) -> BrainParameters:
    specs = tuple(ObservationSpec((draw(st.integers(1, 4)),), F32) for _ in range(draw(st.integers(1, 3))))
    branches = tuple(draw(st.lists(st.integers(1, 4), min_size=draw(st.sampled_from([1, 0])), max_size=3)))
    continuous = draw(st.integers(0 if branches else 1, 3))
    return BrainParameters("Fuzzed", specs, ActionSpec(continuous, branches))


FINITE_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def valid_brain_infos(draw: st.DrawFn, params: BrainParameters) -> pb.BrainInfo:
    """A BrainInfo that decodes: unique ids, finite values, max_reached only with done, every branch allowing something."""
    n = draw(st.one_of(st.integers(1, 5), st.just(0)))
    msg = pb.BrainInfo(behavior_name=params.behavior_name)
    ids = draw(st.lists(st.one_of(INT32, INT64), min_size=n, max_size=n, unique=True))
    narrow = all(-(2**31) <= a < 2**31 for a in ids) and draw(st.booleans())
    to_tensor(np.array(ids, np.int32 if narrow else np.int64), msg.agent_ids)
    for spec in params.observation_specs:
        to_tensor(draw(hnp.arrays(F32, (n, *spec.shape), elements=FINITE_F32)), msg.observations.add())
    to_tensor(draw(hnp.arrays(F32, (n,), elements=FINITE_F32)), msg.rewards)
    done = draw(hnp.arrays(np.bool_, (n,)))
    to_tensor(done, msg.done)
    to_tensor(done & draw(hnp.arrays(np.bool_, (n,))), msg.max_reached)
    action = params.action_spec
    if draw(st.booleans()):
        mask = draw(hnp.arrays(np.bool_, (n, action.mask_width)))
        start = 0
        for size in action.discrete_branches:
            empty = ~mask[:, start : start + size].any(axis=1)
            mask[empty, start + draw(st.integers(0, size - 1))] = True
            start += size
        to_tensor(mask.astype(draw(st.sampled_from([np.bool_, np.uint8, np.float32]))), msg.action_mask)
    return msg


Mutation = Callable[[st.DrawFn, pb.BrainInfo, BrainParameters], None]
TENSOR_FIELDS = ("action_mask", "max_reached", "done", "rewards", "agent_ids")


def _array(tensor: pb.Tensor) -> np.ndarray | None:
    """The tensor's array, or None when an earlier mutation made it undecodable."""
    try:
        return from_tensor(tensor)
    except ProtocolError:
        return None


def _some_tensor(draw: st.DrawFn, msg: pb.BrainInfo) -> pb.Tensor:
    """One of ``msg``'s tensors (an observation or a set field)."""
    choices = [f"obs{i}" for i in range(len(msg.observations))] + [f for f in TENSOR_FIELDS if msg.HasField(f)]
    name = draw(st.sampled_from(choices))
    return msg.observations[int(name[3:])] if name.startswith("obs") else getattr(msg, name)


def drop_field(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    name = draw(st.sampled_from(["observations", *TENSOR_FIELDS]))
    if name == "observations" and msg.observations:
        del msg.observations[draw(st.integers(0, len(msg.observations) - 1))]
    else:
        msg.ClearField(name)  # type: ignore[arg-type]


def add_observation(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    again = draw(st.booleans())
    msg.observations.append(msg.observations[0] if msg.observations and again else draw(tensors()))


def replace_tensor(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    _some_tensor(draw, msg).CopyFrom(draw(tensors()))


def retype(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    """The same values in another dtype (float ids, float64 obs, int rewards, float done...)."""
    tensor = _some_tensor(draw, msg)
    arr = _array(tensor)
    if arr is not None:
        with np.errstate(all="ignore"):
            to_tensor(arr.astype(draw(st.sampled_from(SUPPORTED_DTYPES))), tensor)


def reshape(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    """Another shape: the same bytes reinterpreted ([N] <-> [N, 1], flattened, transposed) or resized."""
    tensor = _some_tensor(draw, msg)
    how = draw(st.sampled_from(["dims", "unsqueeze", "flatten", "reverse", "scalar", "rows"]))
    arr = _array(tensor)
    if how == "dims":
        tensor.shape[:] = draw(st.lists(DIMS, max_size=3))
    elif arr is None:
        return
    elif how == "unsqueeze":
        tensor.shape[:] = [*arr.shape, 1]
    elif how == "flatten":
        tensor.shape[:] = [arr.size]
    elif how == "reverse":
        tensor.shape[:] = arr.shape[::-1]
    elif how == "scalar":
        to_tensor(arr.reshape(-1)[:1].reshape(()) if arr.size else np.zeros((), np.float32), tensor)
    elif arr.ndim:  # one row more or less, bytes to match
        to_tensor(np.concatenate([arr, arr[:1]]) if draw(st.booleans()) else arr[1:], tensor)


def cut_bytes(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    tensor = _some_tensor(draw, msg)
    tensor.data = (
        tensor.data[:-1] if tensor.data and draw(st.booleans()) else tensor.data + draw(st.binary(min_size=1, max_size=3))
    )


def bad_value(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    """NaN, +-Inf, or a huge finite value (its sum overflows) in an observation or the rewards."""
    tensor = draw(st.sampled_from([*msg.observations, msg.rewards]))
    arr = _array(tensor)
    if arr is None or not arr.size or arr.dtype != F32:
        return
    arr = arr.copy()
    value = draw(st.sampled_from([np.nan, np.inf, -np.inf, 3e38, -3e38]))
    arr.reshape(-1)[draw(st.integers(0, arr.size - 1))] = value
    if value == 3e38:
        arr.reshape(-1)[:] = value
    to_tensor(arr, tensor)


def duplicate_id(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    ids = _array(msg.agent_ids)
    if ids is not None and ids.ndim == 1 and len(ids) >= 2:
        ids = ids.copy()
        i, j = draw(st.lists(st.integers(0, len(ids) - 1), min_size=2, max_size=2, unique=True))
        ids[j] = ids[i]
        to_tensor(ids, msg.agent_ids)


def flip_flags(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    """max_reached set where done is not, or bool bytes other than 0 and 1 (those still mean True)."""
    field = draw(st.sampled_from(["max_reached", "done"]))
    tensor = getattr(msg, field)
    if tensor.data:
        data = bytearray(tensor.data)
        data[draw(st.integers(0, len(data) - 1))] = draw(st.sampled_from([0, 1, 2, 255]))
        tensor.data = bytes(data)


def break_mask(draw: st.DrawFn, msg: pb.BrainInfo, params: BrainParameters) -> None:
    """A mask one column too wide or narrow, or one branch of one row allowing nothing."""
    spec = params.action_spec
    n = len(msg.rewards.data) // 4
    if not msg.HasField("action_mask"):
        to_tensor(np.ones((n, spec.mask_width), np.bool_), msg.action_mask)
    mask = _array(msg.action_mask)
    if mask is None or mask.ndim != 2:
        return
    how = draw(st.sampled_from(["empty_branch", "wider", "narrower"]))
    if how == "wider":
        to_tensor(np.concatenate([mask, np.ones((len(mask), 1), mask.dtype)], axis=1), msg.action_mask)
    elif how == "narrower" and mask.shape[1]:
        to_tensor(mask[:, 1:], msg.action_mask)
    elif len(mask) and spec.discrete_branches:
        mask = mask.copy()
        b = draw(st.integers(0, spec.num_branches - 1))
        start = sum(spec.discrete_branches[:b])
        mask[draw(st.integers(0, len(mask) - 1)), start : start + spec.discrete_branches[b]] = 0
        to_tensor(mask, msg.action_mask)


MUTATIONS: tuple[Mutation, ...] = (
    *(bad_value, break_mask, flip_flags, duplicate_id, retype, reshape),
    *(cut_bytes, replace_tensor, add_observation, drop_field),
)
"""In the order Hypothesis favours (first) when drawing: the subtler mistakes first; a damaged agent_ids
tensor, checked first, would hide everything else."""


@st.composite
def mutated_brain_infos(draw: st.DrawFn) -> tuple[pb.BrainInfo, BrainParameters]:
    params = draw(valid_params())
    msg = draw(valid_brain_infos(params))
    for mutation in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        mutation(draw, msg, params)
    return msg, params


def assert_valid_decode(info: DecodedBrainInfo, params: BrainParameters) -> None:
    """Every array has exactly its declared shape and dtype, and the documented invariants hold."""
    n = info.num_agents
    assert info.agent_ids.dtype == np.int64 and info.agent_ids.shape == (n,)
    assert len(np.unique(info.agent_ids)) == n
    assert len(info.observations) == len(params.observation_specs)
    for obs, spec in zip(info.observations, params.observation_specs, strict=True):
        assert obs.dtype == F32 and obs.shape == (n, *spec.shape) and np.isfinite(obs).all()
    assert info.rewards.dtype == F32 and info.rewards.shape == (n,) and np.isfinite(info.rewards).all()
    for flags in (info.done, info.max_reached):
        assert flags.dtype == np.bool_ and flags.shape == (n,)
    assert not (info.max_reached & ~info.done).any()
    action = params.action_spec
    if info.action_mask is not None:
        assert action.num_branches
        assert info.action_mask.dtype == np.bool_ and info.action_mask.shape == (n, action.mask_width)
        for branch in np.split(info.action_mask, np.cumsum(action.discrete_branches)[:-1], axis=1):
            assert branch.any(axis=1).all()


@st.composite
def params_and_valid_infos(draw: st.DrawFn) -> tuple[pb.BrainInfo, BrainParameters]:
    params = draw(valid_params())
    return draw(valid_brain_infos(params)), params


@settings(max_examples=EXAMPLES // 3)
@given(params_and_valid_infos())
def test_the_unmutated_brain_infos_decode(case: tuple[pb.BrainInfo, BrainParameters]) -> None:
    """The fuzzer's starting point is valid, so a refusal below is the mutation's doing."""
    msg, params = case
    info = decode_brain_info(msg, params)
    assert_valid_decode(info, params)
    np.testing.assert_array_equal(info.agent_ids, from_tensor(msg.agent_ids))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=EXAMPLES * 2)
@given(mutated_brain_infos())
def test_decode_brain_info_gives_declared_arrays_or_a_clean_error(case: tuple[pb.BrainInfo, BrainParameters]) -> None:
    msg, params = case
    try:
        info = decode_brain_info(msg, params, session="fuzz")
    except StepstreamError as err:
        assert_clean(err)
        assert "behavior 'Fuzzed' (session fuzz)" in str(err)
        return
    assert_valid_decode(info, params)


# -- raw bytes -----------------------------------------------------------------------------------


def _valid_step_requests() -> list[bytes]:
    params = BrainParameters("Gridder", (ObservationSpec((3,), F32),), ActionSpec(1, (3, 2)))
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[params.to_proto()])
    info = pb.BrainInfo(behavior_name="Gridder")
    to_tensor(np.array([7, 3], np.int64), info.agent_ids)
    to_tensor(np.ones((2, 3), np.float32), info.observations.add())
    to_tensor(np.array([0.5, 1.0], np.float32), info.rewards)
    to_tensor(np.array([False, True]), info.done)
    to_tensor(np.array([False, True]), info.max_reached)
    to_tensor(np.ones((2, 5), np.uint8), info.action_mask)
    return [pb.StepRequest(hello=hello).SerializeToString(), pb.StepRequest(brain_info=info).SerializeToString()]


VALID_REQUESTS = _valid_step_requests()
RAW_PARAMS = BrainParameters("Gridder", (ObservationSpec((3,), F32),), ActionSpec(1, (3, 2)))


@st.composite
def raw_step_requests(draw: st.DrawFn) -> bytes:
    """Random bytes, or a valid request's bytes with a few bytes overwritten, inserted or cut."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=128))
    data = bytearray(draw(st.sampled_from(VALID_REQUESTS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(["set", "insert", "cut"]))
        if how == "set":
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at:]
        if not data:
            break
    return bytes(data)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=EXAMPLES)
@given(raw_step_requests())
def test_raw_bytes_fail_in_parsing_or_decode_cleanly(data: bytes) -> None:
    try:
        request = pb.StepRequest.FromString(data)
    except DecodeError:
        return
    try:
        if request.WhichOneof("payload") == "hello":
            for params in decode_hello(request.hello).brain_parameters:
                assert_valid_params(params)
        elif request.WhichOneof("payload") == "brain_info":
            assert_valid_decode(decode_brain_info(request.brain_info, RAW_PARAMS), RAW_PARAMS)
    except StepstreamError as err:
        assert_clean(err)
