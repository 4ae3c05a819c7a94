"""The studies' runner: every cell (one training run of configs/study.py + its evaluation) x
seed, one JSON per cell under docs/results/<study>/, and the document docs/results.md made from
them and the study definitions (one file per study in this package: its ``STUDY``).

    python -m experiments.studies --plan               # cells, CPU time, detectable effect
    python -m experiments.studies --study=algos        # Q1 (+ Q4, Q5, Q6)
    python -m experiments.studies --study=budget       # Q3: fixed budget vs BudgetMix (+ stated)
    python -m experiments.studies --study=sft_share    # Q2: SFT shares of one budget
    python -m experiments.studies --study=algos --commit   # commit each cell's JSON as it lands
    python -m experiments.studies --report             # docs/results.md from the JSON only
    python -m experiments.studies --study=budget --smoke --seeds=0 --workdir=/tmp/st  # toy size

Shared SFT: the cells of one seed whose SFT phase is the same (algos: every estimator and
reward; budget: the unstated arms, the stated arm apart) start RL from one SFT run, made once
under <workdir>/_sft/<key>/ (meowjax/trainers/shared_sft.py); the SFT-share study's cells run
their own. Resumable: a cell whose JSON exists is skipped; a cell whose training stopped resumes
from its checkpoint under --workdir (runs/studies/<study>/<cell>), a stopped shared SFT from
its own; on SIGTERM the running cell saves its state and the sweep exits with status 75.
Seeds default to each study's own; --arms picks some rows.
Questions 4 (where the gain sits), 5 (difficulty transfer) and 6 (process supervision) are read
from the algos cells, which record per-turn diagnostics and three held-out difficulties for the
start and end policy.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import subprocess
import sys
import time
from typing import Any, Sequence

import numpy as np
from absl import app, flags, logging

from configs import study as study_config
from meowjax.eval import studies_report, study_cells, study_stats
from meowjax.eval.study_spec import Study
from meowjax.runtime import console, host_memory, preemption, workdir_lock, xla_cache

SCHEMA = 2     # 2: the default run's RL phase, 200 games per difficulty (1: the earlier schedule)
RESULTS_DIR = "docs/results"
SFT_DIR = "_sft"     # <workdir>/_sft/<key>/: the SFT runs shared by cells
DOCUMENT = "docs/results.md"
README = "README.md"   # its findings list (between markers) is written with the document


STUDIES: dict[str, Study] = {}   # name -> definition; the package fills it from its files


def cell_name(arm: str, seed: int) -> str:
    """``"gae / dense"``, 1 -> ``"gae-dense-s1"`` (file and workdir name)."""
    slug = "-".join(part for part in arm.replace("/", " ").replace("=", "").split())
    return f"{slug}-s{seed}"


def config_arg(knobs: Sequence[tuple[str, Any]], seed: int, smoke: bool) -> str:
    """The ``configs/study.py:<arg>`` string of a cell."""
    return ",".join([f"{k}={v}" for k, v in knobs] + [f"seed={seed}", f"smoke={smoke}"])


def with_seeds(seeds: Sequence[int] = ()) -> list[Study]:
    """Every study, with ``seeds`` in place of its own where given (the cells a report lists;
    missing ones: "not run yet")."""
    return [dataclasses.replace(st, seeds=tuple(seeds)) if seeds else st
            for st in STUDIES.values()]


# -- the plan ----------------------------------------------------------------------------------
# CPU minutes on 2 quiet cores, before any cell of this scale is recorded: a cell is the default
# run's RL phase (6.6 min) and its evaluations at 200 games per difficulty (~6.5 min), plus
# start-up; a shared SFT is the default's SFT (2.1 min) plus start-up (the default run at seed
# 0 alone and cold, docs/results-history.md). Recorded cells replace the cell figure.
CELL_MIN_PRIOR, SFT_MIN_PRIOR = 14.0, 3.0
SUMMARY = "docs/results/default/summary.json"


def recorded_cell_minutes(results_dir: str, study: str) -> list[float]:
    """Wall minutes of the recorded cells of ``study`` at this scale (``SCHEMA``)."""
    cells = study_cells.load_cells(results_dir, [study]).get(study, {})
    return [r["wall_s"]["total"] / 60 for by_seed in cells.values() for r in by_seed.values()
            if r.get("schema") == SCHEMA]


def plan(studies: Sequence[str], *, seeds: Sequence[int] = (), results_dir: str = RESULTS_DIR,
         summary: str = SUMMARY) -> str:
    """Each study's cells, CPU time and the smallest difference between two arms it detects
    with 80% power at the RL difficulty (``study_stats.design_mde``), before anything runs.

    The SDs come from the default run's seed record (``summary``): the per-game SD of RL's
    paired gain at the RL difficulty stands for the per-game SD of two arms' difference on the
    same games, and the between-seed SD is what the seeds' spread of that gain leaves after the
    games' share, ``max(0, var(gain_s) - game_sd^2 / games)``."""
    with open(summary, encoding="utf-8") as f:
        rec = json.load(f)
    gains = [s["rl_difficulty"]["gain"] for s in rec["seeds"]]
    games = rec["seeds"][0]["rl_difficulty"]["games"]
    game_sd = rec["mean_gain"]["rl_difficulty"]["game_sd"]
    between = math.sqrt(max(0.0, float(np.var(gains, ddof=1)) - game_sd ** 2 / games))
    lines = [f"SDs from {summary} (RL difficulty, {len(gains)} seeds x {games} games): per game "
             f"{game_sd:.3f}, between seeds {between:.3f}"]
    for name in studies:
        st = STUDIES[name]
        use = list(seeds or st.seeds)
        cells = len(st.arms) * len(use)
        recorded = recorded_cell_minutes(results_dir, name)
        cell_min = float(np.median(recorded)) if recorded else CELL_MIN_PRIOR
        sft_runs = len(use) if st.shared_sft else 0
        total_h = (cells * cell_min + sft_runs * SFT_MIN_PRIOR) / 60
        mde = (study_stats.design_mde(between, game_sd, len(use), study_config.EVAL_GAMES)
               if len(use) > 1 else math.nan)
        lines += [f"\n{name}: {st.question}",
                  f"  arms ({len(st.arms)}): " + "; ".join(a for a, _ in st.arms),
                  f"  seeds {use}: {cells} cells, {sft_runs} shared SFT runs",
                  f"  CPU: {cell_min:.1f} min a cell ("
                  + (f"median of {len(recorded)} recorded" if recorded else "estimate")
                  + f"), {total_h:.1f} h in all",
                  f"  detectable difference in greedy success between two arms at 80% power, "
                  f"alpha 0.05: {mde:.3f} ({len(use)} seeds x {study_config.EVAL_GAMES} "
                  f"games); {len(st.comparisons)} comparisons"]
    return "\n".join(lines)


