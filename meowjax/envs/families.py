"""The built-in environment families: TextWorld, ALFWorld and code repair ("swe").

Each record says how a run's config becomes the family's env options, task sets (train / sft /
eval / eval_hard, disjoint seed ranges), difficulty names, system prompt and augmentation. The
config is the run's ``ml_collections.ConfigDict`` (``c.env``, ``c.games``, ``c.seed``); held-out
tasks come from ``games.eval_split`` ("test" for reported numbers, "valid" while tuning).
"""

from __future__ import annotations

import os
import re
from typing import Any

from meowjax.envs import textworld_augment, textworld_games
from meowjax.envs.base import Task
from meowjax.envs.records import Family, common_env_kwargs
from meowjax.envs.swe.tools import SYSTEM_PROMPT as SWE_SYSTEM_PROMPT


# -- TextWorld -----------------------------------------------------------------------------------
def textworld_env_kwargs(env: Any, admissible: bool) -> dict[str, Any]:
    return dict(common_env_kwargs(env, admissible), compact=env.compact)


# The learning-curve games ("curve"): validation seeds from this offset on, disjoint from the
# validation games a tuning run evaluates (those start at the range's first seed).
CURVE_SEED_OFFSET = 9000


def textworld_spec(c: Any, split: str, num: int, hard: bool | str,
                   seed_offset: int = 0) -> textworld_games.GameSetSpec:
    """The game set of ``split`` at the training difficulty (``games.world_size`` ...), the
    harder one (``games.hard_world_size`` ...) or, ``hard="transfer"``, the transfer one
    (``games.transfer_world_size`` ...)."""
    g = c.games
    if hard == "transfer":
        w, o, q = g.transfer_world_size, g.transfer_nb_objects, g.transfer_quest_length
    elif hard:
        w, o, q = g.hard_world_size, g.hard_nb_objects, g.hard_quest_length
    else:
        w, o, q = g.world_size, g.nb_objects, g.quest_length
    return textworld_games.GameSetSpec(kind=g.kind, world_size=w, nb_objects=o, quest_length=q,
                                       split=split, num_games=num, level=g.level,
                                       seed_offset=seed_offset)


def textworld_difficulty_name(c: Any, hard: bool | str) -> str:
    """A game-set name, e.g. "w2-o3-q4"."""
    return textworld_spec(c, "train", 0, hard).name


def textworld_task_sets(c: Any) -> dict[str, list[Task]]:
    """The RL pool ("train") is ``num_train`` games of the training difficulty plus
    ``num_train_hard`` of the harder one, from the train seed range (disjoint from every
    held-out game). "eval_transfer": ``num_eval_transfer`` held-out games of the transfer
    difficulty; "curve": ``num_curve`` validation games of the harder difficulty (seeds from
    ``CURVE_SEED_OFFSET`` on), played during RL for the learning curve."""
    g = c.games
    wanted = {"train": textworld_spec(c, "train", g.num_train, False),
              "train_hard": textworld_spec(c, "train", g.num_train_hard, True),
              "sft": textworld_spec(c, "sft", g.num_sft, False),
              "eval": textworld_spec(c, g.eval_split, g.num_eval, False),
              "eval_hard": textworld_spec(c, g.eval_split, g.num_eval_hard, True),
              "eval_transfer": textworld_spec(c, g.eval_split, g.num_eval_transfer, "transfer"),
              "curve": textworld_spec(c, "valid", g.num_curve, True, CURVE_SEED_OFFSET)}
    out = {name: (textworld_games.generate_games(spec, g.cache_dir, workers=g.gen_workers)
                  if spec.num_games else [])
           for name, spec in wanted.items()}
    out["train"] = out["train"] + out.pop("train_hard")
    return out


def textworld_rl_pool(c: Any) -> str:
    """The difficulty mix of ``games.num_train[_hard]``, e.g. "64 w2-o3-q4 + 8 w3-o5-q6 ..."."""
    g = c.games
    pool = f"{g.num_train} {textworld_difficulty_name(c, False)}"
    if g.num_train_hard:
        pool += f" + {g.num_train_hard} {textworld_difficulty_name(c, True)}"
    return pool + " training games"


