"""LM internals: RoPE vs a numpy loop, cache path == training forward, bf16 and remat."""
import jax
import jax.numpy as jnp
import numpy as np

from meowjax.models import config as config_lib
from meowjax.models import lm

CFG = config_lib.get_preset("tiny")


def test_rope_matches_numpy_loop():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 2, 8)).astype(np.float32)
    pos = np.array([[0, 5, 17]])
    out = np.asarray(lm.apply_rope(jnp.asarray(x), jnp.asarray(pos), 100.0))
    ref = np.zeros_like(x)
    for l in range(3):
        for h in range(2):
            for i in range(4):  # pairs (i, i + D/2) rotate by angle pos * theta^(-2i/D)
                a = pos[0, l] * 100.0 ** (-2 * i / 8)
                x1, x2 = x[0, l, h, i], x[0, l, h, i + 4]
                ref[0, l, h, i] = x1 * np.cos(a) - x2 * np.sin(a)
                ref[0, l, h, i + 4] = x2 * np.cos(a) + x1 * np.sin(a)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_array_equal(lm.positions_from_mask(jnp.array([[0, 0, 1, 1], [1, 1, 1, 0]])),
                                  [[0, 0, 0, 1], [0, 1, 2, 2]])


def test_cached_prefill_and_decode_equal_forward():
    params = lm.init_params(CFG, jax.random.key(0))
    tokens = np.array([[0, 0, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7]], np.int32)
    mask = np.array([[0, 0, 1, 1, 1, 1, 1], [1] * 7], np.int32)
    pos = lm.positions_from_mask(jnp.asarray(mask))
    full = jax.jit(lm.forward, static_argnums=1)(params, CFG, tokens, pos, mask)

    @jax.jit
    def cached(params):
        cache = lm.init_cache(CFG, 2, 9)
        first, cache = lm.decode_step(params, CFG, tokens[:, :4], pos[:, :4], cache, mask[:, :4])
        rest = []
        for t in range(4, 7):  # unrolled: three single-token decode steps
            logits, cache = lm.decode_step(params, CFG, tokens[:, t:t + 1], pos[:, t:t + 1], cache)
            rest.append(logits)
        return jnp.concatenate([first] + rest, axis=1), cache

    logits, cache = cached(params)
    # The explicit-mask entry point with mask = causal & real(key) is the same forward.
    length = tokens.shape[1]
    mask_BLS = np.tril(np.ones((length, length), bool))[None] & (mask[:, None, :] > 0)
    hidden = jax.jit(lm.hidden_states_masked, static_argnums=1)(params, CFG, tokens, pos, mask_BLS)
    np.testing.assert_allclose(lm.logits_from_hidden(params, CFG, hidden), full, atol=1e-5)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(logits)[real], np.asarray(full)[real], atol=1e-5)
    assert int(cache.index) == 7
    np.testing.assert_array_equal(cache.mask_BS[:, :7], mask)


def test_bf16_forward_close_to_fp32_and_remat_gradients_equal():
    params = lm.init_params(CFG, jax.random.key(1))
    tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, CFG.vocab_size)
    mask = jnp.ones((2, 8), jnp.int32)
    pos = lm.positions_from_mask(mask)
    cfg16 = CFG.replace(dtype="bfloat16")
    f32 = jax.jit(lm.forward, static_argnums=1)(params, CFG, tokens, pos, mask)
    b16 = jax.jit(lm.forward, static_argnums=1)(params, cfg16, tokens, pos, mask)
    assert b16.dtype == jnp.float32
    np.testing.assert_allclose(b16, f32, atol=0.02 * float(jnp.abs(f32).max()))

    def loss(p, cfg):
        return lm.token_logprobs(lm.forward(p, cfg, tokens, pos, mask), tokens).mean()

    grad = jax.jit(jax.grad(loss), static_argnums=1)
    g = grad(params, CFG)
    g_remat = grad(params, CFG.replace(remat=True))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), g, g_remat)
    assert float(jnp.abs(g["layers"]["attn"]["q_proj"]["kernel"]).max()) > 0
