"""TextWorldEnv and game generation on real generated games (2 custom w2-o3-q4 + 1 tw-simple)."""
import json
import os
import re
import shutil

import pytest

from meowjax.envs.base import EnvError, Task
from meowjax.envs.registry import EnvSpec
from meowjax.envs.textworld_env import (META_FEEDBACK, TextWorldEnv, clean_feedback,
                                        inventory_items, sanitize_action)
from meowjax.envs.expert import expert_trajectory
from meowjax.envs.textworld_games import (SPLIT_SEED_RANGES, GameSetSpec, generate_games,
                                          load_game_set, make_one_game, split_seeds)

CUSTOM = GameSetSpec(kind="custom", split="test", num_games=2, world_size=2, nb_objects=3,
                     quest_length=4)
SIMPLE = GameSetSpec(kind="simple", split="test", num_games=1, rewards="dense", goal="detailed")


@pytest.fixture(scope="session")
def tw_games(tiny_games_dir):
    """(custom tasks, simple tasks), generated once per pytest run (scope="session") into the
    shared cache dir."""
    return (generate_games(CUSTOM, tiny_games_dir, workers=1),
            generate_games(SIMPLE, tiny_games_dir, workers=1))


def _play(env, task, actions, max_turns=50):
    first = env.reset(task, max_turns)
    return first, [env.step(a) for a in actions]


# -- generation ---------------------------------------------------------------------------------
def test_game_sets_tasks_and_manifest(tw_games, tiny_games_dir):
    custom, simple = tw_games
    assert [t.meta["seed"] for t in custom] == [1, 2]
    assert custom[0].task_id == "textworld/w2-o3-q4/test/1"
    assert simple[0].task_id == "textworld/simple-dense-detailed/test/1"
    for t in custom + simple:
        assert os.path.isfile(t.path) and t.family == "textworld" and t.split == "test"
        assert t.meta["walkthrough_len"] >= 1
    manifest = json.load(open(os.path.join(CUSTOM.game_dir(tiny_games_dir), "manifest.json")))
    assert manifest["tw_make_args"] == ["custom", "--world-size", "2", "--nb-objects", "3",
                                        "--quest-length", "4"]
    assert [g["seed"] for g in manifest["games"]] == [1, 2]
    # A complete set on disk is reused: same tasks, no file rewritten.
    mtimes = [os.path.getmtime(t.path) for t in custom]
    assert generate_games(CUSTOM, tiny_games_dir, workers=2) == custom
    assert [os.path.getmtime(t.path) for t in custom] == mtimes
    assert load_game_set(CUSTOM.game_dir(tiny_games_dir)) == custom


def _normalized(path):
    """Game JSON with set-valued fields sorted (their order follows Python's hash seed)."""
    game = json.load(open(path))
    game["grammar"]["names_to_exclude"] = sorted(map(str, game["grammar"]["names_to_exclude"]))
    return game


def test_generation_is_deterministic_per_seed(tw_games, tmp_path):
    custom, _ = tw_games
    entry = make_one_game(CUSTOM, 1, str(tmp_path))
    assert entry["walkthrough_len"] == custom[0].meta["walkthrough_len"]
    again = os.path.join(tmp_path, entry["file"]).replace(".z8", ".json")
    assert _normalized(again) == _normalized(custom[0].path.replace(".z8", ".json"))


