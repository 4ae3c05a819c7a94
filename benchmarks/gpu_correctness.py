"""Numerical checks for an accelerator: our model against `transformers`, the sampler against the
trainer, greedy decode against the full forward, in fp32 and bf16, on random weights.

For each preset (full-size shapes, random weights, every norm and bias randomised):

1. **Logits vs transformers.** The same weights (exported with `hf_io`) run through
   `transformers`' PyTorch model on the same device. For a padded batch (one left-padded row)
   over the real positions:

       rel = ||ours - ref|| / ||ref||,   max_abs = max |ours - ref|,   top1 = mean[argmax equal]

   against torch fp32 (our fp32 at XLA's default matmul precision and at "highest"; our bf16),
   and torch bf16 against torch fp32, so a reader sees what bf16 costs either framework.
2. **Sampler vs trainer log-probs (bf16).** `Sampler.generate` at temperature 1 records
   logp(token) while it decodes through the KV cache; the trainer recomputes it with one full
   forward (`text_steps.token_terms`). Over the generated tokens:

       gap = |logp_sampler - logp_trainer|:  mean, max, share of tokens with gap > 0.1

   (the quantity truncated importance sampling corrects for in the PyTorch peers).
3. **Greedy decode vs full-forward argmax (fp32 and bf16).** A greedy `generate`, then one full
   forward over prompt + generated tokens: the share of generated tokens equal to the forward's
   argmax at the previous position, and the first position where a row differs.

    python -m benchmarks.gpu_correctness                       # SmolLM2-135M and Qwen2.5-0.5B
    python -m benchmarks.gpu_correctness --presets=tiny --device=cpu --batch=2 --length=32 \
        --sample_batch=2 --prompt_len=16 --new_tokens=8

Prints one line per check and, with --results, appends a Markdown table. Nothing is asserted:
the figures are the record.
"""
from __future__ import annotations

import argparse
import contextlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from meowjax.models import config as config_lib
from meowjax.models import hf_io, lm
from meowjax.rollout.sampler import Sampler
from meowjax.trainers import text_steps


def random_params(cfg: config_lib.ModelConfig, seed: int) -> lm.Params:
    """fp32 parameters with every leaf random: kernels as `lm.init_params`, norms 1 + 0.1 N,
    biases 0.02 N (the init's unit norms and zero biases would hide a misplaced one)."""
    params = lm.init_params(cfg.replace(param_dtype="float32"), jax.random.key(seed))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    out = []
    for (path, x), k in zip(leaves, keys):
        name = jax.tree_util.keystr(path)
        noise = jax.random.normal(k, x.shape, jnp.float32)
        if "norm" in name or "scale" in name:
            x = 1.0 + 0.1 * noise
        elif "bias" in name:
            x = 0.02 * noise
        out.append(x)
    return jax.tree_util.tree_unflatten(treedef, out)


