"""Reading the studies' cell records (JSON written by experiments/studies/runner.py): accessors
for splits, per-game outcomes, learning curves and Pass@(K,T) grids. Host only, no JAX."""

from __future__ import annotations

import json
import pathlib
from typing import Any, Sequence

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


def curve_values(curve: dict[str, Any]) -> list:
    """A cell's held-out curve: ``curve`` (the trainer's curve games, schema 2) or ``eval``
    (greedy success on the base difficulty's held-out games, schema 1)."""
    return curve.get("curve", curve.get("eval", []))


def auc(rec: dict[str, Any]) -> float:
    c = rec.get("curve") or {}
    return ss.area_under_curve(c.get("iteration", []), curve_values(c))


def grid(rec: dict[str, Any], mode: str, tag: str) -> dict[str, Any] | None:
    return (rec.get("passkt") or {}).get(mode, {}).get(tag)
