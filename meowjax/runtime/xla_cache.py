"""JAX's persistent compilation cache, switched on by the experiment entry points.

With a cache folder set, every XLA executable that took at least ``min_compile_s`` to compile
is written there, keyed by (program, input shapes and shardings, compile options, backend and
its version); a later process that asks for the same program loads it instead of compiling.
Nothing about a run's numerics changes: it is the same executable. Runs that repeat shapes
(sweeps over seeds or estimators' hyper-parameters, a fresh workdir with the same config,
``experiments/evaluate.py`` after ``experiments/train.py``) skip those compiles; the run's
"XLA: ..." log line counts the hits (``metrics_log.CompileClock``).

The cache is trusted code: keep it in a folder only you write to (the default is the
git-ignored ``data/xla_cache`` of the checkout, beside the game cache).
"""

from __future__ import annotations

import os

DEFAULT_DIR = "data/xla_cache"


def enable(cache_dir: str, min_compile_s: float = 0.25) -> str:
    """Turns the persistent cache on at ``cache_dir`` (created if missing); "" leaves it off.

    Must run before the first compile of the process. Returns the absolute folder ("" if off).
    """
    if not cache_dir:
        return ""
    import jax

    path = os.path.abspath(os.path.expanduser(cache_dir))
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_s))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
