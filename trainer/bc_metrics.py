"""How well a cloned policy matches held-out demonstrations: the split and the scores in ``bc_metrics.json``.

Pure numpy, used by ``trainer.bc``. Shapes: ``K`` rows, ``C`` continuous dimensions, ``nB``
discrete branches, ``M = sum(branches)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

HOLDOUT_FRACTION = 0.1
"""Share of the demonstration rows kept out of training to score the policy."""
HOLDOUT_SEED = 20240607
"""Fixed seed of the held-out split: the same file always holds out the same rows."""
BC_METRICS_FILE = "bc_metrics.json"
"""Written by ``write_report`` in ``results/<run-id>/<behavior>/``."""


def split_rows(
    rows: Mapping[str, np.ndarray], fraction: float, seed: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(train, held-out): a random ``round(fraction * K)`` of the K rows held out, both in file order."""
    k = len(next(iter(rows.values())))
    held = np.sort(np.random.default_rng(seed).permutation(k)[: round(fraction * k)])
    keep = np.ones(k, bool)
    keep[held] = False
    return {key: v[keep] for key, v in rows.items()}, {key: v[held] for key, v in rows.items()}


def branch_accuracy(logits: np.ndarray, mask: np.ndarray, expert: np.ndarray, branches: Sequence[int]) -> dict[str, Any]:
    """Greedy (masked argmax) accuracy per branch, with chance references.

    Args:
        logits, mask: float32 [K, M] (mask 1 = allowed); expert: int [K, nB].

    Returns:
        ``accuracy`` (mean over branches), ``branch_accuracy`` [nB], ``chance_accuracy`` (a uniform
        random choice among the allowed options) and ``majority_accuracy`` (always the most frequent
        demonstrated option), each averaged over branches.
    """
    accuracy, chance, majority = [], [], []
    start = 0
    for b, size in enumerate(branches):
        allowed = mask[:, start : start + size] > 0
        choice = np.where(allowed, logits[:, start : start + size], -np.inf).argmax(axis=1)
        accuracy.append(float(np.mean(choice == expert[:, b])))
        chance.append(float(np.mean(1.0 / np.maximum(allowed.sum(axis=1), 1))))
        majority.append(float(np.bincount(expert[:, b], minlength=size).max() / len(expert)))
        start += size
    return {
        "accuracy": float(np.mean(accuracy)),
        "branch_accuracy": accuracy,
        "chance_accuracy": float(np.mean(chance)),
        "majority_accuracy": float(np.mean(majority)),
    }


def r_squared(predicted: np.ndarray, target: np.ndarray) -> float:
    """Coefficient of determination of [K, C] predictions, averaged over the C dimensions (sklearn's
    ``uniform_average``); a dimension whose target never varies is left out (NaN if all are)."""
    residual = np.sum((target - predicted) ** 2, axis=0)
    total = np.sum((target - target.mean(axis=0)) ** 2, axis=0)
    varying = total > 0
    return float(np.mean(1.0 - residual[varying] / total[varying])) if varying.any() else math.nan
