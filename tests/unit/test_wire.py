"""decode_hello / decode_brain_info: a good message decodes; each bad one raises the right error type
with a message that names the field, the agent (where there is one) and the behavior.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from common.demo_images import DemoFormatError, decode_hwc, encode_pngs
from common.errors import IncompatibleVersionError, ProtocolError
from common.specs import ActionSpec, BrainInfoSize, BrainParameters, ObservationSpec
from common.tensors import to_png_tensor, to_tensor
from common.topics.grpc_transport import MAX_MESSAGE_BYTES
from common.trajectory import Trajectory, TrajectoryId
from processor.wire import (
    MAX_CLIENT_ID_BYTES,
    MAX_FRAME_BYTES,
    MAX_ROW_WIDTH,
    MAX_TRAJECTORY_BYTES,
    TrajectorySize,
    check_trajectory_fits,
    decode_brain_info,
    decode_hello,
)
from protos import PROTOCOL_VERSION, pb

PARAMS = BrainParameters("Gridder", (ObservationSpec((3,), np.dtype(np.float32)),), ActionSpec(1, (3, 2)))
"""Observations float32 [N, 3]; actions: 1 continuous + branches (3, 2), so masks are [N, 5]."""

IDS = np.array([7, 3, 11], dtype=np.int64)
OBS = np.arange(9, dtype=np.float32).reshape(3, 3) / 4
REWARDS = np.array([0.5, -1.0, 2.0], dtype=np.float32)
DONE = np.array([False, True, True])
MAX_REACHED = np.array([False, False, True])
MASK = np.array([[1, 0, 1, 1, 0], [0, 1, 0, 1, 1], [1, 1, 1, 0, 1]], dtype=np.uint8)


def good_brain_info() -> pb.BrainInfo:
    """Three agents (ids 7, 3, 11) of PARAMS; agent 3 terminated, agent 11 truncated."""
    msg = pb.BrainInfo(behavior_name=PARAMS.behavior_name)
    to_tensor(IDS, msg.agent_ids)
    to_tensor(OBS, msg.observations.add())
    to_tensor(REWARDS, msg.rewards)
    to_tensor(DONE, msg.done)
    to_tensor(MAX_REACHED, msg.max_reached)
    to_tensor(MASK, msg.action_mask)
    return msg


def good_hello() -> pb.Hello:
    return pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[PARAMS.to_proto()])


# -- good messages -------------------------------------------------------------------------------


def test_good_brain_info_decodes_to_the_arrays_sent() -> None:
    info = decode_brain_info(good_brain_info(), PARAMS, session="sess-1")

    assert info.behavior_name == "Gridder"
    assert info.num_agents == 3
    np.testing.assert_array_equal(info.agent_ids, IDS, strict=True)
    assert len(info.observations) == 1
    np.testing.assert_array_equal(info.observations[0], OBS, strict=True)
    np.testing.assert_array_equal(info.rewards, REWARDS, strict=True)
    np.testing.assert_array_equal(info.done, DONE, strict=True)
    np.testing.assert_array_equal(info.max_reached, MAX_REACHED, strict=True)
    assert info.action_mask is not None
    np.testing.assert_array_equal(info.action_mask, MASK.astype(bool), strict=True)


def test_good_brain_info_normalises_dtypes() -> None:
    """int32 ids become int64, float64 rewards float32, a bool mask stays bool; no mask decodes to None."""
    msg = good_brain_info()
    to_tensor(IDS.astype(np.int32), msg.agent_ids)
    to_tensor(REWARDS.astype(np.float64), msg.rewards)
    msg.ClearField("action_mask")

    info = decode_brain_info(msg, PARAMS)

    np.testing.assert_array_equal(info.agent_ids, IDS, strict=True)
    np.testing.assert_array_equal(info.rewards, REWARDS, strict=True)
    assert info.action_mask is None


def test_no_agents_is_a_valid_step() -> None:
    """A behavior with no agent deciding this step sends an empty BrainInfo (as ML-Agents may)."""
    msg = pb.BrainInfo(behavior_name="Gridder")
    to_tensor(np.zeros(0, np.int64), msg.agent_ids)
    to_tensor(np.zeros((0, 3), np.float32), msg.observations.add())
    to_tensor(np.zeros(0, np.float32), msg.rewards)
    to_tensor(np.zeros(0, bool), msg.done)
    to_tensor(np.zeros(0, bool), msg.max_reached)

    assert decode_brain_info(msg, PARAMS).num_agents == 0


def test_good_hello_decodes() -> None:
    hello = decode_hello(good_hello())

    assert hello.client_id == "env-0"
    assert hello.brain_parameters == (PARAMS,)


# -- bad BrainInfos ------------------------------------------------------------------------------


Spoil = Callable[[pb.BrainInfo], object]
"""Changes a good BrainInfo in place (any return value is ignored)."""


@dataclass(frozen=True)
class Bad:
    """A good message spoiled by ``spoil``; decoding raises ``error`` naming each of ``named``."""

    name: str
    spoil: Spoil
    error: type[Exception]
    named: tuple[str, ...]


def _set(field: str, array: np.ndarray) -> Spoil:
    return lambda msg: to_tensor(array, getattr(msg, field))


def _set_obs(array: np.ndarray) -> Spoil:
    return lambda msg: to_tensor(array, msg.observations[0])


def _with(base: np.ndarray, index: tuple[int, ...], value: float | int | bool) -> np.ndarray:
    out = base.copy()
    out[index] = value
    return out


def _clear(field: str) -> Spoil:
    return lambda msg: msg.ClearField(field)  # type: ignore[arg-type]


def _truncate(field: str) -> Spoil:
    def spoil(msg: pb.BrainInfo) -> None:
        tensor = getattr(msg, field) if field != "observations[0]" else msg.observations[0]
        tensor.data = tensor.data[:-1]

    return spoil


BEHAVIOR = "behavior 'Gridder'"

BAD_BRAIN_INFOS: tuple[Bad, ...] = (
    # Tensors whose bytes do not match their shape and dtype.
    Bad("rewards_bytes_short", _truncate("rewards"), ProtocolError, (BEHAVIOR, "rewards", "bytes")),
    Bad("obs_bytes_short", _truncate("observations[0]"), ProtocolError, (BEHAVIOR, "observations[0]", "bytes")),
    Bad("agent_ids_bytes_short", _truncate("agent_ids"), ProtocolError, (BEHAVIOR, "agent_ids", "bytes")),
    # Observations against BrainParameters.
    Bad(
        "obs_count",
        lambda msg: to_tensor(OBS, msg.observations.add()),
        ProtocolError,
        (BEHAVIOR, "2 observations sent", "declare 1"),
    ),
    Bad("obs_missing", _clear("observations"), ProtocolError, (BEHAVIOR, "0 observations sent")),
    Bad("obs_shape", _set_obs(np.zeros((3, 4), np.float32)), ProtocolError, (BEHAVIOR, "observations[0]", "[3, 4]", "[3, 3]")),
    Bad("obs_rows", _set_obs(np.zeros((2, 3), np.float32)), ProtocolError, (BEHAVIOR, "observations[0]", "[2, 3]", "[3, 3]")),
    Bad("obs_dtype", _set_obs(OBS.astype(np.float64)), ProtocolError, (BEHAVIOR, "observations[0]", "float64", "float32")),
    # Non-finite values: the message names the agent.
    Bad("obs_nan", _set_obs(_with(OBS, (1, 2), np.nan)), ProtocolError, (BEHAVIOR, "observations[0]", "agent 3", "NaN")),
    Bad("obs_inf", _set_obs(_with(OBS, (2, 0), -np.inf)), ProtocolError, (BEHAVIOR, "observations[0]", "agent 11", "Inf")),
    Bad("reward_nan", _set("rewards", _with(REWARDS, (0,), np.nan)), ProtocolError, (BEHAVIOR, "rewards", "agent 7")),
    Bad("reward_inf", _set("rewards", _with(REWARDS, (2,), np.inf)), ProtocolError, (BEHAVIOR, "rewards", "agent 11")),
    # Agent ids.
    Bad(
        "duplicate_agent_ids",
        _set("agent_ids", np.array([7, 3, 7], np.int64)),
        ProtocolError,
        (BEHAVIOR, "duplicate agent ids [7]"),
    ),
    Bad("agent_ids_float", _set("agent_ids", IDS.astype(np.float32)), ProtocolError, (BEHAVIOR, "agent_ids", "float32")),
    Bad("agent_ids_matrix", _set("agent_ids", IDS.reshape(3, 1)), ProtocolError, (BEHAVIOR, "agent_ids", "[3, 1]")),
    # Per-agent vectors of the wrong length or kind.
    Bad("rewards_length", _set("rewards", REWARDS[:2]), ProtocolError, (BEHAVIOR, "rewards", "[3]", "[2]")),
    Bad("rewards_int", _set("rewards", np.array([1, 2, 3], np.int32)), ProtocolError, (BEHAVIOR, "rewards", "int32")),
    Bad("done_float", _set("done", DONE.astype(np.float32)), ProtocolError, (BEHAVIOR, "done", "float32")),
    # Action masks.
    Bad("mask_width", _set("action_mask", MASK[:, :4]), ProtocolError, (BEHAVIOR, "action_mask", "[3, 5]", "[3, 4]")),
    Bad("mask_rows", _set("action_mask", MASK[:2]), ProtocolError, (BEHAVIOR, "action_mask", "[3, 5]", "[2, 5]")),
    Bad(
        "mask_branch_empty",
        _set("action_mask", _with(_with(MASK, (2, 3), 0), (2, 4), 0)),  # agent 11: branch 1 (columns 3-4) all 0
        ProtocolError,
        (BEHAVIOR, "action_mask", "branch 1", "agent 11"),
    ),
    # max_reached comes only with done.
    Bad(
        "max_reached_without_done",
        _set("max_reached", np.array([True, False, True])),
        ProtocolError,
        (BEHAVIOR, "max_reached", "agent 7"),
    ),
    # Missing fields.
    *(
        Bad(f"missing_{field}", _clear(field), ProtocolError, (BEHAVIOR, f"'{field}' is missing"))
        for field in ("agent_ids", "rewards", "done", "max_reached")
    ),
)


@pytest.mark.parametrize("bad", BAD_BRAIN_INFOS, ids=[b.name for b in BAD_BRAIN_INFOS])
def test_bad_brain_info_is_refused(bad: Bad) -> None:
    msg = good_brain_info()
    bad.spoil(msg)

    with pytest.raises(ProtocolError) as caught:
        decode_brain_info(msg, PARAMS)

    assert caught.type is bad.error
    for word in bad.named:
        assert word in str(caught.value), f"{word!r} not in {str(caught.value)!r}"


def test_brain_info_error_names_the_session() -> None:
    msg = good_brain_info()
    msg.ClearField("done")

    with pytest.raises(ProtocolError, match=r"behavior 'Gridder' \(session sess-9\)"):
        decode_brain_info(msg, PARAMS, session="sess-9")


def test_unknown_dtype_names_the_field() -> None:
    msg = good_brain_info()
    msg.rewards.dtype = 99  # type: ignore[assignment]

    with pytest.raises(ProtocolError, match="rewards"):
        decode_brain_info(msg, PARAMS)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_float64_reward_beyond_float32_range_is_refused() -> None:
    msg = good_brain_info()
    to_tensor(np.array([0.5, 1e300, 2.0]), msg.rewards)

    with pytest.raises(ProtocolError, match="agent 3"):
        decode_brain_info(msg, PARAMS)


# -- bad Hellos ----------------------------------------------------------------------------------


def _spec(shape: tuple[int, ...], dtype: int = pb.FLOAT32) -> pb.ObservationSpec:
    return pb.ObservationSpec(shape=shape, dtype=dtype)  # type: ignore[arg-type]


def _hello_with(**changes: object) -> Callable[[pb.Hello], None]:
    """Spoil the Hello's one BrainParameters: set ``behavior_name``, ``observation_specs`` or ``branches``."""

    def spoil(msg: pb.Hello) -> None:
        bp = msg.brain_parameters[0]
        if "behavior_name" in changes:
            bp.behavior_name = str(changes["behavior_name"])
        if "observation_specs" in changes:
            del bp.observation_specs[:]
            bp.observation_specs.extend(changes["observation_specs"])  # type: ignore[arg-type]
        if "branches" in changes:
            del bp.action_spec.discrete_branches[:]
            bp.action_spec.discrete_branches.extend(changes["branches"])  # type: ignore[arg-type]

    return spoil


