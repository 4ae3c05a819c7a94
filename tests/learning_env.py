"""A two-turn environment a from-scratch model learns in about a minute (the learning tests).

The goal names the object to take ("Take the coin."); a closed chest holds it and three others.
Turn 1 must open the chest ("open chest"; "kick chest" does nothing), turn 2 must take the named
object ("take coin"; with admissible commands there is one "take" per object in the chest, and
"close chest"); taking another object fails the episode, and so does anything else at its turn
budget of 2. Sparse reward: 1 on the winning turn. With admissible commands a uniform policy
wins 1/2 * 1/5 = 0.1 of the time.

The demonstration split ("sft") has goals of the same form that name a random object unrelated
to the one the walkthrough takes (any "take" wins there), and the same observations as the named
games. Its walkthroughs teach the free-text command format (open, then "take <a name>") and give
the game-text tokenizer every name as one token, but not which object a named goal asks for:
they take each other name twice as often as a target (``DEMO_TAKES``), so a policy cloned from
them writes "take coin" in about one sampled episode of 13 and greedily takes another name. RL
must teach a free-text policy to write "take coin", token by token. (With demonstration goals of
another form, "Take anything from the chest.", a named goal was out of distribution at turn 1:
for some seeds the cloned policy wrote "take <name>" before opening the chest, and RL never
saw a win.)

TARGETS holds the names a goal can ask for. With one, the test is whether RL finds and
reinforces an exact multi-turn command; with several, the policy must also read the goal
(copy its name), which the tiny model of the tests needs well over a hundred clean supervised
updates to learn (more than a one-minute test affords).
"""
from __future__ import annotations

import numpy as np

from meowjax.envs.base import EnvError, ResetResult, StepResult, Task
from meowjax.envs.registry import Family

# A named goal asks for one of TARGETS; its chest holds all of them and OTHERS up to 4 objects
# (6 if hard). A demonstration's chest holds 4 of either.
TARGETS = ("coin",)
OTHERS = ("lamp", "apple", "book", "cup", "pen", "rock")
# Demonstration i takes DEMO_TAKES[i % 13]: a target half as often as each other name.
DEMO_TAKES = (*OTHERS, *TARGETS, *OTHERS)
SPLIT_SEEDS = {"train": 10_000, "sft": 20_000, "valid": 30_000, "test": 40_000}
INSTRUCTION = "Open the chest, then take the object your task names. Reply with one command."


def chest_task(split: str, index: int, hard: bool = False) -> Task:
    """A seeded chest: 4 objects (6 when hard); for "sft" a goal naming a random object and a
    walkthrough that takes DEMO_TAKES's name for this index."""
    seed = SPLIT_SEEDS[split] + index + (5_000 if hard else 0)
    rng = np.random.default_rng(seed)
    named = split != "sft"
    if named:   # the chest holds every target, the goal names one
        others = rng.choice(OTHERS, size=(6 if hard else 4) - len(TARGETS), replace=False)
        contents = sorted([*TARGETS, *map(str, others)])
        target = TARGETS[int(rng.integers(len(TARGETS)))]
    else:       # demonstrations: DEMO_TAKES's name and 3 others
        target = DEMO_TAKES[index % len(DEMO_TAKES)]
        rest = [o for o in (*TARGETS, *OTHERS) if o != target]
        contents = sorted([target, *map(str, rng.choice(rest, size=3, replace=False))])
    # A demonstration's goal names a random object, unrelated to the one its walkthrough takes.
    goal_name = target if named else str(rng.choice([*TARGETS, *OTHERS]))
    meta = dict(target=target, contents=contents, named=named, goal_name=goal_name)
    return Task(f"chest/{split}/{seed}", "", "chest", split, meta)


class ChestEnv:
    """See the module docstring. ``info`` keys follow ``meowjax.envs.base``."""

    def __init__(self, reward_mode: str = "sparse", invalid_action_penalty: float = 0.0,
                 admissible: bool = False):
        if reward_mode != "sparse":
            raise EnvError(f"ChestEnv has only sparse rewards; reward_mode={reward_mode!r}.")
        self.penalty, self.admissible = float(invalid_action_penalty), admissible

    def _commands(self) -> list[str]:
        if not self.opened:
            return ["kick chest", "open chest"]
        return ["close chest"] + [f"take {o}" for o in self.m["contents"]]

    def _observation(self, feedback: str) -> str:
        if not self.opened:
            return f"{feedback} A closed chest is here."
        # The names are never listed: only the goal (and the admissible commands) name one, so
        # the demonstrations' turn-2 observation is the named games' one.
        return f"{feedback} The chest is open."

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        self.m, self.opened, self.turn, self.done = dict(task.meta), False, 0, False
        self.max_turns = int(max_turns)
        goal = f"Take the {self.m['goal_name']}."
        return ResetResult(self._observation("You are in a small room."), goal, 1.0,
                           ["open chest", f"take {self.m['target']}"],
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
            feedback = "Nothing happens."
        elif command == "open chest":
            self.opened, feedback = True, "You open the chest."
        elif command == "close chest":
            self.opened, feedback = False, "You close the chest."
        elif command == "kick chest":
            feedback = "The chest does not move."
        else:
            won = command == f"take {self.m['target']}" or not self.m["named"]
            feedback = "You take it." if won else "That is not what you came for."
        lost = command.startswith("take ") and not won and not invalid
        truncated = self.turn >= self.max_turns and not (won or lost)
        self.done = won or lost or truncated
        reward = (1.0 if won else 0.0) + (self.penalty if invalid else 0.0)
        info = {"score": float(won), "turn": self.turn, "invalid": invalid,
                "truncated": truncated, "command": command,
                "admissible": self._commands() if self.admissible else None}
        return StepResult(self._observation(feedback), reward, self.done, won, info)

    def close(self) -> None:
        pass


def chest_task_sets(c) -> dict[str, list[Task]]:
    g = c.games
    return {"train": [chest_task("train", i) for i in range(g.num_train)],
            "sft": [chest_task("sft", i) for i in range(g.num_sft)],
            "eval": [chest_task(g.eval_split, i) for i in range(g.num_eval)],
            "eval_hard": [chest_task(g.eval_split, i, hard=True) for i in range(g.num_eval_hard)]}


CHEST = Family(name="chest", env=ChestEnv, task_sets=chest_task_sets, system_prompt=INSTRUCTION,
               difficulty_name=lambda c, hard: "chest of 6" if hard else "chest of 4")
