"""An env client that survives the processor going away: reconnect with capped exponential backoff.

Use ``ReconnectingEnvClient`` for a long-running simulator: after a retryable status
(``RETRYABLE_STATUSES``; a refused connection gives UNAVAILABLE) it opens a new session and starts
new episodes; any other status is raised as a clear ``StepstreamError`` (UNAUTHENTICATED for a missing
or wrong token among them: retrying cannot fix it). Its counters (``retries``, ``sessions``,
``connected``, and the env's ``steps`` and ``episodes``) are what ``envclient.metrics`` exports.

Several processors: ``address`` may name more than one (``processor_target``), and every session's
channel balances with gRPC's own ``round_robin`` policy over what gRPC's resolver returns: a list of
IP literals (``ipv4:`` target), or one DNS name with several addresses (``dns:///processor:50051``,
e.g. a scaled compose service). The policy picks only a connected processor, so after the
processor of a session dies (its stream ends UNAVAILABLE) the next session lands on a live one. A
session never moves mid-episode: the new one starts new episodes, and the old one's partial
trajectories are lost with its processor (``RunStats.sent_experiences`` of ``session_records``
counts what each session sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections import deque
from dataclasses import dataclass, field

import grpc
import numpy as np

from common.backoff import Backoff
from common.errors import ConfigError, StepstreamError
from common.logs import log_context
from common.security import PLAINTEXT, ChannelOptions, ClientSecurity
from common.topics.grpc_status import TRAINING_FINISHED_STATUS
from common.topics.grpc_transport import KEEPALIVE_OPTIONS
from envclient.runner import RunStats, VectorEnv, VectorEnvWrapper, run_env
from envclient.session import EnvSession, StepRejectedError

log = logging.getLogger(__name__)

SESSION_CLOSE_TIMEOUT_S = 5.0
"""How long closing a session waits for the processor to flush it."""
_CODE = grpc.StatusCode
RETRYABLE_STATUSES = frozenset({_CODE.UNAVAILABLE, _CODE.CANCELLED, _CODE.DEADLINE_EXCEEDED, _CODE.RESOURCE_EXHAUSTED})
"""Statuses after which an env client reconnects; any other ends it (retrying cannot help). UNAVAILABLE: the
processor is unreachable, restarting or stopping; CANCELLED: the stream was cut as it stopped; DEADLINE_EXCEEDED:
no first policy in time (the trainer is still starting); RESOURCE_EXHAUSTED: the trajectory topic stayed full past
``publish_timeout_s``."""
LOAD_BALANCING_OPTIONS = (("grpc.lb_policy_name", "round_robin"),)
"""gRPC's own balancer over every address the target resolves to; with one address it is pick-first."""
SESSION_RECORDS = 1000
"""Newest sessions ``ReconnectingEnvClient.session_records`` keeps."""


def processor_target(address: str) -> str:
    """The gRPC target of ``--processor``: several ``HOST:PORT`` (IP literals) become one ``ipv4:``/``ipv6:`` target.

    ``"127.0.0.1:50051,127.0.0.1:50052"`` -> ``"ipv4:127.0.0.1:50051,127.0.0.1:50052"``. One address,
    or a target with a scheme (``dns:///processor:50051``, ``ipv4:...``, ``unix:...``), is gRPC's as given.

    Raises:
        ConfigError: a list mixes IPv4 and IPv6, or names a host that is not an IP literal (gRPC
            resolves a list of literals only: give one DNS name that resolves to all of them).
    """
    parts = [part.strip() for part in address.split(",")]
    if len(parts) == 1 or ":/" in address or address.startswith(("ipv4:", "ipv6:", "unix:", "dns:")):
        return address
    families = set()
    for part in parts:
        host, _, port = part.rpartition(":")
        try:
            families.add(ipaddress.ip_address(host.strip("[]")).version)
        except ValueError:
            raise ConfigError(
                f"--processor {address!r}: {part!r} is not IP:PORT; a list takes IP literals only "
                "(or give one DNS name that resolves to every processor, e.g. dns:///processor:50051)"
            ) from None
        if not port.isdigit():
            raise ConfigError(f"--processor {address!r}: {part!r} has no port")
    if len(families) > 1:
        raise ConfigError(f"--processor {address!r}: mixes IPv4 and IPv6 addresses; give one family")
    return f"ipv{families.pop()}:{','.join(parts)}"


def processor_channel(address: str, security: ClientSecurity = PLAINTEXT) -> grpc.Channel:
    """A synchronous channel to every processor ``address`` names (``processor_target``), balanced by ``round_robin``:
    a trainer's queries through a broker go to any processor of the behavior."""
    from common.topics.grpc_transport import MESSAGE_SIZE_OPTIONS

    return security.channel(processor_target(address), [*MESSAGE_SIZE_OPTIONS, *KEEPALIVE_OPTIONS, *LOAD_BALANCING_OPTIONS])


@dataclass
class SessionRecord:
    """One session a ``ReconnectingEnvClient`` opened: its id (the processor's identity first) and what it sent."""

    session_id: str
    stats: RunStats = field(default_factory=RunStats)
    ended_by: str = ""
    """The status that ended it (empty: it ended normally)."""


