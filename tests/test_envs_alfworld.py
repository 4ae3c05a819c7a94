"""ALFWorld env + offline ALFWorld-style generator: every task type generated, loaded and won by its
expert plan; rewards, invalid actions, budget, broken inputs."""

from __future__ import annotations

import json
import os
import time

import pytest

from meowjax.envs import EnvError, Task, make_env
from meowjax.envs.alfworld_env import AlfWorldEnv, load_alfworld_tasks
from meowjax.envs.alfworld_gen import TASK_TYPES, generate_alfworld_games
from meowjax.envs.alfworld_gen import scene as scene_lib
from meowjax.envs.alfworld_gen.solve import Solver, solve_game
from meowjax.envs.registry import EnvSpec

pytestmark = pytest.mark.slow  # generating + playing six PDDL games takes ~30-60 s on 2 cores

# Small rooms keep the PDDL grounding (and the test) fast; heat/cool need a kitchen (>= 14).
KITCHEN_ONLY = ("pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep")
GEN_OPTS = [
    (tuple(t for t in TASK_TYPES if t not in KITCHEN_ONLY), dict(max_receptacles=9)),
    (KITCHEN_ONLY, dict(max_receptacles=16)),
]
COMMON = dict(seed=0, split="train", num_workers=1, max_distractor_types=2)


def _generate(out):
    tasks = []
    for task_types, opts in GEN_OPTS:
        tasks += generate_alfworld_games(out, task_types, num_per_type=1, **COMMON, **opts)
    return tasks


@pytest.fixture(scope="session")
def games(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("alfworld_games"))
    return out, {t.meta["task_type"]: t for t in _generate(out)}


@pytest.fixture(scope="module")
def env():
    e = AlfWorldEnv(reward_mode="sparse", invalid_action_penalty=-0.25, admissible=True)
    yield e
    e.close()


def test_generates_every_task_type_in_alfworld_layout(games):
    out, by_type = games
    assert sorted(by_type) == sorted(TASK_TYPES)
    for task_type, task in by_type.items():
        assert task.family == "alfworld" and task.split == "train"
        parts = task.path.split(os.sep)
        assert parts[-5:-3] == ["json_2.1.1", "train"] and parts[-1] == "game.tw-pddl"
        assert parts[-3].startswith(task_type + "-")
        with open(task.path) as f:
            game = json.load(f)
        with open(os.path.join(os.path.dirname(task.path), "traj_data.json")) as f:
            traj = json.load(f)
        assert game["solvable"] is True and len(game["walkthrough"]) == task.meta["optimal_length"]
        assert traj["task_type"] == task_type
        params = traj["pddl_params"]
        assert params["object_target"] in scene_lib.PICKUPABLE and params["object_sliced"] is False
        assert "UNKNOWN GOAL" not in game["grammar"] and traj["turk_annotations"]["anns"][0][
            "task_desc"] in game["grammar"]
        pddl = game["pddl_problem"]
        # ALFRED ids, mangled the way ALFWorld's demangler expects.
        assert f"{params['object_target']}_bar_" in pddl and "|" not in pddl
        if task_type == "look_at_obj_in_light":
            lamp = params["toggle_target"]
            assert lamp in scene_lib.LAMPS
            assert f"(inReceptacle {lamp}_bar_" in pddl and f"(toggleable {lamp}_bar_" in pddl
        else:
            assert f"(canContain {params['parent_target']}Type {params['object_target']}Type)" in pddl
    # The loader reads generated games exactly like real ALFWorld data.
    loaded = load_alfworld_tasks(out, "train")
    assert sorted(t.path for t in loaded) == sorted(t.path for t in by_type.values())
    assert {t.meta["task_type"] for t in loaded} == set(TASK_TYPES)


def test_manifest_caches_games(games):
    out, by_type = games
    start = time.time()
    again = _generate(out)
    assert time.time() - start < 2.0  # nothing regenerated
    assert sorted(t.path for t in again) == sorted(t.path for t in by_type.values())
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    assert len(manifest["games"]) == len(TASK_TYPES)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_plan_wins(games, env, task_type):
    task = games[1][task_type]
    first = env.reset(task, max_turns=50)
    assert first.observation.startswith("You are in the middle of a room.")
    assert "Welcome" not in first.observation
    assert first.objective.startswith("Your task is to: ")
    assert first.objective in first.observation and first.max_score == 1.0
    assert first.walkthrough and first.walkthrough[0] in first.admissible
    rewards = []
    for i, command in enumerate(first.walkthrough):
        step = env.step(command)
        rewards.append(step.reward)
        assert not step.info["invalid"], (command, step.observation)
        assert step.done == (i == len(first.walkthrough) - 1)
    assert step.won and not step.info["truncated"] and step.info["score"] == 1.0
    assert rewards == [0.0] * (len(rewards) - 1) + [1.0]


def test_dense_rewards_follow_milestones(games):
    task = games[1]["pick_clean_then_place_in_recep"]
    env = AlfWorldEnv(reward_mode="dense")
    try:
        first = env.reset(task, max_turns=50)
        rewards = [env.step(c).reward for c in first.walkthrough]
    finally:
        env.close()
    take = next(i for i, c in enumerate(first.walkthrough) if c.startswith("take "))
    clean = next(i for i, c in enumerate(first.walkthrough) if c.startswith("clean "))
    expected = [0.0] * len(rewards)
    expected[take] = expected[clean] = expected[-1] = 1 / 3
    assert rewards == pytest.approx(expected, abs=1e-12)
    assert sum(rewards) == pytest.approx(1.0)


