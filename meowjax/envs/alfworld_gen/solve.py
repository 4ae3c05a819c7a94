"""Solvability check: plan with fast-downward (textworld's PDDL planner), then replay the plan.

``solve_game(path)`` loads a ``game.tw-pddl`` through textworld's ``PddlEnv`` with ALFWorld's
demangler (the same stack the environment uses), asks the planner for a plan from the initial
state (``extra.walkthrough`` = ``PddlState.replan``), and replays every command, requiring each to
be admissible and the last one to win. The planner runs inside a C library that cannot be
interrupted, so ``solve_with_timeout`` runs it in a separate process and abandons it after
``time_limit_s``.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing

from meowjax.envs import alfworld_pddl

_ENV = None  # one PddlEnv per worker process (each holds its own copy of libdownward)


def _pddl_env():
    global _ENV
    if _ENV is None:
        _ENV = alfworld_pddl.demangled_pddl_env(extras=("walkthrough",))
    return _ENV


def solve_game(path: str) -> tuple[list[str] | None, str]:
    """(plan, "") when the planner's plan wins on replay, else (None, reason)."""
    env = _pddl_env()
    try:
        env.load(path)
        state = env.reset()
    except (Exception, SystemExit) as e:  # fast-downward's translator exits on bad PDDL
        return None, f"cannot load: {type(e).__name__}: {e}"
    if state["won"]:
        return None, "goal already true at the start"
    plan = list(state["extra.walkthrough"] or [])
    if not plan:
        return None, "planner found no plan"
    for i, command in enumerate(plan):
        if command not in state["admissible_commands"]:
            return None, f"plan step {i} {command!r} not admissible"
        state, _, done = env.step(command)
        if done and i < len(plan) - 1:
            return None, f"won early at step {i}"
    if not state["won"]:
        return None, "replayed plan does not win"
    return plan, ""


class Solver:
    """Runs ``solve_game`` in worker processes with a per-game wall-clock limit."""

    def __init__(self, num_workers: int = 1, time_limit_s: float = 60.0):
        self.num_workers = max(1, num_workers)
        self.time_limit_s = time_limit_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _ensure_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the parent may have imported jax/threads; fork would copy their locks.
            ctx = multiprocessing.get_context("spawn")
            self._pool = concurrent.futures.ProcessPoolExecutor(self.num_workers, mp_context=ctx)
        return self._pool

    def solve_many(self, paths: list[str]) -> list[tuple[list[str] | None, str]]:
        """``solve_game`` for each path, in waves of ``num_workers`` games started together; a game
        still running ``time_limit_s`` after its wave started is (None, "planner timeout ...")."""
        results: list[tuple[list[str] | None, str]] = []
        for start in range(0, len(paths), self.num_workers):
            wave = paths[start:start + self.num_workers]
            pool = self._ensure_pool()
            futures = [pool.submit(solve_game, p) for p in wave]
            done, not_done = concurrent.futures.wait(futures, timeout=self.time_limit_s)
            for f in futures:
                if f in not_done:
                    results.append((None, f"planner timeout after {self.time_limit_s:g} s"))
                    continue
                try:
                    results.append(f.result())
                except concurrent.futures.process.BrokenProcessPool as e:
                    results.append((None, f"solver process died: {e}"))
                    not_done.add(f)
            if not_done:
                self._kill()
        return results

    def _kill(self) -> None:
        if self._pool is not None:
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.kill()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "Solver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
