"""Trajectory <-> protobuf (property-based), Trajectory rows, and common.tensors conversions.

Shapes: ``T`` steps, ``C`` continuous action size, ``B`` discrete branches, ``M`` mask width.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import DTypeLike

from common.buffer import AgentBuffer
from common.errors import ProtocolError
from common.tensors import SUPPORTED_DTYPES, dtype_from_wire, dtype_to_wire, from_tensor, to_tensor
from common.trajectory import (
    ACTION_MASK,
    CONTINUOUS_ACTIONS,
    CONTINUOUS_LOG_PROBS,
    DISCRETE_ACTIONS,
    DISCRETE_LOG_PROBS,
    DONE,
    INTERRUPTED,
    POLICY_VERSION,
    PREV_CONTINUOUS_ACTIONS,
    PREV_DISCRETE_ACTIONS,
    REWARDS,
    Trajectory,
    TrajectoryId,
    next_obs_key,
    obs_key,
    trajectories_to_rows,
)
from protos import pb

OBS_DTYPES = [np.float32, np.uint8, np.float16, np.int32, np.float64, np.int8, np.uint16, np.int64, np.bool_]
PER_STEP = [
    "continuous_actions",
    "discrete_actions",
    "continuous_log_probs",
    "discrete_log_probs",
    "prev_continuous_actions",
    "prev_discrete_actions",
    "rewards",
    "done",
    "policy_versions",
]


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """Any bit pattern of ``dtype`` (NaNs and infinities included); bools are 0 or 1."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def make_trajectory(
    seed: int = 0,
    steps: int = 3,
    obs_specs: list[tuple[tuple[int, ...], type]] | None = None,
    continuous_size: int = 2,
    branches: tuple[int, ...] = (3, 2),
    with_mask: bool = True,
    episode: tuple[float, int] | None = None,
    session_id: str = "session",
    agent_id: int = 4,
    sequence: int = 0,
    done_reached: bool = False,
    interrupted: bool = False,
) -> Trajectory:
    rng = np.random.default_rng(seed)
    specs = [((4,), np.float32)] if obs_specs is None else obs_specs
    t, c, b = steps, continuous_size, len(branches)
    return Trajectory(
        id=TrajectoryId(session_id, agent_id, sequence),
        behavior_name="Behavior?team=0",
        obs=[random_array(rng, (t, *shape), dtype) for shape, dtype in specs],
        next_obs=[random_array(rng, shape, dtype) for shape, dtype in specs],
        continuous_actions=random_array(rng, (t, c), np.float32),
        discrete_actions=rng.integers(0, 3, size=(t, b)).astype(np.int32),
        continuous_log_probs=random_array(rng, (t, c), np.float32),
        discrete_log_probs=random_array(rng, (t, b), np.float32),
        prev_continuous_actions=random_array(rng, (t, c), np.float32),
        prev_discrete_actions=rng.integers(0, 3, size=(t, b)).astype(np.int32),
        action_mask=random_array(rng, (t, sum(branches)), np.bool_) if with_mask and b else None,
        rewards=random_array(rng, (t,), np.float32),
        done=np.arange(t) == t - 1 if done_reached else np.zeros(t, dtype=bool),
        policy_versions=rng.integers(0, 2**40, size=t).astype(np.int64),
        done_reached=done_reached,
        interrupted=interrupted,
        episode_reward=None if episode is None else episode[0],
        episode_length=None if episode is None else episode[1],
    )


def assert_same_array(actual: np.ndarray, expected: np.ndarray) -> None:
    """Exactly equal: dtype, shape and every byte (so NaN payloads count)."""
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


def assert_same_trajectory(actual: Trajectory, expected: Trajectory) -> None:
    assert actual.id == expected.id
    assert actual.behavior_name == expected.behavior_name
    assert (actual.done_reached, actual.interrupted) == (expected.done_reached, expected.interrupted)
    assert (actual.episode_reward, actual.episode_length) == (expected.episode_reward, expected.episode_length)
    assert len(actual.obs) == len(expected.obs) and len(actual.next_obs) == len(expected.next_obs)
    for a, e in zip(actual.obs + actual.next_obs, expected.obs + expected.next_obs, strict=True):
        assert_same_array(a, e)
    for name in PER_STEP:
        assert_same_array(getattr(actual, name), getattr(expected, name))
    if expected.action_mask is None:
        assert actual.action_mask is None
    else:
        assert actual.action_mask is not None
        assert_same_array(actual.action_mask, expected.action_mask)


