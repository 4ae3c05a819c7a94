"""meowjax.runtime: what a run needs around its steps — orbax checkpoints, metrics/TensorBoard,
placement on the mesh, host-memory tuning and the persistent XLA compile cache.

Depends on `models` and `sharding` only; `trainers` and the entry points use it.
"""
