"""The identity of an SFT phase: a hash of the config fields it reads.

``meowjax.trainers.shared_sft`` runs one SFT for the RL runs that start from it and records this
key (and the fields) in the checkpoint's meta; the trainer checks them on every resume
(``check_meta``), so an RL run cannot start from the SFT of another config.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import ml_collections

from meowjax.trainers import data

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
