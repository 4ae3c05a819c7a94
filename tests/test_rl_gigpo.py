"""GiGPO against a plain-numpy loop, by hand, and its invariances (padding, no repeated state)."""
import functools

import jax
import numpy as np
import pytest

from meowjax import rl

MODES = [pytest.param(lambda f: f, id="eager"), pytest.param(jax.jit, id="jit")]
EPS = 1e-6


# ---------------------------------------------------------------- numpy reference


def np_turns(m_L, te_L):
    """[(token indices, end index or None)] of one row; None = an unfinished last turn."""
    turns, cur = [], []
    for t in range(len(m_L)):
        if m_L[t] > 0:
            cur.append(t)
            if te_L[t] > 0:
                turns.append((cur, t))
                cur = []
    return turns + ([(cur, None)] if cur else [])


def np_normalise(x, members, use_std):
    if len(members) < 2:
        return 0.0
    out = x - np.mean(members)
    return out / (np.std(members, ddof=1) + EPS) if use_std else out


def np_gigpo(r, m, te, key, g, w, gamma, step_weight, use_std, episode_discount=False):
    B, L = r.shape
    rtg, turns = {}, {}  # (b, k) -> R_k;  b -> turns
    for b in range(B):
        turns[b] = np_turns(m[b], te[b])
        rew = [sum(float(r[b, i]) for i in tokens) for tokens, _ in turns[b]]
        for k in range(len(rew)):
            rtg[b, k] = sum(gamma ** (j - k) * rew[j] for j in range(k, len(rew)))
    real = [b for b in range(B) if w[b] > 0]
    ep = {b: (rtg.get((b, 0), 0.0) if episode_discount
              else sum(float(r[b, i]) for tokens, _ in turns[b] for i in tokens)) for b in real}
    anchors = [(b, k, g[b], key[b, end]) for b in real for k, (_, end) in enumerate(turns[b])
               if end is not None]
    adv, ret = np.zeros((B, L)), np.zeros((B, L))
    for b in real:
        a_e = np_normalise(ep[b], [ep[c] for c in real if g[c] == g[b]], use_std)
        for k, (tokens, end) in enumerate(turns[b]):
            a_s = 0.0
            if end is not None:
                same = [rtg[c, j] for c, j, gc, kc in anchors if gc == g[b] and kc == key[b, end]]
                a_s = np_normalise(rtg[b, k], same, use_std)
            adv[b, tokens] = a_e + step_weight * a_s
            ret[b, tokens] = rtg[b, k]
    return adv, ret


# ---------------------------------------------------------------- random batches


def random_batch(seed, layout, B=7, L=24, num_keys=3):
    """Turn layout: every real position is a turn end. Token layout: observation gaps, agent
    turns of 1-3 tokens, sometimes an unfinished last turn. Garbage off the turn ends."""
    rng = np.random.default_rng(seed)
    m = np.zeros((B, L), np.float32)
    te = np.zeros((B, L), np.float32)
    for b in range(B):
        if layout == "turn":
            n = rng.integers(0, L + 1) if b else L
            m[b, :n] = te[b, :n] = 1
            continue
        t = 0
        while t < L:
            t += rng.integers(0, 3)  # observation tokens
            n = rng.integers(1, 4)
            m[b, t:t + n] = 1
            if t + n <= L and rng.random() < 0.9:
                te[b, t + n - 1] = 1
            t += n
    r = np.where(te > 0, rng.choice([0.0, 1.0, -0.5], size=(B, L)), 0)
    r += np.where((m > 0) & (te == 0), 0.1 * rng.normal(size=(B, L)), 0)  # e.g. folded KL
    r = np.where(m > 0, r, 100 * rng.normal(size=(B, L))).astype(np.float32)
    key = np.where(te > 0, rng.integers(0, num_keys, (B, L)), rng.integers(-99, 99, (B, L)))
    g = rng.choice([-5, 7, 100], size=B).astype(np.int32)
    w = (rng.random(B) < 0.85).astype(np.float32)
    return rl.EstimatorInputs(r, m, w, np.zeros_like(r), te, g, key.astype(np.int32))


JIT = jax.jit(rl.gigpo_advantages,
              static_argnames=("gamma", "step_weight", "use_std", "episode_discount", "eps"))


