"""The ONE logical-axis rule table and helpers that turn logical axes into ``NamedSharding``s.

Model code names every array dimension with a logical name ("vocab", "embed", "heads", ...);
``LOGICAL_RULES`` maps each logical name to zero or more mesh axes. For an array with logical axes
``(n_0, ..., n_{r-1})`` and shape ``(d_0, ..., d_{r-1})`` the partition spec is built dim by dim:

    spec[i] = [a for a in rules[n_i] if a in mesh and mesh[a] > 1 and a not used by spec[<i]]
    spec[i] = None            if prod(mesh[a] for a in spec[i]) does not divide d_i

i.e. mesh axes absent from the mesh or of size 1 are dropped, a mesh axis already used by an
earlier dimension is dropped (so activations ``("batch", "length", "embed")`` shard the batch over
data+fsdp and leave "embed" whole), and a dimension whose size does not divide the product of its
mesh axes falls back to replicated (e.g. 3 kv heads on tensor=2). A logical name missing from the
table is an error naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

LogicalAxes = Sequence[str | None]
Rules = Mapping[str, str | tuple[str, ...] | None]

LOGICAL_RULES: Rules = {
    # activations
    "batch": ("data", "fsdp"),
    "length": None,
    # parameters (and activations that carry the same dims)
    "embed": "fsdp",
    "vocab": "tensor",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "head_dim": None,
    "layers": None,
}


def _as_tuple(mesh_axes: str | tuple[str, ...] | None) -> tuple[str, ...]:
    if mesh_axes is None:
        return ()
    if isinstance(mesh_axes, str):
        return (mesh_axes,)
    return tuple(mesh_axes)


def logical_to_spec(
    logical_axes: LogicalAxes | None,
    rules: Rules,
    mesh: Mesh | AbstractMesh,
    shape: Sequence[int] | None = None,
) -> PartitionSpec:
    """``PartitionSpec`` for one array from its logical axis names (see the module docstring).

    Args:
      logical_axes: one logical name (or None = replicated) per dimension; None means fully
        replicated.
      rules: logical name -> mesh axis name, tuple of mesh axis names, or None.
      mesh: the device mesh (or a ``jax.sharding.AbstractMesh``: only names and sizes are read).
      shape: the array's shape; when given, dims that do not divide their mesh axes' size are
        replicated and the rank is checked.

    Raises:
      KeyError: a logical name is not in ``rules``.
      ValueError: ``len(logical_axes) != len(shape)``.
    """
    if logical_axes is None:
        return PartitionSpec()
    logical_axes = tuple(logical_axes)
    if shape is not None and len(shape) != len(logical_axes):
        raise ValueError(
            f"logical axes {logical_axes} have rank {len(logical_axes)} but the array has shape "
            f"{tuple(shape)}; fix the model's logical_axes for this parameter."
        )
    mesh_sizes = dict(mesh.shape)
    used: set[str] = set()
    spec: list[str | tuple[str, ...] | None] = []
    for i, name in enumerate(logical_axes):
        if name is None:
            spec.append(None)
            continue
        if name not in rules:
            raise KeyError(
                f"logical axis name {name!r} (in {logical_axes}) is not in the sharding rules "
                f"{sorted(rules)}; add it to meowjax.sharding.LOGICAL_RULES."
            )
        axes = tuple(
            a for a in _as_tuple(rules[name]) if mesh_sizes.get(a, 1) > 1 and a not in used
        )
        if shape is not None and shape[i] % math.prod(mesh_sizes[a] for a in axes):
            axes = ()
        used.update(axes)
        spec.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def logical_sharding(
    logical_axes: LogicalAxes | None,
    mesh: Mesh,
    shape: Sequence[int] | None = None,
    rules: Rules = LOGICAL_RULES,
) -> NamedSharding:
    """``NamedSharding`` for one array (activations or params) from its logical axes."""
    return NamedSharding(mesh, logical_to_spec(logical_axes, rules, mesh, shape))


def logical_constraint(
    x: jax.Array, logical_axes: LogicalAxes, mesh: Mesh, rules: Rules = LOGICAL_RULES
) -> jax.Array:
    """``with_sharding_constraint`` by logical axes; use inside jit to pin activation layouts."""
    return jax.lax.with_sharding_constraint(x, logical_sharding(logical_axes, mesh, x.shape, rules))


def _is_axes_leaf(x: Any) -> bool:
    return x is None or (isinstance(x, tuple) and all(a is None or isinstance(a, str) for a in x))


def tree_shardings(
    logical_axes_tree: Any, mesh: Mesh, shapes_tree: Any, rules: Rules = LOGICAL_RULES
) -> Any:
    """Pytree of ``NamedSharding`` like ``shapes_tree`` (arrays or ``jax.ShapeDtypeStruct``s).

    ``logical_axes_tree`` has the same structure as ``shapes_tree`` with a tuple of logical names
    (or None) at each leaf, e.g. ``lm.logical_axes(cfg)``.
    """
    axes_leaves, axes_def = jax.tree.flatten(logical_axes_tree, is_leaf=_is_axes_leaf)
    shape_leaves, shape_def = jax.tree.flatten(shapes_tree)
    if axes_def.num_leaves != shape_def.num_leaves or jax.tree.structure(
        jax.tree.unflatten(axes_def, [0] * axes_def.num_leaves)
    ) != jax.tree.structure(jax.tree.unflatten(shape_def, [0] * shape_def.num_leaves)):
        raise ValueError(
            "logical axes tree and params tree differ in structure:\n"
            f"  axes:   {axes_def}\n  params: {shape_def}\n"
            "Make the model's logical_axes(cfg) mirror its params exactly."
        )
    shardings = [
        NamedSharding(mesh, logical_to_spec(axes, rules, mesh, np.shape(leaf)))
        for axes, leaf in zip(axes_leaves, shape_leaves)
    ]
    return jax.tree.unflatten(shape_def, shardings)


def shard_params(params: Any, logical_axes_tree: Any, mesh: Mesh, rules: Rules = LOGICAL_RULES) -> Any:
    """Places ``params`` on ``mesh`` by the rule table (``jax.device_put`` with NamedShardings)."""
    return jax.device_put(params, tree_shardings(logical_axes_tree, mesh, params, rules))


def replicated(mesh: Mesh) -> NamedSharding:
    """Fully replicated sharding on ``mesh`` (scalars, small tables, RNG keys)."""
    return NamedSharding(mesh, PartitionSpec())


def batch_axes(mesh: Mesh, rules: Rules = LOGICAL_RULES) -> tuple[str, ...]:
    """Mesh axes the batch dimension is split over (those of "batch" present in the mesh)."""
    return tuple(a for a in _as_tuple(rules["batch"]) if a in mesh.axis_names)


def batch_sharding(mesh: Mesh, rules: Rules = LOGICAL_RULES) -> NamedSharding:
    """Sharding for ``[B, ...]`` arrays: B split over data+fsdp, other dims replicated."""
    axes = batch_axes(mesh, rules)
    return NamedSharding(mesh, PartitionSpec(axes if axes else None))


def shard_batch(batch: Any, mesh: Mesh, rules: Rules = LOGICAL_RULES) -> Any:
    """Places a pytree of host ``[B, ...]`` arrays with ``batch_sharding`` (B must divide).

    Single process: ``jax.device_put``. Multi-process: each process passes its local rows and
    ``jax.make_array_from_process_local_data`` assembles the global batch.
    """
    sharding = batch_sharding(mesh, rules)
    n_shards = math.prod(mesh.shape[a] for a in batch_axes(mesh, rules))
    multi = jax.process_count() > 1

    def put(path: Any, x: Any) -> jax.Array:
        if np.ndim(x) == 0:
            return jax.device_put(x, replicated(mesh))
        rows = np.shape(x)[0] * (jax.process_count() if multi else 1)
        if rows % n_shards:
            raise ValueError(
                f"batch field {jax.tree_util.keystr(path)} has {rows} rows, not divisible by the "
                f"{n_shards} batch shards (mesh axes {batch_axes(mesh, rules)}); pad the batch or "
                "change the mesh."
            )
        if multi:
            return jax.make_array_from_process_local_data(sharding, np.asarray(x))
        return jax.device_put(x, sharding)

    return jax.tree_util.tree_map_with_path(put, batch)


def opt_state_shardings(
    optimizer: optax.GradientTransformation | Callable[[Any], Any],
    params: Any,
    param_shardings: Any,
    mesh: Mesh,
) -> Any:
    """Shardings for ``optimizer.init(params)`` derived from the params' shardings.

    The state's shape is found with ``jax.eval_shape`` (nothing is allocated). Every copy of the
    params tree inside the state (Adam's mu/nu, ...) gets the params' shardings, found with
    ``optax.tree_utils.tree_map_params``; a leaf whose shape differs from its parameter's (e.g.
    factored statistics) and every other leaf (step counts, scalars) is replicated.

    Use as ``jax.jit(optimizer.init, out_shardings=opt_state_shardings(...))(params)``.
    """
    init = optimizer.init if hasattr(optimizer, "init") else optimizer
    abstract_state = jax.eval_shape(init, params)
    rep = replicated(mesh)

    def for_param(state_leaf: Any, sharding: NamedSharding, param: Any) -> NamedSharding:
        return sharding if np.shape(state_leaf) == np.shape(param) else rep

    return optax.tree_utils.tree_map_params(
        init,
        for_param,
        abstract_state,
        param_shardings,
        params,
        transform_non_params=lambda _: rep,
    )
