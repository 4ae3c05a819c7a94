"""host_memory: with kept memory a repeated 64 MiB XLA output stops page-faulting; without it
(glibc's defaults, and again after restore_defaults) every call faults all its pages in anew."""

import json
import subprocess
import sys

import pytest

from meowjax.runtime import host_memory

_PAGES = (64 << 20) // 4096  # pages of one 64 MiB buffer
# Calls per setting, and the first calls of each that may still grow the heap to its mark.
_CALLS, _WARMUP = 40, 10

# Each cycle: a jitted program writes a fresh 64 MiB output, which is then freed; prints the
# minor faults of each of argv[1] cycles under each setting named after it ("default", "keep",
# "release", "restore"), in order. As in the entry points, a first "keep" comes before the first
# computation.
_PROBE = """
import json, sys
from meowjax.runtime import host_memory
if sys.argv[2] == "keep":
    assert host_memory.keep_freed_memory()
import jax, jax.numpy as jnp
fill = jax.jit(lambda x: jnp.full((64 << 18,), x, jnp.float32))
fill(1.0).block_until_ready()
out = {}
for step in sys.argv[2:]:
    if step == "keep":
        assert host_memory.keep_freed_memory()
    elif step == "release":
        assert host_memory.release_free_memory()
    elif step == "restore":
        assert host_memory.restore_defaults()
        assert not host_memory.release_free_memory()  # nothing kept: a no-op
    faults = []
    for i in range(int(sys.argv[1])):
        start = host_memory.minor_faults()
        y = fill(float(i))
        y.block_until_ready()
        y.delete()
        faults.append(host_memory.minor_faults() - start)
    out[step] = faults
print(json.dumps(out))
"""


def _probe(*steps: str) -> dict[str, list[int]]:
    res = subprocess.run([sys.executable, "-c", _PROBE, str(_CALLS), *steps],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(host_memory._glibc() is None, reason="the settings are glibc's")
def test_kept_memory_stops_refaulting_release_and_restore_bring_it_back():
    out = {**_probe("default"), **_probe("keep", "release", "restore")}
    # glibc's defaults: a 64 MiB block is its own mmap, so each call faults all its pages.
    assert min(out["default"]) > 0.9 * _PAGES, out
    # Kept: the heap grows to its high-water mark (a buffer or two, in the first calls: XLA may
    # allocate the next output before the last free lands) and then the freed pages serve every
    # later call. Each rise of the mark faults one whole buffer; on a loaded machine it can still
    # rise late, when a small allocation lands in the freed hole (two rises in 6 calls once, in a
    # fresh clone's `make test`; 0 in 30 late calls of 8 probes beside a busy core). So the tail
    # is long: at most 2 rises in its 30 calls, where glibc's defaults fault all 30 buffers.
    assert sum(out["keep"]) < 6.1 * _PAGES, out
    assert sum(out["keep"][_WARMUP:]) < 2.05 * _PAGES, out
    # Released: the free pages went back to the OS, so the first call faults again, once.
    assert out["release"][0] > 0.9 * _PAGES, out
    assert sum(out["release"][_WARMUP:]) < 2.05 * _PAGES, out
    # Restored: the free heap top was handed back, so the next buffer faults in again.
    assert out["restore"][0] > 0.9 * _PAGES, out


def test_not_glibc_changes_nothing(monkeypatch):
    host_memory._glibc.cache_clear()
    monkeypatch.setattr(host_memory.ctypes, "CDLL", lambda *a, **k: (_ for _ in ()).throw(
        OSError("no libc")))
    try:
        assert host_memory.keep_freed_memory() is False
        assert host_memory.restore_defaults() is False
    finally:
        monkeypatch.undo()
        host_memory._glibc.cache_clear()


_RSS_PROBE = """
import json
import numpy as np
from meowjax.runtime import host_memory
before = host_memory.resident_bytes()
buf = np.ones(64 * 2**20, np.float32)  # 256 MiB, every page written
print(json.dumps(dict(before=before, after=host_memory.resident_bytes(),
                      metrics=host_memory.memory_metrics())))
"""


def test_memory_metrics_see_a_touched_allocation():
    """The resident set grows by about the size of a buffer once its pages are written; the
    peak never falls below the current resident set. (A fresh process: one with kept memory
    could serve the buffer from pages it already holds.)"""
    res = subprocess.run([sys.executable, "-c", _RSS_PROBE], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["before"] > 0  # Linux: /proc/self/statm
    grown = out["after"] - out["before"]
    assert 200 * 2**20 < grown < 320 * 2**20, grown
    m = out["metrics"]
    assert m["perf/peak_rss_gib"] >= m["perf/rss_gib"] >= out["after"] / 2**30 - 0.01


def test_argparse_flag_defaults_on_and_can_be_turned_off():
    import argparse

    parser = argparse.ArgumentParser()
    host_memory.add_argparse_flag(parser)
    assert parser.parse_args([]).keep_host_memory is True
    assert parser.parse_args(["--no-keep_host_memory"]).keep_host_memory is False
    assert parser.parse_args(["--keep_host_memory"]).keep_host_memory is True
