"""Env-client sessions: one per Step stream, made at Hello and released when the stream ends."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

from common.errors import ConfigError, ProtocolError, UnknownBehaviorError
from common.trajectory import Trajectory
from processor.assembly import FLUSH_BATCH_AGENTS, AgentBudget, TrajectoryAssembler
from processor.behaviors import Behavior
from processor.exploration import HeldNoise
from processor.groups import SessionGroups

log = logging.getLogger(__name__)

_PROCESSOR_ID_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
"""A processor id travels inside every trajectory id (and its ``Nats-Msg-Id`` header): no separators, no spaces."""

_SESSION_SUFFIX_HEX = 12
"""Hex digits of the random tail that makes a session id unique among one client's sessions."""
_HEX_DIGITS = frozenset("0123456789abcdef")


@dataclass
class Session:
    """One live Step stream: its identity, its behaviors' assemblers, and who may replace it.

    Its assemblers share one ``AgentBudget``: the live agents the session may hold over all its
    behaviors (``ProcessorSettings.max_agents_per_session``). A behavior's assembler is made when its
    first agent arrives (``assembler``), not at Hello: a session declaring 64 behaviors it never steps
    holds none (each is some 60 objects and 6 KiB, and the garbage collector scans every one).
    """

    client_id: str
    session_id: str
    behaviors: dict[str, Behavior]
    task: asyncio.Task | None
    budget: AgentBudget | None = None
    """The live agents the session may hold over all its behaviors; None: no bound."""
    assemblers: dict[str, TrajectoryAssembler] = field(default_factory=dict)
    """Per behavior that has had agents: its assembler (``assembler``)."""
    """The stream handler's task (a stopping server waits for it to flush)."""
    replaced: bool = False
    """A newer Hello with this client id took over; the old stream ends ABORTED at its next message."""
    closed: bool = False
    steps: int = field(default=0)
    noise: dict[str, HeldNoise] = field(default_factory=dict)
    """Per behavior with ``noise_hold_steps`` > 1: its agents' held action noise (``processor.exploration``)."""
    groups: SessionGroups | None = None
    """The group side of its agents, from its first BrainInfo with ``group_ids`` (``processor.groups``)."""

    def behavior(self, name: str) -> Behavior:
        """The behavior of a BrainInfo's behavior name.

        Raises:
            UnknownBehaviorError: the session's Hello did not declare it.
        """
        behavior = self.behaviors.get(name)
        if behavior is None:
            raise UnknownBehaviorError(
                f"behavior '{name}' was not declared in the Hello of session {self.session_id}"
                f" (declared: {sorted(self.behaviors)})"
            )
        return behavior

    def assembler(self, behavior: Behavior) -> TrajectoryAssembler:
        """``behavior``'s assembler in this session, made on first use."""
        assembler = self.assemblers.get(behavior.name)
        if assembler is None:
            runtime = behavior.runtime
            assembler = TrajectoryAssembler(behavior.params, self.session_id, runtime.time_horizon, self.budget)
            self.assemblers[behavior.name] = assembler
        return assembler

    async def flush(self, agents_per_batch: int = FLUSH_BATCH_AGENTS) -> AsyncIterator[tuple[str, list[Trajectory]]]:
        """Every behavior's partial trajectories (interrupted), as (behavior name, batch) pairs of at most
        ``agents_per_batch`` agents' trajectories; the session holds no agent after.

        Yields to the event loop after each batch: a session of 100,000 agents took seconds to
        flush at once, and every other session waited that long for its next answer.
        """
        self.closed = True
        for held in self.noise.values():
            held.clear()
        for name, assembler in self.assemblers.items():
            for batch in assembler.flush_batches(agents_per_batch):
                if batch:
                    yield name, batch
                await asyncio.sleep(0)


