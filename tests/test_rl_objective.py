"""rl.objective: the one PG objective; a fixed loss denominator weighs every minibatch's rows alike."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meowjax.rl import objective, reduce

CFG = objective.ObjectiveConfig(clip_eps=0.2, kl_coef=0.0)


def batch_of(lengths, *, pad_rows=0, norm=None, L=8):
    """Rows of `lengths` agent tokens (ratio 1: logp == old_logp, advantage 1), plus padded
    rows of weight 0 holding garbage."""
    B = len(lengths) + pad_rows
    mask = np.zeros((B, L), np.int32)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    w = np.asarray([1.0] * len(lengths) + [0.0] * pad_rows, np.float32)
    logp = np.full((B, L), -1.0, np.float32)
    logp[len(lengths):] = np.nan                            # padding may hold anything
    batch = {"old_logp": logp, "adv": np.ones((B, L), np.float32),
             "ref_logp": np.zeros((B, L), np.float32), "row_weight": w}
    if norm is not None:
        batch["loss_norm"] = np.full((B,), norm, np.float32) * (w > 0)
    return {k: jnp.asarray(v) for k, v in batch.items()}, jnp.asarray(logp), jnp.asarray(mask)


def token_grads(lengths, **kw):
    """d loss / d log pi(token) of every valid token of one minibatch (under jit)."""
    batch, logp, mask = batch_of(lengths, **kw)

    @jax.jit
    def loss(lp):
        terms = objective.PolicyTerms(lp, jnp.zeros_like(lp), mask, jnp.zeros(()))
        return objective.policy_loss(terms, batch, CFG)[0]

    g = np.asarray(jax.grad(loss)(logp))
    return g[np.asarray(mask) > 0]


def test_fixed_norm_weighs_each_row_of_a_partial_minibatch_like_a_full_one():
    full, partial = [6, 5, 7, 6], [2]                      # minibatch_rows M = 4
    rows = full + partial
    norm = 4 * np.mean(rows)                               # M x mean units per row
    g_full = token_grads(full, norm=norm)
    g_part = token_grads(partial, norm=norm, pad_rows=3)
    np.testing.assert_allclose(g_full, -1.0 / norm, rtol=1e-6)
    np.testing.assert_allclose(g_part, -1.0 / norm, rtol=1e-6)
    # Each step's own token mean instead: the partial minibatch's tokens weigh 12x more here.
    own_full, own_part = token_grads(full), token_grads(partial, pad_rows=3)
    assert own_part[0] / own_full[0] == pytest.approx(sum(full) / sum(partial))


def test_fixed_norm_padding_rows_change_nothing():
    a = token_grads([3, 5], norm=10.0)
    b = token_grads([3, 5], norm=10.0, pad_rows=6)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", reduce.AGG_MODES)
def test_masked_aggregate_with_norm_against_numpy(mode):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    m = (rng.random((3, 5)) > 0.4).astype(np.int32)
    m[0, 0] = 1
    w = np.asarray([1.0, 0.5, 0.0], np.float32)
    got = float(jax.jit(reduce.masked_aggregate, static_argnums=3)(x, m, w, mode, 7.0))
    valid = (m > 0) & (w > 0)[:, None]
    if mode == "token_mean":
        want = sum(w[b] * x[b, valid[b]].sum() for b in range(3)) / 7.0
    else:
        row = (lambda b: x[b, valid[b]].mean()) if mode == "seq_mean_token_mean" else (
            lambda b: x[b, valid[b]].sum())
        want = sum(w[b] * row(b) for b in range(3) if valid[b].any()) / 7.0
    assert got == pytest.approx(want, rel=1e-5)
