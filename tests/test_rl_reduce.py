"""Masked reductions vs numpy loops, hand-checked numbers, padding and NaN-isolation properties."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meowjax.rl import reduce

SETTINGS = settings(max_examples=25, deadline=None)
MODES = [pytest.param(lambda f: f, id="eager"), pytest.param(jax.jit, id="jit")]
B, L, BP, LP = 3, 6, 5, 9
AGG = jax.jit(reduce.masked_aggregate, static_argnames="mode")
WHITEN = jax.jit(reduce.masked_whiten)


def np_aggregate(x, m, w, mode):
    """Loop reference of `masked_aggregate`'s documented formulas."""
    num = den = 0.0
    for b in range(x.shape[0]):
        tokens = [x[b, t] for t in range(x.shape[1]) if m[b, t] > 0]
        if w[b] <= 0 or not tokens:
            continue
        if mode == "token_mean":
            num, den = num + w[b] * sum(tokens), den + w[b] * len(tokens)
        elif mode == "seq_mean_token_mean":
            num, den = num + w[b] * sum(tokens) / len(tokens), den + w[b]
        else:
            num, den = num + w[b] * sum(tokens), den + w[b]
    return num / den if den > 0 else 0.0


def random_inputs(rng, b=B, l=L):
    x = rng.normal(size=(b, l)).astype(np.float32)
    m = (rng.random((b, l)) < 0.5).astype(np.float32)
    w = rng.choice([0.0, 1.0, 2.0], size=b).astype(np.float32)
    return x, m, w


@pytest.mark.parametrize("wrap", MODES)
@pytest.mark.parametrize("mode", reduce.AGG_MODES)
def test_aggregate_matches_numpy(wrap, mode):
    x, m, w = random_inputs(np.random.default_rng(0))
    got = wrap(functools.partial(reduce.masked_aggregate, mode=mode))(x, m, w)
    np.testing.assert_allclose(got, np_aggregate(x, m, w, mode), rtol=1e-5)


@pytest.mark.parametrize("wrap", MODES)
def test_aggregate_by_hand(wrap):
    x = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    m = jnp.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 has no agent token
    w = jnp.array([1.0, 1.0, 1.0])

    def agg(mode, w=w):
        return wrap(functools.partial(reduce.masked_aggregate, mode=mode))(x, m, w)

    np.testing.assert_allclose(agg("token_mean"), 7 / 3, rtol=1e-6)  # (1 + 2 + 4) / 3
    np.testing.assert_allclose(agg("seq_mean_token_mean"), 2.75, rtol=1e-6)  # (1.5 + 4) / 2
    np.testing.assert_allclose(agg("seq_mean_token_sum"), 3.5, rtol=1e-6)  # (3 + 4) / 2
    w2 = jnp.array([1.0, 2.0, 5.0])
    np.testing.assert_allclose(agg("token_mean", w2), 11 / 4, rtol=1e-6)  # (3 + 2*4) / (2 + 2)
    np.testing.assert_allclose(agg("seq_mean_token_sum", w2), 11 / 3, rtol=1e-6)  # (3 + 8) / 3


@pytest.mark.parametrize("mode", reduce.AGG_MODES)
def test_empty_selection_is_zero_not_nan(mode):
    x = jnp.full((B, L), jnp.nan)
    got = AGG(x, jnp.zeros((B, L)), jnp.ones(B), mode=mode)
    assert got == 0.0
    got = AGG(x, jnp.ones((B, L)), jnp.zeros(B), mode=mode)
    assert got == 0.0
    grad = jax.grad(lambda x: AGG(x, jnp.zeros((B, L)), jnp.ones(B), mode=mode))(x)
    np.testing.assert_array_equal(grad, 0.0)


