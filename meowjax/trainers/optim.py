"""Optimizers (optax) and the train state shared by the SFT and policy-gradient trainers."""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import ml_collections
import optax


def make_optimizer(lr: float, *, warmup_steps: int, total_steps: int, grad_clip: float,
                   weight_decay: float = 0.0, max_consecutive_errors: int = 1_000_000
                   ) -> optax.GradientTransformation:
    """AdamW with linear warmup then cosine decay to 10%, global-norm clipping, and
    ``optax.apply_if_finite``: a step whose gradients hold NaN/inf is skipped (weights and
    moments unchanged) and counted in the state's ``notfinite_count``."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=lr, warmup_steps=max(1, warmup_steps),
        decay_steps=max(total_steps, warmup_steps + 1), end_value=0.1 * lr)
    inner = optax.chain(optax.clip_by_global_norm(grad_clip),
                        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=weight_decay))
    return optax.apply_if_finite(inner, max_consecutive_errors=max_consecutive_errors)


def optimizer_from_config(c: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
    return make_optimizer(c.lr, warmup_steps=c.warmup_steps, total_steps=total_steps,
                          grad_clip=c.grad_clip, weight_decay=c.get("weight_decay", 0.0))


def skipped_updates(opt_state: Any) -> jax.Array:
    """Total updates skipped for non-finite gradients (from ``apply_if_finite``'s state)."""
    return opt_state.total_notfinite


class TrainState(flax.struct.PyTreeNode):
    """Everything a step changes. ``value_params``/``value_opt_state`` are empty dicts when the
    estimator needs no critic (a fixed pytree shape: never ``None``)."""

    step: jax.Array
    params: Any
    opt_state: Any
    value_params: Any
    value_opt_state: Any


class StepShardings(NamedTuple):
    """Shardings of an update step: ``state`` a TrainState of shardings, ``batch`` one sharding
    for every batch field, ``metrics`` one for every (scalar) metric."""

    state: Any
    batch: Any
    metrics: Any


def make_update_step(loss_fn: Callable, optimizer: optax.GradientTransformation, *, prefix: str,
                     critic_loss_fn: Callable | None = None,
                     critic_optimizer: optax.GradientTransformation | None = None,
                     shardings: StepShardings | None = None):
    """jit(state, batch) -> (state, metrics): one optimizer step on ``loss_fn(params, batch)``
    (and on ``critic_loss_fn(value_params, batch)`` when given). The state is donated.

    Both losses return ``(loss, metrics)``; ``{prefix}/grad_norm`` and ``{prefix}/skipped`` (updates
    skipped so far for non-finite gradients) are added. With ``shardings`` the step is jitted with
    ``in_shardings=(state, batch)`` and ``out_shardings=(state, metrics)``, so the returned state
    has exactly the input state's shardings (see ``meowjax.trainers.placement``).
    """
    jit_kw = {}
    if shardings is not None:
        jit_kw = dict(in_shardings=(shardings.state, shardings.batch),
                      out_shardings=(shardings.state, shardings.metrics))

    @functools.partial(jax.jit, donate_argnums=0, **jit_kw)
    def step(state: TrainState, batch):
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        metrics[f"{prefix}/grad_norm"] = optax.global_norm(grads)
        metrics[f"{prefix}/skipped"] = skipped_updates(opt_state).astype(jnp.float32)
        vparams, vopt = state.value_params, state.value_opt_state
        if critic_loss_fn is not None:
            (_, vm), vgrads = jax.value_and_grad(critic_loss_fn, has_aux=True)(vparams, batch)
            vupdates, vopt = critic_optimizer.update(vgrads, vopt, vparams)
            vparams = optax.apply_updates(vparams, vupdates)
            metrics.update(vm)
        return state.replace(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                             opt_state=opt_state, value_params=vparams,
                             value_opt_state=vopt), metrics

    return step
