"""Action interfaces by name (``policy.interface``): each is an ``AgentTrainer`` subclass.

An interface supplies its model setup, per-unit terms (``steps.Units``), how it plays episodes
(``Trajectory`` records) and how trajectories become update rows; the schedule, the objective
and the steps are shared. Classes are imported lazily, so using one interface never imports the
other's machinery. Add one with ``register_interface("name", "module:Class")`` (or the class).
"""

from __future__ import annotations

import importlib
from typing import Any

INTERFACES: dict[str, Any] = {
    "score": "meowjax.trainers.score_trainer:ScoreTrainer",
    "generate": "meowjax.trainers.text_trainer:TextTrainer",
}


def register_interface(name: str, trainer: Any, *, replace: bool = False) -> None:
    """Registers an ``AgentTrainer`` subclass (or its "module:Class" path) under ``name``."""
    if name in INTERFACES and not replace:
        raise ValueError(f"Interface {name!r} is already registered; pass replace=True.")
    INTERFACES[name] = trainer


def trainer_class(name: str):
    """The trainer class of interface ``name``; a ValueError lists the known ones."""
    if name not in INTERFACES:
        raise ValueError(f"policy.interface={name!r}; choose one of {sorted(INTERFACES)} (or "
                         "register one with meowjax.trainers.registry.register_interface).")
    target = INTERFACES[name]
    if isinstance(target, str):
        module, cls = target.split(":")
        target = getattr(importlib.import_module(module), cls)
    return target
