"""The estimator registry: validation from the registry itself, dispatch equals the kernels, an
estimator registered from outside runs end to end, hyper-parameter sections are checked."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from meowjax import rl
from meowjax.rl import advantages as adv

B, L = 4, 7
BUILTINS = ["gae", "gigpo", "grpo", "remax", "rft", "rloo", "turn_gae"]
COMPUTE = jax.jit(rl.compute_advantages, static_argnames=("name", "hp"))


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
        state_key_BL=rng.integers(0, 3, size=(B, L)).astype(np.int32),
        baseline_B=rng.normal(size=(B,)).astype(np.float32),
        won_B=np.array([1, 1, 0, 1], np.float32),
    )


def hparams(name, gamma=1.0, lam=1.0, **section):
    return rl.estimator_hparams(name, gamma=gamma, lam=lam, section=section)


@pytest.fixture
def registry():
    """The registry, restored after the test (tests add estimators)."""
    saved = dict(rl.ESTIMATORS)
    yield rl.ESTIMATORS
    rl.ESTIMATORS.clear()
    rl.ESTIMATORS.update(saved)


def test_registry_contents_and_validation():
    assert sorted(rl.ESTIMATORS) == BUILTINS
    assert {n for n, s in rl.ESTIMATORS.items() if s.needs_critic} == {"gae", "turn_gae"}
    for name, spec in rl.ESTIMATORS.items():
        assert rl.validate_estimator(name) is spec and spec.name == name
        assert ("values_BL" in spec.needs) == spec.needs_critic
        assert set(spec.needs) <= set(rl.EstimatorInputs._fields)
    assert dict(rl.ESTIMATORS["gigpo"].defaults) == {"step_weight": 1.0, "use_std": True,
                                                     "episode_discount": False}
    assert dict(rl.ESTIMATORS["grpo"].defaults) == {"use_std": True}
    assert not rl.ESTIMATORS["rloo"].defaults and not rl.ESTIMATORS["gae"].defaults
    assert "baseline_B" in rl.ESTIMATORS["remax"].needs
    assert "won_B" in rl.ESTIMATORS["rft"].needs
    assert dict(rl.ESTIMATORS["rft"].defaults) == {"best_only": True}
    with pytest.raises(ValueError, match=r"\['gae', 'gigpo', 'grpo', 'remax', 'rft', 'rloo', "
                                         r"'turn_gae'\]"):
        rl.validate_estimator("ppo")


def test_missing_inputs_are_named():
    inputs = make_inputs()._replace(values_BL=None)
    with pytest.raises(ValueError, match="values_BL"):
        rl.compute_advantages("gae", inputs, hparams("gae"))
    inputs = make_inputs()._replace(group_ids_B=None)
    with pytest.raises(ValueError, match="group_ids_B"):
        rl.compute_advantages("rloo", inputs, hparams("rloo"))
    inputs = make_inputs()._replace(state_key_BL=None)
    with pytest.raises(ValueError, match="state_key_BL"):
        rl.compute_advantages("gigpo", inputs, hparams("gigpo"))
    inputs = make_inputs()._replace(baseline_B=None)
    with pytest.raises(ValueError, match="baseline_B"):
        rl.compute_advantages("remax", inputs, hparams("remax"))
    inputs = make_inputs()._replace(won_B=None)
    with pytest.raises(ValueError, match="won_B"):
        rl.compute_advantages("rft", inputs, hparams("rft"))


def test_make_inputs_fills_zeros():
    x = make_inputs()
    got = rl.make_inputs(x.rewards_BL, x.mask_BL, x.row_weight_B, group_ids_B=x.group_ids_B)
    assert got.group_ids_B is x.group_ids_B
    assert got.values_BL.shape == got.turn_end_BL.shape == got.state_key_BL.shape == (B, L)
    assert got.state_key_BL.dtype == np.int32 and got.values_BL.dtype == np.float32
    assert not got.values_BL.any() and not got.state_key_BL.any()


def test_hparams_merge_defaults_and_reject_unknown_fields():
    hp = rl.estimator_hparams("gigpo", gamma=0.9, lam=0.5, section={"step_weight": 0.3})
    assert dict(hp) == {"gamma": 0.9, "lam": 0.5, "step_weight": 0.3, "use_std": True,
                        "episode_discount": False}
    assert hash(hp) == hash(hparams("gigpo", 0.9, 0.5, step_weight=0.3))  # a static jit arg
    assert dict(rl.estimator_hparams("rloo", gamma=1, lam=1)) == {"gamma": 1.0, "lam": 1.0}
    cd = ml_collections.ConfigDict({"use_std": False})
    assert not rl.estimator_hparams("grpo", gamma=1, lam=1, section=cd)["use_std"]
    with pytest.raises(ValueError, match=r"rl.gigpo has no field 'stepweight'; known: "
                                         r"\['episode_discount', 'step_weight', 'use_std'\]"):
        hparams("gigpo", stepweight=0.5)
    with pytest.raises(ValueError, match="rl.rloo has no field 'use_std'"):
        hparams("rloo", use_std=False)
    with pytest.raises(ValueError, match="estimator_hparams"):
        rl.compute_advantages("grpo", make_inputs(), {"gamma": 1.0, "lam": 1.0})


@pytest.mark.parametrize("name", ["gae", "turn_gae", "grpo", "rloo", "remax", "rft"])
def test_dispatch_equals_kernels(name):
    """Under jit (the kernels themselves are tested eager and jitted in test_rl_advantages)."""
    x = make_inputs()
    gamma, lam = 0.9, 0.8
    a, ret = COMPUTE(name, x, hparams(name, gamma, lam))
    valid = (x.mask_BL > 0) & (x.row_weight_B > 0)[:, None]
    if name == "gae":
        a_ref, ret_ref = adv.token_gae(x.rewards_BL, x.values_BL, x.mask_BL, gamma=gamma, lam=lam)
    elif name == "turn_gae":
        a_ref, ret_ref = adv.turn_gae(
            x.rewards_BL, x.values_BL, x.mask_BL, x.turn_end_BL, gamma=gamma, lam=lam
        )
    else:
        # Returns discounted per turn by hand; group 3 = rows 0, 1 (row 3 is padding); group 9 =
        # row 2 alone.
        r_B = np.zeros(B)
        for b in range(B):
            k = 0
            for t in range(L):
                if x.mask_BL[b, t] > 0:
                    r_B[b] += gamma**k * x.rewards_BL[b, t]
                    k += int(x.turn_end_BL[b, t] > 0)
        if name == "rloo":
            e_B = np.array([r_B[0] - r_B[1], r_B[1] - r_B[0], 0.0, 0.0])
        elif name == "remax":   # each row against its own given baseline; row 3 is padding
            e_B = np.array([r_B[b] - x.baseline_B[b] for b in range(3)] + [0.0])
        elif name == "rft":     # rows 0, 1 won: the better of them; row 2 lost; row 3 padding
            e_B = np.array([r_B[0] >= r_B[1], r_B[1] >= r_B[0], 0, 0], np.float64)
        else:
            s = abs(r_B[0] - r_B[1]) / np.sqrt(2)  # unbiased std of two values
            e_B = np.array([(r_B[0] - r_B[1]) / 2, (r_B[1] - r_B[0]) / 2, 0, 0]) / (s + 1e-6)
        a_ref = np.where(x.mask_BL > 0, e_B[:, None], 0)
        ret_ref = np.where(x.mask_BL > 0, r_B[:, None], 0)
    np.testing.assert_allclose(a, np.where(valid, a_ref, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, np.where(valid, ret_ref, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_episode_estimators_with_gamma_one_sum_the_rewards(name):
    x = make_inputs(1)
    a, ret = rl.compute_advantages(name, x, hparams(name))
    r_B = adv.episode_returns(x.rewards_BL, x.mask_BL)
    fn = adv.rloo_advantages if name == "rloo" else adv.grpo_advantages
    e_B = fn(r_B, x.group_ids_B, x.row_weight_B)
    valid = (x.mask_BL > 0) & (x.row_weight_B > 0)[:, None]
    np.testing.assert_array_equal(a, np.where(valid, e_B[:, None], 0))
    np.testing.assert_array_equal(ret, np.where(valid, r_B[:, None], 0))


def test_dr_grpo_switch():
    x = make_inputs()
    a, _ = rl.compute_advantages("grpo", x, hparams("grpo", use_std=False))
    r_B = np.array([x.rewards_BL[b][x.mask_BL[b] > 0].sum() for b in range(B)])
    want = np.where(x.mask_BL[0] > 0, (r_B[0] - r_B[1]) / 2, 0)
    np.testing.assert_allclose(a[0], want, rtol=1e-5, atol=1e-6)
    assert jnp.all(a[3] == 0)


def _scaled_reward(inputs, hp):
    """A user's estimator: A = scale * r on agent tokens, returns = r."""
    return hp["scale"] * inputs.rewards_BL + 100.0, inputs.rewards_BL


