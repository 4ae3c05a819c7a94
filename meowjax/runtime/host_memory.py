"""Host-allocator settings for XLA:CPU: freed buffers stay in the process for the next step.

XLA:CPU allocates every execution's temp and output buffers with ``posix_memalign``. glibc
serves blocks above its mmap threshold (128 KiB, growing to at most 32 MiB) with fresh
``mmap``s and unmaps them on free, and trims the per-thread heaps XLA's worker threads
allocate from, so every training step touches its buffers' pages anew: each page is a minor
fault and a kernel zero-fill. The SmolLM2-135M PG update (B=2 x 128, ``benchmarks/train_step``)
faults 1.14 GiB a step that way, about 290k faults and 0.5-0.8 s of kernel time per ~1.95 s.

``keep_freed_memory()`` asks glibc, through ``mallopt``, for

    M_ARENA_MAX      = 1    one heap for all threads (a worker thread's heap is mmapped and
                            trimmed on its own; the main heap grows with brk)
    M_MMAP_MAX       = 0    no block is served by its own mmap
    M_TRIM_THRESHOLD = -1   the heap is never given back to the OS

so a step's buffers reuse the pages the previous step freed: no faults after the first steps,
the same numbers (only where buffers live changes). The cost is resident memory: freed pages
stay with the process, and one heap serving buffers of many sizes fragments, so the resident
set grows past the live peak (the default run: 3.2 -> 5.4 GiB peak RSS, 10.8 -> 9.2 min).
``release_free_memory()`` (``malloc_trim``) hands the free pages back; the trainer loop calls it
between RL iterations, so each iteration faults its buffers in once instead of every step (that
did not lower the default run's peak, which is reached inside RL iterations: ``memory_metrics``,
logged by the trainer, shows 0.8-1.6 GiB through SFT and 3.2-5.7 GiB in RL; with a second call
between an iteration's rollouts and its update the peak still grew through RL to 6.9 GiB:
docs/results-history.md). Other allocators (macOS, musl) are left alone. Call
``keep_freed_memory`` before the first computation of the process (the entry points do, under
``--keep_host_memory``); ``restore_defaults()`` undoes the mmap and trim settings (the single
heap stays), for before/after benchmarks in one process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# <malloc.h> mallopt parameters.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -3, -4, -8
# glibc's defaults in a long-running process (malloc/malloc.c): DEFAULT_MMAP_MAX, and the
# dynamic mmap threshold at its 64-bit ceiling DEFAULT_MMAP_THRESHOLD_MAX (it rises to the size
# of each freed mmapped block), with the trim threshold it sets alongside (twice that).
_DEFAULT_MMAP_MAX = 65536
_DEFAULT_MMAP_THRESHOLD = 32 * 2**20
_DEFAULT_TRIM_THRESHOLD = 2 * _DEFAULT_MMAP_THRESHOLD


@functools.cache
def _glibc():
    """The process's glibc (``None`` when the C library is another one)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):
        return None
    return libc


def _mallopt(libc, param: int, value: int) -> None:
    if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
        raise RuntimeError(f"glibc mallopt({param}, {value}) was refused.")


_STATE = {"kept": False}


def keep_freed_memory() -> bool:
    """One heap, no per-block mmaps, no trimming (see the module docstring).

    Returns False (and changes nothing) when the C library is not glibc.
    """
    libc = _glibc()
    if libc is None:
        return False
    _mallopt(libc, _M_ARENA_MAX, 1)
    _mallopt(libc, _M_MMAP_MAX, 0)
    _mallopt(libc, _M_TRIM_THRESHOLD, -1)
    _STATE["kept"] = True
    return True


def add_argparse_flag(parser) -> None:
    """Adds ``--keep_host_memory`` / ``--no-keep_host_memory`` (default on) to an argparse
    parser: the benchmark scripts' copy of the entry points' absl flag. The script then calls
    ``keep_freed_memory()`` when it is set, before its first computation."""
    import argparse

    parser.add_argument("--keep_host_memory", action=argparse.BooleanOptionalAction,
                        default=True, help="run with host_memory.keep_freed_memory(), as the "
                        "experiment entry points do (--no-keep_host_memory: glibc's defaults)")


def is_kept() -> bool:
    """Whether ``keep_freed_memory`` is in effect (and not undone by ``restore_defaults``)."""
    return _STATE["kept"]


def release_free_memory() -> bool:
    """Hands the heap's free pages back to the OS (``malloc_trim(0)``) when memory is being
    kept; a no-op otherwise. Returns whether it trimmed."""
    libc = _glibc()
    if libc is None or not _STATE["kept"]:
        return False
    libc.malloc_trim(ctypes.c_size_t(0))
    return True


def restore_defaults() -> bool:
    """glibc's default mmap and trim settings again, as they stand in a long-running process
    (the dynamic mmap threshold at its ceiling; the arena limit stays), and the free heap top
    is handed back to the OS. Returns False when the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    _mallopt(libc, _M_MMAP_MAX, _DEFAULT_MMAP_MAX)
    _mallopt(libc, _M_MMAP_THRESHOLD, _DEFAULT_MMAP_THRESHOLD)
    _mallopt(libc, _M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
    libc.malloc_trim(ctypes.c_size_t(0))
    _STATE["kept"] = False
    return True


def resident_bytes() -> int | None:
    """This process's resident set now (``/proc/self/statm``), or None where there is none."""
    import os

    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def peak_resident_bytes() -> int:
    """This process's peak resident set so far (``getrusage``: KiB on Linux, bytes on macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def memory_metrics() -> dict[str, float]:
    """``perf/rss_gib`` (now, where known) and ``perf/peak_rss_gib`` (so far) of this process.
    The kernel's high-water mark lags the current count by a few pages, so the peak is at
    least the current value."""
    now = resident_bytes()
    out = {"perf/peak_rss_gib": max(peak_resident_bytes(), now or 0) / 2**30}
    if now is not None:
        out["perf/rss_gib"] = now / 2**30
    return out


def minor_faults() -> int:
    """Minor page faults of this process so far (``getrusage``)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
