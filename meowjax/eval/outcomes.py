"""Summaries of played episodes, read from the trajectory record's fields
(``meowjax.rollout.trajectory.Trajectory``: task_id, won, success_turn, num_turns,
invalid_count)."""

from __future__ import annotations

from typing import Any, Sequence

from meowjax.eval import stats


def success_summary(trajs: Sequence[Any]) -> dict[str, Any]:
    """Success rate with its 95% Wilson interval, mean turns, invalid-action rate, the lost
    episodes that ended in a loop of one or two repeated actions (``lost_in_cycle``,
    ``stats.ends_in_cycle``; records without ``actions`` count as not), and each game's outcome
    (``per_game``: task_id -> won, one greedy episode per game) so that two evaluations of the
    same games can be compared pairwise."""
    n = len(trajs)
    wins = int(sum(t.won for t in trajs))
    low, high = stats.wilson_interval(wins, n)
    turns = sum(t.num_turns for t in trajs)
    return {"success": wins / max(1, n), "ci_low": low, "ci_high": high, "wins": wins, "n": n,
            "mean_turns": turns / max(1, n),
            "invalid_rate": sum(t.invalid_count for t in trajs) / max(1, turns),
            "lost_in_cycle": sum(not t.won and stats.ends_in_cycle(getattr(t, "actions", ()))
                                 for t in trajs),
            "per_game": {str(t.task_id): bool(t.won) for t in trajs}}


def by_task(trajs: Sequence[Any]) -> dict[str, list[dict[str, Any]]]:
    """task_id -> [{won, success_turn}] per episode: what ``passk.estimate_pass_at_k_t`` reads."""
    out: dict[str, list[dict[str, Any]]] = {}
    for t in trajs:
        out.setdefault(t.task_id, []).append({"won": t.won, "success_turn": t.success_turn})
    return out


