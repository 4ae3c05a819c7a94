"""Evaluate a checkpoint (or an imported model) on a named game set and write a report.

    policy = load_policy(config, workdir)               # agent + params of the latest step
    tasks = named_tasks(config, "textworld:w4-o6-q8:test", num_games=20)
    result = evaluate_policy(policy, tasks, ks=(1, 2, 4), ts=(4, 8, 12), samples=4,
                             mode="single_run")
    write_eval_report(result, "<workdir>/eval_w4-o6-q8_test")

What is measured (per game set):
  * greedy success at T_max (one episode per game; 95% Wilson interval);
  * Pass@(K,T) from ``samples`` sampled episodes per game, in one of two modes (the report says
    which): "single_run" plays once at T_max = max(ts) and reads success under T ≤ T_max from the
    winning turn (valid because no prompt of ours states the budget); "per_budget" plays each T;
  * per-turn diagnostics of the sampled episodes: action validity (pooled, and by turn index),
    error recovery (won despite an invalid / a useless action), success vs turn index, and the
    share of the expert plan completed (process supervision, ``envs.process_reward``).

Per-turn flags come from replaying each episode's actions in a fresh environment wrapped in
``ProcessRewardEnv`` (games are deterministic, so the replay reaches the same states; episodes
whose replay disagrees on the outcome are counted in the report).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging

from meowjax.agents.base import Agent
from meowjax.agents.registry import agent_class
from meowjax.envs import game_sets, registry
from meowjax.envs.base import Task
from meowjax.envs.pool import EnvPool
from meowjax.eval import outcomes, passk, report
from meowjax.eval.traces import diagnostics, replay_traces
from meowjax.rollout.trajectory import Trajectory
from meowjax.runtime import plugins

MODES = passk.MODES


# -- what to evaluate ----------------------------------------------------------------------------
def named_tasks(c: ml_collections.ConfigDict, name: str, num_games: int | None = None,
                alfworld_root: str = "") -> list[Task]:
    """Tasks of a named game set.

    Names:
      ``eval`` / ``eval_hard``: the config's held-out sets (training difficulty / harder), for
        every env family (``envs.game_sets.game_sets``);
      ``<family>:<set>``: a set the family's record names (``Family.named_sets``), e.g.
        ``textworld:w4-o6-q8:test`` (custom TextWorld games of that difficulty and split,
        generated into ``games.cache_dir`` on first use) or
        ``alfworld:valid_unseen[:pick_and_place_simple,look_at_obj_in_light]`` (released ALFWorld
        games of a split under ``alfworld_root``, optionally of some task types).
    ``num_games`` caps the number of games (None: the config's count / all).
    """
    if name in ("eval", "eval_hard"):          # any family: the trainer's own held-out sets
        tasks = game_sets.game_sets(c)[name]
        return tasks[:num_games] if num_games else tasks
    family_name, _, rest = name.partition(":")
    try:
        family = registry.get_family(family_name)
    except registry.UnknownFamilyError:
        family = None
    if family is None or family.named_sets is None or not rest:
        named = [f for f in registry.family_names() if registry.get_family(f).named_sets]
        raise ValueError(f"Unknown game set {name!r}; use eval | eval_hard | <family>:<set> of "
                         f"a family with named sets ({', '.join(named)}), e.g. "
                         "textworld:<w-o-q>:<split> | alfworld:<split>[:<task types>].")
    return family.named_sets(c, rest, num_games, alfworld_root)


# -- the policy: an agent and its params -------------------------------------------------------
@dataclasses.dataclass
class Policy:
    """An agent (``agents.base.Agent``: tokenizer, model, interface) and the params it plays."""

    agent: Agent
    params: Any
    source: str         # "checkpoint <dir> step N (phase)" or "imported <folder>"
    step: int = 0       # training step of the params (TensorBoard x-axis of the eval scalars)


def with_imported_model(c: ml_collections.ConfigDict, **model: Any) -> ml_collections.ConfigDict:
    """A copy of ``c`` whose model fields are ``model`` (an imported checkpoint), played through
    the free-text interface (``policy.window`` / ``history`` unset: they are the scoring
    interface's)."""
    c = ml_collections.ConfigDict(c.to_dict())
    c.model.update(model)
    c.policy.update(dict(interface="generate", window=None, history=False))
    return c


def load_policy(c: ml_collections.ConfigDict, workdir: str) -> Policy:
    """The agent of ``c`` with the policy of the newest checkpoint under ``workdir``.

    ``c`` must be the run's own model preset and interface, so that the restored params match
    (only the policy is read: the estimator, optimizer and critic may differ); the game-text
    tokenizer is read from ``workdir/tokenizer``. No training data is built.
    """
    plugins.import_plugins(c.imports)   # the run's registered family, interface
    agent = agent_class(c.policy.interface)(c, workdir)
    params, meta = agent.restore_params()
    return Policy(agent, params,
                  f"checkpoint {workdir} (index {meta['ckpt_index']}, phase {meta['phase']}, "
                  f"RL iteration {meta['iteration']})",
                  step=int(meta["sft_step"]) + int(meta["iteration"]))


def load_imported_policy(c: ml_collections.ConfigDict, workdir: str, *, hf_path: str = "",
                         smollm2: bool = False) -> Policy:
    """A Hugging Face folder (or the bundled SmolLM2-135M GGUF) with the free-text interface."""
    if bool(hf_path) == bool(smollm2):
        raise ValueError("Give exactly one of hf_path or smollm2=True.")
    model = dict(init="smollm2", hf_path="") if smollm2 else dict(init="hf", hf_path=hf_path)
    agent = agent_class("generate")(with_imported_model(c, **model), workdir)
    return Policy(agent, agent.init_params(jax.random.key(0)),
                  f"imported {'SmolLM2-135M-Instruct (GGUF)' if smollm2 else hf_path}")


# -- playing and per-turn traces ------------------------------------------------------------
def play_tasks(policy: Policy, pool, tasks: Sequence[Task], *, samples: int, budget: int,
               greedy: bool, seed: int, stream: int = 0) -> list[Trajectory]:
    """``samples`` episodes per task at turn budget ``budget``: the agent's evaluation player
    (``agents.base.Player.play_tasks``), the one its trainer uses too, so a checkpoint evaluated
    here and by the trainer at the same seed plays the same episodes."""
    return policy.agent.play_tasks(policy.params, pool, tasks, samples=samples, budget=budget,
                                   greedy=greedy, seed=seed, stream=stream,
                                   desc=f"{'greedy' if greedy else 'sampled'} T={budget}")


@dataclasses.dataclass
class EvalResult:
    """Everything the report shows (also JSON-able via ``report``)."""

    name: str
    source: str
    mode: str
    greedy: dict[str, Any]
    pass_kt: passk.PassKTResult
    traces: list[dict[str, Any]]
    t_max: int
    samples: int
    n_tasks: int


def evaluate_policy(policy: Policy, tasks: Sequence[Task], *, ks: Sequence[int], ts: Sequence[int],
                   samples: int, mode: str = "single_run", name: str = "eval",
                   seed: int = 0) -> EvalResult:
    """Greedy success, Pass@(K,T) in ``mode`` and per-turn diagnostics on ``tasks``."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose one of {MODES}.")
    if samples < max(ks):
        raise ValueError(f"samples={samples} < max(ks)={max(ks)}: Pass@K needs at least K "
                         "episodes per task; raise --samples or drop the larger K.")
    if not tasks:
        raise ValueError(f"game set {name!r} has no tasks.")
    c = policy.agent.c
    t_max = int(max(ts))
    pool = EnvPool(game_sets.env_spec(c, admissible=policy.agent.needs_admissible),
                   num_workers=c.env.num_workers, step_timeout_s=c.env.step_timeout_s)
    try:
        greedy = play_tasks(policy, pool, tasks, samples=1, budget=t_max, greedy=True, seed=seed)
        if mode == "single_run":
            played = play_tasks(policy, pool, tasks, samples=samples, budget=t_max, greedy=False,
                                seed=seed)
            res = passk.estimate_pass_at_k_t(outcomes.by_task(played), ks, ts,
                                             mode="single_run", seed=seed)
        else:
            by_budget: dict[int, dict[str, list]] = {}
            played = []
            for stream, t in enumerate(sorted(set(int(t) for t in ts))):
                eps = play_tasks(policy, pool, tasks, samples=samples, budget=t, greedy=False,
                                 seed=seed, stream=stream)
                by_budget[t] = outcomes.by_task(eps)
                if t == t_max:
                    played = eps
            res = passk.estimate_pass_at_k_t(by_budget, ks, ts, mode="per_budget", seed=seed)
    finally:
        pool.close()
    traces = replay_traces(c.env.family, tasks, played, t_max)
    logging.info("evaluated %s: greedy success %.3f, Pass@(1,%d) %.3f", name,
                 np.mean([t.won for t in greedy]), t_max, res.mean_KT[0, -1])
    return EvalResult(name, policy.source, mode, outcomes.success_summary(greedy), res, traces, t_max,
                      samples, len(tasks))


# -- diagnostics and the report -------------------------------------------------------------
def report_sections(result: EvalResult) -> list[Any]:
    """The report of one evaluation: success, Pass@(K,T), per-turn diagnostics."""
    g = result.greedy
    d = diagnostics(result.traces, result.t_max)
    fmt = lambda v: "n/a" if v != v else f"{v:.3f}"  # noqa: E731 (NaN -> n/a)
    mode_text = {"single_run": "single_run (one sampled run per episode at T_max; success under "
                               "T read from the winning turn; valid because the prompt never "
                               "states the budget)",
                 "per_budget": "per_budget (a separate sampled run at every T)"}[result.mode]
    sampled_wins = sum(t["won"] for t in result.traces)
    loops = (f" {g['lost_in_cycle']} of its {g['n'] - g['wins']} lost games end in a loop of "
             "one or two repeated actions." if "lost_in_cycle" in g else "")
    sections = [
        report.TextSection("Setup", (
            f"Agent: {result.source}. Game set `{result.name}`: {result.n_tasks} games. "
            f"Greedy: one episode per game at T_max = {result.t_max}.{loops} Sampled: "
            f"{result.samples} episodes per game. Pass@(K,T) mode: {mode_text}.")),
        report.SuccessTable("Success at T_max (95% Wilson intervals)", [
            report.SuccessRow(f"{result.name}: greedy", g["wins"], g["n"]),
            report.SuccessRow(f"{result.name}: sampled", sampled_wins, len(result.traces))]),
        report.PassKTSection(f"Pass@(K,T) on {result.name}", result.pass_kt),
        report.TextSection("Per-turn diagnostics (sampled episodes)", report.markdown_table(
            ["quantity", "value", "over"], [
                ["action validity (valid turns / turns)", fmt(d["validity"]),
                 f"{d['turns']} turns"],
                ["progress turns (expert plan got shorter)", fmt(d["progress_rate"]),
                 f"{d['turns']} turns"],
                ["recovery after an invalid action (won / episodes with one)",
                 fmt(d["recovery_invalid"]), f"{d['episodes_with_invalid']} episodes"],
                ["recovery after a useless action (won / episodes with one)",
                 fmt(d["recovery_no_progress"]), f"{d['episodes_with_no_progress']} episodes"],
                ["share of the expert plan completed", fmt(d["plan_done"]),
                 f"{d['episodes']} episodes"],
                ["replays disagreeing on the outcome", str(d["replay_disagreements"]),
                 f"{d['episodes']} episodes"]])),
        report.BudgetCurves("Success and action validity vs turn index", {
            "won within t turns": (list(range(1, result.t_max + 1)),
                                   d["success_by_turn"].tolist(), None, None),
            "valid action at turn t": _finite_curve(d["validity_by_turn"])},
            metric="rate"),
    ]
    return sections


def _finite_curve(values_T: np.ndarray):
    idx = [i for i, v in enumerate(values_T) if np.isfinite(v)] or [0]
    return ([i + 1 for i in idx], [float(np.nan_to_num(values_T[i])) for i in idx], None, None)


def scalars(result: EvalResult) -> dict[str, float]:
    """Flat numbers of one evaluation (for TensorBoard and diagnostics.json)."""
    d = diagnostics(result.traces, result.t_max)
    out = {"eval/greedy_success": float(result.greedy["success"]),
           "eval/sampled_success": float(np.mean([t["won"] for t in result.traces])),
           "eval/action_validity": d["validity"], "eval/progress_rate": d["progress_rate"],
           "eval/recovery_invalid": d["recovery_invalid"],
           "eval/recovery_no_progress": d["recovery_no_progress"],
           "eval/plan_done": d["plan_done"]}
    res = result.pass_kt
    for i, k in enumerate(res.ks):
        for j, t in enumerate(res.ts):
            out[f"eval/pass_at_{k}_{t}"] = float(res.mean_KT[i, j])
    return out


def write_eval_report(result: EvalResult, out_dir: str, step: int = 0) -> str:
    """report.md, results.json, plots/, diagnostics.json (numbers + per-episode traces) and
    TensorBoard scalars (``out_dir/tb``) under ``out_dir``; returns the report path."""
    from meowjax.runtime import metrics_log
    path = report.write_report(out_dir, f"meowjax evaluation: {result.name}",
                               report_sections(result))
    d = diagnostics(result.traces, result.t_max)
    numbers = {"name": result.name, "source": result.source, "mode": result.mode,
               "t_max": result.t_max, "samples": result.samples, "n_tasks": result.n_tasks,
               "greedy": result.greedy, "pass_at_k_t": result.pass_kt.to_json(),
               "diagnostics": d, "traces": result.traces}
    with open(os.path.join(out_dir, "diagnostics.json"), "w", encoding="utf-8") as f:
        json.dump(report._jsonable(numbers), f, indent=1)
    writer = metrics_log.MetricsWriter(out_dir)
    try:
        writer.write(step, {k: v for k, v in scalars(result).items() if np.isfinite(v)}, log=False)
    finally:
        writer.close()
    return str(path)


def out_dir_name(name: str) -> str:
    """``eval_<name>`` with the set name made filesystem-safe."""
    return "eval_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
