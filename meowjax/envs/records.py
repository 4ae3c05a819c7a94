"""The environment records: :class:`Family` (one environment family) and :class:`EnvSpec` (what
to build), with the names of a family's task sets.

A leaf module (it imports only ``envs.base``): the family definitions (``envs.families``), the
game-set code that builds specs (``envs.textworld_games``) and the registry that looks families
up (``envs.registry``) all take the records from here, so none of them imports another to get
them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from meowjax.envs.base import EnvError, Task

TASK_SETS = ("train", "sft", "eval", "eval_hard")
# Sets a family may add (missing ones are empty): "eval_transfer", held-out tasks of a difficulty
# no training phase sees; "curve", a fixed held-out subset played during RL (learning curve).
OPTIONAL_TASK_SETS = ("eval_transfer", "curve")


def common_env_kwargs(env: Any, admissible: bool) -> dict[str, Any]:
    """The options every TextEnv of the TextWorld kind takes, from the config's ``env`` section."""
    return dict(reward_mode=env.reward_mode, invalid_action_penalty=env.invalid_action_penalty,
                admissible=admissible)


def _no_task_sets(name: str, c: Any) -> dict[str, list[Task]]:
    raise EnvError(f"Environment family {name!r} has no task sets; register it with "
                   "Family(..., task_sets=fn) where fn(config) returns "
                   f"{{{', '.join(repr(k) for k in TASK_SETS)}: [Task, ...]}}.")


def _plain_difficulty_name(name: str, c: Any, hard: bool) -> str:
    return f"{name} hard" if hard else name


def _plain_rl_pool(name: str, c: Any) -> str:
    return f"{c.games.num_train} {name} training tasks"


@dataclasses.dataclass(frozen=True)
class Family:
    """One environment family.

    name: the ``env.family`` of configs, e.g. "textworld".
    env: the env class as "module:ClassName" (or the class itself), built as Class(**kwargs).
    env_kwargs: (config.env, admissible) -> the class's constructor options.
    task_sets: config -> {"train", "sft", "eval", "eval_hard": [Task, ...]} (disjoint splits;
      "eval" of the training difficulty, "eval_hard" of the harder one), optionally with
      "eval_transfer" and "curve" (``OPTIONAL_TASK_SETS``).
    difficulty_name: (config, hard) -> the name of the training (or harder) difficulty in reports;
      ``hard="transfer"`` names the difficulty of "eval_transfer" where the family has one
      (default: the family name, "<name> hard").
    rl_pool: config -> the RL task pool in words, for reports (default: "N <name> training
      tasks").
    system_prompt: the agent's chat instruction; None = the default one.
    augment: (expert trajectories, their tasks, copies, numpy rng) -> extra trajectories; None =
      no augmentation.
    harder_rl_pool: whether task_sets mixes ``games.num_train_hard`` harder tasks into "train".
    renamer: (tasks) -> ((task, numpy rng) -> task whose episodes show fresh entity names drawn
      from those tasks' names); None = the family cannot rename (``rollout.rename_prob`` > 0 is
      refused).
    named_sets: (config, name, num_games, data_root) -> the tasks of the game set that
      ``"<family>:<name>"`` names (evaluation's ``--split``; ``num_games`` None: the family's
      own count; ``data_root``: a folder of released games, where the family reads one); a bad
      name raises ValueError naming the form. None = the family has no named sets.
    experts: the demonstration sources ``games.expert`` may name (the first is the default;
      "planner": the walkthrough each game records).
    """

    name: str
    env: Any
    env_kwargs: Callable[[Any, bool], dict[str, Any]] = common_env_kwargs
    task_sets: Callable[[Any], dict[str, list[Task]]] | None = None
    difficulty_name: Callable[[Any, bool], str] | None = None
    rl_pool: Callable[[Any], str] | None = None
    system_prompt: str | None = None
    augment: Callable[..., list[dict[str, Any]]] | None = None
    harder_rl_pool: bool = False
    renamer: Callable[[list[Task]], Callable[[Task, Any], Task]] | None = None
    named_sets: Callable[[Any, str, int | None, str], list[Task]] | None = None
    experts: tuple[str, ...] = ("planner",)

    def __post_init__(self):
        if not isinstance(self.env, str):  # a class: stored by import path (picklable, lazy)
            object.__setattr__(self, "env", f"{self.env.__module__}:{self.env.__qualname__}")
        if ":" not in self.env:
            raise EnvError(f"Family {self.name!r}: env={self.env!r} is not 'module:ClassName'.")
        defaults = dict(task_sets=_no_task_sets, difficulty_name=_plain_difficulty_name,
                        rl_pool=_plain_rl_pool)
        for field, default in defaults.items():
            if getattr(self, field) is None:
                object.__setattr__(self, field, functools.partial(default, self.name))


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What to build: a family name, its constructor keyword arguments (all picklable) and,
    optionally, the reward wrapper around it (a key of ``REWARD_WRAPPERS``)."""

    family: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    wrapper: str | None = None
