"""``stepstream train`` with Unity: a build launched with ``--env PATH``, or the Editor waited for.

mlagents-learn's ways of starting a Unity run (``cli.train`` hands them here):

* ``--env PATH``, or ``env_settings.env_path`` in the YAML (where ML-Agents users write it), names a
  build (not ``gym:`` / ``python:`` / ``simple:``): ``--num-envs`` (else ``env_settings.num_envs``)
  copies are launched on consecutive ports from ``env_settings.base_port`` (default 5005), each behind
  its own gateway
  (``envclient.unity.fleet``), and a crashed copy is restarted within ``env_settings``'
  ``max_lifetime_restarts`` and ``restarts_rate_limit_n`` / ``restarts_rate_limit_period_s``;
* no env at all while a behavior trains online (ppo, sac): one gateway on the Editor's port 5004,
  and mlagents-learn's hint ("Listening on port 5004. Start training by pressing the Play button in
  the Unity Editor."). A bc behavior still trains offline from its demos, as without Unity.

A behavior's trainer starts when Unity declares it (the gateway's ``on_declare``), since its spec
is known only then; with ``--inference`` its newest checkpoint's policy is published then instead,
and the run acts until Ctrl-C or until every build copy exited (mlagents-learn's ``--inference``
never ends on its own either). The run ends as every started trainer reaches ``max_steps``, on Ctrl-C, when
every build copy exited with 0, or fails when a copy is past its restarts. Values on Unity's stats
side channel go to the summaries (TensorBoard, tagged with Unity's key) of the behaviors stepped
with them, as mlagents-learn records an env's stats for each of its behaviors: over the wire, as
with a standalone ``stepstream unity`` (``common.environment_stats``). The YAML's
``engine_settings`` and constant ``environment_parameters`` go to Unity as with ``stepstream unity``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.config import read_yaml
from common.env_paths import GYM_PREFIX, PYTHON_PREFIX, SIMPLE_PREFIX
from common.errors import ConfigError, NotSupportedYetError
from common.specs import BrainParameters
from envclient.unity.fleet import BehaviorRefusedError, BuildFleet, RestartPolicy
from envclient.unity.gateway import DEFAULT_UNITY_PORT, GatewayServer, GatewaySettings
from envclient.unity.launcher import DEFAULT_BUILD_PORT, LaunchSettings

log = logging.getLogger(__name__)

END_RUN_TIMEOUT_S = 15.0
"""How long Unity has to quit once told to (status 400) before a build is stopped with SIGTERM."""


def is_unity_build(env: str | None) -> bool:
    """Whether an ``--env`` value names a Unity build rather than ``gym:<id>``, ``python:M:F`` or ``simple:<kind>``."""
    return env is not None and not env.startswith((GYM_PREFIX, PYTHON_PREFIX, SIMPLE_PREFIX))


@dataclass(frozen=True)
class UnityLaunch:
    """How ``stepstream train`` reaches Unity: a build (``env_path``) or the Editor (None)."""

    config: Path
    env_path: str | None = None
    num_envs: int = 1
    no_graphics: bool = False


def unity_launch(config: Path, env: str | None, num_envs: int | None) -> UnityLaunch | None:
    """The Unity build a ``stepstream train`` run launches: ``--env`` (``env``), else ``env_settings.env_path``.

    Args:
        config: the trainer YAML.
        env: ``--env``; a ``gym:`` / ``python:`` / ``simple:`` value means no build (the YAML's is replaced).
        num_envs: ``--num-envs``; None takes ``env_settings.num_envs`` (default 1).

    Returns:
        The launch, or None when neither names a build.

    Raises:
        ConfigError: ``env_settings.num_envs`` is not an integer >= 1.
        NotSupportedYetError: ``env_settings.env_path`` lists a build among other entries (one build per run).
    """
    section = _env_settings_section(config)
    build = env if env is not None else _build_in_env_path(section.get("env_path"))
    if build is None or not is_unity_build(build):
        return None
    return UnityLaunch(config, build, _num_envs(section) if num_envs is None else num_envs)


def _env_settings_section(config: Path) -> Mapping[str, Any]:
    """The YAML's ``env_settings`` mapping, as written (empty when it has none)."""
    mapping = read_yaml(config) or {}
    section = mapping.get("env_settings") if isinstance(mapping, Mapping) else None
    return section if isinstance(section, Mapping) else {}


def _build_in_env_path(env_path: object) -> str | None:
    """``env_settings.env_path`` when it is one string (a build or not); None for a list or nothing.

    Raises:
        NotSupportedYetError: a list names a Unity build (one build per run, its behaviors declared by Unity).
    """
    if isinstance(env_path, str):
        return env_path
    if isinstance(env_path, list):
        builds = [e for e in env_path if isinstance(e, str) and is_unity_build(e)]
        if builds:
            raise NotSupportedYetError(
                f"env_settings.env_path: the Unity build {builds[0]!r} in a list is not supported yet; "
                "name one build alone (its behaviors are declared by Unity)"
            )
    return None


def _num_envs(section: Mapping[str, Any]) -> int:
    """``env_settings.num_envs`` (default 1).

    Raises:
        ConfigError: not an integer >= 1.
    """
    num_envs = section.get("num_envs", 1)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigError(f"env_settings.num_envs: expected an integer >= 1, got {num_envs!r}")
    return num_envs


def without_env_path(seed: int | None) -> dict[str, Any]:
    """``load_config``'s overrides for a Unity run: no ``env_path`` (Unity declares the behaviors), ``--seed``."""
    env: dict[str, Any] = {"env_path": None, "num_envs": 1}
    if seed is not None:
        env["seed"] = seed
    return {"env_settings": env}


def unity_keys(launch: UnityLaunch) -> dict[str, dict[str, Any]]:
    """What a Unity run's ``configuration.yaml`` adds to the resolved settings: the keys only Unity reads.

    The build launched (``env_path``, ``num_envs`` as run, ``--env`` and ``--num-envs`` included), its launching keys
    and ``engine_settings``, as the YAML gave them; None of these is in ``RunOptions``.
    """
    from cli.unity import launch_keys_from_yaml

    mapping = read_yaml(launch.config) or {}
    engine = mapping.get("engine_settings") if isinstance(mapping, Mapping) else None
    env: dict[str, Any] = {} if launch.env_path is None else {"env_path": launch.env_path, "num_envs": launch.num_envs}
    out = {"env_settings": {**env, **launch_keys_from_yaml(launch.config)}}
    if isinstance(engine, Mapping) and engine:
        out["engine_settings"] = dict(engine)
    return out


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
        self_play: frozenset[str] = frozenset(),
    ) -> asyncio.Future[Any]:
        from cli.unity import EDITOR_HINT

        self.unity = dataclasses.replace(self.unity, seed=seed)
        settings = GatewaySettings(processor=processor, unity=self.unity, on_declare=on_declare, self_play=self_play)
        if self.launch.env_path is None:
            self.editor = GatewayServer(settings, port=DEFAULT_UNITY_PORT)
            port = await self.editor.start()
            log.info(EDITOR_HINT.format(port=port))
            return asyncio.ensure_future(_editor_run(self.editor))
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
        """End the run as mlagents-learn does (Unity told to quit with status 400, given ``END_RUN_TIMEOUT_S`` to do
        so), then stop what is left: builds (SIGTERM) and gateways."""
        if self.fleet is not None:
            await self.fleet.end_run(END_RUN_TIMEOUT_S)
            await self.fleet.stop()
        if self.editor is not None:
            if self.editor.gateway.unity_name is not None:
                await self.editor.end_run(END_RUN_TIMEOUT_S)
            await self.editor.stop()


async def _editor_run(editor: GatewayServer) -> None:
    """The Editor's gateway until it stops; raises once it refused a behavior (mlagents-learn stops the run on it)."""
    serving = asyncio.ensure_future(editor.wait())
    ended = asyncio.ensure_future(editor.gateway.ended.wait())
    try:
        while not serving.done():
            await asyncio.wait({serving, ended}, return_when=asyncio.FIRST_COMPLETED)
            if editor.gateway.refusal is not None:
                raise BehaviorRefusedError(editor.gateway.refusal)
            if ended.done():
                editor.gateway.ended.clear()
                ended = asyncio.ensure_future(editor.gateway.ended.wait())
    finally:
        serving.cancel()
        ended.cancel()


__all__ = ["UnityLaunch", "UnitySource", "is_unity_build", "unity_keys", "unity_launch", "without_env_path"]