def test_tw_make_args_parse_with_tw_make():
    """The args each spec claims to mirror are accepted by tw-make's own parser."""
    import importlib.machinery
    import importlib.util
    import sys

    path = os.path.join(os.path.dirname(sys.executable), "tw-make")
    loader = importlib.machinery.SourceFileLoader("tw_make_script", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    parser = module.build_parser()
    args = parser.parse_args(CUSTOM.tw_make_args() + ["--seed", "1"])
    assert (args.world_size, args.nb_objects, args.quest_length) == (2, 3, 4)
    args = parser.parse_args(SIMPLE.tw_make_args())
    assert (args.rewards, args.goal, args.test) == ("dense", "detailed", False)
    cooking = GameSetSpec(kind="cooking", recipe=2, take=1, go=6, cut=True, cooking_split="valid")
    args = parser.parse_args(cooking.tw_make_args())
    assert (args.recipe, args.take, args.go, args.cut, args.open, args.split) == (
        2, 1, 6, True, False, "valid")
    assert cooking.name == "cooking-r2-t1-g6-cut-valid"
    for kind, sub in (("coin", "tw-coin_collector"), ("treasure", "tw-treasure_hunter")):
        spec = GameSetSpec(kind=kind, level=7)
        assert parser.parse_args(spec.tw_make_args()).level == 7
        assert spec.tw_make_args()[0] == sub and spec.name == f"{kind}-l7"


def test_split_seed_ranges_are_disjoint_and_checked():
    ranges = sorted(SPLIT_SEED_RANGES.values())
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))
    assert SPLIT_SEED_RANGES["test"] == (1, 19999)
    assert split_seeds("train", 3) == [30001, 30002, 30003]
    assert split_seeds("sft", 2, offset=5) == [40006, 40007]
    assert split_seeds("test", 2, offset=100) == [101, 102]
    with pytest.raises(EnvError, match="split 'test' has seeds 1..19999"):
        split_seeds("test", 20000)
    with pytest.raises(EnvError, match="Unknown split"):
        split_seeds("dev", 1)
    with pytest.raises(EnvError, match="kind"):
        GameSetSpec(kind="zork")


# -- episodes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("game", [0, 1])
def test_walkthrough_wins_sparse_and_dense(tw_games, game):
    custom, _ = tw_games
    task = custom[game]
    sparse = expert_trajectory(EnvSpec("textworld", {"reward_mode": "sparse"}), task, 50)
    assert sparse["won"] and sparse["rewards"][-1] == 1.0 and sum(sparse["rewards"]) == 1.0
    assert len(sparse["observations"]) == len(sparse["actions"]) + 1
    assert len(sparse["actions"]) == task.meta["walkthrough_len"]
    env = TextWorldEnv(reward_mode="dense")
    first, steps = _play(env, task, sparse["actions"])
    assert [s.observation for s in steps] == sparse["observations"][1:]
    assert sum(s.reward for s in steps) == first.max_score == steps[-1].info["score"]
    assert [s.done for s in steps] == [False] * (len(steps) - 1) + [True]
    assert steps[-1].won and not steps[-1].info["truncated"]
    env.close()


def test_dense_rewards_are_score_differences_on_tw_simple(tw_games):
    _, simple = tw_games
    env = TextWorldEnv(reward_mode="dense", invalid_action_penalty=-0.5)
    first = env.reset(simple[0], 40)
    assert first.max_score == simple[0].meta["max_score"] > 1
    scores, total = [0.0], 0.0
    for action in ["look", "dance"] + first.walkthrough:
        step = env.step(action)
        total += step.reward
        gained = step.info["score"] - scores[-1]
        assert step.reward == gained + (-0.5 if step.info["invalid"] else 0.0)
        scores.append(step.info["score"])
    assert step.won and scores[-1] == first.max_score
    assert total == first.max_score - 0.5  # one invalid action ("dance")
    assert sum(1 for a, b in zip(scores, scores[1:]) if b > a) >= 3  # several rewarded turns
    env.close()


def test_observations_are_clean(tw_games):
    custom, _ = tw_games
    env = TextWorldEnv()
    first = env.reset(custom[0], 10)
    assert "$$" not in first.observation and "\\$" not in first.observation
    assert first.observation.startswith("-= ") and "You are carrying" in first.observation
    assert first.objective and first.objective not in first.observation
    step = env.step("look")
    assert ">" not in step.observation and "/1" not in step.observation
    assert step.observation.count("-= ") == 1  # the room once, not repeated after 'look'
    env.close()


