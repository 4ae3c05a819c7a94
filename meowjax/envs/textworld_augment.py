"""Entity-name augmentation of TextWorld expert trajectories.

A from-scratch agent trained on a few dozen games memorises their object names instead of
learning to copy names from the objective into its commands. Swapping every entity name of an
expert trajectory, consistently, for names drawn from other games (same entity type) forces the
copy skill. Names come from the game's .json (textworld's `infos`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable

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


def renamer(mapping: dict[str, str]) -> Callable[[str], str]:
    """text -> text with every name in ``mapping`` (lower-cased keys) replaced, whole words,
    longest first, in one pass; a capitalised name stays capitalised. Identity if empty."""
    if not mapping:
        return lambda text: text
    keys = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in keys) + r")\b", re.IGNORECASE)

    def repl(m):
        new = mapping.get(m.group(0).lower(), m.group(0))
        return new.capitalize() if m.group(0)[:1].isupper() else new

    return lambda text: pattern.sub(repl, text)


def rename_trajectory(ex: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """The trajectory with every name in ``mapping`` replaced (longest first, one pass)."""
    if not mapping:
        return ex
    sub = renamer(mapping)
    return dict(objective=sub(ex["objective"]), observations=[sub(o) for o in ex["observations"]],
                actions=[sub(a) for a in ex["actions"]], rewards=list(ex["rewards"]),
                admissible=[[sub(a) for a in cmds] for cmds in ex["admissible"]])


def name_pool(per_game: list[dict[str, list[str]]]) -> dict[str, list[str]]:
    """{entity type: distinct names over all games}, in first-seen order."""
    pool: dict[str, list[str]] = {}
    for names in per_game:
        for kind, ns in names.items():
            pool.setdefault(kind, []).extend(n for n in ns if n not in pool.get(kind, []))
    return pool


def draw_mapping(names: dict[str, list[str]], pool: dict[str, list[str]], rng: Any, *,
                 invertible: bool = False) -> dict[str, str]:
    """{old name (lower-cased): new name}: each entity of one game gets a distinct name of its
    type from ``pool`` that the game does not use for that type; ``invertible``: for no type,
    so the mapping can be inverted on the agent's commands."""
    every = {n.lower() for ns in names.values() for n in ns}
    mapping, used = {}, set()
    for kind, ns in names.items():
        choices = [n for n in pool.get(kind, [])
                   if (n.lower() not in every if invertible else n not in ns)]
        for n in ns:
            free = [c for c in choices if c not in used]
            if free:
                new = free[rng.integers(len(free))]
                used.add(new)
                mapping[n.lower()] = new
    return mapping


def augment_experts(expert: list[dict[str, Any]], tasks: list[Task], copies: int,
                    rng: Any) -> list[dict[str, Any]]:
    """``copies`` renamed versions of every trajectory, names drawn from all games' pools."""
    if copies <= 0:
        return []
    per_game = [entity_names(t) for t in tasks]
    pool = name_pool(per_game)
    return [rename_trajectory(ex, draw_mapping(names, pool, rng))
            for ex, names in zip(expert, per_game) for _ in range(copies)]


def task_renamer(tasks: list[Task]) -> Callable[[Task, Any], Task]:
    """(task, numpy rng) -> the task with fresh entity names for its episodes.

    The names come from the pool of ``tasks``; the mapping rides in ``task.meta["rename"]``,
    which ``TextWorldEnv`` applies to everything the agent reads (objective, observations,
    admissible commands, walkthrough) and inverts on the agent's commands. The game itself is
    unchanged, so one generated game yields many surface forms during RL.
    """
    pool = name_pool([entity_names(t) for t in tasks])

    def rename(task: Task, rng: Any) -> Task:
        mapping = draw_mapping(entity_names(task), pool, rng, invertible=True)
        return dataclasses.replace(task, meta={**task.meta, "rename": mapping})

    return rename
