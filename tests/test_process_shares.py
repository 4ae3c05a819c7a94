"""The pieces of ``runtime.multihost`` that one process can check: task shares, mesh checks,
the one-process identities, and the SIGTERM lockstep of ``runtime.preemption``."""

import os
import signal
import types

import jax
import numpy as np
import pytest

from meowjax.runtime import multihost, preemption


@pytest.mark.parametrize("n,count", [(8, 2), (5, 2), (3, 4), (64, 8), (7, 3)])
def test_shares_are_contiguous_blocks_in_process_order(n, count):
    blocks = [multihost.share(n, p, count) for p in range(count)]
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))   # concatenate to 0..n-1
    sizes = [b - a for a, b in blocks]
    assert max(sizes) - min(sizes) <= 1
    assert multihost.share(10, 1, 4) == (2, 5)


def test_share_error_and_idle_processes_note():
    with pytest.raises(ValueError, match=r"process index 2 not in \[0, 2\)"):
        multihost.share(4, 2, 2)
    note = multihost.idle_processes_note(2, "rollout.tasks_per_iter", count=4)
    assert "config.rollout.tasks_per_iter=2 is smaller than the 4 processes: 2 of them" in note
    assert multihost.idle_processes_note(4, "rollout.tasks_per_iter", count=4) is None


def test_one_process_is_the_identity():
    x = {"a": np.arange(3)}
    assert multihost.allgather_objects([1, "b"]) == [1, "b"]
    assert multihost.allgather_bytes(b"xy") == [b"xy"]
    assert multihost.any_process(True) and not multihost.any_process(False)
    assert multihost.local_view(x, None) is x and multihost.host_params(x) is x
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("data", "tensor"))
    assert multihost.process_submesh(mesh) is mesh
    with multihost.process_zero_first("nothing"):
        pass


def test_submesh_names_an_axis_that_spans_processes(monkeypatch):
    """Two processes of 2 devices each, ``tensor`` of size 4 across both: rollouts could not
    hold a whole model on one process."""
    devs = [types.SimpleNamespace(id=i, process_index=i // 2) for i in range(4)]
    mesh = types.SimpleNamespace(devices=np.asarray(devs, object).reshape(1, 4),
                                 axis_names=("data", "tensor"))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(jax, "local_device_count", lambda: 2)
    with pytest.raises(ValueError, match="axis 'tensor' \\(size 4\\) spans processes.*divide 2"):
        multihost.process_submesh(mesh)


def test_lockstep_sigterm_only_records_the_request():
    """In a multi-process run a SIGTERM never raises where it lands (not even in a rollout's
    interruptible section): the trainer stops where all processes agree."""
    with preemption.on_sigterm(), preemption.lockstep():
        with preemption.interruptible():
            os.kill(os.getpid(), signal.SIGTERM)
            assert preemption.requested()
        with preemption.interruptible():   # a pending request does not raise either
            pass
    with preemption.on_sigterm():           # without lockstep it raises at once, as before
        with pytest.raises(preemption.Preempted):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):
                pass
