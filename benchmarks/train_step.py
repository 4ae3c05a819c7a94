"""Training-step throughput: our jitted PG update vs the same model + AdamW in PyTorch.

One update = forward + backward + global-norm clip + AdamW over a [B, L] batch of whole
episodes, with the free-text policy-gradient loss (PPO clip + entropy and KL metrics, no
critic) of `meowjax.trainers.text_steps.make_pg_step`. The PyTorch side is `transformers`'
Llama/Qwen2ForCausalLM loaded from the same weights (exported with `hf_io`), the same loss
written in torch, `clip_grad_norm_` and `torch.optim.AdamW` (b1=0.9, b2=0.95). Both losses on
the first batch are printed so the reader can see the two sides compute the same thing.
The two sides are timed interleaved, one update each per round (`time_interleaved`).

Compute efficiency, measured in the same run:
    peak   = 2 n^3 / t  of an n x n fp32 (or --dtype) matmul, best of a few, in jnp and (unless
             --no_torch) in torch on --device; the faster of the two is the machine's peak
             (on a Sapphire Rapids VM torch's MKL product ran 176-189 GFLOP/s and jnp's
             111-123: a jnp-only peak overstated every MFU by ~1.5x)
    MFU    = 6 * N_params * tokens_per_s / peak         (attention FLOPs not counted)

    python -m benchmarks.train_step                             # tiny + smollm2-135m sized
    python -m benchmarks.train_step --presets=tiny --batch=2 --length=32 --repeats=1
    python -m benchmarks.train_step --presets=qwen2.5-0.5b --dtype=bfloat16 --device=cuda
    python -m benchmarks.train_step --compare_guard --presets=smollm2-135m   # before/after
    python -m benchmarks.train_step --compare_host_memory --presets=smollm2-135m
    python -m benchmarks.train_step --compare_saved_activations --presets=smollm2-135m
    python -m benchmarks.train_step --compare_norm --presets=smollm2-135m
    python -m benchmarks.train_step --compare_attention --presets=smollm2-135m --batch=4 \
        --length=256
    python -m benchmarks.train_step --compare_saved_activations --control   # + an A/A pair

The whole process runs with `meowjax.runtime.host_memory.keep_freed_memory()` (as the
experiment entry points do; ``--no-keep_host_memory`` leaves glibc's defaults), so both sides
reuse freed host pages; ``--compare_host_memory`` times our update with glibc's defaults vs
kept memory, interleaved in one process, with the page faults per update.

Appends a Markdown table to docs/benchmarks-history.md (``--results=''`` to skip). Speed is never
asserted: this prints ratios.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import tempfile
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks.timing import (MatmulPeak, control_lines, measure_peak, time_interleaved,
                               torch_sync)
from configs import common
from meowjax.models import config as config_lib
from meowjax.models import hf_io, lm
from meowjax.rl import losses, objective
from meowjax.runtime import host_memory
from meowjax.trainers import optim, steps, text_steps

DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")
CLIP_EPS, LR, GRAD_CLIP = 0.2, 1e-5, 1.0


@dataclasses.dataclass
class StepResult:
    """One preset's measurements (tokens/s counts every slot of the [B, L] batch)."""

    preset: str
    params: int
    batch: int
    length: int
    dtype: str
    ours_tok_s: float
    torch_tok_s: float | None
    peak: MatmulPeak
    ours_loss: float
    torch_loss: float | None

    @property
    def ratio(self) -> float | None:
        return None if self.torch_tok_s is None else self.ours_tok_s / self.torch_tok_s

    def mfu(self, tok_s: float | None) -> float | None:
        return None if tok_s is None else 6.0 * self.params * tok_s / self.peak.flops


def make_batch(cfg: config_lib.ModelConfig, batch: int, length: int, seed: int = 0
               ) -> dict[str, np.ndarray]:
    """A free-text PG batch [B, L]: random tokens, all real, agent tokens on ~half the slots."""
    rng = np.random.default_rng(seed)
    shape = (batch, length)
    loss_mask = (rng.random(shape) < 0.5).astype(np.float32)
    loss_mask[:, 0] = 0.0
    return {
        "tokens": rng.integers(3, cfg.vocab_size, size=shape).astype(np.int32),
        "mask": np.ones(shape, np.int32),
        "loss_mask": loss_mask,
        "old_logp": (-np.log(cfg.vocab_size) + 0.1 * rng.standard_normal(shape)).astype(np.float32),
        "adv": rng.standard_normal(shape).astype(np.float32),
        "ret": rng.standard_normal(shape).astype(np.float32),
        "old_value": np.zeros(shape, np.float32),
        "ref_logp": np.full(shape, -np.log(cfg.vocab_size), np.float32),
        "row_weight": np.ones((batch,), np.float32),
    }


