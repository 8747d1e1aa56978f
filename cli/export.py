"""``stepstream export CHECKPOINT --out FILE.onnx``: a checkpoint's policy as the ONNX model Unity runs.

CHECKPOINT is what ``stepstream record --checkpoint`` takes: a ``ckpt-<step>.policy.pb``, its
``ckpt-<step>`` prefix, a ``checkpoints`` folder, a behavior's results folder, or a run's
``results/<run-id>`` (a folder means its newest checkpoint; a run folder with several behaviors
needs ``--behavior``). The model follows ML-Agents 1.1.0's contract (``trainer.onnx_export``, whose
docstring says which continuous transform it embeds); every checkpoint already writes one
(``ckpt-<step>.onnx``, and ``results/<run-id>/<behavior>.onnx`` for the newest).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from cli.record import find_policy_file
from common.errors import ConfigError
from protos import pb

log = logging.getLogger(__name__)

ONNX_SUFFIX = ".onnx"


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export",
        help="write a checkpoint's policy as an ONNX model for Unity (ML-Agents' model contract)",
        description="Convert a trained checkpoint's policy (its ckpt-<step>.policy.pb) into the .onnx model Unity's "
        "ML-Agents inference runs: inputs obs_0... and action_masks, outputs continuous_actions, discrete_actions, "
        "deterministic_*, version_number 3, memory_size, *_action_output_shape; opset 9.",
    )
    parser.add_argument(
        "checkpoint",
        metavar="CHECKPOINT",
        help="a ckpt-<step>.policy.pb, its ckpt-<step> prefix, or a checkpoints, behavior or run folder (newest checkpoint)",
    )
    parser.add_argument("--out", required=True, metavar="FILE.onnx", help="the .onnx file to write")
    parser.add_argument("--behavior", metavar="NAME", help="the behavior to export from a run folder with several")
    parser.add_argument("--force", action="store_true", help="overwrite FILE.onnx if it exists")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    return run_export(Path(args.checkpoint), Path(args.out), args.behavior, args.force)


def _behavior_of(path: Path, behavior_name: str | None) -> str:
    """The behavior to look under in a run folder: ``--behavior``, else the only one with checkpoints."""
    if behavior_name is not None:
        return behavior_name
    found = sorted(p.parent.name for p in path.glob("*/checkpoints") if p.is_dir()) if path.is_dir() else []
    if len(found) > 1:
        raise ConfigError(f"CHECKPOINT {path}: a run folder with behaviors {found}; choose one with --behavior")
    return found[0] if found else ""


def run_export(checkpoint: Path, out: Path, behavior_name: str | None = None, force: bool = False) -> int:
    """Writes the ONNX model of the policy at ``checkpoint`` to ``out``; returns the exit code (0).

    Raises:
        ConfigError: no saved policy at ``checkpoint``, one that does not parse or convert, another
            behavior than ``behavior_name``, or an existing ``out`` without ``force``.
    """
    if out.suffix != ONNX_SUFFIX:
        raise ConfigError(f"--out {out}: must end in {ONNX_SUFFIX} (an ONNX model for Unity)")
    if out.exists() and not force:
        raise ConfigError(f"--out {out}: exists (use --force to overwrite)")
    try:
        policy_file = find_policy_file(checkpoint, _behavior_of(checkpoint, behavior_name))
    except ConfigError as err:
        raise ConfigError(str(err).replace("--checkpoint", "CHECKPOINT", 1)) from None
    update = pb.PolicyUpdate()
    try:
        update.ParseFromString(policy_file.read_bytes())
    except ValueError as err:  # protobuf's DecodeError
        raise ConfigError(f"CHECKPOINT {policy_file}: not a saved policy: {err}") from err
    if behavior_name is not None and update.behavior_name != behavior_name:
        raise ConfigError(f"CHECKPOINT {policy_file}: a policy of behavior {update.behavior_name!r}, not {behavior_name!r}")
    from cli.console import load_tensorflow

    load_tensorflow()  # tf2onnx imports TensorFlow: its native start-up noise (and the converter's) filtered out
    from trainer.onnx_export import continuous_transform, write_onnx  # TensorFlow (tf2onnx): after every refusal

    try:
        write_onnx(update, out)
    except ValueError as err:
        raise ConfigError(f"CHECKPOINT {policy_file}: cannot convert to ONNX: {err}") from err
    artifact = update.artifact
    transform = continuous_transform(artifact.tanh_squash, artifact.clip) if artifact.action_spec.continuous_size else "none"
    log.info(
        "exported %s (behavior %s, policy version %d, continuous transform %s) to %s",
        policy_file,
        update.behavior_name,
        update.version,
        transform,
        out,
    )
    return 0
