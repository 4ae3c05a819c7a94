"""Entry point behind experiments/train.py: dispatch on the policy interface, write the report."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import ml_collections
import numpy as np

from meowjax.eval import passk, report
from meowjax.runtime import console, preemption, workdir_lock
from meowjax.trainers import data
from meowjax.trainers.registry import trainer_class



def _passkt(d: dict[str, Any]) -> passk.PassKTResult:
    return passk.PassKTResult(ks=tuple(d["ks"]), ts=tuple(d["ts"]), mode=d["mode"],
                              mean_KT=np.asarray(d["mean"]), low_KT=np.asarray(d["ci_low"]),
                              high_KT=np.asarray(d["ci_high"]), n_tasks=d["n_tasks"],
                              min_samples=d["min_samples"], alpha=d.get("alpha", 0.05))


def write_run_report(c: ml_collections.ConfigDict, workdir: str, out: dict[str, Any],
                     seconds: float) -> str:
    """report.md + results.json: start vs after-RL success on both held-out splits; evals.json:
    every evaluation's numbers, each game's greedy outcome included (`per_game`)."""
    evals = out["evals"]
    with open(os.path.join(workdir, "evals.json"), "w", encoding="utf-8") as f:
        json.dump(report._jsonable(evals), f, indent=1)
    rows = []
    names = {"eval": f"{data.difficulty_name(c, False)} held-out",
             "eval_hard": f"{data.difficulty_name(c, True)} harder"}
    for split in ("eval", "eval_hard"):
        for tag, label in (("start", "starting policy (after SFT)"), ("final", "after RL")):
            e = evals.get(tag, {}).get(split)
            if e:
                rows.append(report.SuccessRow(f"{names[split]}: {label}", e["wins"], e["n"]))
    paired = []
    for split in ("eval", "eval_hard"):
        before = evals.get("start", {}).get(split, {}).get("per_game")
        after = evals.get("final", {}).get(split, {}).get("per_game")
        if before and after and set(before) == set(after):
            ids = sorted(before)
            paired.append(report.PairedGain(f"{names[split]}: after RL - starting policy",
                                            [before[i] for i in ids], [after[i] for i in ids]))
    sections = [
        report.TextSection("Run", (
            f"config `{c.name}`, estimator `{c.rl.estimator}`, interface `{c.policy.interface}`, "
            f"model preset `{c.model.preset}`; SFT demonstrations {out['plan']['sft_demos']}, "
            f"RL episodes {out['plan']['rl_episodes']} ({out['rl_iters']} iterations) on "
            f"{data.rl_pool_words(c)}; "
            f"wall time {seconds / 60:.1f} min. Greedy evaluation, one episode per game, "
            f"turn budget {c.turns.eval_max_turns}.")),
        report.SuccessTable("Success on held-out games (95% Wilson intervals)", rows),
    ]
    if paired:
        sections.append(report.PairedGainTable(
            "RL gain on the same games (paired: 'gain' when the whole 95% interval is above 0)",
            paired))
    for tag in ("start", "final"):
        if "pass_at_k_t" in evals.get(tag, {}):
            sections.append(report.PassKTSection(f"Pass@(K,T) {tag}, held-out (training difficulty)",
                                                 _passkt(evals[tag]["pass_at_k_t"])))
    curves = _learning_curve(workdir)
    if curves:
        sections.append(report.LearningCurves("Training success rate (rollouts)", curves))
    path = report.write_report(workdir, f"meowjax run: {c.name}", sections)
    return str(path)


def _learning_curve(workdir: str):
    steps, vals = [], []
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if "rollout/success" in rec:
                steps.append(rec["step"])
                vals.append(rec["rollout/success"])
    return {"rollout success": (np.asarray(steps), np.asarray(vals))} if steps else {}


def run(c: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) the run of ``c`` in ``workdir`` and writes its report.

    Holds the workdir's lock throughout (``runtime.workdir_lock``: a second run on it raises
    WorkdirBusy) and the SIGTERM handler from game generation on (``runtime.preemption``: a
    SIGTERM raises Preempted once the state is saved)."""
    t0 = time.time()
    with workdir_lock.hold(workdir), preemption.on_sigterm():
        out = trainer_class(c.policy.interface)(c, workdir).run()
    path = write_run_report(c, workdir, out, time.time() - t0)
    with open(path, encoding="utf-8") as f:
        print(f.read())
    console.info("report: %s (wall time %.1f min)", path, (time.time() - t0) / 60)
    return out
