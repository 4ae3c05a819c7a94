"""The one policy-gradient objective, over "units" that each action interface defines.

A unit is what one log-prob is taken over: a token for free-text actions, a whole turn for the
admissible-command scoring interface (one row per turn, `U = 1`). An interface supplies only its
per-unit terms (`PolicyTerms`: log-probs, entropies, mask, the auxiliary LM loss); everything
else — clipping, KL, entropy bonus, aggregation, the critic — is written here once:

    rho_u  = exp(log pi(u) - log pi_old(u))
    L_pg   = agg_u max(-A_u rho_u, -A_u clip(rho_u, 1 - eps, 1 + eps_hi))   [dual clip: min(., -c A_u)
                                                                             where A_u < 0]
             (`policy_loss="ppo_clip"`; the surrogate is registered by name: `policy_losses`,
             e.g. "cispo": agg_u -sg(clip(rho_u, 1 - eps, 1 + eps_hi)) A_u log pi(u))
    L      = L_pg - c_ent mean_u H_u + c_kl [kl_in_loss] agg_u KL_k(pi || pi_ref)_u + c_lm LM
    L_V    = agg_u 0.5 max((V_u - R_u)^2, (V_clip,u - R_u)^2)

Truncated importance sampling (`tis` "truncate" / "mask"): the units were sampled by the
sampler's computation of pi_old (`old_logp`, e.g. a bf16 decode), which differs from the
trainer's own (`trainer_old_logp`, same parameters): then pi_old in rho_u is the trainer's and
each unit's PG term is weighted by w_u = min(exp(log pi_old^trainer(u) - log mu(u)), C), or by
1[lo <= exp(.) <= hi] ("mask"; `losses.tis_weights`):

    L_pg   = agg_u w_u max(-A_u rho_u, -A_u clip(rho_u, ...))

With `kl_in_loss=False` the KL is folded into the rewards before the advantages instead
(`kl_rewards`), with the same estimator `kl_kind`. A batch may carry `loss_norm` (per row, the
same number): the fixed denominator of every aggregate above (see `reduce.masked_aggregate`),
so that each minibatch of an RL iteration weighs its tokens (rows) like every other minibatch. SFT is the same machinery with the expert's
units: `L_sft = -agg_u log pi(u) + c_lm LM`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

import chex
import jax
import jax.numpy as jnp

from meowjax.rl import advantages, losses, policy_losses, reduce

# `rl.tis`: "auto" is "truncate" for a model computing in bf16, "off" in fp32 (`resolve_tis`).
TIS_CHOICES = ("auto", *losses.TIS_MODES)


class PolicyTerms(NamedTuple):
    """What an interface computes from the policy's forward pass, per unit (`[B, U]`).

    `lm_nll` is the auxiliary next-token loss on the prompt / observation text (a scalar; 0 for
    an interface without one)."""

    logp_BU: chex.Array
    entropy_BU: chex.Array
    mask_BU: chex.Array
    lm_nll: chex.Array


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
    """The objective's hyper-parameters (the `rl` config section's fields of the same names).

    `policy_loss`: a name registered in `policy_losses` ("ppo_clip", "cispo", ...).
    `clip_eps_high`, `dual_clip`, `value_clip`: 0 disables. `agg`: one of `reduce.AGG_MODES`,
    used for the policy, KL and value terms. `tis`: one of `TIS_CHOICES`; "auto" is resolved by
    the trainer from the model's compute dtype (`resolve_tis`) before any loss is built.
    `tis_cap`: C of "truncate" (>= 1); `tis_band`: (lo, hi) of "mask" (0 <= lo <= 1 <= hi)."""

    policy_loss: str = "ppo_clip"
    clip_eps: float = 0.2
    clip_eps_high: float = 0.0
    dual_clip: float = 0.0
    value_clip: float = 0.5
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    kl_in_loss: bool = True
    entropy_coef: float = 0.0
    lm_coef: float = 0.0
    agg: str = "token_mean"
    tis: str = "off"
    tis_cap: float = 2.0
    tis_band: tuple[float, float] = (0.5, 2.0)

    def __post_init__(self):
        spec = policy_losses.get_policy_loss(self.policy_loss)
        if self.dual_clip > 0 and not spec.dual_clip:
            raise ValueError(f"rl.dual_clip={self.dual_clip} is a bound of PPO's clipped "
                             f"surrogate; rl.policy_loss={self.policy_loss!r} has none: set "
                             "rl.dual_clip=0.")
        if self.agg not in reduce.AGG_MODES:
            raise ValueError(f"rl.agg={self.agg!r}; choose one of {list(reduce.AGG_MODES)}.")
        if self.kl_kind not in losses.KL_KINDS:
            raise ValueError(f"rl.kl_kind={self.kl_kind!r}; choose one of {list(losses.KL_KINDS)}.")
        if self.tis not in TIS_CHOICES:
            raise ValueError(f"rl.tis={self.tis!r}; choose one of {list(TIS_CHOICES)}.")
        if not self.tis_cap >= 1.0:
            raise ValueError(f"rl.tis_cap={self.tis_cap!r}; must be >= 1 (the largest weight of "
                             "a unit, e.g. 2.0).")
        band = tuple(self.tis_band)
        if not (len(band) == 2 and 0.0 <= band[0] <= 1.0 <= band[1] and band[0] < band[1]):
            raise ValueError(f"rl.tis_band={self.tis_band!r}; must be (lo, hi) with "
                             "0 <= lo <= 1 <= hi, lo < hi (e.g. (0.5, 2.0)).")
        object.__setattr__(self, "tis_band", tuple(float(x) for x in band))

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> "ObjectiveConfig":
        """The fields of this dataclass read from a config section (other keys are not ours)."""
        return cls(**{f.name: section[f.name] for f in dataclasses.fields(cls)})

    @property
    def needs_ref(self) -> bool:
        """Reference log-probs are needed only for a KL term (in the loss or in the rewards)."""
        return self.kl_coef > 0

    @property
    def uses_tis(self) -> bool:
        """Whether the PG loss reads the trainer's own pi_old (`trainer_old_logp`) per unit."""
        return self.tis not in ("off", "auto")

    def resolve_tis(self, compute_dtype: Any) -> "ObjectiveConfig":
        """This config with `tis="auto"` made concrete: "truncate" where the model computes in a
        dtype narrower than fp32 (bf16: sampler and trainer log-probs differ), else "off"."""
        if self.tis != "auto":
            return self
        narrow = jnp.dtype(compute_dtype).itemsize < 4
        return dataclasses.replace(self, tis="truncate" if narrow else "off")


