"""Orbax checkpoints of the whole run state, for exact resume.

A checkpoint holds the train state pytree (params, optimizer state, critic, step), the frozen
reference params, and a JSON record of the host-side loop position (phase, iteration, metrics
so far). Host randomness is derived from (seed, phase, iteration), so the position is enough to
replay the same data order and sampling after a restart.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    """Saves/restores ``{"state": pytree, "meta": json}`` under ``workdir/checkpoints``."""

    def __init__(self, workdir: str, max_to_keep: int = 2):
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any], *, wait: bool = True) -> None:
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
        if wait:
            self.manager.wait_until_finished()

    def read_meta(self, step: int | None = None) -> dict[str, Any]:
        """The JSON record of a checkpoint (latest by default), without loading arrays."""
        step = self.latest_step() if step is None else step
        out = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"])

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Restores into the structure/shardings of ``abstract_state``.

        A checkpoint that does not match (other model size, corrupt files) raises a ValueError
        naming the checkpoint folder and what to do.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"No checkpoint under {self.directory}.")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
        try:
            out = self.manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
        except Exception as e:  # orbax raises many types for a mismatched or broken checkpoint
            raise ValueError(
                f"Cannot restore checkpoint step {step} from {self.directory}: {e}. It was written "
                "by a different config (model size, estimator) or is damaged; use a fresh "
                "--workdir or delete that step's folder.") from e
        return out["state"], dict(out["meta"])

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
