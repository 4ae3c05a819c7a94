"""``generate_alfworld_games``: ALFWorld-style games on disk, in ALFWorld's own folder layout.

Output (the layout ``load_alfworld_tasks`` and ALFWorld's ``AlfredTWEnv`` read)::

    out_dir/manifest.json
    out_dir/json_2.1.1/<split>/<task_type>-<Object>-None-<Parent|Lamp>-<scene>/trial_s<seed>_<index>/
        game.tw-pddl     {pddl_domain, grammar, pddl_problem, solvable: true, walkthrough: [...]}
        traj_data.json   {task_type, pddl_params, scene, turk_annotations, ...} (what ALFWorld's
                         hand-coded expert and ``get_templated_task_desc`` read)

Game ``index`` of ``task_type`` is drawn from ``random.Random("<seed>/<split>/<task_type>/<index>/
<attempt>")``: attempt 0 first, the next attempt when the scene cannot host the task, the goal is
already true, or the planner finds no winning plan within ``time_limit_s``. So the games depend
only on (seed, split, task_type, index), and asking for more games later keeps the earlier ones.
``manifest.json`` caches finished games by that key; a cached game whose files exist is reused.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from typing import Sequence

from meowjax.envs.alfworld_gen import problem as problem_lib
from meowjax.envs.alfworld_gen import tasks as tasks_lib
from meowjax.envs.alfworld_gen.solve import Solver
from meowjax.envs.base import EnvError, Task

GENERATOR_VERSION = 1
MANIFEST = "manifest.json"


def _variant(opts: dict) -> str:
    """"" for the default room/distractor limits, else a suffix naming them."""
    if opts["max_receptacles"] is None and opts["max_distractor_types"] == tasks_lib.MAX_DISTRACTOR_TYPES:
        return ""
    return f"-r{opts['max_receptacles']}d{opts['max_distractor_types']}"


def _task_id(split: str, task_type: str, seed: int, index: int, opts: dict) -> str:
    return f"alfworld-gen/{split}/{task_type}/s{seed}-{index}{_variant(opts)}"


def _key(split: str, task_type: str, seed: int, index: int, opts: dict) -> str:
    return (f"{split}/{task_type}/{seed}/{index}/r{opts['max_receptacles']}"
            f"-d{opts['max_distractor_types']}")


def _read_manifest(out_dir: str) -> dict:
    path = os.path.join(out_dir, MANIFEST)
    if not os.path.exists(path):
        return {"generator_version": GENERATOR_VERSION, "games": {}}
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise EnvError(f"Corrupt ALFWorld game manifest {path}: {e}. Delete it to regenerate.") from e
    if manifest.get("generator_version") != GENERATOR_VERSION:
        return {"generator_version": GENERATOR_VERSION, "games": {}}
    return manifest


def _write_json(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _task_from_entry(out_dir: str, entry: dict) -> Task:
    return Task(task_id=entry["task_id"], path=os.path.join(out_dir, entry["path"]),
                family="alfworld", split=entry["split"], meta=dict(entry["meta"]))


def _draw(task_type: str, split: str, seed: int, index: int, attempt: int, opts: dict):
    """First (attempt, scene, params, rng) at or after ``attempt`` whose scene fits the task."""
    max_attempts = opts["max_attempts"]
    scenes = tasks_lib.scenes_for(task_type, split, opts["max_receptacles"])
    if not scenes:
        raise EnvError(f"No ALFWorld layout in the alfworld wheel fits {task_type!r} for split "
                       f"{split!r} with max_receptacles={opts['max_receptacles']}; raise "
                       "max_receptacles (kitchens, needed by heat/cool, have >= 14).")
    while attempt < max_attempts:
        rng = random.Random(f"{seed}/{split}/{task_type}/{index}/{attempt}")
        try:
            scene, params = tasks_lib.sample_scene_and_task(
                task_type, rng.choice(scenes), rng, opts["max_distractor_types"])
        except tasks_lib.SceneDoesNotFit:
            attempt += 1
            continue
        if tasks_lib.is_trivially_true(scene, task_type, params):
            attempt += 1
            continue
        return attempt, scene, params, rng
    raise EnvError(f"Could not generate a solvable {task_type} game (split={split}, seed={seed}, "
                   f"index={index}) in {max_attempts} attempts; raise max_attempts or time_limit_s.")


def _write_game(root: str, split: str, task_type: str, seed: int, index: int, attempt: int,
                scene, params: dict, rng: random.Random, opts: dict) -> tuple[str, dict]:
    """Writes game.tw-pddl (unsolved) and traj_data.json; returns (relative game dir, meta)."""
    scene_num = int(scene.floor_plan.replace("FloorPlan", ""))
    second = params["parent_target"] or params["toggle_target"]
    folder = f"{task_type}-{params['object_target']}-None-{second}-{scene_num}"
    rel_dir = os.path.join("json_2.1.1", split, folder, f"trial_s{seed}_{index:05d}{_variant(opts)}")
    game_dir = os.path.join(root, rel_dir)
    os.makedirs(game_dir, exist_ok=True)
    desc = problem_lib.task_description(task_type, params, rng)
    pddl = problem_lib.problem_pddl(scene, task_type, params, name=f"plan_s{seed}_{index}")
    _write_json(os.path.join(game_dir, "game.tw-pddl"), problem_lib.game_data(pddl, desc))
    task_id = _task_id(split, task_type, seed, index, opts)
    traj = {
        "task_id": task_id,
        "task_type": task_type,
        "pddl_params": params,
        "scene": {"floor_plan": scene.floor_plan, "scene_num": scene_num},
        "turk_annotations": {"anns": [{"task_desc": desc, "high_descs": [], "votes": []}]},
        "generator": {"name": "meowjax.envs.alfworld_gen", "version": GENERATOR_VERSION,
                      "seed": seed, "index": index, "attempt": attempt},
    }
    _write_json(os.path.join(game_dir, "traj_data.json"), traj)
    meta = {"task_type": task_type, "scene": scene.floor_plan, "pddl_params": params,
            "task_desc": desc, "seed": seed, "index": index, "attempt": attempt,
            "generated": True}
    return rel_dir, meta


def _remove_trial(root: str, rel_dir: str) -> None:
    game_dir = os.path.join(root, rel_dir)
    shutil.rmtree(game_dir, ignore_errors=True)
    parent = os.path.dirname(game_dir)
    if os.path.isdir(parent) and not os.listdir(parent):
        os.rmdir(parent)


def generate_alfworld_games(out_dir: str, task_types: Sequence[str] = tasks_lib.TASK_TYPES,
                            num_per_type: int = 1, seed: int = 0, split: str = "train",
                            num_workers: int = 1, time_limit_s: float = 60.0,
                            max_attempts: int = 50, max_receptacles: int | None = None,
                            max_distractor_types: int = tasks_lib.MAX_DISTRACTOR_TYPES
                            ) -> list[Task]:
    """Generates (or reuses) ``num_per_type`` solvable games per task type; returns their Tasks.

    Each game is checked by the planner expert (fast-downward) under ``time_limit_s`` and its plan
    replayed to a win; the plan is stored as the game's ``walkthrough`` (SFT data) and its length
    as ``meta["optimal_length"]``. Tasks are ordered by task type, then index.
    ``max_receptacles`` restricts to smaller rooms and ``max_distractor_types`` bounds the other
    object classes per game (both make games smaller and faster to load and step); they are part
    of the cache key, as are seed and split.
    """
    unknown = [t for t in task_types if t not in tasks_lib.TASK_TYPES]
    if unknown:
        raise EnvError(f"Unknown ALFWorld task types {unknown}; known: {list(tasks_lib.TASK_TYPES)}.")
    if num_per_type < 0:
        raise EnvError(f"num_per_type must be >= 0, got {num_per_type}.")
    os.makedirs(out_dir, exist_ok=True)
    manifest = _read_manifest(out_dir)
    games = manifest["games"]

    opts = {"max_attempts": max_attempts, "max_receptacles": max_receptacles,
            "max_distractor_types": max_distractor_types}
    wanted = [(t, i) for t in task_types for i in range(num_per_type)]
    todo = {}
    for t, i in wanted:
        entry = games.get(_key(split, t, seed, i, opts))
        if entry is None or not os.path.exists(os.path.join(out_dir, entry["path"])):
            todo[(t, i)] = 0  # next attempt to try

    with Solver(num_workers=num_workers, time_limit_s=time_limit_s) as solver:
        while todo:
            batch = []
            for (t, i), attempt in sorted(todo.items()):
                attempt, scene, params, rng = _draw(t, split, seed, i, attempt, opts)
                rel_dir, meta = _write_game(out_dir, split, t, seed, i, attempt, scene, params, rng,
                                             opts)
                batch.append(((t, i), attempt, rel_dir, meta))
            results = solver.solve_many(
                [os.path.join(out_dir, rel, "game.tw-pddl") for _, _, rel, _ in batch])
            for ((t, i), attempt, rel_dir, meta), (plan, _reason) in zip(batch, results):
                if plan is None:
                    _remove_trial(out_dir, rel_dir)
                    todo[(t, i)] = attempt + 1
                    continue
                game_path = os.path.join(out_dir, rel_dir, "game.tw-pddl")
                with open(game_path) as f:
                    data = json.load(f)
                data.update(solvable=True, walkthrough=plan)
                _write_json(game_path, data)
                meta["optimal_length"] = len(plan)
                games[_key(split, t, seed, i, opts)] = {
                    "task_id": _task_id(split, t, seed, i, opts), "split": split,
                    "path": os.path.join(rel_dir, "game.tw-pddl"), "meta": meta}
                del todo[(t, i)]
            _write_json(os.path.join(out_dir, MANIFEST), manifest)
    return [_task_from_entry(out_dir, games[_key(split, t, seed, i, opts)]) for t, i in wanted]
