"""EnvPool: parallel == in-process on real TextWorld games; crashes, hangs, garbage and bad files.

The failure tests use a tiny test-only env family (``ScriptedEnv`` below, registered for the
test; spawned workers import it from this module) so they need no textworld start-up.
"""
import os
import signal
import time

import pytest

from meowjax.envs import registry
from meowjax.envs.base import EnvError, ResetResult, StepResult, Task
from meowjax.envs.pool import EnvPool
from meowjax.envs.registry import EnvSpec
from meowjax.envs.textworld_games import GameSetSpec, generate_games


class ScriptedEnv:
    """Echoes actions; "sleep" hangs, "crash" kills the process, "raise" raises, "garbage" lies."""

    def __init__(self, tag: str = ""):
        self.tag, self.turn, self.task = tag, 0, None

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        if task.path == "missing":
            raise EnvError("game file not found: missing. Regenerate it.")
        if task.path == "hang-on-reset":
            time.sleep(60)
        self.task, self.turn, self.max_turns = task, 0, max_turns
        return ResetResult(f"{self.tag}start {task.task_id} pid", "obj", 1.0)

    def step(self, action: str):
        self.turn += 1
        if action == "sleep":
            time.sleep(60)
        if action == "crash":
            os._exit(3)
        if action == "raise":
            raise RuntimeError("env bug")
        if action == "garbage":
            return "not a StepResult"
        done = action == "win" or self.turn >= self.max_turns
        return StepResult(f"{self.task.task_id} {self.turn} {action}", float(action == "win"),
                          done, action == "win", {"turn": self.turn, "pid": os.getpid()})

    def close(self) -> None:
        pass


@pytest.fixture
def scripted():
    registry.register_family(registry.Family("scripted", ScriptedEnv))
    yield EnvSpec("scripted", {"tag": "T:"})
    registry.unregister_family("scripted")


def _tasks(n, path="ok"):
    return [Task(f"task{i}", path, "scripted") for i in range(n)]


@pytest.fixture(scope="module")
def tw_tasks(tiny_games_dir):
    spec = GameSetSpec(kind="custom", split="test", num_games=2, world_size=2, nb_objects=3,
                       quest_length=4)
    return generate_games(spec, tiny_games_dir, workers=1)


@pytest.fixture(scope="module")
def tw_pool():
    pool = EnvPool(EnvSpec("textworld", {"reward_mode": "dense"}), num_workers=2,
                   step_timeout_s=30.0)
    yield pool
    pool.close()


def _replay(pool, tasks, budgets):
    """Steps every slot through its walkthrough (slot 1 sits out its first turn)."""
    resets = pool.reset(tasks, budgets)
    plans = [list(r.walkthrough) for r in resets]
    plans[1].insert(0, None)
    log = [[r.observation for r in resets]]
    for t in range(max(len(p) for p in plans)):
        actions = [p[t] if t < len(p) else None for p in plans]
        results = pool.step(actions)
        log.append([None if r is None else (r.observation, r.reward, r.done, r.won)
                    for r in results])
    return log


def test_parallel_equals_in_process_on_textworld(tw_pool, tw_tasks):
    tasks = [tw_tasks[0], tw_tasks[1], tw_tasks[1], tw_tasks[0], tw_tasks[1]]
    budgets = [20, 20, 20, 20, 3]
    with EnvPool(EnvSpec("textworld", {"reward_mode": "dense"}), num_workers=0) as local:
        expected = _replay(local, tasks, budgets)
    got = _replay(tw_pool, tasks, budgets)
    assert got == expected
    finals = [next(r for r in reversed(col) if r is not None) for col in zip(*expected[1:])]
    assert [f[3] for f in finals] == [True, True, True, True, False]  # slot 4: budget 3 < plan
    assert [f[1] for f in expected[1] if f is not None] and expected[1][1] is None
    assert tw_pool.num_restarts == 0


def test_killed_worker_is_reported_and_replaced(tw_pool, tw_tasks, caplog):
    tasks = [tw_tasks[i % 2] for i in range(5)]  # slots 0, 2, 4 live in worker 0
    resets = tw_pool.reset(tasks, [20] * 5)
    plans = [r.walkthrough for r in resets]
    tw_pool.step([p[0] for p in plans])
    victim = tw_pool.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    with caplog.at_level("WARNING"):
        results = tw_pool.step([plans[0][1], plans[1][1], None, plans[3][1], None])
    assert f"Env worker 0 (pid {victim}) failed" in caplog.text   # each failure is logged
    assert results[0].done and not results[0].won and results[0].info["env_failure"]
    assert results[2] is None and results[4] is None
    for i in (1, 3):
        assert not results[i].done and "env_failure" not in results[i].info
    assert tw_pool.worker_pids[0] != victim and tw_pool.num_restarts == 1
    # Slots 2 and 4 were not stepped when the worker died, but their games died with it.
    lost = tw_pool.step([None, None, plans[2][1], None, plans[4][1]])
    assert lost[2].info["env_failure"] and lost[4].info["env_failure"] and lost[2].done
    # The pool goes on: a fresh reset on the new worker plays to a win.
    log = _replay(tw_pool, tasks, [20] * 5)
    finals = [next(r for r in reversed(col) if r is not None) for col in zip(*log[1:])]
    assert all(f[3] for f in finals)


