"""Device mesh from config axes, and the optional multi-host start.

A mesh is described by an ordered list of ``(name, size)`` pairs, e.g.
``[("data", -1), ("fsdp", 1), ("tensor", 1)]``. Exactly one size may be ``-1``; it is inferred as

    size_{-1} = device_count / prod(other sizes)

Axes are ordered by increasing network intensity (the last axis gets the fastest links), which is
the convention of ``jax.experimental.mesh_utils.create_device_mesh``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh

MeshAxes = Sequence[tuple[str, int]]


def resolve_mesh_shape(
    axes: MeshAxes, device_count: int, field: str = "config.mesh"
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Names and sizes of the mesh with the one ``-1`` size inferred.

    Args:
      axes: ordered ``(name, size)`` pairs; sizes are positive ints or exactly one ``-1``.
      device_count: number of devices the mesh must cover exactly.
      field: name of the config field the axes came from, used in error messages.

    Returns:
      ``(names, sizes)`` with ``prod(sizes) == device_count``.

    Raises:
      ValueError: on duplicate names, more than one ``-1``, a size < 1, or sizes whose product does
        not divide / equal ``device_count``.
    """
    axes = [tuple(a) for a in axes]
    if not axes:
        raise ValueError(f"{field} is empty; give e.g. [('data', -1), ('fsdp', 1), ('tensor', 1)].")
    for a in axes:
        if len(a) != 2 or not isinstance(a[0], str):
            raise ValueError(f"{field} entries must be (name, size) pairs; got {a!r}.")
    names = tuple(name for name, _ in axes)
    sizes = [int(size) for _, size in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"{field} has duplicate axis names {names}.")
    n_infer = sum(s == -1 for s in sizes)
    if n_infer > 1:
        raise ValueError(f"{field}={axes}: at most one axis size may be -1 (inferred).")
    bad = [(n, s) for n, s in zip(names, sizes) if s < 1 and s != -1]
    if bad:
        raise ValueError(f"{field}={axes}: axis sizes must be >= 1 or -1; bad: {bad}.")
    known = math.prod(s for s in sizes if s != -1)
    if n_infer == 1:
        if device_count % known:
            raise ValueError(
                f"{field}={axes}: the fixed axis sizes multiply to {known}, which does not divide "
                f"the {device_count} available devices. Change {field} so that the product of the "
                f"fixed sizes divides {device_count}."
            )
        sizes = [device_count // known if s == -1 else s for s in sizes]
    elif known != device_count:
        raise ValueError(
            f"{field}={axes}: axis sizes multiply to {known} but there are {device_count} devices. "
            f"Set one size in {field} to -1 to infer it, or make the product equal {device_count}."
        )
    return names, tuple(sizes)


def make_mesh(
    axes: MeshAxes, devices: Sequence[Any] | None = None, field: str = "config.mesh"
) -> Mesh:
    """Builds a ``jax.sharding.Mesh`` from ``(name, size)`` pairs with one ``-1`` inferred.

    Uses ``mesh_utils.create_device_mesh`` for a topology-aware device order and the default
    (``Auto``) axis types, so sharding is propagated by the compiler from the
    ``NamedSharding``s we place on inputs.

    Example:
      ``make_mesh([("data", -1), ("fsdp", 2), ("tensor", 2)])`` on 8 devices gives data=2.
    """
    devices = list(jax.devices() if devices is None else devices)
    names, sizes = resolve_mesh_shape(axes, len(devices), field)
    device_array = mesh_utils.create_device_mesh(sizes, devices)
    return Mesh(np.asarray(device_array), names)


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def maybe_initialize_distributed(config: Any) -> bool:
    """Starts JAX's multi-host runtime when the config asks for it; a no-op otherwise.

    Reads ``coordinator_address``, ``num_processes``, ``process_id`` (and optional
    ``local_device_ids``, ``heartbeat_timeout_s``) from ``config`` (a mapping or attribute
    object, e.g. the ``config.distributed`` ConfigDict). ``heartbeat_timeout_s`` bounds how long
    the others run on after a process dies before the coordination service stops them.

    - ``coordinator_address`` unset/empty and ``num_processes`` in (None, 1): single host, nothing
      is done, returns False.
    - ``coordinator_address == "auto"``: ``jax.distributed.initialize()`` with no arguments (the
      cluster environment, e.g. Cloud TPU or SLURM, provides everything).
    - otherwise: ``jax.distributed.initialize(coordinator_address, num_processes, process_id)``;
      all three must be set.

    Must run before any other JAX call touches the devices. Returns True when initialised
    (also when an earlier call did).
    """
    if jax.distributed.is_initialized():
        return True
    address = _get(config, "coordinator_address")
    num_processes = _get(config, "num_processes")
    process_id = _get(config, "process_id")
    local_device_ids = _get(config, "local_device_ids")
    timeouts = {}
    if _get(config, "heartbeat_timeout_s"):
        timeouts["heartbeat_timeout_seconds"] = int(_get(config, "heartbeat_timeout_s"))
    if not address:
        if num_processes not in (None, 1):
            raise ValueError(
                f"distributed.num_processes={num_processes} but distributed.coordinator_address is "
                "not set; set it to 'host:port' of process 0 (or 'auto' on a managed cluster)."
            )
        return False
    if address == "auto":
        jax.distributed.initialize(**timeouts)
        return True
    if num_processes is None or process_id is None:
        raise ValueError(
            f"distributed.coordinator_address={address!r} needs distributed.num_processes and "
            f"distributed.process_id too; got {num_processes!r}, {process_id!r}."
        )
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=int(num_processes),
        process_id=int(process_id),
        local_device_ids=local_device_ids,
        **timeouts,
    )
    return True
