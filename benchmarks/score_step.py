"""The default run's update step (admissible-command scoring interface): two model settings.

One SFT update of ``meowjax.trainers.score_steps.make_sft_step`` (packed prompt + candidates,
candidate cross-entropy + the auxiliary prompt LM loss, AdamW) on the default run's model
(``configs/default.py``: 3 layers, width 128) and random packed turns shaped like the default
run's (a prompt of about half the row, then the candidate commands, 2-6 tokens each).
``--compare=unroll``: the reference is ``scan_unroll=1`` (a rolled ``nn.scan`` over layers), the
variant ``scan_unroll=num_layers``. ``--compare=saved_activations``: the reference keeps every
activation for the backward pass (``saved_activations="everything"``), the variant the config's
``"projections"``. ``--compare=attention_blocks``: the reference is one
``jax.nn.dot_product_attention`` over the whole row (``attention_blocks=1``), the variant the
config's causal query blocks. Both are timed interleaved (ref, variant, ref, ...) in this
process, same params, same batch, and the first-step losses are printed so the reader can see
they compute the same thing. ``--control`` also compiles the reference a second time and times
it in the same rounds: an A/A pair whose ratio is the run's noise, printed beside the speedup.
The process keeps freed host memory as the experiment entry points do
(``--no-keep_host_memory``: glibc's defaults).

    python -m benchmarks.score_step                 # appends a table to docs/benchmarks-history.md
    python -m benchmarks.score_step --repeats=3 --results=''
    python -m benchmarks.score_step --compare=saved_activations
    python -m benchmarks.score_step --compare=attention_blocks
    python -m benchmarks.score_step --compare=saved_activations --control   # + an A/A pair

Speed is never asserted: this prints ratios.
"""
from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.timing import control_lines, time_interleaved
from benchmarks.train_step import machine_line, update_runner
from configs import default
from meowjax.models import config as config_lib
from meowjax.models import lm
from meowjax.rl import objective
from meowjax.rollout import buckets, scoring
from meowjax.runtime import host_memory
from meowjax.trainers import optim, score_steps, steps

DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")


