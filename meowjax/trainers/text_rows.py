"""The free-text interface's training rows (``Interface`` record ``GENERATE``), the
Practitioner's Guide recipe: one row per episode, X = tokens. Its agent (model, chat format,
sampler, play) is ``agents.text.TextAgent``."""

from __future__ import annotations

from typing import Any

import numpy as np

from meowjax.rollout import episodes
from meowjax.trainers import text_steps
from meowjax.trainers.estimator_inputs import UnitMatrices
from meowjax.trainers.interfaces import Interface


def units(agent) -> text_steps.TokenUnits:
    return text_steps.TokenUnits(agent.cfg)


def sft_rows(agent, expert: list[dict[str, Any]]) -> list[dict[str, np.ndarray]]:
    """One row per expert episode, in the agent's chat format."""
    rows = []
    for ex in expert:
        reset = _Reset(ex["objective"], ex["observations"][0])
        ep = episodes.expert_episode(agent.tok, reset, ex["actions"], ex["observations"][1:],
                                     ex["rewards"], fmt=agent.fmt)
        rows.append(_row(ep))
    return rows


def update_rows(trajs) -> list[dict[str, np.ndarray]]:
    return [_row(tr.payload) for tr in trajs]


def layout(trajs, rows, per_row) -> np.ndarray:
    """Rows are episodes: each row's per-token array, zero-padded to the longest."""
    n = max(len(r["tokens"]) for r in rows)
    return np.stack([np.pad(np.asarray(x, np.float32), (0, n - len(x))) for x in per_row])


def matrices(trajs, rows) -> UnitMatrices:
    n = max(len(r["tokens"]) for r in rows)
    keys = np.zeros((len(rows), n), np.int32)
    for i, (tr, r) in enumerate(zip(trajs, rows)):
        keys[i, np.flatnonzero(r["turn_end"])] = [t.state_key for t in tr.turns]
    as_int = lambda f: layout(trajs, rows, [r[f] for r in rows]).astype(np.int32)  # noqa: E731
    return UnitMatrices(layout(trajs, rows, [r["reward"] for r in rows]), as_int("loss_mask"),
                        as_int("turn_end"), keys)


def attach(trajs, rows, adv, ret) -> None:
    for i, row in enumerate(rows):
        n = len(row["tokens"])
        row.update(adv=adv[i, :n].astype(np.float32), ret=ret[i, :n].astype(np.float32))


def rows_per_iter(c, episodes_per_iter: int) -> int:
    return episodes_per_iter


class _Reset:
    """The two ResetResult fields expert_episode reads."""

    def __init__(self, objective: str, observation: str):
        self.objective, self.observation, self.admissible = objective, observation, None


def _row(ep: episodes.Episode) -> dict[str, np.ndarray]:
    r = episodes.episode_to_row(ep)
    return {"tokens": r["tokens"], "loss_mask": r["loss_mask"], "turn_end": r["turn_end"],
            "reward": r["reward"], "old_logp": r["sample_logp"]}


GENERATE = Interface(name="generate", agent="meowjax.agents.text:TextAgent", units=units,
                     sft_rows=sft_rows, update_rows=update_rows, layout=layout,
                     matrices=matrices, attach=attach, rows_per_iter=rows_per_iter)
