"""The training state and the shardings of an update step (plain pytrees, no logic)."""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax


class TrainState(flax.struct.PyTreeNode):
    """Everything a step changes. ``value_params``/``value_opt_state`` are empty dicts when the
    estimator needs no critic (a fixed pytree shape: never ``None``)."""

    step: jax.Array
    params: Any
    opt_state: Any
    value_params: Any
    value_opt_state: Any


class StepShardings(NamedTuple):
    """Shardings of an update step: ``state`` a TrainState of shardings, ``batch`` one sharding
    for every batch field, ``metrics`` one for every (scalar) metric."""

    state: Any
    batch: Any
    metrics: Any
