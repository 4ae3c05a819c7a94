"""Ahead-of-time compile checks: does a pod-sized update step / sampler compile, and fit?

No weights are allocated: parameters, optimizer state, batch and KV cache are
`jax.ShapeDtypeStruct`s (`lm.abstract_params`), placed with the ONE sharding rule table
(`meowjax.sharding.LOGICAL_RULES`) on a mesh, and each function goes through
`jax.jit(f, in_shardings=..., out_shardings=...).lower(abstract args).compile()`.
`compiled.memory_analysis()` then gives the per-device bytes:

    per_device = arguments + outputs - aliased (donated) + temporaries (+ generated code)

Two compilers:
- `--topology=v5p:4x4x4` (or any libtpu topology name: `v5e:8x8`, `v4:2x2x4`, ...): the real TPU
  compiler on a TPU topology description (`jax.experimental.topologies.get_topology_desc`), no
  TPU needed, only the `libtpu` wheel (`pip install -e '.[tpu]'`). Its memory figures are what
  that pod would allocate. The mesh must cover every chip of the topology.
- otherwise a simulated CPU mesh: each target runs in a subprocess with
  `XLA_FLAGS=--xla_force_host_platform_device_count=<mesh size>`. The CPU compiler's buffer
  assignment is an estimate of what a TPU/GPU compile would need (it may keep fp32 copies of bf16
  operands that an accelerator would not), not a guarantee.

Targets (name = function:preset):
    update   the free-text PG step (forward + backward + AdamW, no critic) on [B, L] rows
    prefill  `lm.decode_step` of a [B, P] prompt into a P + T slot KV cache
    decode   `lm.decode_step` of one token per row through that cache

    python -m benchmarks.aot                       # the default plan (see PLAN) -> docs/benchmarks-history.md
    python -m benchmarks.aot --plan=tpu            # Qwen2.5 1.5B/7B on TPU v5p-128 and a
                                                   # v5e-8 host (needs libtpu, no TPU)
    python -m benchmarks.aot --targets=update:tiny --mesh=fsdp=2,tensor=2 --batch=4 --length=32
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time

GIB = 1024 ** 3
FITS = (16, 32, 80)  # device memory sizes checked, GiB
DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")


@dataclasses.dataclass(frozen=True)
class Target:
    """One compile: function, preset, mesh (fsdp x tensor), shapes and numerics."""

    fn: str              # update | prefill | decode
    preset: str
    fsdp: int = 1
    tensor: int = 1
    batch: int = 8       # rows (update) or prompts (sampler)
    length: int = 512    # row length (update) or prompt length P (sampler)
    new_tokens: int = 256  # T, decode steps the cache has room for (sampler)
    dtype: str = "float32"  # compute and parameter dtype
    remat: bool = False
    token_terms: str = "current"  # update only: "reference" = pre-fusion token_terms
    topology: str = ""   # libtpu topology name (TPU compiler); "" = simulated CPU devices

    @property
    def devices(self) -> int:
        return self.fsdp * self.tensor


def _plan() -> list[Target]:
    """Small presets on one device (fp32); Qwen2.5 1.5B/7B bf16 on fsdp=16 x tensor=4."""
    small = [Target("update", p, batch=8, length=512) for p in
             ("tiny", "small", "smollm2-135m", "qwen2.5-0.5b")]
    big = []
    for preset in ("qwen2.5-1.5b", "qwen2.5-7b"):
        mesh = dict(fsdp=16, tensor=4, dtype="bfloat16")
        big += [Target("update", preset, batch=32, length=1024, remat=True, **mesh),
                Target("prefill", preset, batch=64, length=1024, **mesh),
                Target("decode", preset, batch=64, length=1024, **mesh)]
    return small + big


def _tpu_plan() -> list[Target]:
    """Qwen2.5 1.5B/7B on a 64-chip TPU v5p slice (v5p-128: 95 GiB HBM a chip) with the CPU
    plan's shapes, 7B also at twice the rows per chip; and the update on one 8-chip TPU v5e host
    (v5litepod-8: 16 GiB a chip), FSDP over all 8, through the TPU compiler."""
    out = []
    mesh = dict(fsdp=16, tensor=4, dtype="bfloat16", topology="v5p:4x4x4")
    for preset in ("qwen2.5-1.5b", "qwen2.5-7b"):
        out += [Target("update", preset, batch=32, length=1024, remat=True, **mesh),
                Target("prefill", preset, batch=64, length=1024, **mesh),
                Target("decode", preset, batch=64, length=1024, **mesh)]
    out.append(Target("update", "qwen2.5-7b", batch=64, length=1024, remat=True, **mesh))
    host = dict(fsdp=8, tensor=1, dtype="bfloat16", topology="v5e:2x4", remat=True)
    out += [Target("update", p, batch=8, length=1024, **host)
            for p in ("qwen2.5-1.5b", "qwen2.5-7b")]
    return out


PLAN = _plan()
PLANS = {"cpu": PLAN, "tpu": _tpu_plan()}


def target_devices(t: Target) -> list:
    """The devices `t` compiles for: the chips of its TPU topology (all of them), or the first
    `t.devices` devices of this process."""
    import jax

    if not t.topology:
        if jax.device_count() < t.devices:
            raise RuntimeError(
                f"{t} needs {t.devices} devices but jax sees {jax.device_count()}; run it "
                "through `python -m benchmarks.aot` (which sets XLA_FLAGS in a subprocess).")
        return jax.devices()[: t.devices]
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(topology_name=t.topology, platform="tpu")
    except Exception as e:  # no libtpu, or a name libtpu does not know
        raise RuntimeError(
            f"no TPU topology {t.topology!r} ({type(e).__name__}: {str(e)[:200]}); it needs the "
            "libtpu wheel (`pip install -e '.[tpu]'`) and a name such as v5p:4x4x4 or "
            "v5e:8x8.") from e
    if len(topo.devices) != t.devices:
        raise ValueError(
            f"topology {t.topology} has {len(topo.devices)} chips but the mesh fsdp={t.fsdp} x "
            f"tensor={t.tensor} covers {t.devices}; make fsdp x tensor = {len(topo.devices)}.")
    return list(topo.devices)


def compile_target(t: Target) -> dict:
    """Lowers and compiles one target in this process (needs t.devices devices)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from benchmarks import train_step
    from meowjax import sharding
    from meowjax.models import config as config_lib
    from meowjax.models import lm
    from meowjax.trainers import optim, steps, text_steps

    cfg = config_lib.get_preset(t.preset, dtype=t.dtype, param_dtype=t.dtype, remat=t.remat)
    mesh = sharding.make_mesh([("data", 1), ("fsdp", t.fsdp), ("tensor", t.tensor)],
                              devices=target_devices(t))
    rep = sharding.replicated(mesh)
    params_abs = lm.abstract_params(cfg)
    params_sh = sharding.tree_shardings(lm.logical_axes(cfg), mesh, params_abs)

    def spec(axes, shape):
        return NamedSharding(mesh, sharding.logical_to_spec(axes, sharding.LOGICAL_RULES, mesh,
                                                            shape))

    if t.fn == "update":
        train_step.use_token_terms(t.token_terms)
        optimizer = optim.make_optimizer(1e-6, warmup_steps=1, total_steps=100, grad_clip=1.0)
        step = steps.make_pg_step(text_steps.TokenUnits(cfg), optimizer, optimizer,
                                  train_step.pg_objective(), temperature=1.0, needs_critic=False)
        state_abs = optim.TrainState(
            step=jax.ShapeDtypeStruct((), jnp.int32), params=params_abs,
            opt_state=jax.eval_shape(optimizer.init, params_abs), value_params={},
            value_opt_state={})
        state_sh = optim.TrainState(
            step=rep, params=params_sh,
            opt_state=sharding.opt_state_shardings(optimizer, params_abs, params_sh, mesh),
            value_params={}, value_opt_state={})
        example = train_step.make_batch(cfg.replace(vocab_size=8), 1, 2)
        batch_abs = {k: jax.ShapeDtypeStruct((t.batch, t.length)[: v.ndim], v.dtype)
                     for k, v in example.items()}
        batch_sh = {k: sharding.batch_sharding(mesh) for k in batch_abs}
        fn = jax.jit(lambda s, b: step(s, b), in_shardings=(state_sh, batch_sh),
                     out_shardings=(state_sh, rep), donate_argnums=0)
        args = (state_abs, batch_abs)
    else:
        slots = t.length + t.new_tokens
        length = t.length if t.fn == "prefill" else 1
        cache_abs = jax.eval_shape(lambda: lm.init_cache(cfg, t.batch, slots))
        kv_axes = ("layers", "batch", "length", "kv_heads", "head_dim")
        cache_sh = lm.KVCache(k_NBSKD=spec(kv_axes, cache_abs.k_NBSKD.shape),
                              v_NBSKD=spec(kv_axes, cache_abs.v_NBSKD.shape),
                              mask_BS=spec(("batch", "length"), cache_abs.mask_BS.shape),
                              index=rep)
        tok_abs = jax.ShapeDtypeStruct((t.batch, length), jnp.int32)
        tok_sh = spec(("batch", "length"), tok_abs.shape)
        logits_sh = spec(("batch", "length", "vocab"), (t.batch, length, cfg.vocab_size))

        def sample_fn(params, tokens_BL, positions_BL, mask_BL, cache):
            return lm.decode_step(params, cfg, tokens_BL, positions_BL, cache, mask_BL)

        fn = jax.jit(sample_fn, in_shardings=(params_sh, tok_sh, tok_sh, tok_sh, cache_sh),
                     out_shardings=(logits_sh, cache_sh), donate_argnums=4)
        args = (params_abs, tok_abs, tok_abs, tok_abs, cache_abs)

    start = time.perf_counter()
    compiled = fn.lower(*args).compile()
    seconds = time.perf_counter() - start
    m = compiled.memory_analysis()
    total = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
             + m.temp_size_in_bytes + m.generated_code_size_in_bytes)
    return dict(dataclasses.asdict(t), params=config_lib.num_params(cfg),
                compile_s=round(seconds, 1), argument_bytes=m.argument_size_in_bytes,
                output_bytes=m.output_size_in_bytes, alias_bytes=m.alias_size_in_bytes,
                temp_bytes=m.temp_size_in_bytes, code_bytes=m.generated_code_size_in_bytes,
                per_device_bytes=total)


