"""One SFT run shared by the RL runs that start from it.

Study cells of one seed that differ only after SFT (estimator, reward, turn budgets) would each
repeat the same SFT. Here it runs once, into a folder of its own (``run``), and each cell's
workdir is seeded with a copy of its tokenizer and post-SFT checkpoint (``seed_workdir``: phase
SFT, every step done). The cell's trainer then resumes as after an interrupted run: its SFT loop
has no step left, and it goes on to the evaluation of the starting policy and RL from exactly
the params (and tokenizer) its own SFT would have produced.

The SFT's identity is a hash (``sft_key``) of the config fields the SFT phase reads
(``sft_fields``). The shared checkpoint's meta records the key and the fields; the trainer
checks them on every resume (``check_meta``), so an RL run cannot start from the SFT of
another config.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from typing import Any

import ml_collections

from meowjax.runtime import console, preemption, workdir_lock
from meowjax.trainers import data

RECORD = "sft.json"
# Fields of these sections that only RL, evaluation or the env workers' plumbing read: the
# rewards (the expert data records them, SFT rows do not use them), sampling temperatures.
ENV_UNREAD = ("reward_mode", "invalid_action_penalty", "num_workers", "step_timeout_s", "sandbox")
POLICY_UNREAD = ("temperature", "eval_temperature")


def sft_fields(c: ml_collections.ConfigDict) -> dict[str, Any]:
    """The config of the SFT phase: seed (init, minibatch order, augmentation), model,
    policy prompt fields, env options that shape observations, games (the SFT games are cut
    from game sets built from all of them, so all count), the sft section, the plan's number of
    demonstrations (not the budget that yields it), the length buckets and mesh of the update
    steps, and the training turn budget when prompts state it (``policy.state_budget``)."""
    d = json.loads(c.to_json_best_effort())
    fields = {
        "seed": d["seed"], "model": d["model"],
        "policy": {k: v for k, v in d["policy"].items() if k not in POLICY_UNREAD},
        "env": {k: v for k, v in d["env"].items() if k not in ENV_UNREAD},
        "games": {k: v for k, v in d["games"].items() if k != "gen_workers"},
        "sft": d["sft"], "sft_demos": data.budget_plan(c)["sft_demos"],
        "length_buckets": d["rollout"]["length_buckets"], "mesh": d["mesh"],
    }
    if c.policy.state_budget:
        fields["turns.max_turns"] = d["turns"]["max_turns"]
    return fields


def key_of(fields: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of the fields' canonical JSON."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def sft_key(c: ml_collections.ConfigDict) -> str:
    return key_of(sft_fields(c))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else k))
    return out


def differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Dotted names of the fields whose values differ (or exist in one only)."""
    fa, fb = _flat(a), _flat(b)
    return sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))


def check_meta(c: ml_collections.ConfigDict, meta: dict[str, Any], where: str) -> None:
    """ValueError when a checkpoint's recorded SFT (``meta['sft_key']``, set by ``run``) is
    not the SFT of ``c``; checkpoints without the record (a run's own SFT) pass."""
    if "sft_key" not in meta:
        return
    fields = sft_fields(c)
    key = key_of(fields)
    if meta["sft_key"] != key:
        diff = differing(meta.get("sft_fields", {}), fields)
        raise ValueError(
            f"{where} starts from a shared SFT of key {meta['sft_key']}, but this config's SFT "
            f"key is {key} (fields that differ: {', '.join(diff) or 'unknown'}). An RL run must "
            "start from the SFT of its own config: use a fresh workdir, so that it is seeded "
            "from the shared SFT folder of its key.")


def read_record(folder: str) -> dict[str, Any] | None:
    """The finished shared SFT's record (key, fields, steps, checkpoint step), or None."""
    path = os.path.join(folder, RECORD)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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
    from meowjax.trainers import loop
    from meowjax.trainers.registry import trainer_class
    trainer = trainer_class(c.policy.interface)(c, folder)
    try:
        state, _, meta = trainer.restore_state()
        if meta["phase"] != loop.SFT:
            raise ValueError(f"{folder} holds a run past SFT (phase {meta['phase']}), not a "
                             "shared SFT; delete it or choose another folder.")
        meta.update(sft_key=key, sft_fields=fields)
        with preemption.deferred():
            state = trainer._sft(state, meta)
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