def units(x: chex.Array) -> chex.Array:
    """A per-row field as `[B, U]`: a `[B]` array (one unit per row) becomes `[B, 1]`."""
    return x[:, None] if jnp.ndim(x) == 1 else x


def loss_norm(batch: Mapping[str, chex.Array]) -> chex.Array | None:
    """The batch's fixed loss denominator (`loss_norm`, padded rows hold 0), or None."""
    return jnp.max(batch["loss_norm"]) if "loss_norm" in batch else None


def policy_loss(terms: PolicyTerms, batch: Mapping[str, chex.Array], cfg: ObjectiveConfig,
                prefix: str = "pg") -> tuple[chex.Array, dict[str, chex.Array]]:
    """The PG loss above; `batch` holds `old_logp`, `adv`, `ref_logp` per unit and `row_weight`
    (and `trainer_old_logp` per unit with TIS).

    Metrics (fixed keys): policy_loss, entropy, kl_ref (0 without a KL term: no reference pass
    ran), lm_loss, clip_fraction, approx_kl, logp_mismatch_max (|log pi - log pi_old|, pi_old
    the sampler's: on the sampling params, the sampler-vs-trainer gap); with TIS also
    tis_ratio_mean and tis_clipped_share ("truncate") or tis_masked_share ("mask")."""
    if cfg.tis == "auto":
        raise ValueError("rl.tis='auto' must be resolved from the model's compute dtype "
                         "(ObjectiveConfig.resolve_tis) before the objective is built.")
    logp, mask, w = terms.logp_BU, terms.mask_BU, batch["row_weight"]
    old, adv = units(batch["old_logp"]), units(batch["adv"])
    norm = loss_norm(batch)
    pi_old, tis_w, tis_m = old, None, {}
    if cfg.uses_tis:
        pi_old = units(batch["trainer_old_logp"])
        tis_w, tis_m = losses.tis_weights(pi_old, old, mask, w, mode=cfg.tis, cap=cfg.tis_cap,
                                          band=cfg.tis_band)
    pg, m = policy_losses.get_policy_loss(cfg.policy_loss).fn(logp, pi_old, adv, mask, w, cfg,
                                                              norm=norm, weight_BL=tis_w)
    ent = reduce.masked_mean(terms.entropy_BU, mask, w)
    kl = (losses.kl_loss(logp, units(batch["ref_logp"]), mask, w, kind=cfg.kl_kind, agg=cfg.agg,
                         norm=norm)
          if cfg.kl_coef > 0 else jnp.zeros((), jnp.float32))
    loss = pg
    if cfg.entropy_coef:
        loss = loss - cfg.entropy_coef * (ent if norm is None else reduce.masked_aggregate(
            terms.entropy_BU, mask, w, cfg.agg, norm))
    if cfg.kl_in_loss:
        loss = loss + cfg.kl_coef * kl
    if cfg.lm_coef:
        loss = loss + cfg.lm_coef * terms.lm_nll
    metrics = {"policy_loss": pg, "entropy": ent, "kl_ref": kl, "lm_loss": terms.lm_nll,
               "clip_fraction": m["clip_fraction"], "approx_kl": m["approx_kl"],
               "logp_mismatch_max": reduce.masked_max(jnp.abs(logp - old), mask, w),
               **{f"tis_{k}": v for k, v in tis_m.items()}}
    return loss, {f"{prefix}/{k}": v for k, v in metrics.items()}


