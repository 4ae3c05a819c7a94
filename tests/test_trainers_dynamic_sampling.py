"""Dynamic sampling: which groups carry a group-baseline signal, and how draws fill the update."""

import numpy as np
import pytest

from meowjax.rl import advantages
from meowjax.rollout import trajectory
from meowjax.trainers import dynamic_sampling as ds


def _traj(group_id, rewards, won=True, task="t"):
    turns = [trajectory.TurnRecord("obs", "act", float(r), False, -0.5, 0) for r in rewards]
    return trajectory.Trajectory(task, group_id, turns, won, len(turns) if won else None, {})


def test_informative_groups_are_those_whose_returns_differ():
    trajs = [_traj(0, [0, 1]), _traj(0, [0, 0, 1]),          # same return 1, lengths differ
             _traj(1, [0, 1]), _traj(1, [0, 0], won=False),  # 1 vs 0
             _traj(2, [0, 0], won=False), _traj(2, [0, 0], won=False)]
    assert [g[0].group_id for g in ds.informative_groups(trajs, turn_cost=0.0)] == [1]
    # A turn cost makes the longer win worth less: group 0 now has a spread of 0.1.
    assert [g[0].group_id for g in ds.informative_groups(trajs, turn_cost=0.1)] == [0, 1]


def test_informative_groups_match_where_rloo_advantages_are_nonzero():
    rng = np.random.default_rng(0)
    rets = np.where(rng.random((6, 4)) < 0.7, 1.0, 0.0)   # 6 groups of 4 episodes, win = 1
    trajs = [_traj(g, [rets[g, i]]) for g in range(6) for i in range(4)]
    adv = np.asarray(advantages.rloo_advantages(rets.reshape(-1).astype(np.float32),
                                                np.repeat(np.arange(6), 4), np.ones(24, np.float32)))
    nonzero = sorted({g for g in range(6) if np.any(np.abs(adv[4 * g:4 * g + 4]) > 1e-7)})
    assert 0 < len(nonzero) < 6   # both kinds present
    assert [grp[0].group_id for grp in ds.informative_groups(trajs, 0.0)] == nonzero


def test_fill_groups_draws_until_enough_and_renumbers():
    draws_played = []

    def play(draw):
        draws_played.append(draw)
        # each draw: 3 groups of 2; only group 1 of each draw disagrees
        return [_traj(g, [1.0 if (g == 1 and i == 0) else 0.0], task=f"d{draw}g{g}")
                for g in range(3) for i in range(2)]

    eps, stats = ds.fill_groups(play, want=2, max_draws=5, turn_cost=0.0)
    assert draws_played == [0, 1]
    assert [e.task_id for e in eps] == ["d0g1", "d0g1", "d1g1", "d1g1"]
    assert [e.group_id for e in eps] == [0, 0, 1, 1]
    assert stats["rollout/extra_draws"] == 1.0
    assert stats["rollout/informative_share"] == pytest.approx(1 / 3)
    assert stats["rollout/update_groups"] == 2.0


def test_fill_groups_stops_at_max_draws_and_falls_back_to_the_first_draw():
    played = []
    play = lambda draw: played.append([_traj(0, [1.0]), _traj(0, [1.0])]) or played[-1]  # all-win
    eps, stats = ds.fill_groups(play, want=4, max_draws=2, turn_cost=0.0)
    assert len(played) == 3 and eps is played[0] and stats["rollout/extra_draws"] == 2.0
    assert stats["rollout/update_groups"] == 0.0


def test_fill_groups_off_returns_the_first_draw_unchanged():
    calls, played = [], []
    play = lambda draw: calls.append(draw) or played.append([_traj(5, [1.0]), _traj(5, [1.0])]) \
        or played[-1]
    eps, stats = ds.fill_groups(play, want=4, max_draws=0, turn_cost=0.0)
    assert calls == [0] and eps is played[0] and stats == {} and eps[0].group_id == 5
    with pytest.raises(ValueError, match="dynamic_draws"):
        ds.fill_groups(play, want=4, max_draws=-1, turn_cost=0.0)


def test_remax_with_dynamic_sampling_fails_before_any_work(tmp_path):
    """The greedy baseline replaces the group's own spread, which dynamic sampling filters on."""
    from configs import default
    from meowjax.trainers.loop import AgentTrainer
    c = default.get_config("smoke=True")
    c.unlock()
    c.rl.estimator = "remax"
    c.rollout.dynamic_draws = 1
    c.games.cache_dir = str(tmp_path / "games")
    with pytest.raises(ValueError, match="set rollout.dynamic_draws=0"):
        AgentTrainer(c, str(tmp_path / "run"))
    assert not (tmp_path / "games").exists()   # no games were made
