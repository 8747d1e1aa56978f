"""``train`` flags that set a key of every behavior, as ``mlagents-learn``'s do: ``--deterministic`` and
``--initialize-from RUN_ID``; and the check, before TensorFlow loads, that every ``init_path`` names a folder.

- ``--deterministic`` sets ``network_settings.deterministic: true`` for every behavior (and ``default_settings``):
  they act with the distribution's mode, in training runs and with ``--inference``.
- ``--initialize-from RUN_ID`` sets ``init_path`` to ``<results-dir>/RUN_ID/<behavior>`` for every behavior whose
  config gives none (ML-Agents' ``CheckpointSettings.maybe_init_path``): its trainer starts from that run's newest
  checkpoint, at step 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from cli.results import CHECKPOINTS_DIR
from common.config import BehaviorSettings, RunOptions
from common.errors import ConfigError


def _deterministic(settings: BehaviorSettings) -> BehaviorSettings:
    return dataclasses.replace(settings, network_settings=dataclasses.replace(settings.network_settings, deterministic=True))


def with_deterministic(run_options: RunOptions, deterministic: bool) -> RunOptions:
    """``run_options`` with every behavior acting deterministically when ``deterministic`` (``--deterministic``)."""
    if not deterministic:
        return run_options
    default = run_options.default_settings
    return dataclasses.replace(
        run_options,
        behaviors={name: _deterministic(s) for name, s in run_options.behaviors.items()},
        default_settings=None if default is None else _deterministic(default),
    )


def with_initialize_from(run_options: RunOptions, results_dir: Path, run_id: str | None) -> RunOptions:
    """``run_options`` with ``init_path = results_dir/run_id/<behavior>`` where a behavior has none; None keeps them."""
    if run_id is None:
        return run_options
    behaviors = {
        name: s if s.init_path is not None else dataclasses.replace(s, init_path=str(results_dir / run_id / name))
        for name, s in run_options.behaviors.items()
    }
    return dataclasses.replace(run_options, behaviors=behaviors)


def check_init_paths(
    config: Path, run_options: RunOptions, behaviors: Iterable[str], *, resume: bool = False, inference: bool = False
) -> None:
    """Refuse an ``init_path`` of a trained behavior that holds no checkpoint folder (``--resume`` and ``--inference``
    ignore them: the run's own checkpoints are loaded).

    Raises:
        ConfigError: naming the file, the dotted key and the folder.
    """
    if resume or inference:
        return
    for name in behaviors:
        init_path = run_options.settings_for(name).init_path
        if init_path is None:
            continue
        path = Path(init_path)
        if not (path / CHECKPOINTS_DIR).is_dir() and not any(path.glob("ckpt-*.json")):
            raise ConfigError(
                f"{config}: behaviors.{name}.init_path: {path} holds no checkpoints (give <results-dir>/<run-id>/<behavior>"
                " of a finished run, or --initialize-from RUN_ID)"
            )
