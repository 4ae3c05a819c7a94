"""Pass@K / Pass@(K,T) estimators against brute-force enumeration and their monotonicity."""
import itertools
import math

import numpy as np
import pytest

from meowjax.eval import passk


def _brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    """Fraction of all size-k subsets of the n samples that hold at least one success."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_pass_at_k_matches_brute_force(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert passk.pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(outcomes, k), abs=1e-12)


def test_pass_at_k_matches_binomial_form_and_is_stable_for_large_n():
    for n, c, k in [(20, 3, 5), (50, 10, 10), (100, 1, 1)]:
        exact = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert passk.pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)
    # C(10000, 500) overflows float64; the product form does not.
    n, c, k = 10_000, 3, 500
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)  # Python ints: exact ratio
    assert passk.pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9)
    assert passk.pass_at_k(10, 0, 3) == 0.0
    assert passk.pass_at_k(10, 8, 3) == 1.0
    assert passk.pass_at_k(4, 1, 1) == pytest.approx(0.25)


@pytest.mark.parametrize(
    "n,c,k,msg", [(2, 1, 3, "n >= k"), (3, 4, 1, "0 <= c <= n"), (3, 1, 0, "k >= 1"), (3, 1.5, 1, "integer c")]
)
def test_pass_at_k_rejects_bad_input(n, c, k, msg):
    with pytest.raises(ValueError, match=msg):
        passk.pass_at_k(n, c, k)


def _random_records(rng, n_tasks, n, t_max):
    out = {}
    for task in range(n_tasks):
        p = rng.uniform()
        recs = []
        for _ in range(n):
            won = bool(rng.uniform() < p)
            recs.append({"won": won, "success_turn": int(rng.integers(1, t_max + 1)) if won else None})
        out[f"task{task}"] = recs
    return out


def test_pass_at_k_t_matches_brute_force_per_task_average():
    rng = np.random.default_rng(1)
    records = _random_records(rng, n_tasks=4, n=6, t_max=8)
    ks, ts = [1, 2, 4, 6], [1, 3, 5, 8]
    got_KT = passk.pass_at_k_t(records, ks, ts)
    assert got_KT.shape == (4, 4)
    for i, k in enumerate(ks):
        for j, t in enumerate(ts):
            per_task = [
                _brute_pass_at_k([r["won"] and r["success_turn"] <= t for r in recs], k) for recs in records.values()
            ]
            assert got_KT[i, j] == pytest.approx(np.mean(per_task), abs=1e-12)


def test_pass_at_k_t_is_monotone_in_k_and_t():
    rng = np.random.default_rng(0)
    for _ in range(5):
        records = _random_records(rng, n_tasks=6, n=10, t_max=12)
        values_KT = passk.pass_at_k_t(records, list(range(1, 11)), list(range(1, 13)))
        assert np.all(np.diff(values_KT, axis=0) >= -1e-12)
        assert np.all(np.diff(values_KT, axis=1) >= -1e-12)
        assert np.all((values_KT >= 0) & (values_KT <= 1))


def test_pass_at_k_t_accepts_objects_and_rejects_missing_success_turn():
    rec = type("Record", (), {"won": True, "success_turn": 2})()
    assert passk.pass_at_k_t({"a": [rec, rec]}, [1], [1, 2]).tolist() == [[0.0, 1.0]]
    with pytest.raises(ValueError, match="success_turn"):
        passk.pass_at_k_t({"a": [{"won": True, "success_turn": None}]}, [1], [1])
    with pytest.raises(ValueError, match="run at least"):
        passk.pass_at_k_t({"a": [{"won": False, "success_turn": None}]}, [2], [1])
    with pytest.raises(ValueError, match="positive integers"):
        passk.pass_at_k_t({"a": [{"won": False, "success_turn": None}]}, [1], [0])


def test_per_budget_mode_matches_brute_force_and_checks_tasks():
    rng = np.random.default_rng(3)
    ts = [2, 4, 8]
    by_budget = {t: {k: [{"won": r["won"]} for r in v] for k, v in _random_records(rng, 3, 5, t).items()} for t in ts}
    got_KT = passk.pass_at_k_t_per_budget(by_budget, [1, 3, 5])
    for i, k in enumerate([1, 3, 5]):
        for j, t in enumerate(ts):
            want = np.mean([_brute_pass_at_k([r["won"] for r in recs], k) for recs in by_budget[t].values()])
            assert got_KT[i, j] == pytest.approx(want, abs=1e-12)
    with pytest.raises(ValueError, match="same tasks"):
        passk.pass_at_k_t_per_budget({2: {"a": [{"won": True}]}, 4: {"b": [{"won": True}]}}, [1])
    with pytest.raises(ValueError, match="won at turn 5 > T"):
        passk.pass_at_k_t_per_budget({2: {"a": [{"won": True, "success_turn": 5}]}}, [1])


def test_estimate_reports_mode_and_ci_brackets_mean():
    rng = np.random.default_rng(4)
    records = _random_records(rng, n_tasks=12, n=8, t_max=10)
    res = passk.estimate_pass_at_k_t(records, [1, 4], [5, 10], n_boot=300, seed=0)
    assert res.mode == "single_run" and res.n_tasks == 12 and res.min_samples == 8
    np.testing.assert_allclose(res.mean_KT, passk.pass_at_k_t(records, [1, 4], [5, 10]))
    assert np.all(res.low_KT <= res.mean_KT + 1e-12) and np.all(res.mean_KT <= res.high_KT + 1e-12)
    assert res.to_json()["mode"] == "single_run"
    with pytest.raises(ValueError, match="mode must be one of"):
        passk.estimate_pass_at_k_t(records, [1], [5], mode="bogus")
