"""Pre-generate a TextWorld game set (cached with a manifest; rerunning only fills in what is missing).

    python -m experiments.make_games --kind=custom --world_size=2 --nb_objects=3 --quest_length=4 \
        --split=train --num=100 --out=games --workers=2
    python -m experiments.make_games --kind=simple --rewards=dense --goal=detailed --split=test \
        --num=100 --out=games
    python -m experiments.make_games --kind=cooking --recipe=1 --take=1 --go=6 --open --cook \
        --split=valid --num=20 --out=games

Seeds come from the split's range (test 1-100, valid 20001+, train 30001+, sft 40001+); see
``meowjax.envs.textworld_games``. Games land in ``<out>/<name>/<split>/`` with a manifest.json.
"""

import time

from absl import app, flags

from meowjax.envs import textworld_games

_KIND = flags.DEFINE_enum("kind", "custom", list(textworld_games.KINDS), "Kind of game.")
_NAME = flags.DEFINE_string(
    "name", None, "custom difficulty as 'w2-o3-q4' (overrides --world_size/--nb_objects/"
    "--quest_length).")
_SPLIT = flags.DEFINE_enum("split", "train", list(textworld_games.SPLIT_SEED_RANGES),
                           "Split (picks the seed range).")
_NUM = flags.DEFINE_integer("num", 10, "Number of games.")
_OFFSET = flags.DEFINE_integer("seed_offset", 0, "Skip this many seeds of the split's range.")
_OUT = flags.DEFINE_string("out", "games", "Output directory (cache).")
_WORKERS = flags.DEFINE_integer("workers", 2, "Generation processes (1 = in this process).")
_WORLD = flags.DEFINE_integer("world_size", 2, "custom: number of rooms.")
_OBJECTS = flags.DEFINE_integer("nb_objects", 3, "custom: number of objects.")
_QUEST = flags.DEFINE_integer("quest_length", 4, "custom: quest length.")
_REWARDS = flags.DEFINE_enum("rewards", "dense", ["dense", "balanced", "sparse"],
                             "simple: reward frequency.")
_GOAL = flags.DEFINE_enum("goal", "detailed", ["detailed", "brief", "none"], "simple: goal text.")
_LEVEL = flags.DEFINE_integer("level", 1, "coin (1-300) / treasure (1-30): difficulty level.")
_RECIPE = flags.DEFINE_integer("recipe", 1, "cooking: ingredients in the recipe.")
_TAKE = flags.DEFINE_integer("take", 0, "cooking: ingredients to find.")
_GO = flags.DEFINE_enum("go", "1", ["1", "6", "9", "12"], "cooking: number of rooms.")
_OPEN = flags.DEFINE_bool("open", False, "cooking: containers/doors need opening.")
_COOK = flags.DEFINE_bool("cook", False, "cooking: ingredients need cooking.")
_CUT = flags.DEFINE_bool("cut", False, "cooking: ingredients need cutting.")
_DROP = flags.DEFINE_bool("drop", False, "cooking: limited inventory.")
_COOKING_SPLIT = flags.DEFINE_enum("cooking_split", None, ["train", "valid", "test"],
                                   "cooking: food distribution (default: all).")
_SIMPLE_TEST = flags.DEFINE_bool("simple_test", False, "simple: draw from tw-simple's test games.")


def parse_custom_name(name: str) -> tuple[int, int, int]:
    """'w2-o3-q4' -> (2, 3, 4)."""
    try:
        w, o, q = name.split("-")
        assert w[0] == "w" and o[0] == "o" and q[0] == "q"
        return int(w[1:]), int(o[1:]), int(q[1:])
    except (ValueError, AssertionError, IndexError) as e:
        raise app.UsageError(f"--name={name!r}: expected 'w<rooms>-o<objects>-q<quest>', "
                             "e.g. w2-o3-q4.") from e


def spec_from_flags() -> textworld_games.GameSetSpec:
    world, objects, quest = _WORLD.value, _OBJECTS.value, _QUEST.value
    if _NAME.value:
        world, objects, quest = parse_custom_name(_NAME.value)
    return textworld_games.GameSetSpec(
        kind=_KIND.value, split=_SPLIT.value, num_games=_NUM.value, seed_offset=_OFFSET.value,
        world_size=world, nb_objects=objects, quest_length=quest, rewards=_REWARDS.value,
        goal=_GOAL.value, level=_LEVEL.value, recipe=_RECIPE.value, take=_TAKE.value,
        go=int(_GO.value), open=_OPEN.value, cook=_COOK.value, cut=_CUT.value,
        drop=_DROP.value, cooking_split=_COOKING_SPLIT.value, simple_test=_SIMPLE_TEST.value)


def main(argv):
    del argv
    spec = spec_from_flags()
    start = time.perf_counter()
    tasks = textworld_games.generate_games(spec, _OUT.value, workers=_WORKERS.value,
                                           verbose=True)
    lengths = [t.meta["walkthrough_len"] for t in tasks]
    print(f"{len(tasks)} games of {spec.name}/{spec.split} in {spec.game_dir(_OUT.value)} "
          f"({time.perf_counter() - start:.1f} s); walkthrough length min/mean/max "
          f"{min(lengths)}/{sum(lengths) / len(lengths):.1f}/{max(lengths)}")


if __name__ == "__main__":
    app.run(main)
