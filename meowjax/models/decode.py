"""One-token decode through the KV cache in a feature-major layout: the CPU sampler's fast path.

`lm.decode_step` with L = 1 computes each projection as x_BE @ W_EF: B (16) rows against a
weight matrix streamed from memory. XLA:CPU runs that skinny product at half the bandwidth of
the same product written W_FE @ x_EB (weights as [out, in] rows, activations as [E, B]
columns): a chain of SmolLM2-sized SwiGLU blocks at B = 16 took 88-110 ms as x @ W and 47-56 ms
as W^T x on the dev VM (`benchmarks/sampler.py --decode_compare` measures the whole sampler).
Transposing each product's operands locally does not help: XLA folds the transposes into the
dot and picks the slow form again (an optimization barrier keeps the q / k / v and LM-head
products, whose [F, B] results are transposed for attention and sampling, in the fast form).
So this step keeps the residual stream as x_EB through every layer and reads weights prepared
once per `generate` call by `decode_params`, one array per layer (the layers are unrolled: a
layer scan copies each layer's slice of the stacked weights on every step):

    h_EB  = RMSNorm_E(x_EB)                                  (flax RMSNorm over axis 0)
    q_FB  = Wq_FE h_EB + bq,  k, v likewise   ->  [B, 1, H|K, D] for RoPE and attention
    x_EB += Wo_EF attn_FB
    x_EB += Wdown_EF (silu(Wgate_FE h_EB) * Wup_FE h_EB),   h_EB = RMSNorm_E(x_EB)
    logits_BV = (W_VE RMSNorm_E(x_EB))^T                     (fp32; W_VE = embedding when tied)

The same math as `lm.decode_step` (`lm.rms_norm`, `lm.apply_rope`, `lm.write_cache` and the
`jax.nn.dot_product_attention` of `lm.Attention`); products may sum in another order, so the
logits agree to fp32 rounding (tests pin this against `lm.decode_step`).
"""
from __future__ import annotations

from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from meowjax.models import lm
from meowjax.models.config import ModelConfig

DecodeParams = dict[str, Any]


def decode_params(params: lm.Params, cfg: ModelConfig) -> DecodeParams:
    """The weights of `params` as [out, in] matrices, one array per layer (one transpose each).

        {"layers": ({"attn_norm", "mlp_norm": [E],
                     "q_FE": [H D, E], "k_FE", "v_FE": [K D, E], "o_EF": [E, H D],
                     "gate_FE", "up_FE": [F, E], "down_EF": [E, F],
                     "q_bias": [H D], "k_bias", "v_bias": [K D]   (cfg.qkv_bias only)},
                    ... one dict per layer),
         "embedding": [V, E], "head_VE": [V, E], "final_norm": [E]}

    Per-layer arrays, not the [N, ...] stacks: a layer scan slices (copies) each layer's
    weights out of the stack on every step, 11% of a SmolLM2 decode step's op time.
    """
    e = cfg.hidden_size
    attn, mlp = params["layers"]["attn"], params["layers"]["mlp"]
    layers = []
    for i in range(cfg.num_layers):
        to_fe = lambda kernel: kernel[i].reshape(e, -1).T
        layer = {
            "attn_norm": params["layers"]["attn_norm"]["scale"][i],
            "mlp_norm": params["layers"]["mlp_norm"]["scale"][i],
            "q_FE": to_fe(attn["q_proj"]["kernel"]),
            "k_FE": to_fe(attn["k_proj"]["kernel"]),
            "v_FE": to_fe(attn["v_proj"]["kernel"]),
            "o_EF": attn["o_proj"]["kernel"][i].reshape(-1, e).T,
            "gate_FE": mlp["gate_proj"]["kernel"][i].T,
            "up_FE": mlp["up_proj"]["kernel"][i].T,
            "down_EF": mlp["down_proj"]["kernel"][i].T,
        }
        if cfg.qkv_bias:
            for name in ("q", "k", "v"):
                layer[f"{name}_bias"] = attn[f"{name}_proj"]["bias"][i].reshape(-1)
        layers.append(layer)
    embedding = params["embed"]["embedding"]
    head_VE = embedding if cfg.tie_embeddings else params["lm_head"]["kernel"].T
    return {"layers": tuple(layers), "embedding": embedding, "head_VE": head_VE,
            "final_norm": params["final_norm"]["scale"]}


def _rms_norm_EB(cfg: ModelConfig, scale_E: jax.Array, x_EB: jax.Array) -> jax.Array:
    """`lm`'s RMSNorm module with the features on axis 0."""
    return lm.rms_norm(cfg, axis=0).apply({"params": {"scale": scale_E}}, x_EB)


