"""Training across processes (hosts) on JAX's multi-controller runtime, and its one-process no-ops.

Every process runs the same program (``jax.distributed``: one process per host, or several on
one machine). The split of work, chosen so that a k-process run reproduces the one-process run
on the same total number of devices:

- **Rollouts** are per process: process p plays a contiguous block of each iteration's tasks
  (``share``; a task's group is never split), on its own devices (``process_submesh``) with a
  zero-copy local view of the trainer's weights (``local_view``, same per-device shards). No
  collective runs while episodes play, so processes whose games end at different turns never
  wait for each other.
- **Trajectories** are then gathered on every process in process order (``allgather_objects``),
  which is the one-process order: advantages (group baselines, whitening), the iteration's loss
  normaliser and the minibatch draw are the one-process ones, computed on every host.
- **Update steps** run SPMD on the mesh over every process's devices: each process builds the same
  host batch and places only its devices' rows (``global_batch``), so batch shapes always agree.
  Per-row outputs come back with ``to_host`` (an all-gather when rows live on other hosts).

The host copies of a few MB of episode tokens per iteration are the price of equality with the
one-process run (up to the rounding of a different all-reduce order); weights and gradients
never leave the devices.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Mapping
from typing import Any, Iterator, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding

from meowjax.runtime import preemption

# Exit status of a process that stops because a peer process failed (a collective broke).
PEER_FAILURE_STATUS = 1


def is_multiprocess() -> bool:
    return jax.process_count() > 1


def process_tag() -> str:
    """``process i/n``: what log lines of a multi-process run are prefixed with."""
    return f"process {jax.process_index()}/{jax.process_count()}"


def share(num_items: int, index: int | None = None, count: int | None = None) -> tuple[int, int]:
    """``[start, stop)`` of the contiguous block of ``num_items`` process ``index`` of ``count``
    takes: ``start = index * num_items // count``. Contiguous blocks in process order
    concatenate to the one-process order; sizes differ by at most one; a process may get none
    (fewer items than processes)."""
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    if not 0 <= index < count:
        raise ValueError(f"process index {index} not in [0, {count}).")
    return index * num_items // count, (index + 1) * num_items // count


def idle_processes_note(num_tasks: int, field: str, count: int | None = None) -> str | None:
    """A warning when some processes get none of ``num_tasks`` (named by ``field``): a group is
    never split, so they wait while the others play. Correct, but their devices idle."""
    count = jax.process_count() if count is None else count
    if num_tasks >= count:
        return None
    return (f"config.{field}={num_tasks} is smaller than the {count} processes: {count - num_tasks} "
            f"of them play no episodes. A multiple of {count} keeps every host busy.")


def allgather_bytes(data: bytes) -> list[bytes]:
    """Every process's ``data``, in process order (two all-gathers: lengths, then bytes padded
    to a power of two, so the gather compiles for a few sizes, not once per call)."""
    if not is_multiprocess():
        return [data]
    sizes = np.asarray(multihost_utils.process_allgather(np.asarray([len(data)], np.int64)))
    sizes = sizes.reshape(-1)
    buf = np.zeros(1 << max(10, (int(sizes.max()) - 1).bit_length()), np.uint8)
    buf[:len(data)] = np.frombuffer(data, np.uint8)
    gathered = np.asarray(multihost_utils.process_allgather(buf)).reshape(len(sizes), -1)
    return [gathered[i, :int(n)].tobytes() for i, n in enumerate(sizes)]


def allgather_objects(items: Sequence[Any]) -> list[Any]:
    """The concatenation, in process order, of every process's list ``items`` (pickled): with
    contiguous blocks (``share``) this is the one-process list."""
    if not is_multiprocess():
        return list(items)
    return [x for part in allgather_bytes(pickle.dumps(list(items))) for x in pickle.loads(part)]


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is set on any process (every process gets the same answer, so branches
    taken on it keep the processes in step)."""
    if not is_multiprocess():
        return bool(flag)
    flags = multihost_utils.process_allgather(np.asarray([int(bool(flag))], np.int32))
    return bool(np.asarray(flags).max())


def stop_together() -> contextlib.AbstractContextManager:
    """Several processes: a SIGTERM is only recorded (``preemption.lockstep``) until the trainer's
    processes agree on it (``any_process``) at a step boundary, where all save and stop."""
    return preemption.lockstep() if is_multiprocess() else contextlib.nullcontext()


