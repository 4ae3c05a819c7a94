"""Token-level truncated importance sampling (TIS) between the sampler and the trainer.

`pytest -k tis` selects these: the weight kernel against numpy loops, the objective with TIS off
(unchanged) and on, a bf16 sampler against an fp32 trainer on a tiny model, the pre-update pass
that recomputes pi_old, the config checks and a trainer run with TIS.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import common
from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rl import losses, objective
from meowjax.runtime import console
from meowjax.trainers import steps, text_steps

B, L = 5, 7


def _inputs(seed=0):
    """Log-probs whose ratios cross the cap and the band, a mask, row weights with a padded row
    (weight 0) and a half-weight row, and NaN at invalid units (they must not leak)."""
    rng = np.random.default_rng(seed)
    sampler = rng.normal(-1.5, 0.5, (B, L)).astype(np.float32)
    trainer = (sampler + rng.normal(0.0, 0.8, (B, L))).astype(np.float32)
    mask = (rng.random((B, L)) > 0.3).astype(np.int32)
    mask[0, :2] = 1
    w = np.asarray([1.0, 1.0, 0.5, 1.0, 0.0], np.float32)
    valid = (mask > 0) & (w > 0)[:, None]
    trainer[~valid] = np.nan
    return trainer, sampler, mask, w


def _numpy_tis(trainer, sampler, mask, w, mode, cap=2.0, band=(0.5, 2.0)):
    weights = np.zeros((B, L), np.float64)
    num = den = share = 0.0
    for b in range(B):
        for t in range(L):
            if not (mask[b, t] > 0 and w[b] > 0):
                continue
            r = np.exp(float(trainer[b, t]) - float(sampler[b, t]))
            if mode == "truncate":
                weights[b, t] = min(r, cap)
                share += w[b] * (r > cap)
            elif mode == "mask":
                inside = band[0] <= r <= band[1]
                weights[b, t] = 1.0 if inside else 0.0
                share += w[b] * (not inside)
            else:
                weights[b, t] = 1.0
            num += w[b] * r
            den += w[b]
    return weights, num / den, share / den


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("mode", ["truncate", "mask", "off"])
def test_tis_weights_match_a_numpy_loop(mode, jit):
    trainer, sampler, mask, w = _inputs()
    fn = lambda *a: losses.tis_weights(*a, mode=mode, cap=2.0, band=(0.5, 2.0))
    got_w, got_m = (jax.jit(fn) if jit else fn)(trainer, sampler, mask, w)
    want_w, ratio_mean, share = _numpy_tis(trainer, sampler, mask, w, mode)
    np.testing.assert_allclose(np.asarray(got_w), want_w, rtol=1e-6, atol=0)
    assert float(got_m["ratio_mean"]) == pytest.approx(ratio_mean, rel=1e-5)
    key = {"truncate": "clipped_share", "mask": "masked_share"}.get(mode)
    assert set(got_m) == {"ratio_mean"} | ({key} if key else set())
    if key:
        assert float(got_m[key]) == pytest.approx(share, rel=1e-6)
        assert 0.05 < share < 0.6          # the inputs exercise both sides of the cap / band


def test_tis_weights_hand_checked():
    """r = (3, 0.25, 1, 1.5): truncate at 2 gives (2, 0.25, 1, 1.5); the band [0.5, 2] keeps
    the last two."""
    d = jnp.log(jnp.asarray([[3.0, 0.25, 1.0, 1.5]]))
    mask, w = jnp.ones((1, 4), jnp.int32), jnp.ones((1,), jnp.float32)
    tw, tm = losses.tis_weights(d, jnp.zeros_like(d), mask, w, mode="truncate", cap=2.0)
    np.testing.assert_allclose(np.asarray(tw), [[2.0, 0.25, 1.0, 1.5]], rtol=1e-6)
    assert float(tm["ratio_mean"]) == pytest.approx((3 + 0.25 + 1 + 1.5) / 4, rel=1e-6)
    assert float(tm["clipped_share"]) == pytest.approx(0.25)
    mw, mm = losses.tis_weights(d, jnp.zeros_like(d), mask, w, mode="mask", band=(0.5, 2.0))
    np.testing.assert_array_equal(np.asarray(mw), [[0.0, 0.0, 1.0, 1.0]])
    assert float(mm["masked_share"]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="Unknown TIS mode 'cap'"):
        losses.tis_weights(d, d, mask, w, mode="cap")


# ----- the objective ---------------------------------------------------------------------------


def _batch(seed=1, *, trainer_equal=False):
    rng = np.random.default_rng(seed)
    mask = (rng.random((B, L)) > 0.3).astype(np.int32)
    w = np.asarray([1.0, 1.0, 0.5, 1.0, 0.0], np.float32)
    old = rng.normal(-1.0, 0.4, (B, L)).astype(np.float32)
    trainer = old if trainer_equal else (old + rng.normal(0.0, 0.8, (B, L))).astype(np.float32)
    batch = {"old_logp": old, "trainer_old_logp": trainer,
             "adv": rng.normal(size=(B, L)).astype(np.float32),
             "ref_logp": rng.normal(-1.0, 0.4, (B, L)).astype(np.float32), "row_weight": w}
    logp = (old + rng.normal(0.0, 0.3, (B, L))).astype(np.float32)
    return {k: jnp.asarray(v) for k, v in batch.items()}, jnp.asarray(logp), jnp.asarray(mask)


def _loss_and_grad(cfg, batch, logp, mask, jit=True):
    def loss(lp):
        return objective.policy_loss(objective.PolicyTerms(lp, jnp.zeros_like(lp), mask,
                                                           jnp.zeros(())), batch, cfg)
    f = jax.value_and_grad(loss, has_aux=True)
    (value, metrics), grad = (jax.jit(f) if jit else f)(logp)
    return np.asarray(value), metrics, np.asarray(grad)


@pytest.mark.parametrize("jit", [False, True])
def test_tis_off_is_the_untouched_ppo_objective(jit):
    """TIS off (the fp32 default: "auto" resolves to "off"): the sampler's log-probs are pi_old,
    no weight, the trainer's log-probs in the batch are ignored, and no TIS metric appears."""
    cfg = objective.ObjectiveConfig.from_section(common.base_config().rl).resolve_tis("float32")
    assert cfg.tis == "off" and not cfg.uses_tis
    batch, logp, mask = _batch()
    value, metrics, grad = _loss_and_grad(cfg, batch, logp, mask, jit)
    without = {k: v for k, v in batch.items() if k != "trainer_old_logp"}
    value2, metrics2, grad2 = _loss_and_grad(cfg, without, logp, mask, jit)

    def plain(lp):   # the PPO term as the objective computes it without TIS
        return losses.ppo_policy_loss(lp, batch["old_logp"], batch["adv"], mask,
                                      batch["row_weight"], clip_eps=cfg.clip_eps)[0]
    plain_vg = jax.value_and_grad(plain)
    plain_value, plain_grad = (jax.jit(plain_vg) if jit else plain_vg)(logp)
    np.testing.assert_array_equal(value, value2)
    np.testing.assert_array_equal(grad, grad2)
    np.testing.assert_array_equal(value, np.asarray(plain_value))
    np.testing.assert_array_equal(grad, np.asarray(plain_grad))
    assert not any("tis" in k for k in metrics) and set(metrics) == set(metrics2)