def _project(cfg: ModelConfig, w_FE: jax.Array, x_EB: jax.Array, bias_F=None) -> jax.Array:
    """W_FE x_EB (+ bias) in the compute dtype, as `nn.DenseGeneral` computes x W (+ bias)."""
    dtype = cfg.compute_dtype
    out_FB = jnp.dot(w_FE.astype(dtype), x_EB.astype(dtype))
    return out_FB if bias_F is None else out_FB + bias_F.astype(dtype)[:, None]


def _project_barrier(cfg: ModelConfig, w_FE: jax.Array, x_EB: jax.Array, bias_F=None):
    """`_project` behind an optimization barrier, for a product whose [F, B] result is then
    transposed: without it XLA rewrites transpose(W x) as x^T W^T, the slow form again."""
    return jax.lax.optimization_barrier(_project(cfg, w_FE, x_EB, bias_F))


def _block(cfg: ModelConfig, w: dict, layer: int, x_EB: jax.Array, kv: tuple, index: jax.Array,
           positions_B1: jax.Array, mask_B1S: jax.Array) -> tuple[jax.Array, tuple]:
    """One decoder block on x_EB; writes this token's key / value into slot ``index`` of layer
    ``layer`` of the stacked caches kv = (k_NBSKD, v_NBSKD) (`lm.write_cache`)."""
    batch = x_EB.shape[1]
    h, k_heads, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    h_EB = _rms_norm_EB(cfg, w["attn_norm"], x_EB)

    def heads(name: str, n: int) -> jax.Array:
        out_FB = _project_barrier(cfg, w[f"{name}_FE"], h_EB, w.get(f"{name}_bias"))
        return out_FB.T.reshape(batch, 1, n, d)

    q = lm.apply_rope(heads("q", h), positions_B1, cfg.rope_theta)
    k = lm.apply_rope(heads("k", k_heads), positions_B1, cfg.rope_theta)
    v = heads("v", k_heads)
    kv, keys, values = lm.write_cache(kv, k, v, layer, index)
    out_B1HD = jax.nn.dot_product_attention(q, keys, values, mask=mask_B1S[:, None])
    x_EB = x_EB + _project(cfg, w["o_EF"], out_B1HD.reshape(batch, h * d).T)
    h_EB = _rms_norm_EB(cfg, w["mlp_norm"], x_EB)
    gated_FB = nn.silu(_project(cfg, w["gate_FE"], h_EB)) * _project(cfg, w["up_FE"], h_EB)
    return x_EB + _project(cfg, w["down_EF"], gated_FB), kv


def decode_token(
    dparams: DecodeParams, cfg: ModelConfig, tokens_B: jax.Array, positions_B: jax.Array,
    cache: lm.KVCache, mask_B: jax.Array | None = None,
) -> tuple[jax.Array, lm.KVCache]:
    """`lm.decode_step` for one new token per row: (fp32 logits [B, V], the updated cache).

    Writes slot ``cache.index``; the token attends to the filled real slots up to it. ``mask_B``
    (default all 1) marks the slot real for later tokens (0: a finished row's padding, which
    later turns of a kept cache must not attend to). The layers are unrolled (a Python loop
    over `decode_params`' per-layer weights)."""
    chex.assert_rank([tokens_B, positions_B], 1)
    chex.assert_equal_shape([tokens_B, positions_B])
    batch = tokens_B.shape[0]
    chex.assert_shape(cache.k_NBSKD, (cfg.num_layers, batch, None, cfg.num_kv_heads,
                                      cfg.head_dim))
    chex.assert_equal(len(dparams["layers"]), cfg.num_layers)
    if mask_B is None:
        mask_B = jnp.ones((batch,), jnp.int32)
    chex.assert_shape(mask_B, (batch,))
    mask_B1S, new_mask_BS = lm.cache_attention_mask(cache, mask_B[:, None].astype(jnp.int32))
    dtype = cfg.compute_dtype
    x_EB = jnp.take(dparams["embedding"], tokens_B, axis=0).astype(dtype).T
    kv = (cache.k_NBSKD, cache.v_NBSKD)
    for layer, w in enumerate(dparams["layers"]):
        x_EB, kv = _block(cfg, w, layer, x_EB, kv, cache.index, positions_B[:, None], mask_B1S)
    x_EB = _rms_norm_EB(cfg, dparams["final_norm"], x_EB)
    logits_VB = jax.lax.optimization_barrier(jnp.dot(
        dparams["head_VE"].astype(dtype), x_EB.astype(dtype), preferred_element_type=jnp.float32))
    new_cache = lm.KVCache(k_NBSKD=kv[0], v_NBSKD=kv[1], mask_BS=new_mask_BS,
                           index=cache.index + 1)
    return logits_VB.T, new_cache
