#!/usr/bin/env bash
# One prepared GPU check (< 5 min on one H200): sampler and update throughput + MFU, bf16,
# for SmolLM2-135M and Qwen2.5-0.5B-shaped random models, against PyTorch on the same GPU.
#
# The device image has jax[cuda13], flax, optax, chex, torch, transformers, safetensors, absl,
# tensorboard but not ml_collections (pure Python). Prepare once, here, in the repo root:
#   echo /.whl/ >> .git/info/exclude
#   .venv/bin/pip download --no-deps --only-binary=:all: -d .whl ml_collections==1.1.0
# then on the device tool:  run(command="bash benchmarks/gpu_check.sh", carry=[".whl"],
#                               timeout_s=420)
# Results: stdout, plus $OUT/gpu_results.md (train-step table) when $OUT is set.
# Dry run of the plumbing on a CPU (tiny preset, small shapes):  GPU_CHECK_TINY=1 bash $0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
if [[ -d .whl ]] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # torch shares the GPU in the same run
RESULTS=${OUT:-/tmp}/gpu_results.md; mkdir -p "$(dirname "$RESULTS")"

if [[ -n "${GPU_CHECK_TINY:-}" ]]; then
  PRESETS=tiny; DEVICE=cpu; B=2; L=32; PEAK_N=256; SB=2; SP=16; ST=8; REPEATS=1
else
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv || true
  PRESETS=smollm2-135m,qwen2.5-0.5b; DEVICE=cuda; B=8; L=1024; PEAK_N=8192; SB=64; SP=128
  ST=128; REPEATS=5
fi
$PY -c "import jax, torch; print('jax', jax.__version__, jax.devices(), '| torch', \
torch.__version__, torch.cuda.is_available())"

echo "== update step (forward + backward + AdamW), bf16 compute, fp32 params =="
# The 0.5B model's activations at B x L = 8k tokens (dense attention, no remat) need ~45 GiB in
# one buffer: it runs with remat on both sides (torch: gradient checkpointing).
IFS=, read -ra PRESET_LIST <<<"$PRESETS"
for preset in "${PRESET_LIST[@]}"; do
  REMAT=""; [[ "$preset" == qwen* ]] && REMAT="--remat"
  timeout 150 $PY -m benchmarks.train_step --presets=$preset --dtype=bfloat16 --device=$DEVICE \
    --batch=$B --length=$L --peak_n=$PEAK_N --repeats=$REPEATS --results="$RESULTS" $REMAT \
    --note="(GPU check, bf16${REMAT:+, remat})" || echo "update benchmark $preset failed or timed out (rc=$?)"
done

echo "== sampler (prefill + on-device greedy decode), bf16 params and KV cache =="
timeout 100 $PY - "$PRESETS" "$DEVICE" "$SB" "$SP" "$ST" "$PEAK_N" <<'EOF' || echo "sampler failed (rc=$?)"
import sys, time
import jax, jax.numpy as jnp, numpy as np, torch, transformers, tempfile
from benchmarks.timing import measure_peak
from meowjax.models import config as config_lib, hf_io, lm
from meowjax.rollout.sampler import Sampler

presets, device, B, P, T, peak_n = sys.argv[1].split(","), sys.argv[2], *map(int, sys.argv[3:])
peak_both = measure_peak(peak_n, "bfloat16", with_torch=True, device=device)
print(peak_both.describe())
peak = peak_both.flops
for preset in presets:
    cfg = config_lib.get_preset(preset, dtype="bfloat16", param_dtype="bfloat16")
    params = lm.init_params(cfg, jax.random.key(0))
    prompts = np.random.default_rng(0).integers(3, cfg.vocab_size, (B, P)).tolist()
    sampler = Sampler(cfg, prompt_buckets=(P,), batch_buckets=(B,), max_new_tokens=T)
    gen = lambda: sampler.generate(params, prompts, jax.random.key(0), greedy=True, stop_ids=())
    gen()  # compile
    t0 = time.perf_counter(); out = gen(); t_ours = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        hf_io.save_hf_checkpoint(tmp, cfg, params)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.bfloat16)
    model = model.to(device).eval()
    ids = torch.tensor(prompts, device=device)
    def theirs():
        with torch.no_grad():
            r = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=T, min_new_tokens=T, eos_token_id=None,
                               pad_token_id=0)
        if device == "cuda":
            torch.cuda.synchronize()
        return r
    theirs()
    t0 = time.perf_counter(); ref = theirs(); t_theirs = time.perf_counter() - t0
    n = B * T
    flops = 2.0 * config_lib.num_params(cfg) * B * (P + T)  # forward only
    agree = np.mean(out.tokens_BT == ref[:, P:].cpu().numpy())
    print(f"sampler {preset}: B={B} P={P} T={T} | meowjax {n / t_ours:9.1f} tok/s "
          f"(MFU {flops / t_ours / peak:6.2%}) | transformers {n / t_theirs:9.1f} tok/s | "
          f"ratio {t_theirs / t_ours:.2f}x | greedy agree {agree:.1%} (bf16: not exact)")
    del model
EOF
[[ -f "$RESULTS" ]] && cat "$RESULTS"
