"""Per-turn terms of the admissible-command scoring interface (one "token" per turn).

Rows are turns (packed prompt + candidates, see ``meowjax.rollout.scoring``); every per-turn
quantity is a ``[B, 1]`` array so the token-level losses of ``meowjax.rl`` apply unchanged.

The losses are ``meowjax.rl.objective``'s (built by ``meowjax.trainers.steps``); this module
supplies the per-turn terms (``ScoreUnits``); the rollout's scoring function is
``rollout.scoring.make_score_fn``.

  LM = -token_mean over prompt tokens (objective, observations, past actions) of
       log p_LM(tok_t | tok_<t): an auxiliary next-token loss on the game text. The candidate
       loss alone only says which command is right; the LM loss teaches the model to copy the
       objective's entity names, which ranking unseen names needs. Same forward pass: ~free.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from meowjax.models.config import ModelConfig
from meowjax.rl import objective, reduce
from meowjax.rollout import scoring

PACKED_KEYS = ("tokens", "seg", "positions", "src", "cand", "mask", "num_cands", "prompt_len")


def policy_logp(params, cfg: ModelConfig, batch: dict, *, max_cands: int, temperature: float,
                norm: str) -> jax.Array:
    """log pi_BC over each row's candidates."""
    scores_BC = scoring.candidate_scores(params, cfg, batch, max_cands, norm)
    return scoring.candidate_logp(scores_BC, temperature)


def policy_logp_and_lm(params, cfg: ModelConfig, batch: dict, *, max_cands: int,
                       temperature: float, norm: str) -> tuple[jax.Array, jax.Array]:
    """(log pi_BC, LM): the policy and the auxiliary prompt next-token NLL (row-weighted token
    mean), from one forward pass."""
    cand_logp_BL, next_logp_BL = scoring.packed_token_logp(params, cfg, batch)
    scores_BC = scoring.scores_from_token_logp(cand_logp_BL, batch, max_cands, norm)
    lm_nll = -reduce.masked_aggregate(next_logp_BL, scoring.prompt_lm_mask(batch),
                                      batch["row_weight"], "token_mean")
    return scoring.candidate_logp(scores_BC, temperature), lm_nll


def chosen_logp(logp_BC: jax.Array, chosen_B: jax.Array) -> jax.Array:
    return jnp.take_along_axis(logp_BC, chosen_B[:, None].astype(jnp.int32), axis=1)[:, 0]


def turn_values(vparams, cfg: ModelConfig, batch: dict) -> jax.Array:
    """V_B read at each row's last prompt token (meowjax.models.value params: trunk + head)."""
    hidden_BLE = scoring.packed_hidden(vparams, cfg, batch)
    h_BE = scoring.prompt_last_hidden(hidden_BLE, batch["prompt_len"]).astype(jnp.float32)
    head = vparams["value_head"]
    return (h_BE @ head["kernel"].astype(jnp.float32))[:, 0] + head["bias"][0]


class ScoreUnits:
    """The scoring interface's units: one per row (a turn), ``U = 1``.

        log pi(u) = log softmax_c(score_c / tau)[chosen],   H(u) = H(softmax_c(score_c / tau))

    and the auxiliary LM loss over the row's prompt tokens (``policy_logp_and_lm``)."""

    def __init__(self, cfg: ModelConfig, *, max_cands: int, norm: str):
        self.cfg, self.max_cands, self.norm = cfg, max_cands, norm

    def mask(self, batch: dict) -> jax.Array:
        return jnp.ones((batch["chosen"].shape[0], 1), jnp.int32)

    def policy_terms(self, params, batch: dict, temperature: float, *,
                     with_lm: bool = True) -> objective.PolicyTerms:
        kw = dict(max_cands=self.max_cands, temperature=temperature, norm=self.norm)
        if with_lm:
            logp_BC, lm_nll = policy_logp_and_lm(params, self.cfg, batch, **kw)
        else:
            logp_BC, lm_nll = policy_logp(params, self.cfg, batch, **kw), jnp.zeros((), jnp.float32)
        return objective.PolicyTerms(logp_BU=chosen_logp(logp_BC, batch["chosen"])[:, None],
                                     entropy_BU=scoring.candidate_entropy(logp_BC)[:, None],
                                     mask_BU=self.mask(batch), lm_nll=lm_nll)

    def values(self, vparams, batch: dict) -> jax.Array:
        return turn_values(vparams, self.cfg, batch)[:, None]
