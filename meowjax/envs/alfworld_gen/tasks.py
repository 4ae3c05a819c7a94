"""Sampling an ALFWorld task (type + targets) and a scene populated so the goal is neither trivially
true at the start nor impossible.

Task parameters use ALFRED's ``pddl_params`` keys with ALFRED class names (``object_target``:
"Apple", ``parent_target``: "Fridge", ``toggle_target``: "DeskLamp", ``mrecep_target``: "",
``object_sliced``: False), which is what ALFWorld's hand-coded expert reads from traj_data.json.

Feasibility rules (each one is a way a naive generator makes an unwinnable or trivial game):
  * the parent receptacle class exists in the scene and ``canContain`` the object class;
  * clean needs a SinkBasin (the PDDL ``CleanObject`` only accepts ``SinkBasinType``), heat a
    Microwave, cool a Fridge, and the object class must have that affordance; the parent is not
    the appliance itself;
  * look-at-in-light needs a lamp standing *in* a receptacle (``ToggleObject`` precondition);
  * no instance of the object class starts in a receptacle of the parent class (else
    pick-and-place would already be won), and pick-two has at least two instances;
  * only non-sliced ALFRED classes are used (ALFWorld also skips the ``Sliced`` trajectories).
"""

from __future__ import annotations

import random

from alfworld.gen import constants

from meowjax.envs.alfworld_gen import scene as scene_lib
from meowjax.envs.alfworld_gen.scene import Receptacle, Scene, SceneObject

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
# Appliance each state-change task needs, and the affordance the object needs.
APPLIANCE = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable"),
}
MAX_DISTRACTOR_TYPES = 10  # default; keeps each game's grounding and object lists small


class SceneDoesNotFit(ValueError):
    """The drawn scene cannot host the drawn task; the caller draws again."""


def scenes_for(task_type: str, split: str, max_receptacles: int | None = None) -> list[int]:
    """Scenes of a room type ALFRED allows for the task; train scenes for training splits, the
    held-out (test) scenes for a split named ``*unseen``, "test" or "eval_out_of_distribution".
    With ``max_receptacles``, only rooms with at most that many receptacles (smaller, faster
    games)."""
    held_out = split.endswith("unseen") or split in ("test", "eval_out_of_distribution")
    pool = set(constants.TEST_SCENE_NUMBERS if held_out else constants.TRAIN_SCENE_NUMBERS)
    allowed = constants.GOALS_VALID[task_type]
    return [n for n in scene_lib.available_scenes()
            if n in pool and scene_lib.scene_type(n) in allowed
            and (max_receptacles is None or scene_lib.receptacle_count_bound(n) <= max_receptacles)]


def _choose_params(task_type: str, otypes: list[str], rtypes: set[str],
                   rng: random.Random) -> dict:
    params = {"object_target": "", "parent_target": "", "toggle_target": "",
              "mrecep_target": "", "object_sliced": False}
    movable = [t for t in otypes if t in scene_lib.PICKUPABLE]
    if task_type == "look_at_obj_in_light":
        lamps = [t for t in otypes if t in scene_lib.LAMPS
                 and set(scene_lib.LAMP_RECEPTACLES[t]) & rtypes]
        if not lamps or not movable:
            raise SceneDoesNotFit("no lamp on furniture or nothing to pick up")
        params["toggle_target"] = rng.choice(lamps)
        params["object_target"] = rng.choice(movable)
        return params
    if task_type in APPLIANCE:
        appliance, affordance = APPLIANCE[task_type]
        if appliance not in rtypes:
            raise SceneDoesNotFit(f"no {appliance}")
        movable = [t for t in movable if t in constants.VAL_ACTION_OBJECTS[affordance]]
        rtypes = rtypes - {appliance}
    pairs = [(o, r) for o in movable for r in sorted(rtypes) if scene_lib.can_contain(r, o)]
    if not pairs:
        raise SceneDoesNotFit("no object/receptacle pair fits the task")
    params["object_target"], params["parent_target"] = rng.choice(pairs)
    return params


def _place(otype: str, receptacles: list[Receptacle], banned_rtype: str, rng: random.Random,
           taken: set[str]) -> SceneObject:
    if otype in scene_lib.LAMPS:
        spots = [r for r in receptacles if r.type in scene_lib.LAMP_RECEPTACLES[otype]]
    else:
        spots = [r for r in receptacles
                 if scene_lib.can_contain(r.type, otype) and r.type != banned_rtype]
    if not spots:
        raise SceneDoesNotFit(f"nowhere to put {otype}")
    r = rng.choice(spots)
    return SceneObject(scene_lib.object_id(otype, r.xyz, rng, taken), otype, r.id)


def sample_scene_and_task(task_type: str, scene_num: int, rng: random.Random,
                          max_distractor_types: int = MAX_DISTRACTOR_TYPES) -> tuple[Scene, dict]:
    """Draws targets for ``task_type`` in ``FloorPlan<scene_num>`` and places the objects, plus up
    to ``max_distractor_types`` other object classes of the room (1-2 instances each).

    Raises SceneDoesNotFit when the scene cannot host the task (the caller draws another).
    """
    if task_type not in TASK_TYPES:
        raise ValueError(f"Unknown ALFWorld task type {task_type!r}; known: {TASK_TYPES}")
    receptacles, agent_loc = scene_lib.build_receptacles(scene_num, rng)
    rtypes = {r.type for r in receptacles}
    present = scene_lib.present_object_types(scene_num)
    # Object classes that fit somewhere in this room.
    placeable = [t for t in present
                 if (t in scene_lib.LAMPS and set(scene_lib.LAMP_RECEPTACLES[t]) & rtypes)
                 or any(scene_lib.can_contain(r, t) for r in rtypes)]
    params = _choose_params(task_type, placeable, rtypes, rng)
    target, parent = params["object_target"], params["parent_target"]

    needed = [t for t in (target, params["toggle_target"]) if t]
    others = [t for t in placeable if t not in needed and t not in scene_lib.LAMPS]
    distractors = rng.sample(others, min(max_distractor_types, len(others)))

    taken: set[str] = set()
    objects: list[SceneObject] = []
    for otype in needed + sorted(distractors):
        if otype in scene_lib.LAMPS:
            count = 1
        elif otype == target and task_type == "pick_two_obj_and_place":
            count = rng.randint(2, constants.MAX_NUM_OF_OBJ_INSTANCES)
        else:
            count = rng.randint(1, 2 if otype != target else constants.MAX_NUM_OF_OBJ_INSTANCES)
        banned = parent if otype == target else ""
        objects += [_place(otype, receptacles, banned, rng, taken) for _ in range(count)]
    return Scene(f"FloorPlan{scene_num}", receptacles, objects, agent_loc), params


def is_trivially_true(scene: Scene, task_type: str, params: dict) -> bool:
    """Whether the goal already holds in the initial state (the generator rejects such games)."""
    if task_type == "look_at_obj_in_light":
        return False  # needs the object held and the lamp toggled; neither holds at start
    parents = {r.id for r in scene.receptacles if r.type == params["parent_target"]}
    inside = [o for o in scene.objects
              if o.type == params["object_target"] and o.receptacle in parents]
    need = 2 if task_type == "pick_two_obj_and_place" else 1
    if task_type in APPLIANCE:
        return False  # isClean/isHot/isCool never hold at start
    return len(inside) >= need
