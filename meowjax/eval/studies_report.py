"""The results document of the studies, made from the per-cell JSON files alone.

    write_document("docs/results", "docs/results.md", expected)   # expected: {study: [(arm, seeds)]}

Reads ``<results_dir>/<study>/<cell>.json`` (written by experiments/studies.py), writes the
Markdown document and its plots under ``<results_dir>/plots/``: one section per question, each
with its table (means with 95% intervals, ``study_stats``), its findings (the paper's direction,
the difference with its intervals, the verdict by ``study_stats.verdict``) and a marked place
for prose. Prose written between a section's markers survives regeneration; everything else is
rewritten. Cells without a JSON file show as "not run yet". Host numpy only, no JAX.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
from typing import Any, Mapping, Sequence

import numpy as np

from meowjax.eval import plots, report
from meowjax.eval import study_stats as ss
from meowjax.eval.study_cells import (Cells, auc, complete, curve_values, diag_change,
                                      game_mean_gains, grid,
                                      grid_mean, grid_value, load_cells, paired_arms, seed_diffs,
                                      seed_means, split_of, success, task_diffs)
Expected = Mapping[str, Sequence[tuple[str, Sequence[int]]]]
RULE = ("A finding's verdict: **matches** when every interval of the difference (over seeds; "
        "and over paired games where the same games are compared) lies entirely on the paper's "
        "side of 0, **contradicts** when every one lies entirely on the other side, **within "
        "noise** otherwise (or with fewer than two seeds), **not run yet** while a cell it "
        "needs is missing.")
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


def finding(claim: str, direction: str, sign: int, seed_diffs: Sequence[float],
            paired: tuple | None = None, complete: bool = True,
            unit: str = "seeds") -> list[str]:
    """A findings-table row: claim, the paper's direction, the difference over ``unit`` and
    (where the same games are compared) per game, and the verdict (``RULE``)."""
    m, lo, hi = ss.seed_interval(seed_diffs)
    cells = [claim, direction, fmt_ci(m, lo, hi, True) + f" (n={len(seed_diffs)} {unit})"]
    intervals = [(lo, hi)]
    if paired is not None:
        g, glo, ghi, n = paired
        cells.append(fmt_ci(g, glo, ghi, True) + f" (n={n})" if n else "n/a")
        intervals.append((glo, ghi))
    else:
        cells.append("")
    words = {ss.verdict(a, b, sign, complete) for a, b in intervals}
    cells.append(words.pop() if len(words) == 1 else ss.NOISE)
    return cells


FINDINGS_HEADER = ["finding", "paper's direction", "difference, mean over units [95% t]",
                   "per game, paired [95% Newcombe / bootstrap]", "verdict"]


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


def plot_rel(plot_dir: pathlib.Path, doc: pathlib.Path, path: pathlib.Path) -> str:
    return os.path.relpath(path, doc.parent).replace(os.sep, "/")


# -- the sections ------------------------------------------------------------------------------
class Doc:
    """Collects the document's parts and writes plots next to it."""

    def __init__(self, document: str, plot_dir: str, kept: Mapping[str, str]):
        self.doc, self.plot_dir, self.kept = pathlib.Path(document), pathlib.Path(plot_dir), kept
        self.parts: list[str] = []

    def add(self, text: str) -> None:
        self.parts.append(text)

    def image(self, title: str, path: pathlib.Path) -> None:
        self.add(f"![{title}]({plot_rel(self.plot_dir, self.doc, path)})")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        self.add(report.markdown_table(header, rows))


def mean_ci_cell(values: Sequence[float | None]) -> str:
    return fmt_ci(*ss.seed_interval([v for v in values if v is not None]))


