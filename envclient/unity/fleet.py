"""N copies of a Unity build, each with its own gateway, restarted when they crash (mlagents-learn's way).

Facts from ML-Agents 1.1.0 (``mlagents.trainers.settings.EnvironmentSettings``, ``cli_utils``,
``subprocess_env_manager``): ``--num-envs N`` starts N copies, copy ``i`` on port ``base_port + i``
(``--base-port``, default 5005); a copy that fails is restarted while it has quota: fewer than
``max_lifetime_restarts`` restarts so far (default 10; -1: no limit) and fewer than
``restarts_rate_limit_n`` restarts (default 1; -1: no limit) within the last
``restarts_rate_limit_period_s`` seconds (default 60). Past its quota the run fails.

Each copy gets a ``GatewayServer`` of its own on its port: a build is one Unity session, and a
restarted build dials the same port again, which starts a new session with fresh agent state
(``gateway``'s lifecycle). A copy that exits with 0 is done and not restarted; any other exit code
(a crash, SIGKILL) is a failure.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import StepstreamError
from envclient.unity.gateway import GatewayServer, GatewaySettings
from envclient.unity.launcher import DEFAULT_BUILD_PORT, LaunchSettings, UnityBuild

log = logging.getLogger(__name__)

DEFAULT_MAX_LIFETIME_RESTARTS = 10
DEFAULT_RESTARTS_RATE_LIMIT_N = 1
DEFAULT_RESTARTS_RATE_LIMIT_PERIOD_S = 60.0


class BuildFailedError(StepstreamError):
    """A build copy failed with no restart quota left."""


class BehaviorRefusedError(StepstreamError):
    """A copy's gateway refused a behavior and told the copy to quit (mlagents-learn stops the run on it)."""


@dataclass(frozen=True)
class RestartPolicy:
    """ML-Agents' restart quota per copy (module docstring); -1 lifts a limit."""

    max_lifetime_restarts: int = DEFAULT_MAX_LIFETIME_RESTARTS
    restarts_rate_limit_n: int = DEFAULT_RESTARTS_RATE_LIMIT_N
    restarts_rate_limit_period_s: float = DEFAULT_RESTARTS_RATE_LIMIT_PERIOD_S


class RestartQuota:
    """One copy's restarts so far, against a ``RestartPolicy`` (``clock``: monotonic seconds)."""

    def __init__(self, policy: RestartPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self.restarts = 0
        self._recent: collections.deque[float] = collections.deque()
        self._clock = clock

    def allows(self) -> bool:
        """Whether one more restart is within the quota (ML-Agents' ``_worker_has_restart_quota``)."""
        now = self._clock()
        while self._recent and self._recent[0] <= now - self.policy.restarts_rate_limit_period_s:
            self._recent.popleft()
        lifetime = self.policy.max_lifetime_restarts
        rate = self.policy.restarts_rate_limit_n
        return (lifetime == -1 or self.restarts < lifetime) and (rate == -1 or len(self._recent) < rate)

    def record(self) -> None:
        self.restarts += 1
        self._recent.append(self._clock())


class BuildFleet:
    """``num_envs`` copies of one build on consecutive ports, each behind its own gateway.

    ``run`` returns when every copy has exited with 0, and raises ``BuildFailedError`` when a copy fails
    past its quota; ``stop`` ends the copies and the gateways (also after ``run`` failed).
    """

    def __init__(
        self,
        settings: GatewaySettings,
        launch: LaunchSettings,
        num_envs: int = 1,
        base_port: int = DEFAULT_BUILD_PORT,
        restarts: RestartPolicy = RestartPolicy(),
        host: str = "127.0.0.1",
    ) -> None:
        if num_envs < 1:
            raise StepstreamError(f"num_envs must be >= 1, got {num_envs}")
        self.settings = settings
        self.launch = launch
        self.num_envs = num_envs
        self.base_port = base_port
        self.restarts = restarts
        self.gateways = []
        for i in range(num_envs):
            client_id = f"{settings.client_id}-{i}" if num_envs > 1 else settings.client_id
            port = base_port + i if base_port else 0
            self.gateways.append(GatewayServer(dataclasses.replace(settings, client_id=client_id), host=host, port=port))
        self.builds = [UnityBuild(dataclasses.replace(launch, worker_id=i)) for i in range(num_envs)]
        self.quotas = [RestartQuota(restarts) for _ in range(num_envs)]
        self.ports: list[int] = []
        self._stopping = False

    async def start(self) -> list[int]:
        """Listen on every copy's port (``base_port`` 0: any free ones); returns the ports."""
        self.ports = [await gateway.start() for gateway in self.gateways]
        return self.ports

    async def run(self) -> None:
        """Start every copy and keep it running (module docstring); call ``start`` first."""
        await asyncio.gather(*(self._keep(i) for i in range(self.num_envs)))

    async def _keep(self, i: int) -> None:
        build, quota = self.builds[i], self.quotas[i]
        while True:
            await build.start(self.ports[i])
            code = await build.wait()
            if self._stopping:  # ended by stop() or end_run(): not a crash
                return
            if self.gateways[i].gateway.refusal is not None:
                raise BehaviorRefusedError(self.gateways[i].gateway.refusal)
            if code == 0:
                log.info("Unity build copy %d (port %d) exited", i, self.ports[i])
                return
            if not quota.allows():
                raise BuildFailedError(
                    f"the Unity build {build.executable} (copy {i}, port {self.ports[i]}) exited with code {code} and has no "
                    f"restart left ({quota.restarts} restarts; max_lifetime_restarts {self.restarts.max_lifetime_restarts}, "
                    f"restarts_rate_limit_n {self.restarts.restarts_rate_limit_n} per "
                    f"{self.restarts.restarts_rate_limit_period_s:g} s)"
                )
            quota.record()
            log.warning(
                "Unity build copy %d (port %d) exited with code %d: restarting it (restart %d)",
                i,
                self.ports[i],
                code,
                quota.restarts,
            )

    async def end_run(self, timeout_s: float) -> None:
        """End the run as mlagents-learn does: every copy is told to quit (status 400) at its next call, and given up
        to ``timeout_s`` to exit on its own; ``stop`` ends what is left."""
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await asyncio.gather(*(gateway.end_run(timeout_s) for gateway in self.gateways))
        for build in self.builds:
            if build.process is not None and build.process.returncode is None:
                try:
                    await asyncio.wait_for(build.process.wait(), max(0.0, deadline - loop.time()))
                except asyncio.TimeoutError:
                    log.warning("a Unity build copy did not quit within %g s of being told to", timeout_s)

    @property
    def refusal(self) -> str | None:
        """Why a gateway ended the run itself (a refused behavior), if one did."""
        return next((g.gateway.refusal for g in self.gateways if g.gateway.refusal is not None), None)

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.gather(*(build.stop() for build in self.builds))
        await asyncio.gather(*(gateway.stop() for gateway in self.gateways))


__all__ = ["BehaviorRefusedError", "BuildFailedError", "BuildFleet", "RestartPolicy", "RestartQuota"]
