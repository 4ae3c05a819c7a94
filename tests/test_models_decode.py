"""The feature-major decode step (`models.decode`) against `lm.decode_step` on the same cache."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meowjax.models import config as config_lib
from meowjax.models import decode, lm

CASES = {
    "qwen2 tied, qkv bias": ("tiny", {}, 2e-6),
    "untied head": ("tiny", dict(tie_embeddings=False), 2e-6),
    "llama, no bias, 3 layers, H=K": ("tiny", dict(qkv_bias=False, num_layers=3, num_kv_heads=4,
                                                   arch="llama"), 2e-6),
    "small (GQA, D=64)": ("small", dict(qkv_bias=False), 1e-5),
    "bfloat16": ("tiny", dict(dtype="bfloat16"), 1e-2),
}
_decode_step = jax.jit(lm.decode_step, static_argnums=1)
_decode_token = jax.jit(decode.decode_token, static_argnums=1)
_decode_params = jax.jit(decode.decode_params, static_argnums=1)


def _prefilled(cfg, batch=3, prompt=5, extra=4):
    """Random larger-than-init weights and a cache holding left-padded prompts."""
    params = lm.init_params(cfg, jax.random.key(0))
    params = jax.tree.map(lambda x: x * 5.0 if x.ndim > 2 else x, params)
    tokens = jax.random.randint(jax.random.key(1), (batch, prompt), 3, cfg.vocab_size)
    mask = jnp.ones((batch, prompt), jnp.int32).at[0, :2].set(0)
    positions = lm.positions_from_mask(mask)
    cache = lm.init_cache(cfg, batch, prompt + extra)
    _, cache = jax.jit(lm.decode_hidden, static_argnums=1)(params, cfg, tokens, positions, cache,
                                                           mask)
    return params, tokens[:, -1], positions[:, -1] + 1, cache


@pytest.mark.parametrize("case", sorted(CASES))
def test_decode_token_equals_lm_decode_step(case):
    """Three steps from the same prefilled cache: same logits (to rounding), same cache slots
    written, same mask and index; the next token is the reference's argmax each time."""
    preset, overrides, atol = CASES[case]
    cfg = config_lib.get_preset(preset, **overrides)
    params, token_B, position_B, cache = _prefilled(cfg)
    dparams = _decode_params(params, cfg)
    want_cache = got_cache = cache
    for _ in range(3):
        want_B1V, want_cache = _decode_step(params, cfg, token_B[:, None], position_B[:, None],
                                            want_cache)
        got_BV, got_cache = _decode_token(dparams, cfg, token_B, position_B, got_cache)
        assert got_BV.dtype == jnp.float32 and got_BV.shape == (3, cfg.vocab_size)
        np.testing.assert_allclose(got_BV, want_B1V[:, 0], atol=atol, rtol=0)
        assert float(jnp.abs(want_B1V).max()) > 0.3  # the logits are far from 0 at this scale
        for got, want in ((got_cache.k_NBSKD, want_cache.k_NBSKD),
                          (got_cache.v_NBSKD, want_cache.v_NBSKD)):
            np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                                       atol=10 * atol, rtol=0)
        np.testing.assert_array_equal(got_cache.mask_BS, want_cache.mask_BS)
        assert int(got_cache.index) == int(want_cache.index)
        token_B = jnp.argmax(want_B1V[:, 0], axis=-1).astype(jnp.int32)
        position_B = position_B + 1
    assert int(got_cache.index) == 8


def test_decode_params_are_per_layer_out_in_matrices():
    cfg = config_lib.get_preset("tiny", tie_embeddings=False, num_layers=3)
    params = lm.init_params(cfg, jax.random.key(0))
    dparams = decode.decode_params(params, cfg)
    e, f, hd, kd = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim, \
        cfg.num_kv_heads * cfg.head_dim
    assert len(dparams["layers"]) == 3
    shapes = {name: x.shape for name, x in dparams["layers"][2].items()}
    assert shapes == {"attn_norm": (e,), "mlp_norm": (e,), "q_FE": (hd, e), "k_FE": (kd, e),
                      "v_FE": (kd, e), "o_EF": (e, hd), "gate_FE": (f, e), "up_FE": (f, e),
                      "down_EF": (e, f), "q_bias": (hd,), "k_bias": (kd,), "v_bias": (kd,)}
    layer2 = jax.tree.map(lambda x: x[2], params["layers"])
    np.testing.assert_array_equal(dparams["layers"][2]["gate_FE"],
                                  layer2["mlp"]["gate_proj"]["kernel"].T)
    np.testing.assert_array_equal(dparams["layers"][2]["q_FE"][5],  # head 0, dim 5
                                  layer2["attn"]["q_proj"]["kernel"][:, 0, 5])
    np.testing.assert_array_equal(dparams["layers"][2]["o_EF"][:, cfg.head_dim + 1],  # head 1
                                  layer2["attn"]["o_proj"]["kernel"][1, 1])
    np.testing.assert_array_equal(dparams["head_VE"], params["lm_head"]["kernel"].T)


def _plain_dot_shapes(compiled_hlo: str) -> list[tuple[int, ...]]:
    """Result shapes of the dots without batch dimensions in an optimized HLO module."""
    shapes = []
    for line in compiled_hlo.splitlines():
        match = re.search(r"= f32\[([\d,]+)\]\S* dot\(", line)
        if match and "batch_dims" not in line:
            shapes.append(tuple(int(n) for n in match.group(1).split(",")))
    return shapes


def test_every_projection_is_weights_times_columns():
    """In the compiled step every product is W [out, in] x x [in, B] -> [out, B]: 7 a layer
    plus the LM head. Without the optimization barriers XLA rewrites the q / k / v and head
    products of SmolLM2's widths, whose results are transposed, into x^T W^T -> [B, out] (the
    slow form; the tiny preset's q / k / v products keep their form either way)."""
    cfg = config_lib.get_preset("smollm2-135m", num_layers=2, vocab_size=4096)
    batch = 16
    dparams = jax.eval_shape(lambda p: decode.decode_params(p, cfg), lm.abstract_params(cfg))
    cache = jax.eval_shape(lambda: lm.init_cache(cfg, batch, 128))
    ids_B = jax.ShapeDtypeStruct((batch,), jnp.int32)
    hlo = _decode_token.lower(dparams, cfg, ids_B, ids_B, cache).compile().as_text()
    shapes = _plain_dot_shapes(hlo)
    assert len(shapes) == 7 * cfg.num_layers + 1
    assert all(len(shape) == 2 and shape[1] == batch for shape in shapes), shapes
    assert sorted({shape[0] for shape in shapes}) == sorted(
        {cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size,
         cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim})
