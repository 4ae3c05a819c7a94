"""Trainer for the admissible-command scoring interface (rows = turns, X = turns); its agent
(model, prompts, play) is ``agents.score.ScoreAgent``."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from meowjax.agents.score import ScoreAgent
from meowjax.rollout import score_episodes
from meowjax.trainers import estimator_inputs, loop, score_steps


class ScoreTrainer(loop.AgentTrainer):
    agent_cls = ScoreAgent

    @property
    def builder(self) -> score_episodes.PromptBuilder:
        return self.agent.builder

    @property
    def score_fn(self):
        return self.agent.score_fn

    def setup_steps(self) -> None:
        c = self.c
        self.units = score_steps.ScoreUnits(self.cfg, max_cands=c.policy.max_cands,
                                            norm=c.policy.score_norm)
        # rl.tis="auto": truncated importance sampling where the model computes in bf16.
        self.objective = self.objective.resolve_tis(self.cfg.dtype)

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
        return estimator_inputs.UnitMatrices(
            self.layout(trajs, rows, [t.reward for t in turns]), mask, mask, keys)

    def attach(self, trajs, rows, adv, ret) -> None:
        k = 0
        for i, tr in enumerate(trajs):
            for t in range(tr.num_turns):
                rows[k].update(adv=np.float32(adv[i, t]), ret=np.float32(ret[i, t]))
                k += 1
