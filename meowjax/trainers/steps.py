"""The jitted SFT, policy-gradient and old-terms steps, built once for every action interface.

An interface describes its units (tokens for free text, turns for candidate scoring) with a
`Units` object; the losses are `meowjax.rl.objective`'s, the optimizer step `optim`'s:

    SFT:        L = -agg_u log pi(expert u) + c_lm LM                      (tau = 1)
    replay:     the SFT loss on demonstration rows, a step on the RL state between RL updates
    critic:     the clipped value loss alone, the policy untouched (critic warm-up)
    PG:         L = PPO_clip + KL / entropy / LM terms   [+ critic: clipped value loss]
    old terms:  (log pi_ref(u), V(u)) before the update, zeros for a term the run does not use
                [+ log pi_old(u), the trainer's own, for truncated importance sampling]
    advantages: the estimator on an RL iteration's ``[E, X]`` matrices
"""

from __future__ import annotations

from typing import Any, Protocol

import functools

import jax
import jax.numpy as jnp
import optax

from meowjax.rl import estimators, objective, reduce
from meowjax.runtime.state import StepShardings
from meowjax.trainers import optim


class Units(Protocol):
    """An interface's per-unit terms on a packed batch (see `meowjax.rl.objective`)."""

    def policy_terms(self, params: Any, batch: dict, temperature: float, *,
                     with_lm: bool = True) -> objective.PolicyTerms:
        """log pi / entropy / mask per unit and the auxiliary LM loss (0 when not `with_lm`)."""

    def values(self, vparams: Any, batch: dict) -> jax.Array:
        """V per unit, `[B, U]` (meowjax.models.value params: trunk + head)."""

    def mask(self, batch: dict) -> jax.Array:
        """The `[B, U]` mask of the units that enter a loss."""


def make_sft_step(units: Units, optimizer: optax.GradientTransformation,
                  cfg: objective.ObjectiveConfig, shardings: StepShardings | None = None,
                  prefix: str = "sft"):
    """jit(state, batch) -> (state, metrics): behaviour cloning on the batch's expert units.

    The SFT phase builds it on the SFT state and optimizer; demonstration replay during RL
    (``rl.replay_steps``) builds it on the RL state and optimizer, with ``prefix="replay"``."""

    def loss_fn(params, batch):
        terms = units.policy_terms(params, batch, 1.0)
        return objective.sft_loss(terms, batch["row_weight"], cfg, prefix=prefix)

    return optim.make_update_step(loss_fn, optimizer, prefix=prefix, shardings=shardings)


def make_pg_step(units: Units, optimizer: optax.GradientTransformation,
                 value_optimizer: optax.GradientTransformation | None,
                 cfg: objective.ObjectiveConfig, *, temperature: float, needs_critic: bool,
                 shardings: StepShardings | None = None):
    """jit(state, batch) -> (state, metrics): one PPO-style minibatch update of the policy, and
    of the critic when `needs_critic`."""

    def policy_loss(params, batch):
        return objective.policy_loss(units.policy_terms(params, batch, temperature), batch, cfg)

    def critic_loss(vparams, batch):
        return objective.critic_loss(units.values(vparams, batch), units.mask(batch), batch, cfg)

    return optim.make_update_step(policy_loss, optimizer, prefix="pg",
                                  critic_loss_fn=critic_loss if needs_critic else None,
                                  critic_optimizer=value_optimizer, shardings=shardings)


def make_critic_step(units: Units, value_optimizer: optax.GradientTransformation,
                     cfg: objective.ObjectiveConfig, shardings: StepShardings | None = None):
    """jit(state, batch) -> (state, metrics): the critic's clipped value loss alone, the policy
    untouched (``rl.critic_warmup_iters``)."""

    def critic_loss(vparams, batch):
        return objective.critic_loss(units.values(vparams, batch), units.mask(batch), batch, cfg,
                                     prefix="critic_warmup")

    return optim.make_critic_step(critic_loss, value_optimizer, shardings=shardings)


def make_old_terms(units: Units, *, temperature: float, needs_ref: bool, needs_critic: bool):
    """jit(ref_params, vparams, batch[, params]) -> (ref log pi per unit, V per unit[, log pi
    per unit]), each `[B, U]`, zeros for the term not needed. Without ``params`` the current
    policy's log-probs are the sampler's (checked by the update's first minibatch:
    ``pg/logp_mismatch_max``), not recomputed here; with ``params`` (the sampling parameters:
    truncated importance sampling, ``rl.tis``) the trainer's own log pi_old comes third, from
    one more forward pass."""

    @jax.jit
    def old_terms(ref_params, vparams, batch, params=None):
        zeros = jnp.zeros(units.mask(batch).shape, jnp.float32)
        ref = (units.policy_terms(ref_params, batch, temperature, with_lm=False).logp_BU
               if needs_ref else zeros)
        values = units.values(vparams, batch) if needs_critic else zeros
        if params is None:
            return ref, values
        return ref, values, units.policy_terms(params, batch, temperature, with_lm=False).logp_BU

    return old_terms


@functools.partial(jax.jit, static_argnames=("name", "hp", "fold_kl", "whiten"))
def advantages(inputs: estimators.EstimatorInputs, logp_BX, ref_logp_BX, *, name: str,
                hp: estimators.HParams, fold_kl: objective.ObjectiveConfig | None, whiten: bool):
    """(adv_BL, returns_BL) of an RL iteration's rows: the KL to the reference folded into the
    rewards first when ``fold_kl`` (``rl.kl_in_loss=False``), optionally whitened over agent
    tokens after. One compiled program per batch shape (eagerly, each op compiled)."""
    if fold_kl is not None:
        inputs = inputs._replace(rewards_BL=objective.kl_rewards(
            inputs.rewards_BL, logp_BX, ref_logp_BX, inputs.mask_BL, fold_kl))
    adv_BL, ret_BL = estimators.compute_advantages(name, inputs, hp)
    if whiten:
        adv_BL = reduce.masked_whiten(adv_BL, inputs.mask_BL, inputs.row_weight_B)
    return adv_BL, ret_BL
