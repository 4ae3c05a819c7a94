"""Where one jitted call spends its time, by XLA op: a jax.profiler trace, summed per op name.

    python -m benchmarks.profile_ops --what=update --preset=smollm2-135m --batch=2 --length=128
    python -m benchmarks.profile_ops --what=generate --preset=smollm2-135m --batch=16 \
        --length=64 --new_tokens=64

``update`` is the PG update of ``benchmarks/train_step.py``; ``generate`` is one
``Sampler.generate`` call (greedy, random prompts). The call is compiled and run a few times,
then ``--calls`` more runs are traced (``jax.profiler.trace`` with a Perfetto trace) and the
trace's complete events are summed per name and per op kind (the name without its ".N" suffix:
``ynn_fusion``, ``dynamic-slice_bitcast_fusion``, ``copy``, ...), per call. On XLA:CPU the ops of
one call run on a pool of threads, so the op total can exceed the wall time. Prints a table; no
docs/benchmarks-history.md section (timings of one machine, to find what to change next).
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import tempfile
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import train_step
from meowjax.models import config as config_lib
from meowjax.models import lm
from meowjax.rollout.sampler import Sampler
from meowjax.runtime import host_memory

# Runtime / host events, not XLA ops.
_NOT_OPS = ("ThunkExecutor", "$", "Pjit", "Common", "Slinky", "while", "end: ", "np.asarray")


def op_times(trace_events: list[dict], calls: int) -> tuple[dict[str, float], dict[str, float]]:
    """(seconds per call by op name, seconds per call by op kind) from Perfetto trace events."""
    by_name: dict[str, float] = collections.Counter()
    for e in trace_events:
        if e.get("ph") == "X" and not e["name"].startswith(_NOT_OPS):
            by_name[e["name"]] += e.get("dur", 0) / 1e6 / calls
    by_kind: dict[str, float] = collections.Counter()
    for name, s in by_name.items():
        by_kind[re.sub(r"\.\d+$", "", name)] += s
    return dict(by_name), dict(by_kind)


def profile(fn: Callable[[], object], calls: int) -> tuple[float, dict, dict]:
    """(best wall seconds of a call, by name, by kind) of ``fn`` after warm-up."""
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(fn())
        (path,) = glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
    return (best, *op_times(events, calls))


def make_call(what: str, preset: str, batch: int, length: int, new_tokens: int
              ) -> Callable[[], object]:
    cfg = config_lib.get_preset(preset)
    params = lm.init_params(cfg, jax.random.key(0))
    if what == "update":
        step, state, dev_batch = train_step.compiled_pg_step(cfg, params,
                                                             train_step.make_batch(cfg, batch,
                                                                                   length))
        return train_step.update_runner(step, state, dev_batch)
    if what == "generate":
        prompts = np.random.default_rng(0).integers(3, cfg.vocab_size, (batch, length)).tolist()
        sampler = Sampler(cfg, prompt_buckets=(length,), batch_buckets=(batch,),
                          max_new_tokens=new_tokens)
        return lambda: jnp.asarray(sampler.generate(params, prompts, jax.random.key(0),
                                                    greedy=True, stop_ids=()).tokens_BT)
    raise ValueError(f"--what={what!r}: choose update or generate.")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", default="update", choices=("update", "generate"))
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128, help="update length / prompt length")
    parser.add_argument("--new_tokens", type=int, default=64, help="generate: decode steps")
    parser.add_argument("--calls", type=int, default=2, help="traced calls")
    parser.add_argument("--top", type=int, default=15, help="rows per table")
    host_memory.add_argparse_flag(parser)
    args = parser.parse_args(argv)
    if args.keep_host_memory:
        host_memory.keep_freed_memory()
    call = make_call(args.what, args.preset, args.batch, args.length, args.new_tokens)
    wall, by_name, by_kind = profile(call, args.calls)
    print(f"{args.what} {args.preset} B={args.batch} L={args.length}: best wall {wall:.3f} s a "
          f"call; XLA ops {sum(by_kind.values()):.3f} s a call (ops overlap on threads)")
    for title, table in (("op kind", by_kind), ("op", by_name)):
        print(f"\n| {title} | s per call | share of op time |\n|---|---|---|")
        total = sum(table.values()) or 1.0
        for name, s in sorted(table.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"| {name} | {s:.4f} | {s / total:.1%} |")
    return {"wall_s": wall, "by_kind": by_kind, "by_name": by_name}


if __name__ == "__main__":
    main()
