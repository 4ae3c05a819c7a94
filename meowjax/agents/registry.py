"""Agents by interface name (``policy.interface``): each is an ``agents.base.Agent`` subclass.

Classes are imported lazily, so using one interface never imports the other's machinery. A
trainer's interface (``trainers.interfaces.register_interface``) registers its agent here too, so
a registered interface can be evaluated on its own; ``register_agent`` adds one directly.
"""

from __future__ import annotations

import importlib
from typing import Any

AGENTS: dict[str, Any] = {
    "score": "meowjax.agents.score:ScoreAgent",
    "generate": "meowjax.agents.text:TextAgent",
}


def resolve(target: Any) -> Any:
    """A class (or record), or the one a "module:Name" path names."""
    if isinstance(target, str):
        module, cls = target.split(":")
        target = getattr(importlib.import_module(module), cls)
    return target


def register_agent(name: str, agent: Any, *, replace: bool = False) -> None:
    """Registers an ``Agent`` subclass (or its "module:Class" path) under ``name``."""
    if name in AGENTS and not replace:
        raise ValueError(f"Agent interface {name!r} is already registered; pass replace=True.")
    AGENTS[name] = agent


def agent_class(name: str):
    """The agent class of interface ``name``; a ValueError lists the known ones."""
    if name not in AGENTS:
        raise ValueError(f"policy.interface={name!r}; choose one of {sorted(AGENTS)} (or "
                         "register one with meowjax.trainers.interfaces.register_interface).")
    return resolve(AGENTS[name])
