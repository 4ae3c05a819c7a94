"""Golden records: a smoke run's results frozen before a refactor, compared after it.

A record holds the run's whole `evals.json` (greedy outcomes game by game, Pass@(K,T), the
per-turn diagnostics, the learning curve: all counts, so equal or not) and its training
metrics step by step (losses, gradient norms, rollout statistics; timings and memory left out).
A refactor that does not change the algorithm leaves every count equal and every metric equal
to float rounding.

    MEOWJAX_WRITE_GOLDEN=1 pytest -k golden    # (re)write the records from this tree

Rewrite a record only for a change meant to move results, and say so in its commit.
"""

from __future__ import annotations

import json
import os
import platform

import numpy as np

GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")
# Metrics a refactor may move without moving the algorithm: wall clock, memory, throughput.
_VOLATILE = ("perf/", "time/")
# XLA:CPU may reorder a reduction between builds and CPUs: float metrics agree to this.
RTOL, ATOL = 2e-3, 1e-5


def record(workdir: str) -> dict:
    """The comparable part of a finished run under `workdir`."""
    evals = json.load(open(os.path.join(workdir, "evals.json")))
    metrics = []
    for line in open(os.path.join(workdir, "metrics.jsonl")):
        rec = json.loads(line)
        metrics.append({k: v for k, v in rec.items() if not k.startswith(_VOLATILE)})
    return {"evals": evals, "metrics": metrics}


def _metric_mismatches(got: list[dict], want: list[dict]) -> list[str]:
    out = []
    if len(got) != len(want):
        return [f"{len(got)} metric records, golden has {len(want)}"]
    for i, (g, w) in enumerate(zip(got, want)):
        if set(g) != set(w):
            out.append(f"record {i} (step {w.get('step')}): keys {sorted(set(g) ^ set(w))} differ")
            continue
        for k in sorted(w):
            if not np.isclose(g[k], w[k], rtol=RTOL, atol=ATOL, equal_nan=True):
                out.append(f"step {w['step']} {k}: {g[k]!r} != golden {w[k]!r}")
    return out


def _eval_mismatches(got, want, path: str = "evals") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{path}: keys {sorted(set(got) ^ set(want))} differ"]
        return [m for k in want for m in _eval_mismatches(got[k], want[k], f"{path}/{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [m for i, (g, w) in enumerate(zip(got, want))
                for m in _eval_mismatches(g, w, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: {got!r} != golden {want!r}"]


def check(run: str | dict, name: str) -> None:
    """Asserts a run (its workdir, or its `record`) reproduces the golden record `name`, or
    writes it when MEOWJAX_WRITE_GOLDEN is set."""
    path = os.path.join(GOLDEN_DIR, f"{name}.json")
    got = dict(record(run) if isinstance(run, str) else run)
    if os.environ.get("MEOWJAX_WRITE_GOLDEN"):
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        got["made_on"] = {"machine": platform.machine(), "processor": _cpu_model()}
        with open(path, "w") as f:
            json.dump(got, f, sort_keys=True)
        return
    assert os.path.exists(path), (f"No golden record {path}; make one from a tree whose results "
                                  "are right with MEOWJAX_WRITE_GOLDEN=1 pytest -k golden.")
    want = json.load(open(path))
    bad = _eval_mismatches(got["evals"], want["evals"]) + _metric_mismatches(
        got["metrics"], want["metrics"])
    assert not bad, (f"{len(bad)} differences from the golden record {name} (made on "
                     f"{want.get('made_on')}):\n" + "\n".join(bad[:20]))


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
