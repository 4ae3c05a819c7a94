"""A config's game sets and env spec: what ``c.env`` / ``c.games`` ask of the env family.

    sets = game_sets(c)          # train / sft / eval / eval_hard (+ eval_transfer, curve)
    spec = env_spec(c, admissible=True)

Each held-out set holds one difficulty (``HELD_OUT``, ``set_difficulty``): the training
difficulty, the RL difficulty (harder), and transfer (harder still, never trained on).
"""

from __future__ import annotations

import time

import ml_collections
from absl import logging

from meowjax.envs import registry
from meowjax.envs.base import Task
from meowjax.envs.registry import EnvSpec


def env_spec(c: ml_collections.ConfigDict, *, admissible: bool) -> EnvSpec:
    """The spec to build envs from: the family's options for ``c.env``, inside the reward
    wrapper of ``env.reward_mode`` if it has one ("process": ``envs.process_reward``)."""
    family = registry.get_family(c.env.family)
    spec = EnvSpec(family.name, family.env_kwargs(c.env, admissible))
    return registry.reward_spec(spec, c.env.reward_mode)


def game_sets(c: ml_collections.ConfigDict) -> dict[str, list[Task]]:
    """train / sft / eval (held-out, training difficulty) / eval_hard of the configured family,
    disjoint seed ranges (the family's ``task_sets``).

    Held-out games come from ``games.eval_split``: "test" for reported numbers, "valid" while
    tuning (never tune on the test seeds).
    """
    family = registry.get_family(c.env.family)
    if c.games.num_train_hard and not family.harder_rl_pool:
        with_pool = [n for n in registry.family_names() if registry.get_family(n).harder_rl_pool]
        raise ValueError(f"games.num_train_hard={c.games.num_train_hard} is for families with a "
                         f"harder RL pool ({', '.join(with_pool)}); env.family={family.name!r} "
                         "has none: set it to 0.")
    if c.games.expert not in family.experts:
        raise ValueError(f"games.expert={c.games.expert!r}: env.family={family.name!r} offers "
                         f"demonstrations from {list(family.experts)}.")
    t0 = time.time()
    sets = dict(family.task_sets(c))
    extra = set(sets) - set(registry.TASK_SETS) - set(registry.OPTIONAL_TASK_SETS)
    if not set(registry.TASK_SETS) <= set(sets) or extra:
        raise ValueError(f"env.family={family.name!r}: task_sets returned {sorted(sets)}; it must "
                         f"return {list(registry.TASK_SETS)}, and may add "
                         f"{list(registry.OPTIONAL_TASK_SETS)}.")
    for name in registry.OPTIONAL_TASK_SETS:
        sets.setdefault(name, [])
    logging.info("games (%s): %s, in %.1f s", family.name,
                 ", ".join(f"{name} {len(tasks)}" for name, tasks in sets.items() if tasks),
                 time.time() - t0)
    return sets


def difficulty_name(c: ml_collections.ConfigDict, hard: bool | str) -> str:
    """The name of the training (or harder, or ``"transfer"``) difficulty in reports: a
    TextWorld game-set name ("w2-o3-q4"), a code-repair tier ("code-repair tier 1"), an ALFWorld
    split ("ALFWorld test", "ALFWorld valid_unseen"), ..."""
    return registry.get_family(c.env.family).difficulty_name(c, hard)


# Held-out sets evaluated before and after RL, and the difficulty each one holds.
HELD_OUT = ("eval", "eval_hard", "eval_transfer")
_SET_DIFFICULTY = {"eval": False, "eval_hard": True, "eval_transfer": "transfer", "curve": True}


def set_difficulty(c: ml_collections.ConfigDict, name: str) -> str:
    """The difficulty name of task set ``name`` (one of ``HELD_OUT`` or "curve")."""
    return difficulty_name(c, _SET_DIFFICULTY[name])


