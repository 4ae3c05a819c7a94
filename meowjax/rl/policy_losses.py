"""Policy losses by name (`rl.policy_loss`): the per-unit surrogate inside the one objective.

The objective (`rl.objective`) adds KL, entropy, the LM term and the critic around whichever
surrogate `rl.policy_loss` names. With `rho_u = exp(log pi(u) - log pi_old(u))`, w_u the TIS
weight (1 without TIS), `lo = 1 - clip_eps`, `hi = 1 + (clip_eps_high or clip_eps)`:

    ppo_clip  l_u = w_u max(-A_u rho_u, -A_u clip(rho_u, lo, hi))      [dual clip: `losses`]
    cispo     l_u = -w_u sg(clip(rho_u, lo, hi)) A_u log pi(u)

CISPO (MiniMax-M1, 2025) clips the importance weight, not the update: every unit keeps a
gradient, `-sg(clip(rho, lo, hi)) A grad log pi`, where PPO clip drops the gradient of a unit
whose ratio left the band on the side its advantage pushes. At rho = 1 the two gradients are
equal. Both are aggregated by `reduce.masked_aggregate(l, mask, row_weight, agg, norm)`.

A new loss is one function and one `register_policy_loss` call (from a plugin module too:
`--config.imports`); its metrics must hold `clip_fraction` and `approx_kl`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Final

import chex
import jax
import jax.numpy as jnp

from meowjax.rl import losses
from meowjax.rl.reduce import check_BL, masked_aggregate, masked_mean, valid_BL

# fn(logp_BL, old_logp_BL, adv_BL, mask_BL, row_weight_B, cfg, *, norm, weight_BL)
#   -> (loss, metrics); cfg: the objective's config (clip_eps, clip_eps_high, dual_clip, agg).
PolicyLossFn = Callable[..., tuple[chex.Array, dict[str, chex.Array]]]


@dataclasses.dataclass(frozen=True)
class PolicyLossSpec:
    """A registered policy loss: its name (`rl.policy_loss`), function and one-line description."""

    name: str
    fn: PolicyLossFn
    description: str = ""
    dual_clip: bool = False   # whether it honours rl.dual_clip (the objective refuses it if not)


POLICY_LOSSES: Final[dict[str, PolicyLossSpec]] = {}


def register_policy_loss(spec: PolicyLossSpec, *, replace: bool = False) -> PolicyLossSpec:
    """Adds `spec` to `POLICY_LOSSES` (ValueError if the name is taken, unless `replace`)."""
    if spec.name in POLICY_LOSSES and not replace:
        raise ValueError(f"A policy loss named {spec.name!r} is already registered; pass "
                         "replace=True to override it.")
    POLICY_LOSSES[spec.name] = spec
    return spec


def get_policy_loss(name: str) -> PolicyLossSpec:
    """The spec registered under `name`; ValueError listing the registered names otherwise."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"rl.policy_loss={name!r}; choose one of {sorted(POLICY_LOSSES)} (or "
                         "register one with meowjax.rl.register_policy_loss).")
    return POLICY_LOSSES[name]


def disabled_if_zero(x: float) -> float | None:
    """A config bound where 0 means off (clip_eps_high, dual_clip, value_clip) as the losses take
    it: None when off."""
    return x if x > 0 else None


def _ppo_clip(logp_BL, old_logp_BL, adv_BL, mask_BL, row_weight_B, cfg: Any, *, norm,
              weight_BL):
    return losses.ppo_policy_loss(logp_BL, old_logp_BL, adv_BL, mask_BL, row_weight_B,
                                  clip_eps=cfg.clip_eps,
                                  clip_eps_high=disabled_if_zero(cfg.clip_eps_high),
                                  dual_clip=disabled_if_zero(cfg.dual_clip), agg=cfg.agg,
                                  norm=norm, weight_BL=weight_BL)


def cispo_policy_loss(
    logp_BL: chex.Array,
    old_logp_BL: chex.Array,
    adv_BL: chex.Array,
    mask_BL: chex.Array,
    row_weight_B: chex.Array,
    *,
    clip_eps: float,
    clip_eps_high: float | None = None,
    agg: str = "token_mean",
    norm: chex.Array | None = None,
    weight_BL: chex.Array | None = None,
) -> tuple[chex.Array, dict[str, chex.Array]]:
    """CISPO: `l_t = -w_t sg(clip(rho_t, 1 - clip_eps, 1 + eps_hi)) A_t log pi(t)`, aggregated
    like `losses.ppo_policy_loss` (`eps_hi = clip_eps_high or clip_eps`; `old_logp`, `adv`,
    `weight_BL` are constants).

    Returns:
      `(loss, metrics)`; token means `clip_fraction` (the weight was clipped), `approx_kl`
      (k3 of KL(pi_old || pi)), `ratio_mean`.
    """
    check_BL("cispo_policy_loss", logp_BL, mask_BL, row_weight_B)
    chex.assert_equal_shape([logp_BL, old_logp_BL, adv_BL], custom_message="cispo_policy_loss")
    if not clip_eps > 0:
        raise ValueError(f"clip_eps={clip_eps!r} must be > 0.")
    eps_hi = clip_eps if clip_eps_high is None else clip_eps_high
    valid = valid_BL(mask_BL, row_weight_B)
    logp = jnp.where(valid, logp_BL.astype(jnp.float32), 0)
    old = jax.lax.stop_gradient(jnp.where(valid, old_logp_BL.astype(jnp.float32), 0))
    adv = jax.lax.stop_gradient(jnp.where(valid, adv_BL.astype(jnp.float32), 0))
    log_ratio = jax.lax.stop_gradient(logp) - old
    ratio = jnp.exp(log_ratio)
    weight = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + eps_hi)
    if weight_BL is not None:
        chex.assert_equal_shape([logp_BL, weight_BL], custom_message="cispo_policy_loss weight")
        weight = weight * jax.lax.stop_gradient(
            jnp.where(valid, weight_BL.astype(jnp.float32), 0))
    loss = -weight * adv * logp

    def mean(x):
        return masked_mean(x, mask_BL, row_weight_B)

    metrics = {
        "clip_fraction": mean(((ratio < 1.0 - clip_eps) | (ratio > 1.0 + eps_hi))
                              .astype(jnp.float32)),
        "approx_kl": mean(jnp.expm1(log_ratio) - log_ratio),
        "ratio_mean": mean(ratio),
    }
    return masked_aggregate(loss, mask_BL, row_weight_B, agg, norm), metrics


def _cispo(logp_BL, old_logp_BL, adv_BL, mask_BL, row_weight_B, cfg: Any, *, norm, weight_BL):
    return cispo_policy_loss(logp_BL, old_logp_BL, adv_BL, mask_BL, row_weight_B,
                             clip_eps=cfg.clip_eps,
                             clip_eps_high=disabled_if_zero(cfg.clip_eps_high),
                             agg=cfg.agg, norm=norm, weight_BL=weight_BL)


register_policy_loss(PolicyLossSpec(
    "ppo_clip", _ppo_clip, "PPO's clipped surrogate (asymmetric upper clip, dual clip)",
    dual_clip=True))
register_policy_loss(PolicyLossSpec(
    "cispo", _cispo, "clipped importance-sampling weight times A log pi; every unit keeps a "
    "gradient (MiniMax-M1)"))
