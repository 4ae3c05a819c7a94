"""A run's schedule, top to bottom: restore -> SFT -> start evaluation -> RL -> final evaluation.

    restore      the last consistent state of ``workdir`` (or a fresh one) and its ``meta``
                 (phase, step counters, evaluations so far: ``trainers.train_state``);
    SFT          ``sft.epochs`` over length-grouped minibatches of the demonstration rows;
    evaluate     greedy success on the held-out sets (and sampled Pass@(K,T)), the starting
                 policy's; the reference policy is frozen here;
    critic       ``rl.critic_warmup_iters`` iterations fitting the critic alone;
    RL           ``rl_iters`` iterations (``trainers.rl_iteration``), with the learning curve's
                 points, periodic evaluations and checkpoints between them;
    evaluate     the final policy on the same held-out sets.

Each phase boundary is marked (``_mark``): on SIGTERM (``runtime.preemption``) the last marked
state is saved and the run resumes from it, replaying what an uninterrupted run does. Every
function takes the trainer ``tr`` (the agent and its jitted steps) and the state explicitly.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import jax
from absl import logging

from meowjax.envs import game_sets
from meowjax.envs.pool import EnvPool
from meowjax.rollout import buckets
from meowjax.runtime import console, host_memory, multihost, preemption
from meowjax.runtime.preemption import Preempted
from meowjax.trainers import data
from meowjax.runtime.rng import SFT_RNG, host_rng
from meowjax.trainers.train_state import DONE, RL, SFT


@jax.jit
def _copy_tree(tree):
    """A copy of every leaf (new buffers), in one compiled program."""
    return jax.tree.map(jax.numpy.copy, tree)


def run(tr) -> dict[str, Any]:
    """The schedule, under the SIGTERM handler (``runtime.preemption``): on ``Preempted`` the
    last consistent state (``_mark``) is saved, unless it already is, and the exception goes on
    to the entry point."""
    c = tr.c
    console.info("run %s: interface %s, estimator %s, %d SFT steps, %d RL iterations (%s), "
                 "in %s", c.name, tr.interface, tr.spec.name, tr.sft_steps, tr.rl_iters,
                 data.task_repeats(c, tr.rl_iters), tr.workdir)
    pool, tr._resume = None, None
    try:
        with preemption.on_sigterm(), multihost.stop_together():
            state, ref, meta = tr.restore_state()
            tr._mark(state, ref, meta, saved=True)
            pool = EnvPool(game_sets.env_spec(c, admissible=tr.needs_admissible),
                           num_workers=c.env.num_workers, step_timeout_s=c.env.step_timeout_s)
            try:
                return schedule(tr, state, ref, meta, pool)
            except Preempted:
                with preemption.deferred():
                    tr._save_resume_point()
                raise
    finally:
        if pool is not None:
            pool.close()
        tr.ckpt.close()
        tr.writer.close()


def schedule(tr, state, ref, meta, pool) -> dict[str, Any]:
    """The phases from wherever ``meta`` says the run stands; the run's summary."""
    c = tr.c
    # -- SFT, then the starting policy's evaluation ----------------------------------------
    if meta["phase"] == SFT:
        with preemption.deferred(), timed(meta, "sft"):
            state = sft(tr, state, meta)
            tr._mark(state, state.params, meta)
        host_memory.release_free_memory()
        if tr.preempted:
            raise Preempted(f"SIGTERM during SFT at step {meta['sft_step']}; saved.")
        with timed(meta, "evaluation"):
            meta["evals"]["start"] = tr.evaluate(state.params, pool,
                                                 "evaluation of the starting policy",
                                                 sampled=c.eval.sample_start)
        with preemption.deferred():
            meta["phase"] = RL
            meta["curve_due"] = curve_due(tr, 0)
            ref = tr.place.params(_copy_tree(state.params))  # pg_step donates
            state = tr._rl_state(state.params)
            tr._save(state, ref, meta)
            tr._mark(state, ref, meta, saved=True)
    # -- RL ----------------------------------------------------------------------------------
    state = critic_warmup(tr, state, ref, pool, meta)
    state = rl(tr, state, ref, pool, meta)
    # -- the final evaluation ------------------------------------------------------------
    if meta["phase"] == RL:
        with timed(meta, "evaluation"):
            meta["evals"]["final"] = tr.evaluate(state.params, pool, "final evaluation",
                                                 sampled=True)
        with preemption.deferred():
            meta["phase"] = DONE
            tr._save(state, ref, meta)
            tr._mark(state, ref, meta, saved=True)
    logging.debug("batch shapes per jitted function (one compile each): %s",
                  {k: sorted(v) for k, v in tr.shapes_seen.items()})
    cc = tr.compile_clock.snapshot()
    logging.info("XLA: %d compiles (%d loaded from the persistent cache, saving %.1f s), "
                 "%.1f s compiling, %.1f s tracing/lowering (all jitted functions, "
                 "rollouts and evaluation included)", cc["compiles"], cc["cache_hits"],
                 cc["cache_saved_s"], cc["compile_s"], cc["trace_s"])
    phase_s = {"games": tr.games_s, **meta.get("phase_s", {}),
               "compile": cc["compile_s"] + cc["trace_s"]}
    return {"plan": tr.plan, "sft_rows": len(tr.sft_rows), "rl_iters": tr.rl_iters,
            "evals": meta["evals"], "state": state, "ref": ref, "phase_s": phase_s}


