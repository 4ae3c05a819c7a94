"""A two-turn code-repair task on the real code-repair env (SweEnv) for the learning tests.

Each task is a one-file repository whose ``combine(a, b)`` returns ``a + b``; its one test
(run by the env's sandboxed grader at ``submit``) wants ``a - b`` (``TARGET``). The problem
statement says so; the episode is the expert's fix as a ``replace`` command, then ``submit``
(turn budget 2). Sparse reward: 1 when the grader's test passes. Anything else fails: a replace
to another operator, a malformed command (an invalid turn, the env's error as feedback), or no
submit within the budget.

The demonstration split ("sft") has tasks of the same form whose test wants another operator
(``DEMO_OPS``: each of ``OTHERS`` twice as often as the target) and whose statement names a
random operator, unrelated to the one its fix writes, so that the cloned policy knows the tool
syntax (a multi-line ``replace`` the env parses, then ``submit``) but not which operator a task
asks for, as ``tests.learning_env``'s chest demonstrations take a name the goal did not ask for.
RL must teach the free-text policy to write the target operator inside a command the env
accepts, with the grader's verdict as its only signal.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np

from meowjax.envs import families
from meowjax.envs.base import ResetResult, Task
from meowjax.envs.records import Family
from meowjax.envs.swe import spec
from meowjax.envs.swe.env import SweEnv
from tests.learning_env import SPLIT_SEEDS

TARGET = "-"
OTHERS = ("*", "//", "%", "**", "&", "|")
# Demonstration i fixes to DEMO_OPS[i % 13]: the target half as often as each other operator.
DEMO_OPS = (*OTHERS, TARGET, *OTHERS)
INSTRUCTION = ("Fix the bug. Reply with one command per turn: first a replace command, then "
               "submit.")
BUGGY = "def combine(a, b):\n    return a + b\n"


def _write_task(folder: pathlib.Path, task_id: str, fix_op: str, stated_op: str, a: int,
                b: int) -> None:
    """A task folder as ``meowjax.envs.swe.spec`` reads it: task.json and the buggy repo/."""
    fixed = f"def combine(a, b):\n    return a {fix_op} b\n"
    (folder / "repo").mkdir(parents=True, exist_ok=True)
    (folder / "repo" / "calc.py").write_text(BUGGY)
    (folder / "repo" / "test_calc.py").write_text(
        f"from calc import combine\n\n\ndef test_combine():\n"
        f"    assert combine({a}, {b}) == {a} {fix_op} {b}\n")
    record = {"instance_id": task_id,
              "problem_statement": f"combine(a, b) must return a {stated_op} b.",
              "FAIL_TO_PASS": ["test_calc.py::test_combine"], "PASS_TO_PASS": [],
              "patch": spec.make_patch({"calc.py": BUGGY}, {"calc.py": fixed})}
    (folder / "task.json").write_text(json.dumps(record))


def repair_task(root: str, split: str, index: int) -> Task:
    """The seeded task ``index`` of ``split``, written under ``root`` if it is not there."""
    seed = SPLIT_SEEDS[split] + index
    rng = np.random.default_rng(seed)
    # Operands where neither the bug's "+" nor any operator of OTHERS gives a - b.
    a, b = int(rng.integers(6, 10)), int(rng.integers(2, 4))
    if split == "sft":
        fix_op, stated_op = DEMO_OPS[index % len(DEMO_OPS)], str(rng.choice([TARGET, *OTHERS]))
    else:
        fix_op = stated_op = TARGET
    task_id = f"repair/{split}/{seed}"
    folder = pathlib.Path(root, split, str(seed))
    if not (folder / "task.json").is_file():
        _write_task(folder, task_id, fix_op, stated_op, a, b)
    return Task(task_id, str(folder), "tiny_repair", split, {"fix_op": fix_op})


class TinyRepairEnv(SweEnv):
    """SweEnv whose walkthrough is the fix and the submit (the planner's also reads the file
    and runs the tests first: four turns)."""

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        out = super().reset(task, max_turns)
        fix = [a for a in out.walkthrough or [] if a.startswith("replace")]
        return dataclasses.replace(out, walkthrough=fix + ["submit"])


def repair_task_sets(c) -> dict[str, list[Task]]:
    g = c.games
    make = lambda split, n: [repair_task(g.cache_dir, split, i) for i in range(n)]
    return {"train": make("train", g.num_train), "sft": make("sft", g.num_sft),
            "eval": make(g.eval_split, g.num_eval), "eval_hard": []}


TINY_REPAIR = Family(name="tiny_repair", env=TinyRepairEnv, env_kwargs=families.swe_env_kwargs,
                     task_sets=repair_task_sets, system_prompt=INSTRUCTION,
                     difficulty_name=lambda c, hard: "combine(a, b) fix")
