"""The host loop for the admissible-command scoring interface: SFT -> RL -> evaluation.

Read top to bottom: games, tokenizer, model, SFT on expert walkthroughs, evaluation of the
starting policy, RL iterations (collect groups of episodes, advantages, epochs over fixed-shape
minibatches), periodic evaluation and checkpoints, final evaluation. Host randomness comes from
``np.random.default_rng([seed, phase, index])``, so a resumed run replays the same data order and
sampling as an uninterrupted one.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from meowjax.envs.pool import EnvPool
from meowjax.envs.registry import EnvSpec
from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rl import estimators
from meowjax.rollout import buckets, score_episodes
from meowjax.trainers import checkpoint, data, evaluation, metrics_log, optim, score_steps

SFT, RL, DONE = "sft", "rl", "done"


class Preempted(Exception):
    """SIGTERM arrived: the state was saved; rerun the same command to resume."""


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


def _device(batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in batch.items()}


def budgets_for(c: ml_collections.ConfigDict, n: int, rng: np.random.Generator) -> list[int]:
    """Per-episode turn budgets: BudgetMix draws each one from ``turns.budget_mix``."""
    if len(c.turns.budget_mix):
        return [int(b) for b in rng.choice(np.asarray(c.turns.budget_mix), size=n)]
    return [int(c.turns.max_turns)] * n


def advantages_for(c, spec, eps, values_ET: np.ndarray | None):
    """Per-turn advantages and returns [E, T] from the registry's estimator (turns = tokens)."""
    t_max = max(len(e.turns) for e in eps)
    e = len(eps)
    rewards = np.zeros((e, t_max), np.float32)
    mask = np.zeros((e, t_max), np.int32)
    for i, ep in enumerate(eps):
        rewards[i, :len(ep.turns)] = [t.reward for t in ep.turns]
        mask[i, :len(ep.turns)] = 1
    inputs = estimators.EstimatorInputs(
        rewards_BL=jnp.asarray(rewards), mask_BL=jnp.asarray(mask),
        row_weight_B=jnp.ones((e,), jnp.float32),
        values_BL=None if values_ET is None else jnp.asarray(values_ET),
        turn_end_BL=jnp.asarray(mask),
        group_ids_B=jnp.asarray([ep.group_id for ep in eps], jnp.int32))
    adv, ret = estimators.compute_advantages(spec.name, inputs, gamma=c.rl.gamma, lam=c.rl.lam,
                                             use_std=c.rl.grpo_use_std)
    return np.asarray(adv), np.asarray(ret)


