"""Intervals and power of the studies (host numpy, no JAX): over seeds, and over seeds and
games together. The verdicts that read them: ``meowjax.eval.study_spec``.

Two intervals, each where it fits:
  * ``seed_interval``: a quantity measured once per seed (success after RL, area under the
    learning curve, a per-seed difference between two arms of the same seed): Student's t
    interval of the mean, mean ± t(0.975, n − 1) · s / √n. With 3 seeds t = 4.30: wide, but
    honest about run-to-run noise, which a percentile bootstrap over 3 values understates.
  * ``two_stage_bootstrap``: per-game differences grouped by seed, the mean over seeds of each
    seed's mean: resample seeds, then games within each drawn seed. It carries run-to-run and
    game-to-game noise together, never treating (seed, game) pairs as independent.

Power: ``minimal_detectable_effect`` is the smallest true mean difference a design detects with
the given power (paired t over seeds, from the seeds' own spread); ``design_mde`` plans one
from a between-seed and a within-seed (per-game) standard deviation.

"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats



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


def two_stage_bootstrap(diffs_per_seed: Sequence[Sequence[float]], *, alpha: float = 0.05,
                        num: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean over seeds of each seed's mean game difference, with a
    percentile interval from a two-stage bootstrap:

        for b in 1..num:  S* = n seeds drawn with replacement;  for s in S*: games of s drawn
                          with replacement;  theta*_b = mean_s mean_g d*_sg
        [low, high] = quantiles alpha/2, 1 - alpha/2 of theta*

    One seed: its games alone (a one-stage bootstrap). No games: all NaN."""
    groups = [np.asarray(g, np.float64) for g in diffs_per_seed if len(g)]
    if not groups:
        return math.nan, math.nan, math.nan
    mean = float(np.mean([g.mean() for g in groups]))
    rng = np.random.default_rng(seed)
    picks_BS = rng.integers(len(groups), size=(num, len(groups)))
    theta_B = np.zeros(num)
    for s, g in enumerate(groups):   # every draw of seed s resamples its games afresh
        hits_B = (picks_BS == s).sum(1)
        draws = int(hits_B.sum())
        if not draws:
            continue
        means = g[rng.integers(g.size, size=(draws, g.size))].mean(1)
        owner = np.repeat(np.arange(num), hits_B)
        theta_B += np.bincount(owner, weights=means, minlength=num)
    theta_B /= len(groups)
    low, high = np.quantile(theta_B, [alpha / 2, 1 - alpha / 2])
    return mean, float(low), float(high)


def _mde(sd: float, n: int, alpha: float, power: float) -> float:
    """(t(1 - alpha/2, n - 1) + t(power, n - 1)) * sd / sqrt(n)."""
    mult = scipy_stats.t.ppf(1 - alpha / 2, n - 1) + scipy_stats.t.ppf(power, n - 1)
    return float(mult * sd / math.sqrt(n))


def minimal_detectable_effect(seed_values: Sequence[float], *, alpha: float = 0.05,
                              power: float = 0.8) -> float:
    """The smallest true mean difference a paired t test over these n seeds detects with
    ``power`` at two-sided level ``alpha``, from their own standard deviation s:

        MDE = (t(1 - alpha/2, n - 1) + t(power, n - 1)) * s / sqrt(n)

    NaN for fewer than two seeds."""
    x_N = np.asarray([v for v in seed_values if v is not None], np.float64)
    if x_N.size < 2:
        return math.nan
    return _mde(float(x_N.std(ddof=1)), x_N.size, alpha, power)


def design_mde(sd_between: float, sd_within: float, seeds: int, games: int, *,
               alpha: float = 0.05, power: float = 0.8) -> float:
    """The MDE of a planned design: ``seeds`` runs of ``games`` paired games each, where a
    seed's true gain varies with standard deviation ``sd_between`` and one game's difference
    with ``sd_within``:

        s = sqrt(sd_between^2 + sd_within^2 / games)   (the SD of one seed's mean gain)
        MDE = (t(1 - alpha/2, seeds - 1) + t(power, seeds - 1)) * s / sqrt(seeds)"""
    if seeds < 2 or games < 1:
        raise ValueError(f"a design needs >= 2 seeds and >= 1 game (got {seeds}, {games}).")
    return _mde(math.sqrt(sd_between ** 2 + sd_within ** 2 / games), seeds, alpha, power)


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
