"""Experience buffers: AgentBufferField and AgentBuffer (the processor's per-agent store, ProcessingBuffer, is
``processor.processing_buffer``'s).

The API is ML-Agents' (``mlagents.trainers.buffer``); the storage is not. Each field keeps one
contiguous numpy array that grows geometrically (amortised O(1) append), so batching, shuffling,
sampling and truncating are single vectorised indexing operations instead of Python loops over
lists of small arrays. h5py is imported only by the HDF5 methods: the processor never loads it.

Words used below:
    row: one entry of a field, e.g. one step's observation ``float32 [32]``.
    experience: one step of one agent; an AgentBuffer holds one row per experience in each field.
    sequence: ``training_length`` consecutive rows, the unit recurrent trainers consume.

Shapes: ``L`` = rows in a field, ``T`` = training/sequence length, ``B`` = batch size in sequences.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import IO, Any

import numpy as np

from common.errors import BufferException

_MIN_CAPACITY = 16
_FILE_MARK = "stepstream_agent_buffer"
_FILE_VERSION = 1
_DATASET_PREFIX = "field_"

_rng_cache: tuple[int, np.random.Generator] | None = None


def _default_rng() -> np.random.Generator:
    """One fresh Generator per process (a forked child seeds its own), not ~20 us of OS entropy per call."""
    global _rng_cache
    if _rng_cache is None or _rng_cache[0] != os.getpid():
        _rng_cache = (os.getpid(), np.random.default_rng())
    return _rng_cache[1]


def _as_rows(x: Any) -> np.ndarray:
    """Coerce input to an array; float64 becomes float32, the dtype every network consumes."""
    arr = np.asarray(x)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return arr


def _row_arrays(values: list[Any]) -> tuple[list[np.ndarray], list[int]]:
    """Each value as an array of rows, and their row counts: an AgentBufferField's rows (its storage
    itself when full: a view costs ~0.1 us, which adds up over thousands of trajectories), anything
    else through ``np.asarray``. ``map`` over attribute getters: B1's fill makes 2240 of these."""
    if values and isinstance(values[0], AgentBufferField):  # the common case: fields that hold rows
        try:
            arrays, lengths = list(map(_DATA, values)), list(map(_LEN, values))
            if list(map(len, arrays)) != lengths:  # some field has spare capacity (or no storage: TypeError)
                arrays = [data[:k] for data, k in zip(arrays, lengths, strict=True)]
            return arrays, lengths
        except (AttributeError, TypeError):  # a value that is not a field, or a field with no storage
            pass
    arrays = [v.data if isinstance(v, AgentBufferField) else np.asarray(v) for v in values]
    return arrays, list(map(len, arrays))


_DATA = operator.attrgetter("_data")
_LEN = operator.attrgetter("_len")
_FROZEN = operator.attrgetter("_frozen")
_PADDING = operator.attrgetter("padding_value")
_IS_NONE = functools.partial(operator.is_, None)


