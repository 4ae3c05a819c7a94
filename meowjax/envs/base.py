"""The one interface every text environment implements (host-side Python, no JAX).

An episode:  env.reset(task, max_turns) -> ResetResult, then env.step(action) -> StepResult
until ``done``. Invalid or empty actions are ordinary feedback (an observation, maybe a penalty),
never exceptions. Errors are raised only for broken *inputs* (a missing or corrupt game file),
as :class:`EnvError` naming the file and the fix.

Reward modes (each environment documents its exact numbers):
  sparse: reward 1.0 on the turn the game is won, 0.0 on every other turn.
  dense:  the score gained on that turn (difference of the game's cumulative score).
  Either may add ``invalid_action_penalty`` (<= 0) on turns whose action the game rejected.

``info`` keys shared by all environments (StepResult.info):
  score (float, cumulative game score), turn (int, 1-based index of the step just taken),
  invalid (bool, action not understood / had no effect), truncated (bool, the turn budget ended
  the episode), env_failure (bool, the worker crashed / hung; set by EnvPool), admissible
  (list[str] | None, only when the env was asked for admissible commands).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable


class EnvError(RuntimeError):
    """Broken environment input (missing/corrupt game file, bad task spec). Message names the fix."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One playable task: a game file plus where it came from.

    task_id: unique and stable, e.g. "textworld/w2-o3-q4/train/30001".
    path: the game file (TextWorld .z8/.ulx with its .json, ALFWorld game.tw-pddl, SWE task dir).
    family: "textworld" | "alfworld" | "swe".
    split: "train" | "sft" | "valid" | "test" | ...
    meta: free-form facts (difficulty name, seed, optimal length, task type, ...).
    """

    task_id: str
    path: str
    family: str
    split: str = "train"
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ResetResult:
    observation: str
    objective: str
    max_score: float
    walkthrough: list[str] | None = None
    admissible: list[str] | None = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StepResult:
    observation: str
    reward: float
    done: bool
    won: bool
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@runtime_checkable
class TextEnv(Protocol):
    """A single text environment. Instances are reusable across episodes (reset again)."""

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        """Starts an episode of ``task`` capped at ``max_turns`` agent turns."""

    def step(self, action: str) -> StepResult:
        """Applies one agent action. After ``max_turns`` steps: done, not won, info['truncated']."""

    def close(self) -> None:
        """Releases the game process / files."""
