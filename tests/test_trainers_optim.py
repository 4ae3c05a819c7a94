"""The guarded update step vs optax's own apply_if_finite + apply_updates, step by step."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from meowjax.trainers import optim


def _loss(params, batch):
    pred = batch["x"] @ params["w"] + params["b"]
    return jnp.mean((pred - batch["y"]) ** 2), {"loss": jnp.mean((pred - batch["y"]) ** 2)}


def _batches(n: int, nan_at: tuple[int, ...]) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        x = rng.standard_normal((8, 3)).astype(np.float32)
        if i in nan_at:
            x[2, 1] = np.nan
        out.append({"x": x, "y": rng.standard_normal((8, 2)).astype(np.float32)})
    return out


def _reference(inner: optax.GradientTransformation, max_errors: int, params, batches):
    """optax.apply_if_finite(inner) followed by optax.apply_updates, as plain optax."""
    opt = optax.apply_if_finite(inner, max_consecutive_errors=max_errors)
    state, out = opt.init(params), []
    for b in batches:
        grads = jax.grad(lambda p: _loss(p, b)[0])(params)
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        out.append((params, state))
    return out


@pytest.mark.parametrize("one_norm", [True, False])
@pytest.mark.parametrize("max_errors,nan_at", [(1_000_000, (1, 2)), (1, (1, 2, 3))])
def test_guarded_step_equals_apply_if_finite(max_errors, nan_at, one_norm):
    """Finite steps update like optax; non-finite ones leave weights and moments unchanged and
    are counted; past max_consecutive_errors the (NaN) update goes through, as in optax. Both
    with the global norm computed once (make_optimizer's clip + AdamW) and with the generic
    guard over any inner transformation (no tail)."""
    params = {"w": jnp.full((3, 2), 0.5, jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
    opt = optim.make_optimizer(1e-2, warmup_steps=1, total_steps=10, grad_clip=1.0,
                               max_consecutive_errors=max_errors)
    assert isinstance(opt, optim.GuardedOptimizer) and opt.tail is not None
    if not one_norm:
        opt = opt._replace(grad_clip=None, tail=None)
    step = optim.make_update_step(_loss, opt, prefix="t")
    state = optim.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                             opt_state=opt.init(params), value_params={}, value_opt_state={})
    batches = _batches(6, nan_at)
    want = _reference(opt.inner, max_errors, params, batches)
    skipped = []
    for b, (want_params, want_state) in zip(batches, want):
        state, metrics = step(state, b)
        skipped.append(float(metrics["t/skipped"]))
        for got, ref in zip(jax.tree.leaves((state.params, state.opt_state)),
                            jax.tree.leaves((want_params, want_state))):
            np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-6, atol=1e-7)
    # the metric is optax's count of non-finite steps, whether or not one was let through
    assert skipped == [float(s.total_notfinite) for _, s in want]
    if max_errors == 1:  # the 2nd NaN step in a row went through: NaN weights, NaN grads since
        assert skipped == [0, 1, 2, 3, 4, 5]
        assert not np.isfinite(np.asarray(state.params["w"])).all()
    else:                # the NaN steps were skipped: finite weights that moved
        assert skipped == [0, 1, 2, 2, 2, 2]
        assert np.isfinite(np.asarray(state.params["w"])).all()
        assert not np.allclose(np.asarray(state.params["w"]), 0.5)


def test_one_norm_guard_skips_an_overflowing_norm():
    """The documented difference: finite gradients whose squared norm overflows float32 are
    skipped by the one-norm guard (||g|| = inf), applied (clipped) by apply_if_finite."""
    params = {"w": jnp.ones((2,), jnp.float32)}
    grads = {"w": jnp.array([1e20, 1.0], jnp.float32)}
    for one_norm, want_skipped in ((True, 1), (False, 0)):
        opt = optim.make_optimizer(1e-2, warmup_steps=1, total_steps=10, grad_clip=1.0)
        if not one_norm:
            opt = opt._replace(grad_clip=None, tail=None)
        _, state = optim.apply_gradients(opt, grads, opt.init(params), params)
        assert int(state.total_notfinite) == want_skipped


def test_one_norm_guard_compiles_one_norm():
    """The guard, the clip and the grad_norm metric share one global norm in the compiled
    step (one scalar sqrt); the generic guard computes the clip's norm again inside its cond."""
    import re

    params = {"w": jnp.ones((3, 2), jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
    batch = _batches(1, ())[0]
    sqrts = {}
    for one_norm in (True, False):
        opt = optim.make_optimizer(1e-2, warmup_steps=1, total_steps=10, grad_clip=1.0)
        if not one_norm:
            opt = opt._replace(grad_clip=None, tail=None)
        step = optim.make_update_step(_loss, opt, prefix="t")
        state = optim.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                                 opt_state=opt.init(params), value_params={}, value_opt_state={})
        hlo = step.lower(state, batch).compile().as_text()
        sqrts[one_norm] = len(re.findall(r"= f32\[\] sqrt\(", hlo))
    assert sqrts == {True: 1, False: 2}, sqrts


@pytest.mark.parametrize("one_norm", [True, False])
def test_zero_gradient_step_changes_nothing(one_norm):
    """After real steps, an exactly-zero gradient leaves weights and moments as they were; plain
    AdamW (the inner transformation) would move the weights along its momentum."""
    params = {"w": jnp.full((3, 2), 0.5, jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
    opt = optim.make_optimizer(1e-2, warmup_steps=1, total_steps=10, grad_clip=1.0)
    if not one_norm:
        opt = opt._replace(grad_clip=None, tail=None)
    state = opt.init(params)
    for b in _batches(3, ()):
        grads = jax.grad(lambda p: _loss(p, b)[0])(params)
        params, state = optim.apply_gradients(opt, grads, state, params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    new_params, new_state = optim.apply_gradients(opt, zeros, state, params)
    for got, ref in zip(jax.tree.leaves((new_params, new_state)), jax.tree.leaves((params, state))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
    assert int(new_state.total_notfinite) == 0
    drift, _ = opt.inner.update(zeros, state.inner_state, params)
    assert np.abs(np.asarray(drift["w"])).max() > 1e-3   # what the skip prevents


def test_plain_optax_transformations_still_apply():
    """A transformation without the guard takes the plain update + apply_updates path."""
    params = {"w": jnp.ones((3, 2), jnp.float32), "b": jnp.zeros((2,), jnp.float32)}
    opt = optax.sgd(0.1)
    batch = _batches(1, ())[0]
    grads = jax.grad(lambda p: _loss(p, batch)[0])(params)
    new_params, _ = optim.apply_gradients(opt, grads, opt.init(params), params)
    np.testing.assert_allclose(new_params["w"], params["w"] - 0.1 * grads["w"], rtol=1e-6)


def test_lr_schedules_warm_up_then_decay_or_stay():
    cos = optim.lr_schedule(1.0, warmup_steps=2, total_steps=10, kind="cosine")
    const = optim.lr_schedule(1.0, warmup_steps=2, total_steps=10, kind="constant")
    assert [float(cos(0)), float(cos(1)), float(cos(2))] == [0.0, 0.5, 1.0]
    assert [float(const(0)), float(const(1)), float(const(2))] == [0.0, 0.5, 1.0]
    assert float(cos(10)) == pytest.approx(0.1) and float(cos(1000)) == pytest.approx(0.1)
    assert float(const(10)) == 1.0 and float(const(1000)) == 1.0
    with pytest.raises(ValueError, match="lr_schedule='linear'"):
        optim.lr_schedule(1.0, warmup_steps=2, total_steps=10, kind="linear")