def test_invalid_and_garbage_actions_are_feedback(tw_games):
    custom, _ = tw_games
    env = TextWorldEnv(reward_mode="dense", invalid_action_penalty=-0.1)
    first = env.reset(custom[0], 50)
    cases = {
        "xyzzy frobnicate": "That's not a verb I recognise.",
        "take the purple elephant": "You can't see any such thing.",
        "": "I beg your pardon?",
        "\x00\x01": "I beg your pardon?",
        "quit": META_FEEDBACK,
        "Restart.": META_FEEDBACK,
        "a" * 5000: "That's not a verb I recognise.",
    }
    for action, feedback in cases.items():
        step = env.step(action)
        assert step.observation.startswith(feedback), (action, step.observation)
        assert step.info["invalid"] and step.reward == pytest.approx(-0.1)
        assert not step.done and step.info["score"] == 0
    look = env.step("look")
    assert not look.info["invalid"] and look.reward == 0.0
    # The game continued normally: the walkthrough still wins after the junk.
    for action in first.walkthrough:
        step = env.step(action)
    assert step.won
    env.close()


def test_sanitize_and_parsers():
    assert sanitize_action("  Go North.\nquit") == "go north"
    assert sanitize_action("open box; take key") == "open box"
    assert sanitize_action(None) == "" and sanitize_action("\x00") == ""
    assert sanitize_action("ünï  code") == "n code"
    assert inventory_items("You are carrying: an old key and a glass.") == ["an old key",
                                                                           "a glass"]
    assert inventory_items("You are carrying: a, b, and c.") == ["a", "b", "c"]
    assert inventory_items("You are carrying nothing.") == []
    raw = "\n\n  ____ \n |  \\$$ \n\nHello!\n\n>    -= Room =-0/1"
    assert clean_feedback(raw) == "Hello!"


def test_budget_truncates(tw_games):
    custom, _ = tw_games
    env = TextWorldEnv()
    first = env.reset(custom[0], 2)
    a, b = env.step("look"), env.step("inventory")
    assert not a.done and b.done and not b.won and b.info["truncated"] and b.info["turn"] == 2
    after = env.step(first.walkthrough[0])
    assert after.done and after.reward == 0.0 and after.info["after_end"]
    # Winning on the very last turn of the budget is a win, not a truncation.
    first = env.reset(custom[0], custom[0].meta["walkthrough_len"])
    for action in first.walkthrough:
        step = env.step(action)
    assert step.done and step.won and not step.info["truncated"]
    env.close()


def test_admissible_and_compact(tw_games):
    custom, _ = tw_games
    env = TextWorldEnv(admissible=True, compact=True)
    full = TextWorldEnv()
    first, long_first = env.reset(custom[0], 20), full.reset(custom[0], 20)
    assert first.admissible == sorted(set(first.admissible)) and "look" in first.admissible
    assert first.walkthrough[0] in first.admissible
    assert first.observation.startswith("Room: ") and first.observation.count("\n") == 2
    assert first.observation.endswith("Inventory: nothing")
    for action in first.walkthrough[:-1]:
        step, long_step = env.step(action), full.step(action)
        assert step.info["admissible"] == sorted(set(step.info["admissible"]))
        assert len(step.observation) < len(long_step.observation)
        assert step.reward == long_step.reward
    assert env.step(first.walkthrough[-1]).won
    env.close()
    full.close()


def test_missing_or_corrupt_game_raises_env_error(tw_games, tmp_path):
    custom, _ = tw_games
    env = TextWorldEnv()
    missing = str(tmp_path / "nope.z8")
    with pytest.raises(EnvError, match="nope.z8.*Regenerate"):
        env.reset(Task("t", missing, "textworld"), 5)
    src = custom[0].path
    truncated = str(tmp_path / "trunc.z8")
    with open(src, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:3000])
    shutil.copy(src.replace(".z8", ".json"), truncated.replace(".z8", ".json"))
    with pytest.raises(EnvError, match="Corrupt TextWorld story file.*trunc.z8"):
        env.reset(Task("t", truncated, "textworld"), 5)
    flipped = str(tmp_path / "flip.z8")
    data = bytearray(open(src, "rb").read())
    data[5000] ^= 0xFF
    open(flipped, "wb").write(bytes(data))
    shutil.copy(src.replace(".z8", ".json"), flipped.replace(".z8", ".json"))
    with pytest.raises(EnvError, match="flip.z8"):
        env.reset(Task("t", flipped, "textworld"), 5)
    bad_json = str(tmp_path / "badjson.z8")
    shutil.copy(src, bad_json)
    open(bad_json.replace(".z8", ".json"), "w").write("{not json")
    with pytest.raises(EnvError, match="badjson.json"):
        env.reset(Task("t", bad_json, "textworld"), 5)
    no_json = str(tmp_path / "nojson.z8")
    shutil.copy(src, no_json)
    with pytest.raises(EnvError, match="nojson.json"):
        env.reset(Task("t", no_json, "textworld"), 5)
    assert env.reset(custom[0], 5).walkthrough  # the env still works
    env.close()
    with pytest.raises(EnvError, match="reward_mode"):
        TextWorldEnv(reward_mode="shaped")
    with pytest.raises(EnvError, match="<= 0"):
        TextWorldEnv(invalid_action_penalty=0.5)


