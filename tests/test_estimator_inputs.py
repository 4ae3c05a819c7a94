"""Open estimator inputs: an estimator names an input the built-in ones do not hold, a provider
registered under that name computes it from the iteration's episodes, and the trainer hands it
over without an edit to the loop. `pytest -k estimator_inputs`."""
import jax
import numpy as np
import pytest

from meowjax import rl
from meowjax.trainers import estimator_inputs
from meowjax.trainers.loop import AgentTrainer
from tests.test_trainers import tiny_config

B, L = 4, 6
COMPUTE = jax.jit(rl.compute_advantages, static_argnames=("name", "hp"))


def _length_penalised(x, hp):
    """A user's estimator: A_b = R_b - coef * turns_b (R the row's summed reward) on agent
    units; returns = A."""
    ret_B = (x.rewards_BL * x.mask_BL).sum(axis=1) - hp["coef"] * x.extra["turns_B"]
    adv = ret_B[:, None] * x.mask_BL
    return adv, adv


def _turns_as_advantage(x, hp):
    """The extra input itself, on agent units: what the trainer provided, made visible."""
    del hp
    adv = x.extra["turns_B"][:, None] * x.mask_BL
    return adv, adv


@pytest.fixture
def registries():
    saved = dict(rl.ESTIMATORS), dict(estimator_inputs.PROVIDERS)
    yield
    for reg, old in zip((rl.ESTIMATORS, estimator_inputs.PROVIDERS), saved):
        reg.clear()
        reg.update(old)


def _inputs(seed=0, **extra):
    rng = np.random.default_rng(seed)
    mask = (rng.random((B, L)) < 0.7).astype(np.float32)
    rewards = np.where(mask > 0, rng.normal(size=(B, L)), 0).astype(np.float32)
    return rl.make_inputs(rewards, mask, np.array([1, 1, 1, 0], np.float32), extra=extra)


def test_estimator_inputs_extra_reach_a_registered_estimator(registries):
    rl.register_estimator(rl.EstimatorSpec(name="length_penalised", fn=_length_penalised,
                                           needs=("turns_B",), defaults={"coef": 0.5}))
    turns = np.array([3, 1, 4, 2], np.float32)
    x = _inputs(turns_B=turns)
    hp = rl.estimator_hparams("length_penalised", gamma=1.0, lam=1.0, section={"coef": 0.25})
    a, _ = COMPUTE("length_penalised", x, hp)
    want = np.zeros((B, L), np.float32)
    for b in range(B):          # a plain loop: R_b - 0.25 turns_b on agent units of real rows
        r = sum(x.rewards_BL[b, t] for t in range(L) if x.mask_BL[b, t] > 0)
        for t in range(L):
            if x.mask_BL[b, t] > 0 and x.row_weight_B[b] > 0:
                want[b, t] = r - 0.25 * turns[b]
    np.testing.assert_allclose(a, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"needs \['turns_B'\] in EstimatorInputs"):
        rl.compute_advantages("length_penalised", _inputs(), hp)


def test_estimator_inputs_refusals(registries):
    with pytest.raises(ValueError, match="unknown inputs.*ends in _B"):
        rl.EstimatorSpec(name="x", fn=_length_penalised, needs=("turns",))
    with pytest.raises(ValueError, match=r"'turns_B' has shape \(3,\).*\(4,\)"):
        _inputs(turns_B=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="per unit"):
        _inputs(turns=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="built-in field"):
        estimator_inputs.register_estimator_input("won_B", lambda b: b)
    with pytest.raises(ValueError, match="end its name in _B"):
        estimator_inputs.register_estimator_input("turns", lambda b: b)
    estimator_inputs.register_estimator_input("turns_B", lambda b: b)
    with pytest.raises(ValueError, match="already registered"):
        estimator_inputs.register_estimator_input("turns_B", lambda b: b)
    spec = rl.EstimatorSpec(name="needs_two", fn=_length_penalised,
                            needs=("group_ids_B", "turns_B", "cost_BL"))
    assert rl.extra_needs(spec.needs) == ("turns_B", "cost_BL")
    with pytest.raises(ValueError, match=r"needs the estimator inputs \['cost_BL'\].*"
                                         "register_estimator_input"):
        estimator_inputs.check_provided(spec)


@pytest.mark.slow
def test_estimator_inputs_the_trainer_provides_them(registries, tiny_games_dir, tmp_path):
    """A two-iteration run with an estimator whose advantage is a provided input: each
    iteration's provider sees the episodes in the matrices' row order, and the advantages the
    trainer attaches to the rows are that input, turn for turn."""
    calls = []

    def turns(batch):
        assert batch.mask_EX.shape[0] == len(batch.episodes) and len(batch.rows) > 0
        calls.append(np.asarray([e.num_turns for e in batch.episodes], np.float32))
        return calls[-1]

    estimator_inputs.register_estimator_input("turns_B", turns)
    rl.register_estimator(rl.EstimatorSpec(name="turns_adv", fn=_turns_as_advantage,
                                           needs=("turns_B",)))
    c = tiny_config(tiny_games_dir, estimator="turns_adv", minibatch_rows=16)
    trainer = AgentTrainer(c, str(tmp_path))
    attached = []
    attach = trainer.attach

    def capture(trajs, rows, adv, ret):
        attached.append((np.asarray([t.num_turns for t in trajs], np.float32), np.array(adv)))
        attach(trajs, rows, adv, ret)

    trainer.attach = capture
    out = trainer.run()
    assert out["rl_iters"] == 2 and len(calls) == 2 == len(attached)
    for provided, (turns_E, adv_EX) in zip(calls, attached):
        np.testing.assert_array_equal(provided, turns_E)
        for e, n in enumerate(turns_E.astype(int)):   # the score interface: X = turns
            np.testing.assert_array_equal(adv_EX[e, :n], np.full(n, n, np.float32))
            assert not adv_EX[e, n:].any()
    with pytest.raises(ValueError, match="needs the estimator inputs"):
        estimator_inputs.PROVIDERS.clear()
        AgentTrainer(c, str(tmp_path / "unprovided"))
