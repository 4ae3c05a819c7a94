"""TextWorld game sets: generation in a process pool, on-disk cache + manifest.

Games are made in-process with textworld's Python API exactly as ``tw-make`` makes them (a
``tw-make`` process costs ~4 s of start-up per game), in a ``multiprocessing`` pool ("spawn").

Kinds and the ``tw-make`` command each one reproduces (same options, same seed -> same game):

=========  ==========================================================================  ============
kind       tw-make equivalent                                                          name
=========  ==========================================================================  ============
custom     tw-make custom --world-size W --nb-objects O --quest-length Q --seed S      w2-o3-q4
simple     tw-make tw-simple --rewards R --goal G [--test] --seed S                    simple-dense-detailed
coin       tw-make tw-coin_collector --level L --seed S                                coin-l5
treasure   tw-make tw-treasure_hunter --level L --seed S                               treasure-l5
cooking    tw-make tw-cooking --recipe N --take N --go N [--open --cook --cut --drop]   cooking-r1-t1-g6-open-cook
           [--split train|valid|test] --seed S
=========  ==========================================================================  ============

Seed ranges per split (disjoint, as in the Practitioner's Guide; see :func:`split_seeds`):

=====  =====  =============
split  first  last
=====  =====  =============
test   1      19999
valid  20001  29999
train  30001  39999
sft    40001  49999
=====  =====  =============

Layout: ``<out>/<name>/<split>/<name>-<split>-<seed>.z8`` (+ ``.json``, ``.ni``) and one
``manifest.json`` per game set listing the spec and, per game, seed, file, walkthrough and
max score and the checksums of its files. A game set already on disk (manifest present, spec
equal, files intact: ``game_cache``) is reused; only missing or damaged games are made, one
process at a time per folder. A seed whose quest cannot be generated is skipped and recorded under
``"skipped"``; the next seeds of the range fill in.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import multiprocessing
import os
import sys
import time
import warnings
from typing import Any

import tqdm

from meowjax.envs import game_cache
from meowjax.envs.base import EnvError, Task

KINDS = ("custom", "simple", "coin", "treasure", "cooking")
SPLIT_SEED_RANGES: dict[str, tuple[int, int]] = {
    "test": (1, 19999),
    "valid": (20001, 29999),
    "train": (30001, 39999),
    "sft": (40001, 49999),
}
_CHALLENGE = {"simple": "tw-simple", "coin": "tw-coin_collector",
              "treasure": "tw-treasure_hunter", "cooking": "tw-cooking"}
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


def split_seeds(split: str, num: int, offset: int = 0) -> list[int]:
    """Seeds ``first + offset, ..., first + offset + num - 1`` of ``split``'s range (table above)."""
    if split not in SPLIT_SEED_RANGES:
        raise EnvError(f"Unknown split {split!r}; known splits: {sorted(SPLIT_SEED_RANGES)}.")
    first, last = SPLIT_SEED_RANGES[split]
    seeds = list(range(first + offset, first + offset + num))
    if num < 0 or offset < 0 or (seeds and seeds[-1] > last):
        raise EnvError(f"split {split!r} has seeds {first}..{last}; offset={offset} num={num} "
                       "leaves it. Ask for fewer games or a smaller offset.")
    return seeds


