"""ALFWorld's hand-coded expert as a demonstration source: it searches, the planner does not.

The planner's walkthrough (``game.tw-pddl``'s ``walkthrough``) knows where every object lies and
walks straight to it; ALFWorld's ``HandCodedTWAgent`` (what ALFWorld's and verl-agent's SFT data
come from) sees only what the game shows, and checks receptacles in the order of its priors for
the object's class until it finds one. Its demonstrations therefore show a search an agent can
imitate in a room it has never seen.

    tasks = with_searching_walkthroughs(tasks)   # task.meta["walkthrough"] set where it wins

The expert's actions are found by playing the game with ALFWorld's ``AlfredExpert`` wrapper (a
few seconds per game) and kept beside the game in ``expert_handcoded.json``. Where the hand-coded
expert does not win within ``max_steps`` (it loops on some pick-two games), the game keeps the
planner's walkthrough, and the file records that.
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import logging

from meowjax.envs import alfworld_pddl, game_cache
from meowjax.envs.base import EnvError, Task

CACHE_NAME = "expert_handcoded.json"


def handcoded_walkthrough(path: str, max_steps: int = 60) -> list[str] | None:
    """The hand-coded expert's actions on game ``path`` until it wins (its opening "look"
    dropped), or None where it has not won after ``max_steps`` actions."""
    env = alfworld_pddl.demangled_pddl_env(extras=("expert_plan",), handcoded_expert=True)
    try:
        env.load(path)
        state = env.reset()
        actions: list[str] = []
        while not state["won"] and len(actions) < max_steps:
            action = state["extra.expert_plan"][0]
            actions.append(action)
            state, _, _ = env.step(action)
    except Exception as e:  # the expert raises on timeouts and on tasks it cannot parse
        logging.warning("hand-coded expert failed on %s: %s: %s", path, type(e).__name__, e)
        return None
    finally:
        env.close()
    if not state["won"]:
        return None
    return actions[1:] if actions and actions[0] == "look" else actions


def cached_walkthrough(path: str, max_steps: int = 60) -> list[str] | None:
    """``handcoded_walkthrough`` of ``path``, read from (or written to) its cache file."""
    cache = os.path.join(os.path.dirname(path), CACHE_NAME)
    if os.path.exists(cache):
        try:
            with open(cache) as f:
                found = json.load(f)
            if found.get("max_steps") == max_steps:
                return found["actions"]
        except (OSError, ValueError, KeyError) as e:
            raise EnvError(f"Corrupt expert cache {cache}: {e}. Delete it to replay the "
                           "hand-coded expert.") from e
    actions = handcoded_walkthrough(path, max_steps)
    # Atomic, with a per-process temporary name: two runs may replay the same game at once.
    game_cache.write_manifest(cache, {"max_steps": max_steps, "actions": actions})
    return actions


def with_searching_walkthroughs(tasks: list[Task], max_steps: int = 60) -> list[Task]:
    """``tasks`` whose ``meta["walkthrough"]`` is the hand-coded expert's where it wins (the
    env's reset returns it as the game's walkthrough); the others keep the planner's."""
    out, fallback = [], 0
    for task in tasks:
        actions = cached_walkthrough(task.path, max_steps)
        if actions is None:
            fallback += 1
            out.append(task)
        else:
            out.append(dataclasses.replace(task, meta={**task.meta, "walkthrough": actions}))
    if fallback:
        logging.info("hand-coded expert: %d of %d games keep the planner's walkthrough (the "
                     "expert did not win within %d actions)", fallback, len(tasks), max_steps)
    return out