@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_tis_with_equal_log_probs_is_the_untruncated_objective(mode):
    """Sampler == trainer: every weight is 1 and pi_old is the same: the objective, its gradient
    and its metrics are those of TIS off, bit for bit."""
    batch, logp, mask = _batch(trainer_equal=True)
    off = _loss_and_grad(objective.ObjectiveConfig(), batch, logp, mask)
    on = _loss_and_grad(objective.ObjectiveConfig(tis=mode), batch, logp, mask)
    np.testing.assert_array_equal(on[0], off[0])
    np.testing.assert_array_equal(on[2], off[2])
    assert float(on[1]["pg/tis_ratio_mean"]) == 1.0
    assert float(on[1][f"pg/tis_{'clipped' if mode == 'truncate' else 'masked'}_share"]) == 0.0
    assert all(np.asarray(on[1][k]) == np.asarray(v) for k, v in off[1].items())


@pytest.mark.parametrize("mode", ["truncate", "mask"])
def test_tis_objective_against_a_numpy_loop(mode):
    """L = sum_u w_u max(-A rho, -A clip(rho, 0.8, 1.2)) / sum_u 1, rho = pi / pi_old^trainer,
    w_u from trainer vs sampler log-probs; and its gradient d L / d log pi(u)."""
    batch, logp, mask = _batch()
    cfg = objective.ObjectiveConfig(clip_eps=0.2, tis=mode)
    value, metrics, grad = _loss_and_grad(cfg, batch, logp, mask)
    np_b = {k: np.asarray(v, np.float64) for k, v in batch.items()}
    lp, m = np.asarray(logp, np.float64), np.asarray(mask)
    weights, ratio_mean, share = _numpy_tis(np_b["trainer_old_logp"], np_b["old_logp"], m,
                                            np_b["row_weight"], mode)
    total, count, want_grad = 0.0, 0.0, np.zeros((B, L))
    for b in range(B):
        for t in range(L):
            wb = np_b["row_weight"][b]
            if not (m[b, t] and wb > 0):
                continue
            a = np_b["adv"][b, t]
            rho = np.exp(lp[b, t] - np_b["trainer_old_logp"][b, t])
            unclipped, clipped = -a * rho, -a * np.clip(rho, 0.8, 1.2)
            total += wb * weights[b, t] * max(unclipped, clipped)
            count += wb
            # d/d logp of the active branch: -A rho where unclipped is the max, else 0.
            want_grad[b, t] = wb * weights[b, t] * (-a * rho if unclipped >= clipped else 0.0)
    assert float(value) == pytest.approx(total / count, rel=1e-5)
    np.testing.assert_allclose(grad, want_grad / count, rtol=1e-4, atol=1e-7)
    assert float(metrics["pg/tis_ratio_mean"]) == pytest.approx(ratio_mean, rel=1e-5)
    key = "pg/tis_clipped_share" if mode == "truncate" else "pg/tis_masked_share"
    assert float(metrics[key]) == pytest.approx(share, rel=1e-6) and share > 0
    # logp_mismatch_max stays the sampler-vs-trainer gap (against the sampler's log-probs).
    valid = (m > 0) & (np_b["row_weight"] > 0)[:, None]
    assert float(metrics["pg/logp_mismatch_max"]) == pytest.approx(
        np.abs(lp - np_b["old_logp"])[valid].max(), rel=1e-6)


