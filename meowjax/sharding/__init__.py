"""meowjax.sharding: mesh from config, ONE logical-axis rule table, helpers to place pytrees."""

from meowjax.sharding.mesh import make_mesh, maybe_initialize_distributed, resolve_mesh_shape
from meowjax.sharding.rules import (
    LOGICAL_RULES,
    batch_axes,
    batch_sharding,
    logical_constraint,
    logical_sharding,
    logical_to_spec,
    opt_state_shardings,
    replicated,
    shard_batch,
    shard_params,
    tree_shardings,
)

__all__ = [
    "LOGICAL_RULES",
    "batch_axes",
    "batch_sharding",
    "logical_constraint",
    "logical_sharding",
    "logical_to_spec",
    "make_mesh",
    "maybe_initialize_distributed",
    "opt_state_shardings",
    "replicated",
    "resolve_mesh_shape",
    "shard_batch",
    "shard_params",
    "tree_shardings",
]
