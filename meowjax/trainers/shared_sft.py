"""One SFT run shared by the RL runs that start from it.

Study cells of one seed that differ only after SFT (estimator, reward, turn budgets) would each
repeat the same SFT. Here it runs once, into a folder of its own (``run``), and each cell's
workdir is seeded with a copy of its tokenizer and post-SFT checkpoint (``seed_workdir``: phase
SFT, every step done). The cell's trainer then resumes as after an interrupted run: its SFT loop
has no step left, and it goes on to the evaluation of the starting policy and RL from exactly
the params (and tokenizer) its own SFT would have produced.

The SFT's identity is a hash (``sft_key``) of the config fields the SFT phase reads
(``sft_fields``). The shared checkpoint's meta records the key and the fields; the trainer
checks them on every resume (``sft_key.check_meta``), so an RL run cannot start from the SFT of
another config.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

import ml_collections

from meowjax.runtime import console, preemption, workdir_lock
from meowjax.trainers.sft_key import differing, key_of, sft_fields, sft_key

RECORD = "sft.json"


def read_record(folder: str) -> dict[str, Any] | None:
    """The finished shared SFT's record (key, fields, steps, checkpoint step), or None. Its
    ``folder`` is where it was read now (the one written may be relative to another working
    directory, or the folder may have moved)."""
    path = os.path.join(folder, RECORD)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f), folder=folder)


def run(c: ml_collections.ConfigDict, folder: str) -> dict[str, Any]:
    """Runs the SFT phase of ``c`` into ``folder`` unless it is done there; returns the record
    (with ``wall_s``: the seconds spent now, 0 when reused). Resumable as a training run is
    (``runtime.preemption``: a SIGTERM saves the SFT state and raises ``Preempted``)."""
    fields = sft_fields(c)
    key = key_of(fields)
    rec = read_record(folder)
    if rec is None:
        t0 = time.time()
        with workdir_lock.hold(folder), preemption.on_sigterm():
            rec = _train(c, folder, fields, key)
        rec = dict(rec, wall_s=time.time() - t0)
        console.info("shared SFT %s: %d steps in %s (%.1f min)", key, rec["sft_steps"], folder,
                     rec["wall_s"] / 60)
        return rec
    if rec["key"] != key:
        raise ValueError(f"{folder} holds the SFT of key {rec['key']}, not {key} (fields that "
                         f"differ: {', '.join(differing(rec['fields'], fields))}); name the "
                         "shared SFT folder by its key, or delete that folder.")
    return dict(rec, wall_s=0.0)


def _train(c, folder: str, fields: dict[str, Any], key: str) -> dict[str, Any]:
    from meowjax.trainers import schedule
    from meowjax.trainers.loop import AgentTrainer
    from meowjax.trainers.train_state import SFT
    trainer = AgentTrainer(c, folder)
    try:
        state, _, meta = trainer.restore_state()
        if meta["phase"] != SFT:
            raise ValueError(f"{folder} holds a run past SFT (phase {meta['phase']}), not a "
                             "shared SFT; delete it or choose another folder.")
        meta.update(sft_key=key, sft_fields=fields)
        with preemption.deferred():
            state = schedule.sft(trainer, state, meta)
            trainer._save(state, state.params, meta)
        if trainer.preempted:
            raise preemption.Preempted(f"SIGTERM during the shared SFT at step "
                                       f"{meta['sft_step']}; saved.")
        rec = {"key": key, "folder": folder, "sft_steps": trainer.sft_steps,
               "sft_rows": len(trainer.sft_rows), "plan": trainer.plan,
               "ckpt_step": int(meta["ckpt_index"]), "fields": fields}
    finally:
        trainer.ckpt.close()
        trainer.writer.close()
    tmp = os.path.join(folder, RECORD + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1)
    os.replace(tmp, os.path.join(folder, RECORD))
    return rec


def has_checkpoint(workdir: str) -> bool:
    folder = os.path.join(workdir, "checkpoints")
    return os.path.isdir(folder) and any(n.isdigit() for n in os.listdir(folder))


def seed_workdir(c: ml_collections.ConfigDict, rec: dict[str, Any], workdir: str) -> bool:
    """Copies the shared SFT's tokenizer and post-SFT checkpoint into ``workdir`` so that the
    run of ``c`` there starts RL from it; returns whether it copied. A workdir with a checkpoint
    already (a cell resumed) is left as it is: the trainer checks its key on restore."""
    if has_checkpoint(workdir):
        return False
    key = sft_key(c)
    if rec["key"] != key:
        raise ValueError(f"The shared SFT {rec['folder']} has key {rec['key']}, this config's "
                         f"SFT key is {key}; seed the workdir from the SFT folder of its key.")
    shutil.copytree(os.path.join(rec["folder"], "tokenizer"), os.path.join(workdir, "tokenizer"),
                    dirs_exist_ok=True)
    step = str(rec["ckpt_step"])
    ckpts = os.path.join(workdir, "checkpoints")
    tmp = os.path.join(ckpts, f".copy-{step}")   # not a step name: invisible until renamed
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    shutil.copytree(os.path.join(rec["folder"], "checkpoints", step), tmp)
    os.replace(tmp, os.path.join(ckpts, step))
    return True
