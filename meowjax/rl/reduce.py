"""Masked reductions over `[B, L]` token arrays.

Conventions shared by every function here:

* `mask_BL` is 1 (or True) on the tokens that count (agent / loss tokens), 0 elsewhere.
* `row_weight_B` weighs whole rows; padded rows have weight 0.
* A token is *valid* when `mask > 0` and `row_weight > 0`. Invalid tokens contribute exactly
  nothing: values are selected away with `jnp.where` (never multiplied by zero), so NaN or inf in
  padding cannot leak into results or gradients.
* An empty selection (no valid token) reduces to 0, never NaN.
"""
from typing import Final

import chex
import jax.numpy as jnp

AGG_MODES: Final[tuple[str, ...]] = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum")


def check_BL(name: str, x_BL: chex.Array, mask_BL: chex.Array, row_weight_B: chex.Array) -> None:
    """Trace-time rank/shape checks for an `[B, L]` array, its mask and `[B]` row weights."""
    chex.assert_rank([x_BL, mask_BL, row_weight_B], [2, 2, 1], custom_message=name)
    chex.assert_equal_shape([x_BL, mask_BL], custom_message=f"{name}: x_BL vs mask_BL")
    chex.assert_equal_shape_prefix(
        [x_BL, row_weight_B], 1, custom_message=f"{name}: batch dims of x_BL vs row_weight_B"
    )


def valid_BL(mask_BL: chex.Array, row_weight_B: chex.Array) -> chex.Array:
    """Boolean `[B, L]`: token is on the loss mask and its row is not padding."""
    chex.assert_rank([mask_BL, row_weight_B], [2, 1])
    return (mask_BL > 0) & (row_weight_B > 0)[:, None]


def safe_divide(num: chex.Array, den: chex.Array) -> chex.Array:
    """`num / den` where `den > 0`, else 0 (no NaN, and no NaN gradient)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1), 0)


def _float(x: chex.Array) -> chex.Array:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.float32)


def masked_aggregate(
    x_BL: chex.Array, mask_BL: chex.Array, row_weight_B: chex.Array, mode: str = "token_mean",
    norm: chex.Array | None = None,
) -> chex.Array:
    """Scalar aggregate of `x_BL` over valid tokens.

    With `v_bt` = valid token, `w_b` = row weight, `n_b = sum_t v_bt`, and "active" rows
    `a_b = [w_b > 0 and n_b > 0]`:

    * `token_mean`:          `sum_b w_b sum_t v_bt x_bt / sum_b w_b n_b`
    * `seq_mean_token_mean`: `sum_b a_b w_b (sum_t v_bt x_bt / n_b) / sum_b a_b w_b`
    * `seq_mean_token_sum`:  `sum_b a_b w_b (sum_t v_bt x_bt) / sum_b a_b w_b`

    Rows with no valid token are not counted in the sequence means. If nothing is valid the
    result is 0.

    `norm` (> 0) replaces the denominator (`sum_b w_b n_b`, or `sum_b a_b w_b`) by a fixed
    number: then every token (`token_mean`) or row (sequence modes) weighs `1 / norm` whatever
    the batch holds, so the small last minibatch of an epoch does not outweigh the full ones
    (e.g. `norm` = minibatch rows x the iteration's mean tokens per row).
    """
    check_BL("masked_aggregate", x_BL, mask_BL, row_weight_B)
    if mode not in AGG_MODES:
        raise ValueError(f"Unknown aggregation mode {mode!r}; choose one of {list(AGG_MODES)}.")
    x_BL = _float(x_BL)
    valid = valid_BL(mask_BL, row_weight_B)
    w_B = jnp.where(row_weight_B > 0, row_weight_B, 0).astype(x_BL.dtype)
    x0_BL = jnp.where(valid, x_BL, 0)
    n_B = jnp.sum(valid, axis=1).astype(x_BL.dtype)
    sum_B = jnp.sum(x0_BL, axis=1)
    if mode == "token_mean":
        den = jnp.sum(w_B * n_B) if norm is None else norm
        return safe_divide(jnp.sum(w_B * sum_B), den)
    active_w_B = jnp.where(n_B > 0, w_B, 0)
    per_row_B = safe_divide(sum_B, n_B) if mode == "seq_mean_token_mean" else sum_B
    den = jnp.sum(active_w_B) if norm is None else norm
    return safe_divide(jnp.sum(active_w_B * per_row_B), den)


def masked_mean(x_BL: chex.Array, mask_BL: chex.Array, row_weight_B: chex.Array) -> chex.Array:
    """Row-weighted mean over valid tokens (`masked_aggregate(..., "token_mean")`)."""
    return masked_aggregate(x_BL, mask_BL, row_weight_B, "token_mean")


def masked_max(x_BL: chex.Array, mask_BL: chex.Array, row_weight_B: chex.Array) -> chex.Array:
    """`max` of `x_BL` over valid tokens (0 when there is none); e.g. the largest
    `|log pi - log pi_sample|` of a batch, a check that sampling and training agree."""
    check_BL("masked_max", x_BL, mask_BL, row_weight_B)
    valid = valid_BL(mask_BL, row_weight_B)
    return jnp.where(jnp.any(valid), jnp.max(jnp.where(valid, _float(x_BL), -jnp.inf)), 0.0)


def masked_whiten(
    x_BL: chex.Array,
    mask_BL: chex.Array,
    row_weight_B: chex.Array,
    *,
    shift_mean: bool = True,
    eps: float = 1e-8,
) -> chex.Array:
    """Whiten `x_BL` with statistics over valid tokens; invalid tokens become 0.

    `mu = masked_mean(x)`, `var = masked_mean((x - mu)^2)` (population variance, ddof = 0,
    row-weighted like `token_mean`), then `y = (x - mu) / sqrt(var + eps)`; with
    `shift_mean=False` the mean is added back: `y = (x - mu) / sqrt(var + eps) + mu`.
    """
    check_BL("masked_whiten", x_BL, mask_BL, row_weight_B)
    x_BL = _float(x_BL)
    valid = valid_BL(mask_BL, row_weight_B)
    x0_BL = jnp.where(valid, x_BL, 0)
    mu = masked_mean(x0_BL, mask_BL, row_weight_B)
    var = masked_mean(jnp.square(x0_BL - mu), mask_BL, row_weight_B)
    y_BL = (x0_BL - mu) * jnp.reciprocal(jnp.sqrt(var + eps))
    if not shift_mean:
        y_BL = y_BL + mu
    return jnp.where(valid, y_BL, 0)
