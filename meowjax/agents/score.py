"""The admissible-command scoring interface: each turn the model scores the env's admissible
commands (``rollout.scoring``) and plays one; a game-text model trained from scratch."""

from __future__ import annotations

import numpy as np

from meowjax.agents.base import Agent
from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import score_episodes, scoring


class ScoreAgent(Agent):
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
        self.tok = self.game_tokenizer()
        self.cfg = get_preset(c.model.preset, vocab_size=len(self.tok),
                              pad_token_id=self.tok.pad_token_id,
                              eos_token_id=self.tok.eos_token_id, **dict(c.model.overrides))
        self.builder = score_episodes.PromptBuilder(self.tok, c.policy.window, c.policy.max_cands,
                                                    history=c.policy.history,
                                                    state_budget=c.policy.state_budget)
        self.pad_values = {"cand": c.policy.max_cands}
        self.init_params = lambda key: lm.init_params(self.cfg, key)

    def setup_play(self) -> None:
        self.score_fn = scoring.make_score_fn(self.cfg, max_cands=self.c.policy.max_cands,
                                              norm=self.c.policy.score_norm)

    forced: tuple[int, str] | None = None

    def set_forced_action(self, forced: tuple[int, str] | None) -> None:
        """From now on every episode plays ``command`` at turn t (``forced = (t, command)``)
        where it is admissible; None: the policy chooses every turn (the forced-action probe)."""
        self.forced = forced

    def set_state_budget(self, on: bool) -> None:
        """Whether prompts state the turn budget from now on (an evaluation that prompts a
        policy otherwise than it was trained: the two Pass@(K,T) modes)."""
        self.builder.state_budget = bool(on)

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