def gigpo(x, wrap=None, **kw):
    """GiGPO on `x`, jitted (one compile per shape and hyper-parameters) or `wrap`ped."""
    fn = functools.partial(JIT, **kw) if wrap is None else wrap(
        functools.partial(rl.gigpo_advantages, **kw))
    return fn(x.rewards_BL, x.mask_BL, x.turn_end_BL, x.state_key_BL, x.group_ids_B,
              x.row_weight_B)


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("wrap", MODES)
def test_gigpo_by_hand(wrap):
    # One group, turn layout, gamma 0.5, no std. Row 0 visits states A, B with rewards 0, 1;
    # row 1 visits A, C, B with rewards 0, 0, 1. Returns-to-go: (0.5, 1) and (0.25, 0.5, 1).
    # Steps: A = {0.5, 0.25} -> +-0.125; B = {1, 1} -> 0; C alone -> 0. Episode: both win, total
    # reward G = (1, 1) -> A_E = 0 (the paper's episode level); discounted G = R_0 = (0.5, 0.25)
    # -> A_E = (+0.125, -0.125) (episode_discount).
    A, Bs, C = 11, 22, 33
    x = rl.EstimatorInputs(
        rewards_BL=np.array([[0, 1, 0, 0], [0, 0, 1, 0]], np.float32),
        mask_BL=np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.float32),
        row_weight_B=np.ones(2, np.float32),
        values_BL=np.zeros((2, 4), np.float32),
        turn_end_BL=np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.float32),
        group_ids_B=np.array([4, 4], np.int32),
        state_key_BL=np.array([[A, Bs, A, A], [A, C, Bs, C]], np.int32),
    )
    a, ret = gigpo(x, wrap, gamma=0.5, use_std=False, step_weight=1.0)
    np.testing.assert_allclose(a, [[0.125, 0, 0, 0], [-0.125, 0, 0, 0]], atol=1e-7)
    np.testing.assert_allclose(ret, [[0.5, 1, 0, 0], [0.25, 0.5, 1, 0]])
    a, ret = gigpo(x, wrap, gamma=0.5, use_std=False, step_weight=1.0, episode_discount=True)
    np.testing.assert_allclose(a, [[0.25, 0.125, 0, 0], [-0.25, -0.125, -0.125, 0]], atol=1e-7)
    np.testing.assert_allclose(ret, [[0.5, 1, 0, 0], [0.25, 0.5, 1, 0]])
    a, _ = gigpo(x, wrap, gamma=0.5, use_std=False, step_weight=2.0, episode_discount=True)
    np.testing.assert_allclose(a, [[0.375, 0.125, 0, 0], [-0.375, -0.125, -0.125, 0]],
                               atol=1e-7)


