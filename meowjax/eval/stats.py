"""Confidence intervals and per-turn diagnostics for evaluation episodes (host numpy, no JAX).

Intervals:
  * `wilson_interval`: Wilson score interval for a plain success rate c / n.
  * `bootstrap_ci`: percentile bootstrap over the leading axis (tasks, or seeds) of any statistic.
  * `paired_difference_interval`: the gain between two policies on the same games (Newcombe),
    from `paired_counts`.

Per-turn diagnostics (the questions of the Pass@(K,T) paper: is the agent bad at single steps, or bad
at recovering from its own mistakes?). An *episode trace* is a mapping or an object with

  * `won: bool` - the episode ended in a win;
  * `turns: Sequence[turn]` - one entry per agent action, in order; each turn is a mapping or an
    object with `invalid: bool` (the game rejected or did not understand the command) and, where
    known, `progress: bool` (the action advanced the task: score gained, or the expert's remaining
    plan got shorter). Other keys (e.g. `reward`) are ignored.

Turns are numbered from 1: turn t is the t-th agent action.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

ERROR_KINDS = ("invalid", "no_progress", "either")


def record_field(record: Any, name: str) -> Any:
    """Reads `name` from a mapping (`record[name]`) or an object (`record.name`).

    Raises:
      KeyError: naming the missing field and the fields that the record has.
    """
    if isinstance(record, Mapping):
        if name not in record:
            raise KeyError(f"record {record!r} has no field {name!r}; fields: {sorted(record)}")
        return record[name]
    if not hasattr(record, name):
        raise KeyError(f"record {record!r} of type {type(record).__name__} has no attribute {name!r}")
    return getattr(record, name)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion p̂ = successes / n.

        centre    = (p̂ + z² / 2n) / (1 + z² / n)
        halfwidth = z / (1 + z² / n) · sqrt(p̂ (1 − p̂) / n + z² / 4n²)
        interval  = [centre − halfwidth, centre + halfwidth]   (clipped to [0, 1] against rounding)

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at p̂ ∈ {0, 1},
    which matters for the small game sets typical here. z = 1.96 gives ~95% coverage.

    Raises:
      ValueError: if n < 1, successes is outside [0, n], or z <= 0.
    """
    if int(n) != n or n < 1:
        raise ValueError(f"wilson_interval needs n >= 1 games, got n={n}; evaluate at least one game")
    if int(successes) != successes or not 0 <= successes <= n:
        raise ValueError(f"successes must be an integer in [0, n={n}], got {successes}")
    if z <= 0:
        raise ValueError(f"z must be positive (1.96 for 95%), got {z}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    return max(0.0, float(centre - half)), min(1.0, float(centre + half))


def paired_counts(before: Sequence[bool], after: Sequence[bool]) -> tuple[int, int, int, int]:
    """(a, b, c, d): games won (before, after) = (1, 1), (1, 0), (0, 1), (0, 0); c is the games
    the second policy gained, b the games it lost.

    Raises:
      ValueError: on different lengths or no games.
    """
    x = np.asarray(before, dtype=bool)
    y = np.asarray(after, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired outcomes need two equal-length 1-D sequences, got shapes "
                         f"{x.shape} and {y.shape}; evaluate both policies on the same games")
    if x.size < 1:
        raise ValueError("paired outcomes need at least one game")
    return (int(np.sum(x & y)), int(np.sum(x & ~y)), int(np.sum(~x & y)), int(np.sum(~x & ~y)))


def paired_difference_interval(before: Sequence[bool], after: Sequence[bool],
                               z: float = 1.96) -> tuple[float, float, float]:
    """Difference of two success rates measured on the SAME games, with Newcombe's interval.

    With n paired outcomes counted as a = (1, 1), b = (1, 0), c = (0, 1), d = (0, 0)
    (before, after), p1 = (a + b) / n, p2 = (a + c) / n and the gain Δ = p2 − p1 = (c − b) / n.
    Newcombe's hybrid score interval (1998, method 10) combines the two Wilson intervals
    [l1, u1] of p1 and [l2, u2] of p2 with the correlation of the pairs,

        φ = (a d − b c) / sqrt((a + b)(c + d)(a + c)(b + d))      (0 when a margin is empty)
        low  = Δ − sqrt((u1 − p1)² − 2φ (u1 − p1)(p2 − l2) + (p2 − l2)²)
        high = Δ + sqrt((p1 − l1)² − 2φ (p1 − l1)(u2 − p2) + (u2 − p2)²)

    Coverage is close to the nominal level (slightly below, ~92%, when nearly all pairs agree).
    Pairing is what makes a gain on a few dozen games measurable: games both policies win (or both
    lose) carry no noise about the difference, so this interval is much narrower than the two
    unpaired Wilson intervals side by side. A gain is significant at ~95% when low > 0.

    Returns:
      (gain, low, high).

    Raises:
      ValueError: on different lengths or no games (`paired_counts`).
    """
    a, b, c, d = paired_counts(before, after)
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / np.sqrt(denom) if denom > 0 else 0.0
    gain = p2 - p1
    dl = np.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    dh = np.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    return float(gain), max(-1.0, float(gain - dl)), min(1.0, float(gain + dh))


def bootstrap_ci(
    values: Any,
    stat: Callable[..., Any] = np.mean,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[Any, Any]:
    """Percentile bootstrap confidence interval of `stat` over the leading axis of `values`.

    With values_N... (N units, e.g. tasks or seeds, each possibly carrying a [K, T] table), draw
    `n_boot` resamples of N units with replacement, compute `stat(resample, axis=0)` for each, and
    return the alpha/2 and 1 − alpha/2 percentiles elementwise:

        θ*_b = stat(values[idx_b], axis=0),   idx_b ~ Uniform{0..N−1}^N
        CI   = [quantile(θ*, alpha/2), quantile(θ*, 1 − alpha/2)]

    `stat` must accept an `axis` keyword (np.mean, np.median, np.nanmean do). Deterministic per seed.

    Returns:
      (low, high): floats for 1-D values, arrays of shape values.shape[1:] otherwise.

    Raises:
      ValueError: on empty values, n_boot < 1 or alpha outside (0, 1).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0 or values.shape[0] == 0:
        raise ValueError(f"bootstrap_ci needs at least one value along axis 0, got shape {values.shape}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1) (0.05 for a 95% interval), got {alpha}")
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    idx_BN = rng.integers(0, n, size=(n_boot, n))
    stats_B = np.asarray(stat(values[idx_BN], axis=1), dtype=np.float64)  # [n_boot, ...]
    low, high = np.quantile(stats_B, [alpha / 2, 1.0 - alpha / 2], axis=0)
    if values.ndim == 1:
        return float(low), float(high)
    return low, high


# ---------------------------------------------------------------------------------------------------
# Per-turn diagnostics.


def _turn_flags(trace: Any, name: str) -> np.ndarray:
    """Boolean per-turn flag `name` of one episode trace, shape [turns]."""
    return np.asarray([bool(record_field(t, name)) for t in record_field(trace, "turns")], dtype=bool)


def _error_flags(trace: Any, kind: str) -> np.ndarray:
    """Per-turn error flags: invalid, not progress, or either."""
    if kind not in ERROR_KINDS:
        raise ValueError(f"error kind must be one of {ERROR_KINDS}, got {kind!r}")
    if kind == "invalid":
        return _turn_flags(trace, "invalid")
    no_progress = ~_turn_flags(trace, "progress")
    if kind == "no_progress":
        return no_progress
    return no_progress | _turn_flags(trace, "invalid")


def cumulative_success_curve(records: Sequence[Any], max_turns: int) -> np.ndarray:
    """Fraction of episodes won within t turns, for t = 1..max_turns (the success-vs-turn curve).

        S(t) = (1 / N) · #{ episodes e : e.won and e.success_turn <= t }

    Records need `won` and `success_turn` (as in `passk`). S is non-decreasing; S(max_turns) is the
    plain success rate when every episode ran with budget max_turns.

    Returns:
      curve_T: float array [max_turns]; curve_T[t − 1] = S(t).
    """
    if not records:
        raise ValueError("cumulative_success_curve needs at least one episode record")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    win_turns = []
    for r in records:
        if record_field(r, "won"):
            turn = record_field(r, "success_turn")
            if turn is None or turn < 1:
                raise ValueError(f"won episode {r!r} needs success_turn >= 1, got {turn!r}")
            win_turns.append(turn)
    ts_T = np.arange(1, max_turns + 1)
    wins_T = (np.asarray(win_turns, dtype=np.int64)[None, :] <= ts_T[:, None]).sum(axis=1)
    return wins_T / len(records)


def action_validity_rate(traces: Sequence[Any]) -> float:
    """Share of all agent turns whose action was valid, pooled over episodes (turn-weighted).

        validity = Σ_e #{t : not invalid_e,t} / Σ_e turns_e

    Raises:
      ValueError: if there are no turns at all.
    """
    invalid = np.concatenate([_turn_flags(tr, "invalid") for tr in traces]) if traces else np.zeros(0)
    if invalid.size == 0:
        raise ValueError("action_validity_rate needs at least one turn; got no turns in any episode")
    return float(1.0 - invalid.mean())


def validity_by_turn(traces: Sequence[Any], max_turns: int) -> np.ndarray:
    """Action validity rate at each turn index over the episodes that reached that turn.

        v(t) = #{e : turns_e >= t and not invalid_e,t} / #{e : turns_e >= t}

    Returns:
      validity_T: float array [max_turns]; NaN where no episode reached turn t.
    """
    valid_T = np.zeros(max_turns)
    reached_T = np.zeros(max_turns)
    for tr in traces:
        invalid = _turn_flags(tr, "invalid")[:max_turns]
        valid_T[: invalid.size] += ~invalid
        reached_T[: invalid.size] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(reached_T > 0, valid_T / np.maximum(reached_T, 1), np.nan)


def error_recovery_rate(traces: Sequence[Any], kind: str = "invalid") -> tuple[float, int]:
    """Among episodes that made at least one error, the fraction that still won.

    An error turn is, by `kind`:
      * "invalid": the action was invalid (`invalid` flag);
      * "no_progress": the action did not advance the task (`progress` is False), which for
        dense-score games means no score was gained that turn; needs the `progress` flag;
      * "either": invalid or no progress.

        recovery = #{e : won_e and ∃t error_e,t} / #{e : ∃t error_e,t}

    Returns:
      (rate, n_with_error): rate is NaN when no episode made an error (n_with_error = 0).
    """
    n_err = 0
    n_recovered = 0
    for tr in traces:
        if _error_flags(tr, kind).any():
            n_err += 1
            n_recovered += bool(record_field(tr, "won"))
    return (n_recovered / n_err if n_err else float("nan")), n_err


def ends_in_cycle(actions: Sequence[str], max_period: int = 2) -> bool:
    """Whether an action sequence ends by repeating itself: for some period p <= `max_period`,
    its last 2 * max(p, 2) actions are one block of p actions over and over,

        x[-k] = x[-k - p]   for k = 1 .. 2 * max(p, 2) - p

    ("examine shelf" four times; "open coffer", "close coffer" twice each). A greedy policy whose
    prompt does not change in such a loop repeats it until the turn budget runs out.
    """
    if max_period < 1:
        raise ValueError(f"max_period={max_period} must be >= 1.")
    x = list(actions)
    for p in range(1, max_period + 1):
        span = 2 * max(p, 2)
        if len(x) >= span and all(x[-k] == x[-k - p] for k in range(1, span - p + 1)):
            return True
    return False
