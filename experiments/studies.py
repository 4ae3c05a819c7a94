"""Sweeps of small training runs and one comparison report per study.

    # PPO (gae) / GRPO / RLOO  x  sparse / dense (/ process) rewards  x  SFT share, several seeds
    python -m experiments.studies --study=algos --workdir=runs/algos_study
    # fixed turn budget vs BudgetMix, each evaluated across a grid of budgets
    python -m experiments.studies --study=budget --workdir=runs/budget_study
    # the whole sweep at toy size (a few minutes on a laptop CPU)
    python -m experiments.studies --study=algos --smoke --workdir=/tmp/algos_smoke

Every cell is ``meowjax.trainers.run.run(config, <workdir>/<cell>)`` (rerunning resumes finished
and partial cells from their checkpoints, so an interrupted sweep continues where it stopped;
on SIGTERM the running cell saves its state and the sweep exits with status 75).
The report (``<workdir>/report.md`` + results.json + plots/) gives mean success over seeds with
bootstrap CIs on the held-out split of the training difficulty ("ID") and the harder split, and
for the budget study success-vs-budget curves (Pass@(1,T) and Pass@(K_max,T), mean over seeds).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from typing import Any, Sequence

import numpy as np
from absl import app, flags, logging

from configs import study_algos, textworld_budgetmix, textworld_fixed_budget
from meowjax.eval import report, stats
from meowjax.runtime import console, host_memory, preemption, workdir_lock, xla_cache

STUDIES = ("algos", "budget")
RESULT_FILE = "cell_result.json"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One training run of a study: its label (row of the table), seed, and config."""

    label: str
    seed: int
    config: Any

    @property
    def name(self) -> str:
        return f"{self.label}_seed{self.seed}".replace(" ", "_").replace("/", "-")


def algo_cells(estimators: Sequence[str], rewards: Sequence[str], sft_shares: Sequence[float],
               seeds: Sequence[int], smoke: bool) -> list[Cell]:
    """(estimator x reward x sft_share x seed) cells of configs/study_algos.py."""
    cells = []
    for est, rew, share, seed in itertools.product(estimators, rewards, sft_shares, seeds):
        arg = f"estimator={est},reward={rew},sft_share={share},seed={seed},smoke={smoke}"
        label = f"{'ppo' if est == 'gae' else est} / {rew} / sft {share:g}"
        cells.append(Cell(label, seed, study_algos.get_config(arg)))
    return cells


def budget_cells(seeds: Sequence[int], smoke: bool) -> list[Cell]:
    """Fixed budget vs BudgetMix cells (same games, model and evaluation grid)."""
    cells = []
    for seed in seeds:
        arg = f"seed={seed},smoke={smoke}"
        fixed = textworld_fixed_budget.get_config(arg)
        mix = textworld_budgetmix.get_config(arg)
        cells.append(Cell(f"fixed T={fixed.turns.max_turns}", seed, fixed))
        cells.append(Cell("budgetmix " + "/".join(map(str, mix.turns.budget_mix)), seed, mix))
    return cells