def pg_objective() -> objective.ObjectiveConfig:
    """The PG objective of the base config (PPO clip 0.2, no KL/entropy in the loss, no TIS:
    the batch carries the sampler's log-probs only)."""
    algo = common.base_config().rl
    algo.unlock()
    algo.clip_eps = CLIP_EPS
    algo.tis = "off"
    return objective.ObjectiveConfig.from_section(algo)


_LIBRARY_TOKEN_TERMS = text_steps.token_terms


def reference_token_terms(params, cfg, batch: dict, temperature: float):
    """token_terms before the fused log-prob (the "before" of the before/after): the [B, L, V]
    logits are scaled and sliced, then one log_softmax gives the token log-probs and a second
    one (with its exp) the entropy; autodiff keeps those full-vocab arrays for the backward."""
    logits = lm.forward(params, cfg, batch["tokens"], lm.positions_from_mask(batch["mask"]),
                        batch["mask"])
    scaled = logits / temperature
    pad = lambda x_BT: jnp.pad(x_BT, ((0, 0), (1, 0)))
    logp_BL = pad(lm.token_logprobs(scaled[:, :-1], batch["tokens"][:, 1:]))
    ent_BL = pad(losses.entropy_from_logits(scaled[:, :-1]))
    return logp_BL, ent_BL


TOKEN_TERMS = {"current": _LIBRARY_TOKEN_TERMS, "reference": reference_token_terms}


def use_token_terms(variant: str) -> None:
    """Sets `text_steps.token_terms` for this process: "current" = the library's fused
    `lm.token_logprobs_entropy`, "reference" = `reference_token_terms`. A step picks it up
    when it is traced, so trace (or AOT-compile) right after this call."""
    if variant not in TOKEN_TERMS:
        raise ValueError(f"token_terms variant {variant!r}; choose from {sorted(TOKEN_TERMS)}.")
    text_steps.token_terms = TOKEN_TERMS[variant]


def compiled_pg_step(cfg, params, batch_np, variant: str = "current", guard: str = "current"):
    """(AOT-compiled make_pg_step with `variant` token_terms, a fresh TrainState, device batch).

    guard "current": `optim.make_optimizer` (one lax.cond over the whole parameter update);
    "reference": the same clip + AdamW as a plain `optax.apply_if_finite` transformation (its
    cond over the updates, then a separate `apply_updates`); "per_leaf": the guarded step with
    the generic guard (an is-finite pass over every gradient, the clip's own norm), not the
    one global norm shared by guard, clip and metric."""
    use_token_terms(variant)
    optimizer = optim.make_optimizer(LR, warmup_steps=0, total_steps=1000, grad_clip=GRAD_CLIP)
    if guard == "reference":  # the guard's own optax transformation: the plain update path
        optimizer = optax.GradientTransformation(optimizer.init, optimizer.update)
    elif guard == "per_leaf":
        optimizer = optimizer._replace(grad_clip=None, tail=None)
    step = steps.make_pg_step(text_steps.TokenUnits(cfg), optimizer, optimizer, pg_objective(),
                              temperature=1.0, needs_critic=False)
    state = optim.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                             opt_state=optimizer.init(params), value_params={}, value_opt_state={})
    batch = {k: jnp.asarray(v) for k, v in batch_np.items()}
    compiled = step.lower(state, batch).compile()
    use_token_terms("current")
    return compiled, state, batch


def update_runner(step: Callable, state, batch) -> Callable[[], dict]:
    """A call that runs one update of ``step(state, batch) -> (state, metrics)`` from the state
    the previous call left (the step donates its state) and returns its metrics."""
    holder = {"state": state}

    def run():
        holder["state"], metrics = step(holder["state"], batch)
        return metrics

    return run


Timed = tuple[Callable[[], object], Callable[[object], object]]  # (one update, its sync)


def ours_update(cfg, params, batch_np, variant: str = "current") -> tuple[Timed, float]:
    """((one update of make_pg_step, sync), first-batch policy loss), compiled and warmed up."""
    step, state, batch = compiled_pg_step(cfg, params, batch_np, variant)
    run = update_runner(step, jax.tree.map(jnp.copy, state), batch)  # a copy: it is donated
    loss = float(run()["pg/policy_loss"])  # also the warm-up
    return (run, jax.block_until_ready), loss


