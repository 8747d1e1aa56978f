"""A run's results folder, ``<results-dir>/<run-id>/`` (ARCHITECTURE.md, "Results layout"), for ``train`` and ``trainer``.

``train`` owns the whole run folder; the stack's trainers share one, each owning its behavior's
folder. Both write the resolved ``configuration.yaml`` atomically.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cli.run_config import describe_spec
from common.config import RunOptions
from common.errors import ConfigError, ProtocolError
from common.specs import ActionSpec, BrainParameters
from protos import pb

if TYPE_CHECKING:
    from processor.inference import Policy

log = logging.getLogger(__name__)

RUN_LOGS_DIR = "run_logs"
CHECKPOINTS_DIR = "checkpoints"
"""``trainer.loop.CHECKPOINTS_DIR``, written here because importing the trainer loads TensorFlow."""
CHECKPOINT_GLOB = "ckpt-*.index"
"""One file per saved checkpoint (``trainer.checkpoint``)."""
POLICY_SUFFIX = ".policy.pb"
"""``ckpt-<step>.policy.pb``: the PolicyUpdate published when the checkpoint was taken (``trainer.checkpoint``)."""
RECORD_SUFFIX = ".json"
"""``ckpt-<step>.json``: the checkpoint's commit record, ``{"step", "version", ...}``, written last."""


def has_checkpoint(behavior_dir: Path) -> bool:
    """Whether ``<run>/<behavior>/checkpoints`` holds a saved checkpoint."""
    return any((behavior_dir / CHECKPOINTS_DIR).glob(CHECKPOINT_GLOB))


def can_act_with_checkpoint(behavior_dir: Path) -> bool:
    """Whether ``--inference`` has something to act with there: a saved policy or a TensorFlow checkpoint."""
    return newest_saved_policy(behavior_dir) is not None or has_checkpoint(behavior_dir)


def newest_saved_policy(behavior_dir: Path) -> tuple[Path, int, int] | None:
    """``(path, step, version)`` of the newest committed checkpoint's saved policy in ``<behavior>/checkpoints``; None
    when the newest committed checkpoint saved none (an earlier layout) or there is no committed checkpoint.

    Committed: its record is readable and names its own step (``trainer.checkpoint``'s commit rule). Only the newest
    committed checkpoint counts, so this never acts with an older policy than a TensorFlow restore would.
    """
    folder = behavior_dir / CHECKPOINTS_DIR
    records = []
    for path in folder.glob(f"ckpt-*{RECORD_SUFFIX}"):
        digits = path.name.removeprefix("ckpt-").removesuffix(RECORD_SUFFIX)
        if digits.isdigit():
            records.append((int(digits), path))
    for step, path in sorted(records, reverse=True):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            version = int(record["version"])
            if int(record["step"]) != step:
                continue
        except (OSError, ValueError, KeyError, TypeError):  # not committed (cut short): the next newest
            continue
        policy = folder / f"ckpt-{step}{POLICY_SUFFIX}"
        return (policy, step, version) if policy.is_file() else None
    return None


def load_saved_policy(path: Path, params: BrainParameters, what: str) -> tuple[pb.PolicyUpdate, Policy]:
    """The ``PolicyUpdate`` saved at ``path`` and the processor's ``Policy`` of it, checked against ``params``.

    Raises:
        ConfigError: (starting with ``what``) the file is not a loadable policy, or it takes other observations or
            actions than the behavior declares.
    """
    from processor.inference import Policy  # LiteRT: imported only where a policy is loaded

    update = pb.PolicyUpdate()
    try:
        update.ParseFromString(path.read_bytes())
        policy = Policy.from_update(update)
    except (ProtocolError, ValueError, OSError) as err:  # protobuf's DecodeError is a ValueError
        raise ConfigError(f"{what}: not a loadable policy: {err}") from err
    actions = ActionSpec.from_proto(policy.action_spec)
    shapes = [tuple(o.shape) for o in params.observation_specs]
    if actions != params.action_spec or list(policy.observation_shapes) != shapes:
        acts = describe_spec(BrainParameters(params.behavior_name, (), actions)).split(", actions ")[1]
        raise ConfigError(
            f"{what}: the policy takes observations {policy.observation_shapes} and acts {acts}; "
            f"behavior {params.behavior_name!r} has {describe_spec(params)}"
        )
    return update, policy


