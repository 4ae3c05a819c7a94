"""TextWorld games (.z8 + .json from ``tw-make`` / ``textworld_games``) behind :class:`TextEnv`.

Observations
  full (default): reset -> the room description, a blank line, the inventory line. The objective
    is returned separately in ``ResetResult.objective`` (the intro text and the big ASCII
    "TextWorld" banner are not repeated in the observation). step -> the game's feedback for the
    action (its ``>`` prompt / status line and the end-of-game "RESTART, RESTORE ..." question
    removed), then the current room description unless the feedback already is it (after ``look``
    or a move), then the inventory line. Every observation is self-contained.
  compact=True: one short line per fact, for tiny models:
    ``Room: Kitchen`` / the feedback collapsed to one line / ``Inventory: key, glass`` (or
    ``nothing``). Reset gives ``Room: ...`` + the room description line collapsed + inventory.

Rewards (``reward_mode``)
  sparse: 1.0 on the step on which the game is won, else 0.0 (so a won episode sums to 1.0).
  dense:  score_t - score_{t-1}, the points gained that step (TextWorld's score is cumulative),
          so an episode sums to its final score; a walkthrough sums to ``max_score``.
  Both add ``invalid_action_penalty`` (a number <= 0) on steps whose action is invalid.

Invalid actions (``info["invalid"]``): the action did not advance the game's turn counter
(``moves``). Inform 7 advances it only for actions that were understood *and* carried out, so
this covers parser errors ("That's not a verb I recognise.", "I beg your pardon?"), unknown
objects ("You can't see any such thing."), refusals ("You can't go that way.", "That's already
open.") and no-ops ("wait"). Interpreter meta-commands (quit, restart, restore, save, undo,
script, ...) are never sent to the game: they get a fixed feedback line and count as invalid.

Action sanitizing: only the first command is used (text after the first newline, ``.`` or ``;``
is dropped, so one turn is one game action), non-printable / non-ASCII characters become spaces
(a NUL byte hangs the interpreter), whitespace is collapsed, the text is lower-cased and cut to
``MAX_ACTION_CHARS``. An empty result is sent as is: the game answers "I beg your pardon?".

Budget: after ``max_turns`` steps the episode is done, not won, with ``info["truncated"] = True``
(unless that last step won or lost the game). Steps after the end return ``done=True`` with zero
reward and ``info["after_end"] = True``; they are not sent to the game.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any, Callable

import textworld

from meowjax.envs import textworld_augment
from meowjax.envs.base import EnvError, ResetResult, StepResult, Task

MAX_ACTION_CHARS = 190  # jericho truncates (with a warning) at 198 bytes
REWARD_MODES = ("sparse", "dense")
# First words the interpreter treats as out-of-world commands; they could end or rewind the game.
META_COMMANDS = frozenset({
    "quit", "q", "restart", "restore", "save", "undo", "oops", "script", "unscript", "transcript",
    "noscript", "verify", "version", "superbrief", "verbose", "brief", "notify", "pronouns",
})
META_FEEDBACK = "That command is not available in this game."
_BANNER_LINE = re.compile(r"^[\s_|\\$/<>]*$")
_PROMPT_TAIL = re.compile(r"\n>[^\n]*$")
_END_QUESTION = re.compile(r"Would you like to RESTART, RESTORE a saved game, QUIT or UNDO[^\n]*")
_ROOM_HEADER = re.compile(r"^-= (.+?) =-$", re.MULTILINE)


def clean_feedback(text: str | None) -> str:
    """Strips TextWorld's ASCII banner, the ``>`` prompt + status line and the RESTART question."""
    text = (text or "").replace("\r", "")
    lines = text.split("\n")
    # The banner is the leading block of lines made only of ``_ | \\ $ / < >`` and spaces.
    start = 0
    while start < len(lines) and _BANNER_LINE.match(lines[start]):
        start += 1
    text = "\n".join(lines[start:]).rstrip()
    text = _PROMPT_TAIL.sub("", text)
    text = _END_QUESTION.sub("", text)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def sanitize_action(action: Any) -> str:
    """Returns the single game command to send for a free-form agent action (see module doc)."""
    text = "" if action is None else str(action)
    text = re.split(r"[\n\r.;]", text, maxsplit=1)[0]
    text = "".join(c if " " <= c <= "~" else " " for c in text)
    return " ".join(text.split()).lower()[:MAX_ACTION_CHARS].strip()


