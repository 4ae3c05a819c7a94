"""Reading the studies' cell records (JSON written by experiments/studies.py): accessors for
splits, per-game outcomes, learning curves, Pass@(K,T) grids and diagnostics, and the pairings
of two arms (same seed) or two policies of one cell (same games). Host only, no JAX."""

from __future__ import annotations

import json
import pathlib
from typing import Any, Callable, Sequence

import numpy as np

from meowjax.eval import study_stats as ss

Cells = dict[str, dict[int, dict[str, Any]]]          # arm -> seed -> cell record


def load_cells(results_dir: str, studies: Sequence[str] | None = None) -> dict[str, Cells]:
    """{study: {arm: {seed: record}}} of every ``<study>/*.json`` under ``results_dir``, for
    the named studies (None: every folder; other records under ``results_dir``, such as the
    default run's seed summary, live in folders no study is named after)."""
    out: dict[str, Cells] = {}
    root = pathlib.Path(results_dir)
    paths = (sorted(root.glob("*/*.json")) if studies is None else
             [p for st in studies for p in sorted((root / st).glob("*.json"))])
    for path in paths:
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
            study, arm, seed = rec["study"], rec["arm"], int(rec["seed"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a study cell record ({type(e).__name__}: {e}); "
                             "delete it and rerun its study to write it again.") from e
        out.setdefault(study, {}).setdefault(arm, {})[seed] = rec
    return out


def split_of(rec: dict[str, Any], role: str) -> tuple[str, dict[str, Any]] | None:
    """(name, {start, end}) of the cell's held-out split of ``role`` (id / hard / harder)."""
    for name, s in rec.get("splits", {}).items():
        if s.get("role") == role:
            return name, s
    return None


def outcomes(rec: dict[str, Any], role: str, tag: str) -> dict[str, bool] | None:
    s = split_of(rec, role)
    return None if s is None or not s[1].get(tag) else s[1][tag]["per_game"]


def success(rec: dict[str, Any], role: str, tag: str = "end") -> float | None:
    s = split_of(rec, role)
    return None if s is None or not s[1].get(tag) else float(s[1][tag]["success"])


def pairs(a: dict[str, bool] | None, b: dict[str, bool] | None):
    """(a's outcomes, b's outcomes) on the games both played, in one order."""
    if not a or not b:
        return None
    ids = sorted(set(a) & set(b))
    return [a[i] for i in ids], [b[i] for i in ids]


def curve_values(curve: dict[str, Any]) -> list:
    """A cell's held-out curve: ``curve`` (the trainer's curve games, schema 2) or ``eval``
    (greedy success on the base difficulty's held-out games, schema 1)."""
    return curve.get("curve", curve.get("eval", []))


def auc(rec: dict[str, Any]) -> float:
    c = rec.get("curve") or {}
    return ss.area_under_curve(c.get("iteration", []), curve_values(c))


def grid(rec: dict[str, Any], mode: str, tag: str) -> dict[str, Any] | None:
    return (rec.get("passkt") or {}).get(mode, {}).get(tag)


def grid_value(g: dict[str, Any], k: int, t: int, task: str | None = None) -> float:
    vals = g["mean"] if task is None else g["per_task"][task]
    return float(vals[g["ks"].index(k)][g["ts"].index(t)])


def complete(cells: Cells, arms: Sequence[str], seeds: Sequence[int]) -> bool:
    return all(s in cells.get(a, {}) for a in arms for s in seeds)


def seed_diffs(cells: Cells, a: str, b: str, fn: Callable[[dict], float | None]) -> list[float]:
    """fn(a's cell) − fn(b's cell) for every seed both arms have (same seed: same SFT policy)."""
    out = []
    for s in sorted(set(cells.get(a, {})) & set(cells.get(b, {}))):
        x, y = fn(cells[a][s]), fn(cells[b][s])
        if x is not None and y is not None and x == x and y == y:
            out.append(x - y)
    return out


def paired_arms(cells: Cells, a: str, b: str, role: str = "id") -> tuple:
    """a − b on the same games, end policies, every seed both have pooled."""
    groups = []
    for s in sorted(set(cells.get(a, {})) & set(cells.get(b, {}))):
        p = pairs(outcomes(cells[b][s], role, "end"), outcomes(cells[a][s], role, "end"))
        groups += [p] if p else []
    return ss.pooled_paired(groups)


def grid_mean(recs: Sequence[dict], mode: str, tag: str) -> tuple[dict, np.ndarray] | None:
    gs = [g for r in recs if (g := grid(r, mode, tag))]
    if not gs:
        return None
    return gs[0], np.mean([np.asarray(g["mean"], np.float64) for g in gs], axis=0)


def task_diffs(recs: Sequence[dict], fn: Callable[[dict, str], float]) -> list[float]:
    """fn(cell, task) for every task of every cell (units: (seed, task) pairs)."""
    out = []
    for r in recs:
        g = grid(r, "unstated", "end") or grid(r, "stated", "end")
        for task in (g or {}).get("per_task", {}):
            try:
                out.append(fn(r, task))
            except (KeyError, TypeError, ValueError):
                continue
    return out


def diag_change(rec: dict[str, Any], key: str) -> float | None:
    d = rec.get("diagnostics") or {}
    a, b = (d.get("start") or {}).get(key), (d.get("end") or {}).get(key)
    return None if a is None or b is None else b - a


def seed_means(recs: Sequence[dict[str, Any]], fn: Callable[[dict], float | None]) -> list[float]:
    """The mean of fn over each seed's cells, one value per seed (cells of one seed share an SFT
    policy and its test games, so a seed, not a cell, is the unit of run-to-run noise)."""
    by_seed: dict[int, list[float]] = {}
    for r in recs:
        v = fn(r)
        if v is not None and v == v:
            by_seed.setdefault(int(r["seed"]), []).append(float(v))
    return [float(np.mean(v)) for _, v in sorted(by_seed.items())]


def game_mean_gains(recs: Sequence[dict[str, Any]], role: str) -> list[float]:
    """Per held-out game, end − start (1, 0 or −1) averaged over the cells that played it: the
    units of a game-to-game interval (``ss.paired_mean_interval``) that counts each game once,
    however many cells and seeds played it."""
    by_game: dict[str, list[float]] = {}
    for r in recs:
        a, b = outcomes(r, role, "start"), outcomes(r, role, "end")
        for g in sorted(set(a or {}) & set(b or {})):
            by_game.setdefault(g, []).append(float(b[g]) - float(a[g]))
    return [float(np.mean(v)) for _, v in sorted(by_game.items())]