BAD_HELLOS: tuple[tuple[str, Callable[[pb.Hello], None], type[Exception], tuple[str, ...]], ...] = (
    (
        "protocol_version",
        lambda msg: setattr(msg, "protocol_version", PROTOCOL_VERSION + 1),
        IncompatibleVersionError,
        (f"protocol version {PROTOCOL_VERSION + 1}", f"speaks {PROTOCOL_VERSION}"),
    ),
    ("empty_client_id", lambda msg: setattr(msg, "client_id", ""), ProtocolError, ("client_id",)),
    ("no_behaviors", lambda msg: msg.ClearField("brain_parameters"), ProtocolError, ("env-0", "no behaviors")),
    (
        "rank_2_observation",
        _hello_with(observation_specs=[_spec((4, 4))]),
        ProtocolError,
        ("behavior 'Gridder'", "observation_specs[0].shape [4, 4]", "[H, W, C]"),
    ),
    (
        "rank_4_observation",
        _hello_with(observation_specs=[_spec((2, 4, 4, 3), pb.UINT8)]),
        ProtocolError,
        ("behavior 'Gridder'", "observation_specs[0].shape [2, 4, 4, 3]"),
    ),
    (
        "image_with_a_zero_dimension",
        _hello_with(observation_specs=[_spec((84, 0, 3), pb.UINT8)]),
        ProtocolError,
        ("behavior 'Gridder'", "observation_specs[0].shape [84, 0, 3]", "positive"),
    ),
    (
        "uint16_image",
        _hello_with(observation_specs=[_spec((8, 8, 3), pb.UINT16)]),
        ProtocolError,
        ("behavior 'Gridder'", "observation_specs[0].dtype uint16", "uint8 or float32", "[8, 8, 3]"),
    ),
    (
        "images_over_the_frame_cap",
        _hello_with(observation_specs=[_spec((3,)), _spec((400, 400, 3), pb.UINT8), _spec((400, 400, 1), pb.FLOAT32)]),
        ProtocolError,
        (
            "behavior 'Gridder'",
            "images of 1,120,000 bytes per agent",
            "observation_specs[2] float32 [400, 400, 1]",
            "at most 1,048,576",
        ),
    ),
    (
        "uint8_vector",
        _hello_with(observation_specs=[_spec((4,), pb.UINT8)]),
        ProtocolError,
        ("behavior 'Gridder'", "observation_specs[0].dtype", "uint8"),
    ),
    ("no_observations", _hello_with(observation_specs=[]), ProtocolError, ("behavior 'Gridder'", "no observation specs")),
    ("empty_behavior_name", _hello_with(behavior_name=""), ProtocolError, ("behavior_name",)),
    ("empty_branch", _hello_with(branches=[3, 0]), ProtocolError, ("behavior 'Gridder'", "discrete_branches[1]")),
    (
        "duplicate_behavior",
        lambda msg: msg.brain_parameters.append(PARAMS.to_proto()),
        ProtocolError,
        ("env-0", "twice", "Gridder"),
    ),
)


