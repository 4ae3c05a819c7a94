"""Where the trainer's arrays live on the mesh: params, train state, batches, restore targets.

One ``Placement`` per mesh: the trainer's, of ``config.mesh.axes`` over every process's devices
(``meowjax.sharding.make_mesh``), and its rollouts', over this process's own devices
(``runtime.multihost.process_submesh``; the same mesh on one process). Every sharding comes
from the ONE rule table (``meowjax.sharding.LOGICAL_RULES``):

    policy / reference params   lm.logical_axes(cfg)   (vocab/heads/mlp on tensor, embed on fsdp)
    value params                value.value_logical_axes(cfg)
    optimizer states            the shardings of the params they mirror; counters replicated
    step counter, metrics       replicated
    batches  [B, ...]           B split over the batch axes (data, fsdp); B must divide

The jitted update steps take these as ``in_shardings``/``out_shardings`` (``StepShardings``),
so the state's shardings are the same after every step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import optax
from jax.sharding import Mesh

from meowjax import sharding
from meowjax.models import lm, value
from meowjax.models.config import ModelConfig
from meowjax.runtime import multihost
from meowjax.runtime.state import StepShardings, TrainState


def batch_shards(mesh: Mesh) -> int:
    """Number of pieces a batch's row dimension is split into (product of the batch axes)."""
    return math.prod(mesh.shape[a] for a in sharding.batch_axes(mesh))


def check_batch_rows(mesh: Mesh, fields: Mapping[str, int], mesh_field: str = "mesh.axes") -> None:
    """Raises a ValueError naming the config field whose row count does not divide the shards."""
    n = batch_shards(mesh)
    axes = {a: mesh.shape[a] for a in sharding.batch_axes(mesh)}
    for field, rows in fields.items():
        if int(rows) % n:
            fix = -(-int(rows) // n) * n
            raise ValueError(
                f"config.{field}={rows} is not divisible by the {n} data-parallel batch shards of "
                f"config.{mesh_field} (batch rows are split over {axes}). Set config.{field} to a "
                f"multiple of {n} (e.g. {fix}), or make the data/fsdp sizes in config.{mesh_field} "
                f"divide {rows}.")


def with_shardings(abstract: Any, shardings: Any) -> Any:
    """``jax.ShapeDtypeStruct``s carrying ``shardings`` (restore targets, AOT lowering)."""
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings)


class Placement:
    """Shardings of one run's pytrees on ``mesh`` for the model ``cfg``."""

    def __init__(self, mesh: Mesh, cfg: ModelConfig):
        self.mesh, self.cfg = mesh, cfg
        self.replicated = sharding.replicated(mesh)
        self.batch_sharding = sharding.batch_sharding(mesh)

    def param_shardings(self, params: Any) -> Any:
        """Policy-shaped params (arrays or ShapeDtypeStructs) -> NamedShardings."""
        return sharding.tree_shardings(lm.logical_axes(self.cfg), self.mesh, params)

    def value_shardings(self, vparams: Any) -> Any:
        """Critic params -> NamedShardings; ``{}`` (no critic) stays ``{}``."""
        if not vparams:
            return {}
        return sharding.tree_shardings(value.value_logical_axes(self.cfg), self.mesh, vparams)

    def state_shardings(self, state: TrainState, optimizer: optax.GradientTransformation,
                        critic_optimizer: optax.GradientTransformation) -> TrainState:
        """A TrainState of NamedShardings for ``state`` (arrays or ShapeDtypeStructs)."""
        p = self.param_shardings(state.params)
        v = self.value_shardings(state.value_params)
        vopt = {}
        if state.value_params:
            vopt = sharding.opt_state_shardings(critic_optimizer, state.value_params, v, self.mesh)
        return TrainState(
            step=self.replicated, params=p,
            opt_state=sharding.opt_state_shardings(optimizer, state.params, p, self.mesh),
            value_params=v, value_opt_state=vopt)

    def step_shardings(self, state: TrainState, optimizer: optax.GradientTransformation,
                       critic_optimizer: optax.GradientTransformation) -> StepShardings:
        """in/out shardings for ``trainers.optim.make_update_step`` on states shaped like ``state``."""
        return StepShardings(
            state=self.state_shardings(state, optimizer, critic_optimizer),
            batch=self.batch_sharding, metrics=self.replicated)

    def params(self, params: Any) -> Any:
        """Places policy-shaped params (e.g. the frozen reference) by the rule table."""
        return jax.device_put(params, self.param_shardings(params))

    def batch(self, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Places a host batch ``{name: [B, ...]}`` with B split over the batch axes (B divides:
        ``check_batch_rows`` at trainer construction). On a mesh over several processes every
        process holds the whole batch and places its devices' rows (``multihost.global_batch``);
        otherwise a plain ``device_put``."""
        if self.batch_sharding.is_fully_addressable:
            return jax.device_put(dict(batch), self.batch_sharding)
        return multihost.global_batch(batch, self.batch_sharding)