def client_id_of(session_id: str) -> str:
    """The client id inside a session id ``<processor_id>:<client_id>-<12 hex>`` (``SessionTable.open``).

    A processor id holds no ``:`` and the tail is fixed-length, so a client id that itself holds
    ``:`` or ``-`` comes back whole.

    Raises:
        ProtocolError: ``session_id`` is not of that form (no ``:``, or no ``-<12 hex>`` tail).
    """
    processor_id, colon, rest = session_id.partition(":")
    client_id, dash, tail = rest.rpartition("-")
    if not (processor_id and colon and client_id and dash and len(tail) == _SESSION_SUFFIX_HEX and set(tail) <= _HEX_DIGITS):
        raise ProtocolError(
            f"session id {session_id!r}: not of the form '<processor_id>:<client_id>-<{_SESSION_SUFFIX_HEX} hex>'"
        )
    return client_id


def default_processor_id() -> str:
    """``<hostname>-<pid>``: distinct for every processor of a deployment (each replica has its own hostname)."""
    return f"{socket.gethostname()}-{os.getpid()}"


class SessionTable:
    """Live sessions by client id; a new Hello with a live client id replaces that session.

    Args:
        processor_id: this processor's identity, the prefix of every session id it makes
            (``<processor_id>:<client_id>-<12 hex>``), so trajectory and session ids stay unique
            across the processors that publish into one broker; None: ``default_processor_id()``.

    Raises:
        ConfigError: ``processor_id`` holds a character outside letters, digits and ``-_.``.
    """

    def __init__(self, processor_id: str | None = None) -> None:
        self.processor_id = processor_id or default_processor_id()
        bad = sorted(set(self.processor_id) - _PROCESSOR_ID_CHARACTERS)
        if bad:
            raise ConfigError(f"--processor-id {self.processor_id!r}: letters, digits and '-_.' only (found {bad!r})")
        self._by_client: dict[str, Session] = {}
        self.opened = 0
        self.replaced = 0
        self.closed = 0

    def __len__(self) -> int:
        return len(self._by_client)

    def __iter__(self) -> Iterator[Session]:
        """The live sessions."""
        return iter(list(self._by_client.values()))

    def open(
        self, client_id: str, behaviors: list[Behavior], task: asyncio.Task | None, max_agents: int | None = None
    ) -> tuple[Session, Session | None]:
        """Register a new session; returns it and the live session with the same client id it replaces.

        ``max_agents`` bounds the live agents the session may hold over all its behaviors (None: no bound).

        The replaced session is only marked: the caller flushes it (``Session.flush``), and its own
        stream handler ends with ABORTED when that stream next speaks. Its task is not cancelled:
        a cancel that lands inside grpc.aio's own read or write ends the stream with INTERNAL.
        """
        session_id = f"{self.processor_id}:{client_id}-{uuid.uuid4().hex[:_SESSION_SUFFIX_HEX]}"
        session = Session(
            client_id=client_id,
            session_id=session_id,
            behaviors={b.name: b for b in behaviors},
            task=task,
            budget=None if max_agents is None else AgentBudget(max_agents),
            noise={b.name: held for b in behaviors if (held := b.held_noise()) is not None},
        )
        old = self._by_client.get(client_id)
        if old is not None and not old.closed:
            old.replaced = True
            self.replaced += 1
            log.warning("client '%s': session %s replaced by %s", client_id, old.session_id, session_id)
        else:
            old = None
        self._by_client[client_id] = session
        self.opened += 1
        for behavior in behaviors:
            behavior.session_started()
        return session, old

    def handler_tasks(self) -> list[asyncio.Task]:
        """The stream-handler tasks of the live sessions (a server waits for them when stopping)."""
        return [s.task for s in self._by_client.values() if s.task is not None and not s.task.done()]

    def close(self, session: Session) -> None:
        """Forget the session (its handler flushed it)."""
        if self._by_client.get(session.client_id) is session:
            del self._by_client[session.client_id]
        self.closed += 1
        for behavior in session.behaviors.values():
            behavior.session_ended()
