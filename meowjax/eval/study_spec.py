"""What a study is, as data the runner and the report both read; and how a comparison of its
cells is measured and judged. Host numpy only, no JAX.

A study (one file under ``experiments/studies/``) is a ``Study``: its arms (label -> knobs of
``configs/study.py``), the seeds its design calls for, and its ``Comparison`` rows, each a
metric of two arms of the same seed (``a - b``) or of one arm before and after RL (``b=None``),
at one held-out difficulty, against a ``Claim`` quoted from the seed documents.

Metrics (``METRICS``): ``success`` (greedy win per held-out game), ``pass@K,T`` (Pass@(K,T) per
sampled game, unstated-budget grid where the cell has it), ``probe`` (greedy win per sampled
game when a given command is forced at a given turn: ``Study.probe``), paired game by game; ``auc``
(area under the held-out learning curve) and ``diag:<key>`` (a per-turn diagnostic of the
sampled episodes), one value per cell. Per seed, a per-game metric's value is the mean of its
game differences.

The verdict (``judge``), from the intervals of the mean difference over seeds (Student's t,
two or more seeds) and, for per-game metrics, the two-stage bootstrap (seeds, then games):

    every interval above 0 on the claim's side          -> "agrees"
    every interval on the other side                    -> "disagrees"
    otherwise                                           -> "inconclusive at MDE m"
    (claim without a direction: "above zero" / "below zero" / "inconclusive at MDE m")

where m is ``study_stats.minimal_detectable_effect`` of the seeds' values. A comparison of two
arms where either arm's RL did not move held-out success at the RL difficulty (its two-stage
interval holds 0) reads "RL inert here": there is no RL effect to compare.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from meowjax.eval import study_stats as ss
from meowjax.eval.study_cells import Cells, auc, grid, outcomes

RL_ROLE = "hard"      # the held-out difficulty RL trains on (its "moved" check)
ROLES = ("id", "hard", "harder")
NOT_RUN, INERT = "not run yet", "RL inert here"


@dataclasses.dataclass(frozen=True)
class Claim:
    """A sentence of the seed documents a comparison tests. ``sign``: +1 when the claim expects
    a > b (or RL to raise the metric), -1 the reverse, None when the paper's text is not
    available to say which (the difference is reported without a verdict's direction)."""
    text: str
    source: str
    sign: int | None


@dataclasses.dataclass(frozen=True)
class Comparison:
    metric: str
    a: str
    b: str | None = None
    role: str = RL_ROLE
    claim: Claim | None = None

    def __post_init__(self):
        kind = metric_kind(self.metric)
        if self.role not in ROLES:
            raise ValueError(f"comparison role {self.role!r}; choose one of {ROLES}.")
        if kind == "auc" and self.b is None:
            raise ValueError("metric 'auc' compares two arms (b): a curve has no 'before RL'.")

    @property
    def label(self) -> str:
        what = self.metric
        if metric_kind(self.metric) in PER_GAME:
            what += f" ({self.role})"
        return (f"{what}: {self.a} − {self.b}" if self.b
                else f"{what}: {self.a}, after − before RL")


@dataclasses.dataclass(frozen=True)
class Study:
    """A question's sweep. ``arms``: (label, ((knob, value), ...)) rows of ``configs/study.py``
    knobs; ``grids``: the runner adds the Pass@(K,T) grid in both prompt modes; ``shared_sft``:
    the cells of a seed start RL from one SFT run (off where the arms differ in SFT);
    ``inert_check``: two arms are compared only where RL moved both (off where the arms differ
    in more than RL, e.g. SFT alone against SFT then RL); ``probe``: ``(t, command)``, the
    runner plays the sampled games greedily with ``command`` forced at turn t, before and after
    RL (the selection-free recovery probe, metric ``probe``)."""
    name: str
    question: str
    arms: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    comparisons: tuple[Comparison, ...] = ()
    grids: bool = False
    shared_sft: bool = True
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    inert_check: bool = True
    probe: tuple[int, str] | None = None

    def __post_init__(self):
        labels = [a for a, _ in self.arms]
        for c in self.comparisons:
            missing = [x for x in (c.a, c.b) if x is not None and x not in labels]
            if missing:
                raise ValueError(f"study {self.name!r}: comparison {c.label!r} names arms "
                                 f"{missing} it does not have; its arms: {labels}.")


def arms(rows: Sequence[tuple[str, dict[str, Any]]]):
    """[(label, {knob: value})] -> the ``Study.arms`` tuple (knobs sorted)."""
    return tuple((label, tuple(sorted(knobs.items()))) for label, knobs in rows)


# -- metrics -----------------------------------------------------------------------------------
PER_GAME = ("success", "pass", "probe")
METRICS = ("success", "pass@K,T", "probe", "auc", "diag:<key>")


def metric_kind(metric: str) -> str:
    if metric in ("success", "auc", "probe"):
        return metric
    if metric.startswith("pass@"):
        pass_kt(metric)   # fails now on a malformed K,T
        return "pass"
    if metric.startswith("diag:") and len(metric) > 5:
        return "diag"
    raise ValueError(f"metric {metric!r}; choose one of {METRICS}.")


def pass_kt(metric: str) -> tuple[int, int]:
    try:
        k, t = (int(x) for x in metric[5:].split(","))
    except ValueError:
        raise ValueError(f"metric {metric!r}: write pass@K,T, e.g. pass@1,12.") from None
    return k, t


def _per_game(rec: dict[str, Any], metric: str, role: str, tag: str) -> dict[str, float] | None:
    """game -> value of one cell's policy (``tag``: start or end)."""
    if metric in ("success", "probe"):
        got = (outcomes(rec, role, tag) if metric == "success" else
               ((rec.get("probe") or {}).get(tag) or {}).get("per_game"))
        return None if got is None else {g: float(v) for g, v in got.items()}
    k, t = pass_kt(metric)
    g = grid(rec, "unstated", tag) or grid(rec, "stated", tag)
    if not g or k not in g["ks"] or t not in g["ts"]:
        return None
    i, j = g["ks"].index(k), g["ts"].index(t)
    return {task: float(v[i][j]) for task, v in g["per_task"].items()}


def _per_cell(rec: dict[str, Any], metric: str, tag: str) -> float | None:
    if metric == "auc":
        v = auc(rec)
        return None if v != v else v
    d = (rec.get("diagnostics") or {}).get(tag) or {}
    v = d.get(metric[5:])
    return None if v is None else float(v)


def seed_values(cmp: Comparison, cells: Cells, seeds: Sequence[int]
                ) -> tuple[list[float], list[list[float]] | None, bool]:
    """(per-seed differences, per-seed lists of per-game differences or None, complete) over
    the ``seeds`` both arms have."""
    kind = metric_kind(cmp.metric)
    have = [s for s in seeds if s in cells.get(cmp.a, {})
            and (cmp.b is None or s in cells.get(cmp.b, {}))]
    per_seed, per_game = [], []
    for s in have:
        ra = cells[cmp.a][s]
        rb = cells[cmp.b][s] if cmp.b else ra
        tag_b = "end" if cmp.b else "start"
        if kind in PER_GAME:
            x, y = _per_game(ra, cmp.metric, cmp.role, "end"), _per_game(rb, cmp.metric, cmp.role,
                                                                         tag_b)
            if not x or not y:
                continue
            d = [x[g] - y[g] for g in sorted(set(x) & set(y))]
            if d:
                per_game.append(d)
                per_seed.append(float(np.mean(d)))
        else:
            x, y = _per_cell(ra, cmp.metric, "end"), _per_cell(rb, cmp.metric, tag_b)
            if x is not None and y is not None:
                per_seed.append(x - y)
    return per_seed, (per_game if kind in PER_GAME else None), len(have) == len(seeds)


@dataclasses.dataclass(frozen=True)
class Result:
    mean: float
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    seeds: int
    mde: float
    verdict: str


def _mde_text(mde: float) -> str:
    return "n/a" if mde != mde else f"{mde:.3f}"


def judge(cmp: Comparison, cells: Cells, seeds: Sequence[int],
          moved: Mapping[str, bool | None] | None = None) -> Result:
    """The comparison's intervals, MDE and verdict. ``moved``: each arm's ``rl_moved`` (None:
    no inert check, e.g. arms that differ in more than RL)."""
    per_seed, games, complete = seed_values(cmp, cells, seeds)
    mean, tl, th = ss.seed_interval(per_seed)
    bl, bh = math.nan, math.nan
    if games:
        _, bl, bh = ss.two_stage_bootstrap(games)
    mde = ss.minimal_detectable_effect(per_seed)
    intervals = [(lo, hi) for lo, hi in ((tl, th), (bl, bh)) if lo == lo]
    if not complete:
        verdict = NOT_RUN
    elif moved is not None and cmp.b is not None and not (moved[cmp.a] and moved[cmp.b]):
        verdict = INERT
    else:
        above = bool(intervals) and all(lo > 0 for lo, _ in intervals)
        below = bool(intervals) and all(hi < 0 for _, hi in intervals)
        sign = cmp.claim.sign if cmp.claim else None
        if sign is None:
            verdict = ("above zero" if above else "below zero" if below else
                       f"inconclusive at MDE {_mde_text(mde)}")
        elif above or below:
            verdict = "agrees" if above == (sign > 0) else "disagrees"
        else:
            verdict = f"inconclusive at MDE {_mde_text(mde)}"
    return Result(mean, tl, th, bl, bh, len(per_seed), mde, verdict)


def rl_gain(arm: str, cells: Cells, seeds: Sequence[int]) -> Result:
    """The arm's RL gain in greedy success at the RL difficulty (after - before, paired)."""
    return judge(Comparison("success", arm, None, RL_ROLE), cells, seeds)


def rl_moved(gain: Result) -> bool | None:
    """Whether RL moved held-out success (``rl_gain``'s two-stage interval excludes 0); None:
    no cell yet."""
    if gain.boot_low != gain.boot_low:
        return None
    return gain.boot_low > 0 or gain.boot_high < 0
