"""Decoder-only LM of the Llama/Qwen2 family in flax.linen, behind pure functions.

Architecture (per block, pre-norm):
    h = x + o_proj(Attn(RoPE(q_proj(RMSNorm(x))), RoPE(k_proj(.)), v_proj(.)))
    y = h + down_proj(silu(gate_proj(RMSNorm(h))) * up_proj(RMSNorm(h)))
    RMSNorm(x) = scale * x / sqrt(mean(x^2) + eps)           (computed in fp32)
    RoPE (half rotation, HF `rotate_half`): with inv_freq_i = theta^(-2i/D), i < D/2,
        angle = pos * [inv_freq, inv_freq];  x' = x * cos(angle) + rotate_half(x) * sin(angle),
        rotate_half([x1, x2]) = [-x2, x1].
    Attention: softmax(q k^T / sqrt(D) + mask) v in fp32, grouped-query (H query heads share
    K kv heads), causal over *slots* and masked on padding keys; without a KV cache computed
    over causal query blocks (`attention.causal_block_attention`, cfg.attention_blocks).
Logits = final_norm(x) @ W_out in fp32 (W_out = embedding^T when tied).

Parameters are a plain nested dict; decoder blocks are stacked on a leading "layers" axis
(`nn.scan`), so big presets compile once per block rather than once per layer:
    {"embed": {"embedding": [V, E]},
     "layers": {"attn_norm": {"scale": [N, E]},
                "attn": {"q_proj": {"kernel": [N, E, H, D], "bias": [N, H, D]},
                         "k_proj": {"kernel": [N, E, K, D], "bias": [N, K, D]},
                         "v_proj": {"kernel": [N, E, K, D], "bias": [N, K, D]},
                         "o_proj": {"kernel": [N, H, D, E]}},
                "mlp_norm": {"scale": [N, E]},
                "mlp": {"gate_proj": {"kernel": [N, E, F]}, "up_proj": {"kernel": [N, E, F]},
                        "down_proj": {"kernel": [N, F, E]}}},
     "final_norm": {"scale": [E]},
     "lm_head": {"kernel": [E, V]}}          # only when cfg.tie_embeddings is False
(biases only when cfg.qkv_bias).

The training forward and the KV-cache decode share one code path (`Trunk`): without a cache the
keys/values are just this call's, and attention runs over causal query blocks.
"""
from __future__ import annotations

import functools
from typing import Any

import chex
import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

from meowjax.models import attention
from meowjax.models.config import ModelConfig

Params = dict[str, Any]
_INIT_STD = 0.02
_POLICIES = jax.checkpoint_policies
# jax.checkpoint policy of each ModelConfig.saved_activations ("everything": no checkpoint).
_SAVE_POLICIES = {
    "projections": _POLICIES.save_from_both_policies(
        _POLICIES.dots_with_no_batch_dims_saveable, _POLICIES.save_only_these_names("attention")),
    "dots": _POLICIES.dots_saveable,
}


class KVCache(flax.struct.PyTreeNode):
    """Preallocated key/value cache for all layers.

    Attributes:
      k_NBSKD, v_NBSKD: keys/values per layer N, row B, slot S, kv head K, head dim D.
      mask_BS: 1 where a slot holds a real (non-padding) token.
      index: int32 scalar, the next slot to write (the same for all rows: prompts are
        left-padded so rows stay aligned).
    """

    k_NBSKD: jax.Array
    v_NBSKD: jax.Array
    mask_BS: jax.Array
    index: jax.Array


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype: Any = None) -> KVCache:
    """An empty cache of `max_len` slots for `batch` rows (dtype defaults to cfg.dtype)."""
    dtype = cfg.compute_dtype if dtype is None else jnp.dtype(dtype)
    shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(
        k_NBSKD=jnp.zeros(shape, dtype),
        v_NBSKD=jnp.zeros(shape, dtype),
        mask_BS=jnp.zeros((batch, max_len), jnp.int32),
        index=jnp.zeros((), jnp.int32),
    )


