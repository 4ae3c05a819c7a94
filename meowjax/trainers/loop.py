"""The training schedule shared by both action interfaces: SFT -> RL -> evaluation.

Read top to bottom in ``AgentTrainer.run``: restore (or start), SFT on expert walkthroughs,
evaluation of the starting policy, RL iterations (collect groups of episodes; old / reference
log-probs and critic values; advantages from the estimator registry; epochs over fixed-shape
minibatches), periodic evaluation and checkpoints, final evaluation.

What differs between interfaces lives in subclasses: the model and its per-unit terms
(``steps.Units``: a unit is a turn for the scoring interface, a token for free text), how expert
data becomes rows, how episodes are played (each returns ``rollout.trajectory.Trajectory``
records), and how trajectories become update rows laid out as the ``[E, X]`` matrices the
estimators read (X = turns or tokens). The losses are ``meowjax.rl.objective``'s, built into
jitted steps once, in ``meowjax.trainers.steps``.

Building, placing, saving and restoring the state, and what a SIGTERM saves:
``meowjax.trainers.train_state``.

Host randomness is ``np.random.default_rng([seed, phase, index])`` and device randomness
``jax.random.fold_in(key(seed), index)``, so a resumed run replays exactly what an uninterrupted
run does.
"""

from __future__ import annotations

import abc
import contextlib
import os
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from meowjax.envs.pool import EnvPool
from meowjax.rl import estimators, objective
from meowjax.rollout import buckets, trajectory
from meowjax.sharding import make_mesh
from meowjax.runtime import (checkpoint, console, host_memory, metrics_log, multihost, placement,
                             preemption)
from meowjax.runtime.preemption import Preempted
from meowjax.trainers import (data, dynamic_sampling, greedy_baseline, optim, replay, returns,
                              steps)
from meowjax.trainers.evaluation import Evaluation, sampled_tasks
from meowjax.trainers.train_state import DONE, RL, SFT, TrainerState

SFT_RNG, COLLECT_RNG, SHUFFLE_RNG, AUGMENT_RNG, RENAME_RNG, REPLAY_RNG = 1, 2, 3, 7, 12, 13
# EVAL_RNG = 9


def host_rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


@jax.jit
def _copy_tree(tree):
    """A copy of every leaf (new buffers), in one compiled program."""
    return jax.tree.map(jnp.copy, tree)