class AgentBufferField:
    """One named column of an AgentBuffer: ``L`` rows of one shape and dtype.

    The first row appended fixes the row shape and dtype; later rows are cast to that dtype and
    must have that shape. ``padding_value`` scales the last row to make padding rows (see
    ``get_batch``): 0 gives zero rows, 1 repeats the last row (as action masks want).

    Rows are never written twice in place once ``AgentBuffer.make_mini_batch`` has lent views of
    them (``_frozen`` is set): after ``reset_field`` the next rows go to new storage, and so do the
    rows ``shuffle`` permutes, so a mini-batch stays a snapshot of the rows it was made from.
    """

    __slots__ = ("_data", "_frozen", "_len", "padding_value")

    def __init__(self, padding_value: float = 0.0) -> None:
        self._data: np.ndarray | None = None
        self._frozen: np.ndarray | None = None
        """A read-only view of the whole of ``_data``, made by the first mini-batch, which slices it; so
        not None means views of the rows were lent, and no row of this storage is written again."""
        self._len = 0
        self.padding_value = padding_value

    @classmethod
    def _adopt(cls, rows: np.ndarray, padding_value: float) -> AgentBufferField:
        """A field whose storage is ``rows`` (``[L, *row_shape]``, a fresh array nobody else holds)."""
        field = cls.__new__(cls)
        field._store(rows)
        field._len = len(rows)
        field.padding_value = padding_value
        return field

    def _store(self, data: np.ndarray | None) -> None:
        """Make ``data`` (new storage, writable, or None) the field's storage; its row count is set by the caller."""
        self._data = data
        self._frozen = None

    # -- reading ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @property
    def data(self) -> np.ndarray:
        """The ``L`` stored rows, ``[L, *row_shape]``; a read-only view, copy before mutating."""
        view = np.zeros((0,), dtype=np.float32) if self._data is None else self._data[: self._len]
        view.flags.writeable = False
        return view

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.data[index]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self.data
        if dtype is not None and np.dtype(dtype) != data.dtype:
            return data.astype(dtype)
        # np.array(field) asks for a copy: never hand out the storage itself then.
        return data.copy() if copy else data

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self.data)

    def __repr__(self) -> str:
        shape = None if self._data is None else (self._len, *self._data.shape[1:])
        return f"AgentBufferField(shape={shape}, padding_value={self.padding_value})"

    # -- writing ---------------------------------------------------------------------------------

    def _reserve(self, extra: int, row_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Make room for ``extra`` more rows of ``row_shape``; returns the storage (``dtype``: for the first rows)."""
        needed = self._len + extra
        data = self._data
        if data is None:
            data = np.empty((max(needed, _MIN_CAPACITY), *row_shape), dtype=dtype)
            self._store(data)
        elif data.shape[1:] != row_shape:
            raise BufferException(f"row shape {tuple(row_shape)} does not match the field's row shape {data.shape[1:]}")
        elif needed > len(data):
            grown = np.empty((max(needed, 2 * len(data)), *row_shape), dtype=data.dtype)
            grown[: self._len] = data[: self._len]
            self._store(data := grown)
        return data

    def append(self, element: Any, padding_value: float = 0.0) -> None:
        """Add one row. ``padding_value`` becomes the field's padding value, as in ML-Agents."""
        row = _as_rows(element)
        data = self._reserve(1, row.shape, row.dtype)
        data[self._len] = row
        self._len += 1
        self.padding_value = padding_value

    def extend(self, rows: Any) -> None:
        """Add many rows at once: ``rows`` is ``[K, *row_shape]`` (or a sequence of K rows)."""
        arr = _as_rows(rows)
        if arr.ndim == 0:
            raise BufferException("extend() needs a sequence of rows, got a scalar")
        self._extend_arrays([arr], [len(arr)])

    def _extend_arrays(self, arrays: list[np.ndarray], lengths: list[int]) -> None:
        """``extend(np.concatenate(arrays))`` without the intermediate copy: one concatenate into the storage.

        ``lengths[i]`` is ``len(arrays[i])``; empty arrays are skipped, whatever their shape.
        """
        if 0 in lengths:
            arrays = [arr for arr, k in zip(arrays, lengths, strict=True) if k]
        total = sum(lengths)
        if not total:
            return
        first = arrays[0]
        data = self._reserve(total, first.shape[1:], np.dtype(np.float32) if first.dtype == np.float64 else first.dtype)
        try:
            np.concatenate(arrays, out=data[self._len : self._len + total], casting="unsafe")
        except ValueError as err:
            raise BufferException(f"rows do not all have the field's row shape {data.shape[1:]}: {err}") from err
        self._len += total

    def set(self, data: Any) -> None:
        """Replace every row with ``data`` (``[K, *row_shape]``); the row shape may change."""
        self._len = 0
        self._store(None)
        self.extend(data)

    def reset_field(self) -> None:
        """Forget every row; the storage is kept for reuse, unless mini-batches view its rows (see the class)."""
        self._len = 0
        if self._frozen is not None and self._data is not None:
            # Keep the dtype and row shape; the next rows go to storage of their own (capacity 0 grows on use).
            self._store(np.empty((0, *self._data.shape[1:]), self._data.dtype))

    def _keep_range(self, start: int, stop: int) -> None:
        """Keep rows ``[start, stop)`` only, in O(1): the storage becomes a view from ``start`` (no rows move)."""
        if self._data is not None and start > 0:
            self._data = self._data[start:]
            if self._frozen is not None:  # the same rows: what was lent stays lent
                self._frozen = self._frozen[start:]
        self._len = stop - start

    def _freeze(self) -> np.ndarray:
        """``_frozen``, made now: a read-only view of the whole storage (callers check ``_data`` first)."""
        assert self._data is not None
        frozen = self._frozen = self._data.view()
        frozen.flags.writeable = False
        return frozen

    def _take(self, indices: np.ndarray) -> np.ndarray:
        """Rows at ``indices`` as a new array (fancy indexing copies)."""
        assert self._data is not None, "callers check the length first"
        return self._data[: self._len][indices]

    # -- batching --------------------------------------------------------------------------------

    def get_batch(self, batch_size: int | None = None, training_length: int | None = 1, sequential: bool = True) -> np.ndarray:
        """Rows for a batch of ``batch_size`` sequences of ``training_length`` rows, flattened.

        Sequential (non-overlapping sequences): with ``batch_size`` None, every row, split into
        ``ceil(L / T)`` sequences; if ``L`` is not a multiple of ``T`` the *last* sequence is
        padded at its end with ``last_row * padding_value`` rows (``[a,b,c,d,e]`` at ``T = 2``
        gives ``[a,b,c,d,e,pad]``), so every sequence starts on a real row. With fewer sequences
        asked for than exist, the newest ``batch_size * T`` rows.

        Non-sequential (overlapping windows): ``batch_size`` windows of ``T`` rows ending at the
        last ``batch_size`` rows; ``batch_size`` None means every window, ``L - T + 1`` of them.

        Returns:
            ``[batch_size * T, *row_shape]``, a new array, or a read-only view when no padding or
            windowing was needed.

        Raises:
            BufferException: ``T`` < 1, ``batch_size`` < 0, or more sequences/windows than the rows form.
        """
        length = 1 if training_length is None else int(training_length)
        if length < 1:
            raise BufferException(f"training_length must be >= 1, got {length}")
        if batch_size is not None and batch_size < 0:
            raise BufferException(f"batch_size must be >= 0, got {batch_size}")
        n = self._len
        if sequential:
            leftover = n % length
            available = n // length + (leftover != 0)
            batch = available if batch_size is None else int(batch_size)
            if batch > available:
                raise BufferException(f"batch_size {batch} > {available} sequences of length {length} in a field of {n} rows")
            if batch * length > n:
                data = self.data
                # The padding row keeps the field's dtype (int and bool fields stay int and bool).
                pad = np.asarray(data[-1] * self.padding_value).astype(data.dtype)
                return np.concatenate([data, np.broadcast_to(pad, (length - leftover, *pad.shape))])
            return self.data[n - batch * length :]
        available = n - length + 1
        batch = available if batch_size is None else int(batch_size)
        if batch > available or available < 1:
            raise BufferException(f"batch_size {batch} > {max(available, 0)} windows of {length} rows in a field of {n} rows")
        ends = np.arange(n - batch + 1, n + 1)
        index = (ends[:, np.newaxis] - length + np.arange(length)).ravel()
        return self._take(index)


class AgentBuffer(MutableMapping[str, AgentBufferField]):
    """A key -> AgentBufferField map whose fields are created on first use.

    Every field should hold one row per experience; ``check_length`` verifies that, and the
    whole-buffer operations (shuffle, sample, truncate, minibatch) raise ``BufferException`` when
    it does not hold. The key names a trajectory produces are listed in ``common.trajectory``.
    """

    def __init__(self) -> None:
        self._fields: dict[str, AgentBufferField] = {}

    # -- mapping ---------------------------------------------------------------------------------

    def __getitem__(self, key: str) -> AgentBufferField:
        field = self._fields.get(key)
        if field is None:
            field = self._fields[key] = AgentBufferField()
        return field

    def __setitem__(self, key: str, value: AgentBufferField | Any) -> None:
        if isinstance(value, AgentBufferField):
            self._fields[key] = value
        else:
            self[key].set(value)

    def __delitem__(self, key: str) -> None:
        del self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __contains__(self, key: object) -> bool:
        return key in self._fields

    def __repr__(self) -> str:
        return f"AgentBuffer({self.num_experiences} experiences, keys={sorted(self._fields)})"

    # -- whole-buffer queries --------------------------------------------------------------------

    @property
    def num_experiences(self) -> int:
        """Rows in the longest field (every field has this many when ``check_length`` holds)."""
        return max((len(f) for f in self._fields.values()), default=0)

    def check_length(self, key_list: Iterable[str] | None = None) -> bool:
        """Whether every field in ``key_list`` (default: all) has the same number of rows."""
        keys = list(self._fields) if key_list is None else list(key_list)
        return len({len(self._fields.get(k, ())) for k in keys}) <= 1

    def _uniform_length(self, key_list: Iterable[str] | None = None) -> int:
        keys = list(self._fields) if key_list is None else list(key_list)
        lengths = {k: len(self._fields.get(k, ())) for k in keys}  # a missing key is not created
        if len(set(lengths.values())) > 1:
            raise BufferException(f"fields have unequal lengths: {lengths}")
        return next(iter(lengths.values()), 0)

    # -- whole-buffer operations -----------------------------------------------------------------

    def reset_agent(self) -> None:
        """Empty every field (keeping keys and storage)."""
        for field in self._fields.values():
            field.reset_field()

    def extend_rows(self, rows: Mapping[str, Any]) -> None:
        """Append K experiences at once, one copy per field: ``rows[key]`` is ``[K, *row_shape]`` for every key.

        Raises:
            BufferException: the keys' row counts differ.
        """
        self.extend_rows_many([rows])

    def extend_rows_many(self, rows_list: Sequence[Mapping[str, Any]], key_list: Iterable[str] | None = None) -> None:
        """Append many row maps in order, one concatenate per field straight into the storage.

        The fastest way to drain a trainer's queue. ``rows_list`` holds ``to_rows()`` dicts or
        per-trajectory AgentBuffers (``rows[key]``: ``[K_i, *row_shape]``); ``key_list`` defaults to
        the first map's keys. The same as ``extend_rows`` of their concatenation.

        Raises:
            BufferException: a map whose fields differ in length, or that lacks a key.
        """
        if not rows_list:
            return
        keys = list(rows_list[0]) if key_list is None else list(key_list)
        maps = [rows._fields if isinstance(rows, AgentBuffer) else rows for rows in rows_list]  # no field created
        columns: dict[str, list[np.ndarray]] = {}
        expected: list[int] = []
        for key in keys:
            try:
                arrays, lengths = _row_arrays(list(map(operator.itemgetter(key), maps)))
            except (KeyError, TypeError) as err:
                raise BufferException(f"key {key!r}: not an array of rows in every row map ({err!r})") from err
            if not columns:
                expected = lengths
            elif lengths != expected:
                raise BufferException(f"key {key!r}: row counts {lengths} differ from {keys[0]!r}'s {expected}")
            columns[key] = arrays
        for key, arrays in columns.items():
            self[key]._extend_arrays(arrays, expected)

    def shuffle(
        self, sequence_length: int = 1, key_list: Iterable[str] | None = None, rng: np.random.Generator | None = None
    ) -> None:
        """Permute whole sequences of ``sequence_length`` rows, with one permutation for all fields.

        Raises:
            BufferException: unequal field lengths, or a length not a multiple of ``sequence_length``.
        """
        keys = list(self._fields) if key_list is None else list(key_list)
        n = self._uniform_length(keys)
        if sequence_length < 1 or n % sequence_length:
            raise BufferException(f"cannot shuffle {n} rows in whole sequences of {sequence_length}")
        rng = _default_rng() if rng is None else rng
        order = rng.permutation(n // sequence_length)
        index = (order[:, np.newaxis] * sequence_length + np.arange(sequence_length)).ravel()
        for key in keys:
            field = self[key]
            if field._data is None:
                continue
            if field._frozen is not None:  # mini-batches view these rows: the shuffled rows become new storage
                field._store(field._take(index))
            else:  # back into the storage, which the allocator need not replace (no page faults)
                field._data[:n] = field._take(index)

    def make_mini_batch(self, start: int, end: int) -> AgentBuffer:
        """A new AgentBuffer of rows ``[start, end)`` of every field, sliced as a list of the rows would be.

        No row is copied: each field of the mini-batch is a read-only view of this buffer's rows
        (``data`` is read-only anyway), and a snapshot: this buffer never overwrites rows it lent
        (``AgentBufferField``). Appending to a mini-batch field moves it to storage of its own.
        ML-Agents slices its lists of rows here; SB3 and ML-Agents' trainers shuffle once, then slice.

        The views are made when the mini-batch is first used (``_MiniBatch``); the rows they show are
        fixed now: this buffer's storage is lent (frozen) and its lengths taken here.
        """
        fields = self._fields
        values = list(fields.values())
        frozen = list(map(_FROZEN, values))
        if any(map(_IS_NONE, frozen)):  # storage not lent yet (or none): lend it now
            lend = zip(frozen, values, strict=True)
            frozen = [f if f is not None or field._data is None else field._freeze() for f, field in lend]
        mini_batch = _MiniBatch.__new__(_MiniBatch)
        mini_batch._lent = (list(fields), frozen, list(map(_LEN, values)), list(map(_PADDING, values)), start, end)
        return mini_batch

    def sample_mini_batch(
        self, batch_size: int, sequence_length: int = 1, rng: np.random.Generator | None = None
    ) -> AgentBuffer:
        """``batch_size // sequence_length`` whole sequences drawn uniformly with replacement; as in
        ML-Agents, sequences start at multiples of ``sequence_length``.

        Raises:
            BufferException: unequal field lengths, or fewer rows than one sequence.
        """
        n = self._uniform_length()
        if sequence_length < 1 or n < sequence_length:
            raise BufferException(f"cannot sample sequences of {sequence_length} from {n} rows")
        rng = _default_rng() if rng is None else rng
        starts = rng.integers(0, n // sequence_length, size=batch_size // sequence_length) * sequence_length
        index = (starts[:, np.newaxis] + np.arange(sequence_length)).ravel()
        mini_batch = AgentBuffer()
        for key, field in self._fields.items():
            mini_batch._fields[key] = AgentBufferField._adopt(field._take(index), field.padding_value)
        return mini_batch

    def truncate(self, max_length: int, sequence_length: int = 1) -> None:
        """Keep the newest rows: at most ``max_length`` rounded down to a multiple of ``sequence_length``.

        O(1) per field, no rows move. Raises BufferException for unequal field lengths or bad arguments.
        """
        if max_length < 0 or sequence_length < 1:
            raise BufferException(f"cannot truncate to {max_length} rows in sequences of {sequence_length}")
        keep = max_length - max_length % sequence_length
        n = self._uniform_length()
        if n > keep:
            for field in self._fields.values():
                field._keep_range(n - keep, n)

    def resequence_and_append(
        self,
        target_buffer: AgentBuffer,
        key_list: Iterable[str] | None = None,
        batch_size: int | None = None,
        training_length: int | None = None,
    ) -> None:
        """Append this buffer's fields to ``target_buffer`` as ``get_batch(batch_size, training_length)``."""
        keys = list(self._fields) if key_list is None else list(key_list)
        every_row = batch_size is None and training_length in (None, 1)
        for key in keys:
            field, target = self[key], target_buffer[key]
            if every_row:  # what get_batch would return, without its checks and read-only view
                target._extend_arrays(*_row_arrays([field]))
            else:
                target.extend(field.get_batch(batch_size=batch_size, training_length=training_length))
            target.padding_value = field.padding_value

    # -- HDF5 ------------------------------------------------------------------------------------

    def save_to_file(self, file_object: str | IO[bytes] | Any) -> None:
        """Write every field to HDF5 (a path or a binary file-like object), exactly: dtype, shape, key."""
        import h5py  # here, not at the top: the processor holds ProcessingBuffers and never loads h5py

        with h5py.File(file_object, "w") as f:
            f.attrs[_FILE_MARK] = _FILE_VERSION
            for i, (key, field) in enumerate(self._fields.items()):
                dataset = f.create_dataset(f"{_DATASET_PREFIX}{i}", data=field.data)
                dataset.attrs["key"] = key
                dataset.attrs["padding_value"] = field.padding_value
                dataset.attrs["typed"] = field._data is not None  # an empty field keeps its dtype and row shape

    def load_from_file(self, file_object: str | IO[bytes] | Any) -> None:
        """Replace this buffer's contents with a file written by ``save_to_file``.

        Raises:
            BufferException: the file is not HDF5, or not an AgentBuffer written by stepstream.
        """
        import h5py

        try:
            f = h5py.File(file_object, "r")
        except (OSError, ValueError) as err:
            raise BufferException(f"{file_object!r} is not an HDF5 AgentBuffer file: {err}") from err
        with f:
            if f.attrs.get(_FILE_MARK) != _FILE_VERSION:
                raise BufferException(f"{file_object!r} is an HDF5 file but not an AgentBuffer (no '{_FILE_MARK}' mark)")
            entries: dict[int, h5py.Dataset] = {}
            for name, dataset in f.items():
                index = name.removeprefix(_DATASET_PREFIX)
                if not (isinstance(dataset, h5py.Dataset) and index.isdigit() and dataset.ndim and "key" in dataset.attrs):
                    raise BufferException(f"{file_object!r}: entry {name!r} is not a buffer field")
                entries[int(index)] = dataset
            fields: dict[str, AgentBufferField] = {}
            for _, dataset in sorted(entries.items()):  # in the order they were saved
                padding, rows = float(dataset.attrs.get("padding_value", 0.0)), dataset[()]
                typed = len(rows) > 0 or dataset.attrs.get("typed", True)
                fields[str(dataset.attrs["key"])] = (
                    AgentBufferField._adopt(rows, padding) if typed else AgentBufferField(padding)
                )
        # Replace the contents only once the whole file has been read.
        self._fields = fields


class _MiniBatch(AgentBuffer):
    """``make_mini_batch``'s AgentBuffer, whose fields are made on first use of any of them.

    A trainer slices every field of each mini-batch it makes, but one that only counts or skips
    mini-batches should not pay a view per field (B1's ``make_mini_batch_all`` makes 560). ``_lent``
    holds what ``make_mini_batch`` fixed: the keys, the lender's frozen storage (None: a field with no
    storage), row counts and padding values, and the bounds.
    """

    _lent: tuple[list[str], list[np.ndarray | None], list[int], list[float], int, int]

    def __getattr__(self, name: str) -> Any:
        # Called only when the attribute is not set: ``_fields`` until the first use makes it.
        lent = self.__dict__.pop("_lent", None) if name == "_fields" else None
        if lent is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        fields = self.__dict__["_fields"] = _lent_views(*lent)
        return fields


def _lent_views(
    keys: list[str], frozen: list[np.ndarray | None], lengths: list[int], paddings: list[float], start: int, end: int
) -> dict[str, AgentBufferField]:
    """Rows ``[start, end)`` of each lent field (its frozen storage holding ``lengths`` rows), as read-only views."""
    fields: dict[str, AgentBufferField] = {}
    new_field = AgentBufferField.__new__
    bounded = 0 <= start <= end  # then one slice per field, when end is within its rows
    rows_slice, count = slice(start, end), end - start
    for key, storage, length, padding in zip(keys, frozen, lengths, paddings, strict=True):
        if storage is None:
            fields[key] = AgentBufferField(padding)
            continue
        view = new_field(AgentBufferField)  # its _frozen is set: the lender's storage is never written
        if bounded and end <= length:
            view._data = view._frozen = storage[rows_slice]
            view._len = count
        else:  # as a list of the rows would slice: never into the spare capacity
            view._data = view._frozen = rows = storage[:length][rows_slice]
            view._len = len(rows)
        view.padding_value = padding
        fields[key] = view
    return fields
