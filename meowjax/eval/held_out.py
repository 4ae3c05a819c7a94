"""Evaluations of given params by an agent's evaluation player (``agents.base.Player``): the
held-out sets before and after RL, the learning curve's points, and the studies' start and
end policies (greedy success, the forced-action probe, Pass@(K,T) grids).

    found = held_out_sets(agent, params, pool, sets, c, "final evaluation", sampled=True)
    point = curve_point(agent, params, pool, sets["curve"], c, iteration=10)

``agent`` is anything with the player's ``play_tasks`` (an ``agents.base.Agent``, or the
trainer, whose ``play`` is its agent's); ``c`` the run's config.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import ml_collections
import numpy as np
from absl import logging

from meowjax.envs.base import EnvError, Task
from meowjax.envs.game_sets import HELD_OUT, set_difficulty
from meowjax.eval import outcomes, passk, traces
from meowjax.runtime import console


def sampled_tasks(tasks: Sequence[Any], num: int) -> list[Any]:
    """The games whose sampled episodes give Pass@(K,T) and the diagnostics: the first ``num``
    of the sampled split (``eval.sampled_games``; 0 = all). The greedy success is measured on
    all of them either way; sampling fewer keeps the evaluation's cost down where the greedy
    interval needs many games."""
    if num < 0:
        raise ValueError(f"eval.sampled_games={num} must be >= 0 (0 = every game of the split).")
    if num > len(tasks):
        raise ValueError(f"eval.sampled_games={num}, but the sampled split holds {len(tasks)} "
                         "games: lower it, or 0 for all of them.")
    return list(tasks[:num] if num else tasks)


def task_types(tasks: Sequence[Task]) -> dict[str, str] | None:
    """task_id -> task type where every game has one (ALFWorld's six), else None: the report's
    success by task type reads it."""
    types = {str(t.task_id): t.meta.get("task_type") for t in tasks}
    return types if all(types.values()) else None


def held_out_sets(agent, params, pool, sets: dict[str, list[Task]],
                  c: ml_collections.ConfigDict, title: str, *, sampled: bool) -> dict[str, Any]:
    """Greedy success on every held-out set of ``sets`` (``HELD_OUT``); with ``sampled``,
    Pass@(K,T) and per-turn diagnostics from sampled episodes of ``eval.sampled_split``.
    ``title`` heads its console line."""
    t0 = time.time()
    out: dict[str, Any] = {}
    kw = dict(budget=c.turns.eval_max_turns, seed=c.seed)
    for split in HELD_OUT:
        tasks = sets.get(split)
        if not tasks:
            continue
        out[split] = outcomes.success_summary(agent.play_tasks(params, pool, tasks, samples=1,
                                                              greedy=True, desc=split, **kw))
        types = task_types(tasks)
        if types:
            out[split]["task_type"] = types
        if sampled and split == c.eval.sampled_split and c.eval.num_samples > 0:
            subset = sampled_tasks(tasks, c.eval.sampled_games)
            trajs = agent.play_tasks(params, pool, subset, samples=c.eval.num_samples,
                                     greedy=False, desc=f"{split} sampled", **kw)
            out["pass_at_k_t"] = passk.grid_json(outcomes.by_task(trajs), c.eval.pass_ks,
                                                 c.eval.pass_ts, mode="single_run")
            diag = turn_diagnostics(c, subset, trajs)
            if diag is not None:
                out["diagnostics"] = diag
    console.info("%s", console.eval_line(
        title, {f"{k} {set_difficulty(c, k)}": out[k] for k in HELD_OUT if k in out},
        time.time() - t0, pass_at_k_t=out.get("pass_at_k_t")))
    return out


def curve_point(agent, params, pool, tasks: Sequence[Task], c: ml_collections.ConfigDict,
                iteration: int) -> dict[str, Any]:
    """One point of the held-out learning curve: greedy success on the fixed "curve" games
    (``games.num_curve``) at RL iteration ``iteration``. The games and the host randomness
    are the same at every point, so two points differ only by the policy."""
    found = outcomes.success_summary(agent.play_tasks(
        params, pool, tasks, samples=1, greedy=True, desc="curve",
        budget=c.turns.eval_max_turns, seed=c.seed))
    return {"iteration": int(iteration),
            **{k: found[k] for k in ("wins", "n", "success", "ci_low", "ci_high")}}


def turn_diagnostics(c: ml_collections.ConfigDict, tasks, trajs) -> dict[str, Any] | None:
    """Per-turn diagnostics of sampled evaluation episodes (``eval.traces``); None, with a
    warning, for a family without expert plans to replay against."""
    budget = c.turns.eval_max_turns
    try:
        found = traces.replay_traces(c.env.family, tasks, trajs, budget)
    except EnvError as e:
        logging.warning("no per-turn diagnostics: %s", e)
        return None
    # JSON-able, NaN (no episode to measure) as None: evaluations compare equal on resume.
    nan_none = lambda x: None if isinstance(x, float) and x != x else x  # noqa: E731
    return {k: ([nan_none(x) for x in v.tolist()] if isinstance(v, np.ndarray)
                else nan_none(v)) for k, v in traces.diagnostics(found, budget).items()}


# -- the studies: start and end policies of one run ---------------------------------------------
def greedy_summary(agent, params, pool, tasks: Sequence[Task], *, budget: int,
                   seed: int) -> dict[str, Any]:
    """Greedy success on ``tasks`` with each game's outcome (``outcomes.success_summary``)."""
    return outcomes.success_summary(agent.play_tasks(params, pool, tasks, samples=1,
                                                     budget=budget, greedy=True, seed=seed,
                                                     desc=f"greedy T={budget}"))


def forced_action_probe(agent, params, pool, tasks: Sequence[Task], *, turn: int,
                        command: str, budget: int, seed: int) -> dict[str, Any]:
    """Greedy success when every episode plays ``command`` at turn ``turn`` (0-based) instead
    of its own choice, then goes on greedily: how the policy recovers from an action it did not
    choose, on every game alike (no selection by the policy's own errors). The agent's
    forced action is reset after."""
    agent.set_forced_action((int(turn), str(command)))
    try:
        out = greedy_summary(agent, params, pool, tasks, budget=budget, seed=seed)
    finally:
        agent.set_forced_action(None)
    return {"turn": int(turn), "command": command, **out}


def passkt_grid(agent, params, pool, tasks: Sequence[Task], *, ks: Sequence[int],
                ts: Sequence[int], samples: int, stated: bool, seed: int) -> dict[str, Any]:
    """Pass@(K,T) (``passk.grid_json``: means, intervals, per-task values) in the mode that
    matches the prompt: not stating the budget, one sampled run per episode at max(ts) read at
    every T ("single_run"); stating it, a separate run at every T whose prompts state T
    ("per_budget"). The agent's prompts are set accordingly and left as they were after."""
    if samples < max(ks):
        raise ValueError(f"samples={samples} < max(ks)={max(ks)}: Pass@K needs at least K "
                         "episodes per task.")
    before = bool(agent.c.policy.state_budget)
    agent.set_state_budget(stated)
    try:
        if not stated:
            eps = agent.play_tasks(params, pool, tasks, samples=samples, budget=max(ts),
                                   greedy=False, seed=seed, desc=f"sampled T={max(ts)}")
            return passk.grid_json(outcomes.by_task(eps), ks, ts, mode="single_run")
        by_budget = {}
        for stream, t in enumerate(sorted(set(int(t) for t in ts))):
            eps = agent.play_tasks(params, pool, tasks, samples=samples, budget=t, greedy=False,
                                   seed=seed, stream=stream, desc=f"sampled T={t}, stated")
            by_budget[t] = outcomes.by_task(eps)
        return passk.grid_json(by_budget, ks, ts, mode="per_budget")
    finally:
        agent.set_state_budget(before)
