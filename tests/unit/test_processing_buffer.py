"""ProcessingBuffer (processor/processing_buffer.py): the per-agent store's rules of docs/architecture.md "Buffers",
pinned on small hand-computed examples."""

from __future__ import annotations

import numpy as np
import pytest

from common.buffer import AgentBuffer
from common.errors import BufferException
from processor.processing_buffer import ProcessingBuffer, ProcessingField
from tests.unit.test_buffer import assert_rows

TWO_FIELDS = {"x": ProcessingField(), "mask": ProcessingField((2,), np.float32, padding_value=1.0)}


def two_agents() -> ProcessingBuffer:
    """Agent "a": x = 1, 2, 3 and masks [1, 0], [0, 1], [1, 1]; agent 7: x = 4, 5 and masks [0, 1], [1, 0]."""
    processing = ProcessingBuffer(TWO_FIELDS)
    processing.add_rows(["a", 7], {"x": [1.0, 4.0], "mask": [[1, 0], [0, 1]]})
    processing.add_rows(["a", 7], {"x": [2.0, 5.0], "mask": [[0, 1], [1, 0]]})
    processing.add_rows(["a"], {"x": [3.0], "mask": [[1, 1]]})
    return processing


def test_append_to_update_buffer_pads_one_agents_sequences() -> None:
    update = AgentBuffer()
    two_agents().append_to_update_buffer(update, "a", training_length=2)
    assert_rows(update["x"].data, [1, 2, 3, 0])
    assert_rows(update["mask"].data, [[1, 0], [0, 1], [1, 1], [1, 1]])
    assert update["mask"].padding_value == 1.0


def test_append_to_update_buffer_key_list_and_batch_size() -> None:
    update = AgentBuffer()
    two_agents().append_to_update_buffer(update, "a", key_list=["x"], batch_size=1, training_length=2)
    assert list(update) == ["x"]
    assert_rows(update["x"].data, [2, 3])


def test_append_all_agent_batch_to_update_buffer_in_insertion_order() -> None:
    update = AgentBuffer()
    two_agents().append_all_agent_batch_to_update_buffer(update, training_length=2)
    assert_rows(update["x"].data, [1, 2, 3, 0, 4, 5])
    assert_rows(update["mask"].data, [[1, 0], [0, 1], [1, 1], [1, 1], [0, 1], [1, 0]])
    update = AgentBuffer()
    two_agents().append_all_agent_batch_to_update_buffer(update)
    assert_rows(update["x"].data, [1, 2, 3, 4, 5])


def test_append_to_update_buffer_rejects_unequal_field_lengths() -> None:
    """Every row gives every field, so an agent's fields never differ in length: a row that would
    make them differ is refused, and the agent's rows stay whole."""
    processing = two_agents()
    with pytest.raises(BufferException, match="missing"):
        processing.add_rows(["a"], {"x": [9.0]})
    with pytest.raises(BufferException, match="'mask'"):
        processing.add_rows(["a"], {"x": [9.0], "mask": [[1, 0], [0, 1]]})
    with pytest.raises(BufferException, match="not a field"):
        processing.append_to_update_buffer(AgentBuffer(), "a", key_list=["x", "y"])
    update = AgentBuffer()
    processing.append_to_update_buffer(update, "a")
    assert update.check_length() and update.num_experiences == 3
    processing.append_to_update_buffer(AgentBuffer(), "a", key_list=["x"])  # only x: consistent


def test_reset_local_buffers_empties_every_agent() -> None:
    processing = two_agents()
    processing.reset_local_buffers()
    assert list(processing) == ["a", 7]
    assert all(buffer.num_experiences == 0 for buffer in processing.values())
    assert sorted(processing["a"]) == ["mask", "x"]


MIXED_FIELDS = {
    "obs": ProcessingField((2, 3), np.float32),
    "action": ProcessingField((2,), np.int32),
    "version": ProcessingField((), np.int64),
    "mask": ProcessingField((3,), np.bool_, padding_value=1.0),
    "none": ProcessingField((0,), np.float32),
}


def mixed_rows(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.standard_normal((n, 2, 3)).astype(np.float32),
        "action": rng.integers(-5, 5, (n, 2)).astype(np.int32),
        "version": rng.integers(0, 1 << 40, n),
        "mask": rng.random((n, 3)) < 0.5,
        "none": np.zeros((n, 0), np.float32),
    }


