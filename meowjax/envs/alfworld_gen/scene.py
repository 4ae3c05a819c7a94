"""ALFRED-style scenes (receptacles, objects, agent start) built from the alfworld wheel's layouts.

Sources, all inside the installed ``alfworld`` package (nothing downloaded):
  ``alfworld/gen/layouts/FloorPlan<N>-openable.json``  receptacle ids ``Type|x|y|z`` -> standing pose
                                                      ``[x, z, rotation, horizon]`` (metres, degrees)
  ``alfworld/gen/layouts/FloorPlan<N>-objects.json``   object/receptacle classes present in the room
  ``alfworld/gen/layouts/FloorPlan<N>-layout.npy``     reachable floor points ``[P, 2]`` (metres)
  ``alfworld/gen/constants.py``                        which receptacle class can hold which object
                                                      class (``VAL_RECEPTACLE_OBJECTS``) and object
                                                      affordances (``VAL_ACTION_OBJECTS``)

Ids follow ALFRED (``Apple|-00.47|+01.15|+00.48``; sink basins ``Sink|x|y|z|SinkBasin``) because
ALFWorld's demangler derives the display name ("apple 1", "sinkbasin 2") from the text before the
first ``|`` (plus "basin" when the id contains it). ``mangle`` escapes them for PDDL exactly like
ALFRED's ``PlannedGameState.fix_pddl_str_chars``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random

import numpy as np
from alfworld.gen import constants

LAYOUT_DIR = os.path.join(os.path.dirname(constants.__file__), "layouts")
GRID = constants.AGENT_STEP_SIZE  # metres per location grid unit (0.25)

# Receptacles the agent can go to (movable ones such as Bowl/Mug are objects in ALFWorld).
STATIC_RECEPTACLES = frozenset(constants.VAL_RECEPTACLE_OBJECTS) - constants.MOVABLE_RECEPTACLES_SET
OPENABLE = frozenset(constants.OPENABLE_CLASS_LIST)
LAMPS = ("DeskLamp", "FloorLamp")
# Lamps are not in VAL_RECEPTACLE_OBJECTS; the look-at-in-light goal needs the lamp *in* a
# receptacle (ToggleObject's precondition), so they stand on furniture.
LAMP_RECEPTACLES = {
    "DeskLamp": ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand"),
    "FloorLamp": ("SideTable", "Desk", "Dresser", "ArmChair", "Sofa", "CoffeeTable", "TVStand",
                  "Shelf", "Ottoman", "Bed", "DiningTable"),
}
# Scene classes whose layout id names the structure, not the basin objects can go in.
BASIN_OF = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
# Object classes that can be picked up and placed (non-sliced ALFRED classes some receptacle holds).
PICKUPABLE = frozenset(
    set().union(*constants.VAL_RECEPTACLE_OBJECTS.values()) & set(constants.OBJECTS))


def can_contain(rtype: str, otype: str) -> bool:
    """ALFRED's receptacle/object compatibility (``VAL_RECEPTACLE_OBJECTS``)."""
    return otype in constants.VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def mangle(alfred_id: str) -> str:
    """``Apple|-00.50|+01.10|+00.30`` -> ``Apple_bar__minus_00_dot_50_bar__plus_01_dot_10_bar__plus_00_dot_30``.

    Same substitutions as ALFRED's ``fix_pddl_str_chars`` (all at once), inverse of ALFWorld's
    ``Demangler``.
    """
    table = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
    return "".join(table.get(ch, ch) for ch in alfred_id)


def _coord(value: float) -> str:
    """ALFRED coordinate format: sign, two integer digits, two decimals (``-00.47``, ``+01.15``)."""
    return f"{value:+06.2f}"


def location_id(x_m: float, z_m: float, rotation: int, horizon: int) -> str:
    """ALFRED location id ``loc|x|z|rot|hor`` with x, z in grid units."""
    return f"loc|{int(round(x_m / GRID))}|{int(round(z_m / GRID))}|{int(rotation)}|{int(horizon)}"


@dataclasses.dataclass(frozen=True)
class Receptacle:
    id: str        # ALFRED id, e.g. "Cabinet|+00.68|+00.50|-02.20" or "Sink|...|SinkBasin"
    type: str      # receptacle class, e.g. "Cabinet", "SinkBasin"
    location: str  # ALFRED location id where the agent stands to use it
    xyz: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class SceneObject:
    id: str
    type: str
    receptacle: str  # id of the receptacle it is in


@dataclasses.dataclass
class Scene:
    floor_plan: str
    receptacles: list[Receptacle]
    objects: list[SceneObject]
    agent_location: str

    def receptacle_types(self) -> set[str]:
        return {r.type for r in self.receptacles}

    def receptacle(self, rid: str) -> Receptacle:
        return next(r for r in self.receptacles if r.id == rid)


