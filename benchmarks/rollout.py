"""Rollout loop profile: time split, padding efficiency, turns/s, XLA compiles, peak memory.

Two modes:
    python -m benchmarks.rollout --metrics=runs/default/metrics.jsonl   # summarise a finished run
    python -m benchmarks.rollout --smoke --workdir=/tmp/bench_smoke     # run configs/default.py
                                                                        # :smoke=True and profile it

The smoke run is instrumented in this process: `EnvPool.reset/step` (env time as the learner
sees it), the trainer's jitted functions (`score_fn` / sampler, `sft_step`, `pg_step`,
`old_terms`; each result is waited for, so device time is charged to its call), and every XLA
compile (`jax_log_compiles` records, one per (function, input shapes)). With
rollout_s from metrics.jsonl per RL iteration:

    host bookkeeping = rollout_s - env - generation      (prompt building, packing, sampling)

Peak host memory is `getrusage(RUSAGE_SELF).ru_maxrss` (the learner) and `RUSAGE_CHILDREN`
(the largest finished env worker).
"""
from __future__ import annotations

import argparse
import collections
import datetime
import functools
import json
import logging
import os
import platform
import re
import resource
import time
from typing import Any, Callable

import numpy as np

DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")
TIMED_ATTRS = ("score_fn", "sampler", "sft_step", "pg_step", "old_terms")
_COMPILE_RE = re.compile(r"Compiling (\S+) with global shapes and types (.*?)\. Argument mapping")


def read_metrics(path: str) -> list[dict[str, float]]:
    """All records of a metrics.jsonl file (one JSON object per line)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist; pass --metrics=<workdir>/metrics.jsonl "
                                "of a finished run (python -m experiments.train writes it).")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(records: list[dict[str, float]]) -> dict[str, float]:
    """Totals/means over the RL iterations (records that carry time/rollout_s).

    The first iteration also pays the compiles, so steady-state numbers skip it when there are
    at least two iterations.
    """
    rl = [r for r in records if "time/rollout_s" in r]
    if not rl:
        raise ValueError("no RL iteration records (time/rollout_s) in the metrics file; did the "
                         "run reach the RL phase?")
    steady = rl[1:] if len(rl) > 1 else rl
    get = lambda rs, k: np.array([r.get(k, np.nan) for r in rs], np.float64)
    roll, upd = get(rl, "time/rollout_s"), get(rl, "time/update_s")
    return {
        "iterations": len(rl),
        "rollout_s": float(roll.sum()), "update_s": float(upd.sum()),
        "rollout_share": float(roll.sum() / (roll.sum() + upd.sum())),
        "steady_rollout_s": float(get(steady, "time/rollout_s").mean()),
        "steady_update_s": float(get(steady, "time/update_s").mean()),
        "padding_efficiency": float(np.nanmean(get(rl, "perf/padding_efficiency"))),
        "turns_per_s": float(np.nanmean(get(steady, "perf/turns_per_s"))),
    }


def format_summary(s: dict[str, float]) -> str:
    return (f"RL iterations {s['iterations']}: rollout {s['rollout_s']:.1f} s, update "
            f"{s['update_s']:.1f} s (rollout share {s['rollout_share']:.1%}); steady state per "
            f"iteration rollout {s['steady_rollout_s']:.2f} s, update {s['steady_update_s']:.2f} s;"
            f" padding efficiency {s['padding_efficiency']:.1%}; turns/s {s['turns_per_s']:.2f}")


class CompileCounter(logging.Handler):
    """Counts XLA compiles per function name and per (function, input shapes).

    Use as a context manager: turns on `jax_log_compiles` and listens to jax's loggers.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.by_fn: collections.Counter = collections.Counter()
        self.signatures: dict[str, set[str]] = collections.defaultdict(set)

    def emit(self, record: logging.LogRecord) -> None:
        match = _COMPILE_RE.search(record.getMessage())
        if match:
            name = re.sub(r"^jit\((.*)\)$", r"\1", match.group(1))
            self.by_fn[name] += 1
            self.signatures[name].add(match.group(2))

    def __enter__(self) -> "CompileCounter":
        import jax

        self._old = jax.config.jax_log_compiles
        jax.config.update("jax_log_compiles", True)
        self._logger = logging.getLogger("jax")
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        import jax

        self._logger.removeHandler(self)
        jax.config.update("jax_log_compiles", self._old)

    def repeats(self) -> dict[str, int]:
        """Functions compiled more often than they have distinct input signatures (static
        arguments are not in the log line, so a function with static args can show up here
        legitimately, e.g. jnp helpers; for our jitted steps it means a real recompile)."""
        return {f: n - len(self.signatures[f]) for f, n in self.by_fn.items()
                if n > len(self.signatures[f])}