def test_invalid_action_gets_nothing_happens_and_penalty(games, env):
    env.reset(games[1]["pick_and_place_simple"], max_turns=10)
    bad = env.step("Jump over the moon")
    assert bad.observation == "Nothing happens."
    assert bad.info["invalid"] and bad.reward == -0.25 and not bad.done
    empty = env.step("   ")
    assert empty.observation == "Nothing happens." and empty.info["invalid"]
    ok = env.step("  LOOK ")  # case and spacing are normalised
    assert not ok.info["invalid"] and ok.reward == 0.0
    assert ok.observation.startswith("You are in the middle of a room.")


def test_help_is_answered_but_not_admissible(games, env):
    first = env.reset(games[1]["pick_and_place_simple"], max_turns=10)
    assert "look" in first.admissible and "help" not in first.admissible
    step = env.step("help")   # the command reference: typed, it still answers
    assert not step.info["invalid"] and step.observation.startswith("Available commands:")
    assert "help" not in step.info["admissible"] and "inventory" in step.info["admissible"]


def test_budget_truncates(games, env):
    env.reset(games[1]["pick_two_obj_and_place"], max_turns=2)
    assert not env.step("look").done
    last = env.step("inventory")
    assert last.observation == "You are not carrying anything."
    assert last.done and not last.won and last.info["truncated"] and last.info["turn"] == 2
    with pytest.raises(EnvError, match="after the episode ended"):
        env.step("look")


def test_registry_builds_env(games):
    env = make_env(EnvSpec("alfworld", {"reward_mode": "dense", "admissible": False}))
    assert isinstance(env, AlfWorldEnv) and env.reward_mode == "dense"
    with pytest.raises(EnvError, match="reward_mode"):
        AlfWorldEnv(reward_mode="shaped")
    with pytest.raises(EnvError, match="<= 0"):
        AlfWorldEnv(invalid_action_penalty=0.5)


def test_broken_game_files_raise_env_error_naming_them(games, tmp_path, env):
    missing = str(tmp_path / "nope" / "game.tw-pddl")
    with pytest.raises(EnvError, match="not found: .*nope/game.tw-pddl"):
        env.reset(Task("x", missing, "alfworld"), max_turns=5)
    corrupt = tmp_path / "corrupt" / "game.tw-pddl"
    corrupt.parent.mkdir()
    corrupt.write_text("{not json")
    with pytest.raises(EnvError, match="Corrupt ALFWorld game file .*corrupt/game.tw-pddl"):
        env.reset(Task("x", str(corrupt), "alfworld"), max_turns=5)
    corrupt.write_text(json.dumps({"pddl_domain": "", "grammar": ""}))
    with pytest.raises(EnvError, match="missing keys \\['pddl_problem'\\]"):
        env.reset(Task("x", str(corrupt), "alfworld"), max_turns=5)
    with open(games[1]["pick_and_place_simple"].path) as f:
        good = json.load(f)
    good["pddl_problem"] = good["pddl_problem"].replace("(:init", "(:int", 1)
    corrupt.write_text(json.dumps(good))
    with pytest.raises(EnvError, match="Cannot load ALFWorld game file .*corrupt/game.tw-pddl"):
        env.reset(Task("x", str(corrupt), "alfworld"), max_turns=5)
    # The env still works after a broken file.
    assert env.reset(games[1]["pick_and_place_simple"], max_turns=5).walkthrough


def test_load_alfworld_tasks_missing_folder_names_layout(tmp_path):
    with pytest.raises(EnvError, match=r"json_2\.1\.1/valid_seen.*<task>/<trial>"):
        load_alfworld_tasks(str(tmp_path), "valid_seen")
    (tmp_path / "json_2.1.1" / "train" / "some_task" / "trial_1").mkdir(parents=True)
    with pytest.raises(EnvError, match="No playable ALFWorld games"):
        load_alfworld_tasks(str(tmp_path), "train")


def test_solver_time_limit_and_in_process_check(games):
    path = games[1]["pick_and_place_simple"].path
    with Solver(num_workers=1, time_limit_s=0.01) as solver:
        (plan, reason), = solver.solve_many([path])
    assert plan is None and reason.startswith("planner timeout")
    plan, reason = solve_game(path)
    with open(path) as f:
        assert plan == json.load(f)["walkthrough"] and reason == ""


def test_handcoded_expert_searches_and_its_walkthrough_replays_to_a_win(games, env):
    """ALFWorld's hand-coded expert wins a generated game by its own search (it starts with no
    knowledge of where the object lies), is cached beside the game, and the env's reset returns
    its actions as the walkthrough, which replay to a win."""
    from meowjax.envs import alfworld_expert
    from meowjax.envs.expert import expert_trajectory
    _, by_type = games
    task = by_type["pick_and_place_simple"]
    actions = alfworld_expert.cached_walkthrough(task.path)
    assert actions and actions[0] != "look"
    cache = os.path.join(os.path.dirname(task.path), alfworld_expert.CACHE_NAME)
    assert json.load(open(cache))["actions"] == actions
    (searched,) = alfworld_expert.with_searching_walkthroughs([task])
    assert searched.meta["walkthrough"] == actions and "walkthrough" not in task.meta
    assert env.reset(searched, 50).walkthrough == actions
    played = expert_trajectory(env, searched, 50)
    assert played["won"] and played["actions"] == actions
    planner = json.load(open(task.path))["walkthrough"]   # where the task carries none
    assert env.reset(task, 50).walkthrough == planner


def test_games_expert_must_be_one_the_family_offers():
    from configs import default
    from meowjax.envs import game_sets
    c = default.get_config("smoke=True")
    c.unlock()
    c.games.expert = "handcoded"
    with pytest.raises(ValueError, match=r"games.expert='handcoded': env.family='textworld' "
                                         r"offers demonstrations from \['planner'\]"):
        game_sets.game_sets(c)