@pytest.mark.parametrize(("spoil", "error", "named"), [h[1:] for h in BAD_HELLOS], ids=[h[0] for h in BAD_HELLOS])
def test_bad_hello_is_refused(spoil: Callable[[pb.Hello], None], error: type[Exception], named: tuple[str, ...]) -> None:
    msg = good_hello()
    spoil(msg)

    with pytest.raises(ProtocolError) as caught:
        decode_hello(msg)

    assert caught.type is error
    for word in named:
        assert word in str(caught.value), f"{word!r} not in {str(caught.value)!r}"


def test_version_mismatch_is_a_failed_precondition() -> None:
    """A well-formed Hello from another protocol version: FAILED_PRECONDITION, not INVALID_ARGUMENT."""
    msg = good_hello()
    msg.protocol_version = PROTOCOL_VERSION + 1

    with pytest.raises(IncompatibleVersionError) as caught:
        decode_hello(msg)

    assert caught.value.precondition


def _largest_trajectory(params: BrainParameters, steps: int) -> pb.DeliveryBatch:
    """A DeliveryBatch of one trajectory of ``params`` at its largest: the longest session id and ids, every field set."""
    spec = params.action_spec
    c, b, m = spec.continuous_size, spec.num_branches, spec.mask_width
    trajectory = Trajectory(
        id=TrajectoryId("c" * MAX_CLIENT_ID_BYTES + "-0123456789ab", agent_id=-(2**63), sequence=2**63 - 1),
        behavior_name=params.behavior_name,
        obs=[np.ones((steps, *s.shape), s.dtype) for s in params.observation_specs],
        next_obs=[np.ones(s.shape, s.dtype) for s in params.observation_specs],
        continuous_actions=np.ones((steps, c), np.float32),
        discrete_actions=np.ones((steps, b), np.int32),
        continuous_log_probs=np.ones((steps, c), np.float32),
        discrete_log_probs=np.ones((steps, b), np.float32),
        prev_continuous_actions=np.ones((steps, c), np.float32),
        prev_discrete_actions=np.ones((steps, b), np.int32),
        action_mask=np.ones((steps, m), bool) if b else None,
        rewards=np.ones(steps, np.float32),
        done=np.ones(steps, bool),
        policy_versions=np.full(steps, 2**62, np.int64),
        done_reached=True,
        interrupted=True,
        episode_reward=-1e300,
        episode_length=2**62,
    )
    batch = pb.DeliveryBatch()
    batch.deliveries.add(delivery_tag=2**64 - 1, trajectory=trajectory.to_proto())
    return batch