@pytest.mark.parametrize("chunk_rows", [1, 3, 8])
def test_processing_buffer_keeps_each_agents_rows_across_chunks(chunk_rows: int) -> None:
    """Agents appended in random subsets, taken and removed at random: each agent's AgentBuffer is
    exactly its rows, in order, with each field's dtype, shape and padding value."""
    rng = np.random.default_rng(0)
    processing = ProcessingBuffer(MIXED_FIELDS, chunk_rows=chunk_rows)
    reference: dict[int, list[dict[str, np.ndarray]]] = {}
    for _ in range(200):
        ids = [int(a) for a in rng.choice(40, size=int(rng.integers(0, 20)), replace=False)]
        rows = mixed_rows(rng, len(ids))
        processing.add_rows(ids, rows)
        for r, agent_id in enumerate(ids):
            reference.setdefault(agent_id, []).append({key: rows[key][r] for key in rows})
        victim = int(rng.integers(40))
        if victim in processing and rng.random() < 0.3:
            taken = processing.take(processing.slot_of[victim])
            assert len(taken[0]) == len(reference.pop(victim))
            reference[victim] = []
        elif victim in processing and rng.random() < 0.1:
            processing.remove([victim])
            del reference[victim]
    assert sorted(processing) == sorted(reference)
    for agent_id, rows_of in reference.items():
        buffer = processing[agent_id]
        assert list(buffer) == list(MIXED_FIELDS)
        for key, spec in MIXED_FIELDS.items():
            want = np.array([row[key] for row in rows_of], spec.dtype).reshape(len(rows_of), *spec.shape)
            assert_rows(buffer[key].data, want, spec.dtype)
            assert buffer[key].padding_value == spec.padding_value


@pytest.mark.parametrize("chunk_rows", [3, 8])
def test_append_pending_makes_pending_rows_experiences_and_returns_them(chunk_rows: int) -> None:
    """The assembler's step: each slot's pending row, with one column set, becomes its next experience
    (across chunk boundaries, 3 not a power of two); the pending rows come back as they were, with
    the column set, in fresh arrays, and set_pending makes new pending rows."""
    processing = ProcessingBuffer(TWO_FIELDS, chunk_rows=chunk_rows)
    slots = np.array(processing.add_agents(["a", "b"]), dtype=np.intp)
    x_column, mask_column = processing.columns["x"], processing.columns["mask"]
    want: dict[str, list[list[float]]] = {"a": [], "b": []}
    for step in range(10):
        rows = processing.new_rows(2)
        rows[mask_column[0]][:, mask_column[1]] = [[step, 1], [step, 0]]
        processing.set_pending(slots, rows)
        lengths, previous = processing.append_pending(slots, x_column, np.array([step, -step], np.float32))
        assert lengths.tolist() == [step + 1] * 2
        assert previous[0].tolist() == [[step, step, 1], [-step, step, 0]]
        assert not np.shares_memory(previous[0], processing.pending[0])
        want["a"].append([step, step, 1])
        want["b"].append([-step, step, 0])
    for agent_id in ("a", "b"):
        rows_of = np.array(want[agent_id], np.float32)
        assert_rows(processing[agent_id]["x"].data, rows_of[:, 0])
        assert_rows(processing[agent_id]["mask"].data, rows_of[:, 1:])


def test_append_rows_of_another_dtype_or_layout_are_cast_like_an_assignment() -> None:
    """The fast path scatters whole rows as raw items only when their dtype and layout are the plane's."""
    processing = ProcessingBuffer(TWO_FIELDS)
    slots = np.array(processing.add_agents([1, 2]), dtype=np.intp)
    processing.append_rows(slots, [np.array([[1, 2, 3], [4, 5, 6]], np.float64)])
    processing.append_rows(slots, [np.asfortranarray(np.array([[7, 8, 9], [10, 11, 12]], np.float32))])
    assert_rows(processing[1]["x"].data, [1, 7])
    assert_rows(processing[2]["mask"].data, [[5, 6], [11, 12]])