class Timers:
    """Accumulated wall seconds and call counts per name."""

    def __init__(self) -> None:
        self.seconds: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()

    def wrap(self, name: str, fn: Callable, block: bool = False) -> Callable:
        import jax

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            if block:
                out = jax.block_until_ready(out)
            self.seconds[name] += time.perf_counter() - start
            self.calls[name] += 1
            return out
        return timed


def peak_memory_mib() -> tuple[float, float]:
    """(learner, largest finished child) peak resident memory in MiB (Linux ru_maxrss is KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def padding_breakdown(batches: list[tuple[int, int, int, int]]) -> dict[str, float]:
    """Where the padded slots of update batches go, from (B, L, real rows, real tokens) tuples:

        efficiency     = sum real tokens / sum B L
        row_padding    = sum (B - real rows) L / sum B L        (rows with row_weight 0)
        length_padding = 1 - efficiency - row_padding           (short rows in an L bucket)
    """
    slots = sum(b * length for b, length, _, _ in batches)
    row_pad = sum((b - rows) * length for b, length, rows, _ in batches) / slots
    eff = sum(tok for *_, tok in batches) / slots
    return {"batches": len(batches), "efficiency": eff, "row_padding": row_pad,
            "length_padding": 1.0 - eff - row_pad}


def smoke_run(workdir: str, config_arg: str = "smoke=True") -> dict[str, Any]:
    """Runs configs/default.py:<config_arg> in this process, instrumented (see module doc)."""
    from configs import default
    from meowjax.envs import pool as pool_lib
    from meowjax.rollout import buckets
    from meowjax.trainers import run as run_lib

    c = default.get_config(config_arg)
    timers = Timers()
    originals = {m: getattr(pool_lib.EnvPool, m) for m in ("reset", "step")}
    for m, fn in originals.items():
        setattr(pool_lib.EnvPool, m, timers.wrap(f"env_{m}", fn))
    from meowjax.trainers.loop import AgentTrainer
    original_setup = AgentTrainer._setup_jitted_steps

    def setup_jitted_steps(self):
        original_setup(self)
        for attr in TIMED_ATTRS:   # the trainer's steps, the agent's rollout functions
            owner = self if attr in vars(self) else self.agent
            fn = getattr(owner, attr, None)
            if callable(fn):
                setattr(owner, attr, timers.wrap(attr, fn, block=True))

    AgentTrainer._setup_jitted_steps = setup_jitted_steps
    batches: list[tuple[int, int, int, int]] = []
    row_lengths: list[list[int]] = []  # real rows' token counts, per update batch
    original_eff = buckets.padding_efficiency

    def padding_efficiency(batch):
        real = batch["mask"] * (batch["row_weight"][:, None] > 0)
        batches.append((*real.shape, int((batch["row_weight"] > 0).sum()), int(real.sum())))
        row_lengths.append([int(n) for n in real.sum(axis=1) if n > 0])
        return original_eff(batch)

    buckets.padding_efficiency = padding_efficiency
    start = time.perf_counter()
    try:
        with CompileCounter() as compiles:
            run_lib.run(c, workdir)
    finally:
        AgentTrainer._setup_jitted_steps = original_setup
        buckets.padding_efficiency = original_eff
        for m, fn in originals.items():
            setattr(pool_lib.EnvPool, m, fn)
    wall = time.perf_counter() - start
    own, children = peak_memory_mib()
    with open(os.path.join(workdir, "update_row_lengths.json"), "w", encoding="utf-8") as f:
        json.dump(row_lengths, f)  # for offline what-if bucketing (benchmarks/padding.py)
    return {"wall_s": wall, "timers": dict(timers.seconds), "calls": dict(timers.calls),
            "compiles": dict(compiles.by_fn),
            "signatures": {k: len(v) for k, v in compiles.signatures.items()},
            "repeated_compiles": compiles.repeats(), "peak_rss_mib": own,
            "peak_child_rss_mib": children,
            "padding": padding_breakdown(batches) if batches else None,
            "summary": summarize(read_metrics(os.path.join(workdir, "metrics.jsonl")))}


def smoke_report(p: dict[str, Any]) -> str:
    """Printed lines for an instrumented smoke run."""
    t, s = p["timers"], p["summary"]
    env = t.get("env_reset", 0.0) + t.get("env_step", 0.0)
    gen = t.get("score_fn", 0.0) + t.get("sampler", 0.0)
    lines = [
        f"wall {p['wall_s']:.1f} s; " + format_summary(s),
        f"whole run: env {env:.1f} s, generation/scoring {gen:.1f} s, "
        f"sft_step {t.get('sft_step', 0.0):.1f} s, pg_step {t.get('pg_step', 0.0):.1f} s, "
        f"old_terms {t.get('old_terms', 0.0):.1f} s (compiles included)",
        f"XLA compiles: {sum(p['compiles'].values())} total; per function "
        + ", ".join(f"{k}={v} ({p['signatures'][k]} shapes)"
                    for k, v in sorted(p["compiles"].items(), key=lambda kv: -kv[1])),
        f"compiles repeated for an already-seen shape: {p['repeated_compiles'] or 'none'}",
        ("update batches: none" if not p["padding"] else
         f"update batches: {p['padding']['batches']}, real tokens {p['padding']['efficiency']:.1%}"
         f", padding rows (row_weight 0) {p['padding']['row_padding']:.1%}, padding within rows "
         f"(length bucket) {p['padding']['length_padding']:.1%}"),
        f"peak host memory: learner {p['peak_rss_mib']:.0f} MiB, largest env worker "
        f"{p['peak_child_rss_mib']:.0f} MiB",
    ]
    return "\n".join(lines)


def markdown(title: str, text: str) -> str:
    stamp = (f"{platform.platform()}, {os.cpu_count()} CPUs, "
             f"{datetime.date.today().isoformat()}")
    body = "\n".join(f"- {line}" for line in text.splitlines())
    return f"\n### {title} (`benchmarks/rollout.py`)\n\nMachine: {stamp}.\n\n{body}\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", default="", help="metrics.jsonl of a finished run")
    parser.add_argument("--smoke", action="store_true",
                        help="run configs/default.py:smoke=True here, instrumented")
    parser.add_argument("--config_arg", default="smoke=True")
    parser.add_argument("--workdir", default="/tmp/meowjax_bench_smoke")
    parser.add_argument("--results", default=DEFAULT_RESULTS)
    args = parser.parse_args(argv)
    if not args.metrics and not args.smoke:
        parser.error("give --metrics=<run>/metrics.jsonl and/or --smoke")
    sections = []
    if args.metrics:
        text = format_summary(summarize(read_metrics(args.metrics)))
        print(text)
        sections.append(markdown(f"Rollout split of {args.metrics}", text))
    if args.smoke:
        text = smoke_report(smoke_run(args.workdir, args.config_arg))
        print(text)
        sections.append(markdown(f"Instrumented run `configs/default.py:{args.config_arg}`", text))
    out = "".join(sections)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(out)
    return out


if __name__ == "__main__":
    main()