@pytest.mark.parametrize(
    "params",
    [
        PARAMS,
        BrainParameters("W" * 256, (ObservationSpec((1 << 16,), np.dtype(np.float32)),), ActionSpec(2)),
        BrainParameters(
            "Many", tuple(ObservationSpec((1,), np.dtype(np.float32)) for _ in range(40)), ActionSpec(0, (2,) * 30)
        ),
    ],
    ids=["gridder", "widest_obs", "many_specs_and_branches"],
)
def test_trajectory_size_bounds_the_encoded_delivery(params: BrainParameters) -> None:
    size = TrajectorySize.of(params)
    for steps in (1, 2, 63):
        encoded = _largest_trajectory(params, steps).ByteSize()
        assert encoded <= size.at_most(steps), f"T={steps}: {encoded} > bound {size.at_most(steps)}"
        assert size.at_most(steps) - encoded < 4096, "the bound is far too loose"


def test_a_declaration_whose_trajectory_cannot_fit_names_the_numbers() -> None:
    wide = BrainParameters("Wide", (ObservationSpec((1 << 16,), np.dtype(np.float32)),), ActionSpec(2))
    limit = 16 * 1024 * 1024
    longest = TrajectorySize.of(wide).longest_within(limit)
    check_trajectory_fits(wide, longest, limit)
    with pytest.raises(ProtocolError) as refused:
        check_trajectory_fits(wide, longest + 1, limit)
    message = str(refused.value)
    for part in ("behavior 'Wide'", f"time_horizon {longest + 1}", "16,777,216-byte", f"at most {longest}"):
        assert part in message


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        (lambda h: setattr(h, "client_id", "c" * 257), ("hello.client_id", "longer than 256 bytes", "(257 bytes)")),
        (lambda h: setattr(h.brain_parameters[0], "behavior_name", "é" * 129), ("behavior_name", "longer than 256 bytes")),
        (lambda h: h.brain_parameters.extend([h.brain_parameters[0]] * 64), ("declares 65 behaviors; at most 64",)),
        (
            lambda h: h.brain_parameters[0].observation_specs.extend([h.brain_parameters[0].observation_specs[0]] * 64),
            ("behavior 'Gridder' declares 65 observation specs; at most 64",),
        ),
    ],
    ids=["client_id_too_long", "behavior_name_too_long_in_bytes", "too_many_behaviors", "too_many_observation_specs"],
)
def test_hello_bounds_names_and_behaviors(spoil: Callable[[pb.Hello], None], named: tuple[str, ...]) -> None:
    msg = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[PARAMS.to_proto()])
    spoil(msg)
    with pytest.raises(ProtocolError) as refused:
        decode_hello(msg)
    for part in named:
        assert part in str(refused.value)
    assert len(str(refused.value)) < 300


