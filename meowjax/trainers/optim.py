"""Optimizers (optax) and the train state shared by the SFT and policy-gradient trainers."""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
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
