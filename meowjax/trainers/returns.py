"""Host-side shaping of an RL iteration's ``[E, X]`` reward matrix before the estimators.

X indexes units (turns for the scoring interface, tokens for free text); ``mask_EX`` marks the
agent's units and ``turn_end_EX`` each turn's last one, where the env's turn reward sits.

- ``with_turn_cost``: ``r'_{e,x} = r_{e,x} - cost * turn_end_{e,x} * mask_{e,x}``. With
  gamma = 1 and a telescoping process reward, a win reached after undoing and redoing steps has
  the return of a direct win; a per-turn cost makes every detour cost ``cost`` per turn.
- ``truncation_bootstrap``: the value after a row's last agent unit. An episode cut by its turn
  budget did not end: GAE should continue from the value of the state it was cut in, not from 0.
  The state after the last action is not re-scored, so its value is estimated by the critic's
  value at the last agent unit (the state that action was chosen in); ended episodes get 0.
"""

from __future__ import annotations

import numpy as np

# rl.loss_norm: "iteration" = every update step divides by the same number (a full minibatch's
# worth of units); "minibatch" = by its own count of units (rows), the usual token mean.
LOSS_NORMS = ("iteration", "minibatch")


def with_turn_cost(rewards_EX: np.ndarray, mask_EX: np.ndarray, turn_end_EX: np.ndarray,
                   cost: float) -> np.ndarray:
    """Rewards less ``cost`` at every agent turn end (the input is not modified)."""
    if cost < 0:
        raise ValueError(f"rl.turn_cost={cost} must be >= 0 (a cost per agent turn).")
    if not cost:
        return rewards_EX
    ends = (np.asarray(turn_end_EX) > 0) & (np.asarray(mask_EX) > 0)
    return np.asarray(rewards_EX, np.float32) - np.float32(cost) * ends.astype(np.float32)


def trajectory_return(turn_rewards: "list[float] | np.ndarray", gamma: float,
                      cost: float) -> float:
    """One episode's return as the episode estimators see it, from its turn rewards:
    ``G = sum_k gamma^k (r_k - cost)`` (``with_turn_cost``, then
    ``advantages.discounted_episode_returns``)."""
    r_K = np.asarray(turn_rewards, np.float64) - cost
    return float(np.sum(r_K * np.power(gamma, np.arange(len(r_K)))))


def truncation_bootstrap(values_EX: np.ndarray, mask_EX: np.ndarray,
                         truncated_E: np.ndarray) -> np.ndarray:
    """``[E]``: for each truncated row the value at its last agent unit, else 0."""
    values_EX, mask_EX = np.asarray(values_EX, np.float32), np.asarray(mask_EX) > 0
    if values_EX.shape != mask_EX.shape or values_EX.ndim != 2:
        raise ValueError(f"values {values_EX.shape} and mask {mask_EX.shape} must be one [E, X].")
    has = mask_EX.any(axis=1)
    last_E = mask_EX.shape[1] - 1 - np.argmax(mask_EX[:, ::-1], axis=1)
    v_E = values_EX[np.arange(len(values_EX)), last_E]
    return np.where(np.asarray(truncated_E, bool) & has, v_E, 0.0).astype(np.float32)


def iteration_loss_norm(mask_EX: np.ndarray, num_rows: int, minibatch_rows: int,
                        agg: str) -> np.float32:
    """The one denominator of every update step of an RL iteration (rl.loss_norm="iteration"):
    a full minibatch's worth of units (tokens / turns) of an average row, or of rows for the
    sequence means. With each step's own count instead, the small last minibatch of an epoch
    (its shortest rows) weighed each of its rows up to ~30x a row of a full one."""
    units_per_row = float(np.sum(mask_EX)) / num_rows if agg == "token_mean" else 1.0
    return np.float32(minibatch_rows * units_per_row)