def _pad(x, m, w, fill):
    """Right-pad every row to LP with masked `fill` tokens, then add padded rows up to BP."""
    x_p = np.full((BP, LP), fill, np.float32)
    m_p = np.zeros((BP, LP), np.float32)
    m_p[B:] = 1.0  # padded rows may even claim agent tokens: row_weight 0 must win
    w_p = np.zeros(BP, np.float32)
    x_p[:B, :L], m_p[:B, :L], w_p[:B] = x, m, w
    return x_p, m_p, w_p


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.nan, np.inf, -np.inf, 3.0]))
def test_padding_changes_nothing_and_nan_never_leaks(seed, fill):
    x, m, w = random_inputs(np.random.default_rng(seed))
    x_nan = np.where(m > 0, x, fill).astype(np.float32)  # garbage at masked tokens too
    x_p, m_p, w_p = _pad(x_nan, m, w, fill)
    for mode in reduce.AGG_MODES:
        want = AGG(x, m, w, mode=mode)
        np.testing.assert_allclose(AGG(x_p, m_p, w_p, mode=mode), want, rtol=1e-6, atol=1e-7)
        grad = jax.grad(lambda x: AGG(x, m_p, w_p, mode=mode))(jnp.asarray(x_p))
        valid = reduce.valid_BL(jnp.asarray(m_p), jnp.asarray(w_p))
        np.testing.assert_array_equal(np.where(valid, 0.0, grad), 0.0)
        assert np.isfinite(grad).all()
    want = WHITEN(x, m, w)
    got = WHITEN(x_p, m_p, w_p)
    np.testing.assert_allclose(got[:B, :L], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got)[~np.asarray(valid)], 0.0)


@pytest.mark.parametrize("wrap", MODES)
def test_whiten_by_hand_and_vs_numpy(wrap):
    x = jnp.array([[1.0, 3.0, 100.0]])
    m = jnp.array([[1, 1, 0]])
    got = wrap(reduce.masked_whiten)(x, m, jnp.ones(1))
    np.testing.assert_allclose(got, [[-1.0, 1.0, 0.0]], atol=1e-6)  # mean 2, population var 1
    got = wrap(functools.partial(reduce.masked_whiten, shift_mean=False))(x, m, jnp.ones(1))
    np.testing.assert_allclose(got, [[1.0, 3.0, 0.0]], atol=1e-6)

    x, m, w = random_inputs(np.random.default_rng(1))
    w = (w > 0).astype(np.float32)
    sel = (m > 0) & (w[:, None] > 0)
    ref = np.where(sel, (x - x[sel].mean()) / np.sqrt(x[sel].var() + 1e-8), 0.0)
    np.testing.assert_allclose(wrap(reduce.masked_whiten)(x, m, w), ref, rtol=1e-4, atol=1e-5)


def test_bad_inputs_fail_clearly():
    z = jnp.zeros((B, L))
    with pytest.raises(AssertionError, match="masked_aggregate"):
        reduce.masked_aggregate(z, jnp.zeros((B, L + 1)), jnp.ones(B))
    with pytest.raises(AssertionError, match="row_weight_B"):
        jax.jit(reduce.masked_aggregate, static_argnames="mode").lower(z, z, jnp.ones(B + 1))
    with pytest.raises(AssertionError, match="rank"):
        reduce.masked_whiten(jnp.zeros(L), jnp.zeros(L), jnp.ones(1))
    with pytest.raises(ValueError, match="token_mean"):
        reduce.masked_aggregate(z, z, jnp.ones(B), "mean")


@pytest.mark.parametrize("wrap", MODES)
def test_masked_max_vs_loop_ignores_padding_nan_and_empty(wrap):
    rng = np.random.default_rng(3)
    for _ in range(20):
        x, m, w = random_inputs(rng)
        x = np.where(m > 0, x, np.nan)  # padding may hold anything, NaN included
        want = max((x[b, t] for b in range(B) for t in range(L) if m[b, t] > 0 and w[b] > 0),
                   default=0.0)
        np.testing.assert_allclose(wrap(reduce.masked_max)(x, m, w), want, rtol=1e-6)
    x = -np.ones((2, 3), np.float32)   # all negative: the max is -1, not the 0 of an empty set
    np.testing.assert_allclose(wrap(reduce.masked_max)(x, np.ones_like(x), np.ones(2)), -1.0)
    np.testing.assert_allclose(wrap(reduce.masked_max)(x, np.zeros_like(x), np.ones(2)), 0.0)
