"""Registered policy losses (`rl.policy_loss`): CISPO against a plain numpy loop, PPO clip through
the registry equal to the loss it wraps, and a loss registered from outside meowjax used by the
objective. `pytest -k policy_loss`."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meowjax import rl
from meowjax.rl import losses, objective, policy_losses


def _data(seed=0, B=3, L=5):
    rng = np.random.default_rng(seed)
    logp = rng.normal(-1.0, 0.3, (B, L)).astype(np.float32)
    old = (logp + rng.normal(0.0, 0.4, (B, L))).astype(np.float32)  # ratios well outside 0.8-1.2
    adv = rng.normal(0.0, 1.0, (B, L)).astype(np.float32)
    mask = (rng.random((B, L)) < 0.8).astype(np.int32)
    w = np.asarray([1.0, 1.0, 0.0], np.float32)[:B]                  # the last row is padding
    tis = rng.uniform(0.5, 2.0, (B, L)).astype(np.float32)
    return logp, old, adv, mask, w, tis


def _cispo_loop(logp, old, adv, mask, w, tis, eps_lo, eps_hi):
    """Token mean of -w_t clip(rho_t) A_t log pi_t and its gradient in log pi, by loops."""
    B, L = logp.shape
    total, count, terms = 0.0, 0.0, {}
    for b in range(B):
        for t in range(L):
            if mask[b, t] and w[b] > 0:
                rho = np.exp(float(logp[b, t]) - float(old[b, t]))
                clipped = min(max(rho, 1.0 - eps_lo), 1.0 + eps_hi)
                coef = -float(tis[b, t]) * clipped * float(adv[b, t]) * float(w[b])
                terms[b, t] = coef
                total += coef * float(logp[b, t])
                count += float(w[b])
    grad = np.zeros_like(logp, dtype=np.float64)
    for (b, t), coef in terms.items():
        grad[b, t] = coef / count
    return total / count, grad


@pytest.mark.parametrize("eps_hi", [None, 0.28])
def test_cispo_policy_loss_matches_a_numpy_loop(eps_hi):
    logp, old, adv, mask, w, tis = _data()

    def loss(lp):
        return rl.cispo_policy_loss(lp, old, adv, mask, w, clip_eps=0.2, clip_eps_high=eps_hi,
                                    weight_BL=tis)[0]

    value, grad = jax.value_and_grad(loss)(jnp.asarray(logp))
    want, want_grad = _cispo_loop(logp, old, adv, mask, w, tis, 0.2, eps_hi or 0.2)
    np.testing.assert_allclose(float(value), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), want_grad, rtol=1e-5, atol=1e-7)
    # Every valid unit keeps a gradient, clipped or not (PPO clip drops some of them).
    valid = (mask > 0) & (w[:, None] > 0) & (adv != 0)
    assert np.all(np.asarray(grad)[valid] != 0)
    ppo_grad = jax.grad(lambda lp: losses.ppo_policy_loss(lp, old, adv, mask, w,
                                                          clip_eps=0.2)[0])(jnp.asarray(logp))
    assert np.sum(np.asarray(ppo_grad)[valid] == 0) > 0


def test_cispo_equals_ppo_gradient_on_policy():
    logp, _, adv, mask, w, _ = _data(1)
    on = [jax.grad(lambda lp, f=f: f(lp, logp, adv, mask, w, clip_eps=0.2)[0])(jnp.asarray(logp))
          for f in (rl.cispo_policy_loss, losses.ppo_policy_loss)]
    np.testing.assert_allclose(np.asarray(on[0]), np.asarray(on[1]), rtol=1e-6, atol=1e-8)


def _objective_loss(cfg, logp, old, adv, mask, w):
    terms = objective.PolicyTerms(jnp.asarray(logp), jnp.zeros_like(jnp.asarray(logp)),
                                  jnp.asarray(mask), jnp.zeros(()))
    batch = {"old_logp": old, "adv": adv, "ref_logp": old, "row_weight": w}
    return objective.policy_loss(terms, batch, cfg)


def test_policy_loss_by_name_in_the_objective():
    logp, old, adv, mask, w, _ = _data(2)
    ppo, m = _objective_loss(objective.ObjectiveConfig(policy_loss="ppo_clip", dual_clip=3.0),
                             logp, old, adv, mask, w)
    direct, dm = losses.ppo_policy_loss(logp, old, adv, mask, w, clip_eps=0.2, dual_clip=3.0)
    assert float(ppo) == float(direct) and float(m["pg/clip_fraction"]) == float(
        dm["clip_fraction"])
    cispo, _ = _objective_loss(objective.ObjectiveConfig(policy_loss="cispo"),
                               logp, old, adv, mask, w)
    assert float(cispo) == float(rl.cispo_policy_loss(logp, old, adv, mask, w, clip_eps=0.2)[0])
    with pytest.raises(ValueError, match="rl.policy_loss='nope'; choose one of"):
        objective.ObjectiveConfig(policy_loss="nope")
    with pytest.raises(ValueError, match="rl.dual_clip=3.0 .* set rl.dual_clip=0"):
        objective.ObjectiveConfig(policy_loss="cispo", dual_clip=3.0)


def test_policy_loss_registered_from_outside():
    def plain_pg(logp, old, adv, mask, w, cfg, *, norm, weight_BL):   # REINFORCE: -A log pi
        loss = rl.masked_aggregate(-adv * logp, mask, w, cfg.agg, norm)
        return loss, {"clip_fraction": jnp.zeros(()), "approx_kl": jnp.zeros(())}

    rl.register_policy_loss(rl.PolicyLossSpec("plain_pg_test", plain_pg))
    try:
        with pytest.raises(ValueError, match="already registered"):
            rl.register_policy_loss(rl.PolicyLossSpec("plain_pg_test", plain_pg))
        logp, old, adv, mask, w, _ = _data(3)
        got, _ = _objective_loss(objective.ObjectiveConfig(policy_loss="plain_pg_test"),
                                 logp, old, adv, mask, w)
        valid = (mask > 0) & (w[:, None] > 0)
        assert float(got) == pytest.approx(float(np.sum(-adv * logp * valid) / valid.sum()),
                                           rel=1e-5)
    finally:
        policy_losses.POLICY_LOSSES.pop("plain_pg_test")