@dataclasses.dataclass(frozen=True)
class GameSetSpec:
    """Which games: a kind, its difficulty settings, a split and how many (see module table).

    Only the fields of the chosen ``kind`` matter: custom uses world_size / nb_objects /
    quest_length; simple uses rewards / goal / simple_test; coin and treasure use level; cooking
    uses recipe / take / go / open / cook / cut / drop / cooking_split. ``seed_offset`` skips the
    first seeds of the split's range (e.g. to extend a set without overlap).
    """

    kind: str = "custom"
    split: str = "train"
    num_games: int = 10
    seed_offset: int = 0
    world_size: int = 2
    nb_objects: int = 3
    quest_length: int = 4
    rewards: str = "dense"
    goal: str = "detailed"
    simple_test: bool = False
    level: int = 1
    recipe: int = 1
    take: int = 0
    go: int = 1
    open: bool = False
    cook: bool = False
    cut: bool = False
    drop: bool = False
    cooking_split: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise EnvError(f"GameSetSpec.kind={self.kind!r}; use one of {KINDS}.")
        if self.kind == "custom" and min(self.world_size, self.nb_objects, self.quest_length) < 1:
            raise EnvError(f"custom games need world_size, nb_objects, quest_length >= 1, got "
                           f"{self.world_size}, {self.nb_objects}, {self.quest_length}.")
        split_seeds(self.split, 0, self.seed_offset)

    @property
    def name(self) -> str:
        """Difficulty name: w2-o3-q4, simple-dense-detailed, coin-l5, treasure-l5, cooking-..."""
        if self.kind == "custom":
            return f"w{self.world_size}-o{self.nb_objects}-q{self.quest_length}"
        if self.kind == "simple":
            return f"simple-{self.rewards}-{self.goal}" + ("-test" if self.simple_test else "")
        if self.kind in ("coin", "treasure"):
            return f"{self.kind}-l{self.level}"
        skills = [s for s in ("open", "cook", "cut", "drop") if getattr(self, s)]
        split = [self.cooking_split] if self.cooking_split else []
        return "-".join([f"cooking-r{self.recipe}-t{self.take}-g{self.go}"] + skills + split)

    def tw_make_args(self) -> list[str]:
        """The ``tw-make`` arguments (without --seed/--output) making the same games."""
        if self.kind == "custom":
            return ["custom", "--world-size", str(self.world_size), "--nb-objects",
                    str(self.nb_objects), "--quest-length", str(self.quest_length)]
        args = [_CHALLENGE[self.kind]]
        if self.kind == "simple":
            args += ["--rewards", self.rewards, "--goal", self.goal]
            args += ["--test"] if self.simple_test else []
        elif self.kind in ("coin", "treasure"):
            args += ["--level", str(self.level)]
        else:
            args += ["--recipe", str(self.recipe), "--take", str(self.take), "--go", str(self.go)]
            args += [f"--{s}" for s in ("open", "cook", "cut", "drop") if getattr(self, s)]
            args += ["--split", self.cooking_split] if self.cooking_split else []
        return args

    def seeds(self, num: int | None = None) -> list[int]:
        return split_seeds(self.split, self.num_games if num is None else num, self.seed_offset)

    def game_dir(self, out_dir: str) -> str:
        return os.path.join(out_dir, self.name, self.split)


# -- making one game (runs in pool workers) ---------------------------------------------------
def _challenge_settings(spec: GameSetSpec) -> dict[str, Any]:
    """Parses the challenge's own argparse, as tw-make does, so defaults match exactly."""
    import textworld.challenges

    _, _, add_arguments = textworld.challenges.CHALLENGES[_CHALLENGE[spec.kind]]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    try:
        return vars(parser.parse_args(spec.tw_make_args()[1:]))
    except SystemExit as e:
        raise EnvError(f"Bad {spec.kind} settings for tw-make: {spec.tw_make_args()}") from e


@functools.lru_cache(maxsize=None)
def _load_kb(*args, **kwargs):
    return _ORIGINAL_KB_LOAD[0](*args, **kwargs)


_ORIGINAL_KB_LOAD: list = []


@contextlib.contextmanager
def _cached_knowledge_bases():
    """Parses each textworld knowledge base once per process (else ~4 s of parsing per game).

    The challenges call ``KnowledgeBase.load(their_path)`` for every game; the parsed logic is
    read-only during generation (textworld itself shares ``KnowledgeBase.default()``), so a
    per-process memo changes no game (pinned by the determinism test).
    """
    from textworld.generator.data import KnowledgeBase

    if not _ORIGINAL_KB_LOAD:
        _ORIGINAL_KB_LOAD.append(KnowledgeBase.load)
    KnowledgeBase.load = _load_kb
    try:
        yield
    finally:
        KnowledgeBase.load = _ORIGINAL_KB_LOAD[0]


