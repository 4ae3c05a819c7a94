"""The family registry: errors, and the README's "add an environment" recipe end to end.

``CorridorEnv`` below is a whole environment family defined in this file: a corridor of rooms,
an object to take somewhere along it. It is registered with ``register_family`` and trained
through the smoke schedule of ``configs/default.py``; the pool's spawned workers import it from
this module.
"""
import json
import os

import numpy as np
import pytest

from meowjax.envs import registry
from meowjax.envs.base import EnvError, ResetResult, StepResult, Task
from meowjax.envs.pool import EnvPool
from meowjax.envs.registry import EnvSpec, Family

OBJECTS = ("lamp", "key", "coin", "apple", "book", "rock", "cup", "pen")
SPLIT_SEEDS = {"train": 1000, "sft": 2000, "valid": 3000, "test": 4000}
INVALID_FEEDBACK = "You can't do that here."


def corridor_task(split: str, index: int, hard: bool) -> Task:
    """Seeded layout: 2-3 rooms (4-5 when hard), the target object and a distractor."""
    seed = SPLIT_SEEDS[split] + index + (500 if hard else 0)
    rng = np.random.default_rng(seed)
    rooms = int(rng.integers(4, 6) if hard else rng.integers(2, 4))
    target, distractor = (str(o) for o in rng.choice(OBJECTS, size=2, replace=False))
    meta = dict(rooms=rooms, target=target, where=int(rng.integers(1, rooms)),
                distractor=distractor, distractor_where=int(rng.integers(0, rooms)))
    return Task(f"corridor/{split}/{seed}", "", "corridor", split, meta)


class CorridorEnv:
    """Rooms 0..n-1 in a row; "take <target>" in its room wins (sparse reward 1)."""

    def __init__(self, reward_mode: str = "sparse", invalid_action_penalty: float = 0.0,
                 admissible: bool = False):
        if reward_mode not in ("sparse", "dense"):
            raise EnvError(f"reward_mode={reward_mode!r}; use 'sparse' or 'dense'.")
        self.penalty, self.admissible = float(invalid_action_penalty), admissible
        self.m: dict = {}

    def _things(self) -> list[str]:
        m = self.m
        return [name for name, where in ((m["target"], m["where"]),
                                         (m["distractor"], m["distractor_where"]))
                if where == self.room and name not in self.inventory]

    def _commands(self) -> list[str]:
        cmds = [f"take {t}" for t in self._things()]
        cmds += ["go east"] if self.room < self.m["rooms"] - 1 else []
        cmds += ["go west"] if self.room > 0 else []
        return sorted(cmds)

    def _observation(self, feedback: str) -> str:
        things = ", ".join(self._things()) or "nothing"
        carried = ", ".join(self.inventory) or "nothing"
        return f"{feedback}\nRoom {self.room + 1} of {self.m['rooms']}. You see: {things}. " \
               f"Inventory: {carried}"

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        self.m, self.room, self.inventory = dict(task.meta), 0, []
        self.turn, self.max_turns, self.done = 0, int(max_turns), False
        walkthrough = ["go east"] * self.m["where"] + [f"take {self.m['target']}"]
        return ResetResult(self._observation("You are in a corridor."),
                           f"Find the {self.m['target']} and take it.", 1.0, walkthrough,
                           self._commands() if self.admissible else None,
                           {"score": 0.0, "turn": 0})

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult("The episode has ended.", 0.0, True, False,
                              {"score": 0.0, "turn": self.turn, "invalid": True,
                               "truncated": False, "after_end": True})
        self.turn += 1
        command = " ".join(str(action).lower().split())
        invalid = command not in self._commands()
        won = False
        if invalid:
            feedback = INVALID_FEEDBACK
        elif command.startswith("go "):
            self.room += 1 if command == "go east" else -1
            feedback = "You walk along the corridor."
        else:
            thing = command.split(" ", 1)[1]
            self.inventory.append(thing)
            won = thing == self.m["target"]
            feedback = f"You take the {thing}."
        truncated = self.turn >= self.max_turns and not won
        self.done = won or truncated
        reward = (1.0 if won else 0.0) + (self.penalty if invalid else 0.0)
        info = {"score": float(won), "turn": self.turn, "invalid": invalid,
                "truncated": truncated, "command": command,
                "admissible": self._commands() if self.admissible else None}
        return StepResult(self._observation(feedback), reward, self.done, won, info)

    def close(self) -> None:
        pass