def check_resumed_spec(run_dir: Path, params: BrainParameters, env_path: str) -> None:
    """Refuse ``--resume`` of a behavior whose newest checkpoint was trained on another spec than its env's now.

    Read from the policy saved beside the checkpoint (LiteRT), so in a second, before TensorFlow loads; a
    checkpoint that saved no policy (an earlier layout) is not checked.

    Raises:
        ConfigError: one line naming both specs.
    """
    from cli.console import native_stderr_filtered

    saved = newest_saved_policy(run_dir / params.behavior_name)
    if saved is None:
        return
    path, step, _ = saved
    try:
        with native_stderr_filtered():  # LiteRT's own notices
            load_saved_policy(path, params, f"--resume: {run_dir / params.behavior_name} (ckpt-{step})")
    except ConfigError as err:
        raise ConfigError(
            f"{err} ({env_path}): resume with the env it was trained on, or train this one under another --run-id"
        ) from None


def checkpoint_steps(behavior_dir: Path) -> list[int]:
    """Steps of the checkpoints saved in ``<behavior>/checkpoints`` (their ``ckpt-<step>.index`` files), ascending."""
    steps = []
    for path in (behavior_dir / CHECKPOINTS_DIR).glob(CHECKPOINT_GLOB):
        digits = path.name.removeprefix("ckpt-").removesuffix(".index")
        if digits.isdigit():
            steps.append(int(digits))
    return sorted(steps)


def checkpointed_behaviors(run_dir: Path) -> dict[str, list[int]]:
    """Every behavior folder of ``run_dir`` that holds a checkpoint, with its checkpoints' steps."""
    found = {}
    for folder in sorted(p for p in run_dir.iterdir() if p.is_dir()) if run_dir.is_dir() else []:
        steps = checkpoint_steps(folder)
        if steps:
            found[folder.name] = steps
    return found


def check_resumable(run_dir: Path, behaviors: Iterable[str], *, inference: bool = False) -> None:
    """Refuse ``--resume`` / ``--inference`` of a run folder with no checkpoint; name each behavior that starts fresh.

    Called before anything is written into ``run_dir``: a refused command leaves the run it names as it was.

    Raises:
        ConfigError: no behavior has a checkpoint (``--resume`` would silently start from scratch; the message
            names the behaviors whose checkpoints the folder does hold, the mark of another run under this
            run id), or, with ``inference``, one behavior has none to act with.
    """
    names = list(behaviors)
    found = can_act_with_checkpoint if inference else has_checkpoint  # --inference: a saved policy alone will do
    missing = [name for name in names if not found(run_dir / name)]
    others = {name: steps for name, steps in checkpointed_behaviors(run_dir).items() if name not in names}
    held = "; ".join(f"{name}: {', '.join(f'ckpt-{s}' for s in steps)}" for name, steps in others.items())
    if inference and missing:
        if others:
            raise ConfigError(
                f"{run_dir} has no checkpoint of {missing[0]} to run with --inference; it holds checkpoints of another "
                f"run ({held}): choose that run's --run-id, or the config of its behaviors"
            )
        raise ConfigError(f"{run_dir / missing[0] / CHECKPOINTS_DIR}: no checkpoint to run with --inference")
    if names and len(missing) == len(names):
        if others:
            raise ConfigError(
                f"{run_dir} has no checkpoint of {', '.join(names)}; it holds checkpoints of another run ({held}): "
                "choose another --run-id, or pass --force to overwrite that run"
            )
        raise ConfigError(
            f"{run_dir} holds no checkpoint to resume (its run stopped before its first one): "
            "run without --resume, with --force to start it again"
        )
    for name in missing:
        log.warning("%s: no checkpoint in %s; this behavior starts from scratch", name, run_dir / name / CHECKPOINTS_DIR)


def check_unfinished(run_dir: Path, run_options: RunOptions, behaviors: Iterable[str]) -> None:
    """Refuse ``--resume`` of a run whose every behavior already reached its ``max_steps``: it would do nothing.

    Raises:
        ConfigError: each of ``behaviors`` has a checkpoint at or past its ``max_steps``.
    """
    reached = {}
    for name in behaviors:
        steps = checkpoint_steps(run_dir / name)
        if not steps or steps[-1] < run_options.settings_for(name).max_steps:
            return
        reached[name] = steps[-1]
    if reached:
        done = ", ".join(f"{n} at step {s} of max_steps {run_options.settings_for(n).max_steps}" for n, s in reached.items())
        raise ConfigError(
            f"{run_dir} is finished ({done}): nothing to resume; pass --max-steps N (above {max(reached.values())}) "
            "to train on, or --inference to watch it act"
        )


