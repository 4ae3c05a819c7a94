"""LM internals: RoPE vs a numpy loop, cache path == training forward, bf16, unrolled scan."""
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


_forward = jax.jit(lm.forward, static_argnums=1)
TOKENS = np.array([[0, 0, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 7]], np.int32)
MASK = np.array([[0, 0, 1, 1, 1, 1, 1], [1] * 7], np.int32)
POS = np.asarray(lm.positions_from_mask(jnp.asarray(MASK)))


def test_cached_prefill_and_decode_equal_forward():
    params = lm.init_params(CFG, jax.random.key(0))
    full = _forward(params, CFG, TOKENS, POS, MASK)

    @jax.jit
    def cached(params):
        cache = lm.init_cache(CFG, 2, 9)
        first, cache = lm.decode_step(params, CFG, TOKENS[:, :4], POS[:, :4], cache, MASK[:, :4])

        def step(cache, token_pos):  # single-token decode steps for slots 4, 5, 6
            logits, cache = lm.decode_step(params, CFG, token_pos[0][:, None], token_pos[1][:, None],
                                           cache)
            return cache, logits[:, 0]

        cache, rest = jax.lax.scan(step, cache, (TOKENS[:, 4:].T, POS[:, 4:].T))
        return jnp.concatenate([first, rest.transpose(1, 0, 2)], axis=1), cache

    logits, cache = cached(params)
    real = MASK.astype(bool)
    np.testing.assert_allclose(np.asarray(logits)[real], np.asarray(full)[real], atol=1e-5)
    assert int(cache.index) == 7
    np.testing.assert_array_equal(cache.mask_BS[:, :7], MASK)


def test_bf16_forward_close_to_fp32():
    params = lm.init_params(CFG, jax.random.key(0))
    f32 = _forward(params, CFG, TOKENS, POS, MASK)
    b16 = _forward(params, CFG.replace(dtype="bfloat16"), TOKENS, POS, MASK)
    assert b16.dtype == jnp.float32
    real = MASK.astype(bool)
    np.testing.assert_allclose(np.asarray(b16)[real], np.asarray(f32)[real],
                               atol=0.02 * float(jnp.abs(f32).max()))
    assert not np.array_equal(b16, f32)


def _np_logp_entropy(logits, targets, tau):
    """Plain float64 numpy: log_softmax(logits / tau)[target] and -sum p log p."""
    z = logits.astype(np.float64) / tau
    m = z.max(-1, keepdims=True)
    logp = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
    p = np.exp(logp)
    ent = -np.where(p > 0, p * np.where(p > 0, logp, 0.0), 0.0).sum(-1)
    return np.take_along_axis(logp, targets[..., None], -1)[..., 0], ent


def test_token_logprobs_entropy_matches_numpy_and_autodiff_reference():
    rng = np.random.default_rng(0)
    logits = (4.0 * rng.standard_normal((3, 5, 97))).astype(np.float32)
    logits[0, 0, 3] = -np.inf  # a banned token: p = 0 adds nothing and no NaN
    targets = rng.integers(0, 97, (3, 5)).astype(np.int32)
    targets[0, 0] = 5
    g_logp, g_ent = rng.standard_normal((2, 3, 5)).astype(np.float32)
    for tau in (1.0, 0.7):
        fused = jax.jit(lm.token_logprobs_entropy, static_argnums=2)
        logp, ent = fused(jnp.asarray(logits), jnp.asarray(targets), tau)
        want_logp, want_ent = _np_logp_entropy(logits, targets, tau)
        np.testing.assert_allclose(logp, want_logp, atol=1e-5)
        np.testing.assert_allclose(ent, want_ent, atol=1e-5)

        def objective(fn):
            def f(z):
                lp, h = fn(z)
                return jnp.sum(lp * g_logp) + jnp.sum(h * g_ent)
            return f

        def reference(z):  # the unfused code: two full-vocab log_softmaxes, plain autodiff
            logp_V = jax.nn.log_softmax(z / tau, axis=-1)
            p_V = jnp.exp(logp_V)
            ent = -jnp.sum(p_V * jnp.where(p_V > 0, logp_V, 0.0), axis=-1)
            return lm.token_logprobs(z, jnp.asarray(targets), tau), ent

        grad = jax.jit(jax.grad(objective(lambda z: lm.token_logprobs_entropy(
            z, jnp.asarray(targets), tau))))(jnp.asarray(logits))
        want_grad = jax.grad(objective(reference))(jnp.asarray(logits))
        assert np.isfinite(grad).all()
        np.testing.assert_allclose(grad, want_grad, atol=1e-5)


