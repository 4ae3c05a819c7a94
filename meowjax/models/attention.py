"""Grouped-query attention, and causal self-attention computed over query blocks.

For H query heads sharing K key/value heads (G = H / K queries per kv head), head width D:

    s[b, k, g, t, s] = (q[b, t, k G + g] . k[b, s, k]) / sqrt(D)        (fp32)
    s = where(mask[b, t, s], s, -0.7 * finfo.max)
    out[b, t, k G + g] = sum_s softmax_s(s)[b, k, g, t, s] v[b, s, k]

`grouped_attention` is this on one block: the same math and masking as
``jax.nn.dot_product_attention(q, k, v, mask=mask[:, None])`` (its XLA implementation), with the
groups as an einsum axis instead of a vmap.

`causal_block_attention` is self-attention (T = S) under a *causal* mask (mask[b, t, s] is False
for s > t). The T queries are cut into n blocks of ceil(T / n) rows; block i, rows [a_i, e_i),
attends to keys [0, e_i) only, so the key blocks above the diagonal, which the mask would zero,
are never computed: the scores, softmax and both products cost (n + 1) / (2 n) of full attention
(5/8 at n = 4), forward and backward. Each block is a separate, statically shaped
`grouped_attention`, so a row's length bucket compiles once. A query row whose every key is
masked (a padding slot) attends uniformly to its block's keys: finite but meaningless, as with
the full computation.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np


def _large_negative(dtype) -> float:
    """The masked-score fill of ``jax.nn.dot_product_attention``."""
    return -0.7 * float(jnp.finfo(dtype).max)


def grouped_attention(q_BTHD: jax.Array, k_BSKD: jax.Array, v_BSKD: jax.Array,
                      mask_BTS: jax.Array) -> jax.Array:
    """softmax(q k^T / sqrt(D), masked) v with fp32 scores and softmax; out [B, T, H, D]."""
    chex.assert_rank([q_BTHD, k_BSKD, v_BSKD, mask_BTS], [4, 4, 4, 3])
    chex.assert_equal_shape([k_BSKD, v_BSKD])
    batch, length, heads, dim = q_BTHD.shape
    kv_heads = k_BSKD.shape[2]
    chex.assert_shape(mask_BTS, (batch, length, k_BSKD.shape[1]))
    q_BTKGD = q_BTHD.reshape(batch, length, kv_heads, heads // kv_heads, dim)
    s_BKGTS = jnp.einsum("btkgd,bskd->bkgts", q_BTKGD, k_BSKD,
                         preferred_element_type=jnp.float32)
    s_BKGTS = s_BKGTS * np.float32(1.0 / np.sqrt(dim))
    s_BKGTS = jnp.where(mask_BTS[:, None, None], s_BKGTS, _large_negative(s_BKGTS.dtype))
    p_BKGTS = jax.nn.softmax(s_BKGTS, axis=-1).astype(v_BSKD.dtype)
    out_BTKGD = jnp.einsum("bkgts,bskd->btkgd", p_BKGTS, v_BSKD)
    return out_BTKGD.reshape(batch, length, heads, dim)


def block_bounds(length: int, blocks: int) -> list[tuple[int, int]]:
    """[(a_i, e_i)]: query rows of each causal block, ceil(length / blocks) rows each (the last
    may be shorter; fewer blocks when length < blocks)."""
    if blocks < 1:
        raise ValueError(f"attention blocks={blocks} must be >= 1.")
    size = -(-length // blocks)
    return [(a, min(a + size, length)) for a in range(0, length, size)]


def causal_block_attention(q_BLHD: jax.Array, k_BLKD: jax.Array, v_BLKD: jax.Array,
                           mask_BLL: jax.Array, blocks: int) -> jax.Array:
    """Causal self-attention over ``blocks`` query blocks; block [a, e) sees keys [0, e).

    Equal to ``grouped_attention(q, k, v, mask)`` when mask is causal (mask[b, t, s] False for
    s > t): blocks only skip keys the mask excludes. Callers guarantee causality
    (`lm.hidden_states_masked` intersects its mask with the causal one)."""
    chex.assert_rank([q_BLHD, k_BLKD, v_BLKD, mask_BLL], [4, 4, 4, 3])
    length = q_BLHD.shape[1]
    chex.assert_shape(mask_BLL, (q_BLHD.shape[0], length, length))
    bounds = block_bounds(length, blocks)
    # Disjoint pieces (split / concatenate), not overlapping slices: the backward pass then
    # adds same-shaped block gradients instead of zero-padding every block to [B, L, ...].
    # (One block: the split and the concatenations are no-ops.)
    cuts = [e for _, e in bounds[:-1]]
    q_blocks = jnp.split(q_BLHD, cuts, axis=1)
    k_blocks, v_blocks = jnp.split(k_BLKD, cuts, axis=1), jnp.split(v_BLKD, cuts, axis=1)
    outs = [grouped_attention(q_blocks[i], jnp.concatenate(k_blocks[:i + 1], axis=1),
                              jnp.concatenate(v_blocks[:i + 1], axis=1), mask_BLL[:, a:e, :e])
            for i, (a, e) in enumerate(bounds)]
    return jnp.concatenate(outs, axis=1)
