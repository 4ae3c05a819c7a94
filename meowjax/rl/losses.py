"""Policy-gradient losses on `[B, L]` token arrays: PPO clip, value clip, KL, entropy.

Every loss sanitises its inputs at invalid tokens (masked or padded row) with `jnp.where` before
any arithmetic and aggregates with `masked_aggregate`, so invalid tokens contribute exactly
nothing to the loss and receive exactly zero gradient, even when they hold NaN or inf.
"""
from typing import Final

import chex
import jax
import jax.numpy as jnp

from meowjax.rl.reduce import check_BL, masked_aggregate, masked_mean, valid_BL

KL_KINDS: Final[tuple[str, ...]] = ("k1", "k2", "k3")
TIS_MODES: Final[tuple[str, ...]] = ("off", "truncate", "mask")


def _float(x: chex.Array) -> chex.Array:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.float32)


def _check_above(name: str, x: float | chex.Array, lower: float) -> None:
    """ValueError unless `x > lower`; traced values are not checked (they have no value yet)."""
    if isinstance(x, (int, float)) and not x > lower:
        raise ValueError(f"{name} must be > {lower}, got {x}.")


def kl_penalty(logp_BL: chex.Array, ref_logp_BL: chex.Array, kind: str = "k1") -> chex.Array:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token log-probs (Schulman's k1/k2/k3).

    With `d = logp - ref_logp` (tokens sampled from pi):

    * `k1 = d`                          unbiased, high variance, can be negative
    * `k2 = 0.5 d^2`                    biased, low variance, >= 0
    * `k3 = exp(-d) - (-d) - 1`         unbiased, low variance, >= 0
    """
    chex.assert_equal_shape([logp_BL, ref_logp_BL], custom_message="kl_penalty")
    if kind not in KL_KINDS:
        raise ValueError(f"Unknown KL estimator {kind!r}; choose one of {list(KL_KINDS)}.")
    d = _float(logp_BL) - _float(ref_logp_BL)
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * jnp.square(d)
    return jnp.expm1(-d) + d


def kl_loss(
    logp_BL: chex.Array,
    ref_logp_BL: chex.Array,
    mask_BL: chex.Array,
    row_weight_B: chex.Array,
    *,
    kind: str = "k3",
    agg: str = "token_mean",
    norm: chex.Array | None = None,
) -> chex.Array:
    """KL to a frozen reference used as a loss term: `masked_aggregate(kl_penalty(...))`
    (`norm`: a fixed denominator, see `masked_aggregate`)."""
    check_BL("kl_loss", logp_BL, mask_BL, row_weight_B)
    chex.assert_equal_shape([logp_BL, ref_logp_BL], custom_message="kl_loss")
    valid = valid_BL(mask_BL, row_weight_B)
    kl_BL = kl_penalty(
        jnp.where(valid, logp_BL, 0), jax.lax.stop_gradient(jnp.where(valid, ref_logp_BL, 0)), kind
    )
    return masked_aggregate(kl_BL, mask_BL, row_weight_B, agg, norm)


def tis_weights(
    trainer_logp_BL: chex.Array,
    sampler_logp_BL: chex.Array,
    mask_BL: chex.Array,
    row_weight_B: chex.Array,
    *,
    mode: str = "truncate",
    cap: float = 2.0,
    band: tuple[float, float] = (0.5, 2.0),
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """Token-level truncated importance sampling (TIS) weights between sampler and trainer.

    Units are sampled by the sampler's policy (`mu`, e.g. a bf16 decode) while the trainer's
    own computation of the same policy at the same parameters (`pi_old`) differs slightly.
    With `r_u = exp(log pi_old(u) - log mu(u))`:

        "truncate":  w_u = min(r_u, C)                 (C = `cap`)
        "mask":      w_u = 1[lo <= r_u <= hi]           ((lo, hi) = `band`)
        "off":       w_u = 1

    Invalid units (masked or padded row) get weight 0. Both inputs are constants
    (stop_gradient): the weight multiplies a unit's policy-gradient term, it is not trained.

    Returns:
      `(weights_BL, metrics)`; metrics (means over valid units, fixed keys per mode):
      `ratio_mean` (mean r_u), and `clipped_share` (truncate: r_u > C) or `masked_share`
      (mask: r_u outside the band).
    """
    check_BL("tis_weights", trainer_logp_BL, mask_BL, row_weight_B)
    chex.assert_equal_shape([trainer_logp_BL, sampler_logp_BL], custom_message="tis_weights")
    if mode not in TIS_MODES:
        raise ValueError(f"Unknown TIS mode {mode!r}; choose one of {list(TIS_MODES)}.")
    valid = valid_BL(mask_BL, row_weight_B)
    d_BL = jax.lax.stop_gradient(
        jnp.where(valid, _float(trainer_logp_BL) - _float(sampler_logp_BL), 0))
    ratio_BL = jnp.exp(d_BL)

    def mean(x):
        return masked_mean(x, mask_BL, row_weight_B)

    metrics = {"ratio_mean": mean(ratio_BL)}
    if mode == "truncate":
        _check_above("TIS cap", cap, 0.0)
        clipped = ratio_BL > cap
        weights_BL = jnp.exp(jnp.minimum(d_BL, jnp.log(jnp.asarray(cap, d_BL.dtype))))
        metrics["clipped_share"] = mean(clipped.astype(jnp.float32))
    elif mode == "mask":
        lo, hi = band
        inside = (ratio_BL >= lo) & (ratio_BL <= hi)
        weights_BL = inside.astype(d_BL.dtype)
        metrics["masked_share"] = mean((~inside).astype(jnp.float32))
    else:
        weights_BL = jnp.ones_like(d_BL)
    return jnp.where(valid, weights_BL, 0), metrics


def ppo_policy_loss(
    logp_BL: chex.Array,
    old_logp_BL: chex.Array,
    adv_BL: chex.Array,
    mask_BL: chex.Array,
    row_weight_B: chex.Array,
    *,
    clip_eps: float,
    clip_eps_high: float | None = None,
    dual_clip: float | None = None,
    agg: str = "token_mean",
    norm: chex.Array | None = None,
    weight_BL: chex.Array | None = None,
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """PPO clipped surrogate with optional asymmetric upper clip and dual clip.

    With `rho = exp(logp - old_logp)` and `eps_hi = clip_eps_high or clip_eps`:

        l_t = max(-A_t rho_t, -A_t clip(rho_t, 1 - clip_eps, 1 + eps_hi))
        l_t = min(l_t, -c A_t)        where A_t < 0, if dual_clip c (> 1) is given

    aggregated with `masked_aggregate(l, mask, row_weight, agg, norm)`; with `weight_BL` (e.g.
    `tis_weights`) each `l_t` is first multiplied by `w_t`. `old_logp`, `adv` and `weight_BL`
    are treated as constants (stop_gradient).

    Returns:
      `(loss, metrics)`; metrics (token means over valid tokens, fixed keys):
      `clip_fraction` (the clipped branch is active), `dual_clip_fraction` (the dual bound is
      active; 0 without dual clip), `approx_kl` (k3 estimate of KL(pi_old || pi) from tokens
      sampled by pi_old: `mean(rho - 1 - log rho)`), `ratio_mean`.
    """
    check_BL("ppo_policy_loss", logp_BL, mask_BL, row_weight_B)
    chex.assert_equal_shape([logp_BL, old_logp_BL, adv_BL], custom_message="ppo_policy_loss")
    if weight_BL is not None:
        chex.assert_equal_shape([logp_BL, weight_BL], custom_message="ppo_policy_loss weight")
    if dual_clip is not None:
        _check_above("dual_clip (e.g. 3.0, or None to disable)", dual_clip, 1.0)
    _check_above("clip_eps", clip_eps, 0.0)
    eps_hi = clip_eps if clip_eps_high is None else clip_eps_high
    valid = valid_BL(mask_BL, row_weight_B)
    logp = jnp.where(valid, _float(logp_BL), 0)
    old = jax.lax.stop_gradient(jnp.where(valid, _float(old_logp_BL), 0))
    adv = jax.lax.stop_gradient(jnp.where(valid, _float(adv_BL), 0))
    log_ratio = logp - old
    ratio = jnp.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * jnp.clip(ratio, 1.0 - clip_eps, 1.0 + eps_hi)
    loss = jnp.maximum(loss_unclipped, loss_clipped)
    dual_active = jnp.zeros_like(valid)
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual_active = (adv < 0) & (loss > bound)
        loss = jnp.where(dual_active, bound, loss)
    if weight_BL is not None:
        loss = loss * jax.lax.stop_gradient(jnp.where(valid, _float(weight_BL), 0))

    def mean(x):
        return masked_mean(x, mask_BL, row_weight_B)

    metrics = {
        "clip_fraction": mean((loss_clipped > loss_unclipped).astype(jnp.float32)),
        "dual_clip_fraction": mean(dual_active.astype(jnp.float32)),
        "approx_kl": mean(jax.lax.stop_gradient(jnp.expm1(log_ratio) - log_ratio)),
        "ratio_mean": mean(jax.lax.stop_gradient(ratio)),
    }
    return masked_aggregate(loss, mask_BL, row_weight_B, agg, norm), metrics


def value_loss(
    values_BL: chex.Array,
    old_values_BL: chex.Array,
    returns_BL: chex.Array,
    mask_BL: chex.Array,
    row_weight_B: chex.Array,
    *,
    clip: float | None = None,
    agg: str = "token_mean",
    norm: chex.Array | None = None,
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """Clipped value loss (PPO style), aggregated like `ppo_policy_loss`.

        v_clip = old_v + clip(v - old_v, -c, c)
        l_t    = 0.5 * max((v - R)^2, (v_clip - R)^2)       (0.5 (v - R)^2 if clip is None)

    `old_values` and `returns` are treated as constants.

    Returns:
      `(loss, metrics)` with token means `clip_fraction` (the clipped term is larger; 0 without
      clip), `values_mean`, `returns_mean`.
    """
    check_BL("value_loss", values_BL, mask_BL, row_weight_B)
    chex.assert_equal_shape([values_BL, old_values_BL, returns_BL], custom_message="value_loss")
    if clip is not None:
        _check_above("value clip (or None to disable)", clip, 0.0)
    valid = valid_BL(mask_BL, row_weight_B)
    v = jnp.where(valid, _float(values_BL), 0)
    old = jax.lax.stop_gradient(jnp.where(valid, _float(old_values_BL), 0))
    ret = jax.lax.stop_gradient(jnp.where(valid, _float(returns_BL), 0))
    err_unclipped = jnp.square(v - ret)
    err = err_unclipped
    clipped_active = jnp.zeros_like(valid)
    if clip is not None:
        v_clipped = old + jnp.clip(v - old, -clip, clip)
        err_clipped = jnp.square(v_clipped - ret)
        clipped_active = err_clipped > err_unclipped
        err = jnp.maximum(err_unclipped, err_clipped)

    def mean(x):
        return masked_mean(x, mask_BL, row_weight_B)

    metrics = {
        "clip_fraction": mean(clipped_active.astype(jnp.float32)),
        "values_mean": mean(jax.lax.stop_gradient(v)),
        "returns_mean": mean(ret),
    }
    return masked_aggregate(0.5 * err, mask_BL, row_weight_B, agg, norm), metrics


def entropy_from_logits(logits_BLV: chex.Array) -> chex.Array:
    """Entropy of the softmax over the last axis: `H = -sum_v p_v log p_v`.

    Vocabulary entries with `-inf` logits (p = 0) contribute 0, without NaN in value or gradient.
    """
    chex.assert_rank(logits_BLV, 3, custom_message="entropy_from_logits expects [B, L, V]")
    logp_BLV = jax.nn.log_softmax(_float(logits_BLV), axis=-1)
    p_BLV = jnp.exp(logp_BLV)
    safe_logp_BLV = jnp.where(p_BLV > 0, logp_BLV, 0)
    return -jnp.sum(p_BLV * safe_logp_BLV, axis=-1)