def test_unrolled_layer_scan_equals_scanned():
    """scan_unroll changes the loop, not the math: same params, same logits and gradients."""
    cfg3 = CFG.replace(num_layers=3)
    params = lm.init_params(cfg3, jax.random.key(1))
    loss = lambda p, c: jnp.sum(jnp.sin(lm.forward(p, c, TOKENS, POS, MASK)))
    outs = {}
    for unroll in (1, 2, 3, 8):
        cfg = cfg3.replace(scan_unroll=unroll)
        assert jax.tree.structure(lm.init_params(cfg, jax.random.key(1))) == jax.tree.structure(params)
        outs[unroll] = jax.jit(jax.value_and_grad(loss), static_argnums=1)(params, cfg)
    for unroll in (2, 3, 8):
        np.testing.assert_allclose(outs[unroll][0], outs[1][0], rtol=1e-5)
        for a, b in zip(jax.tree.leaves(outs[unroll][1]), jax.tree.leaves(outs[1][1])):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    with np.testing.assert_raises_regex(ValueError, "scan_unroll=0 must be >= 1"):
        CFG.replace(scan_unroll=0)


def test_saved_activations_change_memory_not_math():
    """What a block keeps for the backward pass (jax.checkpoint policies) changes the compiled
    update's temp memory, not the loss or the gradients."""
    cfg4 = CFG.replace(num_layers=4)
    params = lm.init_params(cfg4, jax.random.key(2))
    rng = np.random.default_rng(2)
    tokens = rng.integers(3, CFG.vocab_size, (4, 64)).astype(np.int32)
    mask = np.ones_like(tokens)
    pos = np.asarray(lm.positions_from_mask(jnp.asarray(mask)))
    loss = lambda p, c: jnp.sum(jnp.sin(lm.forward(p, c, tokens, pos, mask)))
    outs, temp = {}, {}
    variants = {s: dict(saved_activations=s) for s in config_lib.SAVED_ACTIVATIONS}
    variants["remat"] = dict(remat=True)
    for name, over in variants.items():
        cfg = cfg4.replace(**over)
        step = jax.jit(jax.value_and_grad(loss), static_argnums=1)
        temp[name] = step.lower(params, cfg).compile().memory_analysis().temp_size_in_bytes
        outs[name] = step(params, cfg)
    for name in variants:
        np.testing.assert_allclose(outs[name][0], outs["everything"][0], rtol=1e-5)
        for a, b in zip(jax.tree.leaves(outs[name][1]), jax.tree.leaves(outs["everything"][1])):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    assert temp["remat"] < temp["projections"] < temp["everything"], temp
    assert temp["projections"] < temp["dots"], temp  # dots also keeps the [B, H, L, S] scores
    with np.testing.assert_raises_regex(ValueError, "saved_activations='all'.*projections"):
        CFG.replace(saved_activations="all")


def test_attention_blocks_change_speed_not_math():
    """Causal query blocks (attention_blocks > 1) give the one-block logits and gradients on
    padded rows and on packed scoring rows (block masks); a mask that is not causal is made so."""
    from meowjax.rollout import scoring
    cfg = CFG.replace(attention_blocks=1)
    params = lm.init_params(cfg, jax.random.key(3))
    row = scoring.pack_turn([5, 6, 7, 8, 9], [[10, 11], [12], [13, 14, 15]], max_cands=4)
    seg, packed_pos = row["seg"][None].repeat(2, 0), row["positions"][None].repeat(2, 0)
    tokens = row["tokens"][None].repeat(2, 0)
    packed_mask = np.asarray(scoring.packed_attention_mask(jnp.asarray(seg),
                                                           jnp.ones_like(jnp.asarray(seg))))

    def loss(p, c):
        free = lm.forward(p, c, TOKENS, POS, MASK)[MASK.astype(bool)]
        packed = lm.logits_from_hidden(p, c, lm.hidden_states_masked(p, c, tokens, packed_pos,
                                                                     packed_mask))
        return jnp.sum(jnp.sin(free)) + jnp.sum(jnp.cos(packed))

    ref = jax.jit(jax.value_and_grad(loss), static_argnums=1)(params, cfg)
    for blocks in (2, 4, 16):
        out = jax.jit(jax.value_and_grad(loss), static_argnums=1)(
            params, cfg.replace(attention_blocks=blocks))
        np.testing.assert_allclose(out[0], ref[0], rtol=1e-5)
        for a, b in zip(jax.tree.leaves(out[1]), jax.tree.leaves(ref[1])):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    everything = np.ones((2, 7, 7), bool)   # not causal: intersected with the causal mask
    for c in (cfg, cfg.replace(attention_blocks=4)):
        np.testing.assert_allclose(
            lm.hidden_states_masked(params, c, TOKENS[1:], POS[1:], everything[1:]),
            lm.hidden_states(params, c, TOKENS[1:], POS[1:], MASK[1:]), atol=1e-6)
    with np.testing.assert_raises_regex(ValueError, "attention_blocks=0 must be >= 1"):
        CFG.replace(attention_blocks=0)