def section_q1(d: Doc, cells: Cells, expected: Sequence[tuple[str, Sequence[int]]]) -> None:
    d.add("## Q1. Algorithms x reward density (study `algos`)\n\nHeld-out test games of the "
          "training difficulty, greedy success after RL and the area under the held-out learning "
          "curve (mean greedy success over RL iterations: start, periodic, end; higher = learns "
          "sooner). Mean over seeds with Student's t 95% interval.")
    rows = []
    for arm, seeds in expected:
        c = cells.get(arm, {})
        recs = [c[s] for s in seeds if s in c]
        rows.append([arm, seeds_text(c, seeds), mean_ci_cell([success(r, "id", "start") for r in recs]),
                     mean_ci_cell([success(r, "id") for r in recs]), mean_ci_cell([auc(r) for r in recs])])
    d.table(["estimator / reward", "seeds", "success after SFT", "success after RL", "learning-curve area"], rows)
    seeds = list(expected[0][1]) if expected else []
    arms = [a for a, _ in expected]
    rewards = sorted({a.split(" / ")[1] for a in arms}, key=["sparse", "dense", "process"].index)
    estimators = list(dict.fromkeys(a.split(" / ")[0] for a in arms))
    f_rows = []
    for r in rewards:
        for a, b, sign, direction in (("gae", "rloo", 1, "PPO ahead of RLOO"),
                                      ("turn_gae", "rloo", 1, "PPO ahead of RLOO"),
                                      ("grpo", "gae", -1, "GRPO far behind PPO")):
            A, B = f"{a} / {r}", f"{b} / {r}"
            f_rows.append(finding(f"success: {A} − {B}", direction, sign,
                                  seed_diffs(cells, A, B, lambda x: success(x, "id")),
                                  paired_arms(cells, A, B), complete(cells, [A, B], seeds)))
    for e in estimators:
        A, B = f"{e} / dense", f"{e} / sparse"
        f_rows.append(finding(f"learning-curve area: {A} − {B}", "dense rewards speed learning",
                              1, seed_diffs(cells, A, B, auc), None, complete(cells, [A, B], seeds)))
    d.add("Findings (differences between arms of the same seed, which share one SFT policy):")
    d.table(FINDINGS_HEADER, f_rows)
    for r in rewards:
        curves = {}
        for e in estimators:
            recs = list(cells.get(f"{e} / {r}", {}).values())
            its = [tuple(x["curve"]["iteration"]) for x in recs if x.get("curve")]
            if its and len(set(its)) == 1:
                vals = np.asarray([[np.nan if v is None else v for v in curve_values(x["curve"])]
                                   for x in recs])
                curves[f"{e} ({len(recs)} seeds)"] = (list(its[0]), np.nanmean(vals, 0))
        if curves:
            title = f"Held-out success by RL iteration, {r} reward"
            d.image(title, plots.plot_learning_curves(d.plot_dir / f"q1_curves_{r}.png", curves,
                                                      "greedy success (mean over seeds)", title, "RL iteration"))
    d.add(prose_block("q1", d.kept))


def section_q2(d: Doc, cells: Cells, expected: Sequence[tuple[str, Sequence[int]]]) -> None:
    d.add("## Q2. SFT share at a fixed budget (study `sft_share`)\n\nOne budget of episode-units "
          "(a demonstration costs 10 RL episodes) split between SFT and RL; greedy success on the "
          "held-out test games after the whole budget. The gain over share 0 (RL from the fresh "
          "model) is paired per game, all seeds pooled.")
    rows = []
    base = expected[0][0] if expected else ""
    for arm, seeds in expected:
        c = cells.get(arm, {})
        recs = [c[s] for s in seeds if s in c]
        g, lo, hi, n = paired_arms(cells, arm, base) if arm != base else (math.nan,) * 3 + (0,)
        rows.append([arm, seeds_text(c, seeds), mean_ci_cell([success(r, "id") for r in recs]),
                     mean_ci_cell([success(r, "hard") for r in recs]),
                     fmt_ci(g, lo, hi, True) + (f" (n={n})" if n else "")])
    d.table(["SFT share", "seeds", "success (training difficulty)", "success (harder)",
             f"vs {base}, paired per game"], rows)
    seeds = list(expected[0][1]) if expected else []
    # Share 0.75 stands for "SFT then RL": the mixed share nearest the other studies' 0.833,
    # fixed before any cell ran (not the best share after the fact).
    comparisons = [("sft 0.25", "sft 0", "id", "a small SFT prior beats pure RL"),
                   ("sft 0.75", "sft 1", "id", "SFT then RL beats SFT alone"),
                   ("sft 0.75", "sft 1", "hard", "SFT then RL beats SFT alone")]
    d.add("Findings:")
    d.table(FINDINGS_HEADER, [
        finding(f"success{' (harder)' if role == 'hard' else ''}: {a} − {b}", claim, 1,
                seed_diffs(cells, a, b, lambda x, role=role: success(x, role)),
                paired_arms(cells, a, b, role), complete(cells, [a, b], seeds))
        for a, b, role, claim in comparisons])
    d.add(prose_block("q2", d.kept))


