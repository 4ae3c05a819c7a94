"""Per-token terms of free-text actions (the Practitioner's Guide recipe): one row per episode.

Rows are whole multi-turn token sequences ``[B, L]`` (see ``meowjax.rollout.episodes``). The
log-prob of token t comes from the logits at t - 1:

    logp_BL[:, t] = log_softmax(logits_BL[:, t - 1] / tau)[tokens[:, t]],   logp_BL[:, 0] = 0

and the value of the state before token t is read at t - 1 likewise. Only ``loss_mask`` tokens
(the agent's, including its end-of-turn token) enter any loss.

The losses are ``meowjax.rl.objective``'s (built by ``meowjax.trainers.steps``); this module
supplies the per-token terms (``TokenUnits``).
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from meowjax.models import lm, value
from meowjax.models.config import ModelConfig
from meowjax.rl import objective, reduce


def _shift_right(x_BL: jax.Array) -> jax.Array:
    """out[:, t] = x[:, t - 1], out[:, 0] = 0 (predictions from the previous position)."""
    return jnp.pad(x_BL[:, :-1], ((0, 0), (1, 0)))


def token_terms(params, cfg: ModelConfig, batch: dict, temperature: float):
    """(logp_BL, entropy_BL) aligned with the tokens they score (column 0 is 0):

        logp_BL[:, t] = log_softmax(logits[:, t - 1] / tau)[tokens[:, t]]
        H_BL[:, t]    = H(softmax(logits[:, t - 1] / tau))

    Every position is scored against the next token (the last one against a dummy 0) by the
    fused `lm.token_logprobs_entropy`, then shifted right: the [B, L, V] logits are neither
    sliced nor copied, and no full-vocab log_softmax is materialised.
    """
    tokens_BL = batch["tokens"]
    positions = lm.positions_from_mask(batch["mask"])
    logits_BLV = lm.forward(params, cfg, tokens_BL, positions, batch["mask"])
    next_BL = jnp.pad(tokens_BL[:, 1:], ((0, 0), (0, 1)))
    logp_BL, ent_BL = lm.token_logprobs_entropy(logits_BLV, next_BL, temperature)
    return _shift_right(logp_BL), _shift_right(ent_BL)


def token_values(vparams, cfg: ModelConfig, batch: dict) -> jax.Array:
    """V_BL: the critic's value of the state before each token (meowjax.models.value)."""
    positions = lm.positions_from_mask(batch["mask"])
    return _shift_right(value.value_forward(vparams, cfg, batch["tokens"], positions,
                                            batch["mask"]))


def observation_lm_mask(batch: dict) -> jax.Array:
    """1 on the tokens the auxiliary LM loss predicts: real, not the agent's, not column 0
    (nothing precedes it)."""
    mask_BL = batch["mask"] * (1 - batch["loss_mask"])
    return mask_BL.at[:, 0].set(0)


class TokenUnits:
    """The free-text interface's units: the agent's tokens (``loss_mask``, incl. end-of-turn).

    The auxiliary LM loss is the next-token NLL of the other tokens (system prompt, objective,
    observations), from the same logits: ``-token_mean(logp)`` over ``observation_lm_mask``."""

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg

    def mask(self, batch: dict) -> jax.Array:
        return batch["loss_mask"]

    def policy_terms(self, params, batch: dict, temperature: float, *,
                     with_lm: bool = True) -> objective.PolicyTerms:
        # Looked up at call time, so benchmarks/train_step.py can swap in its reference version.
        logp_BL, ent_BL = token_terms(params, self.cfg, batch, temperature)
        lm_nll = (-reduce.masked_aggregate(logp_BL, observation_lm_mask(batch),
                                           batch["row_weight"], "token_mean")
                  if with_lm else jnp.zeros((), jnp.float32))
        return objective.PolicyTerms(logp_BU=logp_BL, entropy_BU=ent_BL,
                                     mask_BU=batch["loss_mask"], lm_nll=lm_nll)

    def values(self, vparams, batch: dict) -> jax.Array:
        return token_values(vparams, self.cfg, batch)