def positions_from_mask(mask_BL: jax.Array) -> jax.Array:
    """Position ids for padded rows: pos = clip(cumsum(mask) - 1, 0). Works for left or right pad."""
    chex.assert_rank(mask_BL, 2)
    return jnp.maximum(jnp.cumsum(mask_BL.astype(jnp.int32), axis=-1) - 1, 0)


def apply_rope(x_BLHD: jax.Array, positions_BL: jax.Array, theta: float) -> jax.Array:
    """Rotary embedding, half-rotation convention (HF Llama/Qwen2 `rotate_half`), in fp32."""
    chex.assert_rank(x_BLHD, 4)
    d = x_BLHD.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    angle_BLd = positions_BL.astype(jnp.float32)[..., None] * inv_freq
    angle_BLD = jnp.concatenate([angle_BLd, angle_BLd], axis=-1)[:, :, None, :]
    x = x_BLHD.astype(jnp.float32)
    x1, x2 = jnp.split(x, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    out = x * jnp.cos(angle_BLD) + rotated * jnp.sin(angle_BLD)
    return out.astype(x_BLHD.dtype)


def _dense(cfg: ModelConfig, features, name: str, *, axis=-1, use_bias: bool = False):
    return nn.DenseGeneral(
        features=features, axis=axis, use_bias=use_bias, dtype=cfg.compute_dtype,
        param_dtype=cfg.params_dtype, kernel_init=nn.initializers.normal(_INIT_STD), name=name,
    )


def _tokens(x_BLE: jax.Array) -> jax.Array:
    """[B, L, E] -> [B*L, E]: the projections run on a token matrix, so each weight gradient is
    a dot with one contracting dim (tokens). Over [B, L] rows XLA:CPU contracts two dims and,
    inside the layer scan, writes the backward's activations transposed first: a SmolLM2-sized
    update at B=4 x 256 spent 26% of its op time in those copies (``benchmarks/profile_ops``)."""
    return x_BLE.reshape(-1, x_BLE.shape[-1])


def rms_norm(cfg: ModelConfig, name: str | None = None, axis: int = -1) -> nn.RMSNorm:
    """The model's RMSNorm module over feature axis ``axis`` (0 for `decode`'s [E, B])."""
    return nn.RMSNorm(
        epsilon=cfg.rms_norm_eps, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
        reduction_axes=axis, feature_axes=axis, name=name,
    )


def write_cache(kv: tuple[jax.Array, jax.Array], k_BLKD: jax.Array, v_BLKD: jax.Array,
                layer: int | jax.Array, index: jax.Array
                ) -> tuple[tuple[jax.Array, jax.Array], jax.Array, jax.Array]:
    """Writes this call's keys / values into slots [index, index + L) of layer ``layer`` of the
    stacked caches kv = (k_NBSKD, v_NBSKD); returns (kv, that layer's keys, values) in k's dtype."""
    k_all, v_all = kv
    start = (layer, 0, index, 0, 0)
    k_all = jax.lax.dynamic_update_slice(k_all, k_BLKD[None].astype(k_all.dtype), start)
    v_all = jax.lax.dynamic_update_slice(v_all, v_BLKD[None].astype(v_all.dtype), start)
    return (k_all, v_all), k_all[layer].astype(k_BLKD.dtype), v_all[layer].astype(k_BLKD.dtype)


class Attention(nn.Module):
    """Grouped-query self-attention that writes this call's keys/values into a slot buffer."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x_BLE, positions_BL, mask_BLS, kv, layer, index):
        cfg = self.cfg
        h, k_heads, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        batch, length, _ = x_BLE.shape
        x_TE = _tokens(x_BLE)
        q = _dense(cfg, (h, d), "q_proj", use_bias=cfg.qkv_bias)(x_TE).reshape(batch, length, h, d)
        k = _dense(cfg, (k_heads, d), "k_proj", use_bias=cfg.qkv_bias)(x_TE).reshape(
            batch, length, k_heads, d)
        v = _dense(cfg, (k_heads, d), "v_proj", use_bias=cfg.qkv_bias)(x_TE).reshape(
            batch, length, k_heads, d)
        q = apply_rope(q, positions_BL, cfg.rope_theta)
        k = apply_rope(k, positions_BL, cfg.rope_theta)
        if kv is None:
            keys, values = k, v
        else:
            kv, keys, values = write_cache(kv, k, v, layer, index)
        if kv is None and cfg.attention_blocks > 1:  # self-attention under a causal mask
            out_BLHD = attention.causal_block_attention(q, keys, values, mask_BLS,
                                                        cfg.attention_blocks)
        else:
            out_BLHD = jax.nn.dot_product_attention(q, keys, values, mask=mask_BLS[:, None])
        out_BLHD = checkpoint_name(out_BLHD, "attention")
        out_TE = _dense(cfg, cfg.hidden_size, "o_proj", axis=(-2, -1))(
            out_BLHD.reshape(batch * length, h, d))
        return out_TE.reshape(batch, length, -1), kv


class Mlp(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x_BLE):
        cfg = self.cfg
        x_TE = _tokens(x_BLE)
        gate = _dense(cfg, cfg.intermediate_size, "gate_proj")(x_TE)
        up = _dense(cfg, cfg.intermediate_size, "up_proj")(x_TE)
        out_TE = _dense(cfg, cfg.hidden_size, "down_proj")(nn.silu(gate) * up)
        return out_TE.reshape(x_BLE.shape)


class Block(nn.Module):
    """One pre-norm decoder block; scanned over layers with carry (x, kv, layer)."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, carry, positions_BL, mask_BLS, index):
        x, kv, layer = carry
        attn_out, kv = Attention(self.cfg, name="attn")(
            rms_norm(self.cfg, "attn_norm")(x), positions_BL, mask_BLS, kv, layer, index
        )
        x = x + attn_out
        x = x + Mlp(self.cfg, name="mlp")(rms_norm(self.cfg, "mlp_norm")(x))
        return (x, kv, layer + 1), None


class Trunk(nn.Module):
    """Embedding, scanned blocks and the final norm; returns final hidden states."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens_BL, positions_BL, mask_BLS, kv, index):
        cfg = self.cfg
        x = nn.Embed(
            cfg.vocab_size, cfg.hidden_size, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
            embedding_init=nn.initializers.normal(_INIT_STD), name="embed",
        )(tokens_BL)
        if cfg.remat:
            block = nn.remat(Block, prevent_cse=False)
        elif cfg.saved_activations in _SAVE_POLICIES:
            block = nn.remat(Block, prevent_cse=False,
                             policy=_SAVE_POLICIES[cfg.saved_activations])
        else:
            block = Block
        stack = nn.scan(
            block, variable_axes={"params": 0}, split_rngs={"params": True},
            in_axes=(nn.broadcast, nn.broadcast, nn.broadcast), length=cfg.num_layers,
            unroll=min(cfg.scan_unroll, cfg.num_layers),
        )
        (x, kv, _), _ = stack(cfg, name="layers")(
            (x, kv, jnp.zeros((), jnp.int32)), positions_BL, mask_BLS, index
        )
        return rms_norm(cfg, "final_norm")(x), kv


_TRUNK_KEYS = ("embed", "layers", "final_norm")


def _trunk_apply(params, cfg, tokens_BL, positions_BL, mask_BLS, kv, index):
    trunk_params = {k: params[k] for k in _TRUNK_KEYS}
    return Trunk(cfg).apply({"params": trunk_params}, tokens_BL, positions_BL, mask_BLS, kv, index)


@functools.partial(jax.jit, static_argnums=0)
def init_params(cfg: ModelConfig, rng: jax.Array) -> Params:
    """Fresh parameters (normal(0.02) kernels, unit norms, zero biases) as a plain dict (jitted)."""
    rng_trunk, rng_head = jax.random.split(rng)
    tokens = jnp.zeros((1, 1), jnp.int32)
    mask = jnp.ones((1, 1, 1), bool)
    variables = Trunk(cfg).init(rng_trunk, tokens, tokens, mask, None, jnp.zeros((), jnp.int32))
    params = dict(variables["params"])
    if not cfg.tie_embeddings:
        kernel = _INIT_STD * jax.random.normal(rng_head, (cfg.hidden_size, cfg.vocab_size))
        params["lm_head"] = {"kernel": kernel.astype(cfg.params_dtype)}
    return params


def abstract_params(cfg: ModelConfig) -> Params:
    """`jax.ShapeDtypeStruct` pytree of the parameters, without allocating them."""
    return jax.eval_shape(functools.partial(init_params, cfg), jax.random.key(0))


def logical_axes(cfg: ModelConfig) -> Params:
    """Same structure as `init_params(cfg)`; leaves are tuples of logical axis names per dim."""
    def proj(out_heads: str, bias: bool):
        p = {"kernel": ("layers", "embed", out_heads, "head_dim")}
        if bias:
            p["bias"] = ("layers", out_heads, "head_dim")
        return p

    axes = {
        "embed": {"embedding": ("vocab", "embed")},
        "layers": {
            "attn_norm": {"scale": ("layers", "embed")},
            "attn": {
                "q_proj": proj("heads", cfg.qkv_bias),
                "k_proj": proj("kv_heads", cfg.qkv_bias),
                "v_proj": proj("kv_heads", cfg.qkv_bias),
                "o_proj": {"kernel": ("layers", "heads", "head_dim", "embed")},
            },
            "mlp_norm": {"scale": ("layers", "embed")},
            "mlp": {
                "gate_proj": {"kernel": ("layers", "embed", "mlp")},
                "up_proj": {"kernel": ("layers", "embed", "mlp")},
                "down_proj": {"kernel": ("layers", "mlp", "embed")},
            },
        },
        "final_norm": {"scale": ("embed",)},
    }
    if not cfg.tie_embeddings:
        axes["lm_head"] = {"kernel": ("embed", "vocab")}
    return axes


def logits_from_hidden(params: Params, cfg: ModelConfig, hidden_BLE: jax.Array) -> jax.Array:
    """logits = hidden @ W_out with fp32 accumulation and fp32 result."""
    chex.assert_rank(hidden_BLE, 3)
    if cfg.tie_embeddings:
        w_EV = params["embed"]["embedding"].T
    else:
        w_EV = params["lm_head"]["kernel"]
    dtype = cfg.compute_dtype
    logits_TV = jnp.einsum(
        "te,ev->tv", _tokens(hidden_BLE).astype(dtype), w_EV.astype(dtype),
        preferred_element_type=jnp.float32,
    )
    return logits_TV.reshape(*hidden_BLE.shape[:-1], -1)


def _check_tokens(tokens_BL, positions_BL, mask_BL) -> None:
    chex.assert_rank([tokens_BL, positions_BL, mask_BL], 2)
    chex.assert_equal_shape([tokens_BL, positions_BL, mask_BL])


def hidden_states(
    params: Params, cfg: ModelConfig, tokens_BL: jax.Array, positions_BL: jax.Array,
    mask_BL: jax.Array,
) -> jax.Array:
    """Final (normed) hidden states [B, L, E] of a padded batch (mask 1 = real token)."""
    _check_tokens(tokens_BL, positions_BL, mask_BL)
    real_BLS = jnp.broadcast_to(mask_BL[:, None, :] > 0, (*mask_BL.shape, mask_BL.shape[1]))
    return hidden_states_masked(params, cfg, tokens_BL, positions_BL, real_BLS)  # & causal


def hidden_states_masked(
    params: Params, cfg: ModelConfig, tokens_BL: jax.Array, positions_BL: jax.Array,
    mask_BLS: jax.Array,
) -> jax.Array:
    """Final hidden states [B, L, E] under an explicit attention mask.

    mask_BLS[b, i, j] = True lets query i attend to key j (e.g. block masks for packed rows),
    intersected with the causal mask (j <= i; `ModelConfig.attention_blocks` never computes the
    keys above the diagonal); `hidden_states` is this with mask = causal & real(key).
    """
    chex.assert_rank([tokens_BL, positions_BL, mask_BLS], [2, 2, 3])
    chex.assert_equal_shape([tokens_BL, positions_BL])
    chex.assert_shape(mask_BLS, (*tokens_BL.shape, tokens_BL.shape[1]))
    length = tokens_BL.shape[1]
    mask_BLS = mask_BLS.astype(bool) & jnp.tril(jnp.ones((length, length), bool))[None]
    hidden, _ = _trunk_apply(
        params, cfg, tokens_BL, positions_BL, mask_BLS, None, jnp.zeros((), jnp.int32)
    )
    return hidden


def forward(
    params: Params, cfg: ModelConfig, tokens_BL: jax.Array, positions_BL: jax.Array,
    mask_BL: jax.Array, *, return_hidden: bool = False,
):
    """Training forward over a padded batch: fp32 logits [B, L, V] (and hidden [B, L, E]).

    Attention is causal over slots and ignores keys where mask_BL == 0, so left- or right-padded
    rows are right given their positions (see `positions_from_mask`). Outputs at pad slots are
    finite but meaningless.
    """
    hidden = hidden_states(params, cfg, tokens_BL, positions_BL, mask_BL)
    logits = logits_from_hidden(params, cfg, hidden)
    return (logits, hidden) if return_hidden else logits


def cache_attention_mask(cache: KVCache, mask_BL: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(mask_BLS, new_mask_BS) for L new tokens written at slots [index, index + L).

        new_mask[b, s] = mask[b, s - index] on the new slots, else the cache's mask
        mask_BLS[b, l, s] = (s <= index + l) & new_mask[b, s]
    """
    length, slots = mask_BL.shape[1], cache.mask_BS.shape[1]
    new_mask_BS = jax.lax.dynamic_update_slice(
        cache.mask_BS, mask_BL.astype(jnp.int32), (0, cache.index)
    )
    query_slot_L = cache.index + jnp.arange(length)
    causal_LS = jnp.arange(slots)[None, :] <= query_slot_L[:, None]
    return causal_LS[None] & (new_mask_BS[:, None, :] > 0), new_mask_BS


def decode_hidden(
    params: Params, cfg: ModelConfig, tokens_BL: jax.Array, positions_BL: jax.Array,
    cache: KVCache, mask_BL: jax.Array | None = None,
) -> tuple[jax.Array, KVCache]:
    """Prefill (L > 1) or decode (L == 1) through the cache: writes slots [index, index + L).

    A query at slot index + l attends to filled real slots s <= index + l.
    Returns the final hidden states [B, L, E] (before the LM head) and the updated cache, so a
    prefill can apply the head to the one position it samples from (`logits_from_hidden`).
    """
    if mask_BL is None:
        mask_BL = jnp.ones(tokens_BL.shape, jnp.int32)
    _check_tokens(tokens_BL, positions_BL, mask_BL)
    batch, length = tokens_BL.shape
    slots = cache.mask_BS.shape[1]
    chex.assert_shape(cache.k_NBSKD, (cfg.num_layers, batch, slots, cfg.num_kv_heads, cfg.head_dim))
    mask_BLS, new_mask_BS = cache_attention_mask(cache, mask_BL)
    hidden, (k_all, v_all) = _trunk_apply(
        params, cfg, tokens_BL, positions_BL, mask_BLS, (cache.k_NBSKD, cache.v_NBSKD), cache.index
    )
    new_cache = KVCache(k_NBSKD=k_all, v_NBSKD=v_all, mask_BS=new_mask_BS,
                        index=cache.index + length)
    return hidden, new_cache


def decode_step(
    params: Params, cfg: ModelConfig, tokens_BL: jax.Array, positions_BL: jax.Array,
    cache: KVCache, mask_BL: jax.Array | None = None,
) -> tuple[jax.Array, KVCache]:
    """`decode_hidden` then the LM head at every position: fp32 logits [B, L, V] and the cache."""
    hidden_BLE, cache = decode_hidden(params, cfg, tokens_BL, positions_BL, cache, mask_BL)
    return logits_from_hidden(params, cfg, hidden_BLE), cache


def token_logprobs(
    logits_BLV: jax.Array, targets_BL: jax.Array, temperature: float | jax.Array = 1.0
) -> jax.Array:
    """logp[b, l] = log_softmax(logits[b, l] / temperature)[targets[b, l]], in fp32."""
    chex.assert_rank(logits_BLV, 3)
    chex.assert_rank(targets_BL, 2)
    logp_BLV = jax.nn.log_softmax(logits_BLV.astype(jnp.float32) / temperature, axis=-1)
    return jnp.take_along_axis(logp_BLV, targets_BL[..., None].astype(jnp.int32), axis=-1)[..., 0]


def _logp_entropy_fwd_core(logits_BLV, targets_BL, temperature):
    chex.assert_rank([logits_BLV, targets_BL], [3, 2])
    chex.assert_equal_shape_prefix([logits_BLV, targets_BL], 2)
    z_BLV = logits_BLV.astype(jnp.float32) / temperature
    lse_BL = jax.nn.logsumexp(z_BLV, axis=-1)
    logp_BLV = z_BLV - lse_BL[..., None]            # fused into the reductions below by XLA
    p_BLV = jnp.exp(logp_BLV)
    ent_BL = -jnp.sum(jnp.where(p_BLV > 0, p_BLV * logp_BLV, 0.0), axis=-1)
    target_BL = jnp.take_along_axis(z_BLV, targets_BL[..., None].astype(jnp.int32), axis=-1)
    return target_BL[..., 0] - lse_BL, ent_BL, lse_BL


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def token_logprobs_entropy(
    logits_BLV: jax.Array, targets_BL: jax.Array, temperature: float = 1.0
) -> tuple[jax.Array, jax.Array]:
    """(logp_BL, entropy_BL) of softmax(logits / tau) in fp32, from one pass over the vocabulary.

        z = logits / tau,   lse = logsumexp_v z,   logp_v = z_v - lse
        logp[b, l] = z[b, l, targets[b, l]] - lse[b, l]
        H[b, l]    = -sum_v p_v logp_v,   p_v = exp(logp_v)   (p_v = 0 terms contribute 0)

    Equal to `token_logprobs` and `meowjax.rl.losses.entropy_from_logits` of logits / tau, but no
    [B, L, V] log_softmax or softmax array is kept: the backward pass saves only the logits and
    the [B, L] lse and H, and rebuilds p in one fused pass:
        d logp / dz_v = 1[v = target] - p_v,      dH / dz_v = -p_v (logp_v + H)
    `temperature` is a static Python float (not differentiated).
    """
    logp_BL, ent_BL, _ = _logp_entropy_fwd_core(logits_BLV, targets_BL, temperature)
    return logp_BL, ent_BL


def _logp_entropy_fwd(logits_BLV, targets_BL, temperature):
    logp_BL, ent_BL, lse_BL = _logp_entropy_fwd_core(logits_BLV, targets_BL, temperature)
    return (logp_BL, ent_BL), (logits_BLV, targets_BL, lse_BL, ent_BL)


def _logp_entropy_bwd(temperature, residuals, cotangents):
    logits_BLV, targets_BL, lse_BL, ent_BL = residuals
    g_logp_BL, g_ent_BL = cotangents
    logp_BLV = logits_BLV.astype(jnp.float32) / temperature - lse_BL[..., None]
    p_BLV = jnp.exp(logp_BLV)
    onehot_BLV = jnp.arange(logits_BLV.shape[-1]) == targets_BL[..., None]
    d_ent_BLV = jnp.where(p_BLV > 0, -p_BLV * (logp_BLV + ent_BL[..., None]), 0.0)
    dz_BLV = g_logp_BL[..., None] * (onehot_BLV - p_BLV) + g_ent_BL[..., None] * d_ent_BLV
    d_logits_BLV = (dz_BLV / temperature).astype(logits_BLV.dtype)
    d_targets = np.zeros(targets_BL.shape, jax.dtypes.float0)
    return d_logits_BLV, d_targets


token_logprobs_entropy.defvjp(_logp_entropy_fwd, _logp_entropy_bwd)