# -- images --------------------------------------------------------------------------------------

CAMERA = BrainParameters(
    "Camera",
    (
        ObservationSpec((3,), np.dtype(np.float32)),
        ObservationSpec((84, 84, 3), np.dtype(np.uint8), "rgb"),
        ObservationSpec((4, 5, 2), np.dtype(np.float32), "depth"),
    ),
    ActionSpec(0, (3,)),
)
"""A vector beside a uint8 camera and a float32 image."""


def camera_info(n: int = 2) -> pb.BrainInfo:
    """A valid CAMERA BrainInfo of ``n`` agents (ids 10, 11, ...): every pixel of every agent differs."""
    msg = pb.BrainInfo(behavior_name=CAMERA.behavior_name)
    to_tensor(np.arange(10, 10 + n), msg.agent_ids)
    to_tensor(np.ones((n, 3), np.float32), msg.observations.add())
    to_tensor((np.arange(n * 84 * 84 * 3) % 256).astype(np.uint8).reshape(n, 84, 84, 3), msg.observations.add())
    to_tensor(np.arange(n * 40, dtype=np.float32).reshape(n, 4, 5, 2) / 7, msg.observations.add())
    to_tensor(np.zeros(n, np.float32), msg.rewards)
    to_tensor(np.zeros(n, bool), msg.done)
    to_tensor(np.zeros(n, bool), msg.max_reached)
    return msg


def test_an_image_spec_round_trips_through_the_hello() -> None:
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[CAMERA.to_proto()])

    (params,) = decode_hello(hello).brain_parameters

    assert params == CAMERA
    assert [s.is_image for s in params.observation_specs] == [False, True, True]
    assert [s.nbytes for s in params.observation_specs] == [12, 84 * 84 * 3, 160]


