"""A cache of the exporter's probe conversions (``trainer.export``, "weight patching").

The three probe conversions a ``TFLiteExporter`` needs before its first export depend only on the
traced graph, the converter's version and fixed probe values, never on the network's weights; so a
later run of the same network reads them from here instead of converting (~0.4-0.7 s of start-up).
Nothing read from here is trusted: the exporter rebuilds the template from the bytes, checks that
each probe's patch reproduces its conversion byte for byte and runs the first export against the TF
forward, as it does after converting. A missing, unreadable or damaged entry means converting again.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

logger = logging.getLogger(__name__)

PROBE_CACHE_ENV = "STEPSTREAM_CACHE_DIR"
"""Environment variable naming the cache folder; set to an empty string, no cache is used."""
_PROBE_CACHE_FORMAT = b"stepstream-tflite-probes-1"  # part of every key: bump when the probes or the layout change
MAX_ENTRIES = 64
"""Entries kept (~15 KB each for a 2x64 MLP); storing one more removes the least recently used."""


def probe_cache_dir() -> Path | None:
    """Where probe conversions are cached: ``$STEPSTREAM_CACHE_DIR/tflite-probes``, else
    ``$XDG_CACHE_HOME`` (or ``~/.cache``) ``/stepstream/tflite-probes``; None when the variable is set empty."""
    root = os.environ.get(PROBE_CACHE_ENV)
    if root is None:
        root = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepstream")
    return Path(root) / "tflite-probes" if root else None


_NAME_ATTRS = frozenset({"_user_specified_name", "shared_name", "container", "_class"})
"""Node attributes that only name things: two traces of one network differ in them, never in the conversion."""


def graph_signature(graph_def: Any) -> bytes:
    """The graph with its names left out: each node's op, its inputs as (node index, port) and its
    other attributes (constants' values included). Keras numbers layer names per process
    (``dense_1``, ``dense_1_2``, ...), so the raw GraphDef would differ between two traces of the same
    network; the conversion does not. Library functions (none for an inlined forward) count as they are."""
    index = {node.name: i for i, node in enumerate(graph_def.node)}
    parts = []
    for node in graph_def.node:
        inputs = []
        for ref in node.input:
            name, _, port = ref.lstrip("^").partition(":")
            inputs.append(("^" if ref.startswith("^") else "", index.get(name, name), port))
        attrs = sorted((k, v.SerializeToString(deterministic=True)) for k, v in node.attr.items() if k not in _NAME_ATTRS)
        parts.append(repr((node.op, inputs, attrs)).encode())
    parts.extend(f.SerializeToString(deterministic=True) for f in graph_def.library.function)
    return b"\n".join(parts)


def probe_cache_key(concrete: Any, shapes: Sequence[tuple[int, ...]]) -> str:
    """Hash of what the probe conversions depend on: the converter's version, the traced graph, the shapes."""
    digest = hashlib.sha256(_PROBE_CACHE_FORMAT)
    digest.update(tf.__version__.encode())
    digest.update(repr(list(shapes)).encode())
    digest.update(graph_signature(concrete.graph.as_graph_def()))
    return digest.hexdigest()


def load_probes(path: Path, count: int) -> list[bytes] | None:
    """The ``count`` cached conversions at ``path``, or None (absent or unreadable: convert instead)."""
    try:
        with np.load(path) as stored:
            models = [stored[f"arr_{i}"].tobytes() for i in range(count)]
        path.touch()  # recently used: pruned last
    except (OSError, ValueError, KeyError) as err:
        if path.exists():
            logger.warning("ignoring the unreadable probe cache %s: %s", path, err)
        return None
    return models


def store_probes(path: Path, models: Sequence[bytes]) -> None:
    """Write the conversions atomically (a concurrent run reads the old file or the new, never half)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, *(np.frombuffer(m, np.uint8) for m in models))
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(buffer.getvalue())
        os.replace(partial, path)
        _prune(path.parent, MAX_ENTRIES)
    except OSError as err:  # a read-only home only costs the next run its conversions
        logger.debug("probe cache not written to %s: %s", path, err)


def _prune(folder: Path, keep: int) -> None:
    """Remove all but the ``keep`` most recently used entries (a hit touches its file, see ``load_probes``)."""
    entries = sorted(folder.glob("*.npz"), key=lambda entry: entry.stat().st_mtime, reverse=True)
    for entry in entries[keep:]:
        entry.unlink(missing_ok=True)
