"""Action interfaces by name (``policy.interface``) for training: each is an ``AgentTrainer``
subclass.

An interface is an agent (``agents``: model setup and how it plays episodes, ``Trajectory``
records) and a trainer naming it in ``agent_cls`` (per-unit terms, ``steps.Units``, and how
trajectories become update rows); the schedule, the objective and the steps are shared. Classes
are imported lazily, so using one interface never imports the other's machinery. Add one with
``register_interface("name", TrainerClass)`` (its agent is registered for evaluation too).
"""

from __future__ import annotations

from typing import Any

from meowjax.agents import registry as agents

INTERFACES: dict[str, Any] = {
    "score": "meowjax.trainers.score_trainer:ScoreTrainer",
    "generate": "meowjax.trainers.text_trainer:TextTrainer",
}


def register_interface(name: str, trainer: Any, *, replace: bool = False) -> None:
    """Registers an ``AgentTrainer`` subclass (or its "module:Class" path) under ``name``, and
    its ``agent_cls`` under the same name in ``agents.registry`` (so that ``eval.evaluate`` can
    play a checkpoint of it without a trainer)."""
    if name in INTERFACES and not replace:
        raise ValueError(f"Interface {name!r} is already registered; pass replace=True.")
    agents.register_agent(name, agents.resolve(trainer).agent_cls, replace=replace)
    INTERFACES[name] = trainer


def trainer_class(name: str):
    """The trainer class of interface ``name``; a ValueError lists the known ones."""
    if name not in INTERFACES:
        raise ValueError(f"policy.interface={name!r}; choose one of {sorted(INTERFACES)} (or "
                         "register one with meowjax.trainers.registry.register_interface).")
    return agents.resolve(INTERFACES[name])
