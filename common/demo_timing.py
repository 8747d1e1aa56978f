"""Which record of a .demo file holds the action chosen at each observation: ``same`` or ``next``.

Unity's recorder does not always store, in record t, the action chosen at observation t.
``Agent.SendInfoToBrain`` copies ``storedActions`` into the record *before* the new decision is made
(``RequestDecision``, then ``DemonstrationWriter.Record``; ``DecideAction`` writes the new action
later), so in such files record t holds (obs_t, the action chosen at obs_{t-1}) and obs_t's action
sits in record t+1 (ml-agents#1833). Older recordings (``Expert3DBall.demo``) and ``stepstream
record`` store obs_t's own action in record t. Which one a file holds is a property of the file:

- ``same``: record t's action was chosen at obs_t and executed between obs_t and obs_{t+1};
- ``next``: record t+1's action was chosen at obs_t (record t's at obs_{t-1}; zeros at an episode's
  first record, where ``storedActions`` was just cleared).

Detection (``detect_action_timing``), from the data alone, in two steps:

1. **Inverse dynamics.** Over the transitions t -> t+1 within an episode (record t not done), a
   least-squares fit (``FOLDS``-fold cross-validated, ridge ``RIDGE``) predicts an action from the
   pair (obs_t, obs_{t+1} - obs_t), once with record t's action as the target and once with record
   t+1's. Each is scored out of fold on the rows where the two candidates differ (elsewhere both
   are right): R^2 (mean over dimensions) for continuous actions, accuracy (mean over branches) for
   discrete ones. The action that explains the observation change is the executed one. The fit
   decides when at least ``MIN_SCORED_ROWS`` rows are scored and the scores differ by at least
   ``FIT_MARGIN``.
2. **The zero action at an episode's start**, when the fit does not decide: with at least
   ``MIN_EPISODE_STARTS`` episode starts (a file's first record and every record after a done),
   ``next`` when at least ``ZERO_START_SHARE`` of them carry an all-zero action and that share is at
   least ``ZERO_START_RATIO`` times the all-zero share of the other records; ``same`` otherwise.
3. Otherwise ``same`` (ML-Agents' loader pairing), ``decided_by = "default"``.

Measured on the shared ML-Agents files (``tests/unit/test_demo.py`` holds these as the expected
answers, ``stepstream demo inspect`` prints them): the fit separates 3DBall files by 0.7-0.9 R^2
(test.demo ``next``, Expert3DBall and Expert3DBallHard ``same``) and Pyramid by 0.3 accuracy
(``next``); on Hallway and PushBlock the linear fit of raycast changes is weaker and leans ``same``;
the image-only GridWorld files and ExpertBasic (a constant action) are decided by their episode
starts. The thresholds sit well inside these gaps; a file near them is reported with its evidence,
and ``demo_action_timing`` overrides the detection.

Shapes: ``R`` records of one file, ``C`` continuous actions, ``B`` discrete branches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import numpy as np


class DemoActionTiming(str, Enum):
    """The ``demo_action_timing`` setting (``common.config_sections``): detect, or name the timing."""

    AUTO = "auto"
    """Detect it per file from the data (``detect_action_timing``)."""
    SAME = "same"
    """Record t holds obs_t's action (ML-Agents' loader pairing)."""
    NEXT = "next"
    """Record t+1 holds obs_t's action (Unity's ``storedActions`` recording order)."""


SAME = DemoActionTiming.SAME.value
NEXT = DemoActionTiming.NEXT.value

FOLDS = 5
RIDGE = 1e-3
"""Ridge penalty per row on the standardised features: keeps collinear raycasts well conditioned."""
FIT_MARGIN = 0.05
"""The least difference of the two fit scores (R^2 or accuracy) that decides."""
MIN_SCORED_ROWS = 30
"""The fewest rows with differing candidate actions on which the fit may decide."""
MIN_EPISODE_STARTS = 3
ZERO_START_SHARE = 0.5
ZERO_START_RATIO = 5.0
MAX_IMAGE_FEATURES = 192
"""Image observations are average-pooled to at most this many features (8 x 8 x 3) for the fit."""
SEED = 0


@dataclass(frozen=True)
class TimingEvidence:
    """One file's detected action timing and what it rests on (module docstring)."""

    timing: str
    """``same`` or ``next``."""
    decided_by: str
    """``inverse_dynamics``, ``episode_start_zeros`` or ``default``."""
    metric: str
    """``r2`` (continuous actions) or ``accuracy`` (discrete only)."""
    same_fit: float | None
    """Out-of-fold score of record t's action from (obs_t, obs_{t+1} - obs_t); None without scored rows."""
    next_fit: float | None
    """The same for record t+1's action."""
    scored_rows: int
    """Transitions whose two candidate actions differ (the rows both fits are scored on)."""
    episode_starts: int
    start_zero_actions: int
    """Episode starts whose record carries an all-zero action."""
    zero_action_share: float
    """All-zero actions among the other records."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _features(observations: Sequence[np.ndarray]) -> np.ndarray:
    """float64 [R, F]: vector observations flat, image observations ``[R, H, W, C]`` average-pooled."""
    parts = []
    for obs in observations:
        x = np.asarray(obs, np.float64)
        if x.ndim == 4 and x[0].size > MAX_IMAGE_FEATURES:
            _, h, w, c = x.shape
            side = max(1, int(np.sqrt(MAX_IMAGE_FEATURES / c)))
            hs, ws = np.array_split(np.arange(h), min(side, h)), np.array_split(np.arange(w), min(side, w))
            cells = [[x[:, i][:, :, j].mean(axis=(1, 2)) for j in ws] for i in hs]  # [side][side] of [R, C]
            x = np.stack([np.stack(row, axis=1) for row in cells], axis=1)  # [R, side, side, C]
        parts.append(x.reshape(len(x), -1))
    # A corrupt file's NaN or infinite values must not reach the solver.
    return np.nan_to_num(np.hstack(parts), nan=0.0, posinf=0.0, neginf=0.0) if parts else np.zeros((0, 0))


def _targets(continuous: np.ndarray, discrete: np.ndarray, branches: Sequence[int]) -> np.ndarray:
    """float64 [R, C + sum(branches)]: continuous values, then each branch one-hot."""
    hot = [np.eye(size)[np.clip(discrete[:, b], 0, size - 1)] for b, size in enumerate(branches)]
    return np.hstack([np.asarray(continuous, np.float64), *hot])


def _out_of_fold(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[K, T] predictions of ridge least squares, each row from the fold model that did not see it."""
    k = len(x)
    fold = np.random.default_rng(SEED).permutation(k) % FOLDS
    out = np.zeros_like(y)
    for f in range(FOLDS):
        train, test = fold != f, fold == f
        if not test.any() or train.sum() < 2:
            continue
        mean, std = x[train].mean(axis=0), x[train].std(axis=0) + 1e-8
        xs = np.hstack([np.ones((k, 1)), (x - mean) / std])
        gram = xs[train].T @ xs[train] + RIDGE * train.sum() * np.eye(xs.shape[1])
        weights = np.linalg.lstsq(gram, xs[train].T @ y[train], rcond=None)[0]
        out[test] = xs[test] @ weights
    return out


