"""Evaluation during training: greedy success on the held-out splits, Pass@(K,T) and per-turn
diagnostics from sampled episodes, and the one evaluation player that the evaluate CLI uses too.

``Evaluation`` is a mixin of ``loop.AgentTrainer``: it reads the trainer's config (``c``), game
sets (``sets``), rollout batch (``batch_rows``), metrics writer and its ``play`` hook.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import jax
import numpy as np
from absl import logging

from meowjax.envs.base import EnvError
from meowjax.eval import outcomes, passk, traces
from meowjax.rollout import trajectory
from meowjax.runtime import console, multihost
from meowjax.trainers import data
from meowjax.trainers.rng import EVAL_RNG



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


class Evaluation:
    """The evaluation methods of a trainer (see the module doc)."""

    def evaluate(self, params, pool, title: str, *, sampled: bool) -> dict[str, Any]:
        """Greedy success on every held-out set (``data.HELD_OUT``); Pass@(K,T) and per-turn
        diagnostics from sampled episodes of ``eval.sampled_split``. ``title`` heads its console
        line."""
        c = self.c
        t0 = time.time()
        out: dict[str, Any] = {}
        kw = dict(budget=c.turns.eval_max_turns, seed=c.seed)
        for split in data.HELD_OUT:
            tasks = self.sets.get(split)
            if not tasks:
                continue
            out[split] = outcomes.success_summary(self.play_tasks(params, pool, tasks, samples=1,
                                                         greedy=True, desc=split, **kw))
            if sampled and split == c.eval.sampled_split and c.eval.num_samples > 0:
                subset = sampled_tasks(tasks, c.eval.sampled_games)
                trajs = self.play_tasks(params, pool, subset, samples=c.eval.num_samples,
                                        greedy=False, desc=f"{split} sampled", **kw)
                out["pass_at_k_t"] = passk.grid_json(outcomes.by_task(trajs), c.eval.pass_ks,
                                                     c.eval.pass_ts, mode="single_run")
                diag = self.turn_diagnostics(subset, trajs)
                if diag is not None:
                    out["diagnostics"] = diag
        console.info("%s", console.eval_line(
            title, {f"{k} {data.set_difficulty(c, k)}": out[k] for k in data.HELD_OUT if k in out},
            time.time() - t0, pass_at_k_t=out.get("pass_at_k_t")))
        return out

    def curve_point(self, params, pool, iteration: int) -> dict[str, Any]:
        """One point of the held-out learning curve: greedy success on the fixed "curve" games
        (``games.num_curve``) at RL iteration ``iteration``. The games and the host randomness
        are the same at every point, so two points differ only by the policy."""
        c = self.c
        found = outcomes.success_summary(self.play_tasks(
            params, pool, self.sets["curve"], samples=1, greedy=True, desc="curve",
            budget=c.turns.eval_max_turns, seed=c.seed))
        return {"iteration": int(iteration),
                **{k: found[k] for k in ("wins", "n", "success", "ci_low", "ci_high")}}

    def turn_diagnostics(self, tasks, trajs) -> dict[str, Any] | None:
        """Per-turn diagnostics of sampled evaluation episodes (``eval.traces``); None, with a
        warning, for a family without expert plans to replay against."""
        budget = self.c.turns.eval_max_turns
        try:
            found = traces.replay_traces(self.c.env.family, tasks, trajs, budget)
        except EnvError as e:
            logging.warning("no per-turn diagnostics: %s", e)
            return None
        # JSON-able, NaN (no episode to measure) as None: evaluations compare equal on resume.
        nan_none = lambda x: None if isinstance(x, float) and x != x else x  # noqa: E731
        return {k: ([nan_none(x) for x in v.tolist()] if isinstance(v, np.ndarray)
                    else nan_none(v)) for k, v in traces.diagnostics(found, budget).items()}

    @property
    def eval_temperature(self) -> float:
        """Sampled evaluation episodes (Pass@(K,T)) run at ``policy.eval_temperature``, or at
        the training temperature when it is unset."""
        t = self.c.policy.eval_temperature
        return self.c.policy.temperature if t is None else t

    def play_tasks(self, params, pool, tasks: Sequence[Any], *, samples: int, budget: int,
                   greedy: bool, seed: int, stream: int = 0,
                   desc: str = "eval") -> list[trajectory.Trajectory]:
        """The one evaluation player: the trainer's evaluations and ``trainers.evaluate`` (the
        evaluate CLI) both call it. ``samples`` episodes per task at turn budget ``budget``,
        in chunks of at most one rollout batch; greedy, or sampled at ``eval_temperature``.

        Randomness: host ``default_rng([seed, EVAL_RNG])`` (greedy) or ``default_rng([seed,
        EVAL_RNG, 1 + stream])`` (sampled), device ``fold_in(key(seed), 10_000_000 + stream)`` folded with
        each chunk's start; ``stream`` separates several sampled evaluations of one seed (the
        per-budget Pass@(K,T) mode plays one per budget). ``desc`` names its progress bar."""
        rng = (np.random.default_rng([seed, EVAL_RNG]) if greedy
               else np.random.default_rng([seed, EVAL_RNG, 1 + stream]))
        key = jax.random.fold_in(jax.random.key(seed), 10_000_000 + stream)
        trajs = []
        per_chunk = max(1, self.batch_rows // samples)
        with console.Progress(desc, len(tasks) * samples, "episode") as bar:
            for start in range(0, len(tasks), per_chunk):
                chunk = list(tasks[start:start + per_chunk])
                trajs += self.play_share(params, pool, chunk, group_size=samples,
                                         budgets=[budget] * (len(chunk) * samples), rng=rng,
                                         greedy=greedy, key=jax.random.fold_in(key, start),
                                         temperature=self.eval_temperature)
                bar.update(len(chunk) * samples)
        return trajs

    def play_share(self, params, pool, tasks: Sequence[Any], *, group_size: int,
                   budgets: Sequence[int], rng: np.random.Generator, greedy: bool,
                   key: jax.Array, temperature: float) -> list[trajectory.Trajectory]:
        """``play`` of all ``tasks``, this process playing its contiguous block of them
        (``multihost.share``; whole groups), then every process's episodes gathered in task
        order: with one process, or several, the same list on every process.

        ``rng`` gives one number per call, whatever the block: the seed of every episode's own
        stream, so the draws of an episode do not depend on which process plays it."""
        start, stop = multihost.share(len(tasks))
        local_rng = np.random.default_rng(int(rng.integers(2**63)))
        local = []
        if stop > start:
            local = self.play(multihost.local_view(params, self.rollout_mesh), pool,
                              list(tasks[start:stop]), group_size=group_size,
                              budgets=list(budgets[start * group_size:stop * group_size]),
                              rng=local_rng, greedy=greedy, key=key, temperature=temperature,
                              offset=start)
        return multihost.allgather_objects(local)

    def _periodic_eval(self, state, pool, meta) -> None:
        """Evaluation every ``eval.every_iters`` RL iterations; its success rates go to the
        metrics at the iteration's step."""
        e = self.evaluate(state.params, pool, f"evaluation at RL iteration {meta['iteration']}",
                          sampled=False)
        self.writer.write(self.sft_steps + meta["iteration"],
                          {f"eval/{k}_success": v["success"] for k, v in e.items()
                           if "success" in v})
        meta["eval_due"] = False
