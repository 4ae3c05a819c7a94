"""The scoring interface's training rows (``Interface`` record ``SCORE``): one row per turn,
X = turns. Its agent (model, prompts, play) is ``agents.score.ScoreAgent``."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from meowjax.rollout import score_episodes
from meowjax.trainers import score_steps
from meowjax.trainers.estimator_inputs import UnitMatrices
from meowjax.trainers.interfaces import Interface


def units(agent) -> score_steps.ScoreUnits:
    return score_steps.ScoreUnits(agent.cfg, max_cands=agent.c.policy.max_cands,
                                  norm=agent.c.policy.score_norm)


def sft_rows(agent, expert: list[dict[str, Any]]) -> list[dict[str, np.ndarray]]:
    """One row per expert turn. A prompt that states the budget shows the demonstrations under
    the training budget."""
    budget = int(agent.c.turns.max_turns)
    return [r for ex in expert
            for r in score_episodes.expert_turns(agent.builder, **ex, budget=budget)]


def update_rows(trajs) -> list[dict[str, np.ndarray]]:
    rows = []
    for tr in trajs:
        for turn in tr.payload.turns:
            row = dict(turn.row)
            row["chosen"] = np.int32(turn.chosen)
            row["old_logp"] = np.float32(turn.logp)
            rows.append(row)
    return rows


def layout(trajs, rows, per_row: Sequence[Any]) -> np.ndarray:
    """Rows are turns, in episode order: episode i's turns fill row i of ``[E, T_max]``."""
    out = np.zeros((len(trajs), max(t.num_turns for t in trajs)), np.float32)
    k = 0
    for i, tr in enumerate(trajs):
        n = tr.num_turns
        out[i, :n] = [float(x) for x in per_row[k:k + n]]
        k += n
    return out


def matrices(trajs, rows) -> UnitMatrices:
    turns = [t for tr in trajs for t in tr.turns]
    mask = layout(trajs, rows, [1] * len(rows)).astype(np.int32)
    keys = layout(trajs, rows, [0] * len(rows)).astype(np.int32)
    for i, tr in enumerate(trajs):  # int32 keys: not through the float32 layout
        keys[i, :tr.num_turns] = [t.state_key for t in tr.turns]
    return UnitMatrices(layout(trajs, rows, [t.reward for t in turns]), mask, mask, keys)


def attach(trajs, rows, adv, ret) -> None:
    k = 0
    for i, tr in enumerate(trajs):
        for t in range(tr.num_turns):
            rows[k].update(adv=np.float32(adv[i, t]), ret=np.float32(ret[i, t]))
            k += 1


def row_units(x_U: np.ndarray, row: dict[str, np.ndarray]) -> np.float32:
    """A turn row is one unit."""
    return np.float32(x_U[0])


def rows_per_iter(c, episodes: int) -> int:
    return episodes * c.turns.max_turns // 2


def batch_row_fields(c) -> dict[str, int]:
    """The rollout's scoring batch also divides over the mesh."""
    return {"rollout.tasks_per_iter * rollout.group_size":
            c.rollout.tasks_per_iter * c.rollout.group_size}


SCORE = Interface(name="score", agent="meowjax.agents.score:ScoreAgent", units=units,
                  sft_rows=sft_rows, update_rows=update_rows, layout=layout, matrices=matrices,
                  attach=attach, rows_per_iter=rows_per_iter, row_units=row_units,
                  batch_row_fields=batch_row_fields)
