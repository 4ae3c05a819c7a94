"""Grouped-query attention vs a numpy loop, and causal query blocks vs one block."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meowjax.models import attention

B, H, K, D = 2, 4, 2, 8


def _qkv(length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, length, H, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, length, K, D)).astype(np.float32) for _ in range(2))
    return q, k, v


def _causal_padded_mask(length: int) -> np.ndarray:
    """causal & real(key); row 1 left-padded by 3 slots (its first 3 queries see no key)."""
    real = np.ones((B, length), bool)
    real[1, :3] = False
    return np.tril(np.ones((length, length), bool))[None] & real[:, None, :]


def test_grouped_attention_matches_numpy_loop_and_jax_reference():
    q, k, v = _qkv(6)
    rng = np.random.default_rng(1)
    mask = rng.random((B, 6, 6)) < 0.6
    mask[0, 2] = False                       # a query that sees no key: uniform over the keys
    out = np.asarray(attention.grouped_attention(*map(jnp.asarray, (q, k, v, mask))))
    ref = np.zeros_like(q)
    fill = -0.7 * np.finfo(np.float32).max
    for b in range(B):
        for h in range(H):
            kv = h // (H // K)               # query head h reads kv head h // G
            for t in range(6):
                s = np.array([q[b, t, h] @ k[b, j, kv] / np.sqrt(D) if mask[b, t, j] else fill
                              for j in range(6)], np.float64)
                p = np.exp(s - s.max())
                ref[b, t, h] = (p / p.sum()) @ v[b, :, kv]
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_allclose(out[0, 2], v[0].mean(0).repeat(H // K, axis=0), atol=1e-5)
    jax_ref = jax.nn.dot_product_attention(q, k, v, mask=jnp.asarray(mask)[:, None])
    np.testing.assert_allclose(out, np.asarray(jax_ref), atol=1e-6)


def test_block_bounds_partition_the_rows():
    assert attention.block_bounds(13, 4) == [(0, 4), (4, 8), (8, 12), (12, 13)]
    assert attention.block_bounds(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert attention.block_bounds(3, 4) == [(0, 1), (1, 2), (2, 3)]
    assert attention.block_bounds(5, 1) == [(0, 5)]
    with pytest.raises(ValueError, match="must be >= 1"):
        attention.block_bounds(5, 0)


@pytest.mark.parametrize("length,blocks", [(13, 4), (13, 2), (16, 4), (5, 8), (9, 1)])
def test_causal_blocks_equal_one_block_values_and_gradients(length, blocks):
    q, k, v = map(jnp.asarray, _qkv(length))
    mask = jnp.asarray(_causal_padded_mask(length))
    seen = np.asarray(mask).any(-1)          # queries with at least one key
    w = jnp.asarray(np.random.default_rng(2).standard_normal((B, length, H, D)), jnp.float32)
    w = w * jnp.asarray(seen)[..., None, None]

    def loss(fn):
        return jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(fn(q, k, v, mask) * w),
                                          argnums=(0, 1, 2)))

    one = lambda q, k, v, m: attention.grouped_attention(q, k, v, m)
    blocked = lambda q, k, v, m: attention.causal_block_attention(q, k, v, m, blocks)
    np.testing.assert_allclose(np.asarray(blocked(q, k, v, mask))[seen],
                               np.asarray(one(q, k, v, mask))[seen], atol=1e-6)
    (l1, g1), (l2, g2) = loss(one)(q, k, v), loss(blocked)(q, k, v)
    np.testing.assert_allclose(float(l2), float(l1), rtol=1e-6)
    for a, b in zip(g2, g1):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6)


def test_blocks_never_compute_the_keys_above_the_diagonal():
    """The compiled program's exps (one per score) fall to (n + 1) / (2 n) of full attention."""
    length = 64
    args = [jnp.zeros(s) for s in ((B, length, H, D), (B, length, K, D), (B, length, K, D))]
    mask = jnp.asarray(_causal_padded_mask(length))

    def exps(blocks):
        fn = lambda q, k, v, m: attention.causal_block_attention(q, k, v, m, blocks)
        cost = jax.jit(fn).lower(*args, mask).compile().cost_analysis()
        return (cost[0] if isinstance(cost, list) else cost)["transcendentals"]

    assert exps(1) == B * H * length * length
    assert exps(4) == exps(1) * 5 / 8
    assert exps(8) == exps(1) * 9 / 16