class ScoreTrainer:
    """Holds what a run needs; ``run()`` executes (or resumes) the whole schedule."""

    def __init__(self, c: ml_collections.ConfigDict, workdir: str):
        self.c, self.workdir = c, workdir
        os.makedirs(workdir, exist_ok=True)
        self.spec = estimators.validate_estimator(c.rl.estimator)
        self.plan = data.budget_plan(c)
        self.sets = data.game_sets(c)
        expert = data.expert_data(c, self.sets["sft"][:self.plan["sft_demos"]])
        self.tok = data.game_tokenizer(c, workdir, expert or data.expert_data(c, self.sets["sft"][:20]))
        self.cfg = get_preset(c.model.preset, vocab_size=len(self.tok),
                              pad_token_id=self.tok.pad_token_id, eos_token_id=self.tok.eos_token_id,
                              **dict(c.model.overrides))
        self.builder = score_episodes.PromptBuilder(self.tok, c.policy.window, c.policy.max_cands)
        kw = dict(max_cands=c.policy.max_cands, norm=c.policy.score_norm)
        self.score_fn = score_steps.make_score_fn(self.cfg, temperature=c.policy.temperature, **kw)
        self.sft_rows = [r for ex in expert for r in score_episodes.expert_turns(self.builder, **ex)]
        self.sft_steps = c.sft.epochs * -(-len(self.sft_rows) // c.sft.batch_rows)
        per_iter = c.rollout.tasks_per_iter * c.rollout.group_size
        self.rl_iters = self.plan["rl_episodes"] // per_iter
        self.batch_rows = per_iter
        rl_steps = max(1, self.rl_iters * c.rl.epochs * -(-per_iter * c.turns.max_turns //
                                                          c.rl.minibatch_rows))
        self.sft_opt = optim.optimizer_from_config(c.sft, max(1, self.sft_steps))
        self.rl_opt = optim.optimizer_from_config(c.rl, rl_steps)
        critic = ml_collections.ConfigDict(c.rl.to_dict())
        critic.lr = c.rl.critic_lr
        self.critic_opt = optim.optimizer_from_config(critic, rl_steps)
        self.sft_step = score_steps.make_sft_step(self.cfg, self.sft_opt, **kw)
        self.pg_step = score_steps.make_pg_step(
            self.cfg, self.rl_opt, self.critic_opt, c.rl, temperature=c.policy.temperature,
            needs_critic=self.spec.needs_critic, **kw)
        self.old_terms = score_steps.make_eval_fns(
            self.cfg, temperature=c.policy.temperature, needs_critic=self.spec.needs_critic, **kw)
        self.writer = metrics_log.MetricsWriter(workdir)
        self.ckpt = checkpoint.Checkpointer(workdir, c.checkpoint.max_to_keep)
        self.preempted = False

    # ----- state ---------------------------------------------------------------------------
    def _sft_state(self):
        params = lm.init_params(self.cfg, jax.random.key(self.c.seed))
        return optim.TrainState(step=jnp.int32(0), params=params,
                                opt_state=self.sft_opt.init(params), value_params={},
                                value_opt_state={})

    def _rl_state(self, params):
        vparams, vopt = {}, {}
        if self.spec.needs_critic:
            vparams = dict(lm.init_params(self.cfg, jax.random.key(self.c.seed + 1)))
            vparams["value_head"] = score_steps.init_value_head(self.cfg)
            vopt = self.critic_opt.init(vparams)
        return optim.TrainState(step=jnp.int32(0), params=params,
                                opt_state=self.rl_opt.init(params), value_params=vparams,
                                value_opt_state=vopt)

    def _save(self, state, ref, meta):
        self.ckpt.save(int(meta["ckpt_index"]), {"state": state, "ref": ref}, meta)
        meta["ckpt_index"] += 1

    def _restore(self):
        """(state, ref, meta) from the latest checkpoint, or a fresh start."""
        state = self._sft_state()
        meta = {"phase": SFT, "sft_step": 0, "iteration": 0, "ckpt_index": 0, "evals": {}}
        if self.ckpt.latest_step() is None:
            return state, state.params, meta
        probe = self.ckpt.manager.restore(self.ckpt.latest_step(), args=checkpoint.ocp.args.Composite(
            meta=checkpoint.ocp.args.JsonRestore()))["meta"]
        if probe["phase"] != SFT:
            state = self._rl_state(state.params)
        restored, meta = self.ckpt.restore({"state": state, "ref": state.params})
        logging.info("Resumed from checkpoint: phase %s, sft_step %d, iteration %d",
                     meta["phase"], meta["sft_step"], meta["iteration"])
        return restored["state"], restored["ref"], meta

    # ----- phases --------------------------------------------------------------------------
    def _host_score(self, params):
        return lambda batch: np.asarray(self.score_fn(params, _device(batch)))

    def evaluate(self, params, pool, tag: str, *, sampled: bool) -> dict[str, Any]:
        c = self.c
        out = {}
        for split in ("eval", "eval_hard"):
            tasks = self.sets[split]
            if not tasks:
                continue
            eps = evaluation.play(self._host_score(params), pool, self.builder, tasks, samples=1,
                                  max_turns=c.turns.eval_max_turns, batch_rows=self.batch_rows,
                                  length_buckets=c.rollout.length_buckets, rng=_rng(c.seed, 9),
                                  greedy=True)
            out[split] = evaluation.success_summary(eps)
            if sampled and split == "eval":
                s_eps = evaluation.play(
                    self._host_score(params), pool, self.builder, tasks, samples=c.eval.num_samples,
                    max_turns=c.turns.eval_max_turns, batch_rows=self.batch_rows,
                    length_buckets=c.rollout.length_buckets, rng=_rng(c.seed, 10), greedy=False)
                res = evaluation.pass_at_k_t(s_eps, c.eval.pass_ks, c.eval.pass_ts)
                out["pass_at_k_t"] = res.to_json()
        logging.info("eval %s: %s", tag, {k: v.get("success") for k, v in out.items()
                                           if isinstance(v, dict) and "success" in v})
        return out

    def _sft(self, state, meta):
        c = self.c
        steps_per_epoch = -(-len(self.sft_rows) // c.sft.batch_rows)
        while meta["sft_step"] < self.sft_steps and not self.preempted:
            epoch, k = divmod(meta["sft_step"], steps_per_epoch)
            order = _rng(c.seed, 1, epoch).permutation(len(self.sft_rows))
            chunk = [self.sft_rows[i] for i in order[k * c.sft.batch_rows:(k + 1) * c.sft.batch_rows]]
            batch = buckets.pack_rows(chunk, length_buckets=c.rollout.length_buckets,
                                      num_rows=c.sft.batch_rows, pad_values={"cand": c.policy.max_cands})
            state, m = self.sft_step(state, _device(batch))
            meta["sft_step"] += 1
            if meta["sft_step"] % c.log.every_steps == 0 or meta["sft_step"] == self.sft_steps:
                self.writer.write(meta["sft_step"], m)
        return state

    def _collect(self, params, pool, iteration):
        c = self.c
        rng = _rng(c.seed, 2, iteration)
        tasks = list(rng.choice(self.sets["train"], size=c.rollout.tasks_per_iter, replace=False))
        budgets = budgets_for(c, len(tasks) * c.rollout.group_size, rng)
        return score_episodes.collect(
            self._host_score(params), pool, self.builder, tasks, group_size=c.rollout.group_size,
            max_turns=budgets, batch_rows=self.batch_rows, length_buckets=c.rollout.length_buckets,
            rng=rng)

    def _rl_iteration(self, state, ref, pool, it):
        c = self.c
        t0 = time.time()
        eps = self._collect(state.params, pool, it)
        t_roll = time.time() - t0
        rows = []
        for ep in eps:
            for turn in ep.turns:
                row = dict(turn.row)
                row["chosen"] = np.int32(turn.chosen)
                row["old_logp"] = np.float32(turn.logp)
                rows.append(row)
        # Old log-probs are recomputed (they equal the sampled ones up to rounding), reference
        # log-probs and critic values come from the frozen / current networks.
        old, refl, vals = [], [], []
        mb = c.rl.minibatch_rows
        for start in range(0, len(rows), mb):
            batch = buckets.pack_rows(rows[start:start + mb], length_buckets=c.rollout.length_buckets,
                                      num_rows=mb, pad_values={"cand": c.policy.max_cands})
            lp, rl_, v = self.old_terms(state.params, ref, state.value_params, _device(batch))
            n = min(mb, len(rows) - start)
            old.append(np.asarray(lp)[:n]); refl.append(np.asarray(rl_)[:n]); vals.append(np.asarray(v)[:n])
        old, refl, vals = map(np.concatenate, (old, refl, vals))
        # KL to the reference folded into the reward (when not used as a loss).
        if c.rl.kl_coef > 0 and not c.rl.kl_in_loss:
            k = 0
            for ep in eps:
                for turn in ep.turns:
                    turn.reward -= c.rl.kl_coef * float(old[k] - refl[k])
                    k += 1
        values_ET = None
        if self.spec.needs_critic:
            t_max = max(len(e.turns) for e in eps)
            values_ET = np.zeros((len(eps), t_max), np.float32)
            k = 0
            for i, ep in enumerate(eps):
                values_ET[i, :len(ep.turns)] = vals[k:k + len(ep.turns)]
                k += len(ep.turns)
        adv_ET, ret_ET = advantages_for(c, self.spec, eps, values_ET)
        k = 0
        for i, ep in enumerate(eps):
            for t in range(len(ep.turns)):
                rows[k]["adv"] = np.float32(adv_ET[i, t])
                rows[k]["ret"] = np.float32(ret_ET[i, t])
                rows[k]["old_value"] = np.float32(vals[k])
                rows[k]["ref_logp"] = np.float32(refl[k])
                k += 1
        t1 = time.time()
        rng = _rng(c.seed, 3, it)
        metrics_acc: dict[str, list] = {}
        eff = []
        for _ in range(c.rl.epochs):
            order = rng.permutation(len(rows))
            for start in range(0, len(rows), mb):
                chunk = [rows[j] for j in order[start:start + mb]]
                batch = buckets.pack_rows(chunk, length_buckets=c.rollout.length_buckets,
                                          num_rows=mb, pad_values={"cand": c.policy.max_cands})
                eff.append(buckets.padding_efficiency(batch))
                state, m = self.pg_step(state, _device(batch))
                for key, v in m.items():
                    metrics_acc.setdefault(key, []).append(v)
        metrics = {k: float(np.mean(jax.device_get(v))) for k, v in metrics_acc.items()}
        t_upd = time.time() - t1
        n_turns = sum(len(e.turns) for e in eps)
        metrics.update({
            "rollout/success": float(np.mean([e.won for e in eps])),
            "rollout/return": float(np.mean([e.total_reward for e in eps])),
            "rollout/episode_turns": float(np.mean([len(e.turns) for e in eps])),
            "rollout/invalid_rate": sum(t.invalid for e in eps for t in e.turns) / max(1, n_turns),
            "rollout/logp_mismatch": float(np.max(np.abs(old - np.asarray(
                [t.logp for e in eps for t in e.turns])))),
            "time/rollout_s": t_roll, "time/update_s": t_upd,
            "perf/padding_efficiency": float(np.mean(eff)),
            "perf/turns_per_s": n_turns / max(t_roll, 1e-9)})
        return state, metrics

    # ----- the schedule --------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        c = self.c
        state, ref, meta = self._restore()
        pool = EnvPool(EnvSpec(c.env.family, data.env_kwargs(c, admissible=True)),
                       num_workers=c.env.num_workers, step_timeout_s=c.env.step_timeout_s)
        old_handler = signal.signal(signal.SIGTERM, lambda *_: setattr(self, "preempted", True))
        try:
            if meta["phase"] == SFT:
                if "before_sft" not in meta["evals"] and self.plan["sft_demos"] == 0:
                    pass
                state = self._sft(state, meta)
                if self.preempted:
                    self._save(state, state.params, meta)
                    raise Preempted(f"SIGTERM during SFT at step {meta['sft_step']}; saved.")
                meta["evals"]["start"] = self.evaluate(state.params, pool, "start", sampled=True)
                meta["phase"] = RL
                ref = state.params
                state = self._rl_state(state.params)
                self._save(state, ref, meta)
            while meta["phase"] == RL and meta["iteration"] < self.rl_iters:
                it = meta["iteration"]
                state, m = self._rl_iteration(state, ref, pool, it)
                meta["iteration"] += 1
                self.writer.write(self.sft_steps + meta["iteration"], m)
                if c.eval.every_iters and meta["iteration"] % c.eval.every_iters == 0:
                    e = self.evaluate(state.params, pool, f"iter {meta['iteration']}", sampled=False)
                    self.writer.write(self.sft_steps + meta["iteration"],
                                      {f"eval/{k}_success": v["success"] for k, v in e.items()
                                       if isinstance(v, dict) and "success" in v})
                if self.preempted or meta["iteration"] % c.checkpoint.every_iters == 0:
                    self._save(state, ref, meta)
                if self.preempted:
                    raise Preempted(f"SIGTERM at RL iteration {meta['iteration']}; saved.")
            if meta["phase"] == RL:
                meta["evals"]["final"] = self.evaluate(state.params, pool, "final", sampled=True)
                meta["phase"] = DONE
                self._save(state, ref, meta)
            return {"plan": self.plan, "sft_rows": len(self.sft_rows), "rl_iters": self.rl_iters,
                    "evals": meta["evals"], "state": state}
        finally:
            signal.signal(signal.SIGTERM, old_handler)
            pool.close()
            self.ckpt.close()
            self.writer.close()