def test_missing_and_corrupt_game_file_raise_at_reset(tw_pool, tw_tasks, tmp_path):
    corrupt = tmp_path / "corrupt.z8"
    corrupt.write_bytes(b"\x08" + b"\x00" * 100)
    (tmp_path / "corrupt.json").write_text("{}")
    for path, name in ((str(tmp_path / "gone.z8"), "gone.z8"), (str(corrupt), "corrupt.z8")):
        with pytest.raises(EnvError, match=name):
            tw_pool.reset([tw_tasks[0], Task("bad", path, "textworld")], [5, 5])
    assert tw_pool.num_restarts == 1  # not a worker crash (1 is the kill test's)
    assert tw_pool.reset(tw_tasks, [5, 5])[0].walkthrough


def test_hung_worker_times_out_and_pool_goes_on(scripted):
    with EnvPool(scripted, num_workers=2, step_timeout_s=1.0) as pool:
        assert [r.observation for r in pool.reset(_tasks(3), [5] * 3)] == [
            "T:start task0 pid", "T:start task1 pid", "T:start task2 pid"]
        pid0 = pool.worker_pids[0]
        t0 = time.monotonic()
        results = pool.step(["sleep", "go", "go"])
        assert time.monotonic() - t0 < 10
        assert results[0].info["env_failure"] and results[0].done
        assert results[1].observation == "task1 1 go" and not results[1].done
        assert results[2].info["env_failure"]  # same worker as slot 0: killed behind it
        assert pool.worker_pids[0] != pid0 and pool.num_restarts == 1
        after = pool.step(["go", "win", "go"])
        assert after[0] is None and after[2] is None and after[1].won  # failed slots are done
        again = pool.reset(_tasks(3), [5] * 3)
        assert all(not r.info.get("env_failure") for r in again)
        assert pool.step(["win", "win", "win"])[2].won


def test_crash_garbage_and_exceptions_end_only_their_slots(scripted):
    with EnvPool(scripted, num_workers=3, step_timeout_s=5.0) as pool:
        pool.reset(_tasks(4), [5] * 4)  # slots 0, 3 -> worker 0
        results = pool.step(["crash", "garbage", "raise", None])
        assert all(r.info["env_failure"] and r.done and not r.won for r in results[:3])
        assert "RuntimeError: env bug" in results[2].info["error"]
        assert results[3] is None
        assert pool.num_restarts == 2  # crash + garbage; an exception does not kill the worker
        lost = pool.step([None, None, None, "go"])[3]
        assert lost.info["env_failure"]  # slot 3's game died with worker 0
        assert pool.step(["go"] * 4) == [None] * 4  # all done
        pool.reset(_tasks(4), [5] * 4)
        assert [r.observation for r in pool.step(["go"] * 4)] == [
            f"task{i} 1 go" for i in range(4)]


def test_reset_failures_retry_once_then_report(scripted):
    with EnvPool(scripted, num_workers=1, step_timeout_s=1.0) as pool:
        resets = pool.reset([Task("a", "ok", "s"), Task("b", "hang-on-reset", "s")], [3, 3])
        assert not resets[0].info.get("env_failure") and resets[1].info["env_failure"]
        assert pool.num_restarts == 2  # the hang, then the retry's hang
        with pytest.raises(EnvError, match="slot 1: game file not found: missing"):
            pool.reset(_tasks(1) + _tasks(1, "missing"), [3, 3])
        results = pool.reset(_tasks(2), [3, 3])
        assert pool.step(["go", None])[0].observation == "task0 1 go"
        assert results[1].observation == "T:start task1 pid"


def test_in_process_mode_and_bad_calls(scripted):
    with EnvPool(scripted, num_workers=0) as pool:
        pool.reset(_tasks(2), [2, 2])
        results = pool.step(["raise", "go"])
        assert results[0].info["env_failure"] and results[1].observation == "task1 1 go"
        assert pool.step([None, "go"])[1].done  # budget 2
        with pytest.raises(EnvError, match="3 actions for 2 slots"):
            pool.step(["a", "b", "c"])
        with pytest.raises(EnvError, match="slot 0: game file not found"):
            pool.reset(_tasks(1, "missing"), [2])
    with pytest.raises(EnvError, match="Unknown environment family"):
        EnvPool(EnvSpec("nope"), 1)
