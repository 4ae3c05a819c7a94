"""The on-disk game cache's integrity: file checksums in the manifest, and one writer at a time.

A game file damaged on disk (a bad copy, a full disk, a killed write) must not pass the cache check
and fail later in the middle of RL, so each manifest entry records the size and SHA-256 of the
files the environment reads (``.z8``, ``.json``); a game whose files are missing or differ is
named in a warning and made again (generation is seeded: the same seed makes the same bytes).

Manifests written before checksums existed still load: each game's story header checksum and JSON
are checked (``textworld_env.check_game_file``), a game that passes gets its sums recorded (the
manifest is rewritten with them) and one that fails is made again.

Two processes generating into one cache folder (a sweep's runs) take turns on an ``fcntl.flock``
of ``<folder>/.lock``: the second waits, then finds the first one's games and reuses them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from typing import Any, Iterator

from absl import logging

from meowjax.envs.base import EnvError

CHECKED_EXTS = (".z8", ".json")   # what TextWorldEnv reads; .ni is the Inform source
LOCK_FILE = ".lock"


def file_sums(stem: str) -> dict[str, list]:
    """``{ext: [size, sha256 hex]}`` of the game ``stem`` + each of CHECKED_EXTS."""
    out = {}
    for ext in CHECKED_EXTS:
        with open(stem + ext, "rb") as f:
            data = f.read()
        out[ext] = [len(data), hashlib.sha256(data).hexdigest()]
    return out


def entry_problem(entry: dict[str, Any], game_dir: str) -> str | None:
    """Why the game of a manifest entry cannot be used (missing or damaged file), or None.

    An entry without sums (an older manifest) is checked by the story header and JSON and, if
    intact, gets its sums here (the caller writes the manifest back)."""
    if "file" not in entry:
        return "the manifest entry names no file"
    stem = os.path.join(game_dir, os.path.splitext(entry["file"])[0])
    for ext in CHECKED_EXTS:
        if not os.path.isfile(stem + ext):
            return f"{stem + ext} is missing"
    sums = entry.get("sums")
    if sums is None:
        from meowjax.envs.textworld_env import check_game_file
        try:
            check_game_file(stem + ".z8")
        except EnvError as e:
            return str(e).split(". Regenerate")[0]
        entry["sums"] = file_sums(stem)
        return None
    have = file_sums(stem)
    for ext, (size, digest) in sums.items():
        if ext not in have:
            return f"{stem + ext} is not a checked file"
        if have[ext][0] != size:
            return f"{stem + ext} has {have[ext][0]} bytes, the manifest says {size}"
        if have[ext][1] != digest:
            return f"{stem + ext} differs from the file that was generated (SHA-256)"
    return None


def intact_entries(entries: list[dict[str, Any]], game_dir: str) -> dict[int, dict[str, Any]]:
    """``{seed: entry}`` of the games whose files are intact; a warning names each other one
    (it is made again by the caller)."""
    out = {}
    for entry in entries:
        problem = entry_problem(entry, game_dir)
        if problem:
            logging.warning("Game seed %s of %s: %s; making it again.", entry.get("seed"),
                            game_dir, problem)
        else:
            out[entry["seed"]] = entry
    return out


def write_manifest(path: str, manifest: dict[str, Any]) -> None:
    """Replaces the manifest atomically (a per-process temporary name, then ``os.replace``)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(game_dir: str, poll_s: float = 0.5) -> Iterator[None]:
    """Holds the folder's generation lock for the block, waiting for another holder (a line
    says so). The kernel drops an ``flock`` when its process exits, even when killed."""
    fd = os.open(os.path.join(game_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logging.info("Waiting for another process generating games into %s", game_dir)
            while True:   # polling, so a SIGTERM handler can raise in between
                time.sleep(poll_s)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    continue
        yield
    finally:
        os.close(fd)