def test_images_decode_in_their_dtype_without_a_copy() -> None:
    msg = camera_info(3)

    info = decode_brain_info(msg, CAMERA)

    vector, rgb, depth = info.observations
    assert (vector.dtype, rgb.dtype, depth.dtype) == (np.float32, np.uint8, np.float32)
    assert rgb.shape == (3, 84, 84, 3) and depth.shape == (3, 4, 5, 2)
    np.testing.assert_array_equal(rgb.reshape(-1), np.arange(3 * 84 * 84 * 3) % 256)
    np.testing.assert_array_equal(depth, np.arange(120, dtype=np.float32).reshape(3, 4, 5, 2) / 7)
    assert not rgb.flags.writeable, "a view of the message's bytes, not a copy"


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        (
            lambda m: to_tensor(np.zeros((2, 84, 83, 3), np.uint8), m.observations[1]),
            ("behavior 'Camera'", "observations[1] is uint8 [2, 84, 83, 3], BrainParameters declare uint8 [2, 84, 84, 3]"),
        ),
        (
            lambda m: to_tensor(np.zeros((2, 84 * 84 * 3), np.uint8), m.observations[1]),
            ("observations[1] is uint8 [2, 21168], BrainParameters declare uint8 [2, 84, 84, 3]",),
        ),
        (
            lambda m: to_tensor(np.zeros((2, 84, 84, 3), np.float32), m.observations[1]),
            ("observations[1] is float32 [2, 84, 84, 3], BrainParameters declare uint8 [2, 84, 84, 3]",),
        ),
        (
            lambda m: setattr(m.observations[1], "data", m.observations[1].data[:-1]),
            ("observations[1]: 42335 bytes do not match shape [2, 84, 84, 3] of uint8 (42336 bytes expected)",),
        ),
        (
            lambda m: to_tensor(
                np.where(np.arange(80).reshape(2, 4, 5, 2) == 77, np.nan, 0).astype(np.float32), m.observations[2]
            ),
            ("behavior 'Camera'", "observations[2] of agent 11 is NaN or Inf"),
        ),
        (
            lambda m: to_tensor(np.full((2, 4, 5, 2), np.inf, np.float32), m.observations[2]),
            ("observations[2] of agent 10 is NaN or Inf",),
        ),
    ],
    ids=["image_size", "flattened_image", "image_dtype", "image_bytes", "nan_in_float_image", "inf_in_float_image"],
)
def test_a_bad_image_is_refused_naming_it(spoil: Spoil, named: tuple[str, ...]) -> None:
    msg = camera_info(2)
    spoil(msg)

    with pytest.raises(ProtocolError) as caught:
        decode_brain_info(msg, CAMERA)

    for part in named:
        assert part in str(caught.value), f"{part!r} not in {str(caught.value)!r}"


def test_an_atari_frame_fits_the_caps_and_the_row_width_counts_vectors_only() -> None:
    atari = BrainParameters("Atari", (ObservationSpec((210, 160, 3), np.dtype(np.uint8)),), ActionSpec(0, (18,)))
    assert 210 * 160 * 3 > MAX_ROW_WIDTH  # the old element cap refused it
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, client_id="env-0", brain_parameters=[atari.to_proto()])
    assert decode_hello(hello).brain_parameters == (atari,)
    assert 210 * 160 * 3 <= MAX_FRAME_BYTES
    # A trajectory of ML-Agents' default time_horizon (64) of these frames fits the topics' limit.
    check_trajectory_fits(atari, 64, MAX_TRAJECTORY_BYTES)
    assert MAX_TRAJECTORY_BYTES == MAX_MESSAGE_BYTES, "the trajectory cap is the topics' message limit"
    assert TrajectorySize.of(atari).step_bytes == 210 * 160 * 3 + 12 + 18 + 13


def test_trajectory_size_bounds_an_image_delivery_in_bytes() -> None:
    size = TrajectorySize.of(CAMERA)
    assert size.step_bytes == 12 + 84 * 84 * 3 + 160 + 12 + 3 + 13  # images by their bytes, not 4 per element
    for steps in (1, 2, 63):
        trajectory = _largest_trajectory(CAMERA, steps)
        encoded = trajectory.ByteSize()
        assert encoded <= size.at_most(steps), f"T={steps}: {encoded} > bound {size.at_most(steps)}"
        assert size.at_most(steps) - encoded < 4096, "the bound is far too loose"


# -- PNG-compressed images -----------------------------------------------------------------------

PNG_PARAMS = BrainParameters(
    "Eyes",
    (
        ObservationSpec((5, 6, 3), np.dtype(np.uint8), "rgb"),
        ObservationSpec((5, 6, 1), np.dtype(np.float32), "gray"),
        ObservationSpec((5, 6, 4), np.dtype(np.uint8), "rgbd"),
    ),
    ActionSpec(0, (2,)),
)
"""Images only: RGB uint8, grayscale float32, and 4 channels (two PNGs)."""


def png_images(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (n, *spec.shape)).astype(np.uint8) for spec in PNG_PARAMS.observation_specs]


def png_info(images: list[np.ndarray], mapping: tuple[int, ...] = ()) -> pb.BrainInfo:
    """A PNG_PARAMS BrainInfo of agents 4, 5, ... with every image PNG-compressed (``mapping`` on the 4-channel one)."""
    n = len(images[0])
    msg = pb.BrainInfo(behavior_name=PNG_PARAMS.behavior_name)
    to_tensor(np.arange(4, 4 + n), msg.agent_ids)
    for i, (spec, image) in enumerate(zip(PNG_PARAMS.observation_specs, images, strict=True)):
        to_png_tensor(
            [encode_pngs(row) for row in image],
            (n, *spec.shape),
            spec.dtype,
            mapping if i == 2 else (),
            msg.observations.add(),
        )
    to_tensor(np.zeros(n, np.float32), msg.rewards)
    to_tensor(np.zeros(n, bool), msg.done)
    to_tensor(np.zeros(n, bool), msg.max_reached)
    return msg