def torch_update(folder: str, batch_np, dtype: str, device: str, remat: bool = False
                 ) -> tuple[Timed, float]:
    """((one update of transformers + torch.optim.AdamW, sync), first-batch policy loss),
    warmed up."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.to(device).train()
    if remat:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    b = {k: torch.as_tensor(v, device=device) for k, v in batch_np.items()}
    tokens = b["tokens"].long()
    autocast = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16,
                              enabled=dtype == "bfloat16")

    def loss_fn() -> torch.Tensor:
        with autocast:
            logits = model(input_ids=tokens, attention_mask=b["mask"].long()).logits
        logp_all = torch.log_softmax(logits.float()[:, :-1], dim=-1)
        logp = torch.gather(logp_all, -1, tokens[:, 1:, None])[..., 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        mask = b["loss_mask"][:, 1:] * b["row_weight"][:, None]
        ratio = torch.exp(logp - b["old_logp"][:, 1:])
        adv = b["adv"][:, 1:]
        pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - CLIP_EPS, 1 + CLIP_EPS))
        denom = mask.sum().clamp_min(1.0)
        kl_log = b["ref_logp"][:, 1:] - logp  # k3 = exp(d) - 1 - d, d = ref - logp
        kl = (torch.expm1(kl_log) - kl_log)
        _ = ((entropy * mask).sum() / denom).detach(), ((kl * mask).sum() / denom).detach()
        return (pg * mask).sum() / denom

    def run() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        return loss

    sync = torch_sync(device)
    with torch.no_grad():
        first = float(loss_fn())
    sync(run())  # warm-up
    return (run, sync), first


def bench_preset(preset: str, batch: int, length: int, repeats: int, dtype: str,
                 with_torch: bool, device: str, peak: MatmulPeak, variant: str = "current",
                 remat: bool = False, scan_unroll: int = 1,
                 saved_activations: str = "projections") -> StepResult:
    """Measures one preset (random init, same weights on both sides) and prints a line.

    remat: rematerialise decoder blocks in the backward pass on both sides (our ``cfg.remat``,
    torch's ``gradient_checkpointing_enable``), for models whose activations do not fit.
    scan_unroll, saved_activations: our side's ``ModelConfig`` fields."""
    cfg = config_lib.get_preset(preset, dtype=dtype, param_dtype="float32", remat=remat,
                                scan_unroll=scan_unroll, saved_activations=saved_activations)
    params = lm.init_params(cfg, jax.random.key(0))
    batch_np = make_batch(cfg, batch, length)
    runs, syncs, loss_torch = {}, {}, None
    if with_torch:
        with tempfile.TemporaryDirectory() as tmp:
            hf_io.save_hf_checkpoint(tmp, cfg.replace(dtype="float32"), params)
            (runs["torch"], syncs["torch"]), loss_torch = torch_update(tmp, batch_np, dtype,
                                                                       device, remat)
    (runs["ours"], syncs["ours"]), loss_ours = ours_update(cfg, params, batch_np, variant)
    # Interleaved: timed one side after the other, two runs of the same SmolLM2 update read
    # 1.22x and 0.96x on the dev VM, interleaved 0.95x and 0.91x.
    seconds = time_interleaved(runs, repeats, syncs=syncs)
    t_ours, t_torch = seconds["ours"], seconds.get("torch")
    n_tok = batch * length
    res = StepResult(preset, config_lib.num_params(cfg), batch, length, dtype, n_tok / t_ours,
                     None if t_torch is None else n_tok / t_torch, peak, loss_ours, loss_torch)
    torch_part = ("" if res.torch_tok_s is None else
                  f" | torch {res.torch_tok_s:9.1f} tok/s (MFU {res.mfu(res.torch_tok_s):6.1%}) | "
                  f"ratio {res.ratio:.2f}x | loss ours {loss_ours:.5f} torch {loss_torch:.5f}")
    print(f"{preset}: {res.params / 1e6:.1f}M params, B={batch} L={length} {dtype} | meowjax "
          f"{res.ours_tok_s:9.1f} tok/s (MFU {res.mfu(res.ours_tok_s):6.1%}){torch_part}",
          flush=True)
    return res


@dataclasses.dataclass
class VariantResult:
    """`token_terms` reference vs current for one preset, measured in the same process."""

    preset: str
    batch: int
    length: int
    dtype: str
    seconds: dict[str, float]      # best seconds per update, per variant
    temp_bytes: dict[str, int]     # XLA temporaries of the compiled update, per variant
    loss: dict[str, float]         # first-update policy loss, per variant
    what: str = "token_terms"      # the compared part (COMPARED)
    faults: dict[str, float] | None = None  # minor page faults per update, per variant

    @property
    def speedup(self) -> float:
        return self.seconds["reference"] / self.seconds["current"]

    @property
    def control_ratio(self) -> float | None:
        """reference / control seconds: the reference compiled twice (``--control``), so the
        distance of this ratio from 1.00x is the run's noise (None without a control)."""
        if "control" not in self.seconds:
            return None
        return self.seconds["reference"] / self.seconds["control"]


COMPARED = {"token_terms": "fused token_terms vs reference",
            "guard": "one cond over the whole update vs optax.apply_if_finite",
            "host_memory": "kept host memory vs glibc's default mmap / trim",
            "saved_activations": "blocks keep the projections' outputs (the rest recomputed) "
                                 "vs everything",
            "norm": "one global norm for guard, clip and metric vs per-leaf is-finite + norms",
            "attention_blocks": "causal self-attention over query blocks (the keys above the "
                                "diagonal never computed) vs one jax.nn.dot_product_attention"}
# The flag of each comparison (the first one given wins).
COMPARE_FLAGS = {"token_terms": "--compare", "guard": "--compare_guard",
                 "host_memory": "--compare_host_memory", "norm": "--compare_norm",
                 "saved_activations": "--compare_saved_activations",
                 "attention_blocks": "--compare_attention"}
# saved_activations, attention_blocks: each variant's ModelConfig overrides (current: the
# preset's defaults).
_MODEL_VARIANTS = {"saved_activations": {"reference": {"saved_activations": "everything"},
                                         "current": {"saved_activations": "projections"}},
                   "attention_blocks": {"reference": {"attention_blocks": 1}, "current": {}}}
# host_memory: the allocator setting each variant's update runs under (the compiled steps are
# the same program).
_HOST_MEMORY = {"reference": host_memory.restore_defaults,
                "current": host_memory.keep_freed_memory}
_SETTLE_BLOCK = 3  # host_memory: consecutive updates per round, the first untimed


def compare_variants(preset: str, batch: int, length: int, repeats: int, dtype: str,
                        what: str = "token_terms", control: bool = False) -> VariantResult:
    """Times the PG update with the reference and the current `what` (COMPARED: token_terms,
    the non-finite guard, the host allocator setting, what the decoder blocks keep for the
    backward pass, or blocked causal attention), interleaved (ref, cur, ref, cur, ...)
    so machine load hits both alike; prints one line. ``control``: the reference is also
    compiled a second time and timed in the same rounds ("control"), an A/A pair whose ratio
    shows how far two runs of one program read apart."""
    cfg = config_lib.get_preset(preset, dtype=dtype, param_dtype="float32")
    params = lm.init_params(cfg, jax.random.key(0))
    batch_np = make_batch(cfg, batch, length)
    runs, temp, loss = {}, {}, {}
    names = ("reference", "current") + (("control",) if control else ())
    variant_of = {name: "reference" if name == "control" else name for name in names}
    faults = {name: [] for name in names}
    was_kept = host_memory.is_kept()
    for name, variant in variant_of.items():
        kind = {"token_terms": dict(variant=variant), "guard": dict(guard=variant),
                "norm": dict(guard="per_leaf" if variant == "reference" else "current")
                }.get(what, {})
        vcfg = cfg.replace(**_MODEL_VARIANTS.get(what, {}).get(variant, {}))
        step, state, dev_batch = compiled_pg_step(vcfg, jax.tree.map(jnp.copy, params),
                                                  batch_np, **kind)
        temp[variant] = step.memory_analysis().temp_size_in_bytes
        update = update_runner(step, state, dev_batch)

        def run(update=update, name=name):
            start = host_memory.minor_faults()
            metrics = jax.block_until_ready(update())
            faults[name].append(host_memory.minor_faults() - start)
            return metrics

        if what == "host_memory":
            _HOST_MEMORY[variant]()
        loss[variant] = float(run()["pg/policy_loss"])
        runs[name] = run
    if what == "host_memory":  # rounds of updates; the first settles the heap, untimed
        before = {name: _HOST_MEMORY[variant] for name, variant in variant_of.items()}
        seconds = time_interleaved(runs, repeats, block=_SETTLE_BLOCK, before=before)
        # faults[v][0] is the warm-up call; then each round's last update
        per_update = {v: float(np.median(f[1:][_SETTLE_BLOCK - 1::_SETTLE_BLOCK]))
                      for v, f in faults.items()}
    else:
        seconds = time_interleaved(runs, repeats)
        per_update = {v: float(np.median(f[1:] or f)) for v, f in faults.items()}
    res = VariantResult(preset, batch, length, dtype, seconds, temp, loss, what, per_update)
    print(f"{preset} {what} B={batch} L={length} {dtype} | reference "
          f"{seconds['reference']:.3f} s, temp {temp['reference'] / 2**20:.0f} MiB, "
          f"{per_update['reference']:.0f} faults | current {seconds['current']:.3f} s, temp "
          f"{temp['current'] / 2**20:.0f} MiB, {per_update['current']:.0f} faults | speedup "
          f"{res.speedup:.2f}x | loss {loss['reference']:.6f} / {loss['current']:.6f}"
          + (f" | A/A control {res.control_ratio:.2f}x" if control else ""), flush=True)
    if what == "host_memory":  # the process's own setting again
        (host_memory.keep_freed_memory if was_kept else host_memory.restore_defaults)()
    return res


def variants_table(results: list[VariantResult], note: str = "") -> str:
    """The before/after section appended to docs/benchmarks-history.md by --compare / --compare_guard."""
    mib = lambda b: f"{b / 2**20:.0f}"
    what = results[0].what if results else "token_terms"
    lines = [f"\n### PG update: {COMPARED[what]} (`benchmarks/train_step.py "
             f"{COMPARE_FLAGS[what]}`) {note}".rstrip(), "", f"Machine: {machine_line()}.", "",
             "| preset | B x L | dtype | reference s/update | current s/update | speedup | "
             "temp MiB reference / current | page faults / update reference / current | "
             "loss reference / current |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        f = r.faults or {}
        lines.append(
            f"| {r.preset} | {r.batch} x {r.length} | {r.dtype} | {r.seconds['reference']:.3f} | "
            f"{r.seconds['current']:.3f} | {r.speedup:.2f}x | {mib(r.temp_bytes['reference'])} / "
            f"{mib(r.temp_bytes['current'])} | {f.get('reference', 0):.0f} / "
            f"{f.get('current', 0):.0f} | {r.loss['reference']:.6f} / {r.loss['current']:.6f} |")
    controls = [f"{r.preset} {r.seconds['reference']:.3f} / {r.seconds['control']:.3f} s, "
                f"{r.control_ratio:.2f}x" for r in results if r.control_ratio is not None]
    lines += control_lines(controls)
    return "\n".join(lines) + "\n"


def cpu_line(cpuinfo: str | None = None) -> str:
    """The CPU model and its widest x86 vector extension, e.g. "AMD EPYC, AVX2 (no AVX-512)":
    the dev VM has been either, and XLA's and torch's kernels differ most between the two."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            return platform.processor() or "unknown CPU"
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    isa = ("AVX-512" if "avx512f" in flags else "AVX2 (no AVX-512)" if "avx2" in flags
           else "no AVX2")
    return f"{fields.get('model name', platform.processor() or 'unknown CPU')}, {isa}"


def machine_line() -> str:
    dev = jax.devices()[0]
    memory = "kept host memory" if host_memory.is_kept() else "glibc's default host allocator"
    return (f"{platform.platform()}, {os.cpu_count()} CPUs ({cpu_line()}), jax {jax.__version__} "
            f"on {dev.platform} ({dev.device_kind}), {memory}, "
            f"{datetime.date.today().isoformat()}")


def markdown_table(results: list[StepResult], peak: MatmulPeak, note: str = "") -> str:
    """The section appended to docs/benchmarks-history.md."""
    fmt = lambda x, spec: "-" if x is None else format(x, spec)
    lines = [f"\n### Training step (`benchmarks/train_step.py`) {note}".rstrip(), "",
             f"Machine: {machine_line()}; measured {peak.describe()}.", "",
             "| preset | params | B x L | dtype | meowjax tok/s | torch tok/s | ratio | "
             "MFU meowjax | MFU torch | loss meowjax / torch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r.preset} | {r.params / 1e6:.1f}M | {r.batch} x {r.length} | {r.dtype} | "
            f"{r.ours_tok_s:.1f} | {fmt(r.torch_tok_s, '.1f')} | {fmt(r.ratio, '.2f')}x | "
            f"{r.mfu(r.ours_tok_s):.1%} | {fmt(r.mfu(r.torch_tok_s), '.1%')} | "
            f"{r.ours_loss:.5f} / {fmt(r.torch_loss, '.5f')} |")
    return "\n".join(lines) + "\n"


# Flags that change what a plain run's table measures (not how it is timed or reported).
_TABLE_SETTINGS = ("dtype", "remat", "scan_unroll", "saved_activations", "token_terms", "device")


def main(argv: list[str] | None = None) -> list[StepResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,smollm2-135m",
                        help="comma-separated presets from meowjax.models.config.PRESETS")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=config_lib.SUPPORTED_DTYPES,
                        help="compute dtype (params stay fp32; torch uses autocast for bf16)")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    parser.add_argument("--no_torch", action="store_true", help="skip the PyTorch reference")
    parser.add_argument("--scan_unroll", type=int, default=1,
                        help="our decoder blocks per layer-scan iteration (same math)")
    parser.add_argument("--remat", action="store_true",
                        help="rematerialise decoder blocks in the backward pass (both sides)")
    parser.add_argument("--saved_activations", default="projections",
                        choices=config_lib.SAVED_ACTIVATIONS,
                        help="what our decoder blocks keep for the backward pass")
    parser.add_argument("--token_terms", default="current", choices=sorted(TOKEN_TERMS),
                        help="'reference': the pre-fusion token_terms (two log_softmaxes)")
    parser.add_argument("--compare", action="store_true",
                        help="only time the update with reference vs current token_terms")
    parser.add_argument("--compare_guard", action="store_true",
                        help="only time the update with optax.apply_if_finite vs ours")
    parser.add_argument("--compare_host_memory", action="store_true",
                        help="only time the update with glibc's default allocator vs kept "
                        "host memory (meowjax.runtime.host_memory)")
    parser.add_argument("--compare_norm", action="store_true",
                        help="only time the update with the per-leaf guard vs one global norm")
    parser.add_argument("--compare_saved_activations", action="store_true",
                        help="only time the update with saved_activations='everything' vs "
                        "'projections'")
    parser.add_argument("--compare_attention", action="store_true",
                        help="only time the update with attention_blocks=1 (one "
                        "jax.nn.dot_product_attention) vs the preset's causal query blocks")
    parser.add_argument("--control", action="store_true",
                        help="with a --compare* flag: also time a second compiled copy of the "
                        "reference in the same rounds (an A/A pair: the run's noise)")
    host_memory.add_argparse_flag(parser)
    parser.add_argument("--peak_n", type=int, default=2048, help="matmul size for the peak")
    parser.add_argument("--results", default=DEFAULT_RESULTS, help="Markdown file to append to")
    parser.add_argument("--note", default="", help="text added to the table's heading")
    args = parser.parse_args(argv)
    presets = [p for p in args.presets.split(",") if p]
    if args.keep_host_memory:
        host_memory.keep_freed_memory()
    flags = {what: getattr(args, flag.lstrip("-")) for what, flag in COMPARE_FLAGS.items()}
    if any(flags.values()):
        print(machine_line(), flush=True)
        what = next(k for k, on in flags.items() if on)
        compared = [compare_variants(p, args.batch, args.length, args.repeats, args.dtype,
                                     what, args.control) for p in presets]
        if args.results:
            with open(args.results, "a", encoding="utf-8") as f:
                f.write(variants_table(compared, args.note))
        return compared
    peak = measure_peak(args.peak_n, args.dtype, not args.no_torch, args.device)
    print(f"{machine_line()}\n{peak.describe()}", flush=True)
    results = [bench_preset(p, args.batch, args.length, args.repeats, args.dtype,
                            not args.no_torch, args.device, peak, args.token_terms, args.remat,
                            args.scan_unroll, args.saved_activations)
               for p in presets]
    # The model / loss settings that differ from the defaults name the table, so two runs that
    # differ only in them cannot be mistaken for one another.
    changed = [f"--{k}={getattr(args, k)}" for k in _TABLE_SETTINGS
               if getattr(args, k) != parser.get_default(k)]
    note = " ".join(([f"({', '.join(changed)})"] if changed else []) + [args.note]).strip()
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(markdown_table(results, peak, note))
    return results


if __name__ == "__main__":
    main()
