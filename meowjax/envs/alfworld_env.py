"""ALFWorld text games (real ``json_2.1.1`` data or our generated games) behind ``TextEnv``.

Games are played exactly as ALFWorld plays them: textworld's ``PddlEnv`` (fast-downward state,
``alfred.twl2`` text) wrapped in ALFWorld's ``AlfredDemangler`` (names like "cabinet 3"), so
observations and admissible commands are the same strings ALFWorld agents see.

Observations: the first one is ALFWorld's intro without the "-= Welcome to TextWorld, ALFRED! =-"
banner, i.e. the room description followed by "Your task is to: ..."; later ones are the game's
feedback for the action ("You arrive at desk 1. On the desk 1, you see ...", "Nothing happens.").
Actions are lower-cased and whitespace-collapsed before matching (ALFWorld commands are lower-case).
The admissible commands (``admissible=True``) are ALFWorld's without "help": it changes nothing,
and its reply (the whole command reference, 865 characters) fills a scoring agent's context and
overflows its length buckets; typed as free text it still answers.

Rewards (ALFWorld games have no intermediate score; max_score is 1):
  sparse: 1.0 on the turn the goal becomes true, else 0.0.
  dense:  the increase of a progress fraction p in [0, 1] over the task's milestones, each counted
          the first time it is reached; winning sets p = 1, so a won episode's dense rewards sum to
          exactly 1.0 like the sparse ones. Milestones (object = an object of the target class):
            pick_and_place_simple, look_at_obj_in_light: hold the object, win          (1/2 each)
            pick_{clean,heat,cool}_then_place_in_recep:  hold it, it is clean/hot/cool, win (1/3)
            pick_two_obj_and_place: hold it, one object in a parent-class receptacle, win  (1/3)
          Without traj_data.json beside the game (no task type) dense equals sparse.
  Both add ``invalid_action_penalty`` (<= 0) on turns whose feedback is "Nothing happens.".
  ``info["score"]`` is the sum of the non-penalty rewards so far.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from meowjax.envs import alfworld_pddl
from meowjax.envs.base import EnvError, ResetResult, StepResult, Task

INVALID_FEEDBACK = "Nothing happens."
_BANNER = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*")
_STATE_PREDICATE = {
    "pick_clean_then_place_in_recep": "isclean",
    "pick_heat_then_place_in_recep": "ishot",
    "pick_cool_then_place_in_recep": "iscool",
}
REQUIRED_KEYS = ("pddl_domain", "grammar", "pddl_problem")


def _read_json(path: str, what: str) -> dict:
    if not os.path.isfile(path):
        raise EnvError(f"ALFWorld {what} not found: {path}. Generate games with "
                       "meowjax.envs.alfworld_gen.generate_alfworld_games or point to ALFWorld's "
                       "json_2.1.1 data.")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise EnvError(f"Corrupt ALFWorld {what} {path}: {e}. Regenerate it "
                       "(alfworld-generate or generate_alfworld_games).") from e
    if not isinstance(data, dict):
        raise EnvError(f"Corrupt ALFWorld {what} {path}: expected a JSON object.")
    return data


def _cls(name: str) -> str:
    """Demangled entity name -> class: "sinkbasin 1" -> "sinkbasin"."""
    return name.split()[0] if name else ""


def milestones(task_type: str) -> tuple[str, ...]:
    """Dense-reward milestones of a task type (see module docstring)."""
    if task_type in _STATE_PREDICATE:
        return ("hold", "state", "won")
    if task_type == "pick_two_obj_and_place":
        return ("hold", "one_in_parent", "won")
    return ("hold", "won")


def reached_milestones(facts: list[tuple[str, ...]], task_type: str, params: dict) -> set[str]:
    """Milestones true in a state given as (predicate, arg names...) tuples."""
    target = params.get("object_target", "").lower()
    parent = params.get("parent_target", "").lower()
    state_pred = _STATE_PREDICATE.get(task_type)
    reached = set()
    for fact in facts:
        pred, args = fact[0], fact[1:]
        if pred == "holds" and len(args) == 2 and _cls(args[1]) == target:
            reached.add("hold")
        elif state_pred and pred == state_pred and _cls(args[0]) == target:
            reached.add("state")
        elif (pred == "inreceptacle" and len(args) == 2 and _cls(args[0]) == target
              and _cls(args[1]) == parent):
            reached.add("one_in_parent")
    return reached


def _admissible(state) -> list[str]:
    """The game's admissible commands, less the meta-command "help" (see the module doc)."""
    return [cmd for cmd in state["admissible_commands"] if cmd != "help"]


