"""One RL iteration, in algorithm order: collect -> old terms -> advantages -> update -> replay.

    collect      groups of episodes of the iteration's tasks on the current policy (dynamic
                 sampling may draw more), plus each task's greedy episode where the estimator or
                 rollout.greedy_member asks for it;
    old terms    per update row: reference log-probs (a KL term), old values (a critic), the
                 trainer's own log pi_old (TIS), computed in the update's chunk shapes;
    advantages   the [E, X] matrices (X = turns or tokens) through the estimator registry:
                 A, R = estimator(rewards - turn_cost, mask, values, ...) (rl.estimators),
                 with any extra inputs it names from their providers
                 (trainers.estimator_inputs);
    update       rl.epochs over length-grouped minibatches of fixed shape, one jitted step each
                 (the policy objective, or the critic alone during critic warm-up);
    replay       rl.replay_steps SFT steps on demonstration minibatches through the RL
                 optimizer (trainers.replay).

Every function takes the trainer ``tr`` (the interface's hooks and the jitted steps it built)
and the state explicitly. Host randomness is ``runtime.rng.host_rng(seed, stream,
iteration)``, so a resumed run replays what an uninterrupted run does.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from meowjax.rl import estimators
from meowjax.rollout import buckets, trajectory
from meowjax.runtime import host_memory, multihost, preemption
from meowjax.trainers import (data, dynamic_sampling, estimator_inputs, greedy_baseline, replay,
                              returns, steps)
from meowjax.runtime.rng import COLLECT_RNG, RENAME_RNG, REPLAY_RNG, SHUFFLE_RNG, host_rng

@dataclasses.dataclass
class Collected:
    """An iteration's episodes: ``eps`` (what the update trains on), ``sampled`` (the
    iteration's own tasks, draw 0: the rollout figures), ``greedy`` (their greedy episodes),
    turns played per draw, dynamic sampling's figures and the rollout's wall time."""

    eps: list
    sampled: list
    greedy: list
    played: list[int]
    fill_stats: dict[str, float]
    seconds: float


def collect(tr, state, pool, it: int) -> Collected:
    """Episodes of iteration ``it``'s tasks (``rollout.task_order``) on ``state.params``."""
    c = tr.c
    t0 = time.time()
    rng = host_rng(c.seed, COLLECT_RNG, it)
    rename_rng = host_rng(c.seed, RENAME_RNG, it)
    played: list[int] = []   # turns of every draw (throughput)
    greedy: list = []        # the greedy episodes of the iteration's tasks
    sampled: list = []       # the sampled episodes of the iteration's tasks (draw 0)

    def play_draw(draw: int):
        """Draw 0: the iteration's tasks; later draws (dynamic sampling): random pool tasks."""
        tasks = data.iteration_tasks(tr.sets["train"], it, c.rollout.tasks_per_iter,
                                     c.seed, c.rollout.task_order if draw == 0 else "sample",
                                     rng)
        tasks = tr.rename(tasks, rename_rng)
        budgets = data.budgets_for(c, len(tasks) * c.rollout.group_size, rng)
        key = jax.random.fold_in(jax.random.key(c.seed), it)
        trajs = tr.play_share(state.params, pool, tasks, group_size=c.rollout.group_size,
                              budgets=budgets, rng=rng, greedy=False,
                              key=key if draw == 0 else jax.random.fold_in(key, draw),
                              temperature=c.policy.temperature)
        played.append(sum(e.num_turns for e in trajs))
        if draw == 0:
            sampled.extend(trajs)
        if (draw == 0 and tr.needs_greedy) or tr.greedy_member:
            arg_max = tr.play_share(
                state.params, pool, tasks, group_size=1, rng=rng, greedy=True, key=key,
                budgets=greedy_baseline.group_budgets(budgets, c.rollout.group_size),
                temperature=c.policy.temperature)
            played.append(sum(e.num_turns for e in arg_max))
            if draw == 0:
                greedy.extend(arg_max)
            if tr.greedy_member:   # group ids match: the task's position in the draw
                trajs = trajs + arg_max
        return trajs

    with preemption.interruptible():   # the state is unchanged until the update
        eps, fill_stats = dynamic_sampling.fill_groups(
            play_draw, want=c.rollout.tasks_per_iter, max_draws=c.rollout.dynamic_draws,
            turn_cost=c.rl.turn_cost)
    return Collected(eps, sampled, greedy, played, fill_stats, time.time() - t0)