def test_png_images_decode_once_to_the_spec_dtype() -> None:
    images = png_images(3)

    info = decode_brain_info(png_info(images), PNG_PARAMS)

    rgb, gray, rgbd = info.observations
    np.testing.assert_array_equal(rgb, images[0], strict=True)  # uint8 exactly
    np.testing.assert_array_equal(rgbd, images[2], strict=True)  # two PNGs, the padding channels dropped
    assert gray.dtype == np.float32 and gray.shape == (3, 5, 6, 1)
    np.testing.assert_allclose(gray, images[1] / np.float32(255), rtol=0, atol=1e-7)  # as ML-Agents decodes


def test_png_channel_mapping_averages_the_channels_mapped_together() -> None:
    images = png_images(2, seed=1)
    # Decoded channels: R G B D 0 0 (two PNGs). Map R+G -> 0, B -> 1, D -> 2, drop 0 0; a 4th channel
    # cannot come from 3 targets, so the spec's shape refuses it.
    mapping = (0, 0, 1, 2, 3, -1)

    info = decode_brain_info(png_info(images, mapping), PNG_PARAMS)

    rgbd = images[2].astype(np.float64)
    # The mean of two pixels may end in .5: either rounding is right.
    np.testing.assert_allclose(info.observations[2][..., 0], (rgbd[..., 0] + rgbd[..., 1]) / 2, rtol=0, atol=0.5 + 1e-3)
    np.testing.assert_array_equal(info.observations[2][..., 1:3], images[2][..., 2:4])
    np.testing.assert_array_equal(info.observations[2][..., 3], np.zeros((2, 5, 6), np.uint8))


def _png_spoil(edit: Callable[[pb.Tensor], object], index: int = 0) -> Callable[[pb.BrainInfo], None]:
    def spoil(msg: pb.BrainInfo) -> None:
        edit(msg.observations[index])

    return spoil


def _replace_png(row: int, data: bytes) -> Callable[[pb.Tensor], None]:
    def edit(tensor: pb.Tensor) -> None:
        tensor.png[row] = data

    return edit


_GOOD_PNG = encode_pngs(np.zeros((5, 6, 3), np.uint8))


@pytest.mark.parametrize(
    ("spoil", "named"),
    [
        (_png_spoil(_replace_png(1, b"not a png at all")), ("behavior 'Eyes'", "observations[0] of agent 5", "not a PNG")),
        (
            _png_spoil(_replace_png(1, _GOOD_PNG[:40] + b"\0" * 8 + _GOOD_PNG[48:])),
            ("behavior 'Eyes'", "observations[0] of agent 5", "PNG does not decode"),
        ),
        (_png_spoil(_replace_png(0, _GOOD_PNG[:-6])), ("observations[0] of agent 4", "cut short")),
        (
            _png_spoil(_replace_png(0, encode_pngs(np.zeros((6, 5, 3), np.uint8)))),
            ("observations[0] of agent 4", "PNG 0 is 5x6 pixels; the spec declares 6x5"),
        ),
        (
            _png_spoil(_replace_png(0, encode_pngs(np.zeros((5, 6, 3), np.uint8)) * 2000)),
            ("observations[0] of agent 4", "2000 PNGs for 3 channels; at most 1 without a compressed_channel_mapping"),
        ),
        (_png_spoil(lambda t: t.png.pop()), ("observations[0] is PNG-compressed uint8 [2, 5, 6, 3] with 1 images",)),
        (_png_spoil(lambda t: setattr(t, "data", b"\0")), ("with 2 images and raw data", "no raw data")),
        (
            _png_spoil(lambda t: setattr(t, "dtype", pb.FLOAT32)),
            ("observations[0] is PNG-compressed float32 [2, 5, 6, 3]", "declare uint8 [2, 5, 6, 3]"),
        ),
        (
            _png_spoil(lambda t: t.compressed_channel_mapping.extend([0, 1]), 2),
            ("observations[2] of agent 4", "compressed_channel_mapping has 2 entries for 6 decoded channels"),
        ),
        (
            _png_spoil(lambda t: t.compressed_channel_mapping.extend([0, 0, 0, 0, 0, 0]), 2),
            ("observations[2] of agent 4", "decodes to [5, 6, 1], the spec declares [5, 6, 4]"),
        ),
    ],
    ids=[
        "not_png",
        "corrupt_png",
        "cut_short",
        "png_of_another_size",
        "png_bomb_of_many_pngs",
        "fewer_pngs_than_agents",
        "png_and_raw_data",
        "png_dtype_differs",
        "mapping_length",
        "mapping_to_fewer_channels",
    ],
)
def test_a_bad_png_is_refused_naming_the_agent(spoil: Callable[[pb.BrainInfo], None], named: tuple[str, ...]) -> None:
    msg = png_info(png_images(2))
    spoil(msg)

    with pytest.raises(ProtocolError) as caught:
        decode_brain_info(msg, PNG_PARAMS)

    for part in named:
        assert part in str(caught.value), f"{part!r} not in {str(caught.value)!r}"


