"""A machine-readable record of one recipe at several seeds, built from the runs' own files.

Each run directory holds ``evals.json`` (every game's greedy outcome before and after RL, per
held-out set) and ``provenance.json`` (seed, commit, CPU, each set's difficulty name; written by
``meowjax.trainers.run``). Per seed and held-out set the record is

    D = {name, games, before, after, gain, ci_low, ci_high}

with the paired gain and its 95% Newcombe interval (``stats.paired_difference_interval``), and
over the seeds the mean gain with a t interval over seeds (the seed-to-seed spread, which
includes the game sampling of each run's SFT and RL):

    mean = (1/S) sum_s gain_s,   mean +- t_{0.975, S-1} * sd(gain_s) / sqrt(S),

the same mean's two-stage bootstrap interval (seeds, then games within a seed:
``study_stats.two_stage_bootstrap``) and the smallest mean gain these seeds detect with 80%
power (``study_stats.minimal_detectable_effect``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import numpy as np

from meowjax.eval import stats, study_stats

# The held-out sets of a run and their names in the record.
ROLES = {"eval": "base_difficulty", "eval_hard": "rl_difficulty",
         "eval_transfer": "transfer_difficulty"}


def difficulty_record(name: str, before: Mapping[str, bool],
                      after: Mapping[str, bool]) -> dict[str, Any]:
    """D for one held-out set: ``before`` / ``after`` map game id -> won (the same games)."""
    if set(before) != set(after) or not before:
        raise ValueError(f"{name}: the evaluations before and after RL must cover the same "
                         f"non-empty set of games ({len(before)} vs {len(after)}).")
    ids = sorted(before)
    b, a = [before[i] for i in ids], [after[i] for i in ids]
    gain, low, high = stats.paired_difference_interval(b, a)
    return {"name": name, "games": len(ids), "before": float(np.mean(b)),
            "after": float(np.mean(a)), "gain": gain, "ci_low": low, "ci_high": high}


def per_game(evals: Mapping[str, Any], tag: str, split: str) -> dict[str, bool]:
    """game id -> won of one held-out set in the evaluation ``tag`` ("start" before RL, "final"
    after), {} if not evaluated."""
    return evals.get(tag, {}).get(split, {}).get("per_game") or {}


def game_diffs(evals: Mapping[str, Any], split: str) -> list[float]:
    """after - before of each game of one held-out set (by game id), or [] if not evaluated."""
    before, after = per_game(evals, "start", split), per_game(evals, "final", split)
    return [float(after[i]) - float(before[i]) for i in sorted(before) if i in after]


def seed_record(evals: Mapping[str, Any], prov: Mapping[str, Any]) -> dict[str, Any]:
    """{seed, commit, cpu, <role>: D, ...} of one run (roles its evaluations cover)."""
    out: dict[str, Any] = {"seed": prov["seed"], "commit": prov["commit"], "cpu": prov.get("cpu"),
                           "eval_split": prov.get("eval_split")}
    for split, role in ROLES.items():
        before, after = per_game(evals, "start", split), per_game(evals, "final", split)
        if before and after:
            out[role] = difficulty_record(prov["difficulties"][split], before, after)
    return out


def mean_over_seeds(values: Sequence[float],
                    diffs_per_seed: Sequence[Sequence[float]] | None = None) -> dict[str, float]:
    """Mean with its 95% t interval over seeds (``study_stats.seed_interval``; NaN for one),
    the MDE at 80% power, and with ``diffs_per_seed`` (each seed's per-game differences) the
    two-stage bootstrap interval."""
    mean, low, high = study_stats.seed_interval(values)
    out = {"mean": mean, "ci_low": low, "ci_high": high, "seeds": len(values),
           "mde_80": study_stats.minimal_detectable_effect(values)}
    if diffs_per_seed is not None:
        _, out["two_stage_low"], out["two_stage_high"] = study_stats.two_stage_bootstrap(
            diffs_per_seed)
        # The per-game SD of the paired differences, pooled over seeds (each about its own
        # seed's mean): the within-seed noise a planned design divides by its games.
        resid = [d - np.mean(g) for g in diffs_per_seed if len(g) for d in g]
        dof = len(resid) - sum(1 for g in diffs_per_seed if len(g))
        out["game_sd"] = float(np.sqrt(np.sum(np.square(resid)) / dof)) if dof > 0 else float("nan")
    return out


def summarize(run_dirs: Sequence[str]) -> dict[str, Any]:
    """{"seeds": [seed_record ...] (by seed), "mean_gain": {role: mean_over_seeds}}."""
    seeds, diffs = [], []
    for d in run_dirs:
        paths = [os.path.join(d, f) for f in ("evals.json", "provenance.json")]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"{d} is not a finished run: {', '.join(missing)} missing "
                                    "(run experiments.train to the end on it first).")
        with open(paths[0], encoding="utf-8") as f:
            evals = json.load(f)
        with open(paths[1], encoding="utf-8") as f:
            prov = json.load(f)
        seeds.append(seed_record(evals, prov))
        diffs.append({role: game_diffs(evals, split) for split, role in ROLES.items()})
    if len({r["seed"] for r in seeds}) != len(seeds):
        raise ValueError(f"two runs share a seed: {[r['seed'] for r in seeds]}.")
    means = {role: mean_over_seeds([r[role]["gain"] for r in seeds], [d[role] for d in diffs])
             for role in ROLES.values() if all(role in r for r in seeds)}
    seeds.sort(key=lambda r: r["seed"])
    return {"seeds": seeds, "mean_gain": means}