def test_processing_buffer_remove_forgets_rows_pending_and_state() -> None:
    processing = ProcessingBuffer(TWO_FIELDS, agent_state={"total": ((), np.float64)})
    processing.add_rows([5, 6], {"x": [1.0, 2.0], "mask": [[1, 1], [1, 1]]})
    slot = processing.slot_of[5]
    processing.pending[0][slot] = 7.0
    processing.state["total"][slot] = 3.0
    with pytest.raises(KeyError):
        processing.remove([5, 99])  # an unknown id: nothing is forgotten
    assert list(processing) == [5, 6]
    processing.remove([5])
    assert 5 not in processing and list(processing) == [6]
    with pytest.raises(KeyError):
        processing[5]
    processing.add_rows([8], {"x": [4.0], "mask": [[0, 1]]})
    assert processing.slot_of[8] == slot, "a removed agent's slot is reused"
    assert processing.pending[0][slot].tolist() == [0.0] * processing.plane_widths[0]
    assert processing.state["total"][slot] == 0.0
    assert_rows(processing[8]["x"].data, [4.0])


def test_processing_buffer_refuses_repeated_agents_and_bad_shapes() -> None:
    processing = ProcessingBuffer(TWO_FIELDS)
    with pytest.raises(BufferException, match="repeat"):
        processing.add_rows([1, 1], {"x": [1.0, 2.0], "mask": [[1, 1], [1, 1]]})
    with pytest.raises(BufferException, match="'mask'"):
        processing.add_rows([1], {"x": [1.0], "mask": [[1, 1, 1]]})
    with pytest.raises(BufferException, match="unknown"):
        processing.add_rows([1], {"x": [1.0], "mask": [[1, 1]], "y": [0.0]})
    assert len(processing) == 0


def test_processing_buffer_memory_grows_with_rows_held_not_with_a_preallocated_horizon() -> None:
    """Bytes per agent: a pending-row-sized constant plus whole chunks of the rows it holds; the
    same agents holding 8x the rows take about 8x the chunk bytes."""
    fields = {"obs": ProcessingField((16,)), "reward": ProcessingField(), "done": ProcessingField((), np.bool_)}
    n = 4096

    def filled(rows_per_agent: int) -> ProcessingBuffer:
        processing = ProcessingBuffer(fields, chunk_rows=8)
        ids = list(range(1 << 40, (1 << 40) + n))
        for _ in range(rows_per_agent):
            processing.add_rows(ids, {"obs": np.ones((n, 16)), "reward": np.ones(n), "done": np.zeros(n, bool)})
        return processing

    one, sixty_four = filled(1).nbytes / n, filled(64).nbytes / n
    row = filled(1).row_bytes
    assert row == 16 * 4 + 4 + 1
    # One chunk (8 rows) and the per-agent constant, in doublings (so up to twice): far from the
    # 64 rows (4.4 KB) a time_horizon of 64 would preallocate.
    assert one < 2 * (8 * row + row + 200), one
    assert 64 * row <= sixty_four < 2 * (64 * row + row + 200), sixty_four


def test_processing_buffer_nbytes_is_what_it_allocates() -> None:
    """``nbytes`` (the memory model's measure) agrees with tracemalloc's count of the allocations."""
    import tracemalloc

    fields = {"obs": ProcessingField((3,)), "version": ProcessingField((), np.int64), "done": ProcessingField((), np.bool_)}
    n = 5000
    rows = {"obs": np.ones((n, 3), np.float32), "version": np.ones(n, np.int64), "done": np.ones(n, bool)}
    ids = list(range(1 << 40, (1 << 40) + n))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        processing = ProcessingBuffer(fields, agent_state={"total": ((), np.float64)})
        for _ in range(3):
            processing.add_rows(ids, rows)
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.8 * traced <= processing.nbytes <= 1.25 * traced, (processing.nbytes, traced)


def test_processing_buffer_reuses_chunks_and_slots_under_churn() -> None:
    """Agents that come, hold rows and go: the storage stops growing once it has held the peak."""
    processing = ProcessingBuffer(TWO_FIELDS, chunk_rows=4)
    sizes = []
    for episode in range(30):
        ids = list(range(episode * 100, episode * 100 + 100))
        for _ in range(9):
            processing.add_rows(ids, {"x": np.ones(100), "mask": np.ones((100, 2))})
        processing.remove(ids)
        sizes.append(processing.nbytes)
    assert len(processing) == 0
    assert sizes[-1] == sizes[1], sizes
