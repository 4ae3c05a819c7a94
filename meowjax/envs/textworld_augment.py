"""Entity-name augmentation of TextWorld expert trajectories.

A from-scratch agent trained on a few dozen games memorises their object names instead of
learning to copy names from the objective into its commands. Swapping every entity name of an
expert trajectory, consistently, for names drawn from other games (same entity type) forces the
copy skill. Names come from the game's .json (textworld's `infos`).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from meowjax.envs.base import Task

_ENTITY_TYPES = ("r", "d", "c", "s", "o", "k", "f")


def entity_names(task: Task) -> dict[str, list[str]]:
    """{entity type: [names]} of one TextWorld game (rooms r, doors d, containers c, ...)."""
    path = os.path.splitext(task.path)[0] + ".json"
    with open(path, encoding="utf-8") as f:
        infos = json.load(f)["infos"]
    out: dict[str, list[str]] = {}
    for _, info in infos:
        if info.get("name") and info.get("type") in _ENTITY_TYPES:
            out.setdefault(info["type"], []).append(info["name"])
    return out


def rename_trajectory(ex: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """The trajectory with every name in ``mapping`` replaced (longest first, one pass)."""
    if not mapping:
        return ex
    keys = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in keys) + r")\b", re.IGNORECASE)

    def sub(text: str) -> str:
        def repl(m):
            new = mapping[m.group(0).lower()] if m.group(0).lower() in mapping else m.group(0)
            return new.capitalize() if m.group(0)[:1].isupper() else new
        return pattern.sub(repl, text)

    return dict(objective=sub(ex["objective"]), observations=[sub(o) for o in ex["observations"]],
                actions=[sub(a) for a in ex["actions"]], rewards=list(ex["rewards"]),
                admissible=[[sub(a) for a in cmds] for cmds in ex["admissible"]])


def augment_experts(expert: list[dict[str, Any]], tasks: list[Task], copies: int,
                    rng: Any) -> list[dict[str, Any]]:
    """``copies`` renamed versions of every trajectory, names drawn from all games' pools."""
    if copies <= 0:
        return []
    per_game = [entity_names(t) for t in tasks]
    pool: dict[str, list[str]] = {}
    for names in per_game:
        for kind, ns in names.items():
            pool.setdefault(kind, []).extend(n for n in ns if n not in pool.get(kind, []))
    out = []
    for ex, names in zip(expert, per_game):
        for _ in range(copies):
            mapping, used = {}, set()
            for kind, ns in names.items():
                choices = [n for n in pool[kind] if n not in ns]
                for n in ns:
                    free = [c for c in choices if c not in used]
                    if free:
                        new = free[rng.integers(len(free))]
                        used.add(new)
                        mapping[n.lower()] = new
            out.append(rename_trajectory(ex, mapping))
    return out