@functools.lru_cache(maxsize=None)
def load_layout(scene_num: int) -> tuple[dict, tuple[str, ...], np.ndarray]:
    """(receptacle poses, classes present, reachable points) of ``FloorPlan<scene_num>``."""
    stem = os.path.join(LAYOUT_DIR, f"FloorPlan{scene_num}")
    with open(stem + "-openable.json") as f:
        poses = json.load(f)
    with open(stem + "-objects.json") as f:
        classes = tuple(json.load(f))
    points = np.load(stem + "-layout.npy")
    return poses, classes, points


def available_scenes() -> list[int]:
    """Scene numbers whose three layout files ship in the wheel."""
    nums = []
    for n in constants.SCENE_NUMBERS:
        stem = os.path.join(LAYOUT_DIR, f"FloorPlan{n}")
        if all(os.path.exists(stem + s) for s in ("-openable.json", "-objects.json", "-layout.npy")):
            nums.append(n)
    return sorted(nums)


def scene_type(scene_num: int) -> str:
    """"Kitchen" | "LivingRoom" | "Bedroom" | "Bathroom"."""
    return next(k for k, v in constants.SCENE_TYPE.items() if scene_num in v)


def build_receptacles(scene_num: int, rng: random.Random) -> tuple[list[Receptacle], str]:
    """Static receptacles of a scene (each at its own location) and a free agent start location.

    Receptacles with a precomputed pose come from ``-openable.json``; classes listed in
    ``-objects.json`` without a pose (garbage can, coffee machine, stove burners, ...) get an id
    and a standing point drawn from the reachable floor points.
    """
    poses, classes, points = load_layout(scene_num)
    receptacles: list[Receptacle] = []
    used_locs: set[str] = set()

    def unique_loc(x: float, z: float, rot: int, hor: int) -> str:
        loc = location_id(x, z, rot, hor)
        while loc in used_locs:  # two receptacles reached from one point: keep them distinct
            hor += 15
            loc = location_id(x, z, rot, hor)
        used_locs.add(loc)
        return loc

    for rid in sorted(poses):
        cls = rid.split("|")[0]
        rtype = BASIN_OF.get(cls, cls)
        if rtype not in STATIC_RECEPTACLES:
            continue
        x, z, rot, hor = poses[rid]
        full_id = f"{rid}|{rtype}" if cls in BASIN_OF else rid
        xyz = tuple(float(v) for v in rid.split("|")[1:4])
        receptacles.append(Receptacle(full_id, rtype, unique_loc(x, z, rot, hor), xyz))

    have = {r.type for r in receptacles}
    extra = sorted({BASIN_OF.get(c, c) for c in classes} & STATIC_RECEPTACLES - have)
    for rtype in extra:
        count = rng.randint(2, 4) if rtype == "StoveBurner" else 1
        for _ in range(count):
            px, pz = points[rng.randrange(len(points))]
            xyz = (px + rng.uniform(-0.6, 0.6), rng.uniform(0.0, 1.2), pz + rng.uniform(-0.6, 0.6))
            cls = "Sink" if rtype == "SinkBasin" else "Bathtub" if rtype == "BathtubBasin" else rtype
            rid = f"{cls}|{_coord(xyz[0])}|{_coord(xyz[1])}|{_coord(xyz[2])}"
            if rtype in BASIN_OF.values():
                rid += f"|{rtype}"
            loc = unique_loc(px, pz, rng.choice([0, 90, 180, 270]), rng.choice([0, 30, 60]))
            receptacles.append(Receptacle(rid, rtype, loc, xyz))

    px, pz = points[rng.randrange(len(points))]
    agent_loc = unique_loc(px, pz, rng.choice([0, 90, 180, 270]), 30)
    return receptacles, agent_loc


def receptacle_count_bound(scene_num: int) -> int:
    """Most static receptacles ``build_receptacles`` can put in the scene (stove burners <= 4)."""
    poses, classes, _ = load_layout(scene_num)
    posed = [BASIN_OF.get(r.split("|")[0], r.split("|")[0]) for r in poses]
    posed = [t for t in posed if t in STATIC_RECEPTACLES]
    extra = {BASIN_OF.get(c, c) for c in classes} & STATIC_RECEPTACLES - set(posed)
    return len(posed) + sum(4 if t == "StoveBurner" else 1 for t in extra)


def object_id(otype: str, near: tuple[float, float, float], rng: random.Random,
              taken: set[str]) -> str:
    """A fresh ALFRED object id a little away from its receptacle's position."""
    while True:
        x, y, z = (c + rng.uniform(-0.4, 0.4) for c in near)
        oid = f"{otype}|{_coord(x)}|{_coord(y)}|{_coord(z)}"
        if oid not in taken:
            taken.add(oid)
            return oid


def present_object_types(scene_num: int) -> list[str]:
    """Pickupable object classes and lamps that the scene's objects.json lists."""
    _, classes, _ = load_layout(scene_num)
    return sorted({c for c in classes if c in PICKUPABLE or c in LAMPS})
