"""Jitted steps for free-text actions (the Practitioner's Guide recipe): one row per episode.

Rows are whole multi-turn token sequences ``[B, L]`` (see ``meowjax.rollout.episodes``). The
log-prob of token t comes from the logits at t - 1:

    logp_BL[:, t] = log_softmax(logits_BL[:, t - 1] / tau)[tokens[:, t]],   logp_BL[:, 0] = 0

and the value of the state before token t is read at t - 1 likewise. Only ``loss_mask`` tokens
(the agent's, including its end-of-turn token) enter any loss.

  SFT:  L = -token_mean(logp) over agent tokens of expert episodes
  PG:   L = PPO_clip(logp, old logp, A) - c_ent H + c_kl KL_k(pi || pi_ref) [+ value loss]
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import ml_collections
import optax

from meowjax.models import lm, value
from meowjax.models.config import ModelConfig
from meowjax.rl import losses, reduce
from meowjax.trainers import optim


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


def make_sft_step(cfg: ModelConfig, optimizer: optax.GradientTransformation,
                  shardings: optim.StepShardings | None = None):
    def loss_fn(params, batch):
        logp, _ = token_terms(params, cfg, batch, 1.0)
        nll = -reduce.masked_aggregate(logp, batch["loss_mask"], batch["row_weight"], "token_mean")
        return nll, {"sft/loss": nll}

    return optim.make_update_step(loss_fn, optimizer, prefix="sft", shardings=shardings)


def make_pg_step(cfg: ModelConfig, optimizer, value_optimizer, algo: ml_collections.ConfigDict, *,
                 temperature: float, needs_critic: bool,
                 shardings: optim.StepShardings | None = None):
    clip_high = algo.clip_eps_high if algo.clip_eps_high > 0 else None
    dual = algo.dual_clip if algo.dual_clip > 0 else None

    def policy_loss(params, batch):
        logp, ent = token_terms(params, cfg, batch, temperature)
        lm_mask, w = batch["loss_mask"], batch["row_weight"]
        pg, m = losses.ppo_policy_loss(logp, batch["old_logp"], batch["adv"], lm_mask, w,
                                       clip_eps=algo.clip_eps, clip_eps_high=clip_high,
                                       dual_clip=dual, agg=algo.get("agg", "token_mean"))
        ent_mean = reduce.masked_mean(ent, lm_mask, w)
        # No KL term (kl_coef = 0): no reference pass ran, ref_logp is 0, and kl_ref reads 0.
        kl = (losses.kl_loss(logp, batch["ref_logp"], lm_mask, w, kind=algo.kl_kind)
              if algo.kl_coef > 0 else jnp.zeros((), jnp.float32))
        loss = pg - algo.entropy_coef * ent_mean
        if algo.kl_in_loss:
            loss = loss + algo.kl_coef * kl
        return loss, {"pg/policy_loss": pg, "pg/entropy": ent_mean, "pg/kl_ref": kl,
                      "pg/clip_fraction": m["clip_fraction"], "pg/approx_kl": m["approx_kl"],
                      "pg/logp_mismatch_max": reduce.masked_max(
                          jnp.abs(logp - batch["old_logp"]), lm_mask, w)}

    def critic_loss(vparams, batch):
        v = token_values(vparams, cfg, batch)
        clip = algo.value_clip if algo.value_clip > 0 else None
        loss, m = losses.value_loss(v, batch["old_value"], batch["ret"], batch["loss_mask"],
                                    batch["row_weight"], clip=clip)
        return loss, {"pg/value_loss": loss, "pg/value_clip_fraction": m["clip_fraction"]}

    return optim.make_update_step(policy_loss, optimizer, prefix="pg",
                                  critic_loss_fn=critic_loss if needs_critic else None,
                                  critic_optimizer=value_optimizer, shardings=shardings)


def make_old_terms(cfg: ModelConfig, *, temperature: float, needs_ref: bool, needs_critic: bool):
    """jit(ref_params, vparams, batch) -> (ref_logp_BL, values_BL), zeros for the term not
    needed. The current policy's log-probs are the sampler's (checked by the update's first
    minibatch: ``pg/logp_mismatch_max``), not recomputed here."""
    @jax.jit
    def old_terms(ref_params, vparams, batch):
        zeros = jnp.zeros(batch["tokens"].shape, jnp.float32)
        ref = token_terms(ref_params, cfg, batch, temperature)[0] if needs_ref else zeros
        values = token_values(vparams, cfg, batch) if needs_critic else zeros
        return ref, values
    return old_terms