# -- one cell ----------------------------------------------------------------------------------
CODE_PATHS = ("meowjax", "configs", "experiments")


def git_state() -> dict[str, Any]:
    """The commit the cell runs at and whether its code (``CODE_PATHS``) differed from it."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--",
                              *CODE_PATHS))}


def learning_curve(workdir: str, evals: dict[str, Any], rl_iters: int) -> dict[str, Any]:
    """The held-out learning curve (the trainer's curve points: greedy success on the fixed
    validation games of the RL difficulty, by RL iteration) and the rollout success of every
    iteration (metrics.jsonl; a resumed run's repeated records count once, the last)."""
    by_step: dict[int, dict[str, Any]] = {}
    path = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                by_step.setdefault(int(r["step"]), {}).update(r)
    rl_steps = sorted(s for s, r in by_step.items() if "rollout/success" in r)
    points = {int(p["iteration"]): p for p in evals.get("curve", [])}   # last of a repeat
    return {"iteration": sorted(points),
            "curve": [points[i]["success"] for i in sorted(points)],
            "curve_games": max((p["n"] for p in points.values()), default=0),
            "rl_iters": rl_iters,
            "rollout_success": [by_step[s]["rollout/success"] for s in rl_steps]}


def _split_record(e: dict[str, Any] | None) -> dict[str, Any] | None:
    keys = ("success", "wins", "n", "per_game", "mean_turns", "invalid_rate")
    return None if e is None else {k: e[k] for k in keys if k in e}


def after_training(c, workdir: str, out: dict[str, Any], st: Study, smoke: bool) -> dict[str, Any]:
    """The runner's own evaluations of the start (``out['ref']``: the params RL started from)
    and end policies: the Pass@(K,T) grids in both modes, on the trainer's sampled games (a
    policy trained without the budget in its prompts has its unstated grid from the trainer's
    evaluations already: the same player, games, seed and grid)."""
    if not (st.grids or st.probe):
        return {}
    from meowjax.agents.registry import agent_class
    from meowjax.envs import game_sets
    from meowjax.envs.pool import EnvPool
    from meowjax.eval import held_out
    agent = agent_class(c.policy.interface)(c, workdir)
    pool = EnvPool(game_sets.env_spec(c, admissible=agent.needs_admissible),
                   num_workers=c.env.num_workers, step_timeout_s=c.env.step_timeout_s)
    policies = {"start": out["ref"], "end": out["state"].params}
    tasks = held_out.sampled_tasks(game_sets.game_sets(c)[c.eval.sampled_split],
                                   c.eval.sampled_games)
    res: dict[str, Any] = {}
    try:
        if st.probe:
            res["probe"] = {tag: held_out.forced_action_probe(
                agent, p, pool, tasks, turn=st.probe[0], command=st.probe[1],
                budget=c.turns.eval_max_turns, seed=c.seed) for tag, p in policies.items()}
        if st.grids:
            res["passkt"] = {}
            for mode in ("unstated", "stated"):
                stated = mode == "stated"
                if not stated and not c.policy.state_budget:   # the trainer's grid is this one
                    evals = out["evals"]
                    res["passkt"][mode] = {"start": evals["start"]["pass_at_k_t"],
                                           "end": evals["final"]["pass_at_k_t"]}
                    continue
                res["passkt"][mode] = {tag: held_out.passkt_grid(
                    agent, p, pool, tasks, ks=c.eval.pass_ks, ts=c.eval.pass_ts,
                    samples=c.eval.num_samples, stated=stated, seed=c.seed)
                    for tag, p in policies.items()}
    finally:
        pool.close()
    return res


def sft_start(c, workdir: str, folder: str, shared: bool) -> dict[str, Any]:
    """Where the cell's RL starts. Shared: the SFT of the cell's key runs once under
    ``<workdir>/_sft/<key>/`` (reused by every cell of that key) and seeds the cell's workdir
    (``folder``) with its post-SFT checkpoint and tokenizer. Otherwise the cell runs its own SFT.
    Returns the cell JSON's ``sft`` record."""
    from meowjax.trainers import shared_sft
    key = shared_sft.sft_key(c)
    if not shared:
        return {"shared": False, "key": key, "folder": folder}
    rec = shared_sft.run(c, os.path.join(workdir, SFT_DIR, key))
    with workdir_lock.hold(folder):
        seeded = shared_sft.seed_workdir(c, rec, folder)
    return {"shared": True, "key": key, "folder": rec["folder"], "sft_steps": rec["sft_steps"],
            "wall_s": rec["wall_s"], "seeded_now": seeded}


def cell_record(study: str, arm: str, knobs, seed: int, smoke: bool, c, workdir: str,
                out: dict[str, Any], extra: dict[str, Any], walls: dict[str, float],
                load: dict[str, Any], git: dict[str, Any], sft: dict[str, Any]) -> dict:
    """Everything the document needs from one cell, JSON-able (``git``: the commit at the
    cell's start, the code it ran; ``sft``: where its RL started, ``sft_start``)."""
    from meowjax.envs import game_sets
    evals = out["evals"]
    splits = {}
    for key, role in (("eval", "id"), ("eval_hard", "hard"), ("eval_transfer", "harder")):
        if key in evals.get("start", {}):
            splits[game_sets.set_difficulty(c, key)] = {
                "role": role, "start": _split_record(evals["start"][key]),
                "end": _split_record(evals.get("final", {}).get(key))}
    passkt = extra.get("passkt") or {"unstated": {
        tag: evals[src]["pass_at_k_t"] for tag, src in (("start", "start"), ("end", "final"))
        if "pass_at_k_t" in evals.get(src, {})}}
    return {
        "schema": SCHEMA, "study": study, "arm": arm, "seed": seed, "cell": cell_name(arm, seed),
        "knobs": dict(knobs), "config_arg": config_arg(knobs, seed, smoke),
        "config": json.loads(c.to_json_best_effort()),
        **git, "command": shlex.join(["python", "-m", "experiments.studies", *sys.argv[1:]]),
        "machine": load, "wall_s": walls, "sft": sft, "plan": out["plan"],
        "rl_iters": out["rl_iters"],
        "splits": splits, "curve": learning_curve(workdir, evals, out["rl_iters"]),
        "passkt": passkt, "probe": extra.get("probe"),
        "diagnostics": {tag: evals.get(src, {}).get("diagnostics")
                        for tag, src in (("start", "start"), ("end", "final"))},
    }


def run_cell(study: str, arm: str, knobs, seed: int, *, smoke: bool, workdir: str,
             results_dir: str, games_dir: str = "", commit: bool = False) -> str | None:
    """Trains and evaluates one cell unless its JSON exists; returns the JSON's path (None when
    it was there already)."""
    path = os.path.join(results_dir, study, cell_name(arm, seed) + ".json")
    if os.path.exists(path):
        logging.info("study %s: %s done (%s), skipped", study, cell_name(arm, seed), path)
        return None
    from meowjax.trainers import run
    c = study_config.get_config(config_arg(knobs, seed, smoke))
    if games_dir:
        c.unlock()
        c.games.cache_dir = games_dir
        c.lock()
    folder = os.path.join(workdir, study, cell_name(arm, seed))
    git = git_state()      # before training: the code this process runs
    load = {"cpus": os.cpu_count(), "loadavg_start": list(os.getloadavg())}
    t0 = time.time()
    sft = sft_start(c, workdir, folder, STUDIES[study].shared_sft)
    t_sft = time.time()
    out = run.run(c, folder)
    t1 = time.time()
    extra = after_training(c, folder, out, STUDIES[study], smoke)
    walls = {"shared_sft": t_sft - t0, "train_and_eval": t1 - t_sft,
             "runner_eval": time.time() - t1, "total": time.time() - t0}
    load["loadavg_end"] = list(os.getloadavg())
    record = cell_record(study, arm, knobs, seed, smoke, c, folder, out, extra, walls, load, git,
                         sft)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(studies_report.jsonable(record), f, indent=1, allow_nan=False)
    os.replace(path + ".tmp", path)
    console.info("study %s: %s written (%.1f min)", study, path, walls["total"] / 60)
    if commit:
        commit_file(path, f"results: {study} cell {cell_name(arm, seed)}")
    return path


def commit_file(path: str, message: str) -> None:
    """Commits exactly ``path`` (other staged changes stay staged, uncommitted)."""
    subprocess.run(["git", "add", "--", path], check=True)
    subprocess.run(["git", "commit", "-q", "-m", message, "--", path], check=True)


def run_study(study: str, *, seeds: Sequence[int], smoke: bool, workdir: str, results_dir: str,
              arms: Sequence[str] = (), games_dir: str = "", commit: bool = False) -> list[str]:
    """Every (arm, seed) cell of ``study``, seed-major (all arms of seed 0 first, so a partial
    study already compares arms); returns the JSON paths written now."""
    if study not in STUDIES:
        raise ValueError(f"--study={study!r}; choose one of {sorted(STUDIES)}.")
    known = [a for a, _ in STUDIES[study].arms]
    unknown = [a for a in arms if a not in known]
    if unknown:
        raise ValueError(f"--arms {unknown} are not arms of {study}; its arms: {known}.")
    chosen = [(a, k) for a, k in STUDIES[study].arms if not arms or a in arms]
    written = []
    for seed in seeds:
        for arm, knobs in chosen:
            p = run_cell(study, arm, knobs, seed, smoke=smoke, workdir=workdir,
                         results_dir=results_dir, games_dir=games_dir, commit=commit)
            written += [p] if p else []
    return written


def define_flags() -> None:
    """The command-line flags (only when run as a script, so importing this module is free)."""
    flags.DEFINE_enum("study", None, sorted(STUDIES), "Which study to run.")
    flags.DEFINE_bool("report", False, "Write the results document from the JSON files.")
    flags.DEFINE_list("seeds", [], "Seeds of every cell (default: each study's own).")
    flags.DEFINE_bool("plan", False, "Print each study's cells, CPU time and detectable "
                      "effect, and run nothing.")
    flags.DEFINE_list("arms", [], "Only these arms (row labels) of the study; default all.")
    flags.DEFINE_bool("smoke", False, "Toy size (tests): results go under --workdir.")
    flags.DEFINE_string("workdir", "runs/studies", "Training runs: <workdir>/<study>/<cell>/.")
    flags.DEFINE_string("results_dir", "", f"Cell JSON files (default {RESULTS_DIR}; "
                        "--smoke: <workdir>/results).")
    flags.DEFINE_string("document", "", f"The results document (default {DOCUMENT}; --smoke: "
                        "<workdir>/results.md).")
    flags.DEFINE_string("games_dir", "", "Override games.cache_dir of every cell.")
    flags.DEFINE_bool("commit", False, "git commit each cell's JSON as soon as it is written.")
    flags.DEFINE_string("compile_cache", xla_cache.DEFAULT_DIR, "JAX persistent compilation "
                        "cache folder, shared by the cells ('' = off).")


def main(argv):
    del argv
    F = flags.FLAGS
    seeds = [int(x) for x in F.seeds]
    if F.plan:
        print(plan([F.study] if F.study else sorted(STUDIES), seeds=seeds,
                   results_dir=F.results_dir or RESULTS_DIR))
        return
    if not F.study and not F.report:
        raise app.UsageError(f"give --study=<{'|'.join(sorted(STUDIES))}>, --plan and/or "
                             "--report.")
    console.install()
    results_dir = F.results_dir or (os.path.join(F.workdir, "results") if F.smoke else RESULTS_DIR)
    document = F.document or (os.path.join(F.workdir, "results.md") if F.smoke else DOCUMENT)
    if F.study:
        host_memory.keep_freed_memory()
        xla_cache.enable(F.compile_cache, min_compile_s=0.0)
        try:
            run_study(F.study, seeds=seeds or STUDIES[F.study].seeds, smoke=F.smoke,
                      workdir=F.workdir, results_dir=results_dir, arms=F.arms,
                      games_dir=F.games_dir, commit=F.commit)
        except preemption.Preempted:
            print(f"Stopped by SIGTERM; finished cells are under {results_dir} and the running "
                  f"cell's state under {F.workdir}. Rerun the same command to continue.",
                  file=sys.stderr, flush=True)
            sys.exit(preemption.EXIT_STATUS)
        except workdir_lock.WorkdirBusy as e:
            print(e, file=sys.stderr, flush=True)
            sys.exit(1)
    if F.report:
        path = studies_report.write_document(results_dir, document, with_seeds(seeds),
                                             readme=README if document == DOCUMENT else None)
        print(f"wrote {path}")

