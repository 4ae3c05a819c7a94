"""Dynamic sampling (DAPO): update on groups whose episodes disagree; draw more tasks to fill.

With a group baseline (RLOO, GRPO, GiGPO's episode term) a group whose G episodes earn the same
return R has advantage

    A_i = R_i - (sum_j R_j - R_i) / (G - 1) = R - R = 0      for every member i,

so it contributes nothing but an update step. Once the policy wins most training games, many
groups are all-win (at the default run's rollout success of ~0.85, about half of them), and an
iteration's gradient comes from the few groups left. ``rollout.dynamic_draws = D > 0`` keeps
only the groups whose returns differ (spread > ``SPREAD_TOL``), plays up to D more sets of
``rollout.tasks_per_iter`` tasks (drawn at random from the RL pool) while fewer than
``tasks_per_iter`` such groups were found, and updates on the first ``tasks_per_iter`` of them.
Rollouts are the cheap part of an iteration here; the update's size is unchanged.

The return that decides is the episode's sum of turn rewards minus ``rl.turn_cost`` per turn,
the return the estimators see. An iteration that finds no such group updates on its first draw
(all advantages 0: the zero-gradient update leaves the weights unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from meowjax.rollout import trajectory

SPREAD_TOL = 1e-6


def episode_return(tr: trajectory.Trajectory, turn_cost: float) -> float:
    """R = sum_t r_t - turn_cost * turns (the undiscounted return of ``returns.with_turn_cost``)."""
    return tr.total_reward - turn_cost * tr.num_turns


def split_groups(trajs: Sequence[trajectory.Trajectory]) -> list[list[trajectory.Trajectory]]:
    """Episodes grouped by ``group_id``, groups in order of first appearance."""
    groups: dict[int, list[trajectory.Trajectory]] = {}
    for tr in trajs:
        groups.setdefault(tr.group_id, []).append(tr)
    return list(groups.values())


def informative_groups(trajs: Sequence[trajectory.Trajectory], turn_cost: float
                       ) -> list[list[trajectory.Trajectory]]:
    """The groups whose returns differ: max R - min R > ``SPREAD_TOL``."""
    out = []
    for group in split_groups(trajs):
        rets = [episode_return(tr, turn_cost) for tr in group]
        if max(rets) - min(rets) > SPREAD_TOL:
            out.append(group)
    return out


def fill_groups(play_draw: Callable[[int], list[trajectory.Trajectory]], *, want: int,
                max_draws: int, turn_cost: float
                ) -> tuple[list[trajectory.Trajectory], dict[str, Any]]:
    """Plays draw 0 (the iteration's own tasks), then draws 1..max_draws while fewer than
    ``want`` informative groups were found.

    Returns (the episodes to update on, stats). The kept groups are
    renumbered 0..n-1 (group ids of separate draws overlap). With ``max_draws = 0`` the update
    episodes are draw 0's, unchanged.
    """
    if max_draws < 0:
        raise ValueError(f"rollout.dynamic_draws={max_draws} must be >= 0 (0 = off).")
    first = play_draw(0)
    if max_draws == 0:
        return first, {}
    groups = informative_groups(first, turn_cost)
    stats = {"rollout/informative_share": len(groups) / max(1, len(split_groups(first)))}
    draws = 0
    while len(groups) < want and draws < max_draws:
        draws += 1
        groups += informative_groups(play_draw(draws), turn_cost)
    groups = groups[:want]
    stats.update({"rollout/extra_draws": float(draws), "rollout/update_groups": float(len(groups))})
    if not groups:
        return first, stats
    for gid, group in enumerate(groups):
        for tr in group:
            tr.group_id = gid
    return [tr for group in groups for tr in group], stats

