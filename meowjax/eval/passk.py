"""Pass@K and Pass@(K,T): the chance that at least one of K episodes, each capped at T turns, wins.

Per task, n ≥ K independent episodes are run and c of them succeed; the unbiased estimator of
Pass@K (Chen et al. 2021, "Evaluating Large Language Models Trained on Code") is

    Pass@K = 1 − C(n − c, K) / C(n, K),

averaged over tasks. Pass@(K,T) adds the turn budget T. Two ways to get success under budget T:

  * mode "single_run": one run per episode at budget T_max with the turn of the win recorded
    (`success_turn`); success under T ≤ T_max means `won and success_turn <= T`. Valid only when
    the prompt never states the budget (otherwise the agent could act differently under a smaller T).
  * mode "per_budget": separate runs for each T (the budget may appear in the prompt); success under
    T means the episode run with budget T was won.

An episode record is a mapping or an object with `won: bool` and `success_turn: int | None`
(1-based: the t-th agent action won; None if not won; optional in "per_budget" mode).
Host numpy only, no JAX.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from meowjax.eval import stats

MODES = ("single_run", "per_budget")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased Pass@K from n samples of which c succeeded.

        1 − C(n − c, k) / C(n, k) = 1 − Π_{i = n − c + 1}^{n} (1 − k / i)     (1 if n − c < k)

    The product form never forms the (huge) binomial coefficients, so it is stable for large n.

    Raises:
      ValueError: if not 1 <= k <= n or not 0 <= c <= n.
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if int(v) != v:
            raise ValueError(f"pass_at_k needs integer {name}, got {v!r}")
    n, c, k = int(n), int(c), int(k)
    if k < 1:
        raise ValueError(f"pass_at_k needs k >= 1, got k={k}")
    if n < k:
        raise ValueError(f"pass_at_k needs n >= k samples, got n={n} < k={k}; run more episodes per task")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def _check_grid(ks: Sequence[int], ts: Sequence[int] | None = None) -> None:
    """Validates a K (and T) grid: positive integers, non-empty."""
    for name, grid in (("ks", ks), ("ts", ts)):
        if grid is None:
            continue
        if len(grid) == 0:
            raise ValueError(f"{name} must be a non-empty list of positive integers")
        if any(int(v) != v or v < 1 for v in grid):
            raise ValueError(f"{name} must hold positive integers, got {list(grid)}")


def success_turns(records: Sequence[Any]) -> np.ndarray:
    """The winning turn of each record, or +inf for lost episodes; shape [n].

    Raises:
      ValueError: if a won record has no success_turn >= 1.
    """
    turns = np.full(len(records), np.inf)
    for i, r in enumerate(records):
        if stats.record_field(r, "won"):
            turn = stats.record_field(r, "success_turn")
            if turn is None or turn < 1:
                raise ValueError(
                    f"won episode {r!r} needs success_turn >= 1 (the 1-based turn of the win) for the "
                    "single-run Pass@(K,T) mode; record it, or use mode='per_budget'"
                )
            turns[i] = turn
    return turns


def _pass_at_ks(n: int, c: int, ks: Sequence[int], task: Any) -> np.ndarray:
    """Pass@K for every K of the grid for one task, shape [K]."""
    if n < max(ks):
        raise ValueError(
            f"task {task!r} has n={n} episodes but K={max(ks)} was requested; run at least "
            "max(ks) episodes per task or drop the larger K"
        )
    return np.asarray([pass_at_k(n, c, k) for k in ks])


def pass_at_k_t_per_task(
    records_by_task: Mapping[Any, Sequence[Any]], ks: Sequence[int], ts: Sequence[int]
) -> np.ndarray:
    """Single-run mode: per-task Pass@(K,T) from one run per episode at budget T_max ≥ max(ts).

        c_task(T) = #{episodes : won and success_turn <= T}
        P[task, k, t] = pass_at_k(n_task, c_task(T_t), K_k)

    Returns:
      values_NKT: float array [n_tasks, len(ks), len(ts)], tasks in the mapping's order.
    """
    _check_grid(ks, ts)
    if not records_by_task:
        raise ValueError("pass_at_k_t needs at least one task")
    out_NKT = np.zeros((len(records_by_task), len(ks), len(ts)))
    ts_T = np.asarray(ts)
    for i, (task, records) in enumerate(records_by_task.items()):
        turns_n = success_turns(records)
        counts_T = (turns_n[None, :] <= ts_T[:, None]).sum(axis=1)
        for j, c in enumerate(counts_T):
            out_NKT[i, :, j] = _pass_at_ks(len(records), int(c), ks, task)
    return out_NKT


def pass_at_k_t(records_by_task: Mapping[Any, Sequence[Any]], ks: Sequence[int], ts: Sequence[int]) -> np.ndarray:
    """Single-run mode Pass@(K,T) averaged over tasks; float array [len(ks), len(ts)].

        Pass@(K,T) = (1 / #tasks) Σ_task pass_at_k(n_task, c_task(T), K)

    See `pass_at_k_t_per_task`. Valid only when the prompt never states the turn budget.
    """
    return pass_at_k_t_per_task(records_by_task, ks, ts).mean(axis=0)


def pass_at_k_t_per_budget_per_task(
    records_by_budget: Mapping[int, Mapping[Any, Sequence[Any]]],
    ks: Sequence[int],
    ts: Sequence[int] | None = None,
) -> np.ndarray:
    """Per-budget mode: per-task Pass@(K,T) from separate runs at each budget T.

    `records_by_budget[T][task]` are the episodes run with budget T; success = `won`. Every budget
    must cover the same tasks. `ts` defaults to the sorted budgets.

    Returns:
      values_NKT: float array [n_tasks, len(ks), len(ts)], tasks in the order of the first budget.
    """
    ts = sorted(records_by_budget) if ts is None else list(ts)
    _check_grid(ks, ts)
    missing = [t for t in ts if t not in records_by_budget]
    if missing:
        raise ValueError(f"no episodes for budgets {missing}; have budgets {sorted(records_by_budget)}")
    tasks = list(records_by_budget[ts[0]])
    if not tasks:
        raise ValueError("pass_at_k_t_per_budget needs at least one task")
    out_NKT = np.zeros((len(tasks), len(ks), len(ts)))
    for j, t in enumerate(ts):
        by_task = records_by_budget[t]
        if set(by_task) != set(tasks):
            raise ValueError(
                f"budget T={t} covers tasks {sorted(map(str, by_task))} but T={ts[0]} covers "
                f"{sorted(map(str, tasks))}; evaluate the same tasks at every budget"
            )
        for i, task in enumerate(tasks):
            records = by_task[task]
            c = 0
            for r in records:
                won = bool(stats.record_field(r, "won"))
                turn = r.get("success_turn") if isinstance(r, Mapping) else getattr(r, "success_turn", None)
                if won and turn is not None and turn > t:
                    raise ValueError(f"episode {r!r} of budget T={t} won at turn {turn} > T; mislabelled budget?")
                c += won
            out_NKT[i, :, j] = _pass_at_ks(len(records), c, ks, task)
    return out_NKT


def pass_at_k_t_per_budget(
    records_by_budget: Mapping[int, Mapping[Any, Sequence[Any]]],
    ks: Sequence[int],
    ts: Sequence[int] | None = None,
) -> np.ndarray:
    """Per-budget mode Pass@(K,T) averaged over tasks; float array [len(ks), len(ts)]."""
    return pass_at_k_t_per_budget_per_task(records_by_budget, ks, ts).mean(axis=0)


@dataclasses.dataclass(frozen=True)
class PassKTResult:
    """Pass@(K,T) table with bootstrap confidence intervals over tasks.

    Attributes:
      ks, ts: the grid.
      mode: "single_run" or "per_budget" (how success under T was obtained; see module docstring).
      mean_KT, low_KT, high_KT: the task-averaged estimate and its (1 − alpha) bootstrap interval.
      n_tasks: number of tasks averaged over.
      min_samples: the smallest number of episodes of any task (at any budget).
      alpha: the interval's level (0.05 = 95%).
    """

    ks: tuple[int, ...]
    ts: tuple[int, ...]
    mode: str
    mean_KT: np.ndarray
    low_KT: np.ndarray
    high_KT: np.ndarray
    n_tasks: int
    min_samples: int
    alpha: float = 0.05

    def to_json(self) -> dict[str, Any]:
        """Plain-Python dict (lists of floats) for results.json."""
        return {
            "ks": list(self.ks),
            "ts": list(self.ts),
            "mode": self.mode,
            "mean": self.mean_KT.tolist(),
            "ci_low": self.low_KT.tolist(),
            "ci_high": self.high_KT.tolist(),
            "n_tasks": self.n_tasks,
            "min_samples": self.min_samples,
            "alpha": self.alpha,
        }


def estimate_pass_at_k_t(
    records: Mapping[Any, Any],
    ks: Sequence[int],
    ts: Sequence[int] | None = None,
    mode: str = "single_run",
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PassKTResult:
    """Pass@(K,T) with bootstrap-over-tasks confidence intervals.

    Args:
      records: mode "single_run": {task: [episode, ...]} run at T_max >= max(ts);
        mode "per_budget": {T: {task: [episode, ...]}}.
      ks, ts: the grid (ts defaults to the budgets of `records` in "per_budget" mode).
      mode: "single_run" or "per_budget".
      n_boot, alpha, seed: passed to `stats.bootstrap_ci` (resampling tasks).
    """
    if mode == "single_run":
        if ts is None:
            raise ValueError("mode='single_run' needs an explicit ts grid (budgets <= the T_max used)")
        values_NKT = pass_at_k_t_per_task(records, ks, ts)
        min_samples = min(len(v) for v in records.values())
    elif mode == "per_budget":
        ts = sorted(records) if ts is None else list(ts)
        values_NKT = pass_at_k_t_per_budget_per_task(records, ks, ts)
        min_samples = min(len(v) for t in ts for v in records[t].values())
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    low_KT, high_KT = stats.bootstrap_ci(values_NKT, np.mean, n_boot=n_boot, alpha=alpha, seed=seed)
    return PassKTResult(
        ks=tuple(int(k) for k in ks),
        ts=tuple(int(t) for t in ts),
        mode=mode,
        mean_KT=values_NKT.mean(axis=0),
        low_KT=np.asarray(low_KT),
        high_KT=np.asarray(high_KT),
        n_tasks=values_NKT.shape[0],
        min_samples=min_samples,
        alpha=alpha,
    )


def grid_json(records: Mapping[Any, Any], ks: Sequence[int], ts: Sequence[int] | None = None,
              mode: str = "single_run") -> dict[str, Any]:
    """``estimate_pass_at_k_t(...).to_json()`` plus ``per_task``: {task: values_KT} (lists), so
    that two grids measured on the same tasks can be compared task by task (paired)."""
    res = estimate_pass_at_k_t(records, ks, ts, mode=mode)
    per_task_NKT = (pass_at_k_t_per_task(records, ks, res.ts) if mode == "single_run"
                    else pass_at_k_t_per_budget_per_task(records, ks, res.ts))
    tasks = list(records) if mode == "single_run" else list(records[res.ts[0]])
    return {**res.to_json(), "per_task": {str(t): v.tolist() for t, v in zip(tasks, per_task_NKT)}}
