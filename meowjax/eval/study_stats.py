"""Intervals and verdicts of the studies (host numpy, no JAX): over seeds, over paired games.

Three intervals, each where it fits:
  * ``seed_interval``: a quantity measured once per seed (success after RL, area under the
    learning curve, a per-seed difference between two arms of the same seed): Student's t
    interval of the mean, mean ± t(0.975, n − 1) · s / √n. With 3 seeds t = 4.30: wide, but
    honest about run-to-run noise, which a percentile bootstrap over 3 values understates.
  * ``pooled_paired``: two policies' greedy outcomes on the same games, the (seed, game) pairs of
    all seeds pooled: Newcombe's paired interval (``stats.paired_difference_interval``). It
    covers game-to-game noise, not run-to-run noise: read it beside the seed interval.
  * ``paired_mean_interval``: per-unit differences of a continuous quantity (a task's
    Pass@(K,T), paired by (seed, task)): percentile bootstrap over the units.

``verdict`` turns a difference's interval and the paper's direction into the finding word.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats

from meowjax.eval import stats

MATCHES, CONTRADICTS, NOISE, MISSING = ("matches", "contradicts", "within noise", "not run yet")


def seed_interval(values: Sequence[float], alpha: float = 0.05) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval over seeds; one seed: (value, NaN, NaN); none:
    all NaN."""
    x_N = np.asarray([v for v in values if v is not None], np.float64)
    if x_N.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x_N.mean())
    if x_N.size == 1:
        return mean, math.nan, math.nan
    half = float(scipy_stats.t.ppf(1 - alpha / 2, x_N.size - 1) * x_N.std(ddof=1)
                 / math.sqrt(x_N.size))
    return mean, mean - half, mean + half


def pooled_paired(pairs: Sequence[tuple[Sequence[bool], Sequence[bool]]]
                  ) -> tuple[float, float, float, int]:
    """(gain, low, high, n): Newcombe's interval of after − before over every pair of every
    (before, after) group (one group per seed, games in the same order within a group)."""
    before = [bool(b) for group, _ in pairs for b in group]
    after = [bool(a) for _, group in pairs for a in group]
    if not before:
        return math.nan, math.nan, math.nan, 0
    gain, low, high = stats.paired_difference_interval(before, after)
    return gain, low, high, len(before)


def paired_mean_interval(diffs: Sequence[float], alpha: float = 0.05
                         ) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of paired differences, percentile bootstrap over the units."""
    d_N = np.asarray(diffs, np.float64)
    if d_N.size == 0:
        return math.nan, math.nan, math.nan, 0
    if d_N.size == 1:
        return float(d_N[0]), math.nan, math.nan, 1
    low, high = stats.bootstrap_ci(d_N, np.mean, alpha=alpha)
    return float(d_N.mean()), low, high, int(d_N.size)


def verdict(low: float, high: float, expected_sign: int, complete: bool = True) -> str:
    """The finding rule: a difference whose whole 95% interval lies on the paper's side of 0
    ``matches``; on the other side, ``contradicts``; an interval that holds 0 (or is unknown)
    is ``within noise``; cells missing: ``not run yet``."""
    if not complete:
        return MISSING
    if low != low or high != high:     # NaN: fewer than two units
        return NOISE
    if low > 0 or high < 0:
        return MATCHES if (low > 0) == (expected_sign > 0) else CONTRADICTS
    return NOISE


def area_under_curve(iterations: Sequence[float], values: Sequence[float | None]) -> float:
    """Mean held-out success over RL: trapezoid area under (iteration, success) divided by the
    iterations spanned; one point: its value. Points without a value are left out."""
    pts = [(float(x), float(y)) for x, y in zip(iterations, values) if y is not None]
    if not pts:
        return math.nan
    x_N, y_N = np.asarray(pts).T
    if x_N[-1] <= x_N[0]:
        return float(y_N[-1])
    area = float(np.sum((x_N[1:] - x_N[:-1]) * (y_N[1:] + y_N[:-1]) / 2))
    return area / float(x_N[-1] - x_N[0])