class _CountingEnv(VectorEnvWrapper):
    """A ``VectorEnv`` that counts the steps and finished episodes of the env it wraps (across sessions)."""

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        self.steps = 0
        self.episodes = 0

    def step(
        self, continuous_actions: np.ndarray, discrete_actions: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        obs, rewards, terminated, truncated = self.env.step(continuous_actions, discrete_actions)
        self.steps += 1
        self.episodes += int(np.count_nonzero(np.asarray(terminated) | np.asarray(truncated)))
        return obs, rewards, terminated, truncated


class ReconnectingEnvClient:
    """One behavior's env, stepped through sessions with the processor at ``address``, reconnecting after retryable failures.

    Every session starts new episodes (``run_env`` resets the env): no agent continues an episode whose
    earlier steps went to a processor that is gone. ``stop`` stops it after the step in flight;
    ``max_env_steps`` counts BrainInfos across sessions (None: until ``stop``); ``backoff`` is reset
    after every session that stepped; ``channel_options`` add to (or, by key, replace) the keepalive and
    ``round_robin`` options of every session's channel. The default ``backoff`` is ``common.backoff``'s: 0.5 s
    doubling to 10 s, with jitter so scaled replicas spread out.
    """

    def __init__(
        self,
        address: str,
        client_id: str,
        behavior_name: str,
        env: VectorEnv,
        stop: asyncio.Event,
        *,
        max_env_steps: int | None = None,
        backoff: Backoff | None = None,
        security: ClientSecurity = PLAINTEXT,
        channel_options: ChannelOptions = (),
    ) -> None:
        self.address = address
        self._channel_options: list[tuple[str, int | str]] = [*KEEPALIVE_OPTIONS, *LOAD_BALANCING_OPTIONS, *channel_options]
        self.target = processor_target(address)
        self.client_id = client_id
        self.behavior_name = behavior_name
        self.env = _CountingEnv(env)
        self.stop = stop
        self.max_env_steps = max_env_steps
        self.backoff = backoff or Backoff()
        self.security = security
        self.retries = 0
        """Sessions that failed to open or ended by a retryable status (reconnects)."""
        self.sessions = 0
        """Sessions opened (Hellos accepted)."""
        self.connected = False
        """A session is open right now."""
        self.training_finished = False
        """The processor ended a session with ``TRAINING_FINISHED_STATUS``: the run is over, this client is done."""
        self.session_records: deque[SessionRecord] = deque(maxlen=SESSION_RECORDS)
        """The newest sessions opened, oldest first."""

    def _finished(self) -> bool:
        if self.training_finished or self.stop.is_set():
            return True
        return self.max_env_steps is not None and self.env.steps >= self.max_env_steps

    async def run(self) -> int:
        """Step until stopped or ``max_env_steps``; returns the env steps sent.

        Raises:
            StepstreamError: the processor ended a session with a status outside ``RETRYABLE_STATUSES``.
        """
        with log_context(client_id=self.client_id, behavior=self.behavior_name):
            return await self._run()

    async def _run(self) -> int:
        while not self._finished():
            steps_before = self.env.steps
            lost = await self._session()
            if lost is None:
                continue
            if self.env.steps > steps_before:
                self.backoff.reset()
            delay_s = self.backoff.next_delay_s()
            self.retries += 1
            log.warning("%s: no session with %s (%s); retrying in %.1f s", self.behavior_name, self.address, lost, delay_s)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay_s)
        return self.env.steps

    async def _session(self) -> StepRejectedError | None:
        """One session, stepped until finished (None) or ended by a retryable status (returned)."""
        session = EnvSession(
            self.target,
            self.client_id,
            [self.env.brain_parameters],
            channel_options=self._channel_options,
            security=self.security,
        )
        record: SessionRecord | None = None
        try:
            record = SessionRecord(await session.open())
            self.session_records.append(record)
            self.sessions += 1
            self.connected = True
            remaining = None if self.max_env_steps is None else self.max_env_steps - self.env.steps
            await run_env(session, self.env, self.behavior_name, max_env_steps=remaining, stop=self.stop, stats=record.stats)
            return None
        except StepRejectedError as err:
            if record is not None:
                record.ended_by = err.code.name
            if err.code == TRAINING_FINISHED_STATUS:  # the trainer reached max_steps: a normal end, never a reconnect
                log.info("training of %s finished; env client '%s' ends", self.behavior_name, self.client_id)
                self.training_finished = True
                return None
            if err.code not in RETRYABLE_STATUSES and not err.write_after_end:
                where = f"{self.behavior_name}: the processor at {self.address} refused client '{self.client_id}'"
                raise StepstreamError(f"{where}: {err} (not retryable; exiting)") from err
            return err
        finally:
            self.connected = False
            try:
                await session.close(SESSION_CLOSE_TIMEOUT_S)
            except Exception as err:  # a broken stream has nothing left to flush
                log.debug("closing session of client '%s': %s", self.client_id, err)