def run_in_subprocess(targets: list[Target], timeout_s: float) -> list[dict]:
    """Compiles `targets` (same device count and topology) in one child process that sees that
    many CPU devices (or, for a TPU topology, one CPU device beside the topology's chips); a
    failed or timed-out child marks its remaining targets with an error."""
    devices = 1 if targets[0].topology else targets[0].devices
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_force_host_platform_device_count={devices}").strip()
    env["JAX_PLATFORMS"] = "cpu"
    spec = json.dumps([dataclasses.asdict(t) for t in targets])
    cmd = [sys.executable, "-m", "benchmarks.aot", "--child", spec]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
        error = (stderr.strip().splitlines() or ["no output"])[-1][:300]
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
        error = f"compile over the {timeout_s:.0f} s budget of this process"
    done = [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]
    return done + [dict(dataclasses.asdict(t), error=error) for t in targets[len(done):]]


def describe(r: dict) -> str:
    """One printed line per target."""
    name = (f"{r['fn']}:{r['preset']} mesh fsdp={r['fsdp']} x tensor={r['tensor']}"
            f"{' on TPU ' + r['topology'] if r.get('topology') else ''}")
    if "error" in r:
        return f"{name}: FAILED: {r['error']}"
    fits = " ".join(f"{g}GB:{'yes' if r['per_device_bytes'] <= g * GIB else 'no'}" for g in FITS)
    return (f"{name} B={r['batch']} L={r['length']} {r['dtype']}{' remat' if r['remat'] else ''}"
            f"{' ref-logp' if r.get('token_terms') == 'reference' else ''}:"
            f" {r['per_device_bytes'] / GIB:.2f} GiB/device (args {r['argument_bytes'] / GIB:.2f},"
            f" temp {r['temp_bytes'] / GIB:.2f}) | fits {fits} | compile {r['compile_s']} s")


