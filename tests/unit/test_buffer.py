"""AgentBufferField and AgentBuffer: every rule of docs/architecture.md "Buffers", pinned on small hand-computed
examples (the ProcessingBuffer's are test_processing_buffer.py's)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import h5py
import numpy as np
import pytest
from numpy.typing import DTypeLike

from common.buffer import AgentBuffer, AgentBufferField
from common.errors import BufferException, StepstreamError

# Five rows a..e of a [2]-shaped float32 field: a = [1, 10], b = [2, 20], ..., e = [5, 50].
A, B, C, D, E = ([float(k), 10.0 * k] for k in range(1, 6))


def field_of(rows: object, padding_value: float = 0.0) -> AgentBufferField:
    field = AgentBufferField(padding_value)
    field.extend(rows)
    return field


def buffer_of(**columns: object) -> AgentBuffer:
    buffer = AgentBuffer()
    for key, rows in columns.items():
        buffer[key].extend(rows)
    return buffer


def assert_rows(actual: np.ndarray, expected: object, dtype: DTypeLike = np.float32) -> None:
    expected_arr = np.asarray(expected, dtype=dtype)
    assert actual.dtype == expected_arr.dtype
    assert actual.shape == expected_arr.shape
    np.testing.assert_array_equal(actual, expected_arr)


def test_buffer_exception_is_a_stepstream_error() -> None:
    assert issubclass(BufferException, StepstreamError)


# -- get_batch: sequential ---------------------------------------------------------------------


def test_get_batch_pads_the_last_sequence_at_its_end_with_zero_rows() -> None:
    field = field_of([A, B, C, D, E], padding_value=0.0)
    assert_rows(field.get_batch(training_length=2), [A, B, C, D, E, [0, 0]])


def test_get_batch_padding_value_one_repeats_the_last_row() -> None:
    field = field_of([A, B, C, D, E], padding_value=1.0)
    assert_rows(field.get_batch(training_length=2), [A, B, C, D, E, E])


def test_get_batch_padding_scales_the_last_row_by_the_padding_value() -> None:
    field = field_of([A, B, C, D, E], padding_value=0.5)
    assert_rows(field.get_batch(training_length=3), [A, B, C, D, E, [2.5, 25]])


def test_action_mask_padding_repeats_the_last_mask_row() -> None:
    masks = [[1, 0, 1], [0, 1, 1], [1, 1, 0]]
    field = AgentBufferField()
    for row in masks:
        field.append(np.array(row, dtype=np.float32), padding_value=1.0)
    assert_rows(field.get_batch(training_length=4), [*masks, [1, 1, 0]])


@pytest.mark.parametrize(
    ("dtype", "rows", "padding_value", "padded"),
    [
        (np.int32, [[1, 2], [3, 4], [5, 6]], 0.0, [[1, 2], [3, 4], [5, 6], [0, 0]]),
        (np.int64, [7, 8, 9], 1.0, [7, 8, 9, 9]),
        (np.bool_, [True, False, True], 1.0, [True, False, True, True]),
        (np.bool_, [True, False, True], 0.0, [True, False, True, False]),
    ],
    ids=["int32-zeros", "int64-repeat", "bool-repeat", "bool-zeros"],
)
def test_get_batch_padding_keeps_the_field_dtype(dtype: type, rows: list, padding_value: float, padded: list) -> None:
    field = field_of(np.array(rows, dtype=dtype), padding_value)
    assert_rows(field.get_batch(training_length=2), padded, dtype)


def test_get_batch_whole_multiple_of_the_length_is_every_row_unpadded() -> None:
    field = field_of([A, B, C, D])
    batch = field.get_batch(training_length=2)
    assert_rows(batch, [A, B, C, D])
    assert not batch.flags.writeable


@pytest.mark.parametrize(
    ("batch_size", "training_length", "expected"),
    [
        (2, 2, [B, C, D, E]),  # the newest 4 rows, as ML-Agents
        (1, 2, [D, E]),
        (0, 2, np.zeros((0, 2))),
        (3, 2, [A, B, C, D, E, [0, 0]]),  # every sequence: padded
        (2, 1, [D, E]),
        (5, 1, [A, B, C, D, E]),
        (1, 5, [A, B, C, D, E]),
        (1, 3, [C, D, E]),
        (2, 3, [A, B, C, D, E, [0, 0]]),
    ],
)
def test_get_batch_sequential_batch_size_takes_the_newest_rows(
    batch_size: int, training_length: int, expected: object
) -> None:
    field = field_of([A, B, C, D, E])
    assert_rows(field.get_batch(batch_size=batch_size, training_length=training_length), expected)


def test_get_batch_training_length_none_means_one() -> None:
    assert_rows(field_of([A, B, C]).get_batch(training_length=None), [A, B, C])


# -- get_batch: non-sequential -----------------------------------------------------------------


def test_get_batch_non_sequential_is_every_overlapping_window() -> None:
    field = field_of([A, B, C, D, E])
    assert_rows(field.get_batch(training_length=3, sequential=False), [A, B, C, B, C, D, C, D, E])


def test_get_batch_non_sequential_batch_size_takes_the_newest_windows() -> None:
    field = field_of([A, B, C, D, E])
    assert_rows(field.get_batch(batch_size=2, training_length=3, sequential=False), [B, C, D, C, D, E])
    assert_rows(field.get_batch(batch_size=2, training_length=1, sequential=False), [D, E])
    assert_rows(field.get_batch(batch_size=1, training_length=5, sequential=False), [A, B, C, D, E])


# -- get_batch: errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch_size", "training_length", "sequential"),
    [
        (4, 2, True),  # 3 sequences exist
        (6, 1, True),
        (2, 5, True),
        (4, 3, False),  # 3 windows exist
        (6, 1, False),
        (None, 6, False),  # no window of 6 rows
        (1, 6, False),
        (-1, 2, True),
        (-1, 2, False),
    ],
)
def test_get_batch_asking_for_more_than_exists_raises(batch_size: int | None, training_length: int, sequential: bool) -> None:
    with pytest.raises(BufferException):
        field_of([A, B, C, D, E]).get_batch(batch_size=batch_size, training_length=training_length, sequential=sequential)


@pytest.mark.parametrize("training_length", [0, -1])
@pytest.mark.parametrize("sequential", [True, False])
def test_get_batch_training_length_below_one_raises(training_length: int, sequential: bool) -> None:
    with pytest.raises(BufferException):
        field_of([A, B, C]).get_batch(training_length=training_length, sequential=sequential)


# -- append / extend / set / reset_field -------------------------------------------------------


def test_append_grows_geometrically_and_keeps_every_row() -> None:
    field = AgentBufferField()
    for k in range(1000):
        field.append([k, -k])
    assert len(field) == 1000
    assert_rows(field.data, np.stack([np.arange(1000), -np.arange(1000)], axis=1), np.int64)
    assert field._data is not None and len(field._data) < 2 * 1000 + 16  # geometric, not per-row


def test_extend_across_capacities_keeps_every_row() -> None:
    field = AgentBufferField()
    expected: list[int] = []
    start = 0
    for size in [1, 0, 15, 16, 33, 100, 7, 300]:
        rows = np.arange(start, start + size, dtype=np.int64)
        field.extend(rows)
        expected.extend(rows)
        start += size
    assert_rows(field.data, expected, np.int64)


def test_append_sets_the_padding_value_and_extend_keeps_it() -> None:
    field = AgentBufferField()
    field.append([1.0, 2.0], padding_value=1.0)
    assert field.padding_value == 1.0
    field.extend([[3.0, 4.0]])
    assert field.padding_value == 1.0


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (np.float64(1.5), np.float32),
        (1.5, np.float32),
        (np.array([1.0, 2.0], dtype=np.float64), np.float32),
        (np.array([1.0, 2.0], dtype=np.float16), np.float16),
        (np.array([1, 2], dtype=np.int32), np.int32),
        (3, np.int64),
        (True, np.bool_),
        (np.array([1, 2], dtype=np.uint8), np.uint8),
    ],
)
def test_append_stores_float64_as_float32_and_other_dtypes_as_they_are(value: object, dtype: type) -> None:
    field = AgentBufferField()
    field.append(value)
    assert field.data.dtype == dtype


def test_extend_stores_float64_as_float32() -> None:
    field = field_of(np.zeros((3, 2), dtype=np.float64))
    assert field.data.dtype == np.float32
    field = field_of([[0.5, 1.5]])
    assert field.data.dtype == np.float32


def test_later_rows_are_cast_to_the_first_rows_dtype() -> None:
    field = field_of(np.array([1, 2], dtype=np.int32))
    field.append(np.float32(7.0))
    assert_rows(field.data, [1, 2, 7], np.int32)


def test_row_shape_mismatch_raises() -> None:
    field = field_of([A, B])
    with pytest.raises(BufferException):
        field.append([1.0, 2.0, 3.0])
    with pytest.raises(BufferException):
        field.extend(np.zeros((2, 3)))
    with pytest.raises(BufferException):
        field.append(1.0)
    assert_rows(field.data, [A, B])


def test_extend_with_a_scalar_raises() -> None:
    with pytest.raises(BufferException):
        AgentBufferField().extend(3.0)


def test_set_replaces_every_row_and_may_change_the_row_shape() -> None:
    field = field_of([A, B, C])
    field.set(np.array([[1, 2, 3]], dtype=np.int8))
    assert_rows(field.data, [[1, 2, 3]], np.int8)


def test_reset_field_forgets_the_rows_and_keeps_the_storage() -> None:
    field = field_of([A, B, C])
    storage = field._data
    field.reset_field()
    assert len(field) == 0
    assert field.data.shape == (0, 2)
    field.append(D)
    assert field._data is storage
    assert_rows(field.data, [D])


def test_data_is_a_read_only_view_and_np_array_a_writable_copy() -> None:
    field = field_of([A, B])
    with pytest.raises(ValueError):
        field.data[0, 0] = 99.0
    copy = np.array(field)
    copy[0, 0] = 99.0
    assert field.data[0, 0] == 1.0
    assert np.asarray(field, dtype=np.float64).dtype == np.float64
    assert_rows(field[1], B)
    assert [list(row) for row in field] == [A, B]


def test_an_empty_field_is_empty() -> None:
    field = AgentBufferField()
    assert len(field) == 0
    assert field.data.shape == (0,)
    assert field.get_batch().shape == (0,)


# -- AgentBuffer basics ------------------------------------------------------------------------


def test_fields_are_created_on_first_use_and_counted() -> None:
    buffer = AgentBuffer()
    assert buffer.num_experiences == 0
    assert "x" not in buffer
    buffer["x"].append(1.0)
    assert "x" in buffer
    buffer["y"].extend([1.0, 2.0])
    assert buffer.num_experiences == 2
    assert not buffer.check_length()
    assert buffer.check_length(["x"])
    buffer["x"].append(2.0)
    assert buffer.check_length()
    buffer["z"] = np.arange(2)
    assert_rows(buffer["z"].data, [0, 1], np.int64)
    del buffer["z"]
    assert sorted(buffer) == ["x", "y"]


def test_check_length_and_shuffle_do_not_create_missing_fields() -> None:
    buffer = buffer_of(x=[1.0, 2.0])
    buffer.check_length(["x", "missing"])
    with pytest.raises(BufferException):
        buffer.shuffle(key_list=["x", "missing"])
    assert list(buffer) == ["x"]


def test_reset_agent_empties_every_field_and_keeps_the_keys() -> None:
    buffer = buffer_of(x=[1.0, 2.0], y=[[1, 2], [3, 4]])
    buffer.reset_agent()
    assert sorted(buffer) == ["x", "y"]
    assert buffer.num_experiences == 0


def test_extend_rows_appends_every_key_and_rejects_unequal_lengths() -> None:
    buffer = AgentBuffer()
    buffer.extend_rows({"x": np.array([1.0, 2.0]), "y": np.array([[1, 2], [3, 4]], dtype=np.int32)})
    buffer.extend_rows({"x": np.array([3.0]), "y": np.array([[5, 6]], dtype=np.int32)})
    assert_rows(buffer["x"].data, [1, 2, 3])
    assert_rows(buffer["y"].data, [[1, 2], [3, 4], [5, 6]], np.int32)
    with pytest.raises(BufferException):
        buffer.extend_rows({"x": np.array([1.0]), "y": np.zeros((2, 2), dtype=np.int32)})
    assert buffer.num_experiences == 3


def test_extend_rows_many_concatenates_row_maps_and_agent_buffers_in_order() -> None:
    first = {"x": np.array([1.0, 2.0]), "m": np.array([[1, 0], [0, 1]], dtype=np.float32)}
    second = buffer_of(x=[3.0], m=[[1.0, 1.0]])
    empty = {"x": np.zeros((0,)), "m": np.zeros((0, 2), dtype=np.float32)}
    buffer = AgentBuffer()
    buffer.extend_rows_many([first, empty, second])
    assert_rows(buffer["x"].data, [1, 2, 3])
    assert_rows(buffer["m"].data, [[1, 0], [0, 1], [1, 1]])
    assert not buffer["x"].data.flags.writeable
    buffer.extend_rows_many([second], key_list=["x"])
    assert_rows(buffer["x"].data, [1, 2, 3, 3])


@pytest.mark.parametrize(
    "rows_list",
    [
        [{"x": np.zeros(2), "y": np.zeros(1)}],
        [{"x": np.zeros(2), "y": np.zeros(2)}, {"x": np.zeros(1), "y": np.zeros(2)}],
        [{"x": np.zeros(2), "y": np.zeros(2)}, {"x": np.zeros(1)}],
        [{"x": np.float32(1.0)}],
        [{"x": np.zeros((2, 3))}, {"x": np.zeros((1, 4))}],
    ],
    ids=["unequal-keys", "unequal-in-second", "missing-key", "scalar", "row-shapes-differ"],
)
def test_extend_rows_many_rejects_inconsistent_row_maps(rows_list: list) -> None:
    with pytest.raises(BufferException):
        AgentBuffer().extend_rows_many(rows_list)


# -- shuffle -----------------------------------------------------------------------------------


def test_shuffle_moves_whole_sequences_with_one_permutation_for_every_field() -> None:
    x = np.arange(12, dtype=np.float32)
    buffer = buffer_of(x=x, y=10 * x, z=np.stack([x, -x], axis=1))
    buffer.shuffle(sequence_length=2, rng=np.random.default_rng(1))
    shuffled = buffer["x"].data
    assert not np.array_equal(shuffled, x)
    assert sorted(shuffled) == list(x)
    pairs = shuffled.reshape(6, 2)
    assert np.all(pairs[:, 0] % 2 == 0) and np.all(pairs[:, 1] == pairs[:, 0] + 1)  # pairs intact
    np.testing.assert_array_equal(buffer["y"].data, 10 * shuffled)  # row-aligned
    np.testing.assert_array_equal(buffer["z"].data, np.stack([shuffled, -shuffled], axis=1))


def test_shuffle_key_list_shuffles_only_those_fields() -> None:
    x = np.arange(8, dtype=np.float32)
    buffer = buffer_of(x=x, y=10 * x, untouched=x)
    buffer.shuffle(key_list=["x", "y"], rng=np.random.default_rng(0))
    np.testing.assert_array_equal(buffer["y"].data, 10 * buffer["x"].data)
    np.testing.assert_array_equal(buffer["untouched"].data, x)


def test_shuffle_without_rng_is_a_permutation() -> None:
    x = np.arange(100, dtype=np.float32)
    buffer = buffer_of(x=x, y=10 * x)
    buffer.shuffle()
    assert sorted(buffer["x"].data) == list(x)
    np.testing.assert_array_equal(buffer["y"].data, 10 * buffer["x"].data)


@pytest.mark.parametrize(
    ("columns", "sequence_length"),
    [({"x": [1.0, 2.0], "y": [1.0]}, 1), ({"x": [1.0, 2.0, 3.0]}, 2), ({"x": [1.0, 2.0]}, 0)],
    ids=["unequal-lengths", "not-a-multiple", "zero-length"],
)
def test_shuffle_raises_on_unequal_lengths_or_partial_sequences(columns: dict, sequence_length: int) -> None:
    with pytest.raises(BufferException):
        buffer_of(**columns).shuffle(sequence_length=sequence_length)


# -- sample_mini_batch -------------------------------------------------------------------------


def test_sample_mini_batch_returns_whole_aligned_sequences_row_aligned_across_fields() -> None:
    x = np.arange(14, dtype=np.float32)  # sequences of 4 start at 0, 4, 8; rows 12-13 never start one
    buffer = buffer_of(x=x, y=10 * x)
    buffer["y"].padding_value = 1.0
    for seed in range(20):
        mini_batch = buffer.sample_mini_batch(batch_size=9, sequence_length=4, rng=np.random.default_rng(seed))
        sampled = mini_batch["x"].data
        assert sampled.shape == (8,)  # 9 // 4 = 2 sequences
        for sequence in sampled.reshape(2, 4):
            assert sequence[0] in (0, 4, 8)
            np.testing.assert_array_equal(sequence, sequence[0] + np.arange(4))
        np.testing.assert_array_equal(mini_batch["y"].data, 10 * sampled)
        assert mini_batch["y"].padding_value == 1.0


def test_sample_mini_batch_copies() -> None:
    buffer = buffer_of(x=np.arange(4, dtype=np.float32))
    mini_batch = buffer.sample_mini_batch(batch_size=4)
    assert not np.shares_memory(mini_batch["x"].data, buffer["x"].data)
    assert len(mini_batch["x"]) == 4


@pytest.mark.parametrize(
    ("columns", "sequence_length"),
    [({"x": [1.0, 2.0, 3.0]}, 4), ({"x": [1.0, 2.0], "y": [1.0]}, 1), ({"x": [1.0]}, 0)],
    ids=["shorter-than-a-sequence", "unequal-lengths", "zero-length"],
)
def test_sample_mini_batch_raises(columns: dict, sequence_length: int) -> None:
    with pytest.raises(BufferException):
        buffer_of(**columns).sample_mini_batch(batch_size=4, sequence_length=sequence_length)


# -- truncate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_length", "sequence_length", "kept"),
    [
        (7, 1, range(3, 10)),
        (7, 3, range(4, 10)),
        (6, 3, range(4, 10)),
        (10, 4, range(2, 10)),
        (12, 4, range(10)),
        (20, 1, range(10)),
        (0, 1, []),
    ],
)
def test_truncate_keeps_the_newest_rows_in_a_multiple_of_the_sequence_length(
    max_length: int, sequence_length: int, kept: Iterable[int]
) -> None:
    x = np.arange(10, dtype=np.float32)
    buffer = buffer_of(x=x, y=10 * x)
    buffer.truncate(max_length, sequence_length)
    assert_rows(buffer["x"].data, list(kept))
    np.testing.assert_array_equal(buffer["y"].data, 10 * buffer["x"].data)


def test_appending_after_truncate_keeps_every_row() -> None:
    buffer = buffer_of(x=np.arange(10, dtype=np.float32))
    buffer.truncate(4)
    buffer["x"].extend(np.arange(10, 40, dtype=np.float32))  # beyond the remaining capacity
    buffer.truncate(25)
    buffer["x"].append(40.0)
    assert_rows(buffer["x"].data, np.arange(15, 41))


def test_truncate_raises_on_unequal_lengths_or_bad_arguments() -> None:
    with pytest.raises(BufferException):
        buffer_of(x=[1.0, 2.0], y=[1.0]).truncate(1)
    with pytest.raises(BufferException):
        buffer_of(x=[1.0, 2.0]).truncate(1, sequence_length=0)
    with pytest.raises(BufferException):
        buffer_of(x=[1.0, 2.0]).truncate(-1)


# -- make_mini_batch ---------------------------------------------------------------------------


def test_make_mini_batch_returns_read_only_views_of_the_range() -> None:
    x = np.arange(10, dtype=np.float32)
    buffer = buffer_of(x=x, m=np.stack([x, x], axis=1))
    buffer["m"].padding_value = 1.0
    mini_batch = buffer.make_mini_batch(3, 7)
    assert_rows(mini_batch["x"].data, [3, 4, 5, 6])
    assert_rows(mini_batch["m"].data, [[3, 3], [4, 4], [5, 5], [6, 6]])
    assert mini_batch["m"].padding_value == 1.0
    assert np.shares_memory(mini_batch["x"].data, buffer["x"].data)  # no row copied
    rows = np.asarray(mini_batch["x"])
    with pytest.raises(ValueError, match="read-only"):
        rows[0] = 99.0
    mini_batch["x"].append(99.0)  # the mini-batch grows on its own
    assert_rows(mini_batch["x"].data, [3, 4, 5, 6, 99])
    assert_rows(buffer["x"].data, x)
    assert len(buffer.make_mini_batch(8, 20)["x"]) == 2


def test_a_mini_batch_is_a_snapshot_whatever_the_buffer_does_next() -> None:
    """The views are never written through: the mini-batch keeps the rows it was made from."""
    x = np.arange(8, dtype=np.float32)
    buffer = buffer_of(x=x, y=10 * x)
    mini_batch = buffer.make_mini_batch(2, 6)
    buffer.shuffle(rng=np.random.default_rng(0))
    assert not np.array_equal(buffer["x"].data, x)
    buffer.truncate(4)
    buffer.reset_agent()
    buffer.extend_rows({"x": -np.ones(8, np.float32), "y": -np.ones(8, np.float32)})
    buffer["x"].append(-2.0)
    buffer["y"].append(-2.0)
    assert_rows(mini_batch["x"].data, [2, 3, 4, 5])
    assert_rows(mini_batch["y"].data, [20, 30, 40, 50])
    mini_batch["x"].reset_field()  # a mini-batch's own reset never writes into its lender's rows either
    mini_batch["x"].extend(np.full(3, 7.0, np.float32))
    assert_rows(mini_batch["x"].data, [7, 7, 7])
    assert_rows(buffer["x"].data, [-1] * 8 + [-2])
    newest = buffer.make_mini_batch(5, 9)
    buffer.truncate(4)  # the rows stay where they are, still lent
    buffer.reset_agent()
    buffer.extend_rows({"x": np.zeros(4, np.float32), "y": np.zeros(4, np.float32)})
    assert_rows(newest["x"].data, [-1, -1, -1, -2])


def test_a_mini_batch_not_used_yet_copies_pickles_and_keeps_empty_fields() -> None:
    """make_mini_batch makes its views on first use: a mini-batch copied or pickled before that, or one
    with a field that has no storage, is still the same AgentBuffer."""
    import copy
    import pickle

    buffer = buffer_of(x=np.arange(6, dtype=np.float32))
    buffer["empty"] = AgentBufferField(padding_value=1.0)
    for clone in (copy.copy, copy.deepcopy, lambda b: pickle.loads(pickle.dumps(b))):
        mini_batch = clone(buffer.make_mini_batch(1, 3))
        assert list(mini_batch) == ["x", "empty"]
        assert_rows(mini_batch["x"].data, [1, 2])
        assert len(mini_batch["empty"]) == 0 and mini_batch["empty"].padding_value == 1.0
    with pytest.raises(AttributeError, match="no_such"):
        buffer.make_mini_batch(0, 1).no_such  # noqa: B018


def test_shuffle_and_reset_field_move_to_new_storage_only_after_lending_rows() -> None:
    buffer = buffer_of(x=np.arange(4, dtype=np.int64))
    storage = buffer["x"]._data
    buffer.shuffle(rng=np.random.default_rng(0))
    buffer.reset_agent()
    buffer["x"].extend(np.arange(4, dtype=np.int64))
    assert buffer["x"]._data is storage  # nothing lent: reused
    buffer.make_mini_batch(0, 2)
    buffer.shuffle(rng=np.random.default_rng(0))
    assert buffer["x"]._data is not storage
    storage = buffer["x"]._data
    buffer.make_mini_batch(0, 2)
    buffer.reset_agent()
    assert buffer["x"].data.dtype == np.int64 and buffer["x"].data.shape == (0,)  # the type stays
    buffer["x"].append(5)
    assert buffer["x"]._data is not storage
    assert_rows(buffer["x"].data, [5], np.int64)


def test_shuffle_once_then_slice_gives_the_rows_of_shuffled_copies() -> None:
    """Mini-batches of a shuffled buffer are the rows a copying shuffle of the same seed gives."""
    rng = np.random.default_rng(3)
    columns = {"x": rng.standard_normal((50, 3)).astype(np.float32), "d": rng.random(50) < 0.5}
    buffer = buffer_of(**columns)
    buffer.shuffle(rng=np.random.default_rng(7))
    order = np.random.default_rng(7).permutation(50)
    for start in range(0, 50, 16):
        mini_batch = buffer.make_mini_batch(start, start + 16)
        for key, rows in columns.items():
            assert_rows(mini_batch[key].data, rows[order][start : start + 16], rows.dtype)


def test_make_mini_batch_slices_like_a_list_of_the_rows_only() -> None:
    """Out-of-range and negative bounds slice the rows held, never the spare capacity behind them."""
    field = AgentBufferField()
    for k in range(5):
        field.append(float(k))  # 5 rows in a capacity of 16
    buffer = AgentBuffer()
    buffer["x"] = field
    rows = [0.0, 1.0, 2.0, 3.0, 4.0]
    for start, end in [(3, 9), (-2, 5), (-4, -1), (4, 2), (0, 16)]:
        assert_rows(buffer.make_mini_batch(start, end)["x"].data, rows[start:end])


# -- HDF5 --------------------------------------------------------------------------------------


def odd_buffer() -> AgentBuffer:
    """Fields of many dtypes and shapes, odd key names, padding values, and more than ten fields."""
    rng = np.random.default_rng(0)
    buffer = AgentBuffer()
    buffer["obs_0"].extend(rng.standard_normal((5, 3), dtype=np.float32))
    buffer["a/b"].extend(np.arange(5, dtype=np.int32))
    buffer["done"].extend(np.array([False, False, True, False, True]))
    for row in rng.integers(0, 2, size=(5, 4)).astype(np.float32):
        buffer["action_mask"].append(row, padding_value=1.0)
    buffer["image"].extend(rng.integers(0, 256, size=(5, 2, 2, 3), dtype=np.uint8))
    buffer["half"].extend(rng.standard_normal((5, 2)).astype(np.float16))
    buffer["käse ünicode"].extend(np.arange(5, dtype=np.int64))
    buffer["empty typed"].extend(np.zeros((2, 3), dtype=np.int16))
    buffer["empty typed"].reset_field()
    buffer["never written"].padding_value = 0.25
    for k in range(4):  # field_10, field_11, ... must come back after field_9
        buffer[f"extra_{k}"].extend(np.full(5, k, dtype=np.uint16))
    return buffer


def assert_same_buffer(loaded: AgentBuffer, original: AgentBuffer) -> None:
    assert list(loaded) == list(original)
    for key in original:
        a, b = loaded[key], original[key]
        assert a.data.dtype == b.data.dtype, key
        assert a.data.shape == b.data.shape, key
        assert a.data.tobytes() == b.data.tobytes(), key
        assert a.padding_value == b.padding_value, key


def test_hdf5_round_trip_through_a_path(tmp_path: Path) -> None:
    original = odd_buffer()
    path = tmp_path / "buffer.h5"
    original.save_to_file(str(path))
    loaded = buffer_of(stale=[1.0])
    loaded.load_from_file(str(path))
    assert_same_buffer(loaded, original)
    assert "stale" not in loaded


def test_hdf5_round_trip_through_bytes_io() -> None:
    original = odd_buffer()
    file = io.BytesIO()
    original.save_to_file(file)
    file.seek(0)
    loaded = AgentBuffer()
    loaded.load_from_file(file)
    assert_same_buffer(loaded, original)
    loaded["empty typed"].append(np.array([1, 2, 3], dtype=np.int16))  # kept its row shape
    loaded["never written"].append([1.0, 2.0])  # has none yet
    loaded["obs_0"].append(np.zeros(3, dtype=np.float32))  # the loaded storage grows


def test_loading_a_file_that_is_not_hdf5_raises(tmp_path: Path) -> None:
    path = tmp_path / "not.h5"
    path.write_text("not an HDF5 file")
    buffer = buffer_of(x=[1.0])
    with pytest.raises(BufferException):
        buffer.load_from_file(str(path))
    with pytest.raises(BufferException):
        buffer.load_from_file(io.BytesIO(b"junk" * 100))
    with pytest.raises(BufferException):
        buffer.load_from_file(str(tmp_path / "missing.h5"))
    assert_rows(buffer["x"].data, [1.0])


def test_loading_an_hdf5_file_that_is_not_a_buffer_raises(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(3))
    with pytest.raises(BufferException):
        AgentBuffer().load_from_file(str(path))


def test_loading_a_buffer_file_with_a_foreign_entry_raises(tmp_path: Path) -> None:
    path = tmp_path / "tampered.h5"
    buffer_of(x=[1.0]).save_to_file(str(path))
    with h5py.File(path, "a") as f:
        f.create_group("field_9")
    with pytest.raises(BufferException):
        AgentBuffer().load_from_file(str(path))


# -- resequence_and_append ---------------------------------------------------------------------


def test_resequence_and_append_matches_extend_rows_many() -> None:
    trajectories = [buffer_of(x=np.arange(k, dtype=np.float32), y=np.ones((k, 2), dtype=np.int8)) for k in [3, 0, 5]]
    one_at_a_time = AgentBuffer()
    for trajectory in trajectories:
        trajectory.resequence_and_append(one_at_a_time, training_length=1)
    batched = AgentBuffer()
    batched.extend_rows_many(trajectories)
    assert_same_buffer(batched, one_at_a_time)


def test_b1_benchmark_runs_on_a_tiny_buffer() -> None:
    from benchmarks.buffer_b1 import run

    record = run(256, repeats=1, seed=0)
    assert record["n"] == 256
    ms, single = record["ms"], record["ms_single_run"]
    assert isinstance(ms, dict) and isinstance(single, dict)
    assert set(ms) == set(single) >= {"fill", "shuffle", "truncate"}


def test_the_processor_does_not_load_h5py() -> None:
    """The buffer module imports h5py only in its HDF5 methods, so the processor (which holds
    ProcessingBuffers) never loads it."""
    import subprocess
    import sys

    code = "import sys, processor.server, processor.assembly; sys.exit('h5py' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
