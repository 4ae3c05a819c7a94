#!/usr/bin/env bash
# The accelerator check, second call (3 minutes on one H200 at f478909): the short free-text RL
# run of SmolLM2-135M-Instruct on TextWorld w2-o3-q4 (benchmarks/gpu_rl_run.py).
#
# Run right after benchmarks/gpu_check.sh, on the same warm machine (it left the GGUF's first
# part there):  run(command="bash benchmarks/gpu_rl_run.sh", carry=[".gpu_carry", ".gpu_part_b"],
#                   timeout_s=420)
# Results: stdout, and $OUT/gpu_rl.md when $OUT is set.
# Dry run on a CPU (the wheel's GGUF, a 2-iteration smoke run):  GPU_CHECK_TINY=1 bash $0
set -uo pipefail
cd "$(dirname "$0")/.."
source benchmarks/gpu_env.sh
GAMES=data/gpu_games   # the cache benchmarks/gpu_prepare.sh fills (here it is already there)
if [[ -f .gpu_carry/games.tar.xz && ! -d $GAMES ]]; then
  mkdir -p /tmp/gpu_games && tar -C /tmp/gpu_games -xJf .gpu_carry/games.tar.xz
  GAMES=/tmp/gpu_games/gpu_games
fi
RESULTS=${OUT:-/tmp}/gpu_rl.md; mkdir -p "$(dirname "$RESULTS")"
GGUF=/tmp/smollm2.gguf
if [[ -n "${GPU_CHECK_TINY:-}" ]]; then
  ARGS=(--config_arg=smoke=True --logp_rows=2 --logp_tokens=4)
  GGUF=$($PY -c "from meowjax.models import gguf_io; print(gguf_io.find_smollm2_gguf())")
else
  ARGS=()
  if [[ ! -f .gpu_part_a/smollm2.gguf.part || ! -f .gpu_part_b/smollm2.gguf.part ]]; then
    echo "The GGUF's parts are not both here (.gpu_part_a: from benchmarks/gpu_check.sh on the" \
         "same warm machine; .gpu_part_b: carried now). If the machine was given back between" \
         "the two calls, carry .gpu_part_a in a call of its own first." | tee -a "$RESULTS"
    exit 2
  fi
  cat .gpu_part_a/smollm2.gguf.part .gpu_part_b/smollm2.gguf.part > $GGUF
  if [[ "$(sha256sum $GGUF | cut -d' ' -f1)" != "$(cat .gpu_carry/smollm2.sha256)" ]]; then
    echo "The reassembled GGUF's sha256 differs from .gpu_carry/smollm2.sha256: rerun" \
         "benchmarks/gpu_prepare.sh and both calls." | tee -a "$RESULTS"
    exit 2
  fi
fi
{ echo "## GPU RL run, $(date -u +%F), commit $(cat .gpu_carry/commit 2>/dev/null || echo '?')"
  echo "\`python -m benchmarks.gpu_rl_run --gguf=$GGUF --games=$GAMES ${ARGS[*]}\`"
} >> "$RESULTS"
# SIGTERM at the limit: the trainer saves and stops, and the summary still prints.
LOG=${OUT:-/tmp}/gpu_rl_log.txt
timeout 380 $PY -m benchmarks.gpu_rl_run --gguf=$GGUF --games=$GAMES \
  --workdir=/tmp/gpu_rl --results="$RESULTS" "${ARGS[@]}" > "$LOG" 2>&1 \
  || echo "the RL run failed or timed out (rc=$?)" | tee -a "$RESULTS"
grep -v -E "(Loading weights|it/s\]$|orbax|checkpoint|atomicity|deleter|event_tracking)" "$LOG" | tail -60
# Whatever the run wrote before a timeout: the per-iteration metrics.
[[ -f /tmp/gpu_rl/run/metrics.jsonl && -n "${OUT:-}" ]] && cp /tmp/gpu_rl/run/metrics.jsonl "$OUT/"
cat "$RESULTS"
true
