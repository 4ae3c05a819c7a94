"""Losses vs numpy loops and hand-checked numbers; masked tokens get exactly zero gradient."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from meowjax.rl import losses

SETTINGS = settings(max_examples=25, deadline=None)
MODES = [pytest.param(lambda f: f, id="eager"), pytest.param(jax.jit, id="jit")]
B, L, BP, LP = 3, 6, 5, 9
PPO = jax.jit(
    losses.ppo_policy_loss, static_argnames=("clip_eps", "clip_eps_high", "dual_clip", "agg")
)
VALUE = jax.jit(losses.value_loss, static_argnames=("clip", "agg"))
KL = jax.jit(losses.kl_loss, static_argnames=("kind", "agg"))


# ---------------------------------------------------------------- numpy references


def np_token_mean(x, m, w):
    cells = [(b, t) for b in range(x.shape[0]) for t in range(x.shape[1]) if m[b, t] and w[b] > 0]
    num = sum(w[b] * x[b, t] for b, t in cells)
    den = sum(w[b] for b, _ in cells)
    return num / den if den else 0.0


def np_ppo_token(logp, old, a, eps, eps_hi, dual):
    ratio = np.exp(logp - old)
    unclipped = -a * ratio
    clipped = -a * min(max(ratio, 1 - eps), 1 + eps_hi)
    loss = max(unclipped, clipped)
    if dual is not None and a < 0:
        loss = min(loss, -a * dual)
    return loss


def np_value_token(v, old, ret, clip):
    err = (v - ret) ** 2
    if clip is not None:
        err = max(err, (old + min(max(v - old, -clip), clip) - ret) ** 2)
    return 0.5 * err


def random_inputs(rng, b=B, l=L):
    logp = np.log(rng.uniform(0.05, 1.0, size=(b, l))).astype(np.float32)
    old = (logp + rng.normal(scale=0.3, size=(b, l))).astype(np.float32)
    adv = rng.normal(size=(b, l)).astype(np.float32)
    m = (rng.random((b, l)) < 0.7).astype(np.float32)
    w = rng.choice([0.0, 1.0, 1.0], size=b).astype(np.float32)
    return logp, old, adv, m, w


# ---------------------------------------------------------------- KL


@pytest.mark.parametrize("wrap", MODES)
def test_kl_penalty_by_hand(wrap):
    logp, ref = jnp.log(jnp.array([[0.5]])), jnp.log(jnp.array([[0.25]]))
    d = np.log(2.0)
    for kind, want in [("k1", d), ("k2", 0.5 * d * d), ("k3", 0.5 - 1.0 + d)]:
        got = wrap(functools.partial(losses.kl_penalty, kind=kind))(logp, ref)
        np.testing.assert_allclose(got, [[want]], rtol=1e-6)


@pytest.mark.parametrize("wrap", MODES)
def test_kl_penalty_and_loss_match_numpy(wrap):
    logp, old, _, m, w = random_inputs(np.random.default_rng(0))
    d = logp.astype(np.float64) - old
    refs = {"k1": d, "k2": 0.5 * d**2, "k3": np.exp(-d) - 1 + d}
    for kind, ref in refs.items():
        got = wrap(functools.partial(losses.kl_penalty, kind=kind))(logp, old)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        got = wrap(functools.partial(losses.kl_loss, kind=kind))(logp, old, m, w)
        np.testing.assert_allclose(got, np_token_mean(ref, m, w), rtol=1e-5, atol=1e-6)
    assert (refs["k3"] >= 0).all()


# ---------------------------------------------------------------- PPO


@pytest.mark.parametrize("wrap", MODES)
def test_ppo_by_hand(wrap):
    ratio = jnp.array([[1.5, 0.5, 1.1, 0.5]])
    old = jnp.zeros((1, 4))
    adv = jnp.array([[1.0, 1.0, -1.0, -1.0]])
    m, w = jnp.ones((1, 4)), jnp.ones(1)
    # Per token: max(-A r, -A clip(r, 0.8, 1.2)) = -1.2 (clipped), -0.5, 1.1, 0.8 (clipped).
    loss, metrics = wrap(functools.partial(losses.ppo_policy_loss, clip_eps=0.2))(
        jnp.log(ratio), old, adv, m, w
    )
    np.testing.assert_allclose(loss, (-1.2 - 0.5 + 1.1 + 0.8) / 4, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)
    np.testing.assert_allclose(metrics["dual_clip_fraction"], 0.0)
    np.testing.assert_allclose(metrics["ratio_mean"], 0.9, rtol=1e-6)
    # eps_high 0.28 moves only the upper bound: -1.28 instead of -1.2.
    loss, _ = wrap(functools.partial(losses.ppo_policy_loss, clip_eps=0.2, clip_eps_high=0.28))(
        jnp.log(ratio), old, adv, m, w
    )
    np.testing.assert_allclose(loss, (-1.28 - 0.5 + 1.1 + 0.8) / 4, rtol=1e-5)
    # Dual clip c = 3: ratio 4 with A = -1 gives min(max(4, 1.2), 3) = 3.
    loss, metrics = wrap(functools.partial(losses.ppo_policy_loss, clip_eps=0.2, dual_clip=3.0))(
        jnp.log(jnp.array([[4.0, 4.0]])), jnp.zeros((1, 2)), jnp.array([[-1.0, 1.0]]),
        jnp.ones((1, 2)), jnp.ones(1),
    )
    np.testing.assert_allclose(loss, (3.0 - 1.2) / 2, rtol=1e-6)
    np.testing.assert_allclose(metrics["dual_clip_fraction"], 0.5)


@pytest.mark.parametrize("wrap", MODES)
@pytest.mark.parametrize("eps_hi,dual", [(None, None), (0.28, 3.0)])
def test_ppo_matches_numpy(wrap, eps_hi, dual):
    logp, old, adv, m, w = random_inputs(np.random.default_rng(1))
    fn = functools.partial(
        losses.ppo_policy_loss, clip_eps=0.2, clip_eps_high=eps_hi, dual_clip=dual
    )
    loss, metrics = wrap(fn)(logp, old, adv, m, w)
    per_token = np.vectorize(np_ppo_token)(logp, old, adv, 0.2, eps_hi or 0.2, dual)
    np.testing.assert_allclose(loss, np_token_mean(per_token, m, w), rtol=1e-5, atol=1e-6)
    r = np.exp(logp.astype(np.float64) - old)
    want_kl = np_token_mean(r - 1 - np.log(r), m, w)
    np.testing.assert_allclose(metrics["approx_kl"], want_kl, rtol=1e-4)


def test_ppo_gradient_matches_torch():
    """Gradient wrt logp equals torch autograd on the same (unclipped-or-clipped) objective."""
    logp, old, adv, m, w = random_inputs(np.random.default_rng(2))
    w = np.ones(B, np.float32)
    grad = jax.grad(lambda lp: PPO(lp, old, adv, m, w, clip_eps=0.2)[0])(jnp.asarray(logp))
    lp_t = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    ratio = torch.exp(lp_t - torch.tensor(old, dtype=torch.float64))
    a_t, m_t = torch.tensor(adv, dtype=torch.float64), torch.tensor(m, dtype=torch.float64)
    per_token = torch.maximum(-a_t * ratio, -a_t * torch.clamp(ratio, 0.8, 1.2))
    ((per_token * m_t).sum() / m_t.sum()).backward()
    np.testing.assert_allclose(grad, lp_t.grad.numpy(), rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- value loss


@pytest.mark.parametrize("wrap", MODES)
def test_value_loss_by_hand(wrap):
    v, old, ret = jnp.array([[1.0, 3.0]]), jnp.zeros((1, 2)), jnp.array([[2.0, 0.0]])
    m, w = jnp.ones((1, 2)), jnp.ones(1)
    # t0: max((1-2)^2, (0.5-2)^2) = 2.25; t1: max(9, 0.25) = 9 -> 0.5 * (2.25 + 9) / 2.
    loss, metrics = wrap(functools.partial(losses.value_loss, clip=0.5))(v, old, ret, m, w)
    np.testing.assert_allclose(loss, 2.8125, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)
    loss, _ = wrap(losses.value_loss)(v, old, ret, m, w)
    np.testing.assert_allclose(loss, 0.5 * (1.0 + 9.0) / 2, rtol=1e-6)


@pytest.mark.parametrize("wrap", MODES)
@pytest.mark.parametrize("clip", [None, 0.2])
def test_value_loss_matches_numpy(wrap, clip):
    rng = np.random.default_rng(3)
    _, _, _, m, w = random_inputs(rng)
    v, old, ret = (rng.normal(size=(B, L)).astype(np.float32) for _ in range(3))
    loss, _ = wrap(functools.partial(losses.value_loss, clip=clip))(v, old, ret, m, w)
    per_token = np.vectorize(np_value_token)(v, old, ret, clip)
    np.testing.assert_allclose(loss, np_token_mean(per_token, m, w), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- entropy


@pytest.mark.parametrize("wrap", MODES)
def test_entropy_by_hand_and_vs_torch(wrap):
    inf = jnp.inf
    logits = jnp.array([[[0.0, 0.0, -inf, 0.0], [0.0, 0.0, 0.0, 0.0], [5.0, 5.0, -inf, -inf]]])
    got = wrap(losses.entropy_from_logits)(logits)
    np.testing.assert_allclose(got, [[np.log(3.0), np.log(4.0), np.log(2.0)]], rtol=1e-6)
    grad = jax.grad(lambda z: losses.entropy_from_logits(z).sum())(logits)
    assert np.isfinite(grad).all()
    x = np.random.default_rng(4).normal(size=(B, L, 11)).astype(np.float32) * 3
    want = torch.distributions.Categorical(logits=torch.tensor(x)).entropy().numpy()
    np.testing.assert_allclose(wrap(losses.entropy_from_logits)(x), want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- padding and gradients


def _pad(x, fill):
    """Right-pad to LP and add padded rows up to BP, filling with `fill`."""
    out = np.full((BP, LP), fill, np.float32)
    out[:B, :L] = x
    return out


@functools.partial(jax.jit, static_argnames="agg")
def losses_and_grads(logp, old, adv, m, w, agg):
    """PPO (eps_high + dual clip), clipped value and k3 KL losses, their metrics and gradients."""

    def total(lp, v):
        ppo, ppo_metrics = losses.ppo_policy_loss(
            lp, old, adv, m, w, clip_eps=0.2, clip_eps_high=0.3, dual_clip=3.0, agg=agg
        )
        value, value_metrics = losses.value_loss(v, old, adv, m, w, clip=0.2, agg=agg)
        kl = losses.kl_loss(lp, old, m, w, kind="k3", agg=agg)
        return ppo + value + kl, (ppo, value, kl, ppo_metrics, value_metrics)

    (_, aux), grads = jax.value_and_grad(total, argnums=(0, 1), has_aux=True)(logp, logp)
    return aux, grads


@SETTINGS
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([np.nan, np.inf, -np.inf, 2.0]),
    st.sampled_from(["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"]),
)
def test_padding_changes_nothing_and_masked_grads_are_zero(seed, fill, agg):
    logp, old, adv, m, w = random_inputs(np.random.default_rng(seed))
    invalid = (m == 0) | (w[:, None] == 0)
    garbage = [np.where(invalid, fill, x).astype(np.float32) for x in (logp, old, adv)]
    m_p = _pad(m, 1.0)  # padded rows claim agent tokens; row_weight 0 must still win
    m_p[:B, L:] = 0.0
    w_p = np.zeros(BP, np.float32)
    w_p[:B] = w
    lp_p, old_p, adv_p = (_pad(x, fill) for x in garbage)
    valid_p = (m_p > 0) & (w_p[:, None] > 0)

    want, _ = losses_and_grads(logp, old, adv, m, w, agg)
    got, grads = losses_and_grads(lp_p, old_p, adv_p, m_p, w_p, agg)
    np.testing.assert_allclose(
        jax.tree.leaves(got), jax.tree.leaves(want), rtol=1e-6, atol=1e-7
    )
    for name, g in zip(("policy/kl wrt logp", "value wrt values"), grads):
        assert np.isfinite(g).all(), name
        np.testing.assert_array_equal(np.where(valid_p, 0.0, g), 0.0, err_msg=name)
    assert np.abs(grads[0][valid_p]).sum() > 0 or not valid_p.any()


# ---------------------------------------------------------------- bad inputs


def test_bad_inputs_fail_clearly():
    z = jnp.zeros((B, L))
    with pytest.raises(AssertionError, match="ppo_policy_loss"):
        PPO(z, z, jnp.zeros((B, L + 1)), z, jnp.ones(B), clip_eps=0.2)
    with pytest.raises(AssertionError, match="value_loss"):
        VALUE(z, z, z, z, jnp.ones(B + 1))
    with pytest.raises(AssertionError, match="rank"):
        z1 = jnp.zeros(L)
        losses.ppo_policy_loss(z1, z1, z1, z1, jnp.ones(1), clip_eps=0.2)
    with pytest.raises(AssertionError, match="entropy_from_logits"):
        losses.entropy_from_logits(z)
    with pytest.raises(ValueError, match="dual_clip .* must be > 1"):
        losses.ppo_policy_loss(z, z, z, z, jnp.ones(B), clip_eps=0.2, dual_clip=0.5)
    with pytest.raises(ValueError, match=r"\['k1', 'k2', 'k3'\]"):
        losses.kl_penalty(z, z, kind="k4")
    with pytest.raises(ValueError, match="token_mean"):
        losses.value_loss(z, z, z, z, jnp.ones(B), agg="sum")
