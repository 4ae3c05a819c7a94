"""Environment families by name: one :class:`Family` record each, envs built from picklable specs.

A family owns everything family-specific a trainer needs: its env class (imported lazily, so
using TextWorld never imports the ALFWorld or code-repair machinery), the env's constructor
options, its task sets per split, the names of its difficulties, its system prompt and its
expert-data augmentation. The built-in families (textworld, alfworld, swe) are registered from
``meowjax.envs.families`` the first time a family is looked up; more are added at runtime::

    register_family(Family("corridor", env="my_pkg.corridor:CorridorEnv",
                           task_sets=corridor_task_sets))

Reward wrappers (``REWARD_WRAPPERS``, e.g. ``reward_mode="process"``) wrap any family:
``reward_spec(spec, mode)`` marks the spec, ``make_env`` builds the wrapper around the family.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable

from meowjax.envs.base import EnvError, Task, TextEnv

TASK_SETS = ("train", "sft", "eval", "eval_hard")
# Sets a family may add (missing ones are empty): "eval_transfer", held-out tasks of a difficulty
# no training phase sees; "curve", a fixed held-out subset played during RL (learning curve).
OPTIONAL_TASK_SETS = ("eval_transfer", "curve")

# reward mode -> "module:ClassName" of a wrapper built as Class(inner_family=..., **spec.kwargs).
REWARD_WRAPPERS: dict[str, str] = {
    "process": "meowjax.envs.process_reward:ProcessRewardEnv",
}


class UnknownFamilyError(EnvError, ValueError):
    """An ``env.family`` nobody registered; the message names the known ones and the fix."""


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


_FAMILIES: dict[str, Family] = {}
_BUILTINS_LOADED = False


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        from meowjax.envs import families
        for family in families.BUILTIN:
            _FAMILIES.setdefault(family.name, family)


def register_family(family: Family, *, replace: bool = False) -> Family:
    """Adds ``family`` to this process's registry (pool workers rebuild it from its env path).

    Raises:
      EnvError: if a family of that name is registered already and ``replace`` is False.
    """
    _load_builtins()
    if family.name in _FAMILIES and not replace:
        raise EnvError(f"Environment family {family.name!r} is registered already "
                       f"(env {_FAMILIES[family.name].env}); pick another name or pass "
                       "replace=True.")
    _FAMILIES[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Removes a runtime-registered family (tests); a no-op for unknown names."""
    _FAMILIES.pop(name, None)


def family_names() -> list[str]:
    _load_builtins()
    return sorted(_FAMILIES)


def get_family(name: str) -> Family:
    """The family record; an unknown name names the known ones and the fix."""
    _load_builtins()
    if name not in _FAMILIES:
        raise UnknownFamilyError(
            f"Unknown environment family {name!r}; known families: {family_names()}. Fix the "
            "config's env.family, or register the family first (meowjax.envs.registry."
            "register_family(Family(name, env='module:Class', task_sets=...))).")
    return _FAMILIES[name]


def adopt_family(name: str, env: str) -> None:
    """Makes ``name`` build ``env`` in this process, as the parent process registered it (pool
    workers: only the env class is needed there). Keeps a record that already agrees."""
    _load_builtins()
    if name not in _FAMILIES or _FAMILIES[name].env != env:
        _FAMILIES[name] = Family(name, env)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What to build: a family name, its constructor keyword arguments (all picklable) and,
    optionally, the reward wrapper around it (a key of ``REWARD_WRAPPERS``)."""

    family: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    wrapper: str | None = None


def reward_spec(spec: EnvSpec, reward_mode: str) -> EnvSpec:
    """``spec`` wrapped in the reward wrapper of ``reward_mode`` if it has one, else unchanged."""
    if reward_mode not in REWARD_WRAPPERS or spec.wrapper == reward_mode:
        return spec
    return dataclasses.replace(spec, wrapper=reward_mode)


def _load_class(target: str):
    module_name, class_name = target.split(":")
    obj = importlib.import_module(module_name)
    for part in class_name.split("."):
        obj = getattr(obj, part)
    return obj


def make_env(spec: EnvSpec) -> TextEnv:
    """Builds one environment (inside its reward wrapper, if the spec names one)."""
    family = get_family(spec.family)
    try:
        if spec.wrapper is not None:
            if spec.wrapper not in REWARD_WRAPPERS:
                raise EnvError(f"Unknown reward wrapper {spec.wrapper!r}; known: "
                               f"{sorted(REWARD_WRAPPERS)}.")
            return _load_class(REWARD_WRAPPERS[spec.wrapper])(inner_family=family.name,
                                                               **spec.kwargs)
        return _load_class(family.env)(**spec.kwargs)
    except TypeError as e:
        raise EnvError(f"Bad options for environment family {spec.family!r}: {e}") from e