# -- round trip, property-based ----------------------------------------------------------------

obs_spec = st.tuples(
    st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    st.sampled_from(OBS_DTYPES),
)
text = st.text(st.characters(codec="utf-8"), max_size=12)


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    return make_trajectory(
        seed=draw(st.integers(0, 2**32 - 1)),
        steps=draw(st.integers(0, 20)),
        obs_specs=draw(st.lists(obs_spec, min_size=0, max_size=3)),
        continuous_size=draw(st.integers(0, 3)),
        branches=tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3))),
        with_mask=draw(st.booleans()),
        episode=draw(st.none() | st.tuples(st.floats(allow_nan=False), st.integers(0, 2**40))),
        session_id=draw(text),
        agent_id=draw(st.integers(-(2**63), 2**63 - 1)),
        sequence=draw(st.integers(0, 2**63 - 1)),
        done_reached=draw(st.booleans()),
        interrupted=draw(st.booleans()),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trajectories())
def test_trajectory_round_trips_through_the_proto_and_its_bytes(trajectory: Trajectory) -> None:
    msg = trajectory.to_proto()
    assert_same_trajectory(Trajectory.from_proto(msg), trajectory)
    parsed = pb.Trajectory.FromString(msg.SerializeToString())
    assert parsed == msg
    assert_same_trajectory(Trajectory.from_proto(parsed), trajectory)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast", "ignore:invalid value encountered in cast")
@settings(max_examples=50, deadline=None)
@given(trajectories())
def test_rows_have_one_row_per_step_and_fit_an_agent_buffer(trajectory: Trajectory) -> None:
    rows = trajectory.to_rows()  # float64 obs become float32 in the buffer: random bits overflow
    assert {len(v) for v in rows.values()} == {trajectory.length}
    buffer = AgentBuffer()
    buffer.extend_rows(rows)
    assert buffer.check_length()
    assert buffer.num_experiences == trajectory.length


def test_action_mask_absent_stays_absent_and_episode_stats_only_when_ended() -> None:
    plain = make_trajectory(branches=(), with_mask=True)
    msg = plain.to_proto()
    assert not msg.HasField("action_mask")
    assert not msg.episode_ended
    assert Trajectory.from_proto(msg).action_mask is None
    ended = make_trajectory(episode=(-3.5, 120))
    decoded = Trajectory.from_proto(ended.to_proto())
    assert (decoded.episode_reward, decoded.episode_length, decoded.episode_ended) == (-3.5, 120, True)


def test_policy_version_properties() -> None:
    trajectory = make_trajectory(steps=3)
    trajectory.policy_versions = np.array([5, 3, 4], dtype=np.int64)
    assert (trajectory.newest_policy_version, trajectory.oldest_policy_version) == (5, 3)
    empty = make_trajectory(steps=0)
    assert (empty.newest_policy_version, empty.oldest_policy_version) == (-1, -1)
    assert str(TrajectoryId("s", 1, 2)) == "s/1/2"


# -- rows --------------------------------------------------------------------------------------


