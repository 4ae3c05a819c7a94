"""What-if padding of the RL update: the recorded rows of a run, re-chunked by each policy.

Input: a run instrumented by ``benchmarks/rollout.py --smoke`` (its ``update_row_lengths.json``,
the real rows' token counts per update batch in order, and ``metrics.jsonl``, whose
``rollout/episode_turns`` gives each iteration's row count, so the batches can be split back
into iterations). Each iteration's rows are then cut into ``rl.minibatch_rows``-row minibatches by

  before   the sorted order cut into full chunks from the short end, so the one partial chunk
           (weight-0 padding rows) holds the longest rows (meowjax before 47d4ef0);
  current  ``buckets.length_grouped_minibatches``: full chunks from the long end, the partial
           chunk at the short end (the fewest padded slots of any such cut; see its docstring),

each with the given length buckets, and the report prints, per policy: real tokens / slots
(summed over the run), the mean over batches of the per-batch ratio (what ``metrics.jsonl``
logged before 47d4ef0), the share of slots in weight-0 rows, and the distinct [B, L] shapes
(one compile each for the update and for the pre-update pass).

    python -m benchmarks.padding --workdir=runs/base_instr \\
        --buckets=256,320,384,448,512,768 --buckets=256,288,320,352,384,416,448,480,512,768
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from typing import Sequence

import numpy as np

from meowjax.rollout import buckets

DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")


def before_chunks(lengths: Sequence[int], size: int) -> list[np.ndarray]:
    """The reference cut (meowjax before 47d4ef0): sorted, full chunks from the short end, the
    one partial chunk last (the longest rows)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i:i + size] for i in range(0, len(order), size)]


def iterations(workdir: str, batch_rows: int, episodes_per_iter: int) -> list[list[int]]:
    """Each RL iteration's real row lengths, from the recorded update batches: iteration i has
    N_i = episode_turns_i x episodes rows in ceil(N_i / batch_rows) batches (one epoch)."""
    with open(os.path.join(workdir, "update_row_lengths.json"), encoding="utf-8") as f:
        batches = json.load(f)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    out, k = [], 0
    for r in records:
        if "rollout/episode_turns" not in r:
            continue
        n = int(round(r["rollout/episode_turns"] * episodes_per_iter))
        m = -(-n // batch_rows)
        rows = [x for b in batches[k:k + m] for x in b]
        if len(rows) != n:
            raise ValueError(f"iteration {len(out)}: {len(rows)} recorded rows, metrics say {n}: "
                             "the metrics and the row lengths do not come from the same run.")
        out.append(rows)
        k += m
    if k != len(batches):
        raise ValueError(f"{len(batches) - k} recorded batches left over: the metrics and the "
                         "row lengths do not come from the same run.")
    return out


def evaluate(its: list[list[int]], size: int, length_buckets: Sequence[int], policy: str,
             seed: int = 0, row_step: int = 0) -> dict:
    """Slots, real-token share and shapes of one policy; ``row_step`` > 0 pads each chunk's rows
    only to a multiple of ``row_step`` (``buckets.row_multiple``) instead of ``size``."""
    real = slots = pad_rows = 0
    per_batch, shapes = [], set()
    rng = np.random.default_rng(seed)
    for rows in its:
        lengths = np.asarray(rows)
        chunks = (before_chunks(lengths, size) if policy == "before" else
                  buckets.length_grouped_minibatches(lengths, size, rng))
        for c in chunks:
            length = buckets.choose_bucket(int(lengths[c].max()), length_buckets)
            rows = buckets.row_multiple(len(c), size, row_step) if row_step else size
            shapes.add((rows, length))
            real += int(lengths[c].sum())
            slots += rows * length
            pad_rows += (rows - len(c)) * length
            per_batch.append(lengths[c].sum() / (rows * length))
    if row_step:
        policy = f"{policy}, rows to a multiple of {row_step}"
    return {"policy": policy, "buckets": tuple(length_buckets), "efficiency": real / slots,
            "mean_batch_efficiency": float(np.mean(per_batch)), "row_padding": pad_rows / slots,
            "shapes": len(shapes), "slots": slots, "batches": len(per_batch)}


def table(results: list[dict], workdir: str, size: int) -> str:
    stamp = f"{platform.platform()}, {datetime.date.today().isoformat()}"
    lines = [f"\n### Update padding, what-if over the rows of `{workdir}` (`benchmarks/padding.py`)",
             "", f"Machine: {stamp}. Minibatches of {size} rows; slots = rows x bucket length.",
             "", "| policy | length buckets | real tokens / slots | mean per-batch ratio | "
             "slots in weight-0 rows | shapes | slots (x1e6) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['policy']} | {','.join(map(str, r['buckets']))} | "
                     f"{r['efficiency']:.1%} | {r['mean_batch_efficiency']:.1%} | "
                     f"{r['row_padding']:.1%} | {r['shapes']} | {r['slots'] / 1e6:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--minibatch_rows", type=int, default=32)
    parser.add_argument("--episodes_per_iter", type=int, default=32,
                        help="rollout.tasks_per_iter x rollout.group_size of the run")
    parser.add_argument("--buckets", action="append", required=True,
                        help="comma-separated length buckets; repeat to compare several")
    parser.add_argument("--row_step", type=int, default=8,
                        help="also evaluate 'current' with rows padded to a multiple of this")
    parser.add_argument("--results", default=DEFAULT_RESULTS)
    args = parser.parse_args(argv)
    its = iterations(args.workdir, args.minibatch_rows, args.episodes_per_iter)
    results = []
    for spec in args.buckets:
        b = tuple(int(x) for x in spec.split(","))
        steps = [("before", 0), ("current", 0)] + ([("current", args.row_step)]
                                                   if args.row_step else [])
        for policy, step in steps:
            r = evaluate(its, args.minibatch_rows, b, policy, row_step=step)
            results.append(r)
            print(f"{r['policy']:40s} {spec:45s} eff {r['efficiency']:.1%} (mean per batch "
                  f"{r['mean_batch_efficiency']:.1%}), weight-0 rows {r['row_padding']:.1%}, "
                  f"{r['shapes']} shapes")
    out = table(results, args.workdir, args.minibatch_rows)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(out)
    return out


if __name__ == "__main__":
    main()
