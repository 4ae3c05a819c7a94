#!/usr/bin/env bash
# The accelerator check, first call (up to 10 minutes on one H200): correctness in fp32 and bf16,
# then update-step and sampler throughput against PyTorch on the same GPU, for SmolLM2-135M- and
# Qwen2.5-0.5B-shaped random models. The second call is benchmarks/gpu_rl_run.sh.
#
# Prepare here first: `bash benchmarks/gpu_prepare.sh` (packages, games, the GGUF's two parts).
# Then:  run(command="bash benchmarks/gpu_check.sh", carry=[".gpu_carry", ".gpu_part_a"],
#            timeout_s=600)
# At f478909 the update benchmark did not finish within 75 s (nor 130 s) per preset on an H200
# (docs/benchmarks-history.md), hence the longer limits; a 15-minute lease fits this call, the
# second one and little else.
# (.gpu_part_a only rides along: it must be on the machine when gpu_rl_run.sh starts.)
# Results: stdout, and $OUT/gpu_check.md when $OUT is set.
# Dry run of the plumbing on a CPU (tiny preset, small shapes):  GPU_CHECK_TINY=1 bash $0
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # torch shares the GPU in the same run
RESULTS=${OUT:-/tmp}/gpu_check.md; mkdir -p "$(dirname "$RESULTS")"

if [[ -n "${GPU_CHECK_TINY:-}" ]]; then
  PRESETS=tiny; DEVICE=cpu; B=2; L=32; PEAK_N=256; SB=2; SP=16; ST=8; REPEATS=1
  CORRECT="--presets=tiny --device=cpu --batch=2 --length=32 --sample_batch=2 --prompt_len=16 --new_tokens=8"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv || true
  PRESETS=smollm2-135m,qwen2.5-0.5b; DEVICE=cuda; B=8; L=1024; PEAK_N=8192; SB=64; SP=512
  ST=128; REPEATS=3; CORRECT="--presets=$PRESETS --sampler_presets=smollm2-135m"
fi
$PY -c "import jax, flax, torch, transformers; print('jax', jax.__version__, jax.devices(), \
'| flax', flax.__version__, '| torch', torch.__version__, torch.cuda.is_available(), \
'| transformers', transformers.__version__)"
{ echo "## GPU check, $(date -u +%F), commit $(cat .gpu_carry/commit 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true; } >> "$RESULTS"

echo "== correctness: logits vs transformers, sampler vs trainer, greedy vs argmax =="
timeout 150 $PY -m benchmarks.gpu_correctness $CORRECT --results="$RESULTS" \
  || echo "correctness checks failed or timed out (rc=$?)" | tee -a "$RESULTS"

echo "== update step (forward + backward + AdamW), bf16 compute, fp32 params =="
# The 0.5B model's activations at B x L = 8k tokens (dense attention, no remat) need ~45 GiB in
# one buffer: it runs with remat on both sides (torch: gradient checkpointing).
IFS=, read -ra PRESET_LIST <<<"$PRESETS"
for preset in "${PRESET_LIST[@]}"; do
  REMAT=""; [[ "$preset" == qwen* ]] && REMAT="--remat"
  timeout 150 $PY -m benchmarks.train_step --presets=$preset --dtype=bfloat16 --device=$DEVICE \
    --batch=$B --length=$L --peak_n=$PEAK_N --repeats=$REPEATS --results="$RESULTS" $REMAT \
    --note="(GPU check, bf16${REMAT:+, remat})" \
    || echo "update benchmark $preset failed or timed out (rc=$?)" | tee -a "$RESULTS"
done

echo "== sampler (prefill + on-device greedy decode), bf16 params and KV cache =="
timeout 80 $PY - "$PRESETS" "$DEVICE" "$SB" "$SP" "$ST" "$PEAK_N" "$RESULTS" <<'EOF' \
  || echo "sampler benchmark failed or timed out (rc=$?)" | tee -a "$RESULTS"
import sys, time
import jax, numpy as np, torch, transformers, tempfile
from benchmarks.timing import measure_peak
from meowjax.models import config as config_lib, hf_io, lm
from meowjax.rollout.sampler import Sampler

presets, device = sys.argv[1].split(","), sys.argv[2]
B, P, T, peak_n = map(int, sys.argv[3:7])
results = sys.argv[7]
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
    times = []
    for _ in range(2):  # generate returns host arrays: the clock stops after the device is done
        t0 = time.perf_counter(); out = gen(); times.append(time.perf_counter() - t0)
    t_ours = min(times)
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
    times = []
    for _ in range(2):
        t0 = time.perf_counter(); ref = theirs(); times.append(time.perf_counter() - t0)
    t_theirs = min(times)
    n = B * T
    flops = 2.0 * config_lib.num_params(cfg) * B * (P + T)  # forward only
    agree = np.mean(out.tokens_BT == ref[:, P:].cpu().numpy())
    line = (f"sampler {preset}: B={B} P={P} T={T} greedy | meowjax {n / t_ours:9.1f} tok/s "
            f"(MFU {flops / t_ours / peak:6.2%}) | transformers generate {n / t_theirs:9.1f} "
            f"tok/s | ratio {t_theirs / t_ours:.2f}x | same tokens {agree:.1%} (bf16)")
    print(line, flush=True)
    with open(results, "a", encoding="utf-8") as f:
        f.write(f"- {line}\n")
    del model
EOF
[[ -f "$RESULTS" ]] && cat "$RESULTS"
true