def markdown_table(results: list[dict]) -> str:
    topologies = sorted({r.get("topology", "") for r in results} - {""})
    compilers = []
    if any(not r.get("topology") for r in results):
        compilers.append("simulated CPU devices (`--xla_force_host_platform_device_count`; "
                         "the CPU compiler's memory is an estimate for TPU/GPU)")
    if topologies:
        import jax

        compilers.append(f"the TPU compiler on libtpu topology descriptions "
                         f"({', '.join(topologies)}; jax {jax.__version__}, no TPU attached)")
    lines = [f"\n### AOT compile and per-device memory (`benchmarks/aot.py`)", "",
             f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, {'; '.join(compilers)}, "
             f"{datetime.date.today().isoformat()}. "
             "Memory = arguments + outputs - donated + temporaries, per device, from "
             "`compiled.memory_analysis()`.", "",
             "| function | preset | params | mesh (fsdp x tensor) | compiled for | shapes | dtype | "
             "GiB/device | args GiB | temp GiB | fits 16/32/80 GB | compile s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        shapes = (f"B={r['batch']} L={r['length']}" if r["fn"] == "update" else
                  f"B={r['batch']} P={r['length']} T={r['new_tokens']}")
        dtype = (r["dtype"] + (" remat" if r["remat"] else "")
                 + (" ref-logp" if r.get("token_terms") == "reference" else ""))
        head = f"| {r['fn']} | {r['preset']} | "
        where = f"TPU {r['topology']}" if r.get("topology") else "CPU"
        if "error" in r:
            lines.append(head + f"- | {r['fsdp']} x {r['tensor']} | {where} | {shapes} | {dtype} "
                         f"| failed: {r['error'][:120]} | | | | |")
            continue
        fits = "/".join("yes" if r["per_device_bytes"] <= g * GIB else "no" for g in FITS)
        lines.append(
            head + f"{r['params'] / 1e9:.2f}B | {r['fsdp']} x {r['tensor']} | {where} | {shapes} "
            f"| {dtype} "
            f"| {r['per_device_bytes'] / GIB:.2f} | {r['argument_bytes'] / GIB:.2f} | "
            f"{r['temp_bytes'] / GIB:.2f} | {fits} | {r['compile_s']} |")
    return "\n".join(lines) + "\n"