@pytest.mark.parametrize("layout", ["turn", "token"])
@pytest.mark.parametrize("use_std", [True, False])
@pytest.mark.parametrize("episode_discount", [False, True])
def test_gigpo_matches_numpy(layout, use_std, episode_discount):
    for seed, (gamma, step_weight) in enumerate([(1.0, 1.0), (0.9, 1.0), (0.9, 0.3), (1.0, 2.0)]):
        x = random_batch(seed, layout)
        kw = dict(gamma=gamma, use_std=use_std, step_weight=step_weight,
                  episode_discount=episode_discount)
        a_ref, ret_ref = np_gigpo(*(np.asarray(v) for v in (
            x.rewards_BL, x.mask_BL, x.turn_end_BL, x.state_key_BL, x.group_ids_B,
            x.row_weight_B)), **kw)
        a, ret = gigpo(x, **kw)
        np.testing.assert_allclose(a, a_ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(ret, ret_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["turn", "token"])
def test_gigpo_jit_equals_eager(layout):
    x = random_batch(9, layout)
    kw = dict(gamma=0.9, use_std=True, step_weight=0.5)
    for got, want in zip(gigpo(x, lambda f: f, **kw), gigpo(x, **kw)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", ["turn", "token"])
@pytest.mark.parametrize("gamma", [1.0, 0.8])
@pytest.mark.parametrize("use_std", [True, False])
def test_gigpo_without_repeated_states_is_grpo(layout, gamma, use_std):
    x = random_batch(4, layout)
    x = x._replace(state_key_BL=np.arange(x.mask_BL.size, dtype=np.int32).reshape(x.mask_BL.shape))
    # GRPO on the total reward (gamma 1), or with episode_discount on the discounted return.
    for episode_discount, grpo_gamma in ((False, 1.0), (True, gamma)):
        hp = rl.estimator_hparams("grpo", gamma=grpo_gamma, lam=1.0, section={"use_std": use_std})
        for wrap in (lambda f: f, jax.jit):  # the same mode for both (XLA may fuse differently)
            a, _ = gigpo(x, wrap, gamma=gamma, use_std=use_std, step_weight=0.7,
                         episode_discount=episode_discount)
            grpo = wrap(functools.partial(rl.compute_advantages, "grpo", hp=hp))
            a_grpo, _ = grpo(x)
            np.testing.assert_array_equal(a, a_grpo)
            assert np.any(a != 0)


@pytest.mark.parametrize("layout", ["turn", "token"])
@pytest.mark.parametrize("fill", [np.nan, 3.0])
def test_gigpo_padded_rows_change_nothing(layout, fill):
    x = random_batch(5, layout)
    B, L = x.mask_BL.shape
    k, extra = 3, 5
    idx = np.arange(k) % B  # padded rows copy real rows' groups and state keys

    def pad(v, row_fill, col_fill):
        v = np.concatenate([v, np.full((B, extra), col_fill, v.dtype)], axis=1)
        return np.concatenate([v, np.full((k, L + extra), row_fill, v.dtype)], axis=0)

    padded = rl.EstimatorInputs(
        rewards_BL=pad(x.rewards_BL, fill, fill),
        mask_BL=pad(x.mask_BL, 1, 0),
        row_weight_B=np.concatenate([x.row_weight_B, np.zeros(k, np.float32)]),
        values_BL=pad(x.values_BL, fill, fill),
        turn_end_BL=pad(x.turn_end_BL, 1, 1),
        group_ids_B=np.concatenate([x.group_ids_B, x.group_ids_B[idx]]),
        state_key_BL=np.concatenate([pad(x.state_key_BL, 0, 0)[:B],
                                     pad(x.state_key_BL, 0, 0)[idx]]),
    )
    kw = dict(gamma=0.9, use_std=True, step_weight=0.5)
    a, ret = gigpo(x, **kw)
    a_p, ret_p = gigpo(padded, **kw)
    np.testing.assert_allclose(a_p[:B, :L], a, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ret_p[:B, :L], ret, rtol=1e-6, atol=1e-7)
    assert not np.any(a_p[B:]) and not np.any(a_p[:, L:]) and not np.any(ret_p[B:])


def test_gigpo_through_the_registry_under_jit():
    x = random_batch(6, "token")
    hp = rl.estimator_hparams("gigpo", gamma=0.95, lam=1.0, section={"step_weight": 0.5})
    fn = jax.jit(rl.compute_advantages, static_argnames=("name", "hp"))
    a, ret = fn("gigpo", x, hp)
    a_ref, ret_ref = gigpo(x, gamma=0.95, step_weight=0.5, use_std=True)
    np.testing.assert_allclose(a, a_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ret, ret_ref, rtol=1e-6, atol=1e-7)
    assert rl.ESTIMATORS["gigpo"].needs == ("group_ids_B", "turn_end_BL", "state_key_BL")
    assert not rl.ESTIMATORS["gigpo"].needs_critic


def test_gigpo_step_groups_stay_within_episode_groups():
    # Same state key in two episode groups: not one step group (each is a singleton -> A_S = 0).
    key = np.array([[5], [5]], np.int32)
    seg = rl.step_groups(np.array([1, 2], np.int32), key)
    assert seg[0, 0] != seg[1, 0]
    seg = rl.step_groups(np.array([1, 1], np.int32), key)
    assert seg[0, 0] == seg[1, 0]


def test_gigpo_compiles_at_full_size_in_linear_memory():
    B, L = 64, 1024
    shapes = [jax.ShapeDtypeStruct((B, L), np.float32)] * 3 + [
        jax.ShapeDtypeStruct((B, L), np.int32), jax.ShapeDtypeStruct((B,), np.int32),
        jax.ShapeDtypeStruct((B,), np.float32)]
    fn = jax.jit(functools.partial(rl.gigpo_advantages, gamma=0.9))
    compiled = fn.lower(*shapes).compile()
    mem = compiled.memory_analysis()
    if mem is not None:  # O((B L)^2) would be 16 GiB
        assert mem.temp_size_in_bytes < 256 * 2**20