def test_to_rows_keys_shapes_and_dtypes() -> None:
    trajectory = make_trajectory(steps=3, obs_specs=[((2,), np.float32), ((2, 2, 1), np.uint8)], interrupted=True)
    trajectory.extras["advantages"] = np.ones(3, dtype=np.float32)
    rows = trajectory.to_rows()
    assert set(rows) == {
        obs_key(0),
        obs_key(1),
        next_obs_key(0),
        next_obs_key(1),
        CONTINUOUS_ACTIONS,
        DISCRETE_ACTIONS,
        CONTINUOUS_LOG_PROBS,
        DISCRETE_LOG_PROBS,
        PREV_CONTINUOUS_ACTIONS,
        PREV_DISCRETE_ACTIONS,
        ACTION_MASK,
        REWARDS,
        DONE,
        INTERRUPTED,
        POLICY_VERSION,
        "advantages",
    }
    assert rows[obs_key(1)].shape == (3, 2, 2, 1) and rows[obs_key(1)].dtype == np.uint8
    assert rows[next_obs_key(1)].shape == (3, 2, 2, 1) and rows[next_obs_key(1)].dtype == np.uint8
    assert rows[CONTINUOUS_ACTIONS].shape == (3, 2) and rows[DISCRETE_ACTIONS].shape == (3, 2)
    assert rows[ACTION_MASK].dtype == np.float32 and rows[ACTION_MASK].shape == (3, 5)
    assert trajectory.action_mask is not None
    np.testing.assert_array_equal(rows[ACTION_MASK], trajectory.action_mask.astype(np.float32))
    assert rows[REWARDS].shape == (3,) and rows[DONE].dtype == np.bool_
    assert rows[POLICY_VERSION].dtype == np.int64


def test_next_obs_rows_are_the_following_obs_then_next_obs() -> None:
    trajectory = make_trajectory(steps=3, obs_specs=[((1,), np.float32)])
    trajectory.obs = [np.array([[0.0], [1.0], [2.0]], dtype=np.float32)]
    trajectory.next_obs = [np.array([3.0], dtype=np.float32)]
    np.testing.assert_array_equal(trajectory.to_rows()[next_obs_key(0)], [[1.0], [2.0], [3.0]])


def test_an_empty_trajectory_has_no_rows() -> None:
    rows = make_trajectory(steps=0, obs_specs=[((3,), np.float32)]).to_rows()
    assert rows[next_obs_key(0)].shape == (0, 3)
    assert all(len(v) == 0 for v in rows.values())


@pytest.mark.parametrize("interrupted", [True, False])
def test_interrupted_is_set_on_the_last_row_only(interrupted: bool) -> None:
    rows = make_trajectory(steps=4, interrupted=interrupted).to_rows()
    np.testing.assert_array_equal(rows[INTERRUPTED], [False, False, False, interrupted])


def test_trajectories_to_rows_concatenates_in_order() -> None:
    first, second = make_trajectory(seed=1, steps=2), make_trajectory(seed=2, steps=3)
    rows = trajectories_to_rows([first, second])
    for key, value in rows.items():
        assert_same_array(value, np.concatenate([first.to_rows()[key], second.to_rows()[key]]))
    update = AgentBuffer()
    update.extend_rows(rows)
    batched = AgentBuffer()
    batched.extend_rows_many([first.to_rows(), second.to_rows()])
    for key in update:
        assert_same_array(batched[key].data, update[key].data)
    assert update.num_experiences == 5
    assert trajectories_to_rows([]) == {}


# -- from_proto errors -------------------------------------------------------------------------


@pytest.mark.parametrize("name", PER_STEP)
def test_from_proto_rejects_a_per_step_tensor_of_another_length(name: str) -> None:
    msg = make_trajectory(steps=3).to_proto()
    longer = make_trajectory(steps=4).to_proto()
    getattr(msg, name).CopyFrom(getattr(longer, name))
    with pytest.raises(ProtocolError, match=name):
        Trajectory.from_proto(msg)


def test_from_proto_rejects_observations_or_masks_of_another_length() -> None:
    longer = make_trajectory(steps=4).to_proto()
    msg = make_trajectory(steps=3).to_proto()
    msg.observations[0].CopyFrom(longer.observations[0])
    with pytest.raises(ProtocolError, match=r"observations\[0\]"):
        Trajectory.from_proto(msg)
    msg = make_trajectory(steps=3).to_proto()
    msg.action_mask.CopyFrom(longer.action_mask)
    with pytest.raises(ProtocolError, match="action_mask"):
        Trajectory.from_proto(msg)


