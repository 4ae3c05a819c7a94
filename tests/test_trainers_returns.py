"""Reward shaping before the estimators: per-turn cost, and the bootstrap of truncated rows."""
import numpy as np
import pytest

from meowjax import rl
from meowjax.trainers import returns


def test_turn_cost_is_subtracted_at_agent_turn_ends_only():
    r = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.0]], np.float32)
    m = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    te = np.array([[0, 1, 1, 1], [1, 1, 0, 0]], np.float32)   # te on a masked unit: ignored
    out = returns.with_turn_cost(r, m, te, 0.1)
    np.testing.assert_allclose(out, [[0.0, -0.1, 0.9, 0.0], [-0.1, 0.4, 0.0, 0.0]], atol=1e-7)
    assert returns.with_turn_cost(r, m, te, 0.0) is r
    with pytest.raises(ValueError, match="rl.turn_cost=-1"):
        returns.with_turn_cost(r, m, te, -1)


def test_a_detour_costs_return_with_a_turn_cost():
    """Two wins under a telescoping process reward (+1/3 per step of a 3-step plan): direct, and
    with one step undone (-1/3) and redone. Same return at cost 0; 2 turns x cost less with it."""
    direct = [1 / 3, 1 / 3, 1 / 3, 0, 0]
    detour = [1 / 3, -1 / 3, 1 / 3, 1 / 3, 1 / 3]
    r = np.array([direct, detour], np.float32)
    m = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.float32)
    for cost, gap in ((0.0, 0.0), (0.05, 0.1)):
        g = returns.with_turn_cost(r, m, m, cost).sum(axis=1)
        np.testing.assert_allclose(g[0] - g[1], gap, atol=1e-6)


def test_truncation_bootstrap_takes_the_last_agent_value_of_truncated_rows():
    v = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [1.0, 1.1, 1.2]], np.float32)
    m = np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 1]], np.float32)
    out = returns.truncation_bootstrap(v, m, [True, False, True, True])
    np.testing.assert_allclose(out, [0.2, 0.0, 0.0, 1.2])
    with pytest.raises(ValueError, match="one \\[E, X\\]"):
        returns.truncation_bootstrap(v[:, :2], m, [True] * 4)


@pytest.mark.parametrize("name", ["gae", "turn_gae"])
def test_critic_estimators_read_the_bootstrap(name):
    """Through the registry: with gamma = lam = 1 and one turn, A = r + V_boot - V; episode
    estimators have no critic and are unaffected."""
    r, m, te = (np.array([[0.0, 1.0]], np.float32), np.array([[1.0, 1.0]], np.float32),
                np.array([[0.0, 1.0]], np.float32))
    v = np.array([[0.25, 0.25]], np.float32)
    hp = rl.estimator_hparams(name, gamma=1.0, lam=1.0)
    outs = []
    for boot in (None, np.array([0.5], np.float32)):
        x = rl.make_inputs(r, m, np.ones(1, np.float32), values_BL=v, turn_end_BL=te,
                           bootstrap_B=boot)
        outs.append(np.asarray(rl.compute_advantages(name, x, hp)[0]))
    np.testing.assert_allclose(outs[1][0, -1] - outs[0][0, -1], 0.5, atol=1e-6)
    x = rl.make_inputs(r, m, np.ones(1, np.float32), turn_end_BL=te,
                       group_ids_B=np.zeros(1, np.int32), bootstrap_B=np.array([9.0], np.float32))
    np.testing.assert_allclose(rl.compute_advantages("rloo", x, rl.estimator_hparams(
        "rloo", gamma=1.0, lam=1.0))[0], 0.0)


# ---------------------------------------------------------------- the greedy baseline (remax)


def _episode(group_id, rewards, won=False):
    from meowjax.rollout import trajectory
    turns = [trajectory.make_turn("o", "a", r, False, 0.0) for r in rewards]
    return trajectory.Trajectory(task_id=f"t{group_id}", group_id=group_id, turns=turns, won=won,
                                 success_turn=None, info={})


def test_trajectory_return_equals_the_estimators_discounted_return_with_turn_cost():
    from meowjax.rl import advantages
    rewards, gamma, cost = [0.5, -0.25, 0.0, 1.0], 0.9, 0.02
    by_hand = sum(gamma**k * (r - cost) for k, r in enumerate(rewards))
    assert abs(returns.trajectory_return(rewards, gamma, cost) - by_hand) < 1e-12
    # The same episode as a one-turn-per-unit reward matrix, shaped as the trainer does.
    r_EX = np.asarray([rewards], np.float32)
    ones = np.ones_like(r_EX)
    shaped = returns.with_turn_cost(r_EX, ones, ones, cost)
    got = advantages.discounted_episode_returns(shaped, ones, ones, gamma=gamma)
    np.testing.assert_allclose(np.asarray(got)[0], by_hand, rtol=1e-6)


def test_greedy_baseline_matches_episodes_to_their_task_by_group_id():
    from meowjax.trainers import greedy_baseline
    greedy = [_episode(0, [0.0, 1.0], won=True), _episode(1, [0.5, 0.0])]
    episodes = [_episode(g, [1.0]) for g in (1, 0, 0, 1)]
    got = greedy_baseline.baseline_returns(greedy, episodes, gamma=1.0, turn_cost=0.1)
    np.testing.assert_allclose(got, [0.3, 0.8, 0.8, 0.3], rtol=1e-6)
    assert greedy_baseline.greedy_metrics(greedy) == {"rollout/greedy_success": 0.5}
    assert greedy_baseline.group_budgets([4, 4, 6, 6, 12, 12], 2) == [4, 6, 12]
    with pytest.raises(ValueError, match=r"No greedy episode for groups \[2\]"):
        greedy_baseline.baseline_returns(greedy, [_episode(2, [1.0])], gamma=1.0, turn_cost=0.0)
