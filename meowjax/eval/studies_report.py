"""The results document of the studies, made from the per-cell JSON files and the study
definitions alone (``meowjax.eval.study_spec``): the same section for every study.

    write_document("docs/results", "docs/results.md", studies)   # studies: [study_spec.Study]

Each study's section: its arms (seeds done; greedy success before -> after RL at each held-out
difficulty; RL's gain at the RL difficulty with its two-stage interval and whether RL moved it;
the learning curve's area), its power (seeds, the minimal detectable effect of each comparison,
how many comparisons the table makes), its comparisons (the claim quoted, the difference over
seeds with Student's t and two-stage bootstrap intervals, the verdict: ``study_spec.judge``),
the Pass@(K,T) grid where the study records one, the learning curves, and a marked place for
prose. Prose written between a section's markers survives regeneration; everything else is
rewritten. Cells without a JSON file show as "not run yet". Host numpy only, no JAX.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from meowjax.eval import plots, report
from meowjax.eval import study_spec as spec
from meowjax.eval import study_stats as ss
from meowjax.eval import study_words
from meowjax.eval.study_cells import Cells, auc, curve_values, grid, load_cells, success

RULE = ("A comparison's verdict: **agrees** when its intervals (over seeds, Student's t; and, "
        "where games are paired, the two-stage bootstrap over seeds then games) all lie on the "
        "claim's side of 0, **disagrees** when they all lie on the other side, **inconclusive "
        "at MDE m** otherwise, m being the smallest difference the seeds could detect with 80% "
        "power; a claim without a direction (the paper's text is not available) gets **above "
        "zero**, **below zero** or **inconclusive**. **RL inert here**: one of the two arms' RL "
        "did not move held-out success at the RL difficulty, so there is no RL effect to "
        "compare. **not run yet**: a cell it needs is missing.")
jsonable = report._jsonable


# -- formatting --------------------------------------------------------------------------------
def fmt(v: float | None) -> str:
    return "n/a" if v is None or v != v else f"{v:.3f}"


def fmt_ci(mean: float, low: float, high: float, signed: bool = False) -> str:
    if mean != mean:
        return "n/a"
    m = f"{mean:+.3f}" if signed else f"{mean:.3f}"
    return m if low != low else f"{m} [{low:.3f}, {high:.3f}]"


def seeds_text(cells: Mapping[int, Any], want: Sequence[int]) -> str:
    have = [s for s in want if s in cells]
    return "not run yet" if not have else f"{len(have)}/{len(want)}"


def prose_block(key: str, kept: Mapping[str, str]) -> str:
    body = kept.get(key, "_Prose to be written once the cells have run: what the numbers show._")
    return f"<!-- prose:{key} -->\n{body}\n<!-- /prose:{key} -->"


def kept_prose(path: str) -> dict[str, str]:
    """The prose blocks of an existing document (to keep them through regeneration)."""
    if not os.path.exists(path):
        return {}
    text = pathlib.Path(path).read_text(encoding="utf-8")
    return {m.group(1): m.group(2).strip("\n") for m in
            re.finditer(r"<!-- prose:(\w+) -->\n(.*?)<!-- /prose:\1 -->", text, re.S)}


class Doc:
    """Collects the document's parts and writes plots next to it."""

    def __init__(self, document: str, plot_dir: str, kept: Mapping[str, str]):
        self.doc, self.plot_dir, self.kept = pathlib.Path(document), pathlib.Path(plot_dir), kept
        self.parts: list[str] = []

    def add(self, text: str) -> None:
        self.parts.append(text)

    def image(self, title: str, path: pathlib.Path) -> None:
        rel = os.path.relpath(path, self.doc.parent).replace(os.sep, "/")
        self.add(f"![{title}]({rel})")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        self.add(report.markdown_table(header, rows))


# -- one study's section -----------------------------------------------------------------------
def _mean_over_seeds(values: Sequence[float | None]) -> float:
    vals = [v for v in values if v is not None and v == v]
    return float(np.mean(vals)) if vals else float("nan")