def test_from_proto_rejects_scalars_and_mismatched_next_observations() -> None:
    msg = make_trajectory(steps=1, continuous_size=1, branches=(2,), with_mask=False).to_proto()
    for name in PER_STEP:
        to_tensor(np.zeros((), dtype=np.float32), getattr(msg, name))
    with pytest.raises(ProtocolError):
        Trajectory.from_proto(msg)
    msg = make_trajectory(steps=3).to_proto()
    del msg.next_observations[:]
    with pytest.raises(ProtocolError, match="next_observations"):
        Trajectory.from_proto(msg)
    msg = make_trajectory(steps=3).to_proto()
    to_tensor(np.zeros(5, dtype=np.float32), msg.next_observations[0])
    with pytest.raises(ProtocolError, match=r"next_observations\[0\]"):
        Trajectory.from_proto(msg)


def test_from_proto_rejects_a_malformed_tensor() -> None:
    msg = make_trajectory(steps=3).to_proto()
    msg.rewards.data = msg.rewards.data[:-1]
    with pytest.raises(ProtocolError, match="rewards"):
        Trajectory.from_proto(msg)
    msg = make_trajectory(steps=3).to_proto()
    msg.ClearField("rewards")  # an absent tensor has no dtype
    with pytest.raises(ProtocolError):
        Trajectory.from_proto(msg)


def test_a_copied_trajectory_encodes_the_same() -> None:
    trajectory = make_trajectory(steps=2)
    assert replace(trajectory).to_proto() == trajectory.to_proto()


# -- common.tensors ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_every_supported_dtype_round_trips(dtype: np.dtype) -> None:
    array = random_array(np.random.default_rng(3), (2, 3), dtype)
    msg = to_tensor(array)
    assert list(msg.shape) == [2, 3]
    assert dtype_from_wire(msg.dtype) == dtype
    assert dtype_to_wire(dtype) == msg.dtype
    decoded = from_tensor(msg)
    assert_same_array(decoded, array)
    assert_same_array(from_tensor(pb.Tensor.FromString(msg.SerializeToString())), array)


@pytest.mark.parametrize("dtype", [d for d in SUPPORTED_DTYPES if d.itemsize > 1], ids=str)
def test_big_endian_input_travels_little_endian(dtype: np.dtype) -> None:
    array = random_array(np.random.default_rng(4), (3, 2), dtype)
    big = array.astype(dtype.newbyteorder(">"))
    msg = to_tensor(big)
    assert msg.data == array.astype(dtype.newbyteorder("<")).tobytes()
    decoded = from_tensor(msg)
    assert decoded.dtype == dtype
    assert decoded.tobytes() == array.tobytes()


@pytest.mark.parametrize(
    "view",
    [lambda a: a.T, lambda a: a[:, ::2], lambda a: a[::-1], lambda a: np.asfortranarray(a)],
    ids=["transposed", "strided", "reversed", "fortran"],
)
def test_non_contiguous_input_round_trips_in_c_order(view: object) -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    array = view(base)  # type: ignore[operator]
    decoded = from_tensor(to_tensor(array))
    assert decoded.shape == array.shape
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize("value", [np.float32(2.5), 3, True, np.zeros((0, 3), dtype=np.int16)], ids=repr)
def test_scalars_and_empty_arrays_round_trip(value: object) -> None:
    array = np.asarray(value)
    assert_same_array(from_tensor(to_tensor(value)), array)  # type: ignore[arg-type]


def test_to_tensor_fills_an_existing_message() -> None:
    msg = pb.Trajectory()
    to_tensor(np.ones((2, 2), dtype=np.float32), msg.rewards)
    to_tensor(np.ones(3, dtype=np.int64), msg.rewards)  # overwrites, shape included
    assert_same_array(from_tensor(msg.rewards), np.ones(3, dtype=np.int64))


def test_a_byte_length_mismatch_names_the_field() -> None:
    msg = to_tensor(np.zeros((2, 3), dtype=np.float32))
    msg.data = msg.data + b"\x00"
    with pytest.raises(ProtocolError, match=r"observations\[1\]"):
        from_tensor(msg, "observations[1]")
    msg.data = msg.data[:-5]
    with pytest.raises(ProtocolError, match="rewards"):
        from_tensor(msg, "rewards")


def test_a_negative_dimension_raises() -> None:
    msg = to_tensor(np.zeros(0, dtype=np.float32))
    msg.shape[0] = -1
    with pytest.raises(ProtocolError, match="obs"):
        from_tensor(msg, "obs")


