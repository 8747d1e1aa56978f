"""``Backoff``: the one capped exponential backoff of every retry loop in stepstream.

Its users: an env client reconnecting to the processor (``envclient.reconnect``, with jitter so scaled replicas
spread out), a trainer subscribing again under a name another holds and publishing a policy for a behavior not yet
known (``common.topics.grpc_transport``), and the JetStream transport's retries of a refused or failed request
(``common.topics.jetstream.connection.pause``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DEFAULT_INITIAL_S = 0.5
"""First delay of a peer's retry; doubled per failed attempt, up to ``DEFAULT_MAX_S``."""
DEFAULT_MAX_S = 10.0
"""Longest delay of a peer's retry."""
DEFAULT_JITTER = 0.2
"""Each delay is shortened by up to this fraction at random, so replicas retrying together spread out."""


@dataclass
class Backoff:
    """Capped exponential backoff with jitter: the k-th delay (k from 0) is ``min(max_s, initial_s * 2**k)``, less up
    to ``jitter`` of it at random (0: exactly that)."""

    initial_s: float = DEFAULT_INITIAL_S
    max_s: float = DEFAULT_MAX_S
    jitter: float = DEFAULT_JITTER
    attempts: int = 0
    """Delays handed out since the last ``reset``."""

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_s <= 0:
            raise ValueError(f"Backoff needs positive delays, got initial_s={self.initial_s}, max_s={self.max_s}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"Backoff.jitter must be in [0, 1), got {self.jitter}")

    def next_delay_s(self) -> float:
        """The next delay in seconds; counts an attempt."""
        delay = min(self.max_s, self.initial_s * 2.0 ** min(self.attempts, 32))
        self.attempts += 1
        return delay * (1.0 - self.jitter * random.random()) if self.jitter else delay

    def reset(self) -> None:
        """Start again from ``initial_s`` (after a success)."""
        self.attempts = 0