def parse_targets(args) -> list[Target]:
    if not args.targets:
        if args.plan not in PLANS:
            raise ValueError(f"--plan={args.plan!r}: known plans are {sorted(PLANS)}.")
        plan = PLANS[args.plan]
        return ([dataclasses.replace(t, topology=args.topology) for t in plan]
                if args.topology else plan)
    mesh = dict(kv.split("=") for kv in args.mesh.split(",") if kv)
    unknown = set(mesh) - {"fsdp", "tensor"}
    if unknown:
        raise ValueError(f"--mesh knows fsdp and tensor, not {sorted(unknown)}; e.g. "
                         "--mesh=fsdp=16,tensor=4.")
    out = []
    for item in args.targets.split(","):
        fn, _, preset = item.partition(":")
        if fn not in ("update", "prefill", "decode") or not preset:
            raise ValueError(f"--targets item {item!r} must be update|prefill|decode:<preset>.")
        out.append(Target(fn, preset, fsdp=int(mesh.get("fsdp", 1)),
                          tensor=int(mesh.get("tensor", 1)), batch=args.batch,
                          length=args.length, new_tokens=args.new_tokens, dtype=args.dtype,
                          remat=args.remat, token_terms=args.token_terms,
                          topology=args.topology))
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--targets", default="", help="fn:preset,... (default: --plan)")
    parser.add_argument("--plan", default="cpu", help="without --targets: cpu or tpu")
    parser.add_argument("--topology", default="",
                        help="libtpu topology name, e.g. v5p:4x4x4 (TPU compiler; needs libtpu)")
    parser.add_argument("--mesh", default="fsdp=1,tensor=1")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--remat", action="store_true")
    parser.add_argument("--token_terms", default="current",
                        choices=("current", "reference"))
    parser.add_argument("--timeout_s", type=float, default=1800,
                        help="budget of each child process (all targets of one mesh size)")
    parser.add_argument("--results", default=DEFAULT_RESULTS)
    args = parser.parse_args(argv)
    if args.child:
        for spec in json.loads(args.child):
            try:
                out = compile_target(Target(**spec))
            except Exception as e:  # report and go on with the next target
                out = dict(spec, error=f"{type(e).__name__}: {e}"[:300])
            print(json.dumps(out), flush=True)
        return []
    targets = parse_targets(args)
    results = []
    for key in dict.fromkeys((t.devices, t.topology) for t in targets):  # first-seen order
        group = [t for t in targets if (t.devices, t.topology) == key]
        for r in run_in_subprocess(group, args.timeout_s):
            results.append(r)
            print(describe(r), flush=True)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(markdown_table(results))
    return results


if __name__ == "__main__":
    main()