@pytest.mark.parametrize("code", [0, 99, -1])
def test_an_unknown_dtype_code_raises(code: int) -> None:
    msg = to_tensor(np.zeros(2, dtype=np.float32))
    msg.dtype = code  # type: ignore[assignment]
    with pytest.raises(ProtocolError):
        from_tensor(msg, "rewards")
    with pytest.raises(ProtocolError):
        dtype_from_wire(code)


@pytest.mark.parametrize("dtype", [np.complex64, np.object_, "datetime64[s]", "U3"], ids=str)
def test_an_unsupported_dtype_cannot_travel(dtype: object) -> None:
    with pytest.raises(ProtocolError):
        to_tensor(np.zeros(2, dtype=dtype))  # type: ignore[call-overload]


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_an_image_decodes_into_one_block_of_its_frames(steps: int) -> None:
    """An image (uint8 or float32) beside a vector: from_proto holds its T + 1 frames once, obs and next_obs
    views of them; to_rows' next_obs rows are a view too, equal to the following obs then next_obs."""
    specs: list[tuple[tuple[int, ...], type]] = [((4,), np.float32), ((6, 5, 3), np.uint8), ((2, 3, 1), np.float32)]
    sent = make_trajectory(steps=steps, obs_specs=specs)

    got = Trajectory.from_proto(pb.Trajectory.FromString(sent.to_proto().SerializeToString()))

    assert_same_trajectory(got, sent)
    assert sorted(got.obs_frames) == [1, 2], "images only; a vector keeps its plain arrays"
    rows = got.to_rows()
    for i in (1, 2):
        block = got.obs_frames[i]
        assert block.shape == (steps + 1, *specs[i][0]) and block.dtype == specs[i][1]
        assert np.shares_memory(got.next_obs[i], block)
        np.testing.assert_array_equal(got.frames(i), np.concatenate([sent.obs[i], sent.next_obs[i][None]]), strict=True)
        if steps:
            assert np.shares_memory(got.obs[i], block) and np.shares_memory(rows[next_obs_key(i)], block)
        np.testing.assert_array_equal(rows[next_obs_key(i)], sent.to_rows()[next_obs_key(i)], strict=True)
    np.testing.assert_array_equal(got.frames(0), np.concatenate([sent.obs[0], sent.next_obs[0][None]]), strict=True)


def test_environment_stats_round_trip_and_a_bad_one_is_refused() -> None:
    from common.environment_stats import EnvironmentStat

    stats = (EnvironmentStat("Env/Laps", 3.0, "most_recent"), EnvironmentStat("Env/Dist", 1.5, "histogram"))
    trajectory = replace(make_trajectory(), environment_stats=stats)
    assert (
        Trajectory.from_proto(pb.Trajectory.FromString(trajectory.to_proto().SerializeToString())).environment_stats == stats
    )
    assert len(make_trajectory().to_proto().environment_stats) == 0
    msg = trajectory.to_proto()
    msg.environment_stats[1].aggregation = 9
    with pytest.raises(ProtocolError, match=r"environment_stats\[1\] \('Env/Dist'\) has aggregation 9"):
        Trajectory.from_proto(msg)


@pytest.mark.parametrize("key_bytes", [1, 127, 128, 256])
def test_a_stat_adds_at_most_its_encoded_bytes_to_a_trajectory(key_bytes: int) -> None:
    """``encoded_bytes`` bounds what a stat costs a trajectory's message: the processor's room check relies on it."""
    from common.environment_stats import MAX_KEY_BYTES, EnvironmentStat, encoded_bytes

    assert key_bytes <= MAX_KEY_BYTES
    stat = EnvironmentStat("k" * key_bytes, -1.5, "histogram")  # every field non-default: all encoded
    bare = make_trajectory().to_proto().ByteSize()
    added = replace(make_trajectory(), environment_stats=(stat,) * 3).to_proto().ByteSize() - bare
    assert added <= 3 * encoded_bytes(stat)
    if key_bytes == MAX_KEY_BYTES:
        assert added == 3 * encoded_bytes(stat) == 3 * 270, "the bound is exact at the longest key"
