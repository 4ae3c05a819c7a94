"""Jitted steps for the admissible-command scoring interface (one "token" per turn).

Rows are turns (packed prompt + candidates, see ``meowjax.rollout.scoring``); every per-turn
quantity is a ``[B, 1]`` array so the token-level losses of ``meowjax.rl`` apply unchanged.

  SFT:  L = -mean_b log pi(expert_b | prompt_b) + c_lm * LM
  PG:   L = PPO_clip(log pi(a), old log pi(a), A) - c_ent H(pi) [+ c_kl KL_k(pi || pi_ref)]
        + c_lm * LM  [+ c_v * value_clip_loss(V(prompt), R)]  (critic only for GAE estimators)

  LM = -token_mean over prompt tokens (objective, observations, past actions) of
       log p_LM(tok_t | tok_<t): an auxiliary next-token loss on the game text. The candidate
       loss alone only says which command is right; the LM loss teaches the model to copy the
       objective's entity names, which ranking unseen names needs. Same forward pass: ~free.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import ml_collections
import optax

from meowjax.models.config import ModelConfig
from meowjax.rl import losses, reduce
from meowjax.rollout import scoring
from meowjax.trainers import optim

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


def make_score_fn(cfg: ModelConfig, *, max_cands: int, temperature: float, norm: str):
    """jit(params, batch) -> log pi_BC, for rollouts (one compile per batch shape)."""
    @jax.jit
    def score(params, batch):
        return policy_logp(params, cfg, batch, max_cands=max_cands, temperature=temperature,
                           norm=norm)
    return score


def make_sft_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, *, max_cands: int,
                  norm: str, lm_coef: float = 0.0,
                  shardings: optim.StepShardings | None = None):
    """SFT on expert turns: cross-entropy of the expert command under pi (tau = 1), plus
    ``lm_coef`` x the auxiliary prompt LM loss."""

    def loss_fn(params, batch):
        logp_BC, lm_nll = policy_logp_and_lm(params, cfg, batch, max_cands=max_cands,
                                             temperature=1.0, norm=norm)
        logp_B = chosen_logp(logp_BC, batch["chosen"])
        w = batch["row_weight"]
        ce = -reduce.safe_divide(jnp.sum(jnp.where(w > 0, logp_B, 0.0) * w), jnp.sum(w))
        acc = jnp.sum(jnp.where(w > 0, jnp.exp(logp_B), 0.0) * w) / jnp.maximum(jnp.sum(w), 1.0)
        loss = ce + lm_coef * lm_nll if lm_coef else ce
        return loss, {"sft/loss": ce, "sft/expert_prob": acc, "sft/lm_loss": lm_nll}

    return optim.make_update_step(loss_fn, optimizer, prefix="sft", shardings=shardings)


def make_pg_step(cfg: ModelConfig, optimizer, value_optimizer, algo: ml_collections.ConfigDict, *,
                 max_cands: int, temperature: float, norm: str, needs_critic: bool,
                 shardings: optim.StepShardings | None = None):
    """One PPO-style minibatch update (policy, and the critic when ``needs_critic``)."""
    clip_high = algo.clip_eps_high if algo.clip_eps_high > 0 else None
    dual = algo.dual_clip if algo.dual_clip > 0 else None

    lm_coef = algo.get("lm_coef", 0.0)

    def policy_loss(params, batch):
        logp_BC, lm_nll = policy_logp_and_lm(params, cfg, batch, max_cands=max_cands,
                                             temperature=temperature, norm=norm)
        logp_B1 = chosen_logp(logp_BC, batch["chosen"])[:, None]
        ones_B1 = jnp.ones_like(logp_B1, jnp.int32)
        w = batch["row_weight"]
        pg, m = losses.ppo_policy_loss(logp_B1, batch["old_logp"][:, None], batch["adv"][:, None],
                                       ones_B1, w, clip_eps=algo.clip_eps, clip_eps_high=clip_high,
                                       dual_clip=dual, agg="token_mean")
        ent = reduce.masked_mean(scoring.candidate_entropy(logp_BC)[:, None], ones_B1, w)
        # No KL term (kl_coef = 0): no reference pass ran, ref_logp is 0, and kl_ref reads 0.
        kl = (losses.kl_loss(logp_B1, batch["ref_logp"][:, None], ones_B1, w, kind=algo.kl_kind)
              if algo.kl_coef > 0 else jnp.zeros((), jnp.float32))
        loss = pg - algo.entropy_coef * ent
        if algo.kl_in_loss:
            loss = loss + algo.kl_coef * kl
        if lm_coef:
            loss = loss + lm_coef * lm_nll
        metrics = {"pg/policy_loss": pg, "pg/entropy": ent, "pg/kl_ref": kl, "pg/lm_loss": lm_nll,
                   "pg/clip_fraction": m["clip_fraction"], "pg/approx_kl": m["approx_kl"],
                   "pg/logp_mismatch_max": reduce.masked_max(
                       jnp.abs(logp_B1 - batch["old_logp"][:, None]), ones_B1, w)}
        return loss, metrics

    def critic_loss(vparams, batch):
        v_B1 = turn_values(vparams, cfg, batch)[:, None]
        ones = jnp.ones_like(v_B1, jnp.int32)
        clip = algo.value_clip if algo.value_clip > 0 else None
        loss, m = losses.value_loss(v_B1, batch["old_value"][:, None], batch["ret"][:, None], ones,
                                    batch["row_weight"], clip=clip)
        err = reduce.masked_mean(jnp.abs(v_B1 - batch["ret"][:, None]), ones, batch["row_weight"])
        return loss, {"pg/value_loss": loss, "pg/value_abs_err": err,
                      "pg/value_clip_fraction": m["clip_fraction"]}

    return optim.make_update_step(policy_loss, optimizer, prefix="pg",
                                  critic_loss_fn=critic_loss if needs_critic else None,
                                  critic_optimizer=value_optimizer, shardings=shardings)


def make_eval_fns(cfg: ModelConfig, *, max_cands: int, temperature: float, norm: str,
                  needs_ref: bool, needs_critic: bool):
    """jit(ref_params, vparams, batch) -> (ref log pi(chosen), V) per row, zeros for the term not
    needed. The current policy's log-prob is not recomputed: rows keep the sampler's, and the
    update's first minibatch checks them (``pg/logp_mismatch_max``)."""
    @jax.jit
    def old_terms(ref_params, vparams, batch):
        kw = dict(max_cands=max_cands, temperature=temperature, norm=norm)
        zeros = jnp.zeros(batch["chosen"].shape, jnp.float32)
        ref = (chosen_logp(policy_logp(ref_params, cfg, batch, **kw), batch["chosen"])
               if needs_ref else zeros)
        value = turn_values(vparams, cfg, batch) if needs_critic else zeros
        return ref, value
    return old_terms
