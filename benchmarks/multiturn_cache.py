"""Multi-turn free-text rollouts: per-episode KV cache kept across turns vs re-prefill each turn.

`rollout.episodes.collect_episodes` on a scripted environment that answers every action with a
reply of about ``--reply_tokens`` tokens and never ends an episode before ``--turns``' largest
value; random weights of a ``--preset`` model (SmolLM2-135M shapes by default), greedy, the
same batch, run once with ``kv_reuse=True`` and once with ``kv_reuse=False`` in this process:

    python -m benchmarks.multiturn_cache                    # smollm2-135m, B=16, 4/12/24 turns
    python -m benchmarks.multiturn_cache --smoke            # tiny preset, B=4, 2/4/6 turns

One rollout of T = max(--turns) turns per path; each turn's sampler call (`Sampler.generate`
or `EpisodeCaches.turn`: prefill, decode, the one host transfer) is timed, minus the time JAX
spent tracing and compiling inside it (`runtime.metrics_log.CompileClock`; reported apart), so
every turn is a steady-state reading. The first k turns of that rollout are a k-turn rollout,
so its time at k = 4, 12, 24 is the cumulative sum of the first k turns:

    speedup(k)       = re-prefill seconds(k) / cached seconds(k)
    tokens/s(k)      = sampled action tokens of the first k turns / seconds(k)
    turn cost ratio  = cached seconds of turn k / of turn 2        (linear cost: close to 1)

plus the whole collect_episodes wall time (host work included, compiles excluded) and whether
both paths produced the same tokens (random weights put near-ties everywhere, so fp32 rounding
may flip a greedy argmax; the shapes and therefore the costs do not depend on the tokens: every
action runs to --action_tokens, the replies are scripted).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

import jax
import numpy as np

from benchmarks.train_step import machine_line
from meowjax.envs.base import ResetResult, StepResult, Task
from meowjax.models import config as config_lib
from meowjax.models import lm
from meowjax.rollout import episode_cache, episodes
from meowjax.rollout.sampler import Sampler
from meowjax.rollout.tokenizer import train_bpe_tokenizer
from meowjax.runtime import metrics_log

DEFAULT_RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks-history.md")
WORDS = ("you are in the kitchen a door leads north east south west there is a table with an "
         "old key on it the chest is locked take open close examine look inventory go room "
         "corridor lamp coin box shelf under behind your score has gone up by one point").split()


def _tokenizer():
    return train_bpe_tokenizer([" ".join(WORDS)] * 20, vocab_size=320)


class ReplyEnv:
    """Answers every action with a fixed-length reply (a different one each turn); never ends
    the game itself (the turn budget does)."""

    def __init__(self, tok: Any, reply_tokens: int, seed: int):
        self.rng, self.tok, self.reply_tokens = np.random.default_rng(seed), tok, reply_tokens

    def _text(self) -> str:
        words: list[str] = []
        while len(self.tok.encode(" ".join(words), add_special_tokens=False)) < self.reply_tokens:
            words.append(str(self.rng.choice(WORDS)))
        return " ".join(words)

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        return ResetResult(observation=self._text(), objective="Find the key and open the chest.",
                           max_score=1.0)

    def step(self, action: str) -> StepResult:
        return StepResult(observation=self._text(), reward=0.0, done=False, won=False,
                          info={"invalid": False, "truncated": False})


class ReplyPool:
    def __init__(self, tok: Any, reply_tokens: int):
        self.tok, self.reply_tokens = tok, reply_tokens

    def reset(self, tasks, max_turns):
        self.envs = [ReplyEnv(self.tok, self.reply_tokens, i) for i in range(len(tasks))]
        return [e.reset(t, m) for e, t, m in zip(self.envs, tasks, max_turns)]

    def step(self, actions):
        return [None if a is None else e.step(a) for e, a in zip(self.envs, actions)]


def compile_seconds(clock: metrics_log.CompileClock) -> float:
    """Seconds JAX spent tracing, lowering and compiling since ``clock`` started."""
    snap = clock.snapshot()
    return snap["compile_s"] + snap["trace_s"]


class TurnTimer:
    """Wraps a sampler call: per call (turn) its wall seconds minus the compile seconds in it."""

    def __init__(self, fn, clock: metrics_log.CompileClock, label: str):
        self.fn, self.clock, self.label = fn, clock, label
        self.turn_s: list[float] = []
        self.compile_s = 0.0

    def __call__(self, *args, **kwargs):
        compiled, start = compile_seconds(self.clock), time.perf_counter()
        out = self.fn(*args, **kwargs)   # returns host numpy: the device work is done
        spent = compile_seconds(self.clock) - compiled
        self.turn_s.append(time.perf_counter() - start - spent)
        self.compile_s += spent
        print(f"  {self.label} turn {len(self.turn_s)}: {self.turn_s[-1]:.2f} s (+ {spent:.1f} s "
              "compiling)", flush=True)
        return out


def run_path(kv_reuse: bool, cfg, params, tok, *, batch: int, turns: int, reply_tokens: int,
             action_tokens: int, max_context: int) -> dict:
    """One rollout of ``batch`` episodes x ``turns`` turns: per-turn seconds, totals, tokens."""
    buckets = tuple(b for b in (128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
                    if b < max_context) + (max_context,)
    sampler = Sampler(cfg, prompt_buckets=buckets, batch_buckets=(1, 2, 4, 8, 16, 32, 64),
                      max_new_tokens=action_tokens, pad_id=max(tok.pad_token_id or 0, 0))
    clock = metrics_log.CompileClock()
    made: list[Any] = []
    real_caches = episode_cache.EpisodeCaches

    def make_caches(*args, **kwargs):
        caches = real_caches(*args, **kwargs)
        caches.turn = timer_for(caches.turn)
        made.append(caches)
        return caches

    timers: list[TurnTimer] = []

    def timer_for(fn):
        timers.append(TurnTimer(fn, clock, "cached" if kv_reuse else "re-prefill"))
        return timers[-1]

    if not kv_reuse:
        sampler.generate = timer_for(sampler.generate)
    episode_cache.EpisodeCaches = make_caches
    tasks = [Task(task_id=f"reply/{i}", path="", family="bench", meta={}) for i in range(batch)]
    try:
        start = time.perf_counter()
        eps = episodes.collect_episodes(
            sampler, params, ReplyPool(tok, reply_tokens), tok, tasks, max_turns=turns,
            max_context=max_context, max_action_tokens=action_tokens, greedy=True,
            rng=jax.random.key(0), kv_reuse=kv_reuse)
        wall = time.perf_counter() - start - compile_seconds(clock)
    finally:
        episode_cache.EpisodeCaches = real_caches
    timer = timers[0]
    sampled = [sum(int(e.loss_mask[(e.turn_end.cumsum() - e.turn_end) == t].sum())
                   for e in eps) for t in range(turns)]
    out = {"turn_s": timer.turn_s, "compile_s": compile_seconds(clock), "wall_s": wall,
           "sampled_per_turn": sampled, "tokens": [e.tokens for e in eps],
           "turns": [e.turns for e in eps], "overflow": sum(e.info["overflow"] for e in eps),
           "length": float(np.mean([e.length for e in eps]))}
    if made:
        stats = made[0].stats
        out["slot_use"] = stats.prefill_tokens / max(stats.prefill_slots, 1)
        out["relayouts"] = dict(grows=stats.grows, shrinks=stats.shrinks,
                                compactions=stats.compactions)
    return out


def compare(preset: str, batch: int, turns: list[int], reply_tokens: int, action_tokens: int,
            max_context: int) -> dict:
    """Both paths on the same random ``preset`` model; the readings at each of ``turns``."""
    tok = _tokenizer()
    cfg = config_lib.get_preset(preset, dtype="float32")
    params = lm.init_params(cfg, jax.random.key(0))
    kw = dict(batch=batch, turns=max(turns), reply_tokens=reply_tokens,
              action_tokens=action_tokens, max_context=max_context)
    cached = run_path(True, cfg, params, tok, **kw)
    reprefill = run_path(False, cfg, params, tok, **kw)
    if cached["turns"] != reprefill["turns"] or min(cached["turns"]) < max(turns):
        raise RuntimeError(f"episodes ended early (turns {cached['turns']}, overflow "
                           f"{cached['overflow']}); raise --max_context.")
    same = float(np.mean([np.array_equal(a, b)
                          for a, b in zip(cached["tokens"], reprefill["tokens"])]))
    rows = []
    for k in turns:
        c, r = sum(cached["turn_s"][:k]), sum(reprefill["turn_s"][:k])
        n = sum(cached["sampled_per_turn"][:k])
        rows.append({"turns": k, "cached_s": c, "reprefill_s": r, "speedup": r / c,
                     "cached_tok_s": n / c, "reprefill_tok_s": n / r})
    t2 = cached["turn_s"][1] if len(cached["turn_s"]) > 1 else float("nan")
    result = {
        "preset": preset, "batch": batch, "reply_tokens": reply_tokens,
        "action_tokens": action_tokens, "rows": rows, "same_tokens": same,
        "turn_cost": {k: cached["turn_s"][k - 1] / t2 for k in turns if k >= 2},
        "reprefill_turn_cost": {k: reprefill["turn_s"][k - 1] / reprefill["turn_s"][1]
                                for k in turns if k >= 2},
        "wall_s": {"cached": cached["wall_s"], "reprefill": reprefill["wall_s"]},
        "compile_s": {"cached": cached["compile_s"], "reprefill": reprefill["compile_s"]},
        "slot_use": cached["slot_use"], "relayouts": cached["relayouts"],
        "mean_length": cached["length"],
        "turn_s": {"cached": cached["turn_s"], "reprefill": reprefill["turn_s"]},
    }
    for row in rows:
        print(f"{preset} B={batch} {row['turns']:>3} turns | cached {row['cached_s']:8.2f} s "
              f"({row['cached_tok_s']:7.1f} tok/s) | re-prefill {row['reprefill_s']:8.2f} s "
              f"({row['reprefill_tok_s']:7.1f} tok/s) | speedup {row['speedup']:.2f}x",
              flush=True)
    costs = ", ".join(f"turn {k}: {v:.2f}x" for k, v in result["turn_cost"].items())
    print(f"cached turn cost vs turn 2: {costs} | whole rollout wall (compiles excluded) cached "
          f"{cached['wall_s']:.1f} s, re-prefill {reprefill['wall_s']:.1f} s | compiles "
          f"{cached['compile_s']:.1f} s / {reprefill['compile_s']:.1f} s | prefill slot use "
          f"{cached['slot_use']:.1%} | same tokens {same:.0%}", flush=True)
    return result


def markdown_table(r: dict, note: str = "") -> str:
    """The section appended to docs/benchmarks-history.md."""
    lines = [f"\n### Multi-turn rollouts: KV cache kept across turns vs re-prefill "
             f"(`benchmarks/multiturn_cache.py`) {note}".rstrip(), "",
             f"Machine: {machine_line()}. {r['preset']} shapes, random weights, fp32, greedy, "
             f"B={r['batch']}, replies of ~{r['reply_tokens']} tokens, actions of "
             f"{r['action_tokens']} tokens; sampler seconds per path with compiles excluded.", "",
             "| turns | cached s | re-prefill s | speedup | cached tok/s | re-prefill tok/s |",
             "|---|---|---|---|---|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['turns']} | {row['cached_s']:.2f} | {row['reprefill_s']:.2f} | "
                     f"{row['speedup']:.2f}x | {row['cached_tok_s']:.1f} | "
                     f"{row['reprefill_tok_s']:.1f} |")
    costs = ", ".join(f"turn {k} {v:.2f}x" for k, v in r["turn_cost"].items())
    lines += ["", f"Cached turn cost relative to turn 2: {costs}. Same tokens on both paths: "
              f"{r['same_tokens']:.0%} of episodes."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--turns", default="4,12,24")
    parser.add_argument("--reply_tokens", type=int, default=80)
    parser.add_argument("--action_tokens", type=int, default=16)
    parser.add_argument("--max_context", type=int, default=4096)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny preset, B=4, 2/4/6 turns, 24-token replies: seconds")
    parser.add_argument("--results", default=DEFAULT_RESULTS,
                        help="Markdown file to append to ('' to only print)")
    parser.add_argument("--note", default="", help="text added to the table's heading")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.batch, args.turns = "tiny", 4, "2,4,6"
        args.reply_tokens, args.action_tokens, args.max_context = 24, 8, 1024
    result = compare(args.preset, args.batch, [int(t) for t in args.turns.split(",")],
                     args.reply_tokens, args.action_tokens, args.max_context)
    if args.results:
        with open(args.results, "a", encoding="utf-8") as f:
            f.write(markdown_table(result, args.note))
    return result


if __name__ == "__main__":
    main()