def test_pngs_that_decode_past_the_bound_are_refused_before_decoding() -> None:
    pngs = encode_pngs(np.zeros((5, 6, 3), np.uint8)) * 10
    with pytest.raises(DemoFormatError, match=r"agent 1: its 10 PNGs decode to 900 channel values, over the 899 allowed"):
        decode_hwc(pngs, (5, 6, 3), [0] * 30, "agent 1", max_decoded_bytes=899)
    assert decode_hwc(pngs, (5, 6, 1), [0] * 30, "agent 1", max_decoded_bytes=900).shape == (5, 6, 1)


def test_a_png_for_a_vector_is_refused() -> None:
    msg = good_brain_info()
    to_png_tensor([_GOOD_PNG] * 3, (3, 3), np.float32, (), msg.observations[0])

    with pytest.raises(ProtocolError, match=r"observations\[0\] is PNG-compressed, BrainParameters declare a vector \[3\]"):
        decode_brain_info(msg, PARAMS)


# -- the BrainInfo bound -------------------------------------------------------------------------


@pytest.mark.parametrize("params", [PARAMS, CAMERA, PNG_PARAMS], ids=["gridder", "camera", "images"])
def test_brain_info_size_bounds_the_encoded_step(params: BrainParameters) -> None:
    size = BrainInfoSize.of(params)
    for n in (1, 2, 50):
        msg = pb.BrainInfo(behavior_name=params.behavior_name)
        to_tensor(np.full(n, -(2**62)), msg.agent_ids)
        for spec in params.observation_specs:
            to_tensor(np.ones((n, *spec.shape), spec.dtype), msg.observations.add())
        for field, dtype in (("rewards", np.float32), ("done", bool), ("max_reached", bool)):
            to_tensor(np.ones(n, dtype), getattr(msg, field))
        to_tensor(np.ones((n, params.action_spec.mask_width), bool), msg.action_mask)
        encoded = pb.StepRequest(brain_info=msg).ByteSize()
        assert encoded <= size.at_most(n), f"N={n}: {encoded} > bound {size.at_most(n)}"
        assert size.at_most(n) - encoded < 1024, "the bound is far too loose"


# -- environment stats (common.environment_stats) -------------------------------------------------


def test_environment_stats_decode_in_order_and_old_messages_have_none() -> None:
    from common.environment_stats import EnvironmentStat

    assert decode_brain_info(good_brain_info(), PARAMS).environment_stats == ()
    msg = good_brain_info()
    msg.environment_stats.add(key="Env/Laps", value=3.0, aggregation=1)
    msg.environment_stats.add(key="Env/Hits", value=2.0, aggregation=2)
    assert decode_brain_info(msg, PARAMS).environment_stats == (
        EnvironmentStat("Env/Laps", 3.0, "most_recent"),
        EnvironmentStat("Env/Hits", 2.0, "sum"),
    )


@pytest.mark.parametrize(
    ("stats", "named"),
    [
        ([{"key": "", "value": 1.0}], "environment_stats[0].key must be 1 to 256 bytes"),
        ([{"key": "k" * 257, "value": 1.0}], "environment_stats[0].key must be 1 to 256 bytes"),
        ([{"key": "a", "value": 1.0}, {"key": "Env/x", "value": float("nan")}], "environment_stats[1] ('Env/x') is nan"),
        ([{"key": "Env/x", "value": 1.0, "aggregation": 4}], "has aggregation 4, not 0..3"),
        ([{"key": "a", "value": 1.0}] * 257, "257 environment_stats, more than 256"),
    ],
)
def test_bad_environment_stats_refuse_the_brain_info_naming_the_stat(stats: list[dict[str, object]], named: str) -> None:
    msg = good_brain_info()
    for stat in stats:
        msg.environment_stats.add(**stat)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match=re.escape(named)) as raised:
        decode_brain_info(msg, PARAMS, session="sess-1")
    assert "behavior 'Gridder' (session sess-1)" in str(raised.value)