def section_q3(d: Doc, cells: Cells, expected: Sequence[tuple[str, Sequence[int]]]) -> None:
    d.add("## Q3. Turn budget (study `budget`)\n\nPass@(K,T) on the held-out test games of the "
          "training difficulty, mean over seeds, for the starting (SFT) policy and after RL, in two "
          "modes: *unstated* (the prompt never states the budget; one sampled run per episode at "
          "T = 12, success under T read from the winning turn) and *stated* (the prompt states the "
          "turns left; a separate sampled run at every T). Arms: RL at a fixed budget of 12, RL "
          "with BudgetMix (each episode's budget drawn from {2, 3, 4, 6, 8, 12}), and BudgetMix "
          "trained with the budget stated. A policy evaluated in the mode it was not trained in "
          "reads a prompt it never saw.")
    for arm, seeds in expected:
        recs = [cells.get(arm, {})[s] for s in seeds if s in cells.get(arm, {})]
        d.add(f"### {arm} ({seeds_text(cells.get(arm, {}), seeds)} seeds)".replace(
            "(not run yet seeds)", "(not run yet)"))
        for mode in ("unstated", "stated"):
            end, start = grid_mean(recs, mode, "end"), grid_mean(recs, mode, "start")
            if end is None or start is None:
                continue
            g, end_KT = end
            start_KT = start[1]
            d.table([f"{mode}: K \\ T"] + [f"T={t}" for t in g["ts"]],
                    [[f"K={k}"] + [f"{fmt(start_KT[i, j])} → {fmt(end_KT[i, j])}" for j in range(len(g["ts"]))]
                     for i, k in enumerate(g["ks"])])
            slug = re.sub(r"\W+", "_", arm).strip("_")
            heat = plots.plot_pass_at_k_t_heatmap
            p1 = heat(d.plot_dir / f"q3_{slug}_{mode}_end.png", g["ks"], g["ts"], end_KT,
                      f"{arm}, {mode}: after RL")
            p2 = heat(d.plot_dir / f"q3_{slug}_{mode}_gain.png", g["ks"], g["ts"],
                      end_KT - start_KT, f"{arm}, {mode}: after RL − SFT", difference=True)
            d.image(f"{arm} {mode} after RL", p1)
            d.image(f"{arm} {mode} RL − SFT", p2)
    arms = [a for a, _ in expected]
    seeds = list(expected[0][1]) if expected else []
    fixed = arms[0] if arms else ""
    for mix, mode in [(m, mode) for m in arms[1:] for mode in ("unstated", "stated")]:
        a = grid_mean(list(cells.get(mix, {}).values()), mode, "end")
        b = grid_mean(list(cells.get(fixed, {}).values()), mode, "end")
        if a and b and (a[0]["ks"], a[0]["ts"]) == (b[0]["ks"], b[0]["ts"]):
            title = f"{mode}: {mix} − {fixed}, after RL"
            slug = re.sub(r"\W+", "_", mix).strip("_")
            d.image(title, plots.plot_pass_at_k_t_heatmap(
                d.plot_dir / f"q3_{slug}_minus_fixed_{mode}.png", a[0]["ks"], a[0]["ts"],
                a[1] - b[1], title, difference=True))
    f_rows = []
    recs = list(cells.get(fixed, {}).values())
    # The grid of any cell of the study (every arm evaluates the same one).
    g0 = next((g for a in cells.values() for r in a.values()
               if (g := grid(r, "unstated", "end") or grid(r, "stated", "end"))), None)
    ks, ts = (g0["ks"], g0["ts"]) if g0 else ([1, 4], [4, 12])
    t_small = min([t for t in ts if t >= 4] or ts)
    t_max, k_max = max(ts), max(ks)

    def gain(r, t, k=1, task=None, mode="unstated"):
        return (grid_value(grid(r, mode, "end"), k, t, task)
                - grid_value(grid(r, mode, "start"), k, t, task))

    def per_seed(recs, fn):
        out = []
        for r in recs:
            try:
                out.append(fn(r))
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        return out

    ok = complete(cells, [fixed], seeds)
    f_rows.append(finding(f"{fixed}: RL gain at T={t_small} − at T={t_max} (Pass@1, unstated)",
                          "RL's gain shrinks as T tightens", -1,
                          per_seed(recs, lambda r: gain(r, t_small) - gain(r, t_max)),
                          ss.paired_mean_interval(task_diffs(
                              recs, lambda r, x: gain(r, t_small, 1, x) - gain(r, t_max, 1, x))),
                          ok))
    f_rows.append(finding(f"{fixed}: RL's change of Pass@({k_max},{t_max}) − Pass@(1,{t_max})",
                          "RL narrows the gap at large K", -1,
                          per_seed(recs, lambda r: gain(r, t_max, k_max) - gain(r, t_max)),
                          ss.paired_mean_interval(task_diffs(
                              recs, lambda r, x: gain(r, t_max, k_max, x) - gain(r, t_max, 1, x))),
                          ok))
    for mix, mode in [(m, mode) for m in arms[1:] for mode in ("unstated", "stated")]:
        def end_at(r, task=None, mode=mode):
            return grid_value(grid(r, mode, "end"), 1, t_small, task)
        diffs = seed_diffs(cells, mix, fixed, lambda r: end_at(r) if grid(r, mode, "end") else None)
        units = []
        for s in sorted(set(cells.get(mix, {})) & set(cells.get(fixed, {}))):
            a, b = grid(cells[mix][s], mode, "end"), grid(cells[fixed][s], mode, "end")
            if a and b:
                units += [end_at(cells[mix][s], t) - end_at(cells[fixed][s], t)
                          for t in sorted(set(a["per_task"]) & set(b["per_task"]))]
        f_rows.append(finding(f"Pass@(1,{t_small}) after RL, {mode}: {mix} − {fixed}",
                              "BudgetMix more robust at small T", 1, diffs,
                              ss.paired_mean_interval(units), complete(cells, [mix, fixed], seeds)))
    d.add("Findings (the direction each question posits; per-task units are (seed, task) pairs):")
    d.table(FINDINGS_HEADER, f_rows)
    d.add(prose_block("q3", d.kept))


