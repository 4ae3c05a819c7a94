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

    def check_config(self) -> None:
        if self.c.policy.window is None:
            raise ValueError("policy.interface='score' needs policy.window (the past turns "
                             "repeated in each prompt, e.g. 0 with policy.history=True, or 2).")

    def setup_model(self) -> None:
        c = self.c
        if c.model.init != "scratch":
            raise ValueError("policy.interface='score' trains from scratch with a game-text "
                             f"tokenizer; model.init={c.model.init!r} is for interface 'generate'.")
        self.tok = data.game_tokenizer(c, self.workdir, self.tokenizer_text)
        self.cfg = get_preset(c.model.preset, vocab_size=len(self.tok),
                              pad_token_id=self.tok.pad_token_id,
                              eos_token_id=self.tok.eos_token_id, **dict(c.model.overrides))
        self.builder = score_episodes.PromptBuilder(self.tok, c.policy.window, c.policy.max_cands,
                                                    history=c.policy.history,
                                                    state_budget=c.policy.state_budget)
        self.pad_values = {"cand": c.policy.max_cands}
        self.init_params = lambda key: lm.init_params(self.cfg, key)

    def setup_steps(self) -> None:
        c = self.c
        kw = dict(max_cands=c.policy.max_cands, norm=c.policy.score_norm)
        self.score_fn = score_steps.make_score_fn(self.cfg, **kw)
        self.units = score_steps.ScoreUnits(self.cfg, **kw)
        # rl.tis="auto": truncated importance sampling where the model computes in bf16.
        self.objective = self.objective.resolve_tis(self.cfg.dtype)

    forced: tuple[int, str] | None = None

    def set_forced_action(self, forced: tuple[int, str] | None) -> None:
        """From now on every episode plays ``command`` at turn t (``forced = (t, command)``)
        where it is admissible; None: the policy chooses every turn (the forced-action probe)."""
        self.forced = forced

    def set_state_budget(self, on: bool) -> None:
        """Whether prompts state the turn budget from now on (an evaluation that prompts a
        policy otherwise than it was trained: the two Pass@(K,T) modes)."""
        self.builder.state_budget = bool(on)

    def row_units(self, x_U: np.ndarray, row: dict[str, np.ndarray]) -> np.float32:
        return np.float32(x_U[0])

    def batch_row_fields(self) -> dict[str, int]:
        rollout = self.c.rollout.tasks_per_iter * self.c.rollout.group_size  # score_fn's rows
        fields = super().batch_row_fields()
        return {**fields, "rollout.tasks_per_iter * rollout.group_size": rollout}

    def make_sft_rows(self, expert):
        # A prompt that states the budget shows the demonstrations under the training budget.
        budget = int(self.c.turns.max_turns)
        return [r for ex in expert
                for r in score_episodes.expert_turns(self.builder, **ex, budget=budget)]

    def rows_per_iter_estimate(self) -> int:
        return self.batch_rows * self.c.turns.max_turns // 2

    def play(self, params, pool, tasks, *, group_size, budgets, rng, greedy, key, temperature,
             offset=0):
        """Candidates are drawn on the host: episode e (of the caller's list) from its own
        stream ``default_rng([base, e])``, ``base`` one draw of ``rng``."""
        del key
        tau = np.float32(temperature)
        score = lambda batch: np.asarray(self.score_fn(params, self.rollout_place.batch(batch),
                                                       tau))
        base, first = int(rng.integers(2**63)), offset * group_size
        rngs = [np.random.default_rng([base, first + i]) for i in range(len(tasks) * group_size)]
        eps = score_episodes.collect(
            score, pool, self.builder, tasks, group_size=group_size, max_turns=budgets,
            batch_rows=self.batch_rows, length_buckets=self.c.rollout.length_buckets, rng=rngs,
            greedy=greedy, min_rows=self.min_rows, group_offset=offset, forced=self.forced)
        return [score_episodes.to_trajectory(e) for e in eps]

    def update_rows(self, trajs):
        rows = []
        for tr in trajs:
            for turn in tr.payload.turns:
                row = dict(turn.row)
                row["chosen"] = np.int32(turn.chosen)
                row["old_logp"] = np.float32(turn.logp)
                rows.append(row)
        return rows

    def layout(self, trajs, rows, per_row: Sequence[Any]) -> np.ndarray:
        """Rows are turns, in episode order: episode i's turns fill row i of ``[E, T_max]``."""
        out = np.zeros((len(trajs), max(t.num_turns for t in trajs)), np.float32)
        k = 0
        for i, tr in enumerate(trajs):
            n = tr.num_turns
            out[i, :n] = [float(x) for x in per_row[k:k + n]]
            k += n
        return out

    def matrices(self, trajs, rows):
        turns = [t for tr in trajs for t in tr.turns]
        mask = self.layout(trajs, rows, [1] * len(rows)).astype(np.int32)
        keys = self.layout(trajs, rows, [0] * len(rows)).astype(np.int32)
        for i, tr in enumerate(trajs):  # int32 keys: not through the float32 layout
            keys[i, :tr.num_turns] = [t.state_key for t in tr.turns]
        return self.layout(trajs, rows, [t.reward for t in turns]), mask, mask, keys

    def attach(self, trajs, rows, adv, ret) -> None:
        k = 0
        for i, tr in enumerate(trajs):
            for t in range(tr.num_turns):
                rows[k].update(adv=np.float32(adv[i, t]), ret=np.float32(ret[i, t]))
                k += 1
