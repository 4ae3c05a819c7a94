"""Value model: the LM trunk (embedding, blocks, final norm) plus a scalar head per token.

    values[b, l] = hidden[b, l, :] . w + c          (fp32),  hidden = lm.hidden_states(...)

Params: the trunk keys of `lm.init_params` ("embed", "layers", "final_norm"; no "lm_head")
plus {"value_head": {"kernel": [E, 1], "bias": [1]}}.

The head starts at zero, so V = 0 everywhere until the critic has learned something: the first
advantages are the (shaped) returns themselves. A random head's values differ from token to
token, and token-level GAE turns those differences into advantages of the size of a sparse
win's; on the free-text learning test they scattered the command format within two iterations
on one seed of three.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from meowjax.models import lm
from meowjax.models.config import ModelConfig

TRUNK_KEYS = ("embed", "layers", "final_norm")


def init_value_params(
    cfg: ModelConfig, rng: jax.Array, policy_params: lm.Params | None = None
) -> lm.Params:
    """Value params: trunk copied (new buffers) from `policy_params`, or fresh; a zero head."""
    rng_trunk, _ = jax.random.split(rng)
    if policy_params is None:
        source = lm.init_params(cfg, rng_trunk)
    else:
        missing = [k for k in TRUNK_KEYS if k not in policy_params]
        if missing:
            raise ValueError(f"policy_params lacks {missing}; pass LM params from lm.init_params "
                             "or hf_io.load_hf_checkpoint.")
        source = policy_params
    trunk = {k: jax.tree.map(jnp.copy, source[k]) for k in TRUNK_KEYS}
    trunk["value_head"] = {
        "kernel": jnp.zeros((cfg.hidden_size, 1), cfg.params_dtype),
        "bias": jnp.zeros((1,), cfg.params_dtype),
    }
    return trunk


def value_forward(
    params: lm.Params, cfg: ModelConfig, tokens_BL: jax.Array, positions_BL: jax.Array,
    mask_BL: jax.Array,
) -> jax.Array:
    """Per-token values [B, L] in fp32 (same masking/positions contract as `lm.forward`)."""
    hidden_BLE = lm.hidden_states(params, cfg, tokens_BL, positions_BL, mask_BL)
    head = params["value_head"]
    values_BL1 = jnp.einsum(
        "ble,eo->blo", hidden_BLE.astype(jnp.float32), head["kernel"].astype(jnp.float32)
    ) + head["bias"].astype(jnp.float32)
    chex.assert_shape(values_BL1, (*tokens_BL.shape, 1))
    return values_BL1[..., 0]


def value_logical_axes(cfg: ModelConfig) -> lm.Params:
    """Logical axis names per array dim, same structure as `init_value_params(cfg, ...)`."""
    axes = {k: v for k, v in lm.logical_axes(cfg).items() if k in TRUNK_KEYS}
    axes["value_head"] = {"kernel": ("embed", None), "bias": (None,)}
    return axes