def test_failed_seeds_are_skipped_and_refilled(tmp_path, monkeypatch):
    """A seed whose quest cannot be generated is recorded and the next seed fills in."""
    from meowjax.envs import textworld_games

    made = []
    monkeypatch.setitem(textworld_games.SPLIT_SEED_RANGES, "test", (1, 100))  # runs out sooner

    def fake_make(spec, seed, game_dir):
        made.append(seed)
        if seed % 2 == 0:
            return {"seed": seed, "error": "QuestGenerationError: no quest"}
        stem = os.path.join(game_dir, f"g{seed}")
        for ext in (".z8", ".json"):
            open(stem + ext, "w").close()
        return {"seed": seed, "file": f"g{seed}.z8", "walkthrough": ["go"], "walkthrough_len": 1,
                "max_score": 1.0}

    monkeypatch.setattr(textworld_games, "make_one_game", fake_make)
    spec = GameSetSpec(kind="custom", split="test", num_games=3)
    tasks = generate_games(spec, str(tmp_path), workers=1)
    assert [t.meta["seed"] for t in tasks] == [1, 3, 5] and made == [1, 2, 3, 4, 5]
    manifest = json.load(open(os.path.join(spec.game_dir(str(tmp_path)), "manifest.json")))
    assert [s["seed"] for s in manifest["skipped"]] == [2, 4]
    os.remove(tasks[1].path)  # a lost file is made again; known failures are not retried
    made.clear()
    assert generate_games(spec, str(tmp_path), workers=1) == tasks and made == [3]
    with pytest.raises(EnvError, match="ran out of seeds"):
        generate_games(GameSetSpec(kind="custom", split="test", num_games=60), str(tmp_path),
                       workers=1)


def test_renamed_task_shows_new_names_and_wins_with_them(tw_games):
    """``task.meta["rename"]``: the agent reads and writes fresh entity names; the game (and the
    process reward's plan matching) runs unchanged underneath."""
    import numpy as np

    from meowjax.envs import textworld_augment
    from meowjax.envs.process_reward import ProcessRewardEnv

    custom, _ = tw_games
    task = custom[0]
    rename = textworld_augment.task_renamer(custom)
    renamed = rename(task, np.random.default_rng(0))
    mapping = renamed.meta["rename"]
    assert mapping and "rename" not in task.meta
    plain, env = TextWorldEnv(admissible=True, compact=True), TextWorldEnv(admissible=True,
                                                                          compact=True)
    orig, first = plain.reset(task, 30), env.reset(renamed, 30)
    show = textworld_augment.renamer(mapping)
    assert first.objective == show(orig.objective) != orig.objective
    assert first.walkthrough == [show(a) for a in orig.walkthrough] != orig.walkthrough
    assert first.admissible == sorted({show(a) for a in orig.admissible})
    # The other game's names replace this game's: no old name is left in what the agent reads.
    old = [n for n in mapping if n not in {v.lower() for v in mapping.values()}]
    text = (first.objective + first.observation + " ".join(first.walkthrough)).lower()
    assert old and not [n for n in old if re.search(rf"\b{re.escape(n)}\b", text)]
    for new_action, old_action in zip(first.walkthrough, orig.walkthrough):
        a, b = env.step(new_action), plain.step(old_action)
        assert (a.observation, a.reward, a.won) == (show(b.observation), b.reward, b.won)
        assert a.info["command"] == show(b.info["command"])
    assert a.won
    # Process reward (prefix matching of the renamed walkthrough) pays the plan as usual.
    for replan in (True, False):
        pr = ProcessRewardEnv(replan=replan, admissible=True)
        start = pr.reset(renamed, 30)
        steps = [pr.step(a) for a in start.walkthrough]
        assert steps[-1].won and sum(s.info["process_reward"] for s in steps) == pytest.approx(1.0)
        pr.close()
    plain.close()
    env.close()