def barrier(name: str) -> None:
    """Waits until every process reaches the barrier ``name`` (no-op on one process)."""
    if is_multiprocess():
        multihost_utils.sync_global_devices(name)


@contextlib.contextmanager
def process_zero_first(name: str) -> Iterator[None]:
    """Process 0 runs the block, then the others do: files the block writes into a folder the
    processes share (a trained tokenizer, converted weights) are written once and read after."""
    if jax.process_index() != 0:
        barrier(f"{name}: process 0 first")
    yield
    if jax.process_index() == 0:
        barrier(f"{name}: process 0 first")


def to_host(tree: Any) -> Any:
    """``jax.device_get`` that also fetches arrays with rows on other processes (an all-gather:
    every process gets the whole array)."""
    def get(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return jax.device_get(x)
    return jax.tree.map(get, tree)


def global_batch(batch: Mapping[str, Any], sharding: NamedSharding) -> dict[str, jax.Array]:
    """A host batch that every process holds whole (``{name: [B, ...]}``) as global arrays: each
    process places only the rows of its own devices, so the shapes agree by construction."""
    def put(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])
    return {k: put(v) for k, v in batch.items()}


def host_params(tree: Any) -> Any:
    """Arrays that live on this process only (e.g. params initialised on its first device) as host
    numpy, so ``jax.device_put`` onto a mesh spanning processes takes them as every process's
    identical copy. Global arrays stay as they are. The identity on one process."""
    if not is_multiprocess():
        return tree
    return jax.tree.map(lambda x: np.asarray(x) if isinstance(x, jax.Array)
                        and x.is_fully_addressable else x, tree)


def process_submesh(mesh: Mesh, local_axis: str = "data") -> Mesh:
    """This process's devices as a mesh with ``mesh``'s axis names: what rollouts run on.

    Each process must hold whole model replicas: its devices form a block of ``mesh`` that is
    complete along every axis but ``local_axis`` (the data-parallel axis spans processes; fsdp
    and tensor groups stay inside one process). The one-process mesh is returned as it is.

    Raises:
      ValueError: naming the axis that spans processes, and the fix.
    """
    if not is_multiprocess():
        return mesh
    devices = np.asarray(mesh.devices)
    mine = np.vectorize(lambda d: d.process_index == jax.process_index())(devices)
    idx = [np.flatnonzero(mine.any(axis=tuple(a for a in range(mine.ndim) if a != k)))
           for k in range(mine.ndim)]
    block = mine[np.ix_(*idx)]
    for k, name in enumerate(mesh.axis_names):
        if name != local_axis and len(idx[k]) != devices.shape[k]:
            raise ValueError(
                f"config.mesh.axes: axis {name!r} (size {devices.shape[k]}) spans processes, "
                f"but each process plays its episodes on whole model replicas on its own "
                f"{jax.local_device_count()} devices. Make the product of the non-{local_axis!r} "
                f"axis sizes divide {jax.local_device_count()} and let {local_axis!r} (-1) span "
                "the processes.")
    if not block.all() or block.size != jax.local_device_count():
        raise ValueError(f"This process's devices do not form one block of the mesh "
                         f"{dict(mesh.shape)}; build it with meowjax.sharding.make_mesh.")
    return Mesh(devices[np.ix_(*idx)], mesh.axis_names)


def local_view(tree: Any, submesh: Mesh) -> Any:
    """The same per-device buffers of global arrays (params, sharded by the trainer's rules)
    seen as arrays on ``submesh``: no copy, and a jitted function of them runs on this process
    alone. An array sharded over ``submesh``'s process-spanning axis (rows of a batch) has no
    local whole and raises. The identity on one process."""
    if not is_multiprocess():
        return tree

    def view(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        spec = x.sharding.spec
        local = NamedSharding(submesh, spec)
        if local.shard_shape(x.shape) != x.sharding.shard_shape(x.shape):
            raise ValueError(f"An array of shape {x.shape} sharded as {spec} has no whole copy "
                             "on this process; only replicated/fsdp/tensor-sharded weights do.")
        by_device = {s.device: s.data for s in x.addressable_shards}
        return jax.make_array_from_single_device_arrays(
            x.shape, local, [by_device[d] for d in local.addressable_devices_indices_map(x.shape)])
    return jax.tree.map(view, tree)
