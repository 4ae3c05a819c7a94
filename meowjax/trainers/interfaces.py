"""Action interfaces for training, by name (``policy.interface``): each is an ``Interface``
record of functions, never a trainer subclass.

An interface is its agent (``meowjax.agents``: model setup, ``play`` returning ``Trajectory``
records) and how training reads what that agent plays:

    units(agent)                       -> steps.Units: the per-unit terms the losses take
                                          (a unit is a turn when scoring, a token in free text)
    sft_rows(agent, expert)            -> update rows of the expert demonstrations
    update_rows(trajs)                 -> update rows of played episodes (``old_logp`` = the
                                          sampling log-probs)
    layout(trajs, rows, per_row)       -> [E, X]: per-row unit values as the estimators' matrix
    matrices(trajs, rows)              -> UnitMatrices: rewards, mask, turn ends, state keys
    attach(trajs, rows, adv_EX, ret_EX)   writes advantages and returns into the rows
    row_units(x_U, row)                -> one row's part of a packed batch's [U] output
    rows_per_iter(c, episodes)         -> update rows an iteration of ``episodes`` makes
                                          (the RL schedule's step count)
    batch_row_fields(c)                -> config fields fixing a device batch's rows, beyond
                                          sft.batch_rows and rl.minibatch_rows

The schedule, the objective and the steps are shared. ``register_interface(record)`` adds one
(its agent is registered for evaluation alongside); ``dataclasses.replace`` of a built-in record
changes one function. Records are imported lazily, so using one interface never imports the
other's machinery.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import ml_collections
import numpy as np

from meowjax.agents import registry as agents

Row = dict[str, np.ndarray]


def token_row_units(x_U: np.ndarray, row: Row) -> np.ndarray:
    """A token row's part of a ``[U]`` output: its length."""
    return x_U[:len(row["tokens"])]


@dataclasses.dataclass(frozen=True)
class Interface:
    """What an action interface supplies to training (see the module doc)."""

    name: str
    agent: Any                  # an agents.base.Agent subclass, or its "module:Class" path
    units: Callable[[Any], Any]
    sft_rows: Callable[[Any, list[dict[str, Any]]], list[Row]]
    update_rows: Callable[[Sequence[Any]], list[Row]]
    layout: Callable[[Sequence[Any], Sequence[Row], Sequence[Any]], np.ndarray]
    matrices: Callable[[Sequence[Any], Sequence[Row]], Any]
    attach: Callable[[Sequence[Any], Sequence[Row], np.ndarray, np.ndarray], None]
    rows_per_iter: Callable[[ml_collections.ConfigDict, int], int]
    row_units: Callable[[np.ndarray, Row], Any] = token_row_units
    batch_row_fields: Callable[[ml_collections.ConfigDict], dict[str, int]] = lambda c: {}

    @property
    def agent_cls(self):
        return agents.resolve(self.agent)


INTERFACES: dict[str, Any] = {
    "score": "meowjax.trainers.score_rows:SCORE",
    "generate": "meowjax.trainers.text_rows:GENERATE",
}


def register_interface(record: Interface, *, replace: bool = False) -> Interface:
    """Registers ``record`` under its name, and its agent under the same name in
    ``agents.registry`` (so that ``eval.evaluate`` can play a checkpoint of it alone)."""
    if not isinstance(record, Interface):
        raise TypeError(f"register_interface takes an Interface record, got {type(record)!r}: "
                        "build one (or dataclasses.replace a built-in, get_interface('score')).")
    if record.name in INTERFACES and not replace:
        raise ValueError(f"Interface {record.name!r} is already registered; pass replace=True.")
    agents.register_agent(record.name, record.agent, replace=replace)
    INTERFACES[record.name] = record
    return record


def get_interface(name: str) -> Interface:
    """The record of interface ``name``; a ValueError lists the known ones."""
    if name not in INTERFACES:
        raise ValueError(f"policy.interface={name!r}; choose one of {sorted(INTERFACES)} (or "
                         "register one with meowjax.trainers.interfaces.register_interface).")
    return agents.resolve(INTERFACES[name])   # a record, or its "module:NAME" path
