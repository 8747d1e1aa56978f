"""``ProcessingBuffer``: agent id -> that agent's AgentBuffer, the processor's per-agent trajectory store.

ML-Agents' noun (``mlagents.trainers.buffer``), its one user the trajectory assembler (``processor.assembly``). It
keeps every agent's rows in shared chunked pools, so one BrainInfo's rows go in with one scatter per dtype; what it
hands out are ``common.buffer.AgentBuffer``s (docs/architecture.md, "Buffers").
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.buffer import AgentBuffer, AgentBufferField
from common.errors import BufferException


def _put_rows(items: np.ndarray, rows_of: np.ndarray, index: np.ndarray, rows: np.ndarray) -> None:
    """``rows_of[index] = rows`` for a 2-D C-contiguous ``rows_of`` whose rows ``items`` views as one void item each.

    ``ndarray.put`` of whole rows as items is about twice as fast as the fancy-index assignment on
    the narrow planes a step writes (numpy's per-call cost dominates at a few hundred rows), and no
    slower on image planes. Rows of another dtype, or not contiguous, take the assignment.
    """
    if rows.dtype == rows_of.dtype and rows.flags.c_contiguous:
        items.put(index, rows.view(items.dtype))
    else:
        rows_of[index] = rows


def _row_items(rows_of: np.ndarray) -> np.ndarray:
    """``rows_of`` (2-D, C-contiguous) as a 1-D array of one void item per row, the same memory."""
    return rows_of.view(np.dtype((np.void, rows_of.shape[1] * rows_of.itemsize))).reshape(-1)


@dataclass(frozen=True)
class ProcessingField:
    """One field of a ProcessingBuffer: every row is ``dtype [*shape]``."""

    shape: tuple[int, ...] = ()
    dtype: Any = np.float32
    """Anything ``np.dtype`` takes; fields of one dtype share one storage plane."""
    padding_value: float = 0.0
    """The padding value of the field in the agent's AgentBuffer (see ``AgentBufferField``)."""


_ID_TABLE_OBJECT_BYTES = 2 * sys.getsizeof(1 << 40)
"""What one agent's entry keeps alive besides the dict's own table: its id and slot int objects."""


class ProcessingBuffer(Mapping[Hashable, AgentBuffer]):
    """Agent id -> that agent's AgentBuffer: the per-agent staging area before the update buffer, vectorised.

    The processor's assembler keeps every agent of one (session, behavior) here, and so does any
    code that builds per-agent rows and moves them to an update buffer. Fields are fixed at
    construction (``ProcessingField``); every row an agent holds has every field. Per agent (its
    *slot*) the buffer holds:

    * its experiences: ``lengths[slot]`` rows of every field, until taken (``take``) or reset;
    * ``pending``: one more row of every field, the agent's last row, which is not an experience
      yet (the processor's previous BrainInfo row, still waiting for the reward that follows it);
    * ``state``: per-agent values declared at construction (``agent_state``), e.g. episode totals.

    Storage. Fields of one dtype share a *plane*: a 2-D array whose columns are those fields'
    flattened rows (``columns``), so appending one row to each of ``N`` agents is one scatter per
    plane, not one per field (numpy's per-call cost dominates at a few hundred rows; the scatter
    puts whole rows as raw items, ``_put_rows``). Experiences
    live in chunks of ``chunk_rows`` rows drawn from one pool per plane and linked per agent, so
    an agent holds the chunks its rows fill and no more: memory grows with the rows actually held,
    never with a preallocated maximum (``time_horizon``) per agent seen. Slots, the pending rows and
    the pool grow geometrically and are reused; they are freed with the buffer.

    Bytes held per agent, with ``W`` = one row's bytes (``row_bytes``), ``S`` = its ``agent_state``
    bytes, ``c`` = ``chunk_rows``: ``W + S + 24`` (pending row, state, three int64 counters) plus
    about 110 for its id table entry (the dict's slot and the id and slot int objects), plus
    ``ceil(rows / c) * (c * W + 16)`` for the experiences it holds (a chunk and its two int64 links).
    Slots and chunks are allocated in doublings and reused, never shrunk: up to twice that at the
    buffer's peak, freed with the buffer. ``nbytes`` counts it (tracemalloc agrees, see the tests).

    The seed's API stays: ``buffer[agent_id]`` is an AgentBuffer (a copy of the agent's
    experiences), ``append_to_update_buffer``, ``append_all_agent_batch_to_update_buffer`` and
    ``reset_local_buffers``. Shapes: ``N`` agents in one call, ``K`` slots, ``t`` rows of one agent,
    ``w_p`` the width of plane ``p``.
    """

    def __init__(
        self,
        fields: Mapping[str, ProcessingField],
        agent_state: Mapping[str, tuple[tuple[int, ...], Any]] | None = None,
        chunk_rows: int = 8,
    ) -> None:
        if chunk_rows < 1:
            raise BufferException(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.fields = dict(fields)
        self.chunk_rows = chunk_rows
        self._chunk_mask = chunk_rows - 1 if chunk_rows & (chunk_rows - 1) == 0 else 0
        """``chunk_rows - 1`` when it is a power of two (a row starts a chunk when ``row & mask`` is 0), else 0."""
        dtypes: list[np.dtype] = []
        widths: list[int] = []
        self.columns: dict[str, tuple[int, slice]] = {}
        """Field -> (plane, columns of that plane); plane -1 for a field with no values per row."""
        for key, spec in self.fields.items():
            dtype, width = np.dtype(spec.dtype), int(np.prod(spec.shape, dtype=np.int64))
            if not width:
                self.columns[key] = (-1, slice(0, 0))
                continue
            if dtype not in dtypes:
                dtypes.append(dtype)
                widths.append(0)
            p = dtypes.index(dtype)
            self.columns[key] = (p, slice(widths[p], widths[p] + width))
            widths[p] += width
        self.plane_dtypes: tuple[np.dtype, ...] = tuple(dtypes)
        self.plane_widths: tuple[int, ...] = tuple(widths)
        self.row_bytes = sum(w * d.itemsize for w, d in zip(widths, dtypes, strict=True))
        """Bytes of one row of every field."""
        self._state_specs = dict(agent_state or {})
        self.slot_of: dict[Hashable, int] = {}
        """Agent id -> its slot, in the order the agents were added."""
        self._free_slots: list[int] = []
        self._capacity = 0
        # Per slot (first axis K): rows held, the pool row its next row goes to (a multiple of
        # chunk_rows: it needs a new chunk), its first chunk (-1: none).
        self.lengths = np.zeros(0, np.int64)
        """int64 [K]: experiences each slot holds."""
        self._next_row = np.zeros(0, np.int64)
        self._head = np.zeros(0, np.int64)
        self.pending: list[np.ndarray] = [np.zeros((0, w), d) for w, d in zip(widths, dtypes, strict=True)]
        """Plane p: ``[K, w_p]``, each slot's pending row (zeros for an agent's first)."""
        self.state: dict[str, np.ndarray] = {
            name: np.zeros((0, *shape), dtype) for name, (shape, dtype) in self._state_specs.items()
        }
        """Name -> ``[K, *shape]``: the ``agent_state`` values of each slot (zeros for a new agent)."""
        # The chunk pool: plane p is [Q * chunk_rows, w_p]; chunk q's successor; a stack of free chunks.
        self._chunks: list[np.ndarray] = [np.empty((0, chunk_rows, w), d) for w, d in zip(widths, dtypes, strict=True)]
        """Plane p's pool as ``[Q, chunk_rows, w_p]``; ``_pool`` is the same memory as ``[Q * chunk_rows, w_p]`` rows."""
        self._pool: list[np.ndarray] = [chunks.reshape(0, w) for chunks, w in zip(self._chunks, widths, strict=True)]
        # The pool's and the pending rows' planes as one void item per row (_put_rows), kept with them.
        self._pool_items = [_row_items(pool) for pool in self._pool]
        self._pending_items = [_row_items(pending) for pending in self.pending]
        self._chunk_next = np.zeros(0, np.int64)
        self._free_chunks = np.zeros(0, np.int64)
        self._n_free = 0

    # -- the mapping -----------------------------------------------------------------------------

    def __getitem__(self, agent_id: Hashable) -> AgentBuffer:
        """A copy of the agent's experiences, one AgentBufferField per field.

        Raises:
            KeyError: the buffer holds no such agent.
        """
        slot = self.slot_of[agent_id]
        return self._agent_buffer(self.rows(slot), int(self.lengths[slot]), self.fields)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.slot_of)

    def __len__(self) -> int:
        return len(self.slot_of)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self.slot_of

    def __repr__(self) -> str:
        return f"ProcessingBuffer({len(self)} agents, {int(self.lengths.sum())} rows, fields={list(self.fields)})"

    # -- packed rows -----------------------------------------------------------------------------

    def new_rows(self, n: int) -> list[np.ndarray]:
        """Uninitialised packed rows for ``n`` agents: plane p is ``[n, w_p]``; fill every column."""
        return [np.empty((n, w), d) for w, d in zip(self.plane_widths, self.plane_dtypes, strict=True)]

    # -- agents ----------------------------------------------------------------------------------

    def add_agents(self, agent_ids: Sequence[Hashable]) -> list[int]:
        """Give each agent of ``agent_ids`` (distinct, none held) a slot with no rows; returns the slots."""
        free = self._free_slots
        if len(free) < len(agent_ids):
            self._grow_slots(max(2 * self._capacity, len(self.slot_of) + len(agent_ids), 8))
        slots = free[len(free) - len(agent_ids) :][::-1]
        del free[len(free) - len(agent_ids) :]
        self.slot_of.update(zip(agent_ids, slots, strict=True))
        return slots

    def remove(self, agent_ids: Iterable[Hashable]) -> None:
        """Forget these agents: their rows, pending rows and state; their slots are reused.

        Raises:
            KeyError: an agent the buffer does not hold.
        """
        agent_ids = list(agent_ids)
        slots = [self.slot_of[agent_id] for agent_id in agent_ids]  # every id known before any is forgotten
        if not slots:
            return
        for agent_id in agent_ids:
            del self.slot_of[agent_id]
        for slot in slots:
            if self.lengths[slot]:
                self._clear(slot)
        s = np.array(slots, dtype=np.intp)
        for pending in self.pending:
            pending[s] = 0
        for values in self.state.values():
            values[s] = 0
        self._free_slots.extend(slots)

    def _grow_slots(self, capacity: int) -> None:
        old = self._capacity

        def grown(arr: np.ndarray, fill: int = 0) -> np.ndarray:
            new = np.full((capacity, *arr.shape[1:]), fill, arr.dtype)
            new[:old] = arr
            return new

        self.lengths, self._next_row, self._head = grown(self.lengths), grown(self._next_row), grown(self._head, -1)
        self.pending = [grown(p) for p in self.pending]
        self._pending_items = [_row_items(pending) for pending in self.pending]
        self.state = {name: grown(values) for name, values in self.state.items()}
        # Popped from the end: the lowest new slot first.
        self._free_slots[:0] = range(capacity - 1, old - 1, -1)
        self._capacity = capacity

    # -- rows ------------------------------------------------------------------------------------

    def append_rows(self, slots: np.ndarray, rows: Sequence[np.ndarray]) -> np.ndarray:
        """Append one experience to each slot of ``slots`` (int [N], distinct): ``rows[p]`` is plane p ``[N, w_p]``.

        The fast path, unchecked (``add_rows`` checks). Returns int64 [N], the slots' new lengths.
        """
        at = self._next_rows(slots)
        for items, pool, plane in zip(self._pool_items, self._pool, rows, strict=True):
            _put_rows(items, pool, at, plane)
        lengths: np.ndarray = self.lengths.take(slots) + 1
        self.lengths[slots] = lengths
        return lengths

    def append_pending(
        self, slots: np.ndarray, column: tuple[int, slice], values: np.ndarray
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Make each slot's pending row its next experience, with ``column`` (a ``columns`` entry) set to ``values``.

        The assembler's step: the pending row (the previous BrainInfo's row and what was returned
        for it) becomes an experience once the reward that follows it is known. The fast path,
        unchecked: ``slots`` int [N], distinct; ``values`` ``[N]`` (a one-column field).

        Returns:
            int64 [N], the slots' new lengths; and the pending rows as they were, plane p a new
            ``[N, w_p]`` array (``column`` set), the caller's to reuse (the next pending rows, say).
        """
        at = self._next_rows(slots)
        rows = [pending.take(slots, axis=0) for pending in self.pending]
        p, columns = column
        rows[p][:, columns.start] = values
        for items, plane in zip(self._pool_items, rows, strict=True):
            items.put(at, plane.view(items.dtype))  # the plane's own rows, fresh from take: no check (_put_rows)
        lengths: np.ndarray = self.lengths.take(slots) + 1
        self.lengths[slots] = lengths
        return lengths, rows

    def set_pending(self, slots: np.ndarray, rows: Sequence[np.ndarray]) -> None:
        """Make ``rows`` (plane p ``[N, w_p]``) the pending rows of ``slots`` (int [N], distinct); unchecked."""
        for items, pending, plane in zip(self._pending_items, self.pending, rows, strict=True):
            _put_rows(items, pending, slots, plane)

    def _next_rows(self, slots: np.ndarray) -> np.ndarray:
        """The pool rows the slots' next experiences go to (int64 [N]), linking a fresh chunk to each
        slot whose last chunk is full (or that has none); the slots' next rows move on by one."""
        # ndarray.take, not fancy indexing: several times faster on these narrow arrays.
        at = self._next_row.take(slots)
        # A power-of-two chunk is tested with a bit mask: half the cost of ``at % c == 0``.
        k = ((at & self._chunk_mask) == 0 if self._chunk_mask else at % self.chunk_rows == 0).nonzero()[0]
        if len(k):
            # These slots' last chunk is full (or they have none): link a fresh chunk to each.
            c = self.chunk_rows
            chunks = self._take_chunks(len(k))
            full = at[k]
            if 0 not in full:  # every slot has a chunk (``in``, not ``.all()``: no Python-level numpy wrapper)
                self._chunk_next[full // c - 1] = chunks
            else:
                linked = full > 0
                self._chunk_next[full[linked] // c - 1] = chunks[linked]
                self._head[slots[k[~linked]]] = chunks[~linked]
            at[k] = chunks * c
        self._next_row[slots] = at + 1
        return at

    def add_rows(self, agent_ids: Sequence[Hashable], rows: Mapping[str, Any]) -> None:
        """Append one experience to each agent of ``agent_ids`` (new agents are added): ``rows[key]`` is
        ``[N, *shape]`` for every field, so an agent's fields never differ in length.

        Raises:
            BufferException: a repeated agent id, a missing or unknown key, or a wrong shape.
        """
        n = len(agent_ids)
        if len(set(agent_ids)) != n:
            raise BufferException(f"agent ids repeat in one append: {list(agent_ids)}")
        if set(rows) != set(self.fields):
            raise BufferException(
                f"rows must give every field: missing {sorted(set(self.fields) - set(rows))},"
                f" unknown {sorted(set(rows) - set(self.fields))}"
            )
        packed = self.new_rows(n)
        for key, value in rows.items():
            arr, spec = np.asarray(value), self.fields[key]
            if arr.shape != (n, *spec.shape):
                raise BufferException(f"key {key!r}: rows of shape {list(arr.shape)}, expected {[n, *spec.shape]}")
            p, columns = self.columns[key]
            if p >= 0:
                packed[p][:, columns] = arr.reshape(n, columns.stop - columns.start)
        get = self.slot_of.get
        slots = [get(agent_id, -1) for agent_id in agent_ids]
        new = [r for r, slot in enumerate(slots) if slot < 0]
        for r, slot in zip(new, self.add_agents([agent_ids[r] for r in new]), strict=True):
            slots[r] = slot
        self.append_rows(np.array(slots, dtype=np.intp), packed)

    def _chunks_of(self, slot: int) -> list[int]:
        length, chunk_next = int(self.lengths[slot]), self._chunk_next
        q = int(self._head[slot])
        chunks = [q]
        for _ in range((length - 1) // self.chunk_rows):
            q = int(chunk_next[q])
            chunks.append(q)
        return chunks

    def rows(self, slot: int) -> list[np.ndarray]:
        """The slot's experiences, packed: plane p is a new ``[t, w_p]`` array."""
        return self._gather(slot, self._chunks_of(slot) if self.lengths[slot] else [])

    def take(self, slot: int) -> list[np.ndarray]:
        """``rows(slot)``, after which the slot holds no experiences (its pending row and state stay)."""
        if not self.lengths[slot]:
            return self._gather(slot, [])
        chunks = self._chunks_of(slot)
        rows = self._gather(slot, chunks)
        self._clear(slot, chunks)
        return rows

    def _gather(self, slot: int, chunks: list[int]) -> list[np.ndarray]:
        t, c = int(self.lengths[slot]), self.chunk_rows
        if len(chunks) == 1:
            start = chunks[0] * c
            return [pool[start : start + t].copy() for pool in self._pool]
        if not chunks:
            return [np.empty((0, w), d) for w, d in zip(self.plane_widths, self.plane_dtypes, strict=True)]
        # Whole chunks at once (no row index to build); the last chunk's unused rows are cut off.
        n = len(chunks) * c
        index = np.array(chunks)
        return [pool.take(index, axis=0).reshape(n, -1)[:t] for pool in self._chunks]

    def _clear(self, slot: int, chunks: list[int] | None = None) -> None:
        """The slot's chunks go back to the free stack (``chunks``: ``_chunks_of(slot)``, if known)."""
        chunks = self._chunks_of(slot) if chunks is None else chunks
        self._free_chunks[self._n_free : self._n_free + len(chunks)] = chunks
        self._n_free += len(chunks)
        self.lengths[slot] = 0
        self._next_row[slot] = 0
        self._head[slot] = -1

    def _take_chunks(self, m: int) -> np.ndarray:
        """``m`` free chunk ids (int64 [m]), growing the pool (doubling) when too few are free."""
        if self._n_free < m:
            old = len(self._chunk_next)
            count = max(2 * old, old + m - self._n_free, 8)
            c = self.chunk_rows
            for p, pool in enumerate(self._chunks):
                grown = np.empty((count, c, pool.shape[2]), pool.dtype)
                grown[:old] = pool
                self._chunks[p] = grown
                self._pool[p] = grown.reshape(count * c, -1)
                self._pool_items[p] = _row_items(self._pool[p])
            self._chunk_next = np.concatenate([self._chunk_next, np.zeros(count - old, np.int64)])
            free = np.empty(count, np.int64)
            free[: self._n_free] = self._free_chunks[: self._n_free]
            free[self._n_free : self._n_free + count - old] = np.arange(count - 1, old - 1, -1)
            self._free_chunks = free
            self._n_free += count - old
        self._n_free -= m
        return self._free_chunks[self._n_free : self._n_free + m].copy()

    # -- the seed's API --------------------------------------------------------------------------

    def _agent_buffer(self, rows: list[np.ndarray], t: int, key_list: Iterable[str]) -> AgentBuffer:
        """An AgentBuffer of the ``key_list`` fields of ``t`` packed ``rows``."""
        buffer = AgentBuffer()
        for key in key_list:
            spec = self.fields.get(key)
            if spec is None:
                raise BufferException(f"key {key!r} is not a field of this ProcessingBuffer (fields: {list(self.fields)})")
            p, columns = self.columns[key]
            values = np.zeros((t, *spec.shape), spec.dtype) if p < 0 else np.ascontiguousarray(rows[p][:, columns])
            buffer[key] = AgentBufferField._adopt(values.reshape(t, *spec.shape), spec.padding_value)
        return buffer

    def append_to_update_buffer(
        self,
        update_buffer: AgentBuffer,
        agent_id: Hashable,
        key_list: Iterable[str] | None = None,
        batch_size: int | None = None,
        training_length: int | None = None,
    ) -> None:
        """Append one agent's rows to ``update_buffer`` in sequences of ``training_length`` (see ``get_batch``).

        Raises:
            KeyError: the buffer holds no such agent.
            BufferException: a key that is not a field.
        """
        keys = list(self.fields) if key_list is None else list(key_list)
        slot = self.slot_of[agent_id]
        agent_buffer = self._agent_buffer(self.rows(slot), int(self.lengths[slot]), keys)
        agent_buffer.resequence_and_append(update_buffer, keys, batch_size, training_length)

    def append_all_agent_batch_to_update_buffer(
        self,
        update_buffer: AgentBuffer,
        key_list: Iterable[str] | None = None,
        batch_size: int | None = None,
        training_length: int | None = None,
    ) -> None:
        """``append_to_update_buffer`` for every agent, in the order they were added."""
        for agent_id in self.slot_of:
            self.append_to_update_buffer(update_buffer, agent_id, key_list, batch_size, training_length)

    def reset_local_buffers(self) -> None:
        """Empty every agent's experiences; the agents, their pending rows and state stay."""
        for slot in self.slot_of.values():
            if self.lengths[slot]:
                self._clear(slot)

    # -- accounting ------------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes allocated for this buffer: every array, plus the id table with its id and slot objects."""
        arrays = [self.lengths, self._next_row, self._head, self._chunk_next, self._free_chunks, *self.pending, *self._chunks]
        table = sys.getsizeof(self.slot_of) + len(self.slot_of) * _ID_TABLE_OBJECT_BYTES + sys.getsizeof(self._free_slots)
        return sum(a.nbytes for a in arrays) + sum(v.nbytes for v in self.state.values()) + table