def packed_batch(vocab: int, rows: int, length: int, max_cands: int, seed: int = 0) -> dict:
    """``rows`` random turns packed into [rows, length]: a prompt of 45-55% of ``length`` and
    ``length // 16`` candidates of 2-6 tokens (at most 92.5% of ``length`` in all)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        prompt = rng.integers(3, vocab, int(rng.integers(length * 45, length * 55) // 100))
        n = min(length // 16, max_cands)
        cands = [rng.integers(3, vocab, int(rng.integers(2, 7))).tolist() for _ in range(n)]
        row = scoring.pack_turn(prompt.tolist(), cands, max_cands)
        row["chosen"] = np.int32(rng.integers(0, n))
        out.append(row)
    return buckets.pack_rows(out, length_buckets=(length,), num_rows=rows,
                             pad_values={"cand": max_cands})


# --compare: (reference, variant) ModelConfig overrides of the default run's model.
COMPARES = {
    "unroll": lambda cfg: ({"scan_unroll": 1}, {"scan_unroll": cfg.num_layers}),
    "saved_activations": lambda cfg: ({"saved_activations": "everything"},
                                      {"saved_activations": "projections"}),
    "attention_blocks": lambda cfg: ({"attention_blocks": 1},
                                     {"attention_blocks": cfg.attention_blocks}),
}


def _label(overrides: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items())


def compare(rows: int, length: int, repeats: int, what: str = "unroll",
            control: bool = False) -> dict:
    """Times the reference and the variant interleaved; with ``control`` also a second
    compiled copy of the reference ("control"), so ``control_ratio`` = reference / control
    seconds is how far from 1.00x two copies of the same program read in this run."""
    c = default.get_config()
    cfg = config_lib.get_preset(c.model.preset, vocab_size=c.model.vocab_size, pad_token_id=0,
                                eos_token_id=2, **dict(c.model.overrides))
    params = lm.init_params(cfg, jax.random.key(0))
    batch = jax.tree.map(jnp.asarray, packed_batch(cfg.vocab_size, rows, length, c.policy.max_cands))
    opt = optim.make_optimizer(1e-3, warmup_steps=1, total_steps=100, grad_clip=1.0)
    variants = dict(zip(("reference", "variant"), COMPARES[what](cfg)))
    if control:
        variants["control"] = variants["reference"]
    runs, loss = {}, {}
    for name, overrides in variants.items():
        units = score_steps.ScoreUnits(cfg.replace(**overrides), max_cands=c.policy.max_cands,
                                       norm=c.policy.score_norm)
        step = steps.make_sft_step(units, opt, objective.ObjectiveConfig(lm_coef=c.sft.lm_coef))
        state = optim.TrainState(step=jnp.int32(0), params=jax.tree.map(jnp.copy, params),
                                 opt_state=opt.init(params), value_params={}, value_opt_state={})
        run = update_runner(step, state, batch)
        loss[name] = float(run()["sft/loss"])   # compiles
        runs[name] = run
    seconds = time_interleaved(runs, repeats)
    speedup = seconds["reference"] / seconds["variant"]
    control_ratio = seconds["reference"] / seconds["control"] if control else None
    labels = {k: _label(v) for k, v in variants.items()}
    print(f"score SFT step B={rows} L={length} layers={cfg.num_layers} | {labels['reference']} "
          f"{seconds['reference'] * 1e3:.1f} ms | {labels['variant']} "
          f"{seconds['variant'] * 1e3:.1f} ms | speedup {speedup:.2f}x | first loss "
          f"{loss['reference']:.6f} / {loss['variant']:.6f}"
          + (f" | A/A control {control_ratio:.2f}x" if control else ""), flush=True)
    return dict(rows=rows, length=length, layers=cfg.num_layers, seconds=seconds, loss=loss,
                speedup=speedup, labels=labels, control_ratio=control_ratio)


def table(results: list[dict], what: str = "unroll") -> str:
    ref, var = (results[0]["labels"][k] for k in ("reference", "variant"))
    lines = [f"\n### Score-interface SFT update: {ref} vs {var} "
             f"(`benchmarks/score_step.py --compare={what}`)", "", f"Machine: {machine_line()}.",
             "", f"| B x L | layers | {ref} ms/update | {var} ms/update | speedup | "
             "first loss reference / variant |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['rows']} x {r['length']} | {r['layers']} | "
                     f"{r['seconds']['reference'] * 1e3:.1f} | {r['seconds']['variant'] * 1e3:.1f} "
                     f"| {r['speedup']:.2f}x | {r['loss']['reference']:.6f} / "
                     f"{r['loss']['variant']:.6f} |")
    controls = [f"{r['rows']} x {r['length']}: {r['seconds']['reference'] * 1e3:.1f} / "
                f"{r['seconds']['control'] * 1e3:.1f} ms, {r['control_ratio']:.2f}x"
                for r in results if r.get("control_ratio") is not None]
    lines += control_lines(controls)
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--lengths", default="320,448")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--results", default=DEFAULT_RESULTS)
    parser.add_argument("--compare", default="unroll", choices=sorted(COMPARES))
    parser.add_argument("--control", action="store_true",
                        help="also time a second compiled copy of the reference in the same "
                        "rounds (an A/A pair: the run's noise)")
    host_memory.add_argparse_flag(parser)
    args = parser.parse_args(argv)
    if args.keep_host_memory:
        host_memory.keep_freed_memory()
    print(machine_line(), flush=True)
    results = [compare(args.rows, int(L), args.repeats, args.compare, args.control)
               for L in args.lengths.split(",")]
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(table(results, args.compare))
    return results


if __name__ == "__main__":
    main()