def run_cell(cell: Cell, workdir: str) -> dict[str, Any]:
    """Trains one cell (or reuses its saved result) and returns its JSON-able final evals."""
    folder = os.path.join(workdir, cell.name)
    path = os.path.join(folder, RESULT_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    from meowjax.trainers import run
    out = run.run(cell.config, folder)
    result = {"label": cell.label, "seed": cell.seed, "evals": out["evals"],
              "rl_iters": out["rl_iters"], "plan": out["plan"]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return result


def _success(res: dict[str, Any], split: str, tag: str = "final") -> float | None:
    e = res["evals"].get(tag, {}).get(split)
    return None if e is None else float(e["success"])


def success_rows(results: Sequence[dict[str, Any]], split: str,
                 tag: str = "final") -> dict[str, list[float]]:
    """{label: [success of each seed]} on one split (cells without that split are left out)."""
    rows: dict[str, list[float]] = {}
    for r in results:
        s = _success(r, split, tag)
        if s is not None:
            rows.setdefault(r["label"], []).append(s)
    return rows


def budget_curves(results: Sequence[dict[str, Any]], k: int = 1) -> dict[str, Any]:
    """{label: (ts, mean over seeds of Pass@(k,T), bootstrap low, high)} from final Pass@(K,T)."""
    by_label: dict[str, list[np.ndarray]] = {}
    ts_of: dict[str, list[int]] = {}
    for r in results:
        pk = r["evals"].get("final", {}).get("pass_at_k_t")
        if pk is None:
            continue
        if k not in pk["ks"]:
            raise ValueError(f"cell {r['label']} has no K={k} in its Pass@(K,T) grid {pk['ks']}.")
        by_label.setdefault(r["label"], []).append(np.asarray(pk["mean"])[pk["ks"].index(k)])
        ts_of[r["label"]] = pk["ts"]
    curves = {}
    for label, rows in by_label.items():
        values_ST = np.stack(rows)
        low, high = stats.bootstrap_ci(values_ST, np.mean) if len(rows) > 1 else (None, None)
        curves[f"{label} (K={k})"] = (ts_of[label], values_ST.mean(0).tolist(),
                                      None if low is None else np.asarray(low).tolist(),
                                      None if high is None else np.asarray(high).tolist())
    return curves


def study_report(study: str, results: Sequence[dict[str, Any]], workdir: str,
                 seeds: Sequence[int], smoke: bool) -> str:
    """The comparison report of one study; returns its path."""
    id_rows, hard_rows = success_rows(results, "eval"), success_rows(results, "eval_hard")
    start_rows = success_rows(results, "eval", "start")
    sections: list[Any] = [report.TextSection("Setup", (
        f"Study `{study}`{' (smoke: toy size, numbers are not meaningful)' if smoke else ''}: "
        f"{len(results)} runs, seeds {list(seeds)}. Success = greedy success on held-out games "
        "after RL; mean over seeds with a 95% bootstrap interval over seeds (with one seed the "
        "interval is the point). ID = the training difficulty; harder = the config's hard split."))]
    if id_rows:
        sections.append(report.MeanTable("Success on held-out games, training difficulty (ID)",
                                         id_rows))
    if hard_rows:
        sections.append(report.MeanTable("Success on the harder split", hard_rows))
    if start_rows:
        sections.append(report.MeanTable("Success before RL (after SFT), ID", start_rows))
    pooled = []
    for label in id_rows:
        wins = sum(int(r["evals"]["final"]["eval"]["wins"]) for r in results if r["label"] == label)
        n = sum(int(r["evals"]["final"]["eval"]["n"]) for r in results if r["label"] == label)
        pooled.append(report.SuccessRow(label, wins, n))
    if pooled:
        sections.append(report.SuccessTable("ID success pooled over seeds (Wilson)", pooled))
    if study == "budget":
        ks = results[0]["evals"]["final"]["pass_at_k_t"]["ks"] if results else [1]
        curves = budget_curves(results, 1)
        if max(ks) > 1:
            curves.update(budget_curves(results, max(ks)))
        if curves:
            sections.append(report.BudgetCurves("Success vs evaluation turn budget", curves,
                                                metric="Pass@(K,T)"))
    return str(report.write_report(workdir, f"meowjax study: {study}", sections))


def run_study(study: str, workdir: str, *, smoke: bool, seeds: Sequence[int],
              estimators: Sequence[str] = study_algos.ESTIMATORS,
              rewards: Sequence[str] = ("sparse", "dense"),
              sft_shares: Sequence[float] = (0.0, 0.25), games_dir: str = "") -> str:
    """Runs every cell of ``study`` under ``workdir`` and writes the report; returns its path."""
    if study not in STUDIES:
        raise ValueError(f"study={study!r}; choose one of {STUDIES}.")
    cells = (algo_cells(estimators, rewards, sft_shares, seeds, smoke) if study == "algos"
             else budget_cells(seeds, smoke))
    results = []
    for i, cell in enumerate(cells):
        if games_dir:
            cell.config.unlock()
            cell.config.games.cache_dir = games_dir
            cell.config.lock()
        logging.info("study %s: cell %d/%d %s", study, i + 1, len(cells), cell.name)
        results.append(run_cell(cell, workdir))
    return study_report(study, results, workdir, seeds, smoke)


def define_flags() -> None:
    """The command-line flags (only when run as a script, so importing this module is free)."""
    flags.DEFINE_enum("study", "algos", list(STUDIES), "Which study to run.")
    flags.DEFINE_string("workdir", "runs/study", "One sub-folder per cell + the report.")
    flags.DEFINE_bool("smoke", False, "Toy size: the whole sweep in a few minutes.")
    flags.DEFINE_list("seeds", None, "Seeds (default 0,1,2; smoke 0,1).")
    flags.DEFINE_list("estimators", None, "gae (PPO) / grpo / rloo (default: all; smoke: "
                      "rloo,grpo).")
    flags.DEFINE_list("rewards", ["sparse", "dense"], "sparse / dense / process.")
    flags.DEFINE_list("sft_shares", None, "SFT shares of the budget (default 0,0.25; smoke: 0.5).")
    flags.DEFINE_string("games_dir", "", "Override games.cache_dir of every cell.")
    flags.DEFINE_string("compile_cache", "", "JAX persistent compilation cache folder (cells share "
                        f"compiled shapes; default {xla_cache.DEFAULT_DIR}, --smoke: "
                        "<workdir>/jax_cache).")
    flags.DEFINE_bool("keep_host_memory", True, "Reuse freed host memory instead of returning "
                      "it to the OS (glibc; meowjax/runtime/host_memory.py).")


def main(argv):
    del argv
    F = flags.FLAGS
    console.install()  # phase lines and progress bars; -v 1 for every log line
    smoke = F.smoke
    if F.keep_host_memory:
        host_memory.keep_freed_memory()
    xla_cache.enable(F.compile_cache or (os.path.join(F.workdir, "jax_cache") if smoke
                                         else xla_cache.DEFAULT_DIR), min_compile_s=0.0)
    seeds = [int(s) for s in (F.seeds or (["0", "1"] if smoke else ["0", "1", "2"]))]
    estimators = F.estimators or (["rloo", "grpo"] if smoke else list(study_algos.ESTIMATORS))
    shares = [float(s) for s in (F.sft_shares or (["0.5"] if smoke else ["0", "0.25"]))]
    try:
        path = run_study(F.study, F.workdir, smoke=smoke, seeds=seeds,
                         estimators=estimators, rewards=F.rewards, sft_shares=shares,
                         games_dir=F.games_dir)
    except preemption.Preempted:   # as experiments/train.py: one line, status 75
        print(f"Stopped by SIGTERM; finished cells and the running cell's state are saved under "
              f"{F.workdir}. Rerun the same command to continue.", file=sys.stderr, flush=True)
        sys.exit(preemption.EXIT_STATUS)
    except workdir_lock.WorkdirBusy as e:
        print(e, file=sys.stderr, flush=True)
        sys.exit(1)
    with open(path, encoding="utf-8") as f:
        print(f.read())


if __name__ == "__main__":
    define_flags()
    app.run(main)
