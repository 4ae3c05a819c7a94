"""Metrics to TensorBoard event files, metrics.jsonl and absl DEBUG lines (host side, at log steps
only). The console shows those lines at ``--verbosity=1``; by default it shows the summaries of
``runtime.console`` instead."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np
from absl import logging
from tensorboard import summary as tb_summary


class MetricsWriter:
    """Writes scalars to ``workdir/tb`` (TensorBoard) and appends them to ``metrics.jsonl``.

    ``enabled=False`` (every process of a multi-process run but process 0, which holds the same
    numbers) writes nothing: one set of files per run."""

    def __init__(self, workdir: str, *, enabled: bool = True):
        self.enabled = enabled
        if not enabled:
            return
        self.tb = tb_summary.Writer(os.path.join(workdir, "tb"))
        self.jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a", encoding="utf-8")

    def write(self, step: int, metrics: Mapping[str, Any], *, log: bool = True) -> None:
        """Every scalar to both files; with ``log`` also one DEBUG line of them all."""
        if not self.enabled:
            return
        clean = {k: float(np.asarray(v)) for k, v in metrics.items()}
        for k, v in clean.items():
            self.tb.add_scalar(k, v, step=step)
        self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
        self.jsonl.flush()
        self.tb.flush()
        if log:
            logging.debug("step %d: %s", step,
                          ", ".join(f"{k}={v:.4g}" for k, v in sorted(clean.items())))

    def close(self) -> None:
        if not self.enabled:
            return
        self.tb.close()
        self.jsonl.close()


# jax's persistent-cache events (jax/_src/compiler.py)
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"


class CompileClock:
    """Counts XLA compilations and their seconds (jax.monitoring events), process-wide.

    ``snapshot()`` returns ``{"compiles": n, "compile_s": s, "trace_s": t, "cache_hits": h,
    "cache_saved_s": v}`` since construction: backend compiles (one per jitted function and
    input shape; with the persistent cache on (``xla_cache``), ``h`` of them were loaded from it
    instead, saving ``v`` seconds of compiling by jax's own account), their seconds, and the
    seconds spent tracing and lowering to MLIR before them. One listener of each kind is
    registered per process and shared.
    """

    _totals: dict[str, float] = {"compiles": 0, "compile_s": 0.0, "trace_s": 0.0,
                                 "cache_hits": 0, "cache_saved_s": 0.0}
    _registered = False

    def __init__(self):
        if not CompileClock._registered:
            from jax import monitoring
            from jax._src import dispatch  # the event names jax emits
            names = {dispatch.BACKEND_COMPILE_EVENT: "compile_s",
                     dispatch.JAXPR_TRACE_EVENT: "trace_s",
                     dispatch.JAXPR_TO_MLIR_MODULE_EVENT: "trace_s",
                     CACHE_SAVED_EVENT: "cache_saved_s"}

            def listen(event: str, secs: float, **_) -> None:
                key = names.get(event)
                if key:
                    CompileClock._totals[key] += secs
                    if key == "compile_s":
                        CompileClock._totals["compiles"] += 1

            def count(event: str, **_) -> None:
                if event == CACHE_HIT_EVENT:
                    CompileClock._totals["cache_hits"] += 1

            monitoring.register_event_duration_secs_listener(listen)
            monitoring.register_event_listener(count)
            CompileClock._registered = True
        self._start = dict(CompileClock._totals)

    def snapshot(self) -> dict[str, float]:
        return {k: CompileClock._totals[k] - self._start[k] for k in self._start}