# ----- a bf16 sampler against an fp32 trainer ---------------------------------------------------


def test_tis_corrects_a_bf16_sampler_gradient_toward_the_fp32_on_policy_gradient():
    """A tiny model's next-token distributions in bf16 (the sampler's, mu) and fp32 (the
    trainer's, pi) at the same weights. Every vocabulary entry y of each context is a unit,
    weighted by how often the sampler draws it (mu(y) folded into the advantage: the PPO term is
    positively homogeneous in A), so each loss below is its exact expectation over sampling:

        on-policy fp32:   g* = sum_y pi(y) A(y) grad log pi(y)
        TIS (truncate):   sum_y mu(y) min(pi/mu, 2) A(y) grad log pi(y)   (= g* below the cap)
        no correction:    sum_y mu(y) A(y) grad log pi(y)    (trainer's pi_old, no weight)
        sampler pi_old:   the PPO ratio pi/mu itself (no TIS): g* unless clipped

    The last one matches TIS at the sampling params until the bf16 gap exceeds the clip range
    (on a GPU the gap's max, 0.38, exceeds clip_eps 0.2); here the tiny model's gap (max ~0.01)
    is set against clip_eps 0.005."""
    cfg32 = get_preset("tiny")
    cfg16 = cfg32.replace(dtype="bfloat16")
    params = lm.init_params(cfg32, jax.random.key(0))
    # Sharper next-token distributions, like a trained model's (max probability 0.1-0.3).
    params["embed"]["embedding"] = params["embed"]["embedding"] * 4.0
    rng = np.random.default_rng(0)
    nb, nl, V = 4, 12, cfg32.vocab_size
    tokens = jnp.asarray(rng.integers(3, V, (nb, nl)), jnp.int32)
    real = jnp.ones((nb, nl), jnp.int32)
    pos = lm.positions_from_mask(real)

    def next_logp(p, cfg):
        return jax.nn.log_softmax(lm.forward(p, cfg, tokens, pos, real)[:, -1])

    pi, mu = next_logp(params, cfg32), next_logp(params, cfg16)
    gap = np.abs(np.asarray(pi - mu))
    assert gap.max() > 5e-3 and float(np.mean(gap)) > 5e-4, gap.max()   # bf16 != fp32
    adv = jnp.asarray(rng.normal(size=(nb, V)), jnp.float32)
    units, w = jnp.ones((nb, V), jnp.int32), jnp.ones((nb,), jnp.float32)

    def flat(g):
        return np.concatenate([np.ravel(x) for x in jax.tree.leaves(g)])

    def on_policy(p):
        return -jnp.mean(jnp.sum(jnp.exp(pi) * adv * next_logp(p, cfg32), axis=1))

    def grad(cfg, old, trainer_old=None):
        batch = {"old_logp": old, "adv": V * jnp.exp(mu) * adv, "ref_logp": old,
                 "row_weight": w}
        if trainer_old is not None:
            batch["trainer_old_logp"] = trainer_old

        def loss(p):
            lp = next_logp(p, cfg32)
            terms = objective.PolicyTerms(lp, jnp.zeros_like(lp), units, jnp.zeros(()))
            return objective.policy_loss(terms, batch, cfg)
        g, metrics = jax.jit(jax.grad(loss, has_aux=True))(params)
        return flat(g), metrics

    g_star = flat(jax.jit(jax.grad(on_policy))(params))
    g_tis, m = grad(objective.ObjectiveConfig(tis="truncate"), mu, pi)
    g_plain, _ = grad(objective.ObjectiveConfig(), pi)
    err = lambda g: float(np.linalg.norm(g - g_star)) / float(np.linalg.norm(g_star))
    # Measured: TIS 2.2e-7 (float rounding), no correction 2.7e-3.
    assert err(g_plain) > 1e-3
    assert err(g_tis) < 2e-6 and err(g_tis) < err(g_plain) / 100
    assert float(m["pg/tis_ratio_mean"]) == pytest.approx(1.0, abs=1e-3)
    assert float(m["pg/tis_clipped_share"]) == 0.0
    # pi_old = the sampler's log-probs, a clip range below the gap: clipped units lose their
    # gradient (measured: 0.15 of g*, 2.6% of the units clipped); TIS keeps them.
    g_smp, m_smp = grad(objective.ObjectiveConfig(clip_eps=0.005), mu)
    g_tis_eps, _ = grad(objective.ObjectiveConfig(clip_eps=0.005, tis="truncate"), mu, pi)
    assert float(m_smp["pg/clip_fraction"]) > 0.01
    assert err(g_smp) > 0.05 and err(g_tis_eps) < 2e-6