DIAGNOSTICS = (("first_action_progress", "first action makes progress"),
               ("recovery_no_progress", "won after a useless action"),
               ("recovery_invalid", "won after an invalid action"),
               ("plan_done", "expert plan completed"))


def section_q4(d: Doc, cells: Cells, expected: Sequence[tuple[str, Sequence[int]]]) -> None:
    d.add("## Q4. Where RL's gain sits (from the `algos` cells)\n\nPer-turn diagnostics of the "
          "sampled held-out episodes (2 per game at the training temperature, T = 12) of the "
          "starting policy and after RL: the change (after − before), mean over seeds with "
          "Student's t 95% interval; the last row pools every algos cell, averaged per seed "
          "first (unit: a seed; the cells of one seed share their SFT policy).")
    rows, all_recs = [], []
    for arm, seeds in expected:
        recs = [cells.get(arm, {})[s] for s in seeds if s in cells.get(arm, {})]
        all_recs += recs
        rows.append([arm, seeds_text(cells.get(arm, {}), seeds)]
                    + [fmt_ci(*ss.seed_interval([v for r in recs if (v := diag_change(r, k)) is not None]), True)
                       for k, _ in DIAGNOSTICS])
    n_seeds = len({r["seed"] for r in all_recs})
    rows.append([f"all algos cells ({len(all_recs)}), per seed", str(n_seeds)]
                + [fmt_ci(*ss.seed_interval(seed_means(all_recs, lambda r, k=k: diag_change(r, k))),
                          True) for k, _ in DIAGNOSTICS])
    d.table(["estimator / reward", "seeds"] + [f"Δ {label}" for _, label in DIAGNOSTICS], rows)

    def recovery_minus_first(r):
        a, b = diag_change(r, "recovery_no_progress"), diag_change(r, "first_action_progress")
        return None if a is None or b is None else a - b
    seeds = list(expected[0][1]) if expected else []
    d.add("Findings (unit: a seed, the mean over its algos cells):")
    d.table(FINDINGS_HEADER, [finding("Δ won after a useless action − Δ first action makes progress",
                                      "RL's gain is in recovery more than in single steps", 1,
                                      seed_means(all_recs, recovery_minus_first), None,
                                      complete(cells, [a for a, _ in expected], seeds))])
    series = {}
    for tag in ("start", "end"):
        vals = [ss.seed_interval(seed_means(all_recs, lambda r, k=k, tag=tag: (
                    (r.get("diagnostics") or {}).get(tag) or {}).get(k)))
                for k, _ in DIAGNOSTICS]
        series["after SFT" if tag == "start" else "after RL"] = tuple(np.asarray(vals).T.tolist())
    if all_recs:
        title = "Per-turn diagnostics, all algos cells (mean over seeds of the seed means, 95% t)"
        d.image(title, plots.plot_grouped_bars(d.plot_dir / "q4_recovery_bars.png",
                                               [label for _, label in DIAGNOSTICS], series, "rate", title))
    d.add(prose_block("q4", d.kept))