def test_custom_estimator_end_to_end(registry):
    spec = rl.register_estimator(rl.EstimatorSpec(
        name="scaled_reward", fn=_scaled_reward, level="token", defaults={"scale": 2.0},
        description="test"))
    assert rl.validate_estimator("scaled_reward") is spec and "scaled_reward" in registry
    x = make_inputs()
    hp = rl.estimator_hparams("scaled_reward", gamma=1.0, lam=1.0, section={"scale": 3.0})
    for fn in (rl.compute_advantages, COMPUTE):
        a, ret = fn("scaled_reward", x, hp)
        valid = (x.mask_BL > 0) & (x.row_weight_B > 0)[:, None]  # zeroed outside, +100 inside
        np.testing.assert_allclose(a, np.where(valid, 3.0 * x.rewards_BL + 100.0, 0), rtol=1e-6)
        np.testing.assert_allclose(ret, np.where(valid, x.rewards_BL, 0))
    with pytest.raises(ValueError, match="rl.scaled_reward has no field 'scal'"):
        rl.estimator_hparams("scaled_reward", gamma=1.0, lam=1.0, section={"scal": 1.0})


def test_duplicate_and_bad_specs_fail(registry):
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        rl.register_estimator(rl.EstimatorSpec(name="grpo", fn=_scaled_reward))
    mine = rl.EstimatorSpec(name="grpo", fn=_scaled_reward, defaults={"scale": 1.0})
    assert rl.register_estimator(mine, replace=True) is rl.ESTIMATORS["grpo"] is mine
    with pytest.raises(ValueError, match="unknown inputs"):
        rl.EstimatorSpec(name="x", fn=_scaled_reward, needs=("values",))
    with pytest.raises(ValueError, match="needs_critic"):
        rl.EstimatorSpec(name="x", fn=_scaled_reward, needs_critic=True)
    with pytest.raises(ValueError, match="shared"):
        rl.EstimatorSpec(name="x", fn=_scaled_reward, defaults={"gamma": 0.9})


def test_one_compile_per_hparams():
    x = make_inputs()
    traces = []

    def advantages_fn(name, inputs, hp):
        traces.append(hp)
        return rl.compute_advantages(name, inputs, hp)

    fn = jax.jit(advantages_fn, static_argnames=("name", "hp"))
    for _ in range(2):
        fn("grpo", x, hparams("grpo"))  # equal HParams built twice: one trace
    fn("grpo", x, hparams("grpo", use_std=False))
    assert traces == [hparams("grpo"), hparams("grpo", use_std=False)]