# -- cache integrity and the generation lock ----------------------------------------------------
TINY = GameSetSpec(kind="custom", split="test", num_games=2, world_size=1, nb_objects=2,
                   quest_length=2)


def test_corrupt_or_missing_game_is_made_again_at_load(tmp_path, caplog):
    """Garbage in a .z8 (size kept) and a lost .json are found by the manifest's checksums and
    made again, byte-identical to the originals; an old manifest without sums gets them."""
    out = str(tmp_path)
    tasks = generate_games(TINY, out, workers=1)
    z8 = [open(t.path, "rb").read() for t in tasks]
    js = [open(t.path.replace(".z8", ".json"), "rb").read() for t in tasks]
    open(tasks[0].path, "wb").write(os.urandom(len(z8[0])))
    os.remove(tasks[1].path.replace(".z8", ".json"))
    with caplog.at_level("WARNING"):
        again = generate_games(TINY, out, workers=1)
    assert again == tasks
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "differs from the file that was generated" in warned and "-1.z8" in warned
    assert "-2.json is missing" in warned
    assert [open(t.path, "rb").read() for t in tasks] == z8
    assert [open(t.path.replace(".z8", ".json"), "rb").read() for t in tasks] == js
    # A manifest from before checksums: intact games gain sums, a damaged one is made again.
    path = os.path.join(TINY.game_dir(out), "manifest.json")
    manifest = json.load(open(path))
    for g in manifest["games"]:
        del g["sums"]
    json.dump(manifest, open(path, "w"))
    data = bytearray(z8[1])
    data[len(data) // 2] ^= 0xFF
    open(tasks[1].path, "wb").write(bytes(data))
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert generate_games(TINY, out, workers=1) == tasks
    assert "Corrupt TextWorld story file" in caplog.text and "-2.z8" in caplog.text
    assert open(tasks[1].path, "rb").read() == z8[1]
    assert all("sums" in g for g in json.load(open(path))["games"])


_GENERATE = """
import sys
from meowjax.envs.textworld_games import GameSetSpec, generate_games
spec = GameSetSpec(kind="custom", split="test", num_games=3, world_size=1, nb_objects=2,
                   quest_length=2)
tasks = generate_games(spec, sys.argv[1], workers=1, verbose=True)
print("TASKS", [t.task_id for t in tasks])
"""


def test_lock_two_processes_generating_into_one_folder(tmp_path):
    """Two processes generating one set concurrently: one makes the games, the other waits for
    the folder's lock and reuses them; one complete set, every game intact."""
    import subprocess
    import sys

    from meowjax.envs import game_cache
    from meowjax.envs.textworld_env import check_game_file
    procs = [subprocess.Popen([sys.executable, "-c", _GENERATE, str(tmp_path)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    made = [sum(" seed " in line for line in o.splitlines()) for o, _ in outs]
    assert sorted(made) == [0, 3]
    lists = [next(l for l in o.splitlines() if l.startswith("TASKS")) for o, _ in outs]
    assert lists[0] == lists[1]
    spec = GameSetSpec(kind="custom", split="test", num_games=3, world_size=1, nb_objects=2,
                       quest_length=2)
    manifest = json.load(open(os.path.join(spec.game_dir(str(tmp_path)), "manifest.json")))
    assert [g["seed"] for g in manifest["games"]] == [1, 2, 3]
    for g in manifest["games"]:
        assert game_cache.entry_problem(g, spec.game_dir(str(tmp_path))) is None
        check_game_file(os.path.join(spec.game_dir(str(tmp_path)), g["file"]))