# ----- the pre-update pass, config, console -----------------------------------------------------


def test_tis_old_terms_recompute_the_policy_log_probs_only_when_asked():
    cfg = get_preset("tiny")
    params = lm.init_params(cfg, jax.random.key(1))
    units = text_steps.TokenUnits(cfg)
    rng = np.random.default_rng(2)
    mask = np.ones((2, 16), np.int32)
    mask[1, 11:] = 0
    batch = {"tokens": jnp.asarray(rng.integers(3, cfg.vocab_size, (2, 16)), jnp.int32),
             "mask": jnp.asarray(mask), "loss_mask": jnp.asarray(mask).at[:, :8].set(0),
             "row_weight": jnp.ones((2,), jnp.float32)}
    old_terms = steps.make_old_terms(units, temperature=0.7, needs_ref=False, needs_critic=False)
    assert len(old_terms(params, {}, batch)) == 2          # no TIS: no policy forward
    ref, values, logp = old_terms(params, {}, batch, params)
    want, _ = text_steps.token_terms(params, cfg, batch, 0.7)
    np.testing.assert_allclose(np.asarray(logp), np.asarray(want), rtol=1e-6, atol=1e-6)
    assert not np.asarray(ref).any() and not np.asarray(values).any()
    assert old_terms._cache_size() == 2                    # one program each way