def sft(tr, state, meta):
    """``sft.epochs`` over the demonstration rows from step ``meta["sft_step"]``; each epoch's
    length-grouped minibatches are drawn once from its own rng."""
    c = tr.c
    steps_per_epoch = -(-len(tr.sft_rows) // c.sft.batch_rows)
    chunks, chunks_epoch = [], -1
    loss = float("nan")
    with console.Progress("SFT", tr.sft_steps, "step", initial=meta["sft_step"]) as bar:
        while meta["sft_step"] < tr.sft_steps and not tr.preempted:
            epoch, k = divmod(meta["sft_step"], steps_per_epoch)
            if epoch != chunks_epoch:
                chunks = buckets.length_grouped_minibatches(
                    tr.sft_lengths, c.sft.batch_rows, host_rng(c.seed, SFT_RNG, epoch))
                chunks_epoch = epoch
            # Update steps always run on batch_rows rows (the one partial minibatch of an epoch
            # is padded with weight-0 rows): a backward pass compiles in ~8 s on 2 CPU cores, so
            # one shape per length bucket beats a few wasted rows.
            batch = tr.pack([tr.sft_rows[i] for i in chunks[k]], c.sft.batch_rows, "sft")
            state, m = tr.sft_step(state, tr.place.batch(batch))
            meta["sft_step"] += 1
            shown = {}
            if meta["sft_step"] % c.log.every_steps == 0 or meta["sft_step"] == tr.sft_steps:
                m = {**jax.device_get(m), **host_memory.memory_metrics()}
                tr.writer.write(meta["sft_step"], m)
                loss = float(m["sft/loss"])
                shown = {"loss": loss}
            bar.update(1, **shown)
    if tr.sft_steps and bar.n > bar.initial:
        console.info("SFT: %d/%d steps, loss %.4g, in %.1f s", meta["sft_step"], tr.sft_steps,
                     loss, bar.elapsed())
    elif tr.sft_steps:   # resumed (or seeded from a shared SFT) with every step done
        console.info("SFT: %d/%d steps done before this start", meta["sft_step"], tr.sft_steps)
    else:
        console.info("SFT: none (no expert demonstrations in the plan)")
    return state


def critic_warmup(tr, state, ref, pool, meta):
    """``rl.critic_warmup_iters`` iterations that fit the critic alone, before the first policy
    update. They play the stream's games of iterations ``rl_iters + k`` (a later pass: the
    policy's own iterations keep theirs) and log ``critic_warmup/*`` at steps ``k + 1``."""
    want = tr.c.rl.critic_warmup_iters
    if meta["phase"] != RL or meta["iteration"] > 0:
        return state
    while meta.get("critic_warmup", 0) < want:
        k = meta.get("critic_warmup", 0)
        with preemption.deferred():
            state, m = tr._rl_iteration(state, ref, pool, tr.rl_iters + k, critic_only=True)
            meta["critic_warmup"] = k + 1
            tr.writer.write(k + 1, {key: v for key, v in m.items()
                                    if key.startswith("critic_warmup/")})
            tr._mark(state, ref, meta)
        console.info("critic warm-up %d/%d: value error %.3f", k + 1, want,
                     m["critic_warmup/value_abs_err"])
        if tr.preempted:
            with preemption.deferred():
                tr._save(state, ref, meta)
                tr._mark(state, ref, meta, saved=True)
            raise Preempted(f"SIGTERM in critic warm-up {k + 1}/{want}; saved.")
    return state


def rl(tr, state, ref, pool, meta):
    """RL iterations from ``meta["iteration"]`` to ``rl_iters``; between them the learning
    curve's points, periodic evaluations and checkpoints. A point or evaluation a SIGTERM cut
    is made again on resume (``curve_due`` / ``eval_due`` are checkpointed)."""
    c = tr.c
    # No plain progress lines off a terminal: each iteration prints its own, with the ETA.
    with console.Progress("RL", tr.rl_iters, "iter", initial=meta["iteration"],
                          plain_every_s=None) as bar:
        while meta["phase"] == RL:
            if meta.get("curve_due"):
                curve_point(tr, state, pool, meta)
                tr._mark(state, ref, meta, saved=False)
            if meta.get("eval_due"):
                tr._periodic_eval(state, pool, meta)
                tr._mark(state, ref, meta, saved=False)
            if meta["iteration"] >= tr.rl_iters:
                break
            with preemption.deferred():   # the rollout inside stays interruptible
                state, m = tr._rl_iteration(state, ref, pool, meta["iteration"])
                for k in ("rollout", "update"):
                    add_time(meta, f"rl_{k}", m[f"time/{k}_s"])
                meta["iteration"] += 1
                meta["eval_due"] = bool(c.eval.every_iters
                                        and meta["iteration"] % c.eval.every_iters == 0)
                meta["curve_due"] = curve_due(tr, meta["iteration"])
                tr.writer.write(tr.sft_steps + meta["iteration"], m)
                tr._mark(state, ref, meta)
            if meta["curve_due"]:   # now, so that this iteration's line shows it
                curve_point(tr, state, pool, meta)
                tr._mark(state, ref, meta)
            curve = meta["evals"].get("curve")   # the line shows the latest point
            host_memory.release_free_memory()  # kept host memory: once per iteration
            bar.update(1, success=m["rollout/success"])
            shown = {**m, "curve/success": curve[-1]["success"]} if curve else m
            console.info("%s", console.rl_line(meta["iteration"], tr.rl_iters, shown, bar.eta()))
            if tr.preempted or meta["iteration"] % c.checkpoint.every_iters == 0:
                with preemption.deferred():
                    tr._save(state, ref, meta)
                    tr._mark(state, ref, meta, saved=True)
            if tr.preempted:
                raise Preempted(f"SIGTERM at RL iteration {meta['iteration']}; saved.")
    if meta["phase"] == RL:
        console.info("RL: %d/%d iterations, in %.1f s", meta["iteration"], tr.rl_iters,
                     bar.elapsed())
    return state


def curve_due(tr, iteration: int) -> bool:
    """Whether the held-out learning curve gets a point after ``iteration`` RL iterations: at
    the start of RL, every ``eval.curve_every`` iterations and at the last one."""
    every = tr.c.eval.curve_every
    if not (every and tr.sets.get("curve")):
        return False
    return iteration % every == 0 or iteration == tr.rl_iters


def curve_point(tr, state, pool, meta) -> None:
    """Plays the curve games at the current iteration; appends the point to
    ``meta["evals"]["curve"]`` (a new list: marked copies of meta keep theirs) and to the
    metrics (``curve/success``)."""
    with timed(meta, "evaluation"):
        point = tr.curve_point(state.params, pool, meta["iteration"])
    meta["evals"]["curve"] = [*meta["evals"].get("curve", []), point]
    meta["curve_due"] = False
    tr.writer.write(tr.sft_steps + meta["iteration"], {"curve/success": point["success"]})


def add_time(meta, phase: str, seconds: float) -> None:
    """Adds to ``meta["phase_s"]`` (checkpointed: a resumed run keeps its earlier time)."""
    times = dict(meta.get("phase_s", {}))   # a new dict: saved copies of meta stay as they were
    times[phase] = times.get(phase, 0.0) + float(seconds)
    meta["phase_s"] = times


@contextlib.contextmanager
def timed(meta, phase: str):
    t0 = time.time()
    try:
        yield
    finally:
        add_time(meta, phase, time.time() - t0)
