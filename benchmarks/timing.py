"""Timing helpers shared by the benchmarks, and the machine's measured matmul peak.

    best time       min over repeats of one synced call (after a warm-up compile)
    interleaved     variants timed a, b, a, b, ... so machine load hits each alike
    peak            2 n^3 / t of an n x n @ n x n product, the faster of jnp and torch
    A/A control     the reference timed twice in the same rounds: the run's noise
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import jax
import jax.numpy as jnp


def time_best(fn: Callable[[], object], repeats: int, sync: Callable[[object], object],
              warmup: bool = True) -> float:
    """Best wall time of `repeats` calls after one warm-up (compile), syncing each result."""
    if warmup:
        sync(fn())
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        sync(fn())
        best = min(best, time.perf_counter() - start)
    return best


def time_interleaved(runs: dict[str, Callable[[], object]], repeats: int, block: int = 1,
                     before: dict[str, Callable[[], object]] | None = None,
                     syncs: dict[str, Callable[[object], object]] | None = None
                     ) -> dict[str, float]:
    """Best seconds per variant over ``repeats`` rounds, interleaved (a, b, a, b, ...) so machine
    load hits every variant alike. The runs must already be compiled. With ``block`` > 1 a
    round is ``before[name]()`` (untimed) then ``block`` consecutive calls of which the first
    is not timed: for settings whose effect needs a step to settle (the host allocator's).
    ``syncs[name]`` waits for that run's result (default ``jax.block_until_ready``; torch's
    side passes its own)."""
    seconds = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            sync = (syncs or {}).get(name, jax.block_until_ready)
            if before and name in before:
                before[name]()
            if block > 1:
                sync(run())
            for _ in range(max(block - 1, 1)):
                seconds[name] = min(seconds[name], time_best(run, 1, sync, warmup=False))
    return seconds


def control_lines(controls: list[str]) -> list[str]:
    """The A/A paragraph a ``--control`` run adds under its Markdown table (none without one):
    ``controls`` are the per-row "reference / control" readings."""
    if not controls:
        return []
    return ["", "A/A control (`--control`: the reference compiled twice, timed in the same "
            "rounds): " + "; ".join(controls) + ". A speedup no farther from 1.00x than that "
            "is noise."]


def torch_sync(device: str) -> Callable[[object], None]:
    """A sync for ``time_best`` / ``time_interleaved`` on torch's side: waits for the GPU's
    queue on a CUDA ``device`` (CPU ops are synchronous)."""
    import torch

    def sync(_) -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return sync


@dataclasses.dataclass(frozen=True)
class MatmulPeak:
    """The machine's measured matmul peak: the faster of jnp's and torch's n x n product
    (each library's best of a few), so MFU is judged against the best GEMM on the machine,
    not against our own library's."""

    n: int
    dtype: str
    jnp_flops: float
    torch_flops: float | None = None

    @property
    def flops(self) -> float:
        return max(self.jnp_flops, self.torch_flops or 0.0)

    def describe(self) -> str:
        torch_part = ("not measured" if self.torch_flops is None
                      else f"{self.torch_flops / 1e9:.1f}")
        return (f"matmul peak ({self.n}^3, {self.dtype}) {self.flops / 1e9:.1f} GFLOP/s, the "
                f"faster of jnp {self.jnp_flops / 1e9:.1f} and torch {torch_part}")


def matmul_peak(n: int = 2048, dtype: str = "float32", repeats: int = 5) -> float:
    """Measured FLOP/s of an n x n @ n x n matmul in jnp: 2 n^3 / best time."""
    a = jax.random.normal(jax.random.key(1), (n, n), jnp.dtype(dtype))
    b = jax.random.normal(jax.random.key(2), (n, n), jnp.dtype(dtype))
    mm = jax.jit(jnp.matmul)
    seconds = time_best(lambda: mm(a, b), repeats, jax.block_until_ready)
    return 2.0 * n ** 3 / seconds


def torch_matmul_peak(n: int = 2048, dtype: str = "float32", device: str = "cpu",
                      repeats: int = 5) -> float:
    """Measured FLOP/s of an n x n @ n x n ``torch.matmul`` on ``device``: 2 n^3 / best time."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device=device, dtype=getattr(torch, dtype))
            for _ in range(2))

    with torch.no_grad():
        seconds = time_best(lambda: torch.matmul(a, b), repeats, torch_sync(device))
    return 2.0 * n ** 3 / seconds


def measure_peak(n: int, dtype: str, with_torch: bool, device: str = "cpu") -> MatmulPeak:
    """jnp's and (``with_torch``) torch's matmul peak, measured back to back."""
    return MatmulPeak(n, dtype, matmul_peak(n, dtype),
                      torch_matmul_peak(n, dtype, device) if with_torch else None)