def section_q5(d: Doc, cells: Cells, expected: Sequence[tuple[str, Sequence[int]]]) -> None:
    d.add("## Q5. Difficulty transfer (from the `algos` cells)\n\nTrained on w2-o3-q4; RL's "
          "gain (after RL − after SFT, greedy) on held-out test games of the training difficulty "
          "and two harder ones, per estimator, the three rewards pooled: the mean over seeds of "
          "each seed's mean over its cells with Student's t 95% interval (unit: a seed), and per "
          "game (each game's gain averaged over the cells that played it; percentile bootstrap "
          "over games).")
    estimators = list(dict.fromkeys(a.split(" / ")[0] for a, _ in expected))
    roles = ("id", "hard", "harder")
    names = {}
    for arm_cells in cells.values():
        for rec in arm_cells.values():
            for role in roles:
                if (s := split_of(rec, role)):
                    names.setdefault(role, s[0])
    rows, f_rows = [], []
    seeds = list(expected[0][1]) if expected else []
    for e in estimators:
        arms = [a for a, _ in expected if a.split(" / ")[0] == e]
        recs = [r for a in arms for r in cells.get(a, {}).values()]
        row = [e, f"{len(recs)}/{len(arms) * len(seeds)}"]
        for role in roles:
            def gain(r, role=role):
                a, b = success(r, role, "start"), success(r, role)
                return None if a is None or b is None else b - a
            gains = seed_means(recs, gain)
            g, lo, hi, n = ss.paired_mean_interval(game_mean_gains(recs, role))
            row += [mean_ci_cell(seed_means(recs, lambda r, role=role: success(r, role))),
                    fmt_ci(*ss.seed_interval(gains), True), fmt_ci(g, lo, hi, True) + (f" (n={n})" if n else "")]
            if role != "id":
                f_rows.append(finding(f"{e}: RL gain on {names.get(role, role)}", "RL on easier games "
                                      "transfers to harder ones", 1, gains, (g, lo, hi, n),
                                      complete(cells, arms, seeds)))
        rows.append(row)
    header = ["estimator", "cells"]
    for role in roles:
        n = names.get(role, role)
        header += [f"{n} after RL", f"{n} gain (seeds)", f"{n} gain (games)"]
    d.table(header, rows)
    d.add("Findings:")
    d.table(FINDINGS_HEADER, f_rows)
    d.add(prose_block("q5", d.kept))