def old_terms(tr, state, ref, rows):
    """Per-row (reference log-prob, value, the trainer's own log pi_old) before the update,
    zeros for a term the run does not use (no KL: no reference forward; no critic: no value
    forward), None for the last without truncated importance sampling (``rl.tis``: no
    policy forward). Chunks are cut and padded like the update's (``update_batch_rows``),
    so the pass compiles once per shape of the update."""
    tis = tr.objective.uses_tis
    if not (tr.needs_ref or tr.spec.needs_critic or tis):
        zero = lambda r: tr.row_units(np.zeros(len(r["tokens"]), np.float32), r)
        return [zero(r) for r in rows], [zero(r) for r in rows], None
    refl, vals, olds = [None] * len(rows), [None] * len(rows), [None] * len(rows)
    policy = (state.params,) if tis else ()   # the sampling params: pi_old, trainer's
    for idx in buckets.length_grouped_minibatches([len(r["tokens"]) for r in rows],
                                                  tr.c.rl.minibatch_rows):
        chunk = [rows[j] for j in idx]
        batch = tr.place.batch(tr.pack(chunk, tr.update_batch_rows(len(idx)), "old"))
        out = multihost.to_host(tr.old_terms(ref, state.value_params, batch, *policy))
        for k, (j, row) in enumerate(zip(idx, chunk)):
            refl[j], vals[j] = tr.row_units(out[0][k], row), tr.row_units(out[1][k], row)
            if tis:
                olds[j] = tr.row_units(out[2][k], row)
    return refl, vals, (olds if tis else None)


def advantages(tr, col: Collected, rows, refl, vals) -> None:
    """Estimator advantages and returns of the collected episodes, written into ``rows``
    (``adv``, ``ret``; ``loss_norm`` with rl.loss_norm="iteration")."""
    c, eps = tr.c, col.eps
    rewards, mask, turn_end, keys = tr.matrices(eps, rows)
    # Inputs beyond the built-in ones, from the providers the estimator names (none built in).
    extra = estimator_inputs.provide(tr.spec, estimator_inputs.EpisodeBatch(
        eps, rows, rewards, mask, turn_end, col.greedy, c,
        lambda per_row: tr.layout(eps, rows, per_row))) if tr.extra_inputs else None
    rewards = returns.with_turn_cost(rewards, mask, turn_end, c.rl.turn_cost)
    fold_kl = tr.objective if tr.needs_ref and not c.rl.kl_in_loss else None
    # Host arrays: `steps.advantages` takes them as they are (no per-shape eager converts).
    # The sampled log pi (checked against the trainer's by the first update minibatch).
    logp, ref_logp = ((tr.layout(eps, rows, [r["old_logp"] for r in rows]),
                       tr.layout(eps, rows, refl)) if fold_kl else (mask, mask))
    values = tr.layout(eps, rows, vals) if tr.spec.needs_critic else None
    bootstrap = (returns.truncation_bootstrap(values, mask, [e.truncated for e in eps])
                 if values is not None and c.rl.bootstrap_truncated else None)
    inputs = estimators.make_inputs(
        np.asarray(rewards), np.asarray(mask), np.ones((len(eps),), np.float32),
        values_BL=values, turn_end_BL=np.asarray(turn_end), state_key_BL=np.asarray(keys),
        group_ids_B=np.asarray([e.group_id for e in eps], np.int32), bootstrap_B=bootstrap,
        won_B=np.asarray([e.won for e in eps], np.float32),
        baseline_B=(greedy_baseline.baseline_returns(col.greedy, eps, gamma=c.rl.gamma,
                                                     turn_cost=c.rl.turn_cost)
                    if tr.needs_greedy else None), extra=extra)
    adv, ret = jax.device_get(steps.advantages(
        inputs, logp, ref_logp, name=tr.spec.name, hp=tr.hp, fold_kl=fold_kl,
        whiten=c.rl.whiten_advantages))
    tr.attach(eps, rows, adv, ret)
    if c.rl.loss_norm == "iteration":
        norm = returns.iteration_loss_norm(mask, len(rows), c.rl.minibatch_rows, c.rl.agg)
        for row in rows:
            row["loss_norm"] = norm