_DIFFICULTY = re.compile(r"^w(\d+)-o(\d+)-q(\d+)$")


def parse_difficulty(name: str) -> tuple[int, int, int]:
    """``"w2-o3-q4"`` -> (world_size, nb_objects, quest_length)."""
    m = _DIFFICULTY.match(name)
    if not m:
        raise ValueError(f"TextWorld difficulty {name!r} is not "
                         "w{world}-o{objects}-q{quest}, e.g. w2-o3-q4.")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def textworld_named_sets(c: Any, name: str, num_games: int | None,
                         data_root: str = "") -> list[Task]:
    """``"w4-o6-q8:test"``: custom games of that difficulty and split, generated into
    ``games.cache_dir`` on first use (``num_games`` None: ``games.num_eval``)."""
    del data_root   # generated, never read from a release
    parts = name.split(":")
    if len(parts) != 2:
        raise ValueError(f"TextWorld game set {name!r} is not <w-o-q>:<split>, e.g. "
                         "textworld:w4-o6-q8:test.")
    w, o, q = parse_difficulty(parts[0])
    if parts[1] not in textworld_games.SPLIT_SEED_RANGES:
        raise ValueError(f"split {parts[1]!r} of {name!r}; choose one of "
                         f"{sorted(textworld_games.SPLIT_SEED_RANGES)}.")
    g = c.games
    spec = textworld_games.GameSetSpec(kind="custom", world_size=w, nb_objects=o, quest_length=q,
                                       split=parts[1], num_games=num_games or g.num_eval)
    return textworld_games.generate_games(spec, g.cache_dir, workers=g.gen_workers)


TEXTWORLD = Family(
    name="textworld", env="meowjax.envs.textworld_env:TextWorldEnv",
    env_kwargs=textworld_env_kwargs, task_sets=textworld_task_sets,
    difficulty_name=textworld_difficulty_name, rl_pool=textworld_rl_pool,
    augment=textworld_augment.augment_experts, harder_rl_pool=True,
    renamer=textworld_augment.task_renamer, named_sets=textworld_named_sets)


# -- ALFWorld ------------------------------------------------------------------------------------
# Generated ALFWorld games depend on (this seed, split, task type, index), not on the run's seed:
# every seed of a config trains and is evaluated on the same games, as TextWorld's seed ranges.
ALFWORLD_GAME_SEED = 0


def alfworld_eval_split(g: Any, hard: bool) -> str:
    """ALFWorld's held-out split: new games in the training layouts ("seen" rooms) or, harder,
    in layouts no training game uses ("unseen" rooms, ALFRED's test scenes); ``valid_*`` while
    tuning, ``test_*`` for reported numbers."""
    stage = "valid" if g.eval_split == "valid" else "test"
    return f"{stage}_{'unseen' if hard else 'seen'}"


def alfworld_difficulty_name(c: Any, hard: bool) -> str:
    return f"ALFWorld {alfworld_eval_split(c.games, hard)}"


def _interleaved(tasks: list[Task]) -> list[Task]:
    """Games ordered index-major (one of each task type, then the next), so that any prefix
    (the SFT demonstrations a budget buys) covers the task types evenly."""
    order = {t: i for i, t in enumerate(dict.fromkeys(x.meta["task_type"] for x in tasks))}
    seen: dict[str, int] = {}
    keyed = []
    for x in tasks:
        k = seen.get(x.meta["task_type"], 0)
        seen[x.meta["task_type"]] = k + 1
        keyed.append(((k, order[x.meta["task_type"]]), x))
    return [x for _, x in sorted(keyed, key=lambda kx: kx[0])]


