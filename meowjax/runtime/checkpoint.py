"""Orbax checkpoints of the whole run state, for exact resume.

A checkpoint holds the train state pytree (params, optimizer state, critic, step), the frozen
reference params, and a JSON record of the host-side loop position (phase, iteration, metrics
so far). Host randomness is derived from (seed, phase, iteration), so the position is enough to
replay the same data order and sampling after a restart.

Only committed checkpoints are ever read: orbax (0.12, local disk) writes a step into
``<step>.orbax-checkpoint-tmp-<time>/`` and renames it to ``<step>/`` once every file is written
(``AtomicRenameTemporaryPath.finalize``); ``CheckpointManager`` lists only folders whose name
is a bare step number (``step._build_metadata`` -> ``is_path_finalized``), so a save cut short
by a kill is invisible, and its temporary folder is deleted when the next training run starts.

Orbax does not notice every damaged file (a changed byte of an array's data file loads as a
wrong number), so after orbax commits a step this module records each file's size and CRC-32 in
``<step>/meowjax_sums.json`` and checks them before loading. ``restore_newest`` then falls back
to the newest checkpoint that loads, with a warning naming each one skipped and why.

Several processes (``runtime.multihost``): every call here is made by all of them. Orbax writes
each process's shards and process 0 the metadata and the commit; process 0 alone then writes the
sums and moves damaged steps aside, the others waiting at a barrier. Restoring onto another
mesh (another process count) reads each array's saved shards into the new shardings.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any, Callable

import jax
import orbax.checkpoint as ocp
from absl import logging

from meowjax.runtime import multihost

SUMS = "meowjax_sums.json"
DAMAGED_SUFFIX = ".damaged"


def file_sums(step_dir: str) -> dict[str, list[int]]:
    """``{relative path: [size, crc32]}`` of every file under ``step_dir`` but the sums file."""
    out = {}
    for root, _, files in os.walk(step_dir):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, step_dir)
            if rel == SUMS:
                continue
            crc = 0
            with open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    crc = zlib.crc32(chunk, crc)
            out[rel] = [os.path.getsize(path), crc]
    return out


def write_sums(step_dir: str) -> None:
    """Records the committed step's file sums (atomically: a half-written sums file would make
    an intact checkpoint look damaged)."""
    sums = file_sums(step_dir)
    tmp = os.path.join(step_dir, f"{SUMS}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(sums, f)
    os.replace(tmp, os.path.join(step_dir, SUMS))


def sums_problem(step_dir: str) -> str | None:
    """What differs from the recorded sums (a missing, resized or changed file), or None.

    A checkpoint without a sums file (written before sums existed, or killed between orbax's
    commit and the sums) is left to orbax's own checks."""
    path = os.path.join(step_dir, SUMS)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            want = json.load(f)
    except (OSError, ValueError) as e:
        return f"its {SUMS} is unreadable ({e})"
    have = file_sums(step_dir)
    for rel, (size, crc) in sorted(want.items()):
        if rel not in have:
            return f"{rel} is missing"
        if have[rel][0] != size:
            return f"{rel} has {have[rel][0]} bytes, {size} were written"
        if have[rel][1] != crc:
            return f"{rel} changed since it was written (CRC-32 differs)"
    return None


