"""Fast unit checks of the ALFWorld-style generator pieces (no planner, no game loading)."""

from __future__ import annotations

import random

import pytest
from alfworld.agents.utils.misc import Demangler
from alfworld.gen import constants

from meowjax.envs.alfworld_gen import problem as problem_lib
from meowjax.envs.alfworld_gen import scene as scene_lib
from meowjax.envs.alfworld_gen import tasks as tasks_lib
from meowjax.envs.alfworld_gen.scene import Receptacle, Scene, SceneObject


class _Info:
    def __init__(self, id_: str):
        self.id = id_


def test_mangled_ids_demangle_to_alfworld_names():
    ids = ["Sink|-01.90|+00.97|-01.50|SinkBasin", "Apple|-00.47|+01.15|+00.48",
           "Apple|+01.00|+00.90|-02.00", "Cabinet|+00.68|+00.50|-02.20", "agent1"]
    mangled = [scene_lib.mangle(i).lower() for i in ids]  # the PDDL parser lower-cases names
    assert mangled[1] == "apple_bar__minus_00_dot_47_bar__plus_01_dot_15_bar__plus_00_dot_48"
    infos = {m: _Info(m) for m in mangled}
    demangler = Demangler(game_infos=infos)
    names = sorted(demangler.demangle_alfred_name(m).strip() for m in mangled)
    assert names == ["agent1", "apple 1", "apple 2", "cabinet 1", "sinkbasin 1"]


def test_scenes_per_task_type_follow_alfred_room_types():
    for task_type in tasks_lib.TASK_TYPES:
        train = tasks_lib.scenes_for(task_type, "train")
        test = tasks_lib.scenes_for(task_type, "test")
        assert train and test and not set(train) & set(test)
        allowed = constants.GOALS_VALID[task_type]
        assert all(scene_lib.scene_type(n) in allowed for n in train + test)
    kitchens = tasks_lib.scenes_for("pick_heat_then_place_in_recep", "train")
    assert all(1 <= n <= 30 for n in kitchens)
    small = tasks_lib.scenes_for("pick_and_place_simple", "train", max_receptacles=8)
    assert small and all(scene_lib.receptacle_count_bound(n) <= 8 for n in small)


@pytest.mark.parametrize("task_type", tasks_lib.TASK_TYPES)
def test_sampled_tasks_are_feasible_and_deterministic(task_type):
    scenes = tasks_lib.scenes_for(task_type, "train")
    made = 0
    for i in range(20):
        draws = []
        for _ in range(2):
            rng = random.Random(f"t/{i}")
            try:
                scene, params = tasks_lib.sample_scene_and_task(task_type, rng.choice(scenes), rng)
            except tasks_lib.SceneDoesNotFit:
                draws.append(None)
                continue
            draws.append(problem_lib.problem_pddl(scene, task_type, params, "p"))
        assert draws[0] == draws[1]  # same seed, same game
        if draws[0] is None:
            continue
        made += 1
        obj, parent = params["object_target"], params["parent_target"]
        rtypes = scene.receptacle_types()
        targets = [o for o in scene.objects if o.type == obj]
        assert targets and not tasks_lib.is_trivially_true(scene, task_type, params)
        assert all(scene.receptacle(o.receptacle).type != parent for o in targets)
        assert len({o.id for o in scene.objects}) == len(scene.objects)
        assert len({r.location for r in scene.receptacles} | {scene.agent_location}) == \
            len(scene.receptacles) + 1  # one location per receptacle, agent elsewhere
        if task_type == "look_at_obj_in_light":
            lamps = [o for o in scene.objects if o.type == params["toggle_target"]]
            assert len(lamps) == 1
            assert scene.receptacle(lamps[0].receptacle).type in scene_lib.LAMP_RECEPTACLES[lamps[0].type]
            continue
        assert parent in rtypes and scene_lib.can_contain(parent, obj)
        if task_type == "pick_two_obj_and_place":
            assert len(targets) >= 2
        if task_type in tasks_lib.APPLIANCE:
            appliance, affordance = tasks_lib.APPLIANCE[task_type]
            assert appliance in rtypes and parent != appliance
            assert obj in constants.VAL_ACTION_OBJECTS[affordance]
    assert made >= 5


def test_trivially_true_goal_is_detected():
    fridge = Receptacle("Fridge|+01.00|+00.00|+01.00", "Fridge", "loc|4|4|0|30", (1.0, 0.0, 1.0))
    table = Receptacle("DiningTable|+02.00|+00.00|+01.00", "DiningTable", "loc|8|4|0|30",
                       (2.0, 0.0, 1.0))
    apple = SceneObject("Apple|+01.00|+00.50|+01.00", "Apple", fridge.id)
    scene = Scene("FloorPlan1", [fridge, table], [apple], "loc|0|0|0|30")
    params = {"object_target": "Apple", "parent_target": "Fridge", "toggle_target": "",
              "mrecep_target": "", "object_sliced": False}
    assert tasks_lib.is_trivially_true(scene, "pick_and_place_simple", params)
    assert not tasks_lib.is_trivially_true(scene, "pick_two_obj_and_place", params)
    assert not tasks_lib.is_trivially_true(scene, "pick_cool_then_place_in_recep", params)
    pddl = problem_lib.problem_pddl(scene, "pick_and_place_simple", params, "p")
    assert "(canContain FridgeType AppleType)" in pddl and "(openable Fridge_bar_" in pddl
    assert "(coolable Apple_bar_" in pddl and "(objectType ?o AppleType)" in pddl
