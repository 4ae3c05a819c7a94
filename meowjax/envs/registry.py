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
import importlib

from meowjax.envs.base import EnvError, TextEnv
# The records, from their leaf module (and named here, where users have always imported them).
from meowjax.envs.records import (OPTIONAL_TASK_SETS, TASK_SETS, EnvSpec, Family,  # noqa: F401
                                  common_env_kwargs)

# reward mode -> "module:ClassName" of a wrapper built as Class(inner_family=..., **spec.kwargs).
REWARD_WRAPPERS: dict[str, str] = {
    "process": "meowjax.envs.process_reward:ProcessRewardEnv",
}


class UnknownFamilyError(EnvError, ValueError):
    """An ``env.family`` nobody registered; the message names the known ones and the fix."""


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