def corridor_task_sets(c) -> dict[str, list[Task]]:
    g = c.games
    return {"train": [corridor_task("train", i, False) for i in range(g.num_train)],
            "sft": [corridor_task("sft", i, False) for i in range(g.num_sft)],
            "eval": [corridor_task(g.eval_split, i, False) for i in range(g.num_eval)],
            "eval_hard": [corridor_task(g.eval_split, i, True) for i in range(g.num_eval_hard)]}


def corridor_named_sets(c, name: str, num_games, data_root: str = "") -> list[Task]:
    """``"hard:test"`` / ``"easy:valid"``: that many corridors of a split (default 3)."""
    level, _, split = name.partition(":")
    if level not in ("easy", "hard") or split not in SPLIT_SEEDS:
        raise ValueError(f"corridor game set {name!r} is not <easy|hard>:<split>.")
    return [corridor_task(split, i, level == "hard") for i in range(num_games or 3)]


CORRIDOR = Family(
    name="corridor", env=CorridorEnv, task_sets=corridor_task_sets,
    difficulty_name=lambda c, hard: "corridor 4-5 rooms" if hard else "corridor 2-3 rooms",
    named_sets=corridor_named_sets)


@pytest.fixture
def corridor():
    registry.register_family(CORRIDOR)
    yield CORRIDOR
    registry.unregister_family(CORRIDOR.name)


# -- registry errors -----------------------------------------------------------------------------
def test_unknown_family_names_the_known_ones_and_the_fix():
    with pytest.raises(EnvError, match=r"Unknown environment family 'nope'.*'alfworld', "
                                       r"'swe', 'textworld'.*register_family") as e:
        registry.get_family("nope")
    assert isinstance(e.value, ValueError)
    with pytest.raises(EnvError, match="Unknown environment family"):
        registry.make_env(EnvSpec("nope"))


def test_duplicate_registration_fails_unless_replaced(corridor):
    assert registry.get_family("corridor") is corridor
    assert corridor.env == f"{__name__}:CorridorEnv"            # a class is stored by path
    with pytest.raises(EnvError, match="'corridor' is registered already"):
        registry.register_family(Family("corridor", "elsewhere:Env"))
    with pytest.raises(EnvError, match="'textworld' is registered already"):
        registry.register_family(Family("textworld", "elsewhere:Env"))
    registry.register_family(corridor, replace=True)
    with pytest.raises(EnvError, match="not 'module:ClassName'"):
        Family("bad", "no_colon")
    with pytest.raises(EnvError, match="has no task sets"):
        Family("bare", CorridorEnv).task_sets(None)
    with pytest.raises(EnvError, match="Unknown reward wrapper"):
        registry.make_env(EnvSpec("corridor", {}, wrapper="shaped"))


def test_defaults_of_a_minimal_record(corridor):
    from configs import default

    c = default.get_config("smoke=True")
    bare = Family("bare", CorridorEnv)
    assert bare.env_kwargs(c.env, True) == dict(reward_mode=c.env.reward_mode,
                                                invalid_action_penalty=0.0, admissible=True)
    assert (bare.difficulty_name(c, False), bare.difficulty_name(c, True)) == ("bare", "bare hard")
    assert bare.rl_pool(c) == f"{c.games.num_train} bare training tasks"
    assert bare.system_prompt is None and bare.augment is None and not bare.harder_rl_pool


