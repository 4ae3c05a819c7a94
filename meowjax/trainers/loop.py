"""The training schedule shared by both action interfaces: SFT -> RL -> evaluation.

Read top to bottom in ``AgentTrainer.run``: restore (or start), SFT on expert walkthroughs,
evaluation of the starting policy, RL iterations (collect groups of episodes; old / reference
log-probs and critic values; advantages from the estimator registry; epochs over fixed-shape
minibatches), periodic evaluation and checkpoints, final evaluation.

What differs between interfaces lives in subclasses: how expert data becomes rows, how episodes
are played, and how episodes become update rows plus the ``[E, X]`` reward/mask matrices the
estimators read (X = turns for the scoring interface, tokens for free text).

Host randomness is ``np.random.default_rng([seed, phase, index])`` and device randomness
``jax.random.fold_in(key(seed), index)``, so a resumed run replays exactly what an uninterrupted
run does.
"""

from __future__ import annotations

import abc
import functools
import os
import signal
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from meowjax.envs.pool import EnvPool
from meowjax.eval import passk, stats
from meowjax.models import value
from meowjax.rl import estimators, reduce
from meowjax.rollout import buckets
from meowjax.sharding import make_mesh
from meowjax.trainers import checkpoint, data, host_memory, metrics_log, optim, placement

SFT, RL, DONE = "sft", "rl", "done"
SFT_RNG, COLLECT_RNG, SHUFFLE_RNG, AUGMENT_RNG, EVAL_RNG = 1, 2, 3, 7, 9


class Preempted(Exception):
    """SIGTERM arrived: the state was saved; rerun the same command to resume."""


def host_rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


def budgets_for(c: ml_collections.ConfigDict, n: int, rng: np.random.Generator) -> list[int]:
    """Per-episode turn budgets: BudgetMix draws each one from ``turns.budget_mix``."""
    if len(c.turns.budget_mix):
        return [int(b) for b in rng.choice(np.asarray(c.turns.budget_mix), size=n)]
    return [int(c.turns.max_turns)] * n