def arms_table(d: Doc, st: spec.Study, cells: Cells,
               gains: Mapping[str, spec.Result]) -> None:
    rows = []
    for arm, _ in st.arms:
        c = cells.get(arm, {})
        recs = [c[s] for s in st.seeds if s in c]
        row = [arm, seeds_text(c, st.seeds)]
        for role in spec.ROLES:
            a = _mean_over_seeds([success(r, role, "start") for r in recs])
            b = _mean_over_seeds([success(r, role, "end") for r in recs])
            row.append("n/a" if a != a else f"{a:.3f} → {b:.3f}")
        res = gains[arm]
        row.append(fmt_ci(res.mean, res.boot_low, res.boot_high, True))
        moved = spec.rl_moved(res)
        row.append("n/a" if moved is None else "yes" if moved else spec.INERT)
        row.append(fmt(_mean_over_seeds([auc(r) for r in recs])))
        rows.append(row)
    names = _role_names(cells)
    d.table(["arm", "seeds"] + [f"success, {names.get(r, r)} ({r})" for r in spec.ROLES]
            + ["RL gain at the RL difficulty [two-stage 95%]", "RL moved it?",
               "learning-curve area"], rows)


def _role_names(cells: Cells) -> dict[str, str]:
    names: dict[str, str] = {}
    for by_seed in cells.values():
        for rec in by_seed.values():
            for name, s in rec.get("splits", {}).items():
                names.setdefault(s.get("role"), name)
    return names


def comparisons_table(d: Doc, st: spec.Study, cells: Cells,
                      gains: Mapping[str, spec.Result]) -> None:
    moved = {arm: spec.rl_moved(g) for arm, g in gains.items()} if st.inert_check else None
    rows, mdes = [], []
    for cmp in st.comparisons:
        res = spec.judge(cmp, cells, st.seeds, moved)
        claim = "—" if cmp.claim is None else (
            f"“{cmp.claim.text}” ({cmp.claim.source}"
            + ("; no direction: the paper's text is not available" if cmp.claim.sign is None
               else "") + ")")
        rows.append([cmp.label, claim, fmt_ci(res.mean, res.t_low, res.t_high, True)
                     + f" (n={res.seeds} seeds)",
                     fmt_ci(res.mean, res.boot_low, res.boot_high, True)
                     if res.boot_low == res.boot_low else "n/a", fmt(res.mde), res.verdict])
        if res.mde == res.mde:
            mdes.append(res.mde)
    m = len(st.comparisons)
    d.add(f"Power: the design calls for seeds {list(st.seeds)}; this table makes {m} "
          f"comparisons, each at 5%, so about {0.05 * m:.1f} would cross zero by chance if "
          "nothing differed (no correction for multiplicity). Each comparison's minimal "
          "detectable effect (MDE, 80% power) is computed from its own seeds' spread"
          + (f"; median {np.median(mdes):.3f}." if mdes else "; none yet (fewer than two seeds)."))
    d.table(["comparison", "claim", "difference over seeds [95% t]",
             "[two-stage bootstrap 95%]", "MDE", "verdict"], rows)


def grid_table(d: Doc, st: spec.Study, cells: Cells) -> None:
    """Pass@(K,T) mean over seeds, start -> end, per arm and prompt mode."""
    rows, header = [], None
    for arm, _ in st.arms:
        recs = list(cells.get(arm, {}).values())
        for mode in ("unstated", "stated"):
            starts = [g for r in recs if (g := grid(r, mode, "start"))]
            ends = [g for r in recs if (g := grid(r, mode, "end"))]
            if not starts or not ends:
                continue
            g0 = starts[0]
            header = header or ["arm", "prompt"] + [f"Pass@({k},{t})" for k in g0["ks"]
                                                    for t in g0["ts"]]
            a = np.mean([np.asarray(g["mean"]) for g in starts], 0)
            b = np.mean([np.asarray(g["mean"]) for g in ends], 0)
            rows.append([arm, mode] + [f"{a[i][j]:.2f} → {b[i][j]:.2f}"
                                       for i in range(len(g0["ks"])) for j in range(len(g0["ts"]))])
    if rows:
        d.add("Pass@(K,T), mean over seeds, before → after RL (the prompt states the budget or "
              "not):")
        d.table(header, rows)


def curve_plot(d: Doc, st: spec.Study, cells: Cells) -> None:
    curves = {}
    for arm, _ in st.arms:
        recs = [r for r in cells.get(arm, {}).values() if r.get("curve")]
        its = {tuple(r["curve"]["iteration"]) for r in recs}
        if recs and len(its) == 1:
            vals = np.asarray([[np.nan if v is None else v for v in curve_values(r["curve"])]
                               for r in recs], np.float64)
            curves[f"{arm} ({len(recs)} seeds)"] = (list(next(iter(its))), np.nanmean(vals, 0))
    if curves:
        title = f"Held-out success by RL iteration, study {st.name}"
        d.image(title, plots.plot_learning_curves(d.plot_dir / f"{st.name}_curves.png", curves,
                                                  "greedy success (mean over seeds)", title,
                                                  "RL iteration"))