def section_scale(d: Doc, loaded: Mapping[str, Cells], expected: Expected) -> None:
    d.add("## Study scale and cells\n\nEvery cell is one run of `configs/study.py` (the default "
          "run's recipe at study scale; its docstring lists what differs) and the runner's own "
          "evaluations, on the machine and load recorded with it (load average: 1-minute, at the "
          "cell's start and end, on the cores named).")
    rows = []
    for study, arms in expected.items():
        cells = loaded.get(study, {})
        recs = [r for a in cells.values() for r in a.values()]
        want = sum(len(s) for _, s in arms)
        walls = [r["wall_s"]["total"] / 60 for r in recs if r.get("wall_s")]
        loads = [x for r in recs for x in (r.get("machine", {}).get("loadavg_start", [None])[0],
                                           r.get("machine", {}).get("loadavg_end", [None])[0]) if x is not None]
        cfg = (recs[0].get("config") if recs else None) or {}
        scale = ("n/a" if not cfg else f"{cfg['budget']['total_episodes']} episode-units, "
                 f"{cfg['games']['num_eval']} held-out games per difficulty")
        commits = sorted({r.get("commit", "")[:7] + ("+" if r.get("dirty") else "") for r in recs})
        rows.append([study, f"{len(recs)}/{want}", scale,
                     "n/a" if not walls else f"{np.median(walls):.1f} ({min(walls):.1f}-{max(walls):.1f})",
                     "n/a" if not loads else f"{min(loads):.1f}-{max(loads):.1f}"
                     + f" on {recs[0].get('machine', {}).get('cpus')} cores",
                     ", ".join(commits) or "n/a"])
    d.table(["study", "cells done", "scale", "wall min, median (range)", "load average",
             "commits (+: uncommitted changes)"], rows)


SECTIONS = (("algos", section_q1), ("sft_share", section_q2), ("budget", section_q3),
            ("algos", section_q4), ("algos", section_q5))


def write_document(results_dir: str, document: str, expected: Expected) -> str:
    """Writes the results document (and its plots under ``<results_dir>/plots``); returns its
    path. ``expected``: {study: [(arm, seeds)]}, the cells the document lists."""
    missing = [s for s, _ in SECTIONS if s not in expected]
    if missing:
        raise ValueError(f"expected cells lack the studies {sorted(set(missing))}; give every "
                         "study's (arm, seeds) list (experiments.studies.expected_cells).")
    loaded = load_cells(results_dir, sorted(expected))
    d = Doc(document, os.path.join(results_dir, "plots"), kept_prose(document))
    for old in d.plot_dir.glob("q[0-9]_*.png"):    # every plot is drawn again (or is gone)
        old.unlink()
    d.add("# Results of the studies\n\nGenerated by `python -m experiments.studies --report` from "
          f"the cell records under `{os.path.relpath(results_dir, os.path.dirname(document) or '.')}/`"
          "; only the text between `prose` markers is written by hand (it survives regeneration). "
          "Held-out numbers are on the test split (games no choice was made on). " + RULE)
    d.add(prose_block("headline", d.kept))
    section_scale(d, loaded, expected)
    for study, fn in SECTIONS:
        fn(d, loaded.get(study, {}), list(expected[study]))
    pathlib.Path(document).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(document).write_text("\n\n".join(d.parts) + "\n", encoding="utf-8")
    return document