def room_name(description: str | None) -> str:
    """The room name from a description's ``-= Kitchen =-`` header ("" when there is none)."""
    match = _ROOM_HEADER.search(description or "")
    return match.group(1).strip() if match else ""


def inventory_items(inventory: str | None) -> list[str]:
    """Item names from the inventory text ("You are carrying: an old key and a glass.")."""
    text = _one_line(clean_feedback(inventory))
    if ":" not in text:
        return []
    items = re.split(r",\s*(?:and\s+)?|\s+and\s+", text.split(":", 1)[1].strip().rstrip("."))
    return [item.strip() for item in items if item.strip()]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def check_game_file(path: str) -> None:
    """Raises EnvError unless ``path`` is a loadable TextWorld game (.z8 + .json next to it).

    A corrupt story file makes the interpreter kill the whole process ("Fatal error: Story file
    read error"), so the Z-machine header is checked first: version 1..8, declared length <= file
    size, and the header checksum = sum(bytes[0x40:length]) mod 2**16.
    """
    fix = ("Regenerate the game set (python -m experiments.make_games --out=... with the same "
           "settings; a game set missing files is regenerated) or fix the path in the task list.")
    json_path = os.path.splitext(path)[0] + ".json"
    for p in (path, json_path):
        if not os.path.isfile(p):
            raise EnvError(f"TextWorld game file not found: {p}. {fix}")
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".ulx"):
        ok = data[:4] == b"Glul"
    else:
        version = data[0] if data else 0
        scale = 2 if version <= 3 else (4 if version <= 5 else 8)
        length = int.from_bytes(data[0x1A:0x1C], "big") * scale if len(data) >= 0x40 else 0
        checksum = int.from_bytes(data[0x1C:0x1E], "big") if len(data) >= 0x40 else -1
        ok = (1 <= version <= 8 and 0x40 <= length <= len(data)
              and sum(data[0x40:length]) % 0x10000 == checksum)
    if not ok:
        raise EnvError(f"Corrupt TextWorld story file (bad Z-machine/Glulx header or checksum): "
                       f"{path}. {fix}")
    try:
        with open(json_path) as f:
            meta = json.load(f)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise EnvError(f"Corrupt TextWorld game metadata {json_path}: {e}. {fix}") from e


def _identity(text: str) -> str:
    return text


def names_view(mapping: dict[str, str] | None) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """(show, unshow) for a task's entity renaming (``task.meta["rename"]``, drawn by
    ``textworld_augment.task_renamer``): show maps the game's names to the ones the agent sees,
    unshow maps the agent's command back before the game parses it."""
    if not mapping:
        return _identity, _identity
    inverse = {new.lower(): old for old, new in mapping.items()}
    return textworld_augment.renamer(mapping), textworld_augment.renamer(inverse)


