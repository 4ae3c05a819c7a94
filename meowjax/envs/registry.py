"""Environment families by name, built from a picklable spec (so pool workers can build them).

Each family lives in its own module and is imported lazily, so using TextWorld never imports the
ALFWorld or code-repair machinery.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from meowjax.envs.base import EnvError, TextEnv

# family name -> "module:ClassName"; the class is constructed as Class(**spec.kwargs).
FAMILIES: dict[str, str] = {
    "textworld": "meowjax.envs.textworld_env:TextWorldEnv",
    "alfworld": "meowjax.envs.alfworld_env:AlfWorldEnv",
    "swe": "meowjax.envs.swe.env:SweEnv",
    # Process supervision wraps any family above (reward = expert-plan progress); it lives with
    # the evaluation code and is imported only when used.
    "process": "meowjax.eval.process_reward:ProcessRewardEnv",
}


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What to build: a family name and its constructor keyword arguments (all picklable)."""

    family: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def make_env(spec: EnvSpec) -> TextEnv:
    """Builds one environment; an unknown family names the known ones."""
    if spec.family not in FAMILIES:
        raise EnvError(
            f"Unknown environment family {spec.family!r}; known families: {sorted(FAMILIES)}. "
            "Fix the config's env.family (or register the family in meowjax/envs/registry.py).")
    module_name, class_name = FAMILIES[spec.family].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(**spec.kwargs)
    except TypeError as e:
        raise EnvError(f"Bad options for environment family {spec.family!r}: {e}") from e
