"""A bounded filter of already-seen keys, to drop redelivered trajectories by id."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Deduplicator(Generic[K]):
    """Remembers the ``capacity`` most recently seen keys (LRU); not thread-safe.

    A trajectory topic delivers at least once: the deliveries a subscriber had not acked when it
    detached come again, flagged ``redelivered``; a trainer drops them by ``Trajectory.id``. When
    the subscriber acks in delivery order, every item delivered after a redelivered one was also
    unacked, so at most the queue's ``max_size`` keys separate the two copies: ``capacity >=
    max_size`` suffices; take a few times that for margin.

    Args:
        capacity: how many keys to remember, >= 1.

    Raises:
        ValueError: ``capacity`` < 1.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._keys: OrderedDict[K, None] = OrderedDict()
        self.duplicates = 0
        """How many ``seen`` calls returned True."""

    @property
    def capacity(self) -> int:
        return self._capacity

    def seen(self, key: K) -> bool:
        """Record ``key``; True iff it was already among the remembered keys (a duplicate)."""
        keys = self._keys
        if key in keys:
            keys.move_to_end(key)
            self.duplicates += 1
            return True
        keys[key] = None
        if len(keys) > self._capacity:
            keys.popitem(last=False)
        return False

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)