def study_section(d: Doc, st: spec.Study, cells: Cells) -> None:
    d.add(f"## {st.question} (study `{st.name}`)")
    gains = {arm: spec.rl_gain(arm, cells, st.seeds) for arm, _ in st.arms}   # once per arm
    arms_table(d, st, cells, gains)
    if st.comparisons:
        comparisons_table(d, st, cells, gains)
    if st.grids:
        grid_table(d, st, cells)
    curve_plot(d, st, cells)
    d.add(prose_block(st.name, d.kept))


def scale_section(d: Doc, loaded: Mapping[str, Cells], studies: Sequence[spec.Study]) -> None:
    d.add("## Study scale and cells\n\nEvery cell is one run of `configs/study.py` (the default "
          "run's recipe; its docstring lists what differs) and the runner's own evaluations, on "
          "the machine and load recorded with it (load average: 1-minute, at the cell's start "
          "and end, on the cores named).")
    rows = []
    for st in studies:
        cells = loaded.get(st.name, {})
        recs = [r for a in cells.values() for r in a.values()]
        want = len(st.arms) * len(st.seeds)
        walls = [r["wall_s"]["total"] / 60 for r in recs if r.get("wall_s")]
        loads = [x for r in recs for x in (r.get("machine", {}).get("loadavg_start", [None])[0],
                                           r.get("machine", {}).get("loadavg_end", [None])[0])
                 if x is not None]
        cfg = (recs[0].get("config") if recs else None) or {}
        scale = ("n/a" if not cfg else f"{cfg['budget']['total_episodes']} episode-units, "
                 f"{cfg['games']['num_eval_hard']} held-out games at the RL difficulty")
        commits = sorted({r.get("commit", "")[:7] + ("+" if r.get("dirty") else "") for r in recs})
        rows.append([st.name, f"{len(recs)}/{want}", scale,
                     "n/a" if not walls else
                     f"{np.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f})",
                     "n/a" if not loads else f"{min(loads):.1f}-{max(loads):.1f}"
                     + f" on {recs[0].get('machine', {}).get('cpus')} cores",
                     ", ".join(commits) or "n/a"])
    d.table(["study", "cells done", "scale", "wall min, median (range)", "load average",
             "commits (+: uncommitted changes)"], rows)


def write_document(results_dir: str, document: str, studies: Sequence[spec.Study],
                   readme: str | None = None) -> str:
    """Writes the results document (and its plots under ``<results_dir>/plots``) and, given a
    ``readme`` with findings markers, its templated findings (``study_words``); returns the
    document's path. A prose block quoting a number no generated part prints stops it before
    anything is written (``study_words.check_prose``)."""
    loaded = load_cells(results_dir, [st.name for st in studies])
    d = Doc(document, os.path.join(results_dir, "plots"), kept_prose(document))
    for old in d.plot_dir.glob("*_curves.png"):    # every plot is drawn again (or is gone)
        old.unlink()
    where = os.path.relpath(results_dir, os.path.dirname(document) or ".")
    d.add("# Results of the studies\n\nGenerated by `python -m experiments.studies --report` from "
          f"the cell records under `{where}/`"
          " and the study definitions under `experiments/studies/`; only the text between "
          "`prose` markers is written by hand (it survives regeneration). Held-out numbers are "
          "on the test split (games no choice was made on). " + RULE)
    d.add(prose_block("headline", d.kept))
    scale_section(d, loaded, studies)
    for st in studies:
        study_section(d, st, loaded.get(st.name, {}))
    generated = "\n".join(p for p in d.parts if not p.startswith("<!-- prose:"))
    study_words.check_prose(d.kept, generated)
    if readme is not None:
        rel = os.path.relpath(document, os.path.dirname(readme) or ".").replace(os.sep, "/")
        study_words.write_findings(readme, study_words.findings(loaded, studies), rel)
    pathlib.Path(document).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(document).write_text("\n\n".join(d.parts) + "\n", encoding="utf-8")
    return document
