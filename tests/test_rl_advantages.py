"""Advantage estimators vs plain numpy loops, hand-checked numbers, and hypothesis properties."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meowjax.rl import advantages as adv
from meowjax.rl import gigpo

SETTINGS = settings(max_examples=25, deadline=None)
MODES = [pytest.param(lambda f: f, id="eager"), pytest.param(jax.jit, id="jit")]


# ---------------------------------------------------------------- numpy references


def np_token_gae(r_BL, v_BL, m_BL, gamma, lam, boot_B=None):
    adv_BL = np.zeros(r_BL.shape, np.float64)
    ret_BL = np.zeros(r_BL.shape, np.float64)
    for b in range(r_BL.shape[0]):
        idx = [t for t in range(r_BL.shape[1]) if m_BL[b, t] > 0]
        next_v, next_a = (0.0 if boot_B is None else boot_B[b]), 0.0
        for t in reversed(idx):
            a = r_BL[b, t] + gamma * next_v - v_BL[b, t] + gamma * lam * next_a
            adv_BL[b, t], ret_BL[b, t] = a, a + v_BL[b, t]
            next_v, next_a = v_BL[b, t], a
    return adv_BL, ret_BL


def np_classic_gae(r_L, v_L, gamma, lam, v_end=0.0):
    """Textbook GAE, V_{L} = v_end (0: the episode ended), written with explicit deltas."""
    n = len(r_L)
    v_next = np.append(v_L[1:], v_end)
    delta = r_L + gamma * v_next - v_L
    out = np.zeros(n)
    for t in range(n):
        out[t] = sum((gamma * lam) ** (k - t) * delta[k] for k in range(t, n))
    return out


def np_turn_gae(r_BL, v_BL, m_BL, te_BL, gamma, lam, boot_B=None):
    adv_BL = np.zeros(r_BL.shape)
    ret_BL = np.zeros(r_BL.shape)
    for b in range(r_BL.shape[0]):
        turns, cur = [], []  # turns: (token indices, reward sum, value at the first token)
        for t in range(r_BL.shape[1]):
            if m_BL[b, t] > 0:
                cur.append(t)
                if te_BL[b, t] > 0:
                    turns.append((cur, sum(r_BL[b, i] for i in cur), v_BL[b, cur[0]]))
                    cur = []
        if not turns:
            continue
        r_K = np.array([x[1] for x in turns])
        v_K = np.array([x[2] for x in turns])
        a_K = np_classic_gae(r_K, v_K, gamma, lam, 0.0 if boot_B is None else boot_B[b])
        for (tokens, _, _), a, v in zip(turns, a_K, v_K):
            adv_BL[b, tokens] = a
            ret_BL[b, tokens] = a + v
    return adv_BL, ret_BL


def np_grpo(r_B, g_B, w_B, use_std, eps):
    out = np.zeros(len(r_B))
    for i in range(len(r_B)):
        if w_B[i] <= 0:
            continue
        members = [r_B[j] for j in range(len(r_B)) if g_B[j] == g_B[i] and w_B[j] > 0]
        if len(members) < 2:
            continue
        out[i] = r_B[i] - np.mean(members)
        if use_std:
            out[i] /= np.std(members, ddof=1) + eps
    return out


def np_rloo(r_B, g_B, w_B):
    out = np.zeros(len(r_B))
    for i in range(len(r_B)):
        if w_B[i] <= 0:
            continue
        others = [r_B[j] for j in range(len(r_B)) if j != i and g_B[j] == g_B[i] and w_B[j] > 0]
        if others:
            out[i] = r_B[i] - np.mean(others)
    return out


def np_best_win(r_B, won_B, g_B, w_B, best_only):
    out = np.zeros(len(r_B))
    for i in range(len(r_B)):
        if w_B[i] <= 0 or not won_B[i]:
            continue
        wins = [r_B[j] for j in range(len(r_B)) if g_B[j] == g_B[i] and w_B[j] > 0 and won_B[j]]
        out[i] = float(not best_only or r_B[i] >= max(wins) - 1e-6)
    return out


# ---------------------------------------------------------------- random inputs


def random_traj(rng, B, L):
    r = rng.normal(size=(B, L)).astype(np.float32)
    v = rng.normal(size=(B, L)).astype(np.float32)
    m = (rng.random((B, L)) < 0.6).astype(np.float32)
    te = ((rng.random((B, L)) < 0.4) & (m > 0)).astype(np.float32)
    return r, v, m, te


# Hypothesis varies contents at fixed shapes (B, L) -> (B, LP), so each jitted kernel compiles
# at most twice across all examples.
B, L, LP = 3, 8, 11
TOKEN_GAE = jax.jit(adv.token_gae)
TURN_GAE = jax.jit(adv.turn_gae)
GRPO = jax.jit(adv.grpo_advantages, static_argnames="use_std")
RLOO = jax.jit(adv.rloo_advantages)


@st.composite
def trajs(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    gamma = draw(st.sampled_from([1.0, 0.9, 0.5]))
    lam = draw(st.sampled_from([1.0, 0.95, 0.0]))
    return random_traj(np.random.default_rng(seed), B, L), gamma, lam


def right_pad(x_BL, k, fill):
    return np.concatenate([x_BL, np.full((x_BL.shape[0], k), fill, x_BL.dtype)], axis=1)


# ---------------------------------------------------------------- token GAE


@pytest.mark.parametrize("wrap", MODES)
def test_token_gae_matches_numpy(wrap):
    r, v, m, _ = random_traj(np.random.default_rng(0), B, L)
    fn = wrap(functools.partial(adv.token_gae, gamma=0.9, lam=0.8))
    a, ret = fn(r, v, m)
    a_ref, ret_ref = np_token_gae(r, v, m, 0.9, 0.8)
    np.testing.assert_allclose(a, a_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ret_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wrap", MODES)
def test_truncated_episode_bootstraps_token_and_turn_gae(wrap):
    """A row cut by its turn budget continues from bootstrap_b (the value of the state it was
    cut in) instead of 0; a zero bootstrap is the ended episode, bit for bit."""
    r, v, m, te = random_traj(np.random.default_rng(3), B, L)
    boot = np.random.default_rng(4).normal(size=B).astype(np.float32)
    boot[0] = 0.0
    for fn, ref in ((functools.partial(adv.token_gae, gamma=0.9, lam=0.8),
                     lambda b: np_token_gae(r, v, m, 0.9, 0.8, b)),
                    (lambda r_, v_, m_, bootstrap_B=None: adv.turn_gae(
                        r_, v_, m_, te, gamma=0.9, lam=0.8, bootstrap_B=bootstrap_B),
                     lambda b: np_turn_gae(r, v, m, te, 0.9, 0.8, b))):
        a, ret = wrap(fn)(r, v, m, bootstrap_B=boot)
        a_ref, ret_ref = ref(boot)
        np.testing.assert_allclose(a, a_ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret, ret_ref, rtol=1e-5, atol=1e-5)
        a0, _ = wrap(fn)(r, v, m)
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(a0)[0])
        assert not np.allclose(np.asarray(a)[1:], np.asarray(a0)[1:])
    # By hand, one agent token, gamma = lam = 1: A = r + V_boot - V.
    a, _ = adv.token_gae(jnp.array([[0.5]]), jnp.array([[0.2]]), jnp.array([[1.0]]),
                         gamma=1.0, lam=1.0, bootstrap_B=jnp.array([0.7]))
    np.testing.assert_allclose(a, [[0.5 + 0.7 - 0.2]], rtol=1e-6)


@pytest.mark.parametrize("wrap", MODES)
def test_token_gae_by_hand(wrap):
    # Env token at t=3 (value 9 is ignored); gamma = lam = 1 => A_t = (sum of later rewards) - V_t.
    r = jnp.array([[0.0, 0.0, 1.0, 0.0, 0.0, 2.0]])
    v = jnp.array([[0.5, 0.1, 0.2, 9.0, 0.3, 0.4]])
    m = jnp.array([[1, 1, 1, 0, 1, 1]])
    a, ret = wrap(functools.partial(adv.token_gae, gamma=1.0, lam=1.0))(r, v, m)
    np.testing.assert_allclose(a[0], [2.5, 2.9, 2.8, 0.0, 1.7, 1.6], atol=1e-6)
    np.testing.assert_allclose(ret[0], [3.0, 3.0, 3.0, 0.0, 2.0, 2.0], atol=1e-6)
    # gamma = 0.5, zero values: A_3 = 1; A_1 = 1 + 0.5 * A_3 = 1.5; A_0 = 0.5 * A_1 = 0.75.
    a, _ = wrap(functools.partial(adv.token_gae, gamma=0.5, lam=1.0))(
        jnp.array([[0.0, 1.0, 0.0, 1.0]]), jnp.zeros((1, 4)), jnp.array([[1, 1, 0, 1]])
    )
    np.testing.assert_allclose(a[0], [0.75, 1.5, 0.0, 1.0], atol=1e-6)


@SETTINGS
@given(trajs())
def test_token_gae_all_ones_mask_is_classic_gae(data):
    (r, v, _, _), gamma, lam = data
    a, ret = TOKEN_GAE(r, v, np.ones_like(r), gamma=gamma, lam=lam)
    for b in range(r.shape[0]):
        ref = np_classic_gae(r[b].astype(np.float64), v[b].astype(np.float64), gamma, lam)
        np.testing.assert_allclose(a[b], ref, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ret[b], ref + v[b], rtol=1e-4, atol=1e-4)


@SETTINGS
@given(trajs(), st.sampled_from([np.nan, np.inf, 7.0]))
def test_token_gae_right_padding_changes_nothing(data, fill):
    (r, v, m, _), gamma, lam = data
    k = LP - L
    a, ret = TOKEN_GAE(r, v, m, gamma=gamma, lam=lam)
    a_p, ret_p = TOKEN_GAE(
        right_pad(r, k, fill), right_pad(v, k, fill), right_pad(m, k, 0), gamma=gamma, lam=lam
    )
    np.testing.assert_array_equal(a_p[:, : r.shape[1]], a)
    np.testing.assert_array_equal(ret_p[:, : r.shape[1]], ret)
    np.testing.assert_array_equal(a_p[:, r.shape[1] :], 0)


def test_token_gae_masked_inputs_never_leak():
    r, v, m, _ = random_traj(np.random.default_rng(1), B, L)
    r2, v2 = r.copy(), v.copy()
    r2[m == 0], v2[m == 0] = np.nan, np.inf
    a, ret = TOKEN_GAE(r, v, m, gamma=0.9, lam=0.9)
    a2, ret2 = TOKEN_GAE(r2, v2, m, gamma=0.9, lam=0.9)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(ret, ret2)


# ---------------------------------------------------------------- turn GAE


@pytest.mark.parametrize("wrap", MODES)
def test_turn_gae_matches_numpy(wrap):
    r, v, m, te = random_traj(np.random.default_rng(2), B, L)
    a, ret = wrap(functools.partial(adv.turn_gae, gamma=0.9, lam=0.7))(r, v, m, te)
    a_ref, ret_ref = np_turn_gae(r, v, m, te, 0.9, 0.7)
    np.testing.assert_allclose(a, a_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ret_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wrap", MODES)
def test_turn_gae_by_hand(wrap):
    # Turn 0 = tokens 0..2 (reward 1; value 0.5 at its first token, the state it acts in), env
    # token 3, turn 1 = tokens 4..5 (reward 2, value 0.3). gamma 0.9, lam 0.8:
    # A_1 = 2 - 0.3 = 1.7; A_0 = 1 + 0.9 * 0.3 - 0.5 + 0.9 * 0.8 * 1.7 = 1.994.
    r = jnp.array([[0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 5.0]])
    v = jnp.array([[0.5, 0.1, 0.2, 9.0, 0.3, 0.4, 3.0]])
    m = jnp.array([[1, 1, 1, 0, 1, 1, 1]])  # token 6: unfinished turn -> 0
    te = jnp.array([[0, 0, 1, 0, 0, 1, 0]])
    a, ret = wrap(functools.partial(adv.turn_gae, gamma=0.9, lam=0.8))(r, v, m, te)
    np.testing.assert_allclose(a[0], [1.994, 1.994, 1.994, 0, 1.7, 1.7, 0], atol=1e-6)
    np.testing.assert_allclose(ret[0], [2.494, 2.494, 2.494, 0, 2.0, 2.0, 0], atol=1e-6)


@SETTINGS
@given(trajs())
def test_turn_gae_one_token_per_turn_is_token_gae(data):
    (r, v, m, _), gamma, lam = data
    a_turn, ret_turn = TURN_GAE(r, v, m, m, gamma=gamma, lam=lam)
    a_tok, ret_tok = TOKEN_GAE(r, v, m, gamma=gamma, lam=lam)
    np.testing.assert_allclose(a_turn, a_tok, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret_turn, ret_tok, rtol=1e-5, atol=1e-5)


@SETTINGS
@given(trajs(), st.sampled_from([np.nan, np.inf, 7.0]))
def test_turn_gae_right_padding_changes_nothing(data, fill):
    (r, v, m, te), gamma, lam = data
    k = LP - L
    a, ret = TURN_GAE(r, v, m, te, gamma=gamma, lam=lam)
    a_p, ret_p = TURN_GAE(
        right_pad(r, k, fill),
        right_pad(v, k, fill),
        right_pad(m, k, 0),
        right_pad(te, k, 1),
        gamma=gamma,
        lam=lam,
    )
    np.testing.assert_array_equal(a_p[:, : r.shape[1]], a)
    np.testing.assert_array_equal(ret_p[:, : r.shape[1]], ret)


# ---------------------------------------------------------------- GRPO / RLOO


R_B = np.array([1.0, 0.0, 1.0, 5.0, 3.0], np.float32)
G_B = np.array([7, 7, 7, 2, 7], np.int32)
W_B = np.array([1, 1, 1, 1, 0], np.float32)  # last row is padding inside group 7


@pytest.mark.parametrize("wrap", MODES)
def test_grpo_by_hand(wrap):
    # Group 7: mean 2/3, deviations (1/3, -2/3, 1/3), unbiased var = (6/9) / 2 = 1/3.
    s = np.sqrt(1 / 3)
    got = wrap(functools.partial(adv.grpo_advantages, eps=0.0))(R_B, G_B, W_B)
    np.testing.assert_allclose(got, [1 / 3 / s, -2 / 3 / s, 1 / 3 / s, 0, 0], rtol=1e-5)
    got = wrap(functools.partial(adv.grpo_advantages, use_std=False))(R_B, G_B, W_B)
    np.testing.assert_allclose(got, [1 / 3, -2 / 3, 1 / 3, 0, 0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("wrap", MODES)
def test_rloo_by_hand(wrap):
    # Group 7: baselines (0 + 1) / 2, (1 + 1) / 2, (1 + 0) / 2; group 2 has one member -> 0.
    got = wrap(adv.rloo_advantages)(R_B, G_B, W_B)
    np.testing.assert_allclose(got, [0.5, -1.0, 0.5, 0, 0], atol=1e-6)


GB, GBP = 6, 9


@st.composite
def groups(draw):
    floats = st.floats(-3, 3, width=32)
    r = np.array(draw(st.lists(floats, min_size=GB, max_size=GB)), np.float32)
    g = np.array(draw(st.lists(st.sampled_from([-5, 0, 3, 1000]), min_size=GB, max_size=GB)))
    w = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 1.0]), min_size=GB, max_size=GB)))
    return r, g.astype(np.int32), w.astype(np.float32)


@pytest.mark.parametrize("wrap", MODES)
def test_grpo_rloo_match_numpy(wrap):
    rng = np.random.default_rng(3)
    r = rng.normal(size=GBP).astype(np.float32)
    g = rng.integers(0, 4, size=GBP).astype(np.int32) * 11 - 7
    w = (rng.random(GBP) < 0.8).astype(np.float32)
    for use_std in (True, False):
        got = wrap(functools.partial(adv.grpo_advantages, use_std=use_std))(r, g, w)
        np.testing.assert_allclose(got, np_grpo(r, g, w, use_std, 1e-6), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(wrap(adv.rloo_advantages)(r, g, w), np_rloo(r, g, w), atol=1e-5)


@pytest.mark.parametrize("wrap", MODES)
def test_best_win_by_hand(wrap):
    # Group 7: rows 0 and 2 won (returns 0.7, 0.8): row 2 is imitated; row 1 lost with the
    # highest return; row 4 is padding (a win with the highest return: ignored). Group 2: row
    # 3 won alone.
    r = np.array([0.7, 0.9, 0.8, 0.2, 5.0], np.float32)
    won = np.array([1, 0, 1, 1, 1], np.float32)
    got = wrap(adv.best_win_advantages)(r, won, G_B, W_B)
    np.testing.assert_array_equal(got, [0, 0, 1, 1, 0])
    every = wrap(functools.partial(adv.best_win_advantages, best_only=False))(r, won, G_B, W_B)
    np.testing.assert_array_equal(every, [1, 0, 1, 1, 0])


@SETTINGS
@given(groups(), st.lists(st.booleans(), min_size=GB, max_size=GB), st.booleans())
def test_best_win_equals_definition(data, won, best_only):
    r, g, w = data
    won = np.array(won, np.float32)
    got = jax.jit(adv.best_win_advantages, static_argnames="best_only")(r, won, g, w,
                                                                      best_only=best_only)
    np.testing.assert_array_equal(got, np_best_win(r, won, g, w, best_only))


@SETTINGS
@given(groups(), st.booleans())
def test_grpo_zero_mean_per_group_and_matches_numpy(data, use_std):
    r, g, w = data
    a = np.asarray(GRPO(r, g, w, use_std=use_std))
    np.testing.assert_allclose(a, np_grpo(r, g, w, use_std, 1e-6), rtol=1e-3, atol=1e-4)
    for gid in np.unique(g):
        sel = (g == gid) & (w > 0)
        if sel.any():
            assert abs(a[sel].mean()) < 1e-3
    assert np.all(a[w == 0] == 0)


@SETTINGS
@given(groups())
def test_rloo_equals_definition(data):
    r, g, w = data
    np.testing.assert_allclose(RLOO(r, g, w), np_rloo(r, g, w), atol=1e-4)


@SETTINGS
@given(groups(), st.sampled_from([np.nan, 9.0]))
def test_group_padded_rows_change_nothing(data, fill):
    r, g, w = data
    k = GBP - GB
    r_p = np.concatenate([r, np.full(k, fill, np.float32)])
    g_p = np.concatenate([g, np.full(k, g[0], np.int32)])  # even inside a real group
    w_p = np.concatenate([w, np.zeros(k, np.float32)])
    for fn in (GRPO, RLOO):
        np.testing.assert_array_equal(fn(r_p, g_p, w_p)[: len(r)], fn(r, g, w))
        np.testing.assert_array_equal(fn(r_p, g_p, w_p)[len(r) :], 0)


# ---------------------------------------------------------------- episode quantities


@pytest.mark.parametrize("wrap", MODES)
def test_episode_returns_and_broadcast_by_hand(wrap):
    rewards = jnp.array([[0.0, 1.0, 5.0, 2.0]])
    mask = jnp.array([[1, 1, 0, 1]])
    kl = jnp.array([[0.1, 0.2, 100.0, 0.3]])
    np.testing.assert_allclose(wrap(adv.episode_returns)(rewards, mask), [3.0])
    got = wrap(functools.partial(adv.episode_returns, kl_coef=0.5))(rewards, mask, kl)
    np.testing.assert_allclose(got, [3.0 - 0.5 * 0.6], rtol=1e-6)  # 5 and 100 are on env tokens
    np.testing.assert_array_equal(
        wrap(adv.broadcast_episode_advantage)(jnp.array([2.0]), mask), [[2.0, 2.0, 0.0, 2.0]]
    )


@pytest.mark.parametrize("wrap", MODES)
def test_episode_returns_match_numpy(wrap):
    rng = np.random.default_rng(4)
    r, _, m, _ = random_traj(rng, B, L)
    kl = rng.normal(size=r.shape).astype(np.float32)
    ref = [sum(r[b, t] - 0.1 * kl[b, t] for t in range(L) if m[b, t]) for b in range(B)]
    got = wrap(functools.partial(adv.episode_returns, kl_coef=0.1))(r, m, kl)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    folded = wrap(functools.partial(adv.fold_kl_into_rewards, kl_coef=0.1))(r, kl, m)
    np.testing.assert_allclose(folded, np.where(m > 0, r - 0.1 * kl, 0), rtol=1e-6)


# ---------------------------------------------------------------- bad inputs


def test_bad_shapes_fail_at_trace_time():
    z = jnp.zeros((2, 5))
    with pytest.raises(AssertionError, match="token_gae"):
        jax.jit(functools.partial(adv.token_gae, gamma=1.0, lam=1.0)).lower(z, z, jnp.zeros((2, 4)))
    with pytest.raises(AssertionError, match="rank"):
        adv.token_gae(jnp.zeros(5), jnp.zeros(5), jnp.zeros(5), gamma=1.0, lam=1.0)
    with pytest.raises(AssertionError, match="turn_gae"):
        adv.turn_gae(z, z, z, jnp.zeros((3, 5)), gamma=1.0, lam=1.0)
    with pytest.raises(AssertionError, match="group_ids_B must be integers"):
        adv.grpo_advantages(jnp.zeros(3), jnp.zeros(3), jnp.ones(3))
    with pytest.raises(AssertionError, match="rloo_advantages"):
        adv.rloo_advantages(jnp.zeros(3), jnp.zeros(4, jnp.int32), jnp.ones(3))
    with pytest.raises(AssertionError):
        adv.broadcast_episode_advantage(jnp.zeros(3), z)


# ---------------------------------------------------------------- turn quantities

# Turn 0 = tokens 0-1 (reward 1), turn 1 = token 3 (reward 2), token 4 = an unfinished turn 2
# (reward 3); token 2 is an observation token (its reward and turn end are ignored).
TURN_R = np.array([[0.0, 1.0, 5.0, 2.0, 3.0]], np.float32)
TURN_M = np.array([[1, 1, 0, 1, 1]], np.float32)
TURN_TE = np.array([[0, 1, 1, 1, 0]], np.float32)


@pytest.mark.parametrize("wrap", MODES)
def test_turn_returns_by_hand(wrap):
    g = wrap(functools.partial(adv.discounted_episode_returns, gamma=0.5))(TURN_R, TURN_M, TURN_TE)
    np.testing.assert_allclose(g, [1 + 0.5 * 2 + 0.25 * 3])
    rtg = wrap(functools.partial(gigpo.turn_returns_to_go, gamma=0.5))(TURN_R, TURN_M, TURN_TE)
    np.testing.assert_allclose(rtg, [[2.75, 2.75, 0, 3.5, 3]])
    x = np.array([[10.0, 20.0, 30.0, 40.0, 50.0]], np.float32)
    got = wrap(gigpo.broadcast_turn_ends)(x, TURN_M, TURN_TE)
    np.testing.assert_array_equal(got, [[20, 20, 0, 40, 0]])


@pytest.mark.parametrize("wrap", MODES)
def test_discounted_episode_returns_gamma_one_is_episode_returns(wrap):
    r, _, m, te = random_traj(np.random.default_rng(5), B, L)
    got = wrap(functools.partial(adv.discounted_episode_returns, gamma=1.0))(r, m, te)
    np.testing.assert_array_equal(got, adv.episode_returns(r, m))
    rtg = wrap(functools.partial(gigpo.turn_returns_to_go, gamma=0.9))(r, m, te)
    first_B = [rtg[b, np.flatnonzero(m[b])[0]] if m[b].any() else 0 for b in range(B)]
    np.testing.assert_allclose(first_B, adv.discounted_episode_returns(r, m, te, gamma=0.9),
                               rtol=1e-5, atol=1e-6)