def _score(pred: np.ndarray, actions: np.ndarray, continuous_size: int, branches: Sequence[int]) -> float:
    """R^2 (mean over continuous dimensions) or, without continuous actions, accuracy (mean over branches)."""
    if continuous_size:
        y, p = actions[:, :continuous_size], pred[:, :continuous_size]
        total = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
        return float(np.mean(1.0 - ((y - p) ** 2).sum(axis=0) / np.maximum(total, 1e-12)))
    start, hits = 0, []  # no continuous columns before the branches here
    for size in branches:
        hits.append(np.mean(pred[:, start : start + size].argmax(axis=1) == actions[:, start : start + size].argmax(axis=1)))
        start += size
    return float(np.mean(hits))


def detect_action_timing(
    observations: Sequence[np.ndarray],
    continuous: np.ndarray,
    discrete: np.ndarray,
    done: np.ndarray,
    branches: Sequence[int],
) -> TimingEvidence:
    """Detect one file's action timing (module docstring).

    Args:
        observations: one array ``[R, *shape]`` per observation spec.
        continuous: float32 ``[A, C]`` and discrete: int ``[A, B]``, the actions of the first A
            records (A = R, or R - 1 when the last record stores none, as older files do).
        done: bool ``[R]``, record t ends an episode.
        branches: the discrete branch sizes.
    """
    a = len(continuous)
    c = continuous.shape[1]
    actions = _targets(continuous, discrete, branches)
    # Transitions t -> t+1 inside an episode whose both candidate actions were recorded.
    t = np.flatnonzero(~np.asarray(done[: a - 1], bool)) if a > 1 else np.zeros(0, int)
    differ = np.any(actions[t] != actions[t + 1], axis=1) if len(t) else np.zeros(0, bool)
    scored = int(differ.sum())
    same_fit = next_fit = None
    if scored and actions.shape[1]:
        # A corrupt file's NaN and infinite actions count as 0, in the fits and among the zero actions below.
        actions = np.nan_to_num(actions, nan=0.0, posinf=0.0, neginf=0.0)
        same_fit, next_fit = _inverse_dynamics_fits(observations, actions, t, differ, c, branches)
    starts = np.r_[0, np.flatnonzero(np.asarray(done[: a - 1], bool)) + 1] if a else np.zeros(0, int)
    start_zeros, zero_share = _zero_actions(actions[:, :c], discrete[:a], starts)
    timing, decided_by = _decide(same_fit, next_fit, scored, len(starts), start_zeros, zero_share)
    metric = "r2" if c else "accuracy"
    return TimingEvidence(
        timing, decided_by, metric, same_fit, next_fit, scored, len(starts), start_zeros, round(zero_share, 4)
    )


