"""Trainer for free-text actions, the Practitioner's Guide recipe (rows = episodes, X = tokens);
its agent (model, chat format, sampler, play) is ``agents.text.TextAgent``."""

from __future__ import annotations

import numpy as np

from meowjax.agents.text import TextAgent
from meowjax.rollout import episodes
from meowjax.trainers import estimator_inputs, loop, text_steps


class TextTrainer(loop.AgentTrainer):
    agent_cls = TextAgent

    @property
    def fmt(self):
        return self.agent.fmt

    @property
    def sampler(self):
        return self.agent.sampler

    def setup_steps(self) -> None:
        self.units = text_steps.TokenUnits(self.cfg)
        # rl.tis="auto": truncated importance sampling where the model computes in bf16.
        self.objective = self.objective.resolve_tis(self.cfg.dtype)

    def make_sft_rows(self, expert):
        rows = []
        for ex in expert:
            reset = _Reset(ex["objective"], ex["observations"][0])
            ep = episodes.expert_episode(self.tok, reset, ex["actions"], ex["observations"][1:],
                                         ex["rewards"], fmt=self.fmt)
            rows.append(_row(ep))
        return rows

    def rows_per_iter_estimate(self) -> int:
        return self.batch_rows

    def update_rows(self, trajs):
        return [_row(tr.payload) for tr in trajs]

    def layout(self, trajs, rows, per_row) -> np.ndarray:
        """Rows are episodes: each row's per-token array, zero-padded to the longest."""
        n = max(len(r["tokens"]) for r in rows)
        return np.stack([np.pad(np.asarray(x, np.float32), (0, n - len(x))) for x in per_row])

    def matrices(self, trajs, rows):
        n = max(len(r["tokens"]) for r in rows)
        keys = np.zeros((len(rows), n), np.int32)
        for i, (tr, r) in enumerate(zip(trajs, rows)):
            keys[i, np.flatnonzero(r["turn_end"])] = [t.state_key for t in tr.turns]
        as_int = lambda f: self.layout(trajs, rows, [r[f] for r in rows]).astype(np.int32)
        return estimator_inputs.UnitMatrices(
            self.layout(trajs, rows, [r["reward"] for r in rows]), as_int("loss_mask"),
            as_int("turn_end"), keys)

    def attach(self, trajs, rows, adv, ret) -> None:
        for i, row in enumerate(rows):
            n = len(row["tokens"])
            row.update(adv=adv[i, :n].astype(np.float32), ret=ret[i, :n].astype(np.float32))


class _Reset:
    """The two ResetResult fields expert_episode reads."""

    def __init__(self, objective: str, observation: str):
        self.objective, self.observation, self.admissible = objective, observation, None


def _row(ep: episodes.Episode) -> dict[str, np.ndarray]:
    r = episodes.episode_to_row(ep)
    return {"tokens": r["tokens"], "loss_mask": r["loss_mask"], "turn_end": r["turn_end"],
            "reward": r["reward"], "old_logp": r["sample_logp"]}