class AgentTrainer(Evaluation, TrainerState, abc.ABC):
    """Owns one run. Subclasses fill in the interface-specific hooks below."""

    interface: str = ""
    needs_admissible: bool = False

    def __init__(self, c: ml_collections.ConfigDict, workdir: str, *, training: bool = True):
        """The agent of ``c`` (model, tokenizer, interface, placement on the mesh over every
        process's devices) and, with ``training``, the run's data and steps: game sets, expert
        demonstrations, the SFT rows, optimizers and jitted updates. ``training=False`` builds
        only what playing and evaluating a checkpoint need (see ``restore_policy``).

        Several processes (``runtime.multihost``): updates run SPMD on ``mesh``; each process
        plays its share of the episodes on ``rollout_mesh``, its own devices."""
        self.c, self.workdir, self.training = c, workdir, training
        self.check_config()
        self.mesh = make_mesh(c.mesh.axes, jax.devices(), field="config.mesh.axes")
        self.rollout_mesh = multihost.process_submesh(self.mesh)
        placement.check_batch_rows(self.mesh, self.batch_row_fields())
        note = multihost.idle_processes_note(c.rollout.tasks_per_iter, "rollout.tasks_per_iter")
        if training and note:
            logging.warning("%s", note)
        os.makedirs(workdir, exist_ok=True)
        self.spec = estimators.validate_estimator(c.rl.estimator)
        self.hp = estimators.estimator_hparams(c.rl.estimator, gamma=c.rl.gamma, lam=c.rl.lam,
                                               section=c.rl.get(c.rl.estimator))
        self.objective = objective.ObjectiveConfig.from_section(c.rl)
        # An estimator reading `baseline_B` (remax) gets each task's greedy return; with
        # rollout.greedy_member each group also trains on its task's greedy episode.
        self.needs_greedy = "baseline_B" in self.spec.needs
        self.greedy_member = bool(c.rollout.greedy_member)
        if self.needs_greedy and c.rollout.dynamic_draws:
            raise ValueError(f"rl.estimator={c.rl.estimator!r} compares each episode with its "
                             "task's greedy episode; rollout.dynamic_draws (which keeps groups "
                             "whose own returns differ) does not apply to it: set "
                             "rollout.dynamic_draws=0.")
        if c.rl.critic_warmup_iters and not self.spec.needs_critic:
            raise ValueError(f"rl.critic_warmup_iters={c.rl.critic_warmup_iters} fits a critic, "
                             f"and rl.estimator={c.rl.estimator!r} has none: set it to 0, or "
                             "choose an estimator with a critic (gae, turn_gae).")
        if c.rl.loss_norm not in returns.LOSS_NORMS:
            raise ValueError(f"rl.loss_norm={c.rl.loss_norm!r}; choose one of {returns.LOSS_NORMS}.")
        # Reference log-probs are computed only for a KL term (in the loss or in the rewards).
        self.needs_ref = self.objective.needs_ref
        self.plan = data.budget_plan(c) if training else {"sft_demos": 0, "rl_episodes": 0}
        with multihost.process_zero_first("games, tokenizer, weights"):   # shared files
            t_games = time.time()
            self.sets = data.game_sets(c) if training else {}
            self.games_s = time.time() - t_games   # generated, or loaded from the cache
            if training and c.eval.num_samples > 0:   # fails now, not after SFT
                sampled_tasks(self.sets.get(c.eval.sampled_split, []), c.eval.sampled_games)
            self.rename = data.task_renamer(c, self.sets) if training else None
            sft_tasks = self.sets["sft"][:self.plan["sft_demos"]] if training else []
            self.expert = data.expert_data(c, sft_tasks) if training else []
            self.setup_model()
        augmented = data.augmented_experts(c, self.expert, sft_tasks,
                                           host_rng(c.seed, AUGMENT_RNG)) if training else []
        self.sft_rows = self.make_sft_rows(self.expert + augmented)
        self.sft_lengths = [len(r["tokens"]) for r in self.sft_rows]   # SFT and replay batches
        per_iter = c.rollout.tasks_per_iter * c.rollout.group_size
        self.batch_rows = per_iter
        self.rl_iters = self.plan["rl_episodes"] // per_iter
        self.sft_steps = c.sft.epochs * -(-len(self.sft_rows) // c.sft.batch_rows)
        rl_steps = data.rl_update_steps(c, self.rows_per_iter_estimate(), self.rl_iters)
        if training and self.rl_iters:   # fails now, not after SFT
            replay.check_replay(len(self.sft_rows), c.rl.replay_steps, c.sft.batch_rows)
        rl_steps += c.rl.replay_steps * self.rl_iters   # they step the RL optimizer too
        # Without training the optimizers only give the checkpointed state its structure.
        self.sft_opt = optim.optimizer_from_config(c.sft, max(1, self.sft_steps))
        self.rl_opt = optim.optimizer_from_config(c.rl, rl_steps)
        warm = c.rl.critic_warmup_iters
        warm_steps = data.rl_update_steps(c, self.rows_per_iter_estimate(), warm) if warm else 0
        self.critic_opt = optim.optimizer_from_config(c.rl, rl_steps + warm_steps,
                                                      lr=c.rl.critic_lr)
        self.place = placement.Placement(self.mesh, self.cfg)
        self.rollout_place = placement.Placement(self.rollout_mesh, self.cfg)
        self.shardings = {phase: self.place.step_shardings(self._abstract_state(phase == RL), opt,
                                                           self.critic_opt)
                          for phase, opt in ((SFT, self.sft_opt), (RL, self.rl_opt))}
        self.setup_steps()
        self.ckpt = checkpoint.Checkpointer(workdir, c.checkpoint.max_to_keep, writer=training)
        self.shapes_seen: dict[str, set[tuple[int, ...]]] = {}
        if not training:
            return
        self.sft_step = steps.make_sft_step(
            self.units, self.sft_opt, objective.ObjectiveConfig(lm_coef=c.sft.lm_coef),
            shardings=self.shardings[SFT])
        self.pg_step = steps.make_pg_step(
            self.units, self.rl_opt, self.critic_opt, self.objective,
            temperature=c.policy.temperature, needs_critic=self.spec.needs_critic,
            shardings=self.shardings[RL])
        self.replay_step = steps.make_sft_step(
            self.units, self.rl_opt, objective.ObjectiveConfig(lm_coef=c.sft.lm_coef),
            shardings=self.shardings[RL], prefix="replay") if c.rl.replay_steps else None
        self.critic_step = steps.make_critic_step(
            self.units, self.critic_opt, self.objective,
            shardings=self.shardings[RL]) if c.rl.critic_warmup_iters else None
        self.old_terms = steps.make_old_terms(
            self.units, temperature=c.policy.temperature, needs_ref=self.needs_ref,
            needs_critic=self.spec.needs_critic)
        self.writer = metrics_log.MetricsWriter(workdir, enabled=jax.process_index() == 0)
        self.compile_clock = metrics_log.CompileClock()

    # ----- interface hooks -----------------------------------------------------------------
    def check_config(self) -> None:
        """Fails, before any work, on config fields this interface cannot honour."""

    def tokenizer_text(self) -> list[dict[str, Any]]:
        """Expert trajectories to train a game-text tokenizer on: the SFT demonstrations, or
        (pure RL) 20 SFT-split games' walkthroughs."""
        if self.expert:
            return self.expert
        if not self.training:
            raise FileNotFoundError(f"{self.workdir}/tokenizer is missing: a game-text model is "
                                    "evaluated with the tokenizer its run trained.")
        return data.expert_data(self.c, self.sets["sft"][:20])

    @abc.abstractmethod
    def setup_model(self) -> None:
        """Sets self.tok, self.cfg and the initial params factory ``self.init_params(key)``."""

    @abc.abstractmethod
    def setup_steps(self) -> None:
        """Sets self.units (``steps.Units``) and whatever jitted rollout function ``play`` uses."""

    def set_state_budget(self, on: bool) -> None:
        """Whether prompts state the turn budget from now on (``policy.state_budget``)."""
        if on:
            raise ValueError(f"the {self.interface!r} interface cannot state the turn budget in "
                             "its prompts (policy.state_budget is for interface 'score').")

    def set_forced_action(self, forced) -> None:
        """Every episode plays a given command at a given turn (the forced-action probe)."""
        if forced is not None:
            raise ValueError(f"the {self.interface!r} interface cannot force an action (the "
                             "forced-action probe is for interface 'score').")

    def batch_row_fields(self) -> dict[str, int]:
        """Config fields that fix a device batch's row count (each must divide the batch shards)."""
        return {"sft.batch_rows": self.c.sft.batch_rows,
                "rl.minibatch_rows": self.c.rl.minibatch_rows}

    @abc.abstractmethod
    def make_sft_rows(self, expert: list[dict[str, Any]]) -> list[dict[str, np.ndarray]]:
        ...

    @abc.abstractmethod
    def rows_per_iter_estimate(self) -> int:
        ...

    @abc.abstractmethod
    def play(self, params, pool, tasks, *, group_size: int, budgets: Sequence[int],
             rng: np.random.Generator, greedy: bool, key: jax.Array, temperature: float,
             offset: int = 0) -> list[trajectory.Trajectory]:
        """Episodes of ``tasks`` on this process's devices (``rollout_mesh``; ``params`` are the
        trainer's). ``tasks`` are items ``offset ...`` of the caller's list: group ids and each
        episode's sampling randomness follow the position in that list, not the process."""

    @abc.abstractmethod
    def update_rows(self, trajs) -> list[dict[str, np.ndarray]]:
        """Rows for old_terms / pg_step (with ``old_logp`` = the sampling log-probs)."""

    @abc.abstractmethod
    def layout(self, trajs, rows, per_row: Sequence[Any]) -> np.ndarray:
        """Per-row unit values (a scalar per turn row, an array per token row) as ``[E, X]``."""

    @abc.abstractmethod
    def matrices(self, trajs, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rewards_EX, mask_EX, turn_end_EX, state_key_EX) for the estimators."""

    @abc.abstractmethod
    def attach(self, trajs, rows, adv_EX, ret_EX) -> None:
        """Writes adv / ret from the ``[E, X]`` matrices into ``rows`` (in place)."""

    def row_units(self, x_U: np.ndarray, row: dict[str, np.ndarray]) -> np.ndarray:
        """One row's part of a ``[U]`` per-unit output of a packed batch (token rows: its
        length; the scoring interface overrides: one unit)."""
        return x_U[:len(row["tokens"])]

    def pack(self, rows, num_rows: int, purpose: str) -> dict[str, np.ndarray]:
        """Pads rows into a fixed shape; records the shape per purpose (compiles = shapes)."""
        batch = buckets.pack_rows(rows, length_buckets=self.c.rollout.length_buckets,
                                  num_rows=num_rows, pad_values=self.pad_values)
        self.shapes_seen.setdefault(purpose, set()).add(batch["tokens"].shape)
        return batch

    pad_values: dict[str, Any] = {}

    @property
    def min_rows(self) -> int:
        """Smallest rollout row bucket: a multiple of the batch shards (>= 4), so every bucket
        divides over the mesh."""
        shards = placement.batch_shards(self.mesh)
        return shards * -(-4 // shards)

    def update_batch_rows(self, num: int) -> int:
        """Rows an RL update (or pre-update) chunk of ``num`` real rows is padded to: a multiple
        of 2 x ``min_rows`` (8 on one device), at most ``rl.minibatch_rows``. Only an epoch's one
        partial chunk (the shortest rows, ``buckets.length_grouped_minibatches``) is smaller than
        ``rl.minibatch_rows``, so this adds a few small shapes and drops most weight-0 rows
        (benchmarks/padding.py)."""
        return buckets.row_multiple(num, self.c.rl.minibatch_rows, 2 * self.min_rows)

    # ----- pieces of the schedule ------------------------------------------------------------
    def _sft(self, state, meta):
        c = self.c
        steps_per_epoch = -(-len(self.sft_rows) // c.sft.batch_rows)
        chunks, chunks_epoch = [], -1
        loss = float("nan")
        with console.Progress("SFT", self.sft_steps, "step", initial=meta["sft_step"]) as bar:
            while meta["sft_step"] < self.sft_steps and not self.preempted:
                epoch, k = divmod(meta["sft_step"], steps_per_epoch)
                if epoch != chunks_epoch:  # one epoch's minibatches, drawn once from its rng
                    chunks = buckets.length_grouped_minibatches(
                        self.sft_lengths, c.sft.batch_rows, host_rng(c.seed, SFT_RNG, epoch))
                    chunks_epoch = epoch
                idx = chunks[k]
                # Update steps always run on batch_rows rows (the one partial minibatch of an
                # epoch is padded with weight-0 rows): a backward pass compiles in ~8 s on 2 CPU
                # cores, so one shape per length bucket beats a few wasted rows.
                batch = self.pack([self.sft_rows[i] for i in idx], c.sft.batch_rows, "sft")
                state, m = self.sft_step(state, self.place.batch(batch))
                meta["sft_step"] += 1
                shown = {}
                if meta["sft_step"] % c.log.every_steps == 0 or meta["sft_step"] == self.sft_steps:
                    m = {**jax.device_get(m), **host_memory.memory_metrics()}
                    self.writer.write(meta["sft_step"], m)
                    loss = float(m["sft/loss"])
                    shown = {"loss": loss}
                bar.update(1, **shown)
        if self.sft_steps and bar.n > bar.initial:
            console.info("SFT: %d/%d steps, loss %.4g, in %.1f s", meta["sft_step"],
                         self.sft_steps, loss, bar.elapsed())
        elif self.sft_steps:   # resumed (or seeded from a shared SFT) with every step done
            console.info("SFT: %d/%d steps done before this start", meta["sft_step"],
                         self.sft_steps)
        else:
            console.info("SFT: none (no expert demonstrations in the plan)")
        return state

    def _old_terms(self, state, ref, rows):
        """Per-row (reference log-prob, value, the trainer's own log pi_old) before the update,
        zeros for a term the run does not use (no KL: no reference forward; no critic: no value
        forward), None for the last without truncated importance sampling (``rl.tis``: no
        policy forward). Chunks are cut and padded like the update's (``update_batch_rows``),
        so the pass compiles once per shape of the update."""
        c = self.c
        tis = self.objective.uses_tis
        if not (self.needs_ref or self.spec.needs_critic or tis):
            zero = lambda r: self.row_units(np.zeros(len(r["tokens"]), np.float32), r)
            return [zero(r) for r in rows], [zero(r) for r in rows], None
        mb = c.rl.minibatch_rows
        refl, vals, olds = [None] * len(rows), [None] * len(rows), [None] * len(rows)
        policy = (state.params,) if tis else ()   # the sampling params: pi_old, trainer's
        for idx in buckets.length_grouped_minibatches([len(r["tokens"]) for r in rows], mb):
            chunk = [rows[j] for j in idx]
            batch = self.place.batch(self.pack(chunk, self.update_batch_rows(len(idx)), "old"))
            out = multihost.to_host(self.old_terms(ref, state.value_params, batch, *policy))
            for k, (j, row) in enumerate(zip(idx, chunk)):
                refl[j], vals[j] = self.row_units(out[0][k], row), self.row_units(out[1][k], row)
                if tis:
                    olds[j] = self.row_units(out[2][k], row)
        return refl, vals, (olds if tis else None)

    def _rl_iteration(self, state, ref, pool, it, critic_only: bool = False):
        """One RL iteration: collect, advantages, update; ``critic_only``: the update fits the
        critic alone (critic warm-up: no policy step, no demonstration replay)."""
        c = self.c
        t0 = time.time()
        rng = host_rng(c.seed, COLLECT_RNG, it)
        rename_rng = host_rng(c.seed, RENAME_RNG, it)
        played: list[int] = []   # turns of every draw (throughput)
        greedy: list = []        # the greedy episodes of the iteration's tasks
        sampled: list = []       # the sampled episodes of the iteration's tasks (draw 0)

        def play_draw(draw: int):
            """Draw 0: the iteration's tasks; later draws (dynamic sampling): random pool tasks."""
            tasks = data.iteration_tasks(self.sets["train"], it, c.rollout.tasks_per_iter,
                                         c.seed, c.rollout.task_order if draw == 0 else "sample",
                                         rng)
            tasks = self.rename(tasks, rename_rng)
            budgets = data.budgets_for(c, len(tasks) * c.rollout.group_size, rng)
            key = jax.random.fold_in(jax.random.key(c.seed), it)
            trajs = self.play_share(state.params, pool, tasks, group_size=c.rollout.group_size,
                                    budgets=budgets, rng=rng, greedy=False,
                                    key=key if draw == 0 else jax.random.fold_in(key, draw),
                                    temperature=c.policy.temperature)
            played.append(sum(e.num_turns for e in trajs))
            if draw == 0:
                sampled.extend(trajs)
            if (draw == 0 and self.needs_greedy) or self.greedy_member:
                arg_max = self.play_share(
                    state.params, pool, tasks, group_size=1, rng=rng, greedy=True, key=key,
                    budgets=greedy_baseline.group_budgets(budgets, c.rollout.group_size),
                    temperature=c.policy.temperature)
                played.append(sum(e.num_turns for e in arg_max))
                if draw == 0:
                    greedy.extend(arg_max)
                if self.greedy_member:   # group ids match: the task's position in the draw
                    trajs = trajs + arg_max
            return trajs

        with preemption.interruptible():   # the state is unchanged until the update
            eps, fill_stats = dynamic_sampling.fill_groups(
                play_draw, want=c.rollout.tasks_per_iter, max_draws=c.rollout.dynamic_draws,
                turn_cost=c.rl.turn_cost)
        t_roll = time.time() - t0
        rows = self.update_rows(eps)
        refl, vals, olds = self._old_terms(state, ref, rows)
        for row, r, v in zip(rows, refl, vals):
            row.update(ref_logp=r, old_value=v)
        if olds is not None:   # truncated importance sampling: the trainer's own pi_old
            for row, o in zip(rows, olds):
                row["trainer_old_logp"] = o
        rewards, mask, turn_end, keys = self.matrices(eps, rows)
        rewards = returns.with_turn_cost(rewards, mask, turn_end, c.rl.turn_cost)
        fold_kl = self.objective if self.needs_ref and not c.rl.kl_in_loss else None
        # Host arrays: `steps.advantages` takes them as they are (no per-shape eager converts).
        # The sampled log pi (checked against the trainer's by the first update minibatch).
        logp, ref_logp = ((self.layout(eps, rows, [r["old_logp"] for r in rows]),
                           self.layout(eps, rows, refl)) if fold_kl else (mask, mask))
        values = self.layout(eps, rows, vals) if self.spec.needs_critic else None
        bootstrap = (returns.truncation_bootstrap(values, mask, [e.truncated for e in eps])
                     if values is not None and c.rl.bootstrap_truncated else None)
        inputs = estimators.make_inputs(
            np.asarray(rewards), np.asarray(mask), np.ones((len(eps),), np.float32),
            values_BL=values, turn_end_BL=np.asarray(turn_end), state_key_BL=np.asarray(keys),
            group_ids_B=np.asarray([e.group_id for e in eps], np.int32), bootstrap_B=bootstrap,
            won_B=np.asarray([e.won for e in eps], np.float32),
            baseline_B=(greedy_baseline.baseline_returns(greedy, eps, gamma=c.rl.gamma,
                                                         turn_cost=c.rl.turn_cost)
                        if self.needs_greedy else None))
        adv, ret = jax.device_get(steps.advantages(
            inputs, logp, ref_logp, name=self.spec.name, hp=self.hp, fold_kl=fold_kl,
            whiten=c.rl.whiten_advantages))
        self.attach(eps, rows, adv, ret)
        if c.rl.loss_norm == "iteration":
            norm = returns.iteration_loss_norm(mask, len(rows), c.rl.minibatch_rows, c.rl.agg)
            for row in rows:
                row["loss_norm"] = norm
        t1 = time.time()
        shuffle = host_rng(c.seed, SHUFFLE_RNG, it)
        acc: dict[str, list] = {}
        eff, slots = [], 0
        mb = c.rl.minibatch_rows
        lengths = [len(r["tokens"]) for r in rows]
        step = self.critic_step if critic_only else self.pg_step
        for _ in range(c.rl.epochs):
            for idx in buckets.length_grouped_minibatches(lengths, mb, shuffle):
                batch = self.pack([rows[j] for j in idx], self.update_batch_rows(len(idx)), "pg")
                eff.append(buckets.padding_efficiency(batch) * batch["mask"].size)  # real tokens
                slots += batch["mask"].size
                state, m = step(state, self.place.batch(batch))
                for k, v in m.items():
                    acc.setdefault(k, []).append(v)
        # Demonstration replay (rl.replay_steps, trainers.replay): SFT steps on the RL state.
        replay_steps = 0 if critic_only else c.rl.replay_steps
        for idx in replay.replay_minibatches(self.sft_lengths, replay_steps, c.sft.batch_rows,
                                             host_rng(c.seed, REPLAY_RNG, it)):
            batch = self.pack([self.sft_rows[j] for j in idx], c.sft.batch_rows, "replay")
            state, m = self.replay_step(state, self.place.batch(batch))
            for k, v in m.items():
                acc.setdefault(k, []).append(v)
        # The first minibatch runs on the sampling params: its |log pi - sampled log pi| is the
        # sampler-vs-trainer mismatch of this iteration's rows (later ones measure the update).
        mismatch = acc.pop("pg/logp_mismatch_max", None)
        metrics = {k: float(np.mean(jax.device_get(v))) for k, v in acc.items()}
        if critic_only:
            return state, metrics
        # Rollout figures are the iteration's own tasks (draw 0), whatever dynamic sampling kept,
        # sampled episodes only (a greedy group member has its own figure).
        metrics.update(trajectory.rollout_metrics(sampled))
        metrics.update({
            "rollout/logp_mismatch_max": float(jax.device_get(mismatch[0])),
            "time/rollout_s": t_roll, "time/update_s": time.time() - t1,
            # real tokens / slots over all the iteration's update batches
            "perf/padding_efficiency": float(sum(eff) / slots),
            "perf/turns_per_s": sum(played) / max(t_roll, 1e-9), **fill_stats,
            **(greedy_baseline.greedy_metrics(greedy) if greedy else {}),
            **host_memory.memory_metrics()})
        return state, metrics

    # ----- the schedule ------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """The schedule, under the SIGTERM handler (``runtime.preemption``): on ``Preempted``
        the last consistent state (``_mark``) is saved, unless it already is, and the exception
        goes on to the entry point."""
        c = self.c
        console.info("run %s: interface %s, estimator %s, %d SFT steps, %d RL iterations (%s), "
                     "in %s", c.name, self.interface, self.spec.name, self.sft_steps,
                     self.rl_iters, data.task_repeats(c, self.rl_iters), self.workdir)
        pool, self._resume = None, None
        try:
            with preemption.on_sigterm(), multihost.stop_together():
                state, ref, meta = self.restore_state()
                self._mark(state, ref, meta, saved=True)
                pool = EnvPool(data.env_spec(self.c, admissible=self.needs_admissible),
                               num_workers=self.c.env.num_workers,
                               step_timeout_s=self.c.env.step_timeout_s)
                try:
                    return self._schedule(state, ref, meta, pool)
                except Preempted:
                    with preemption.deferred():
                        self._save_resume_point()
                    raise
        finally:
            if pool is not None:
                pool.close()
            self.ckpt.close()
            self.writer.close()

    def _schedule(self, state, ref, meta, pool) -> dict[str, Any]:
        c = self.c
        if meta["phase"] == SFT:
            with preemption.deferred(), self._timed(meta, "sft"):
                state = self._sft(state, meta)
                self._mark(state, state.params, meta)
            host_memory.release_free_memory()
            if self.preempted:
                raise Preempted(f"SIGTERM during SFT at step {meta['sft_step']}; saved.")
            with self._timed(meta, "evaluation"):
                meta["evals"]["start"] = self.evaluate(
                    state.params, pool, "evaluation of the starting policy",
                    sampled=c.eval.sample_start)
            with preemption.deferred():
                meta["phase"] = RL
                meta["curve_due"] = self.curve_due(0)
                ref = self.place.params(_copy_tree(state.params))  # pg_step donates
                state = self._rl_state(state.params)
                self._save(state, ref, meta)
                self._mark(state, ref, meta, saved=True)
        state = self._critic_warmup(state, ref, pool, meta)
        # No plain progress lines off a terminal: each iteration prints its own, with the ETA.
        with console.Progress("RL", self.rl_iters, "iter", initial=meta["iteration"],
                              plain_every_s=None) as bar:
            while meta["phase"] == RL:
                if meta.get("curve_due"):   # a learning-curve point (again, if a SIGTERM cut it)
                    self._curve_point(state, pool, meta)
                    self._mark(state, ref, meta, saved=False)
                if meta.get("eval_due"):   # a periodic evaluation (again, if a SIGTERM cut it)
                    self._periodic_eval(state, pool, meta)
                    self._mark(state, ref, meta, saved=False)
                if meta["iteration"] >= self.rl_iters:
                    break
                with preemption.deferred():   # the rollout inside stays interruptible
                    state, m = self._rl_iteration(state, ref, pool, meta["iteration"])
                    for k in ("rollout", "update"):
                        self._add_time(meta, f"rl_{k}", m[f"time/{k}_s"])
                    meta["iteration"] += 1
                    meta["eval_due"] = bool(c.eval.every_iters
                                            and meta["iteration"] % c.eval.every_iters == 0)
                    meta["curve_due"] = self.curve_due(meta["iteration"])
                    self.writer.write(self.sft_steps + meta["iteration"], m)
                    self._mark(state, ref, meta)
                if meta["curve_due"]:   # now, so that this iteration's line shows it
                    self._curve_point(state, pool, meta)
                    self._mark(state, ref, meta)
                curve = meta["evals"].get("curve")   # the line shows the latest point
                host_memory.release_free_memory()  # kept host memory: once per iteration
                bar.update(1, success=m["rollout/success"])
                shown = {**m, "curve/success": curve[-1]["success"]} if curve else m
                console.info("%s", console.rl_line(meta["iteration"], self.rl_iters, shown,
                                                   bar.eta()))
                if self.preempted or meta["iteration"] % c.checkpoint.every_iters == 0:
                    with preemption.deferred():
                        self._save(state, ref, meta)
                        self._mark(state, ref, meta, saved=True)
                if self.preempted:
                    raise Preempted(f"SIGTERM at RL iteration {meta['iteration']}; saved.")
        if meta["phase"] == RL:
            console.info("RL: %d/%d iterations, in %.1f s", meta["iteration"], self.rl_iters,
                         bar.elapsed())
            with self._timed(meta, "evaluation"):
                meta["evals"]["final"] = self.evaluate(state.params, pool, "final evaluation",
                                                       sampled=True)
            with preemption.deferred():
                meta["phase"] = DONE
                self._save(state, ref, meta)
                self._mark(state, ref, meta, saved=True)
        logging.debug("batch shapes per jitted function (one compile each): %s",
                      {k: sorted(v) for k, v in self.shapes_seen.items()})
        cc = self.compile_clock.snapshot()
        logging.info("XLA: %d compiles (%d loaded from the persistent cache, saving %.1f s), "
                     "%.1f s compiling, %.1f s tracing/lowering (all jitted functions, "
                     "rollouts and evaluation included)", cc["compiles"], cc["cache_hits"],
                     cc["cache_saved_s"], cc["compile_s"], cc["trace_s"])
        phase_s = {"games": self.games_s, **meta.get("phase_s", {}),
                   "compile": cc["compile_s"] + cc["trace_s"]}
        return {"plan": self.plan, "sft_rows": len(self.sft_rows), "rl_iters": self.rl_iters,
                "evals": meta["evals"], "state": state, "ref": ref, "phase_s": phase_s}

    def _critic_warmup(self, state, ref, pool, meta):
        """``rl.critic_warmup_iters`` iterations that fit the critic alone, before the first
        policy update. They play the stream's games of iterations ``rl_iters + k`` (a later
        pass: the policy's own iterations keep theirs) and log ``critic_warmup/*`` at steps
        ``k + 1``."""
        want = self.c.rl.critic_warmup_iters
        if meta["phase"] != RL or meta["iteration"] > 0:
            return state
        while meta.get("critic_warmup", 0) < want:
            k = meta.get("critic_warmup", 0)
            with preemption.deferred():
                state, m = self._rl_iteration(state, ref, pool, self.rl_iters + k,
                                              critic_only=True)
                meta["critic_warmup"] = k + 1
                self.writer.write(k + 1, {key: v for key, v in m.items()
                                          if key.startswith("critic_warmup/")})
                self._mark(state, ref, meta)
            console.info("critic warm-up %d/%d: value error %.3f", k + 1, want,
                         m["critic_warmup/value_abs_err"])
            if self.preempted:
                with preemption.deferred():
                    self._save(state, ref, meta)
                    self._mark(state, ref, meta, saved=True)
                raise Preempted(f"SIGTERM in critic warm-up {k + 1}/{want}; saved.")
        return state

    def curve_due(self, iteration: int) -> bool:
        """Whether the held-out learning curve gets a point after ``iteration`` RL iterations:
        at the start of RL, every ``eval.curve_every`` iterations and at the last one."""
        every = self.c.eval.curve_every
        if not (every and self.sets.get("curve")):
            return False
        return iteration % every == 0 or iteration == self.rl_iters

    def _curve_point(self, state, pool, meta) -> None:
        """Plays the curve games at the current iteration; appends the point to
        ``meta["evals"]["curve"]`` (a new list: marked copies of meta keep theirs) and to the
        metrics (``curve/success``)."""
        with self._timed(meta, "evaluation"):
            point = self.curve_point(state.params, pool, meta["iteration"])
        meta["evals"]["curve"] = [*meta["evals"].get("curve", []), point]
        meta["curve_due"] = False
        self.writer.write(self.sft_steps + meta["iteration"], {"curve/success": point["success"]})

    @staticmethod
    def _add_time(meta, phase: str, seconds: float) -> None:
        """Adds to ``meta["phase_s"]`` (checkpointed: a resumed run keeps its earlier time)."""
        times = dict(meta.get("phase_s", {}))   # a new dict: saved copies of meta stay as they were
        times[phase] = times.get(phase, 0.0) + float(seconds)
        meta["phase_s"] = times

    @contextlib.contextmanager
    def _timed(self, meta, phase: str):
        t0 = time.time()
        try:
            yield
        finally:
            self._add_time(meta, phase, time.time() - t0)