def _inverse_dynamics_fits(
    observations: Sequence[np.ndarray],
    actions: np.ndarray,
    t: np.ndarray,
    differ: np.ndarray,
    continuous_size: int,
    branches: Sequence[int],
) -> tuple[float | None, float | None]:
    """The out-of-fold scores of record t's action and of record t+1's from (obs_t, obs_{t+1} - obs_t), on the
    transitions ``t`` whose two actions ``differ``; None for a score that is not finite.

    Args:
        observations: one array ``[R, *shape]`` per observation spec.
        actions: ``[A, D]``, the targets (``_targets``), finite.
        t: int ``[T]``, the transitions' first records; differ: bool ``[T]``.
    """
    fits = []
    with np.errstate(all="ignore"):  # a corrupt file's huge values overflow to inf scores, not errors
        x = _features(observations)
        pair = np.hstack([x[t], x[t + 1] - x[t]])
        for lag in (0, 1):
            pred = _out_of_fold(pair, actions[t + lag])
            fits.append(round(_score(pred[differ], actions[t + lag][differ], continuous_size, branches), 4))
    same_fit, next_fit = (None if not np.isfinite(f) else f for f in fits)
    return same_fit, next_fit


def _zero_actions(continuous: np.ndarray, discrete: np.ndarray, starts: np.ndarray) -> tuple[int, float]:
    """``(start_zeros, zero_share)``: the episode starts whose record carries an all-zero action, and the share of
    all-zero actions among the other records (0 without any).

    Args:
        continuous: ``[A, C]`` and discrete: ``[A, B]``, the recorded actions.
        starts: int ``[S]``, the records that start an episode.
    """
    a = len(continuous)
    zero = ~np.any(continuous != 0, axis=1) & ~np.any(discrete != 0, axis=1) if a else np.zeros(0, bool)
    is_start = np.zeros(a, bool)
    is_start[starts] = True
    zero_share = float(zero[~is_start].mean()) if (~is_start).any() else 0.0
    return int(zero[starts].sum()), zero_share


def _decide(
    same_fit: float | None, next_fit: float | None, scored: int, starts: int, start_zeros: int, zero_share: float
) -> tuple[str, str]:
    """``(timing, decided_by)``: the inverse-dynamics fits where enough rows score them apart, else the zero actions
    at the episode starts where there are enough starts, else ``same`` (module docstring)."""
    if same_fit is not None and next_fit is not None and scored >= MIN_SCORED_ROWS and abs(next_fit - same_fit) >= FIT_MARGIN:
        return (NEXT if next_fit > same_fit else SAME), "inverse_dynamics"
    if starts >= MIN_EPISODE_STARTS:
        share = start_zeros / starts
        is_next = share >= ZERO_START_SHARE and share >= ZERO_START_RATIO * zero_share
        return (NEXT if is_next else SAME), "episode_start_zeros"
    return SAME, "default"