class TextWorldEnv:
    """One TextWorld game at a time; reusable across ``reset`` calls (see module doc)."""

    def __init__(self, reward_mode: str = "sparse", invalid_action_penalty: float = 0.0,
                 admissible: bool = False, compact: bool = False):
        if reward_mode not in REWARD_MODES:
            raise EnvError(f"reward_mode={reward_mode!r}; use one of {REWARD_MODES}.")
        if invalid_action_penalty > 0:
            raise EnvError(f"invalid_action_penalty={invalid_action_penalty} must be <= 0 "
                           "(it is added to the reward of invalid actions).")
        self.reward_mode = reward_mode
        self.invalid_action_penalty = float(invalid_action_penalty)
        self.admissible = admissible
        self.compact = compact
        self._infos = textworld.EnvInfos(
            objective=True, max_score=True, score=True, won=True, lost=True, moves=True,
            inventory=True, description=True, feedback=True, admissible_commands=admissible,
            extras=["walkthrough"])
        self._env = None
        self._path: str | None = None
        self._done = True
        self._turn = 0
        self._max_turns = 0
        self._score = 0.0
        self._moves = 0
        self._description = ""
        self._inventory = ""
        self._last_admissible: list[str] | None = None
        self._show, self._unshow = _identity, _identity

    # -- episode ----------------------------------------------------------------------------
    def reset(self, task: Task, max_turns: int) -> ResetResult:
        if max_turns < 1:
            raise EnvError(f"max_turns={max_turns} must be >= 1.")
        if self._env is None or self._path != task.path:
            self.close()
            check_game_file(task.path)
            try:
                with warnings.catch_warnings():  # jericho: "not fully supported" (TextWorld games
                    warnings.simplefilter("ignore")  # keep their own score/move tracking)
                    self._env = textworld.start(task.path, request_infos=self._infos)
            except (OSError, ValueError, KeyError) as e:
                raise EnvError(f"Cannot load TextWorld game {task.path}: {e}. Regenerate it "
                               "with experiments/make_games.py.") from e
            self._path = task.path
        state = self._env.reset()
        self._show, self._unshow = names_view(task.meta.get("rename"))
        self._done, self._turn, self._max_turns = False, 0, int(max_turns)
        self._score = float(state.get("score") or 0)
        self._moves = int(state.get("moves") or 0)
        self._description = clean_feedback(state.get("description"))
        self._inventory = clean_feedback(state.get("inventory"))
        walkthrough = state.get("extra.walkthrough")
        return ResetResult(
            observation=self._show(self._reset_observation(state)),
            objective=self._show(clean_feedback(state.get("objective"))),
            max_score=float(state.get("max_score") or 0),
            walkthrough=[self._show(a) for a in walkthrough] if walkthrough is not None else None,
            admissible=self._admissible(state),
            info={"score": self._score, "turn": 0, "task_id": task.task_id})

    def step(self, action: str) -> StepResult:
        if self._env is None:
            raise EnvError("TextWorldEnv.step() before reset(); call reset(task, max_turns) first.")
        if self._done:
            return StepResult("The episode has ended.", 0.0, True, False,
                              {"score": self._score, "turn": self._turn, "invalid": True,
                               "truncated": False, "after_end": True,
                               "admissible": [] if self.admissible else None})
        command = self._unshow(sanitize_action(action))
        self._turn += 1
        words = command.split()
        if words and words[0] in META_COMMANDS:
            state, feedback, moved = None, META_FEEDBACK, False
            won = lost = False
            score = self._score
        else:
            state, _, _ = self._env.step(command)
            feedback = clean_feedback(state.get("feedback"))
            moves = int(state.get("moves") or 0)
            moved, self._moves = moves != self._moves, moves
            won, lost = bool(state.get("won")), bool(state.get("lost"))
            score = float(state.get("score") or 0)
            self._description = clean_feedback(state.get("description")) or self._description
            self._inventory = clean_feedback(state.get("inventory")) or self._inventory
        invalid = not moved and not won
        gained, self._score = score - self._score, score
        reward = (1.0 if won else 0.0) if self.reward_mode == "sparse" else gained
        if invalid:
            reward += self.invalid_action_penalty
        truncated = self._turn >= self._max_turns and not (won or lost)
        self._done = won or lost or truncated
        info = {"score": score, "turn": self._turn, "invalid": invalid, "truncated": truncated,
                "lost": lost, "command": self._show(command),
                "admissible": self._admissible(state) if state is not None else
                self._last_admissible}
        return StepResult(self._show(self._step_observation(feedback)), float(reward), self._done,
                          won, info)

    def close(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            finally:
                self._env, self._path, self._done = None, None, True

    # -- text -------------------------------------------------------------------------------
    def _admissible(self, state) -> list[str] | None:
        if not self.admissible:
            return None
        self._last_admissible = sorted({self._show(a)
                                        for a in state.get("admissible_commands") or []})
        return self._last_admissible

    def _reset_observation(self, state) -> str:
        if self.compact:
            return self._compact(_one_line(self._description.split("\n", 1)[-1]))
        return f"{self._description}\n\n{self._inventory}".strip()

    def _step_observation(self, feedback: str) -> str:
        if self.compact:
            return self._compact(_one_line(_ROOM_HEADER.sub("", feedback)))
        parts = [feedback]
        if self._description and self._description not in feedback:
            parts.append(self._description)
        parts.append(self._inventory)
        return "\n\n".join(p for p in parts if p)

    def _compact(self, line: str) -> str:
        items = inventory_items(self._inventory)
        room = room_name(self._description) or "unknown"
        return (f"Room: {room}\n{line}\nInventory: "
                f"{', '.join(items) if items else 'nothing'}")