class Checkpointer:
    """Saves/restores ``{"state": pytree, "meta": json}`` under ``workdir/checkpoints``."""

    def __init__(self, workdir: str, max_to_keep: int = 2, *, writer: bool = True):
        """``writer``: the run that saves here (it holds the workdir lock) deletes temporary
        folders left by a save cut short; a reader (evaluation beside a running training)
        leaves them, since one may be a save in progress."""
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 cleanup_tmp_directories=writer),
        )

    def step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(step))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Saves and waits for orbax's commit, then records the file sums."""
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
        self.manager.wait_until_finished()
        if jax.process_index() == 0:
            write_sums(self.step_dir(step))
        multihost.barrier(f"checkpoint {step}: sums written")

    def read_meta(self, step: int | None = None) -> dict[str, Any]:
        """The JSON record of a checkpoint (latest by default), without loading arrays."""
        step = self.latest_step() if step is None else step
        out = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(out["meta"])

    def restore(self, abstract_state: Any, step: int | None = None, *,
                verify: bool = True, partial: bool = False) -> tuple[Any, dict[str, Any]]:
        """Restores into the structure/shardings of ``abstract_state``; with ``partial``, only
        the leaves ``abstract_state`` names (e.g. ``{"state": {"params": ...}}``: the policy
        without its optimizer), the rest of the checkpoint left unread.

        A checkpoint that does not match (other model size, corrupt files) raises a ValueError
        naming the checkpoint folder and what to do. ``verify=False`` skips the file sums (the
        caller has just checked them).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"No checkpoint under {self.directory}.")
        if verify:
            self.check_sums(step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
        if partial:
            state_args = ocp.args.PyTreeRestore(
                item=abstract, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
                partial_restore=True)
        else:
            state_args = ocp.args.StandardRestore(abstract)
        try:
            out = self.manager.restore(step, args=ocp.args.Composite(
                state=state_args, meta=ocp.args.JsonRestore()))
        except Exception as e:  # orbax raises many types for a mismatched or broken checkpoint
            raise ValueError(
                f"Cannot restore checkpoint step {step} from {self.directory}: {e}. It was written "
                "by a different config (model size, estimator) or is damaged; use a fresh "
                "--workdir or delete that step's folder.") from e
        return out["state"], dict(out["meta"])

    def restore_newest(self, abstract_for: Callable[[dict[str, Any]], Any], *,
                       set_aside: bool = True, partial: bool = False
                       ) -> tuple[Any, dict[str, Any]]:
        """(state, meta) of the newest checkpoint that loads; ``abstract_for(meta)`` gives the
        structure to restore into (it depends on the phase the checkpoint was written in).

        Each newer checkpoint that does not load is named in a warning with the reason and, once
        an older one has loaded (so the config matches: the newer one is damaged, not foreign),
        renamed to ``<step>.damaged`` with ``set_aside``: kept for inspection, out of the way of
        the step numbers the resumed run saves next. If none loads, a ValueError lists each
        checkpoint's reason and nothing is renamed."""
        failed: list[tuple[int, str]] = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                self.check_sums(step)
                state, meta = self.restore(abstract_for(self._meta_or_raise(step)), step,
                                           verify=False, partial=partial)
            except ValueError as e:
                logging.warning("Skipping checkpoint %s: %s", self.step_dir(step), e)
                failed.append((step, str(e)))
                continue
            if failed:
                logging.warning("Resuming from the older checkpoint %s instead.",
                                self.step_dir(step))
                if set_aside:
                    self._set_aside([s for s, _ in failed])
            return state, meta
        raise ValueError(f"No checkpoint under {self.directory} loads: " + "; ".join(
            f"step {s}: {why}" for s, why in failed) + ". Use a fresh --workdir, or move that "
            "folder away to start over.")

    def check_sums(self, step: int) -> None:
        """ValueError naming the damaged file of ``step``, if its recorded sums differ."""
        problem = sums_problem(self.step_dir(step))
        if problem:
            raise ValueError(f"Checkpoint {self.step_dir(step)} is damaged: {problem}.")

    def _meta_or_raise(self, step: int) -> dict[str, Any]:
        """The step's meta, damage reported as a ValueError (orbax's JSON reader raises
        UnicodeDecodeError, JSONDecodeError or FileNotFoundError)."""
        try:
            return self.read_meta(step)
        except Exception as e:  # any failure to read the record is damage to this step
            raise ValueError(f"Cannot read the record of checkpoint {self.step_dir(step)}: "
                             f"{type(e).__name__}: {e}") from e

    def _set_aside(self, steps: list[int]) -> None:
        if jax.process_index() != 0:
            multihost.barrier("damaged checkpoints set aside")
            self.manager.reload()
            return
        for step in steps:
            dst = self.step_dir(step) + DAMAGED_SUFFIX
            n = 1
            while os.path.exists(dst):
                n += 1
                dst = f"{self.step_dir(step)}{DAMAGED_SUFFIX}{n}"
            os.replace(self.step_dir(step), dst)
            logging.warning("Moved the damaged checkpoint to %s (delete it when not needed).", dst)
        multihost.barrier("damaged checkpoints set aside")
        self.manager.reload()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