def test_named_game_sets_come_from_the_family_record(corridor):
    """Evaluation's ``<family>:<set>`` names are parsed by the family (``Family.named_sets``):
    a family registered outside meowjax gets its own, with no edit to evaluation."""
    from configs import default
    from meowjax.eval import evaluate
    c = default.get_config("smoke=True")
    tasks = evaluate.named_tasks(c, "corridor:hard:test", num_games=2)
    assert tasks == [corridor_task("test", i, True) for i in range(2)]
    assert len(evaluate.named_tasks(c, "corridor:easy:valid")) == 3
    with pytest.raises(ValueError, match=r"is not <easy\|hard>:<split>"):
        evaluate.named_tasks(c, "corridor:medium:test")
    with pytest.raises(ValueError, match=r"Unknown game set 'swe:tier1'.*\(alfworld, corridor, "
                                         r"textworld\)"):
        evaluate.named_tasks(c, "swe:tier1")   # a family without named sets


# -- a family defined here, through the pool and through training ---------------------------------
@pytest.mark.parametrize("num_workers", [0, 2])
def test_family_defined_in_a_test_runs_in_an_env_pool(corridor, num_workers):
    tasks = [corridor_task("train", i, False) for i in range(3)]
    spec = EnvSpec("corridor", dict(admissible=True, invalid_action_penalty=-0.1))
    with EnvPool(spec, num_workers=num_workers) as pool:
        resets = pool.reset(tasks, [8] * 3)
        assert all(r.admissible and "go east" in r.admissible for r in resets)
        (bad, *_) = pool.step(["dance", None, None])
        assert bad.info["invalid"] and bad.reward == pytest.approx(-0.1)
        assert bad.observation.startswith(INVALID_FEEDBACK)
        plans, last = [r.walkthrough for r in resets], {}
        for t in range(max(map(len, plans))):
            for i, r in enumerate(pool.step([p[t] if t < len(p) else None for p in plans])):
                last[i] = r or last[i]
        assert all(r.done and r.won and r.reward == 1.0 for r in last.values())
    # The process-reward wrapper works around it too (expert-plan progress, prefix matching).
    wrapped = registry.reward_spec(EnvSpec("corridor", dict(reward_mode="process")), "process")
    with EnvPool(wrapped, num_workers=num_workers) as pool:
        (reset,) = pool.reset(tasks[:1], [8])
        rewards = [pool.step([a])[0].reward for a in reset.walkthrough]
        assert rewards == pytest.approx([1 / len(reset.walkthrough)] * len(reset.walkthrough))


@pytest.mark.slow
def test_family_from_a_test_file_trains_through_the_smoke_schedule(corridor, tmp_path):
    from configs import default
    from meowjax.envs import game_sets
    from meowjax.trainers import data, run

    c = default.get_config("smoke=True")
    c.unlock()
    c.env.update(dict(family="corridor", reward_mode="sparse"))
    c.games.update(dict(num_train=4, num_sft=3, num_eval=3, num_eval_hard=2,
                        cache_dir=str(tmp_path / "games")))
    c.lock()
    assert game_sets.difficulty_name(c, True) == "corridor 4-5 rooms"
    assert data.augmented_experts(c, [{}], [], np.random.default_rng(0)) == []
    out = run.run(c, str(tmp_path))
    assert out["rl_iters"] >= 1
    report_md = (tmp_path / "report.md").read_text()
    assert "corridor 2-3 rooms (SFT demonstrations and 4 of 4 RL games)" in report_md
    assert "4 corridor training tasks" in report_md
    with open(os.path.join(tmp_path, "evals.json"), encoding="utf-8") as f:
        evals = json.load(f)
    assert "curve" not in evals   # a family without the optional sets: none evaluated
    for tag in ("start", "final"):
        assert "eval_transfer" not in evals[tag]
        for split, n in (("eval", 3), ("eval_hard", 2)):
            e = evals[tag][split]
            assert e["n"] == n and 0.0 <= e["success"] <= 1.0
            assert 0.0 <= e["ci_low"] <= e["ci_high"] <= 1.0