class AlfWorldEnv:
    """One ALFWorld game at a time (TextEnv). ``Task.path`` is a ``game.tw-pddl`` file."""

    def __init__(self, reward_mode: str = "sparse", invalid_action_penalty: float = 0.0,
                 admissible: bool = False):
        if reward_mode not in ("sparse", "dense"):
            raise EnvError(f"reward_mode must be 'sparse' or 'dense', got {reward_mode!r}.")
        if invalid_action_penalty > 0:
            raise EnvError(f"invalid_action_penalty must be <= 0 (a penalty), got "
                           f"{invalid_action_penalty}.")
        self.reward_mode = reward_mode
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.admissible = admissible
        self._env = None
        self._loaded: tuple[str, float] | None = None  # (path, mtime) of the loaded game
        self._state = None
        self._done = True

    def _textworld_env(self):
        if self._env is None:
            self._env = alfworld_pddl.demangled_pddl_env(
                extras=("walkthrough",), facts=self.reward_mode == "dense")
        return self._env

    def _load(self, path: str) -> None:
        data = _read_json(path, "game file")
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise EnvError(f"Corrupt ALFWorld game file {path}: missing keys {missing}; a "
                           f"game.tw-pddl needs {list(REQUIRED_KEYS)}.")
        key = (path, os.path.getmtime(path))
        if self._loaded == key:
            return
        env = self._textworld_env()
        try:
            env.load(path)
        except (Exception, SystemExit) as e:  # fast-downward's translator exits on bad PDDL
            self._loaded = None
            raise EnvError(f"Cannot load ALFWorld game file {path}: {type(e).__name__}: {e}. "
                           "Its PDDL problem or grammar is broken; regenerate it.") from e
        self._loaded = key

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        if max_turns < 1:
            raise EnvError(f"max_turns must be >= 1, got {max_turns}.")
        path = task.path
        self._load(path)
        traj_path = os.path.join(os.path.dirname(path), "traj_data.json")
        traj = _read_json(traj_path, "traj_data.json") if os.path.exists(traj_path) else {}
        self._task_type = traj.get("task_type") or task.meta.get("task_type", "")
        self._params = dict(traj.get("pddl_params") or task.meta.get("pddl_params") or {})
        try:
            state = self._textworld_env().reset()
        except (Exception, SystemExit) as e:
            self._loaded = None
            raise EnvError(f"Cannot reset ALFWorld game file {path}: {type(e).__name__}: {e}.") from e
        self._state = state
        self._max_turns = int(max_turns)
        self._turn = 0
        self._score = 0.0
        self._done = False
        self._reached: set[str] = set()
        self._milestones = milestones(self._task_type) if self._task_type else ("won",)

        intro = _BANNER.sub("", state.feedback).strip()
        match = re.search(r"Your task is to: .*", intro)
        objective = match.group(0).strip() if match else ""
        # A demonstration source's own actions (``alfworld_expert``: the hand-coded expert's
        # search) replace the planner's walkthrough where the task carries them.
        walkthrough = task.meta.get("walkthrough") or state.get("extra.walkthrough") or None
        admissible = _admissible(state) if self.admissible else None
        info: dict[str, Any] = {"score": 0.0, "turn": 0, "task_type": self._task_type,
                                "admissible": admissible}
        return ResetResult(observation=intro, objective=objective, max_score=1.0,
                           walkthrough=list(walkthrough) if walkthrough else None,
                           admissible=admissible, info=info)

    def _progress(self, state) -> float:
        if state["won"]:
            return 1.0
        if self.reward_mode != "dense" or self._milestones == ("won",):
            return 0.0
        facts = [(f.name, *(a.name for a in f.arguments)) for f in state["facts"]]
        self._reached |= reached_milestones(facts, self._task_type, self._params)
        hits = sum(m in self._reached for m in self._milestones if m != "won")
        return hits / len(self._milestones)

    def step(self, action: str) -> StepResult:
        if self._state is None:
            raise EnvError("AlfWorldEnv.step() called before reset(); call reset(task, max_turns).")
        if self._done:
            raise EnvError("AlfWorldEnv.step() called after the episode ended; call reset().")
        command = " ".join(str(action).lower().split())
        state, _, _ = self._textworld_env().step(command)
        self._state = state
        self._turn += 1
        feedback = state.feedback.strip()
        invalid = feedback == INVALID_FEEDBACK
        won = bool(state["won"])
        progress = self._progress(state)
        gain = (1.0 if won else 0.0) if self.reward_mode == "sparse" else progress - self._score
        self._score += gain
        reward = gain + (self.invalid_action_penalty if invalid else 0.0)
        truncated = not won and self._turn >= self._max_turns
        self._done = won or truncated
        admissible = _admissible(state) if self.admissible else None
        info = {"score": self._score, "turn": self._turn, "invalid": invalid,
                "truncated": truncated, "env_failure": False, "admissible": admissible}
        return StepResult(observation=feedback, reward=reward, done=self._done, won=won, info=info)

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            finally:
                self._env = None
                self._loaded = None
                self._state = None