def alfworld_task_sets(c: Any) -> dict[str, list[Task]]:
    """``games.num_*`` games spread evenly over the six task types (interleaved); held out:
    seen rooms ("eval") and unseen rooms ("eval_hard"); "curve": ``num_curve`` validation games
    in unseen rooms, played during RL for the learning curve."""
    from meowjax.envs import alfworld_gen
    g = c.games
    plan = {"train": ("train", g.num_train), "sft": ("sft", g.num_sft),
            "eval": (alfworld_eval_split(g, False), g.num_eval),
            "eval_hard": (alfworld_eval_split(g, True), g.num_eval_hard),
            "curve": ("curve_unseen", g.num_curve)}
    out = {}
    for name, (split, num) in plan.items():
        per_type = -(-num // len(alfworld_gen.TASK_TYPES))
        out[name] = (_interleaved(alfworld_gen.generate_alfworld_games(
            os.path.join(g.cache_dir, "alfworld", split), num_per_type=per_type,
            split=split, num_workers=g.gen_workers, seed=ALFWORLD_GAME_SEED))[:num]
            if num else [])
    if g.expert == "handcoded":   # demonstrations that search (envs.alfworld_expert)
        from meowjax.envs.alfworld_expert import with_searching_walkthroughs
        out["sft"] = with_searching_walkthroughs(out["sft"])
    return out


def alfworld_named_sets(c: Any, name: str, num_games: int | None,
                        data_root: str = "") -> list[Task]:
    """``"valid_unseen[:pick_and_place_simple,look_at_obj_in_light]"``: the released games of a
    split under ``data_root`` (the folder holding json_2.1.1/), optionally of some task types."""
    del c
    from meowjax.envs.alfworld_env import load_alfworld_tasks
    parts = name.split(":")
    if not data_root:
        raise ValueError(f"alfworld:{name} needs --alfworld_root (the folder holding "
                         "json_2.1.1/).")
    if len(parts) > 2:
        raise ValueError(f"ALFWorld game set {name!r} is not <split>[:<task types>].")
    types = parts[1].split(",") if len(parts) == 2 and parts[1] else None
    tasks = load_alfworld_tasks(data_root, parts[0], types)
    return tasks[:num_games] if num_games else tasks


ALFWORLD = Family(
    name="alfworld", env="meowjax.envs.alfworld_env:AlfWorldEnv",
    task_sets=alfworld_task_sets, difficulty_name=alfworld_difficulty_name,
    named_sets=alfworld_named_sets, experts=("planner", "handcoded"))


# -- code repair ---------------------------------------------------------------------------------
def swe_env_kwargs(env: Any, admissible: bool) -> dict[str, Any]:
    """SweEnv takes ``reward`` (its own modes), the sandbox mode, and lists no admissible
    commands."""
    return dict(reward=env.reward_mode, invalid_action_penalty=env.invalid_action_penalty,
                sandbox=env.sandbox)


def swe_tier(g: Any, hard: bool) -> int:
    """The code-repair tier of the training difficulty (games.level) or the next one, capped at
    the last tier of `swe.tasks.TIERS`."""
    from meowjax.envs.swe import tasks as swe_tasks
    return min(g.level + 1, max(swe_tasks.TIERS)) if hard else g.level


def swe_difficulty_name(c: Any, hard: bool) -> str:
    return f"code-repair tier {swe_tier(c.games, hard)}"


def swe_task_sets(c: Any) -> dict[str, list[Task]]:
    """Tier ``games.level`` tasks; the harder split is the next tier."""
    from meowjax.envs.swe import tasks as swe_tasks
    g = c.games
    plan = {"train": ("train", g.num_train, g.level), "sft": ("sft", g.num_sft, g.level),
            "eval": (g.eval_split, g.num_eval, g.level),
            "eval_hard": (g.eval_split, g.num_eval_hard, swe_tier(g, True))}
    out = {}
    for name, (split, num, tier) in plan.items():
        folder = os.path.join(g.cache_dir, f"swe-tier{tier}", split)
        out[name] = swe_tasks.generate_tasks(folder, tier, split, num) if num else []
    return out


SWE = Family(
    name="swe", env="meowjax.envs.swe.env:SweEnv", env_kwargs=swe_env_kwargs,
    task_sets=swe_task_sets, difficulty_name=swe_difficulty_name,
    system_prompt=SWE_SYSTEM_PROMPT)

BUILTIN = (TEXTWORLD, ALFWORLD, SWE)
