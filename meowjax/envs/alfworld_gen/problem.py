"""PDDL problem text and ``game.tw-pddl`` contents for an ALFWorld-style scene + goal.

The problem mirrors what ALFRED's ``PlannedGameState.state_to_pddl`` writes (object/receptacle/
location constants with mangled ALFRED ids, ``receptacleType``/``objectType``, ``canContain``,
``receptacleAtLocation``, ``inReceptacle``/``objectAtLocation``, affordances such as ``cleanable``),
and the goal is the wheel's ``alfworld.gen.goal_library`` entry with ``#`` turned into PDDL's ``-``.
A ``game.tw-pddl`` file is JSON ``{pddl_domain, grammar, pddl_problem, solvable, walkthrough}``,
the same keys ``alfworld-generate`` writes, with the task sentence substituted into the grammar's
``UNKNOWN GOAL`` like ALFWorld's ``add_task_to_grammar``.
"""

from __future__ import annotations

import os
import random

from alfworld.gen import constants
from alfworld.gen import goal_library

from meowjax.envs.alfworld_gen.scene import OPENABLE, Scene, mangle

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(constants.__file__)), "data")
DOMAIN_PATH = os.path.join(DATA_DIR, "alfred.pddl")
GRAMMAR_PATH = os.path.join(DATA_DIR, "alfred.twl2")

# As in ALFRED's state_to_pddl: every class is a constant of exactly one kind.
ALL_RTYPES = sorted(set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES))
ALL_OTYPES = sorted(constants.OBJECTS_SET - set(ALL_RTYPES))


def read_domain() -> str:
    with open(DOMAIN_PATH) as f:
        return f.read()


def read_grammar() -> str:
    with open(GRAMMAR_PATH) as f:
        return f.read()


def task_description(task_type: str, params: dict, rng: random.Random) -> str:
    """One of the goal library's templates, filled like ALFWorld's ``get_templated_task_desc``."""
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    return template.format(obj=params["object_target"].lower(), recep=params["parent_target"].lower(),
                           toggle=params["toggle_target"].lower(),
                           mrecep=params["mrecep_target"].lower())


def goal_pddl(task_type: str, params: dict) -> str:
    """The goal library's ``(:goal ...)`` block for the task (it also closes ``(define``)."""
    text = goal_library.gdict[task_type]["pddl"].format(
        obj=params["object_target"], recep=params["parent_target"],
        toggle=params["toggle_target"], mrecep=params["mrecep_target"])
    return text.replace("#", "-")


def _affordances(otype: str) -> list[str]:
    facts = []
    actions = constants.VAL_ACTION_OBJECTS
    if otype not in ("DeskLamp", "FloorLamp"):
        facts.append("pickupable")
    if otype in constants.MOVABLE_RECEPTACLES_SET:
        facts.append("isReceptacleObject")
    for predicate, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"),
                           ("coolable", "Coolable"), ("sliceable", "Sliceable"),
                           ("toggleable", "Toggleable")):
        if otype in actions[key]:
            facts.append(predicate)
    return facts


def problem_pddl(scene: Scene, task_type: str, params: dict, name: str) -> str:
    """Full PDDL problem (objects, initial state, goal) for ``scene`` and the task."""
    m = mangle
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in ALL_OTYPES]
    objects += [f"{t}Type - rtype" for t in ALL_RTYPES]
    objects += [f"{m(o.id)} - object" for o in scene.objects]
    objects += [f"{m(r.id)} - receptacle" for r in scene.receptacles]
    locations = sorted({r.location for r in scene.receptacles} | {scene.agent_location})
    objects += [f"{m(loc)} - location" for loc in locations]

    init = [f"(atLocation agent1 {m(scene.agent_location)})"]
    rtypes = sorted(scene.receptacle_types())
    otypes = sorted({o.type for o in scene.objects})
    for rt in rtypes:
        for ot in otypes:
            if ot in constants.VAL_RECEPTACLE_OBJECTS.get(rt, ()):
                init.append(f"(canContain {rt}Type {ot}Type)")
    loc_of = {}
    for r in scene.receptacles:
        loc_of[r.id] = r.location
        init.append(f"(receptacleType {m(r.id)} {r.type}Type)")
        init.append(f"(receptacleAtLocation {m(r.id)} {m(r.location)})")
        if r.type in OPENABLE:
            init.append(f"(openable {m(r.id)})")
    for o in scene.objects:
        init.append(f"(objectType {m(o.id)} {o.type}Type)")
        init += [f"({p} {m(o.id)})" for p in _affordances(o.type)]
        init.append(f"(inReceptacle {m(o.id)} {m(o.receptacle)})")
        init.append(f"(objectAtLocation {m(o.id)} {m(loc_of[o.receptacle])})")

    sep = "\n        "
    return (f"(define (problem {name})\n    (:domain alfred)\n"
            f"    (:objects{sep}{sep.join(objects)}\n    )\n"
            f"    (:init{sep}{sep.join(init)}\n    )\n"
            f"{goal_pddl(task_type, params)}\n")


def game_data(problem: str, task_desc: str) -> dict:
    """``game.tw-pddl`` contents before solving (``solvable``/``walkthrough`` filled in later)."""
    return {
        "pddl_domain": read_domain(),
        "grammar": read_grammar().replace("UNKNOWN GOAL", task_desc),
        "pddl_problem": problem,
        "solvable": None,
        "walkthrough": None,
    }