@contextlib.contextmanager
def removed_if_unstarted(path: Path, fresh: bool) -> Iterator[None]:
    """On a failure inside, remove ``path`` when this command created it and it holds no checkpoint yet.

    So a failed start (a bad env, a port in use, Ctrl-C during start-up) leaves nothing behind, and
    the corrected command needs no ``--force``.
    """
    try:
        yield
    except BaseException:
        if fresh and path.is_dir() and not any(path.rglob(CHECKPOINT_GLOB)):
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed %s: the run failed before its first checkpoint", path)
        raise


def _make_dirs(path: Path, flag_value: Path) -> None:
    """``path.mkdir(parents=True, exist_ok=True)``, or one ConfigError naming ``--results-dir``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".write-test")  # a mode check would not see read-only mounts
        probe.close()
    except OSError as err:
        raise ConfigError(f"--results-dir {flag_value}: cannot write {path}: {err.strerror or err}") from None


def write_configuration(run_dir: Path, run_options: RunOptions, unity_keys: Mapping[str, Any] | None = None) -> None:
    """Write the resolved ``configuration.yaml`` atomically (stack trainers share the run folder).

    ``unity_keys``: the sections only a Unity build reads (``cli.unity_train.unity_keys``), for a run that
    launched one; ``run_options`` holds none of them (Unity declares the behaviors), so they are merged back in
    here: the file names the build it trained with, as ML-Agents' does, and reruns the same run.
    """
    resolved = run_options.to_dict()
    for section, keys in (unity_keys or {}).items():
        resolved[section] = {**resolved.get(section, {}), **keys}
    fd, tmp = tempfile.mkstemp(prefix="configuration.yaml", suffix=".tmp", dir=run_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yaml.safe_dump(resolved, out, sort_keys=False)
        os.replace(tmp, run_dir / "configuration.yaml")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def prepare_run_dir(
    run_dir: Path,
    run_options: RunOptions,
    *,
    resume: bool = False,
    force: bool = False,
    inference: bool = False,
    unity_keys: Mapping[str, Any] | None = None,
) -> Path:
    """Create (or reuse with ``resume`` / ``inference``, or wipe with ``force``) ``run_dir`` for ``stepstream train``.

    Raises:
        ConfigError: the run exists and neither resume, force nor inference was given, or
            resume/inference name a run that does not exist.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--results-dir {run_dir.parent}: {run_dir} is a file, not a run folder")
    if run_dir.exists() and force:
        shutil.rmtree(run_dir)
    elif run_dir.exists() and not (resume or inference):
        raise ConfigError(f"{run_dir} already exists: pass --resume to continue it, or --force to overwrite it")
    elif not run_dir.exists() and (resume or inference):
        raise ConfigError(f"{run_dir} does not exist: nothing to {'resume' if resume else 'run'}")
    _make_dirs(run_dir / RUN_LOGS_DIR, run_dir.parent)
    if not inference:
        write_configuration(run_dir, run_options, unity_keys)
    return run_dir


def prepare_behavior_dir(run_dir: Path, behavior_name: str, run_options: RunOptions, *, resume: bool = False) -> Path:
    """Create ``run_dir/<behavior>`` for a stack trainer and write ``configuration.yaml``; returns ``run_dir``.

    Trainers share the run folder, so only this behavior's must be new (or resumed).

    Raises:
        ConfigError: the behavior's folder holds an earlier run and ``resume`` is false.
    """
    behavior_dir = run_dir / behavior_name
    if not resume and behavior_dir.is_dir() and any(behavior_dir.iterdir()):
        raise ConfigError(f"{behavior_dir} already exists: pass --resume to continue it, or choose another --run-id")
    _make_dirs(behavior_dir, run_dir.parent)
    _make_dirs(run_dir / RUN_LOGS_DIR, run_dir.parent)
    write_configuration(run_dir, run_options)
    return run_dir
