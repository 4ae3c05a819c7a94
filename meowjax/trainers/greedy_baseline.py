"""The greedy baseline of ReMax (estimator ``remax``): one greedy episode per RL task.

ReMax (Li et al., 2023; self-critical training, Rennie et al., 2017) replaces the group's mean
return by the return of the task's greedy episode (arg-max action at every turn):

    A_i = R_i - R_greedy(task of i)

Held-out success is measured greedily, and the greedy policy fails where its arg-max loops
even when sampled episodes of the same game win. A group baseline gives a group whose sampled
episodes all win zero advantage; against the greedy return the same group pushes its winning
actions up exactly where the greedy episode failed, and a sampled episode that does worse than
a winning greedy one is pushed down. The greedy episodes are played for their return only; they
are not trained on.

Returns follow ``returns.trajectory_return`` (turn cost, then gamma over turns), the return the
episode estimators compute from the reward matrix (with ``rl.kl_in_loss``; a KL folded into the
rewards is not in the baseline).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from meowjax.rollout import trajectory
from meowjax.trainers import returns


def group_budgets(budgets: Sequence[int], group_size: int) -> list[int]:
    """The turn budget of each task's greedy episode: that of its group's first episode."""
    return [int(b) for b in budgets[::group_size]]


def baseline_returns(greedy: Sequence[trajectory.Trajectory],
                     episodes: Sequence[trajectory.Trajectory], *, gamma: float,
                     turn_cost: float) -> np.ndarray:
    """``[E]`` float32: for each episode the return of the greedy episode of its group (matched
    by ``group_id``, the task's position in the iteration's task list)."""
    by_group = {g.group_id: returns.trajectory_return([t.reward for t in g.turns], gamma,
                                                      turn_cost) for g in greedy}
    missing = sorted({e.group_id for e in episodes} - set(by_group))
    if missing:
        raise ValueError(f"No greedy episode for groups {missing[:5]}: the greedy baseline "
                         "plays each task of the iteration once, with its group's id.")
    return np.asarray([by_group[e.group_id] for e in episodes], np.float32)


def greedy_metrics(greedy: Sequence[trajectory.Trajectory]) -> dict[str, float]:
    """``rollout/greedy_success``: the share of the iteration's tasks its greedy episode won."""
    return {"rollout/greedy_success": float(np.mean([g.won for g in greedy])) if greedy else 0.0}
