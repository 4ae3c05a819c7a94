"""Per-turn traces of played episodes and their diagnostics (host numpy; envs, no JAX).

A trace is one episode's per-turn flags, found by replaying its actions in a fresh environment
wrapped in ``ProcessRewardEnv`` (games are deterministic, so the replay reaches the same states;
episodes whose replay disagrees on the outcome are counted): was each action invalid, did it
make progress (the expert's remaining plan got shorter). ``diagnostics`` summarises traces:
first-action accuracy, validity, recovery after an invalid or useless action, success by turn
(``stats``). Both the trainer's evaluations and the evaluate CLI use them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from meowjax.envs import process_reward
from meowjax.envs.base import Task
from meowjax.eval import stats


def replay_traces(family: str, tasks: Sequence[Task], played: Sequence[Any],
                  budget: int) -> list[dict[str, Any]]:
    """Per-turn flags of played episodes, by replaying their actions in a ProcessRewardEnv.

    Returns traces {task_id, won, success_turn, turns: [{invalid, progress, process_reward}],
    plan_done (share of the expert plan completed), replay_agrees}.
    """
    by_id = {t.task_id: t for t in tasks}
    env = process_reward.ProcessRewardEnv(inner_family=family, reward_mode="sparse")
    traces = []
    try:
        for traj in sorted(played, key=lambda p: p.task_id):
            reset = env.reset(by_id[traj.task_id], budget)
            start, turns, won = reset.info["plan_remaining"], [], False
            for a in traj.actions:
                res = env.step(a)
                turns.append({"invalid": bool(res.info.get("invalid", False)),
                              "progress": bool(res.info.get("progress", False)),
                              "process_reward": float(res.info.get("process_reward", 0.0))})
                won = won or res.won
                if res.done:
                    break
            done = sum(t["process_reward"] for t in turns)
            traces.append({"task_id": traj.task_id, "won": bool(traj.won),
                           "success_turn": traj.success_turn, "turns": turns,
                           "plan_done": done if start else float(won),
                           "replay_agrees": won == bool(traj.won)})
    finally:
        env.close()
    return traces


def diagnostics(traces: Sequence[dict[str, Any]], t_max: int) -> dict[str, Any]:
    """Per-turn numbers of sampled episodes (see ``stats``)."""
    n_turns = sum(len(t["turns"]) for t in traces)
    rec_inv, n_inv = stats.error_recovery_rate(traces, "invalid")
    rec_np, n_np = stats.error_recovery_rate(traces, "no_progress")
    return {
        "episodes": len(traces), "turns": n_turns,
        "validity": stats.action_validity_rate(traces) if n_turns else float("nan"),
        "progress_rate": (sum(x["progress"] for t in traces for x in t["turns"]) / n_turns
                          if n_turns else float("nan")),
        "recovery_invalid": rec_inv, "episodes_with_invalid": n_inv,
        "recovery_no_progress": rec_np, "episodes_with_no_progress": n_np,
        "first_action_progress": (float(np.mean([bool(t["turns"]) and t["turns"][0]["progress"]
                                                  for t in traces])) if traces else float("nan")),
        "plan_done": float(np.mean([t["plan_done"] for t in traces])),
        "replay_disagreements": int(sum(not t["replay_agrees"] for t in traces)),
        "success_by_turn": stats.cumulative_success_curve(traces, t_max),
        "validity_by_turn": stats.validity_by_turn(traces, t_max),
    }
