"""Trainer for the admissible-command scoring interface (rows = turns, X = turns)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import score_episodes
from meowjax.trainers import data, loop, score_steps


class ScoreTrainer(loop.AgentTrainer):
    interface = "score"
    needs_admissible = True

    def setup_model(self) -> None:
        c = self.c
        if c.model.init != "scratch":
            raise ValueError("policy.interface='score' trains from scratch with a game-text "
                             f"tokenizer; model.init={c.model.init!r} is for interface 'generate'.")
        self.tok = data.game_tokenizer(c, self.workdir, self.expert or
                                       data.expert_data(c, self.sets["sft"][:20]))
        self.cfg = get_preset(c.model.preset, vocab_size=len(self.tok),
                              pad_token_id=self.tok.pad_token_id,
                              eos_token_id=self.tok.eos_token_id, **dict(c.model.overrides))
        self.builder = score_episodes.PromptBuilder(self.tok, c.policy.window, c.policy.max_cands,
                                                    history=c.policy.history)
        self.pad_values = {"cand": c.policy.max_cands}
        self.init_params = lambda key: lm.init_params(self.cfg, key)

    def setup_steps(self) -> None:
        c = self.c
        kw = dict(max_cands=c.policy.max_cands, norm=c.policy.score_norm)
        self.score_fn = score_steps.make_score_fn(self.cfg, temperature=c.policy.temperature, **kw)
        self.sft_step = score_steps.make_sft_step(self.cfg, self.sft_opt,
                                                  lm_coef=c.sft.lm_coef,
                                                  shardings=self.shardings[loop.SFT], **kw)
        self.pg_step = score_steps.make_pg_step(
            self.cfg, self.rl_opt, self.critic_opt, c.rl, temperature=c.policy.temperature,
            needs_critic=self.spec.needs_critic, shardings=self.shardings[loop.RL], **kw)
        self.old_terms = score_steps.make_eval_fns(
            self.cfg, temperature=c.policy.temperature, needs_ref=self.needs_ref,
            needs_critic=self.spec.needs_critic, **kw)

    def batch_row_fields(self) -> dict[str, int]:
        rollout = self.c.rollout.tasks_per_iter * self.c.rollout.group_size  # score_fn's rows
        fields = super().batch_row_fields()
        return {**fields, "rollout.tasks_per_iter * rollout.group_size": rollout}

    def make_sft_rows(self, expert):
        return [r for ex in expert for r in score_episodes.expert_turns(self.builder, **ex)]

    def rows_per_iter_estimate(self) -> int:
        return self.batch_rows * self.c.turns.max_turns // 2

    def play(self, params, pool, tasks, *, group_size, budgets, rng, greedy, key):
        del key  # candidates are drawn on the host from rng
        score = lambda batch: np.asarray(self.score_fn(params, self.place.batch(batch)))
        return score_episodes.collect(
            score, pool, self.builder, tasks, group_size=group_size, max_turns=budgets,
            batch_rows=self.batch_rows, length_buckets=self.c.rollout.length_buckets, rng=rng,
            greedy=greedy, min_rows=self.min_rows)

    def view(self, ep) -> dict[str, Any]:
        return {"won": ep.won, "success_turn": ep.success_turn, "turns": len(ep.turns),
                "reward": ep.total_reward, "invalid": sum(t.invalid for t in ep.turns),
                "task_id": ep.task_id, "group_id": ep.group_id,
                "overflow": bool(ep.info.get("overflow", False))}

    def update_rows(self, eps):
        rows = []
        for ep in eps:
            for turn in ep.turns:
                row = dict(turn.row)
                row["chosen"] = np.int32(turn.chosen)
                row["old_logp"] = np.float32(turn.logp)
                rows.append(row)
        return rows

    def _per_turn(self, eps, per_row: Sequence[Any]) -> np.ndarray:
        t_max = max(len(e.turns) for e in eps)
        out = np.zeros((len(eps), t_max), np.float32)
        k = 0
        for i, ep in enumerate(eps):
            n = len(ep.turns)
            out[i, :n] = [float(x) for x in per_row[k:k + n]]
            k += n
        return out

    def matrices(self, eps, rows, values):
        rewards = self._per_turn(eps, [t.reward for e in eps for t in e.turns])
        mask = self._per_turn(eps, [1] * len(rows)).astype(np.int32)
        return rewards, mask, mask, self._per_turn(eps, values)

    def kl_matrix(self, eps, rows, old, ref):
        return self._per_turn(eps, [o - r for o, r in zip(old, ref)])

    def attach(self, eps, rows, adv, ret, ref, values) -> None:
        k = 0
        for i, ep in enumerate(eps):
            for t in range(len(ep.turns)):
                rows[k].update(adv=np.float32(adv[i, t]), ret=np.float32(ret[i, t]),
                               old_value=np.float32(values[k]), ref_logp=np.float32(ref[k]))
                k += 1
