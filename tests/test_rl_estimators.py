"""The estimator registry: validation from the registry itself, dispatch equals the kernels."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meowjax import rl
from meowjax.rl import advantages as adv

B, L = 4, 7


def make_inputs(seed=0):
    rng = np.random.default_rng(seed)
    m = (rng.random((B, L)) < 0.6).astype(np.float32)
    return rl.EstimatorInputs(
        rewards_BL=np.where(m > 0, rng.normal(size=(B, L)), 0).astype(np.float32),
        mask_BL=m,
        row_weight_B=np.array([1, 1, 1, 0], np.float32),
        values_BL=rng.normal(size=(B, L)).astype(np.float32),
        turn_end_BL=((rng.random((B, L)) < 0.4) & (m > 0)).astype(np.float32),
        group_ids_B=np.array([3, 3, 9, 3], np.int32),
    )


def test_registry_contents_and_validation():
    assert sorted(rl.ESTIMATORS) == ["gae", "grpo", "rloo", "turn_gae"]
    assert {n for n, s in rl.ESTIMATORS.items() if s.needs_critic} == {"gae", "turn_gae"}
    for name, spec in rl.ESTIMATORS.items():
        assert rl.validate_estimator(name) is spec and spec.name == name
        assert ("values_BL" in spec.needs) == spec.needs_critic
    with pytest.raises(ValueError, match=r"\['gae', 'grpo', 'rloo', 'turn_gae'\]"):
        rl.validate_estimator("ppo")


def test_missing_inputs_are_named():
    inputs = make_inputs()._replace(values_BL=None)
    with pytest.raises(ValueError, match="values_BL"):
        rl.compute_advantages("gae", inputs)
    inputs = make_inputs()._replace(group_ids_B=None)
    with pytest.raises(ValueError, match="group_ids_B"):
        rl.compute_advantages("rloo", inputs)


@pytest.mark.parametrize("name", ["gae", "turn_gae", "grpo", "rloo"])
def test_dispatch_equals_kernels(name):
    """Under jit (the kernels themselves are tested eager and jitted in test_rl_advantages)."""
    x = make_inputs()
    fn = jax.jit(rl.compute_advantages, static_argnums=0)
    a, ret = fn(name, x, gamma=0.9, lam=0.8)
    valid = (x.mask_BL > 0) & (x.row_weight_B > 0)[:, None]
    if name == "gae":
        a_ref, ret_ref = adv.token_gae(x.rewards_BL, x.values_BL, x.mask_BL, gamma=0.9, lam=0.8)
    elif name == "turn_gae":
        a_ref, ret_ref = adv.turn_gae(
            x.rewards_BL, x.values_BL, x.mask_BL, x.turn_end_BL, gamma=0.9, lam=0.8
        )
    else:
        # Episode returns by hand; group 3 = rows 0, 1 (row 3 is padding); group 9 = row 2 alone.
        r_B = np.array([x.rewards_BL[b][x.mask_BL[b] > 0].sum() for b in range(B)])
        if name == "rloo":
            e_B = np.array([r_B[0] - r_B[1], r_B[1] - r_B[0], 0.0, 0.0])
        else:
            s = abs(r_B[0] - r_B[1]) / np.sqrt(2)  # unbiased std of two values
            e_B = np.array([(r_B[0] - r_B[1]) / 2, (r_B[1] - r_B[0]) / 2, 0, 0]) / (s + 1e-6)
        a_ref = np.where(x.mask_BL > 0, e_B[:, None], 0)
        ret_ref = np.where(x.mask_BL > 0, r_B[:, None], 0)
    np.testing.assert_allclose(a, np.where(valid, a_ref, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, np.where(valid, ret_ref, 0), rtol=1e-5, atol=1e-5)


def test_dr_grpo_switch():
    x = make_inputs()
    a, _ = rl.compute_advantages("grpo", x, use_std=False)
    r_B = np.array([x.rewards_BL[b][x.mask_BL[b] > 0].sum() for b in range(B)])
    want = np.where(x.mask_BL[0] > 0, (r_B[0] - r_B[1]) / 2, 0)
    np.testing.assert_allclose(a[0], want, rtol=1e-5, atol=1e-6)
    assert jnp.all(a[3] == 0)
