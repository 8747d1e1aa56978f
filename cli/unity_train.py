"""``stepstream train`` with Unity: a build launched with ``--env PATH``, or the Editor waited for.

mlagents-learn's ways of starting a Unity run (``cli.train`` hands them here):

* ``--env PATH`` names a build (not ``gym:`` / ``simple:``): ``--num-envs`` copies are launched on
  consecutive ports from ``env_settings.base_port`` (default 5005), each behind its own gateway
  (``envclient.unity.fleet``), and a crashed copy is restarted within ``env_settings``'
  ``max_lifetime_restarts`` and ``restarts_rate_limit_n`` / ``restarts_rate_limit_period_s``;
* no env at all while a behavior trains online (ppo, sac): one gateway on the Editor's port 5004,
  and mlagents-learn's hint ("Listening on port 5004. Start training by pressing the Play button in
  the Unity Editor."). A bc behavior still trains offline from its demos, as without Unity.

A behavior's trainer starts when Unity declares it (the gateway's ``on_declare``), since its spec
is known only then. The run ends as every started trainer reaches ``max_steps``, on Ctrl-C, when
every build copy exited with 0, or fails when a copy is past its restarts. Values on Unity's stats
side channel go to the summaries (TensorBoard, tagged with Unity's key) of every trainer started so
far, as mlagents-learn records an env's stats for each of its behaviors. The YAML's
``engine_settings`` and constant ``environment_parameters`` go to Unity as with ``stepstream unity``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.env_paths import GYM_PREFIX, SIMPLE_PREFIX
from common.specs import BrainParameters
from envclient.unity.fleet import BuildFleet, RestartPolicy
from envclient.unity.gateway import DEFAULT_UNITY_PORT, GatewayServer, GatewaySettings
from envclient.unity.launcher import DEFAULT_BUILD_PORT, LaunchSettings
from envclient.unity.side_channels import StatsValue

log = logging.getLogger(__name__)


def is_unity_build(env: str | None) -> bool:
    """Whether an ``--env`` value names a Unity build rather than ``gym:<id>`` or ``simple:<kind>``."""
    return env is not None and not env.startswith((GYM_PREFIX, SIMPLE_PREFIX))


@dataclass(frozen=True)
class UnityLaunch:
    """How ``stepstream train`` reaches Unity: a build (``env_path``) or the Editor (None)."""

    config: Path
    env_path: str | None = None
    num_envs: int = 1
    no_graphics: bool = False


class UnitySource:
    """The gateways (and builds) of one ``stepstream train`` run; ``start`` returns a task that ends with them."""

    def __init__(self, launch: UnityLaunch, log_dir: Path) -> None:
        from cli.unity import launch_keys_from_yaml, unity_settings_from_yaml

        self.launch = launch
        # Read (and checked) before TensorFlow's import and the results folder.
        self.keys = launch_keys_from_yaml(launch.config)
        self.unity = unity_settings_from_yaml(launch.config)
        self.log_dir = log_dir
        self.fleet: BuildFleet | None = None
        self.editor: GatewayServer | None = None

    async def start(
        self,
        processor: str,
        seed: int,
        on_declare: Callable[[BrainParameters], None],
        on_stat: Callable[[StatsValue], None] | None = None,
    ) -> asyncio.Future[Any]:
        from cli.unity import EDITOR_HINT

        self.unity = dataclasses.replace(self.unity, seed=seed)
        settings = GatewaySettings(processor=processor, unity=self.unity, on_declare=on_declare, on_stat=on_stat)
        if self.launch.env_path is None:
            self.editor = GatewayServer(settings, port=DEFAULT_UNITY_PORT)
            port = await self.editor.start()
            log.info(EDITOR_HINT.format(port=port))
            return asyncio.ensure_future(self.editor.wait())
        restarts = RestartPolicy(
            **{k: v for k, v in self.keys.items() if k != "base_port"},
        )
        self.fleet = BuildFleet(
            settings,
            LaunchSettings(self.launch.env_path, self.launch.no_graphics or self.unity.engine.no_graphics, self.log_dir),
            num_envs=self.launch.num_envs,
            base_port=self.keys.get("base_port", DEFAULT_BUILD_PORT),
            restarts=restarts,
        )
        await self.fleet.start()
        return asyncio.ensure_future(self.fleet.run())

    async def stop(self) -> None:
        if self.fleet is not None:
            await self.fleet.stop()
        if self.editor is not None:
            await self.editor.stop()


__all__ = ["UnityLaunch", "UnitySource", "is_unity_build"]