def success_summary(views: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Success rate with its 95% Wilson interval, mean turns, invalid-action rate, and each game's
    outcome (``per_game``: task_id -> won, one greedy episode per game) so that two evaluations of
    the same games can be compared pairwise."""
    n = len(views)
    wins = int(sum(v["won"] for v in views))
    low, high = stats.wilson_interval(wins, n)
    turns = sum(v["turns"] for v in views)
    return {"success": wins / max(1, n), "ci_low": low, "ci_high": high, "wins": wins, "n": n,
            "mean_turns": turns / max(1, n),
            "invalid_rate": sum(v["invalid"] for v in views) / max(1, turns),
            "per_game": {str(v["task_id"]): bool(v["won"]) for v in views}}


@functools.partial(jax.jit, static_argnames=("name", "gamma", "lam", "use_std", "whiten"))
def _advantages(inputs: estimators.EstimatorInputs, *, name: str, gamma: float, lam: float,
                use_std: bool, whiten: bool):
    """(adv_BL, returns_BL) of an RL iteration's rows, optionally whitened over agent tokens:
    one compiled program per batch shape (eagerly, each of the estimator's ops compiled)."""
    adv_BL, ret_BL = estimators.compute_advantages(name, inputs, gamma=gamma, lam=lam,
                                                   use_std=use_std)
    if whiten:
        adv_BL = reduce.masked_whiten(adv_BL, inputs.mask_BL, inputs.row_weight_B)
    return adv_BL, ret_BL


@jax.jit
def _copy_tree(tree):
    """A copy of every leaf (new buffers), in one compiled program."""
    return jax.tree.map(jnp.copy, tree)


class AgentTrainer(abc.ABC):
    """Owns one run. Subclasses fill in the interface-specific hooks below."""

    interface: str = ""
    needs_admissible: bool = False

    def __init__(self, c: ml_collections.ConfigDict, workdir: str):
        self.c, self.workdir = c, workdir
        # This process's devices: multi-host training is not wired (launch_pod evaluates per host).
        self.mesh = make_mesh(c.mesh.axes, jax.local_devices(), field="config.mesh.axes")
        placement.check_batch_rows(self.mesh, self.batch_row_fields())
        os.makedirs(workdir, exist_ok=True)
        self.spec = estimators.validate_estimator(c.rl.estimator)
        # Reference log-probs are computed only for a KL term (in the loss or in the rewards).
        self.needs_ref = c.rl.kl_coef > 0
        self.plan = data.budget_plan(c)
        self.sets = data.game_sets(c)
        sft_tasks = self.sets["sft"][:self.plan["sft_demos"]]
        self.expert = data.expert_data(c, sft_tasks)
        self.setup_model()
        augmented = []
        if c.sft.augment_copies and c.env.family == "textworld":
            augmented = data.augment_experts(self.expert, sft_tasks, c.sft.augment_copies,
                                             host_rng(c.seed, AUGMENT_RNG))
        self.sft_rows = self.make_sft_rows(self.expert + augmented)
        per_iter = c.rollout.tasks_per_iter * c.rollout.group_size
        self.batch_rows = per_iter
        self.rl_iters = self.plan["rl_episodes"] // per_iter
        self.sft_steps = c.sft.epochs * -(-len(self.sft_rows) // c.sft.batch_rows)
        updates_per_iter = c.rl.epochs * -(-self.rows_per_iter_estimate() // c.rl.minibatch_rows)
        rl_steps = max(1, self.rl_iters * updates_per_iter)
        self.sft_opt = optim.optimizer_from_config(c.sft, max(1, self.sft_steps))
        self.rl_opt = optim.optimizer_from_config(c.rl, rl_steps)
        critic = ml_collections.ConfigDict(c.rl.to_dict())
        critic.lr = c.rl.critic_lr
        self.critic_opt = optim.optimizer_from_config(critic, rl_steps)
        self.place = placement.Placement(self.mesh, self.cfg)
        self.shardings = {phase: self.place.step_shardings(self._abstract_state(phase == RL), opt,
                                                           self.critic_opt)
                          for phase, opt in ((SFT, self.sft_opt), (RL, self.rl_opt))}
        self.setup_steps()
        self.writer = metrics_log.MetricsWriter(workdir)
        self.ckpt = checkpoint.Checkpointer(workdir, c.checkpoint.max_to_keep)
        self.preempted = False
        self.shapes_seen: dict[str, set[tuple[int, ...]]] = {}
        self.compile_clock = metrics_log.CompileClock()

    # ----- interface hooks -----------------------------------------------------------------
    @abc.abstractmethod
    def setup_model(self) -> None:
        """Sets self.tok, self.cfg and the initial params factory ``self.init_params(key)``."""

    @abc.abstractmethod
    def setup_steps(self) -> None:
        """Sets self.sft_step, self.pg_step (with ``shardings=self.shardings[SFT | RL]``) and
        self.old_terms (jitted)."""

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
             rng: np.random.Generator, greedy: bool, key: jax.Array) -> list[Any]:
        ...

    @abc.abstractmethod
    def view(self, episode) -> dict[str, Any]:
        """won, success_turn, turns, reward, invalid, task_id, group_id, overflow of one episode."""

    @abc.abstractmethod
    def update_rows(self, episodes) -> list[dict[str, np.ndarray]]:
        """Rows for old_terms / pg_step (with ``old_logp`` = the sampling log-probs)."""

    @abc.abstractmethod
    def matrices(self, episodes, rows, values: list[np.ndarray]):
        """(rewards_EX, mask_EX, turn_end_EX, values_EX) for the estimators."""

    @abc.abstractmethod
    def attach(self, episodes, rows, adv_EX, ret_EX, ref, values) -> None:
        """Writes adv / ret / old_value / ref_logp into ``rows`` (in place)."""

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

    # ----- state (placed on the mesh with self.shardings[phase].state) ----------------------
    def _new_state(self, params, rl: bool):
        vparams, vopt = {}, {}
        if rl and self.spec.needs_critic:
            # The critic starts from the policy's trunk (as after SFT) with a fresh head.
            vparams = value.init_value_params(self.cfg, jax.random.key(self.c.seed + 1), params)
            vopt = self.critic_opt.init(vparams)
        opt = self.rl_opt if rl else self.sft_opt
        return optim.TrainState(step=jnp.int32(0), params=params, opt_state=opt.init(params),
                                value_params=vparams, value_opt_state=vopt)

    def _abstract_state(self, rl: bool):
        return jax.eval_shape(lambda: self._new_state(self.init_params(jax.random.key(0)), rl))

    def _placed_state(self, params, rl: bool):
        """A fresh TrainState on its shardings, built by one compiled program (eagerly, every
        optimizer moment of a new shape was its own small compile)."""
        phase = RL if rl else SFT

        def new_state(p):
            return self._new_state(p, rl)

        new_state.__name__ = f"new_{phase}_state"   # its name in compile logs and counts
        return jax.jit(new_state, out_shardings=self.shardings[phase].state)(params)

    def _sft_state(self):
        params = self.place.params(self.init_params(jax.random.key(self.c.seed)))
        return self._placed_state(params, False)

    def _rl_state(self, params):
        return self._placed_state(params, True)

    def _save(self, state, ref, meta):
        meta["ckpt_index"] += 1
        self.ckpt.save(int(meta["ckpt_index"]), {"state": state, "ref": ref}, meta)

    def _restore(self):
        """(state, ref, meta) from the latest checkpoint (restored onto the mesh shardings), or
        a fresh start."""
        meta = {"phase": SFT, "sft_step": 0, "iteration": 0, "ckpt_index": 0, "evals": {}}
        if self.ckpt.latest_step() is None:
            state = self._sft_state()
            return state, state.params, meta
        phase = SFT if self.ckpt.read_meta()["phase"] == SFT else RL
        target = placement.with_shardings(self._abstract_state(phase == RL),
                                          self.shardings[phase].state)
        restored, meta = self.ckpt.restore({"state": target, "ref": target.params})
        logging.info("Resumed from checkpoint: phase %s, sft_step %d, iteration %d",
                     meta["phase"], meta["sft_step"], meta["iteration"])
        return restored["state"], restored["ref"], meta

    # ----- pieces of the schedule ------------------------------------------------------------
    def evaluate(self, params, pool, tag: str, *, sampled: bool) -> dict[str, Any]:
        """Greedy success on both held-out splits; Pass@(K,T) from sampled episodes."""
        c = self.c
        out: dict[str, Any] = {}
        key = jax.random.fold_in(jax.random.key(c.seed), 10_000_000)
        for split in ("eval", "eval_hard"):
            tasks = self.sets[split]
            if not tasks:
                continue
            views = self._play_all(params, pool, tasks, 1, host_rng(c.seed, EVAL_RNG), True, key)
            out[split] = success_summary(views)
            if sampled and split == "eval" and c.eval.num_samples > 0:
                views = self._play_all(params, pool, tasks, c.eval.num_samples,
                                       host_rng(c.seed, EVAL_RNG, 1), False, key)
                by_task: dict[str, list] = {}
                for v in views:
                    by_task.setdefault(v["task_id"], []).append(v)
                out["pass_at_k_t"] = passk.estimate_pass_at_k_t(
                    by_task, c.eval.pass_ks, c.eval.pass_ts, mode="single_run").to_json()
        logging.info("eval %s: %s", tag, {k: round(v["success"], 3) for k, v in out.items()
                                           if "success" in v})
        return out

    def _play_all(self, params, pool, tasks, samples, rng, greedy, key):
        views = []
        per_chunk = max(1, self.batch_rows // samples)
        for start in range(0, len(tasks), per_chunk):
            chunk = list(tasks[start:start + per_chunk])
            eps = self.play(params, pool, chunk, group_size=samples,
                            budgets=[self.c.turns.eval_max_turns] * (len(chunk) * samples),
                            rng=rng, greedy=greedy, key=jax.random.fold_in(key, start))
            views += [self.view(e) for e in eps]
        return views

    def _sft(self, state, meta):
        c = self.c
        steps_per_epoch = -(-len(self.sft_rows) // c.sft.batch_rows)
        lengths = [len(r["tokens"]) for r in self.sft_rows]
        chunks, chunks_epoch = [], -1
        while meta["sft_step"] < self.sft_steps and not self.preempted:
            epoch, k = divmod(meta["sft_step"], steps_per_epoch)
            if epoch != chunks_epoch:  # one epoch's minibatches, drawn once from its rng
                chunks = buckets.length_grouped_minibatches(lengths, c.sft.batch_rows,
                                                            host_rng(c.seed, SFT_RNG, epoch))
                chunks_epoch = epoch
            idx = chunks[k]
            # Update steps always run on batch_rows rows (the one partial minibatch of an epoch
            # is padded with weight-0 rows): a backward pass compiles in ~8 s on 2 CPU cores, so
            # one shape per length bucket beats a few wasted rows.
            batch = self.pack([self.sft_rows[i] for i in idx], c.sft.batch_rows, "sft")
            state, m = self.sft_step(state, self.place.batch(batch))
            meta["sft_step"] += 1
            if meta["sft_step"] % c.log.every_steps == 0 or meta["sft_step"] == self.sft_steps:
                self.writer.write(meta["sft_step"], {**jax.device_get(m),
                                                     **host_memory.memory_metrics()})
        return state

    def _old_terms(self, state, ref, rows):
        """Per-row (reference log-prob, value) before the update, zeros for a term the run does
        not use (no KL: no reference forward; no critic: no value forward). Chunks are cut and
        padded like the update's (``update_batch_rows``), so the pass compiles once per shape
        of the update."""
        c = self.c
        if not (self.needs_ref or self.spec.needs_critic):
            zero = lambda r: (np.zeros(len(r["tokens"]), np.float32)
                              if "loss_mask" in r else np.float32(0.0))
            return [zero(r) for r in rows], [zero(r) for r in rows]
        mb = c.rl.minibatch_rows
        refl, vals = [None] * len(rows), [None] * len(rows)
        for idx in buckets.length_grouped_minibatches([len(r["tokens"]) for r in rows], mb):
            chunk = [rows[j] for j in idx]
            batch = self.place.batch(self.pack(chunk, self.update_batch_rows(len(idx)), "old"))
            rl_, v = jax.device_get(self.old_terms(ref, state.value_params, batch))
            for k, (j, row) in enumerate(zip(idx, chunk)):
                n = len(row["tokens"])
                cut = (lambda x: x[k]) if np.ndim(rl_) == 1 else (lambda x: x[k, :n])
                refl[j], vals[j] = cut(rl_), cut(v)
        return refl, vals

    def _rl_iteration(self, state, ref, pool, it):
        c = self.c
        t0 = time.time()
        rng = host_rng(c.seed, COLLECT_RNG, it)
        tasks = list(rng.choice(self.sets["train"], size=c.rollout.tasks_per_iter, replace=False))
        budgets = budgets_for(c, len(tasks) * c.rollout.group_size, rng)
        eps = self.play(state.params, pool, tasks, group_size=c.rollout.group_size,
                        budgets=budgets, rng=rng, greedy=False,
                        key=jax.random.fold_in(jax.random.key(c.seed), it))
        t_roll = time.time() - t0
        rows = self.update_rows(eps)
        refl, vals = self._old_terms(state, ref, rows)
        rewards, mask, turn_end, values = self.matrices(eps, rows, vals)
        if self.needs_ref and not c.rl.kl_in_loss:  # KL to the reference folded into rewards
            # log pi as sampled (the update's first minibatch checks them against the trainer's)
            old = [r["old_logp"] for r in rows]
            rewards = rewards - c.rl.kl_coef * self.kl_matrix(eps, rows, old, refl)
        inputs = estimators.EstimatorInputs(
            # Host arrays: `_advantages` takes them as they are (no per-shape eager converts).
            rewards_BL=np.asarray(rewards), mask_BL=np.asarray(mask),
            row_weight_B=np.ones((len(eps),), np.float32),
            values_BL=np.asarray(values) if self.spec.needs_critic else None,
            turn_end_BL=np.asarray(turn_end),
            group_ids_B=np.asarray([self.view(e)["group_id"] for e in eps], np.int32))
        adv, ret = jax.device_get(_advantages(
            inputs, name=self.spec.name, gamma=c.rl.gamma, lam=c.rl.lam,
            use_std=c.rl.grpo_use_std, whiten=c.rl.whiten_advantages))
        self.attach(eps, rows, adv, ret, refl, vals)
        t1 = time.time()
        shuffle = host_rng(c.seed, SHUFFLE_RNG, it)
        acc: dict[str, list] = {}
        eff, slots = [], 0
        mb = c.rl.minibatch_rows
        lengths = [len(r["tokens"]) for r in rows]
        for _ in range(c.rl.epochs):
            for idx in buckets.length_grouped_minibatches(lengths, mb, shuffle):
                batch = self.pack([rows[j] for j in idx], self.update_batch_rows(len(idx)), "pg")
                eff.append(buckets.padding_efficiency(batch) * batch["mask"].size)  # real tokens
                slots += batch["mask"].size
                state, m = self.pg_step(state, self.place.batch(batch))
                for k, v in m.items():
                    acc.setdefault(k, []).append(v)
        # The first minibatch runs on the sampling params: its |log pi - sampled log pi| is the
        # sampler-vs-trainer mismatch of this iteration's rows (later ones measure the update).
        mismatch = acc.pop("pg/logp_mismatch_max")
        metrics = {k: float(np.mean(jax.device_get(v))) for k, v in acc.items()}
        views = [self.view(e) for e in eps]
        n_turns = sum(v["turns"] for v in views)
        metrics.update({
            "rollout/success": float(np.mean([v["won"] for v in views])),
            "rollout/return": float(np.mean([v["reward"] for v in views])),
            "rollout/episode_turns": n_turns / len(views),
            "rollout/invalid_rate": sum(v["invalid"] for v in views) / max(1, n_turns),
            "rollout/overflow_rate": float(np.mean([v["overflow"] for v in views])),
            "rollout/logp_mismatch_max": float(jax.device_get(mismatch[0])),
            "time/rollout_s": t_roll, "time/update_s": time.time() - t1,
            # real tokens / slots over all the iteration's update batches
            "perf/padding_efficiency": float(sum(eff) / slots),
            "perf/turns_per_s": n_turns / max(t_roll, 1e-9), **host_memory.memory_metrics()})
        return state, metrics

    def kl_matrix(self, eps, rows, old, ref):
        raise NotImplementedError("KL in the reward is not supported by this interface; set "
                                  "rl.kl_in_loss=True.")

    # ----- the schedule ------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.c
        state, ref, meta = self._restore()
        pool = EnvPool(data.env_spec(c, admissible=self.needs_admissible),
                       num_workers=c.env.num_workers, step_timeout_s=c.env.step_timeout_s)
        old_handler = signal.signal(signal.SIGTERM, lambda *_: setattr(self, "preempted", True))
        try:
            if meta["phase"] == SFT:
                state = self._sft(state, meta)
                host_memory.release_free_memory()
                if self.preempted:
                    self._save(state, state.params, meta)
                    raise Preempted(f"SIGTERM during SFT at step {meta['sft_step']}; saved.")
                meta["evals"]["start"] = self.evaluate(state.params, pool, "start",
                                                       sampled=c.eval.sample_start)
                meta["phase"] = RL
                ref = self.place.params(_copy_tree(state.params))  # pg_step donates
                state = self._rl_state(state.params)
                self._save(state, ref, meta)
            while meta["phase"] == RL and meta["iteration"] < self.rl_iters:
                state, m = self._rl_iteration(state, ref, pool, meta["iteration"])
                host_memory.release_free_memory()  # kept host memory: once per iteration
                meta["iteration"] += 1
                step = self.sft_steps + meta["iteration"]
                self.writer.write(step, m)
                if c.eval.every_iters and meta["iteration"] % c.eval.every_iters == 0:
                    e = self.evaluate(state.params, pool, f"iter {meta['iteration']}", sampled=False)
                    self.writer.write(step, {f"eval/{k}_success": v["success"]
                                             for k, v in e.items() if "success" in v})
                if self.preempted or meta["iteration"] % c.checkpoint.every_iters == 0:
                    self._save(state, ref, meta)
                if self.preempted:
                    raise Preempted(f"SIGTERM at RL iteration {meta['iteration']}; saved.")
            if meta["phase"] == RL:
                meta["evals"]["final"] = self.evaluate(state.params, pool, "final", sampled=True)
                meta["phase"] = DONE
                self._save(state, ref, meta)
            logging.info("batch shapes per jitted function (one compile each): %s",
                         {k: sorted(v) for k, v in self.shapes_seen.items()})
            cc = self.compile_clock.snapshot()
            logging.info("XLA: %d compiles (%d loaded from the persistent cache, saving %.1f s), "
                         "%.1f s compiling, %.1f s tracing/lowering (all jitted functions, "
                         "rollouts and evaluation included)", cc["compiles"], cc["cache_hits"],
                         cc["cache_saved_s"], cc["compile_s"], cc["trace_s"])
            return {"plan": self.plan, "sft_rows": len(self.sft_rows), "rl_iters": self.rl_iters,
                    "evals": meta["evals"], "state": state, "ref": ref}
        finally:
            signal.signal(signal.SIGTERM, old_handler)
            pool.close()
            self.ckpt.close()
            self.writer.close()