def _data_dir(data_root: str, split: str) -> str:
    root = os.path.expanduser(os.path.expandvars(data_root))
    candidates = [os.path.join(root, "json_2.1.1", split), os.path.join(root, split)]
    for c in candidates:
        if os.path.isdir(c):
            return c
    raise EnvError(
        f"No ALFWorld split folder for split {split!r} under {root}: looked for "
        f"{candidates[0]} (or {candidates[1]}). Expected layout: "
        "<data_root>/json_2.1.1/<split>/<task>/<trial>/{game.tw-pddl, traj_data.json}, e.g. "
        "split 'train', 'valid_seen' or 'valid_unseen' from alfworld-download, or games written "
        "by meowjax.envs.alfworld_gen.generate_alfworld_games.")


def load_alfworld_tasks(data_root: str, split: str, task_types: list[str] | None = None,
                        check_solvable: bool = True) -> list[Task]:
    """Tasks for every ``<task>/<trial>`` folder of ``data_root/json_2.1.1/<split>``.

    Like ALFWorld's ``AlfredTWEnv.collect_game_files``: skips "movable"/"Sliced" folders, task
    types not in ``task_types``, folders without game.tw-pddl, and (``check_solvable``) games whose
    file does not say ``"solvable": true``. Sorted by path. task_id = "alfworld/<split>/<task>/<trial>".
    """
    split_dir = _data_dir(data_root, split)
    tasks = []
    for root, _dirs, files in sorted(os.walk(split_dir)):
        if "traj_data.json" not in files or "movable" in root or "Sliced" in root:
            continue
        game_path = os.path.join(root, "game.tw-pddl")
        if not os.path.exists(game_path):
            continue
        traj = _read_json(os.path.join(root, "traj_data.json"), "traj_data.json")
        task_type = traj.get("task_type", "")
        if task_types is not None and task_type not in task_types:
            continue
        if check_solvable and not _read_json(game_path, "game file").get("solvable"):
            continue
        rel = os.path.relpath(root, split_dir).replace(os.sep, "/")
        meta = {"task_type": task_type, "pddl_params": traj.get("pddl_params", {}),
                "scene": traj.get("scene", {}).get("floor_plan", "")}
        tasks.append(Task(task_id=f"alfworld/{split}/{rel}", path=game_path, family="alfworld",
                          split=split, meta=meta))
    if not tasks:
        raise EnvError(f"No playable ALFWorld games under {split_dir}. Expected "
                       "<task>/<trial>/{game.tw-pddl, traj_data.json} folders with solvable games "
                       "(run alfworld-generate on the data, or generate_alfworld_games).")
    return tasks