def update(tr, state, rows, it: int, acc: dict[str, list], *, critic_only: bool):
    """``rl.epochs`` passes over length-grouped minibatches of ``rows``, one jitted step each;
    returns the state and (real tokens, token slots) of the update's batches."""
    c = tr.c
    shuffle = host_rng(c.seed, SHUFFLE_RNG, it)
    eff, slots = [], 0
    lengths = [len(r["tokens"]) for r in rows]
    step = tr.critic_step if critic_only else tr.pg_step
    for _ in range(c.rl.epochs):
        for idx in buckets.length_grouped_minibatches(lengths, c.rl.minibatch_rows, shuffle):
            batch = tr.pack([rows[j] for j in idx], tr.update_batch_rows(len(idx)), "pg")
            eff.append(buckets.padding_efficiency(batch) * batch["mask"].size)  # real tokens
            slots += batch["mask"].size
            state, m = step(state, tr.place.batch(batch))
            for k, v in m.items():
                acc.setdefault(k, []).append(v)
    return state, (sum(eff), slots)


def replay_demonstrations(tr, state, it: int, acc: dict[str, list]):
    """Demonstration replay (``rl.replay_steps``, trainers.replay): SFT steps on the RL state."""
    c = tr.c
    for idx in replay.replay_minibatches(tr.sft_lengths, c.rl.replay_steps, c.sft.batch_rows,
                                         host_rng(c.seed, REPLAY_RNG, it)):
        batch = tr.pack([tr.sft_rows[j] for j in idx], c.sft.batch_rows, "replay")
        state, m = tr.replay_step(state, tr.place.batch(batch))
        for k, v in m.items():
            acc.setdefault(k, []).append(v)
    return state


def iteration(tr, state, ref, pool, it: int, critic_only: bool = False):
    """One RL iteration on the stream's iteration ``it``; ``critic_only``: the update fits the
    critic alone (critic warm-up: no policy step, no demonstration replay). Returns the new
    state and the iteration's metrics."""
    # -- collect ---------------------------------------------------------------------------
    col = collect(tr, state, pool, it)
    # -- old terms and advantages ----------------------------------------------------------
    rows = tr.update_rows(col.eps)
    refl, vals, olds = old_terms(tr, state, ref, rows)
    for row, r, v in zip(rows, refl, vals):
        row.update(ref_logp=r, old_value=v)
    if olds is not None:   # truncated importance sampling: the trainer's own pi_old
        for row, o in zip(rows, olds):
            row["trainer_old_logp"] = o
    advantages(tr, col, rows, refl, vals)
    # -- update, then demonstration replay -------------------------------------------------
    t1 = time.time()
    acc: dict[str, list] = {}
    state, (real, slots) = update(tr, state, rows, it, acc, critic_only=critic_only)
    if not critic_only:
        state = replay_demonstrations(tr, state, it, acc)
    # The first minibatch runs on the sampling params: its |log pi - sampled log pi| is the
    # sampler-vs-trainer mismatch of this iteration's rows (later ones measure the update).
    mismatch = acc.pop("pg/logp_mismatch_max", None)
    metrics = {k: float(np.mean(jax.device_get(v))) for k, v in acc.items()}
    if critic_only:
        return state, metrics
    return state, {**metrics, **_iteration_metrics(col, mismatch, real / slots,
                                                   time.time() - t1)}


def _iteration_metrics(col: Collected, mismatch, padding: float,
                       update_s: float) -> dict[str, Any]:
    """Rollout figures of the iteration's own tasks (draw 0), whatever dynamic sampling kept,
    sampled episodes only (a greedy group member has its own figure); timings and memory."""
    return {**trajectory.rollout_metrics(col.sampled),
            "rollout/logp_mismatch_max": float(jax.device_get(mismatch[0])),
            "time/rollout_s": col.seconds, "time/update_s": update_s,
            "perf/padding_efficiency": padding,   # real tokens / slots of the update batches
            "perf/turns_per_s": sum(col.played) / max(col.seconds, 1e-9), **col.fill_stats,
            **(greedy_baseline.greedy_metrics(col.greedy) if col.greedy else {}),
            **host_memory.memory_metrics()}
