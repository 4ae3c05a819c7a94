"""Markdown evaluation reports with PNG plots, plus the same numbers as results.json.

A report is a title and a list of sections; each section type knows its table and plot:

  * `SuccessTable`: success rate with a 95% Wilson interval and the number of games, per row.
  * `PairedGainTable`: the gain of one policy over another on the same games (Newcombe interval).
  * `MeanTable`: mean of a metric over seeds/tasks with a bootstrap CI (e.g. the multi-seed
    algorithm comparison of the Practitioner's Guide).
  * `PassKTSection`: the Pass@(K,T) table (K rows × T columns, with CIs) and its heatmap.
  * `LearningCurves`: metric vs training step, one line per run.
  * `BudgetCurves`: success vs evaluation turn budget, one line per training variant, with bands.
  * `TextSection`: free Markdown.

    write_report(workdir, "TextWorld w2-o3-q4", [SuccessTable(...), PassKTSection(...), ...])

writes `workdir/report.md`, `workdir/results.json` and `workdir/plots/*.png`.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from meowjax.eval import passk, plots, stats

REPORT_NAME = "report.md"
RESULTS_NAME = "results.json"
PLOTS_DIR = "plots"


@dataclasses.dataclass(frozen=True)
class SuccessRow:
    """One evaluated run/split: `successes` wins out of `n_games` games."""

    label: str
    successes: int
    n_games: int


@dataclasses.dataclass(frozen=True)
class SuccessTable:
    """Success rates with Wilson score intervals (z = 1.96: 95%)."""

    title: str
    rows: Sequence[SuccessRow]
    z: float = 1.96


@dataclasses.dataclass(frozen=True)
class PairedGain:
    """Two policies' outcomes on the same games, in the same order (True = won)."""

    label: str
    before: Sequence[bool]
    after: Sequence[bool]


@dataclasses.dataclass(frozen=True)
class PairedGainTable:
    """Gain after − before per row, with Newcombe's paired interval and the discordant games."""

    title: str
    rows: Sequence[PairedGain]
    z: float = 1.96
    show_rates: bool = False   # also each row's success before and after


@dataclasses.dataclass(frozen=True)
class RLCurve:
    """The held-out learning curve ((iterations, success, low, high) or None) and the rollout
    success by iteration ((iterations, success) or None), drawn by ``plots.plot_rl_curve``."""

    title: str
    held_out: plots.BandCurve | None
    rollout: plots.Curve | None
    window: int = 5


@dataclasses.dataclass(frozen=True)
class MeanTable:
    """Mean of `metric` over units (seeds or tasks) per row, with a percentile bootstrap CI."""

    title: str
    rows: Mapping[str, Sequence[float]]
    metric: str = "success rate"
    alpha: float = 0.05
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class PassKTSection:
    """A Pass@(K,T) result as a table and a heatmap."""

    title: str
    result: passk.PassKTResult


@dataclasses.dataclass(frozen=True)
class PassKTComparison:
    """Two Pass@(K,T) results on the same tasks (e.g. before and after RL), side by side per
    cell with their difference (after - before), and a heatmap of the difference."""

    title: str
    before: passk.PassKTResult
    after: passk.PassKTResult
    labels: tuple[str, str] = ("start", "after RL")


@dataclasses.dataclass(frozen=True)
class LearningCurves:
    """{run: (steps, values)} of one metric against training step (or ``xlabel``)."""

    title: str
    curves: Mapping[str, plots.Curve]
    metric: str = "success rate"
    xlabel: str = "training step"
    higher_is_better: bool | None = True  # the table's "best" column; None: its largest value


@dataclasses.dataclass(frozen=True)
class BudgetCurves:
    """{variant: (budgets, values, low, high)} of success against evaluation turn budget."""

    title: str
    curves: Mapping[str, plots.BandCurve]
    metric: str = "success rate"


@dataclasses.dataclass(frozen=True)
class TextSection:
    """Free Markdown under a heading."""

    title: str
    body: str


Section = (SuccessTable | PairedGainTable | MeanTable | PassKTSection | PassKTComparison | LearningCurves
           | BudgetCurves | RLCurve | TextSection)


def budget_curves_from_pass_at_k_t(results: Mapping[str, passk.PassKTResult], k: int = 1) -> dict[str, plots.BandCurve]:
    """Pass@(k, T) against T with its CI, per training variant: input for `BudgetCurves`."""
    curves = {}
    for variant, res in results.items():
        if k not in res.ks:
            raise ValueError(f"variant {variant!r} has no K={k}; its ks are {res.ks}")
        i = res.ks.index(k)
        curves[variant] = (list(res.ts), res.mean_KT[i].tolist(), res.low_KT[i].tolist(), res.high_KT[i].tolist())
    return curves


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", title.lower().replace("@", " at ")).strip("_") or "section"