def make_one_game(spec: GameSetSpec, seed: int, game_dir: str) -> dict[str, Any]:
    """Makes + compiles the game of ``seed``; returns its manifest entry (skipped: ``error`` key).

    For custom games the options are exactly those tw-make custom sets: chaining min/max breadth
    1/5, min depth 1, and --quest-length Q setting min_length = max_length = max_depth = Q.
    """
    import textworld
    import textworld.challenges
    from textworld.generator import QuestGenerationError
    from textworld.generator.data import KnowledgeBase

    stem = f"{spec.name}-{spec.split}-{seed}"
    options = textworld.GameOptions()
    options.seeds = seed
    options.path = os.path.join(os.path.abspath(game_dir), stem + ".z8")
    options.force_recompile = True
    start = time.perf_counter()
    try:
        with _cached_knowledge_bases(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jericho: "not fully supported" on every compile
            if spec.kind == "custom":
                options.kb = KnowledgeBase.default()
                options.nb_rooms = spec.world_size
                options.nb_objects = spec.nb_objects
                options.nb_parallel_quests = 1
                options.chaining.min_breadth, options.chaining.max_breadth = 1, 5
                options.chaining.min_depth = 1
                options.quest_length = spec.quest_length
                game_file, game = textworld.make(options)
            else:
                _, make, _ = textworld.challenges.CHALLENGES[_CHALLENGE[spec.kind]]
                game = make(settings=_challenge_settings(spec), options=options)
                game_file = textworld.generator.compile_game(game, options)
    except (QuestGenerationError, ValueError, AssertionError) as e:
        return {"seed": seed, "error": f"{type(e).__name__}: {e}"[:500]}
    walkthrough = list(game.metadata.get("walkthrough") or [])
    return {"seed": seed, "file": os.path.basename(game_file), "walkthrough": walkthrough,
            "walkthrough_len": len(walkthrough), "max_score": float(game.max_score),
            "seconds": round(time.perf_counter() - start, 3)}


def _make_one_star(args: tuple) -> dict[str, Any]:
    return make_one_game(*args)


# -- game sets ---------------------------------------------------------------------------------
def _read_manifest(path: str, spec: GameSetSpec) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    same = (manifest.get("version") == MANIFEST_VERSION
            and manifest.get("tw_make_args") == spec.tw_make_args())
    return manifest if same else None


def _task(spec: GameSetSpec, entry: dict[str, Any], game_dir: str) -> Task:
    meta = {"difficulty": spec.name, "kind": spec.kind, "seed": entry["seed"],
            "walkthrough_len": entry["walkthrough_len"], "max_score": entry["max_score"]}
    return Task(task_id=f"textworld/{spec.name}/{spec.split}/{entry['seed']}",
                path=os.path.join(os.path.abspath(game_dir), entry["file"]),
                family="textworld", split=spec.split, meta=meta)


def generate_games(spec: GameSetSpec, out_dir: str, workers: int = 2,
                   verbose: bool = False) -> list[Task]:
    """Returns ``spec.num_games`` tasks, making (in ``workers`` processes) those not on disk.

    Deterministic: the same spec gives the same seeds and the same games. workers <= 1 makes
    games in this process. Games whose files are missing or damaged are made again, with a
    warning (``game_cache``); one process at a time generates into a folder (others wait,
    then reuse its games). Raises EnvError if the split's seed range runs out because too many
    seeds fail quest generation (relax quest_length or add objects/rooms).
    """
    game_dir = spec.game_dir(out_dir)
    os.makedirs(game_dir, exist_ok=True)
    with game_cache.locked(game_dir):
        return _generate_locked(spec, game_dir, workers, verbose)


def _generate_locked(spec: GameSetSpec, game_dir: str, workers: int,
                     verbose: bool) -> list[Task]:
    manifest_path = os.path.join(game_dir, MANIFEST)
    manifest = _read_manifest(manifest_path, spec) or {}
    done = game_cache.intact_entries(manifest.get("games", []), game_dir)
    skipped = {e["seed"]: e for e in manifest.get("skipped", [])}
    first, last = SPLIT_SEED_RANGES[spec.split]
    seed = first + spec.seed_offset
    chosen: list[int] = []
    pool = None
    bar = None  # a progress bar on a terminal's stderr, once there are games to make
    try:
        while len(chosen) < spec.num_games:
            # Walk the range in order; a seed is either done, known-skipped, or to be made.
            todo: list[int] = []
            while len(todo) + len(chosen) < spec.num_games and seed <= last:
                if seed in done:
                    chosen.append(seed)
                elif seed not in skipped:
                    todo.append(seed)
                seed += 1
            if not todo and len(chosen) < spec.num_games and seed > last:
                raise EnvError(f"Split {spec.split!r} ran out of seeds ({first}..{last}) for "
                               f"{spec.name}: {len(skipped)} seeds failed quest generation. "
                               "Relax the settings (shorter quests, more objects or rooms).")
            jobs = [(spec, s, game_dir) for s in todo]
            if bar is None and jobs:
                bar = tqdm.tqdm(total=spec.num_games, initial=len(chosen), unit="game",
                                desc=f"games {spec.name}/{spec.split}", file=sys.stderr,
                                disable=None, leave=False, dynamic_ncols=True, mininterval=0.5)
            if workers > 1 and len(jobs) > 1:
                if pool is None:
                    pool = multiprocessing.get_context("spawn").Pool(min(workers, len(jobs)))
                results = pool.imap(_make_one_star, jobs)
            else:
                results = map(_make_one_star, jobs)
            for entry in results:
                if "error" in entry:
                    skipped[entry["seed"]] = entry
                else:
                    stem = os.path.join(game_dir, os.path.splitext(entry["file"])[0])
                    entry["sums"] = game_cache.file_sums(stem)
                    done[entry["seed"]] = entry
                    if bar is not None:
                        bar.update(1)
                # Each game is kept as soon as it is made: a stopped run loses at most the
                # games in flight.
                _write_manifest(manifest_path, spec, done, skipped)
                if verbose:
                    print(f"{spec.name}/{spec.split} seed {entry['seed']}: "
                          f"{entry.get('error') or entry['file']}", flush=True)
            chosen.extend(s for s in todo if s in done)
    except BaseException:
        if pool is not None:   # stopped (SIGTERM, an error): do not wait for queued games
            pool.terminate()
            pool.join()
            pool = None
        raise
    finally:
        if bar is not None:
            bar.close()
        if pool is not None:
            pool.close()
            pool.join()
    chosen = sorted(chosen)[:spec.num_games]
    _write_manifest(manifest_path, spec, done, skipped)   # also records sums found missing
    return [_task(spec, done[s], game_dir) for s in chosen]


def _write_manifest(path: str, spec: GameSetSpec, done: dict[int, dict[str, Any]],
                    skipped: dict[int, dict[str, Any]]) -> None:
    game_cache.write_manifest(path, {
        "version": MANIFEST_VERSION, "name": spec.name, "split": spec.split,
        "spec": dataclasses.asdict(spec), "tw_make_args": spec.tw_make_args(),
        "games": [done[s] for s in sorted(done)],
        "skipped": [skipped[s] for s in sorted(skipped)]})


def load_game_set(game_dir: str) -> list[Task]:
    """Tasks of every game listed in ``<game_dir>/manifest.json`` (EnvError if it is missing)."""
    path = os.path.join(game_dir, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)
        spec = GameSetSpec(**manifest["spec"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EnvError(f"Cannot read game-set manifest {path}: {e}. Generate the set with "
                       "python -m experiments.make_games --out=...") from e
    return [_task(spec, e, game_dir) for e in manifest["games"]]