def test_tis_config_fields_and_errors():
    rl = common.base_config().rl
    assert (rl.tis, rl.tis_cap, tuple(rl.tis_band)) == ("auto", 2.0, (0.5, 2.0))
    cfg = objective.ObjectiveConfig.from_section(rl)
    assert cfg.tis == "auto" and cfg.tis_band == (0.5, 2.0)
    assert cfg.resolve_tis("float32").tis == "off"
    assert cfg.resolve_tis("bfloat16").tis == "truncate"
    assert cfg.resolve_tis(jnp.bfloat16).uses_tis
    masked = objective.ObjectiveConfig(tis="mask")
    assert masked.resolve_tis("float32") is masked                 # explicit modes stay
    with pytest.raises(ValueError, match=r"rl.tis='cap'; choose one of "
                                         r"\['auto', 'off', 'truncate', 'mask'\]"):
        objective.ObjectiveConfig(tis="cap")
    with pytest.raises(ValueError, match=r"rl.tis_cap=0.5; must be >= 1"):
        objective.ObjectiveConfig(tis_cap=0.5)
    for band in ((1.2, 2.0), (0.5, 0.9), (0.5,), (-0.1, 2.0)):
        with pytest.raises(ValueError, match=r"rl.tis_band=.*must be \(lo, hi\) with "
                                             r"0 <= lo <= 1 <= hi"):
            objective.ObjectiveConfig(tis_band=band)
    rl.tis = "on"
    with pytest.raises(ValueError, match="rl.tis='on'"):
        objective.ObjectiveConfig.from_section(rl)
    batch, logp, mask = _batch()
    with pytest.raises(ValueError, match="rl.tis='auto' must be resolved"):
        _loss_and_grad(cfg, batch, logp, mask, jit=False)


def test_tis_rl_line_shows_the_ratio_and_the_clipped_share():
    m = {"rollout/success": 0.5, "pg/entropy": 0.7125, "pg/tis_ratio_mean": 1.00213,
         "pg/tis_clipped_share": 0.0042, "time/rollout_s": 1.0, "time/update_s": 1.0}
    line = console.rl_line(3, 10, m)
    assert "entropy 0.713, tis_ratio 1.002, tis_clipped 0.0042, 2.0 s" in line
    masked = console.rl_line(3, 10, {**m, "pg/tis_masked_share": 0.01})
    assert "tis_masked 0.01," in masked
    assert "tis" not in console.rl_line(3, 10, {"rollout/success": 0.5})


# ----- a trainer run -------------------------------------------------------------------------


@pytest.mark.slow
def test_tis_score_trainer_bf16_auto_runs_with_the_trainer_pi_old(tiny_games_dir, tmp_path):
    """A bf16 model with rl.tis="auto": the trainer resolves it to "truncate", recomputes pi_old
    before each update (the pre-update pass runs although no KL or critic needs it) and logs
    the ratio and clipped share."""
    from meowjax.trainers.loop import AgentTrainer
    from tests.test_trainers import tiny_config
    c = tiny_config(tiny_games_dir, estimator="rloo", minibatch_rows=16, kl_coef=0.0)
    c.unlock()
    c.model.overrides = dict(dtype="bfloat16")
    c.lock()
    trainer = AgentTrainer(c, str(tmp_path))
    assert trainer.objective.tis == "truncate" and not trainer.needs_ref
    out = trainer.run()
    assert out["rl_iters"] == 2
    assert trainer.shapes_seen["old"] and trainer.old_terms._cache_size() == len(
        trainer.shapes_seen["old"])
    recs = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    rl = [r for r in recs if "pg/policy_loss" in r]
    assert len(rl) == 2 and all(np.isfinite(v) for r in rl for v in r.values())
    for r in rl:
        assert abs(r["pg/tis_ratio_mean"] - 1.0) < 0.05
        assert 0.0 <= r["pg/tis_clipped_share"] <= 1.0