def sft_loss(terms: PolicyTerms, row_weight_B: chex.Array, cfg: ObjectiveConfig,
             prefix: str = "sft") -> tuple[chex.Array, dict[str, chex.Array]]:
    """Behaviour cloning on expert units: `-agg_u log pi(u) + c_lm LM`.

    Metrics: loss (the NLL alone), expert_prob (mean probability of an expert unit), lm_loss."""
    logp, mask = terms.logp_BU, terms.mask_BU
    nll = -reduce.masked_aggregate(logp, mask, row_weight_B, cfg.agg)
    prob = reduce.masked_mean(jnp.exp(jnp.where(mask > 0, logp, 0.0)), mask, row_weight_B)
    loss = nll + cfg.lm_coef * terms.lm_nll if cfg.lm_coef else nll
    return loss, {f"{prefix}/loss": nll, f"{prefix}/expert_prob": prob,
                  f"{prefix}/lm_loss": terms.lm_nll}


def critic_loss(values_BU: chex.Array, mask_BU: chex.Array, batch: Mapping[str, chex.Array],
                cfg: ObjectiveConfig, prefix: str = "pg") -> tuple[chex.Array, dict[str, chex.Array]]:
    """The clipped value loss on `ret` with `old_value` (per unit) as the clip centre."""
    w = batch["row_weight"]
    ret = units(batch["ret"])
    loss, m = losses.value_loss(values_BU, units(batch["old_value"]), ret, mask_BU, w,
                                clip=policy_losses.disabled_if_zero(cfg.value_clip), agg=cfg.agg,
                                norm=loss_norm(batch))
    err = reduce.masked_mean(jnp.abs(values_BU - ret), mask_BU, w)
    return loss, {f"{prefix}/value_loss": loss, f"{prefix}/value_abs_err": err,
                  f"{prefix}/value_clip_fraction": m["clip_fraction"]}


def kl_rewards(rewards_BX: chex.Array, logp_BX: chex.Array, ref_logp_BX: chex.Array,
               mask_BX: chex.Array, cfg: ObjectiveConfig) -> chex.Array:
    """Rewards with the KL to the reference folded in (`kl_in_loss=False`):
    `r'_x = r_x - c_kl KL_k(pi || pi_ref)_x` on units, with `kl_kind`'s estimator."""
    kl = losses.kl_penalty(jax.lax.stop_gradient(logp_BX), ref_logp_BX, cfg.kl_kind)
    return advantages.fold_kl_into_rewards(rewards_BX, kl, mask_BX, cfg.kl_coef)