def padded_batch(vocab: int, batch: int, length: int, seed: int):
    """Random tokens; row 1 is left-padded by a quarter of the length."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, vocab, size=(batch, length)).astype(np.int32)
    mask = np.ones((batch, length), np.int32)
    if batch > 1:
        mask[1, : length // 4] = 0
    tokens[mask == 0] = 0
    pos = np.asarray(lm.positions_from_mask(jnp.asarray(mask)))
    return tokens, pos, mask


def compare(ours: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """rel / max_abs / top-1 agreement of two [N, V] logit arrays."""
    ours, ref = ours.astype(np.float64), ref.astype(np.float64)
    return dict(rel=float(np.linalg.norm(ours - ref) / np.linalg.norm(ref)),
                max_abs=float(np.abs(ours - ref).max()),
                top1=float(np.mean(ours.argmax(-1) == ref.argmax(-1))))


def torch_logits(folder: str, dtype: str, device: str, tokens, pos, mask) -> np.ndarray:
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype)).to(device).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens, dtype=torch.long, device=device),
                    attention_mask=torch.tensor(mask, dtype=torch.long, device=device),
                    position_ids=torch.tensor(pos, dtype=torch.long, device=device))
    logits = out.logits.float().cpu().numpy()
    del model
    return logits


def our_logits(cfg, params, tokens, pos, mask, precision=None) -> np.ndarray:
    ctx = jax.default_matmul_precision(precision) if precision else contextlib.nullcontext()
    with ctx:
        fwd = jax.jit(lm.forward, static_argnums=1)
        return np.asarray(fwd(params, cfg, tokens, pos, mask))


def logit_checks(preset: str, args) -> list[tuple[str, str, dict]]:
    cfg32 = config_lib.get_preset(preset, dtype="float32", param_dtype="float32")
    params = random_params(cfg32, seed=0)
    tokens, pos, mask = padded_batch(cfg32.vocab_size, args.batch, args.length, seed=1)
    real = mask.astype(bool)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        hf_io.save_hf_checkpoint(tmp, cfg32, params)
        ref32 = torch_logits(tmp, "float32", args.device, tokens, pos, mask)[real]
        ref16 = torch_logits(tmp, "bfloat16", args.device, tokens, pos, mask)[real]
    print(f"  {preset}: reference logits std {ref32.std():.3f}, {real.sum()} real positions")
    rows.append(("logits", "torch bf16 vs torch fp32", compare(ref16, ref32)))
    rows.append(("logits", "ours fp32 (default precision) vs torch fp32",
                 compare(our_logits(cfg32, params, tokens, pos, mask)[real], ref32)))
    rows.append(("logits", "ours fp32 (precision highest) vs torch fp32",
                 compare(our_logits(cfg32, params, tokens, pos, mask, "highest")[real], ref32)))
    cfg16 = cfg32.replace(dtype="bfloat16", param_dtype="bfloat16")
    p16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    ours16 = our_logits(cfg16, p16, tokens, pos, mask)[real]
    rows.append(("logits", "ours bf16 vs torch fp32", compare(ours16, ref32)))
    rows.append(("logits", "ours bf16 vs torch bf16", compare(ours16, ref16)))
    return rows


def trainer_logp(cfg, params, prompts_BP: np.ndarray, gen_BT: np.ndarray,
                 temperature: float = 1.0) -> np.ndarray:
    """logp_BT of the generated tokens as the trainer recomputes them: one full forward over
    prompt + generated tokens (`text_steps.token_terms`, no padding)."""
    tokens = np.concatenate([prompts_BP, gen_BT], axis=1).astype(np.int32)
    batch = dict(tokens=jnp.asarray(tokens), mask=jnp.ones(tokens.shape, jnp.int32))
    terms = jax.jit(lambda p, b: text_steps.token_terms(p, cfg, b, temperature))
    logp_BL, _ = terms(params, batch)
    # logp_BL[:, t] scores tokens[:, t] from position t - 1.
    return np.asarray(logp_BL)[:, prompts_BP.shape[1]:]


def forward_argmax(cfg, params, prompts_BP: np.ndarray, gen_BT: np.ndarray) -> np.ndarray:
    """argmax_BT of the full forward over prompt + generated tokens at the positions that
    predict the generated ones."""
    tokens = jnp.asarray(np.concatenate([prompts_BP, gen_BT], axis=1).astype(np.int32))
    mask = jnp.ones(tokens.shape, jnp.int32)
    logits = jax.jit(lm.forward, static_argnums=1)(params, cfg, tokens,
                                                   lm.positions_from_mask(mask), mask)
    return np.asarray(jnp.argmax(logits, -1))[:, prompts_BP.shape[1] - 1:-1]


def gap_stats(sampler_logp: np.ndarray, recomputed_logp: np.ndarray) -> dict[str, float]:
    """mean / max of |sampler - recomputed| and the share of tokens with a gap above 0.1."""
    gap = np.abs(sampler_logp - recomputed_logp)
    return dict(mean=float(gap.mean()), max=float(gap.max()),
                share_gt_0_1=float(np.mean(gap > 0.1)))


def sampler_checks(preset: str, args) -> list[tuple[str, str, dict]]:
    rows = []
    for dtype in ("float32", "bfloat16"):
        cfg = config_lib.get_preset(preset, dtype=dtype, param_dtype=dtype)
        params = jax.tree.map(lambda x: x.astype(dtype),
                              random_params(cfg.replace(param_dtype="float32"), seed=2))
        P, T, B = args.prompt_len, args.new_tokens, args.sample_batch
        prompts = np.random.default_rng(3).integers(3, cfg.vocab_size, (B, P)).astype(np.int32)
        sampler = Sampler(cfg, prompt_buckets=(P,), batch_buckets=(B,), max_new_tokens=T)
        greedy = sampler.generate(params, prompts.tolist(), jax.random.key(0), greedy=True,
                                  stop_ids=())
        same = greedy.tokens_BT == forward_argmax(cfg, params, prompts, greedy.tokens_BT)
        first = [int(np.argmin(r)) if not r.all() else T for r in same]
        rows.append(("greedy", f"{dtype}: decode == full-forward argmax",
                     dict(share=float(same.mean()), rows_identical=float(np.mean(same.all(1))),
                          median_first_diff=float(np.median(first)))))
        if dtype != "bfloat16":
            continue
        sampled = sampler.generate(params, prompts.tolist(), jax.random.key(1), temperature=1.0,
                                   stop_ids=())
        logp_BT = trainer_logp(cfg, params, prompts, sampled.tokens_BT)
        rows.append(("logp", "bf16: sampler vs trainer recompute",
                     dict(**gap_stats(sampled.logp_BT, logp_BT),
                          mean_logp=float(logp_BT.mean()))))
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", default="smollm2-135m,qwen2.5-0.5b")
    p.add_argument("--sampler_presets", default=None,
                   help="presets of checks 2 and 3 (default: --presets)")
    p.add_argument("--device", default="cuda", help="torch device for the reference")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--sample_batch", type=int, default=16)
    p.add_argument("--prompt_len", type=int, default=128)
    p.add_argument("--new_tokens", type=int, default=64)
    p.add_argument("--results", default="", help="append a Markdown table to this file")
    args = p.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()}")

    def record(text: str) -> None:  # appended at once: a timeout keeps the rows before it
        if args.results:
            with open(args.results, "a", encoding="utf-8") as f:
                f.write(text + "\n")

    record("\n| preset | check | what | figures |\n| --- | --- | --- | --- |")
    sampled = (args.presets if args.sampler_presets is None else args.sampler_presets).split(",")
    for preset in args.presets.split(","):
        checks = [logit_checks] + ([sampler_checks] if preset in sampled else [])
        for check_fn in checks:
            for check, label, vals in check_fn(preset, args):
                line = ", ".join(f"{k} {v:.3g}" for k, v in vals.items())
                print(f"{preset:14s} {check:7s} {label:46s} {line}", flush=True)
                record(f"| {preset} | {check} | {label} | {line} |")


if __name__ == "__main__":
    main()
