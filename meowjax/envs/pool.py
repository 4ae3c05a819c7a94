"""EnvPool: many text environments stepped in parallel worker processes, surviving worker failures.

Slots: ``reset(tasks, max_turns)`` makes slot i play ``tasks[i]``; slot i lives in worker
``i % num_workers`` (each worker owns its slots' environments and reuses them across resets).
``step(actions)`` sends ``actions[i]`` to slot i; ``None`` (or a slot whose episode is over)
gives ``None`` back. Workers step their slots concurrently; each streams one result per slot.

Failures (the rollout goes on, only the affected episodes end):
  * a worker that dies (segfault, ``os.kill``), sends garbage, or is silent for longer than
    ``step_timeout_s`` per slot result is killed and restarted; every slot it was stepping gets
    ``StepResult(done=True, won=False, info["env_failure"]=True)``, and its other live slots,
    whose game state died with it, get the same result the next time they are stepped;
  * an exception inside one env's ``step`` ends only that slot (same result; the env is rebuilt
    at its next reset);
  * at reset, a crash or hang is retried once on a fresh worker; if it fails again that slot's
    ResetResult has ``info["env_failure"]=True`` and the slot is done (step gives ``None``).
  * broken inputs (a missing or corrupt game file) are not failures: reset raises the env's
    :class:`EnvError` (naming the file) in the caller, after every slot has answered.

Processes use the "spawn" context (safe beside JAX's threads in the parent). ``num_workers=0``
runs the same API in-process (no timeouts; an exception in ``step`` still becomes env_failure).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import time
import traceback
from typing import Any

from absl import logging

from meowjax.envs import registry
from meowjax.envs.base import EnvError, ResetResult, StepResult, Task
from meowjax.envs.registry import EnvSpec, make_env

FAILURE_OBSERVATION = "The environment failed; this episode has ended."


def failure_result(turn: int, error: str) -> StepResult:
    """What a slot whose environment crashed / hung / misbehaved returns."""
    return StepResult(FAILURE_OBSERVATION, 0.0, True, False,
                      {"env_failure": True, "error": error, "turn": turn, "score": 0.0,
                       "invalid": False, "truncated": False, "admissible": None})


def _failure_reset(error: str) -> ResetResult:
    return ResetResult(FAILURE_OBSERVATION, "", 0.0, None, None,
                       {"env_failure": True, "error": error, "turn": 0, "score": 0.0})


# -- worker process ------------------------------------------------------------------------------
def _worker_main(conn, spec: EnvSpec, target: str) -> None:
    """Serves ("reset", [(slot, task, max_turns)]) / ("step", [(slot, action)]) / ("close",).

    Replies with ("ready",) once, then one (slot, status, payload) per item, status in
    ok | env_error | exception.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (close)
    __import__(target.split(":")[0])  # may register the family itself (import side effects)
    registry.adopt_family(spec.family, target)  # else the parent's registration (runtime, tests)
    envs: dict[int, Any] = {}
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message[0] == "close":
            break
        for item in message[1]:
            slot = item[0]
            try:
                if message[0] == "reset":
                    if slot not in envs:
                        envs[slot] = make_env(spec)
                    payload = envs[slot].reset(item[1], item[2])
                else:
                    payload = envs[slot].step(item[1])
                reply = (slot, "ok", payload)
            except EnvError as e:
                reply = (slot, "env_error", str(e))
            except Exception:  # noqa: BLE001 - any env bug ends only this slot's episode
                broken = envs.pop(slot, None)
                try:
                    if broken is not None:
                        broken.close()
                except Exception:  # noqa: BLE001
                    pass
                reply = (slot, "exception", traceback.format_exc(limit=5))
            conn.send(reply)
    for env in envs.values():
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, ctx, spec: EnvSpec, target: str):
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child, spec, target), daemon=True)
        self.process.start()
        child.close()
        self.ready = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class EnvPool:
    """Parallel environments with a fixed slot layout per reset (see module doc)."""

    def __init__(self, spec: EnvSpec, num_workers: int, *, step_timeout_s: float = 30.0,
                 startup_timeout_s: float = 180.0):
        if num_workers < 0:
            raise EnvError(f"num_workers={num_workers} must be >= 0 (0 = in-process).")
        self._target = registry.get_family(spec.family).env  # unknown: names the known ones
        self.spec = spec
        self.num_workers = num_workers
        self.step_timeout_s = float(step_timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = [self._start() for _ in range(num_workers)]
        self._local: dict[int, Any] = {}  # in-process envs (num_workers == 0)
        self._done: list[bool] = []
        self._lost: set[int] = set()  # slots whose worker died between their steps
        self._turns: list[int] = []
        self.num_restarts = 0

    # -- public API ------------------------------------------------------------------------------
    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    def reset(self, tasks: list[Task], max_turns: list[int]) -> list[ResetResult]:
        """Slot i starts ``tasks[i]`` with budget ``max_turns[i]``; returns the first observations."""
        if len(tasks) != len(max_turns):
            raise EnvError(f"reset got {len(tasks)} tasks but {len(max_turns)} max_turns.")
        n = len(tasks)
        items = {i: (i, tasks[i], int(max_turns[i])) for i in range(n)}
        replies = self._run("reset", items)
        # A failed worker lost every game it held, so all its slots are reset again.
        failed = {i % max(self.num_workers, 1) for i, r in replies.items() if r[0] == "failure"}
        retry = {i: item for i, item in items.items() if i % max(self.num_workers, 1) in failed}
        if retry:
            replies.update(self._run("reset", retry))
        self._done, self._lost, self._turns = [False] * n, set(), [0] * n
        errors = [f"slot {i}: {r[1]}" for i, r in sorted(replies.items()) if r[0] == "env_error"]
        if errors:
            self._done = [True] * n
            raise EnvError("; ".join(errors))
        results = []
        for i in range(n):
            status, payload = replies[i]
            if status == "ok" and isinstance(payload, ResetResult):
                results.append(payload)
            else:
                self._done[i] = True
                results.append(_failure_reset(str(payload)))
        return results

    def step(self, actions: list[str | None]) -> list[StepResult | None]:
        """Applies ``actions[i]`` to slot i (None: not stepped); a done slot gives None."""
        if len(actions) != len(self._done):
            raise EnvError(f"step got {len(actions)} actions for {len(self._done)} slots; "
                           "pass one entry (or None) per slot of the last reset.")
        out: list[StepResult | None] = [None] * len(actions)
        items = {}
        for i, action in enumerate(actions):
            if action is None or self._done[i]:
                continue
            if i in self._lost:
                out[i] = failure_result(self._turns[i] + 1, "worker restarted; episode lost")
                self._lost.discard(i)
            else:
                items[i] = (i, action)
        for i, (status, payload) in self._run("step", items).items():
            if status == "ok" and isinstance(payload, StepResult):
                out[i] = payload
            else:
                out[i] = failure_result(self._turns[i] + 1, f"{status}: {payload}")
        for i, result in enumerate(out):
            if result is not None:
                self._turns[i] += 1
                self._done[i] = bool(result.done)
        return out

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(("close",))
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.process.join(timeout=2)
            w.kill()
        self._workers = []
        for env in self._local.values():
            env.close()
        self._local = {}

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # -- internals -----------------------------------------------------------------------------
    def _start(self) -> _Worker:
        return _Worker(self._ctx, self.spec, self._target)

    def _restart(self, w: int) -> None:
        self._workers[w].kill()
        self._workers[w] = self._start()
        self.num_restarts += 1
        # The new worker has none of the old one's games: its live slots are lost.
        for slot in range(w, len(self._done), self.num_workers):
            if not self._done[slot]:
                self._lost.add(slot)

    def _run(self, kind: str, items: dict[int, tuple]) -> dict[int, tuple[str, Any]]:
        """Sends ``items`` (slot -> payload) to their workers; returns slot -> (status, payload).

        status: ok | env_error | exception | failure (worker died, hung or sent garbage).
        """
        if not items:
            return {}
        if self.num_workers == 0:
            return {i: self._run_local(kind, item) for i, item in items.items()}
        by_worker: dict[int, list[tuple]] = {}
        for i, item in sorted(items.items()):
            by_worker.setdefault(i % self.num_workers, []).append(item)
        expected = ResetResult if kind == "reset" else StepResult
        replies: dict[int, tuple[str, Any]] = {}
        pending: dict[int, set[int]] = {}
        deadline: dict[int, float] = {}
        now = time.monotonic()
        for w, batch in by_worker.items():
            try:
                self._workers[w].conn.send((kind, batch))
            except (OSError, ValueError, BrokenPipeError):
                pass  # a dead pipe shows up as EOF below
            pending[w] = {item[0] for item in batch}
            startup = 0.0 if self._workers[w].ready else self.startup_timeout_s
            deadline[w] = now + startup + self.step_timeout_s
        while pending:
            timeout = max(0.0, min(deadline[w] for w in pending) - time.monotonic())
            conns = {self._workers[w].conn: w for w in pending}
            for conn in multiprocessing.connection.wait(list(conns), timeout=timeout):
                w = conns[conn]
                if self._receive(w, pending[w], replies, expected):
                    deadline[w] = time.monotonic() + self.step_timeout_s
                else:
                    self._fail(w, pending, replies, "worker died or sent garbage")
                    continue
                if not pending[w]:
                    del pending[w]
            for w in [w for w in pending if time.monotonic() > deadline[w]]:
                self._fail(w, pending, replies, f"no reply within step_timeout_s="
                                                f"{self.step_timeout_s}")
        return replies

    def _receive(self, w: int, waiting: set[int], replies: dict, expected: type) -> bool:
        """Reads one message from worker ``w``; False if it is dead or the message is garbage.

        Garbage: not a (slot, status, payload) triple for a slot we wait for, or an ``ok``
        whose payload is not a ``expected`` (ResetResult / StepResult).
        """
        try:
            message = self._workers[w].conn.recv()
        except (EOFError, OSError, Exception):  # noqa: BLE001 - unpicklable garbage too
            return False
        if message == ("ready",) and not self._workers[w].ready:
            self._workers[w].ready = True
            return True
        if not (isinstance(message, tuple) and len(message) == 3 and message[0] in waiting
                and message[1] in ("ok", "env_error", "exception")
                and (message[1] != "ok" or isinstance(message[2], expected))):
            return False
        waiting.discard(message[0])
        replies[message[0]] = (message[1], message[2])
        return True

    def _fail(self, w: int, pending: dict, replies: dict, why: str) -> None:
        slots = pending.pop(w)
        logging.warning("Env worker %d (pid %s) failed: %s. Its episodes in flight (slots %s) "
                        "end as env failures; the worker is restarted.", w,
                        self._workers[w].pid, why, sorted(slots))
        for slot in slots:
            replies[slot] = ("failure", f"{why} (worker pid {self._workers[w].pid})")
        self._restart(w)

    def _run_local(self, kind: str, item: tuple) -> tuple[str, Any]:
        slot = item[0]
        try:
            if kind == "reset":
                if slot not in self._local:
                    self._local[slot] = make_env(self.spec)
                return "ok", self._local[slot].reset(item[1], item[2])
            return "ok", self._local[slot].step(item[1])
        except EnvError as e:
            return "env_error", str(e)
        except Exception:  # noqa: BLE001
            self._local.pop(slot, None)
            return "exception", traceback.format_exc(limit=5)
