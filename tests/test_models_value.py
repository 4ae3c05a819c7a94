"""Value model: shapes, fp32 values = hidden . w + c, trunk copied from the policy."""
import jax
import jax.numpy as jnp
import numpy as np

from meowjax.models import config as config_lib
from meowjax.models import lm, value

CFG = config_lib.get_preset("tiny")
_value_forward = jax.jit(value.value_forward, static_argnums=1)


def test_value_model_from_policy_and_fresh():
    policy = lm.init_params(CFG, jax.random.key(0))
    params = value.init_value_params(CFG, jax.random.key(1), policy_params=policy)
    assert set(params) == {"embed", "layers", "final_norm", "value_head"}
    for k in value.TRUNK_KEYS:
        jax.tree.map(np.testing.assert_array_equal, params[k], policy[k])
    # New buffers: deleting the policy (as a donated train step would) leaves the critic intact.
    assert params["embed"]["embedding"] is not policy["embed"]["embedding"]
    is_leaf = lambda x: isinstance(x, tuple)
    axes = value.value_logical_axes(CFG)
    assert jax.tree.structure(axes, is_leaf=is_leaf) == jax.tree.structure(params)
    fresh = value.init_value_params(CFG, jax.random.key(2))
    assert jax.tree.structure(fresh) == jax.tree.structure(params)
    assert not np.allclose(fresh["embed"]["embedding"], policy["embed"]["embedding"])

    # Row 2 is row 1's real tokens right- instead of left-padded.
    tokens = np.array([[3, 4, 5, 6, 7], [0, 0, 9, 10, 11], [9, 10, 11, 0, 0]], np.int32)
    mask = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
    pos = lm.positions_from_mask(jnp.asarray(mask))
    # A fresh head is zero: V = 0 until the critic learns.
    np.testing.assert_array_equal(_value_forward(params, CFG, tokens, pos, mask), 0.0)
    kernel = 0.02 * jax.random.normal(jax.random.key(3), params["value_head"]["kernel"].shape)
    params = dict(params, value_head={"kernel": kernel, "bias": jnp.array([0.25])})
    values = np.asarray(_value_forward(params, CFG, tokens, pos, mask))
    assert values.shape == (3, 5) and values.dtype == np.float32
    hidden = jax.jit(lm.hidden_states, static_argnums=1)(policy, CFG, tokens, pos, mask)
    expected = np.asarray(hidden) @ np.asarray(params["value_head"]["kernel"])[:, 0] + 0.25
    np.testing.assert_allclose(values, expected, atol=1e-5)
    # Padding side does not change the values of real tokens.
    np.testing.assert_allclose(values[1, 2:], values[2, :3], atol=1e-5)
    assert np.std(values[0]) > 1e-4
