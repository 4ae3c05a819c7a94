"""Evaluation during and after training: success on held-out games, Pass@(K,T)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from meowjax.envs.base import Task
from meowjax.eval import passk, stats
from meowjax.rollout import score_episodes


def play(score_fn: Callable, pool, builder, tasks: Sequence[Task], *, samples: int, max_turns: int,
         batch_rows: int, length_buckets, rng: np.random.Generator, greedy: bool):
    """All episodes of ``tasks`` x ``samples``, in chunks that fit one rollout batch."""
    eps = []
    per_chunk = max(1, batch_rows // samples)
    for start in range(0, len(tasks), per_chunk):
        chunk = list(tasks[start:start + per_chunk])
        eps += score_episodes.collect(
            score_fn, pool, builder, chunk, group_size=samples,
            max_turns=[max_turns] * (len(chunk) * samples), batch_rows=batch_rows,
            length_buckets=length_buckets, rng=rng, greedy=greedy)
    return eps


def success_summary(eps) -> dict[str, Any]:
    """Success rate with its 95% Wilson interval, mean turns, invalid-action rate."""
    n = len(eps)
    wins = sum(e.won for e in eps)
    low, high = stats.wilson_interval(wins, n)
    turns = [len(e.turns) for e in eps]
    invalid = sum(t.invalid for e in eps for t in e.turns) / max(1, sum(turns))
    return {"success": wins / max(1, n), "ci_low": low, "ci_high": high, "wins": wins, "n": n,
            "mean_turns": float(np.mean(turns)) if turns else 0.0, "invalid_rate": invalid}


def pass_at_k_t(eps, ks: Sequence[int], ts: Sequence[int]):
    """Pass@(K,T) from one run at T_max per task (the prompt never states the budget)."""
    by_task: dict[str, list[dict]] = {}
    for e in eps:
        by_task.setdefault(e.task_id, []).append({"won": e.won, "success_turn": e.success_turn})
    return passk.estimate_pass_at_k_t(by_task, ks, ts, mode="single_run")