def _fmt(v: float) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _ci(low: float, high: float) -> str:
    return f"[{_fmt(low)}, {_fmt(high)}]"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _jsonable(x: Any) -> Any:
    """numpy -> Python, NaN/inf -> None (strict JSON)."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


@functools.singledispatch
def render_section(section: Any, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    """Markdown body and results.json entry of one section (writes its plots under workdir)."""
    raise TypeError(f"unknown report section type {type(section).__name__}; use one of {Section}")


@render_section.register
def _(section: SuccessTable, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    rows, entries = [], []
    for r in section.rows:
        low, high = stats.wilson_interval(r.successes, r.n_games, z=section.z)
        rate = r.successes / r.n_games
        rows.append([r.label, _fmt(rate), _ci(low, high), str(r.n_games)])
        entries.append(dict(label=r.label, successes=r.successes, n_games=r.n_games, success_rate=rate, ci_low=low, ci_high=high))
    md = markdown_table(["run", "success", "95% CI (Wilson)", "games"], rows)
    return md, {"rows": entries, "interval": "wilson", "z": section.z}


@render_section.register
def _(section: PairedGainTable, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    rows, entries = [], []
    for r in section.rows:
        gain, low, high = stats.paired_difference_interval(r.before, r.after, z=section.z)
        both, lost, gained, neither = stats.paired_counts(r.before, r.after)
        n = both + lost + gained + neither
        verdict = "gain" if low > 0 else ("loss" if high < 0 else "within the interval")
        before, after = (both + lost) / max(n, 1), (both + gained) / max(n, 1)
        rates = [_fmt(before), _fmt(after)] if section.show_rates else []
        rows.append([r.label, *rates, f"{gain:+.3f}", _ci(low, high), str(gained), str(lost), str(n),
                     verdict])
        entries.append(dict(label=r.label, before=before, after=after, gain=gain, ci_low=low,
                            ci_high=high, games_gained=gained, games_lost=lost, n_games=n,
                            verdict=verdict))
    md = markdown_table(["run", *(["before", "after"] if section.show_rates else []), "gain",
                         "95% CI (paired, Newcombe)", "games won only after", "games lost after",
                         "games", "verdict"], rows)
    return md, {"rows": entries, "interval": "newcombe_paired", "z": section.z}


@render_section.register
def _(section: RLCurve, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    plot = plots.plot_rl_curve(workdir / PLOTS_DIR / f"{slug}.png", section.held_out, section.rollout,
                               section.window, section.title)
    rel = plot.relative_to(workdir).as_posix()
    md = ""
    entry: dict[str, Any] = {"plot": rel, "window": section.window}
    if section.held_out is not None:
        xs, ys, lows, highs = section.held_out
        cis = (["" for _ in xs] if lows is None or highs is None
               else [_ci(float(lo), float(hi)) for lo, hi in zip(lows, highs)])
        rows = [[str(int(x)), _fmt(float(y)), ci] for x, y, ci in zip(xs, ys, cis)]
        md = markdown_table(["RL iteration", "held-out success", "95% CI (Wilson)"], rows) + "\n\n"
        entry["held_out"] = {"iterations": xs, "success": ys, "ci_low": lows, "ci_high": highs}
    if section.rollout is not None:
        entry["rollout"] = {"iterations": section.rollout[0], "success": section.rollout[1]}
    return md + f"![{section.title}]({rel})", entry


@render_section.register
def _(section: MeanTable, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    level = f"{100 * (1 - section.alpha):g}%"
    rows, entries = [], []
    for label, values in section.rows.items():
        values_N = np.asarray(values, dtype=np.float64)
        low, high = stats.bootstrap_ci(values_N, np.mean, alpha=section.alpha, seed=section.seed)
        rows.append([label, _fmt(values_N.mean()), _ci(low, high), str(values_N.size)])
        entries.append(dict(label=label, values=values_N, mean=values_N.mean(), ci_low=low, ci_high=high))
    md = markdown_table(["run", f"mean {section.metric}", f"{level} CI (bootstrap)", "n"], rows)
    return md, {"metric": section.metric, "rows": entries, "interval": "bootstrap", "alpha": section.alpha}


@render_section.register
def _(section: PassKTSection, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    res = section.result
    header = ["K \\ T"] + [f"T={t}" for t in res.ts]
    rows = [
        [f"K={k}"] + [f"{_fmt(res.mean_KT[i, j])} {_ci(res.low_KT[i, j], res.high_KT[i, j])}" for j in range(len(res.ts))]
        for i, k in enumerate(res.ks)
    ]
    how = {
        "single_run": "one run per episode at T_max with the winning turn recorded; valid as the prompt does not state the budget",
        "per_budget": "a separate run at each budget T",
    }[res.mode]
    plot = plots.plot_pass_at_k_t_heatmap(workdir / PLOTS_DIR / f"{slug}.png", res.ks, res.ts, res.mean_KT, section.title)
    rel = plot.relative_to(workdir).as_posix()
    md = (
        markdown_table(header, rows)
        + f"\n\nMode: `{res.mode}`: {how}. {res.n_tasks} tasks, at least {res.min_samples} episodes per task; "
        + f"{100 * (1 - res.alpha):g}% bootstrap CI over tasks.\n\n![{section.title}]({rel})"
    )
    return md, {**res.to_json(), "plot": rel}


@render_section.register
def _(section: PassKTComparison, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    a, b = section.before, section.after
    if (a.ks, a.ts) != (b.ks, b.ts):
        raise ValueError(f"{section.title!r}: the two Pass@(K,T) grids differ: K {a.ks} T {a.ts} vs K {b.ks} T {b.ts}")
    diff_KT = b.mean_KT - a.mean_KT
    first, second = section.labels
    rows = [[f"K={k}, T={t}", _fmt(a.mean_KT[i, j]), _fmt(b.mean_KT[i, j]), f"{diff_KT[i, j]:+.3f}"]
            for i, k in enumerate(a.ks) for j, t in enumerate(a.ts)]
    plot = plots.plot_pass_at_k_t_heatmap(workdir / PLOTS_DIR / f"{slug}.png", a.ks, a.ts, diff_KT,
                                          f"Pass@(K,T): {second} - {first}", difference=True)
    rel = plot.relative_to(workdir).as_posix()
    md = (markdown_table(["cell", first, second, "difference"], rows)
          + f"\n\n{a.n_tasks} tasks; the intervals of each result are in its own section.\n\n![{section.title}]({rel})")
    return md, {"before": a.to_json(), "after": b.to_json(), "difference": diff_KT, "labels": list(section.labels),
                "plot": rel}


@render_section.register
def _(section: LearningCurves, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    plot = plots.plot_learning_curves(workdir / PLOTS_DIR / f"{slug}.png", section.curves, section.metric, section.title,
                                      section.xlabel)
    rel = plot.relative_to(workdir).as_posix()
    best = {True: np.max, False: np.min, None: np.max}[section.higher_is_better]
    rows = [[label, str(steps[-1]), _fmt(float(values[-1])), _fmt(float(best(values)))] for label, (steps, values) in section.curves.items()]
    best_name = "largest" if section.higher_is_better is None else "best"
    md = markdown_table(["run", "last step", f"last {section.metric}", f"{best_name} {section.metric}"], rows)
    curves = {label: {"steps": steps, "values": values} for label, (steps, values) in section.curves.items()}
    return md + f"\n\n![{section.title}]({rel})", {"metric": section.metric, "curves": curves, "plot": rel}


@render_section.register
def _(section: BudgetCurves, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    plot = plots.plot_budget_curves(workdir / PLOTS_DIR / f"{slug}.png", section.curves, section.metric, section.title)
    rel = plot.relative_to(workdir).as_posix()
    budgets = sorted({float(b) for (bs, _, _, _) in section.curves.values() for b in bs})
    rows = []
    curves = {}
    for label, (bs, values, low, high) in section.curves.items():
        by_budget = {float(b): i for i, b in enumerate(bs)}
        cells = []
        for b in budgets:
            i = by_budget.get(b)
            if i is None:
                cells.append("")
            elif low is None or high is None:
                cells.append(_fmt(float(values[i])))
            else:
                cells.append(f"{_fmt(float(values[i]))} {_ci(float(low[i]), float(high[i]))}")
        rows.append([label] + cells)
        curves[label] = {"budgets": bs, "values": values, "ci_low": low, "ci_high": high}
    md = markdown_table(["variant"] + [f"T={b:g}" for b in budgets], rows)
    return md + f"\n\n![{section.title}]({rel})", {"metric": section.metric, "curves": curves, "plot": rel}


@render_section.register
def _(section: TextSection, workdir: pathlib.Path, slug: str) -> tuple[str, dict[str, Any]]:
    return section.body, {"body": section.body}


def write_report(workdir: str | pathlib.Path, title: str, sections: Sequence[Section]) -> pathlib.Path:
    """Writes report.md, results.json and plots/*.png under `workdir`; returns the report path.

    results.json = {"title": title, "sections": [{"type", "title", ...numbers...}, ...]} in the
    report's order, with NaN written as null.
    """
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}"]
    entries = []
    used: set[str] = set()
    for section in sections:
        if not isinstance(section, Section):
            raise TypeError(f"unknown report section type {type(section).__name__}; use one of {Section}")
        slug = _slug(section.title)
        while slug in used:
            slug += "_"
        used.add(slug)
        body, entry = render_section(section, workdir, slug)
        parts.append(f"## {section.title}\n\n{body}")
        entries.append({"type": type(section).__name__, "title": section.title, **entry})
    report = workdir / REPORT_NAME
    report.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    (workdir / RESULTS_NAME).write_text(
        json.dumps(_jsonable({"title": title, "sections": entries}), indent=2, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    return report
