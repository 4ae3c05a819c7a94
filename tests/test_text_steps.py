"""text_steps.token_terms (fused log-prob + entropy) vs the plain two-log_softmax reference."""
import jax
import jax.numpy as jnp
import numpy as np

from meowjax.models import config as config_lib
from meowjax.models import lm
from meowjax.rl import losses
from meowjax.trainers import text_steps

CFG = config_lib.get_preset("tiny")


def _batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, CFG.vocab_size, (2, 9)).astype(np.int32)
    mask = np.ones((2, 9), np.int32)
    mask[1, 6:] = 0  # a right-padded row
    return {"tokens": jnp.asarray(tokens), "mask": jnp.asarray(mask)}


def _reference_terms(params, batch, tau):
    """The unfused token_terms: slice, log_softmax for logp, a second one for the entropy."""
    logits = lm.forward(params, CFG, batch["tokens"], lm.positions_from_mask(batch["mask"]),
                        batch["mask"]) / tau
    pad = lambda x: jnp.pad(x, ((0, 0), (1, 0)))
    return (pad(lm.token_logprobs(logits[:, :-1], batch["tokens"][:, 1:])),
            pad(losses.entropy_from_logits(logits[:, :-1])))


def test_token_terms_equal_unfused_reference_values_and_gradients():
    params = lm.init_params(CFG, jax.random.key(0))
    params = jax.tree.map(lambda x: 8.0 * x, params)  # peaked distributions, not near-uniform
    batch = _batch()
    weights = jnp.asarray(np.random.default_rng(1).standard_normal((2, 2, 9)), jnp.float32)
    for tau in (1.0, 0.6):
        got = jax.jit(text_steps.token_terms, static_argnums=(1, 3))(params, CFG, batch, tau)
        want = _reference_terms(params, batch, tau)
        for g, w in zip(got, want):
            assert g.shape == batch["tokens"].shape
            np.testing.assert_allclose(g, w, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(got[0])[:, 0], 0.0)
        assert float(jnp.std(got[1])) > 1e-3  # entropies vary: a real check, not all log V

    def loss(fn):
        return lambda p: sum(jnp.sum(x * w) for x, w in zip(fn(p), weights))

    tau = 0.6  # gradients through both terms and the temperature
    grad = jax.jit(jax.grad(loss(lambda p: text_steps.token_terms(p, CFG, batch, tau))))(params)
    want_grad = jax.grad(loss(lambda p: _reference_terms(p, batch, tau)))(params)
    # Through 8x-scaled weights fp32 rounding grows with each leaf's scale (entries up to ~200);
    # the logits-level VJP is checked to 1e-5 in test_models_lm. A wrong VJP is off by O(1).
    for g, w in zip(jax.tree.leaves(grad), jax.tree.leaves(want_grad)):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5 * float(np.abs(w).max()))
