"""Offline, deterministic generation of code-repair tasks, with a manifest and seed-range splits.

``generate_task(out_dir, tier, seed)`` builds one task from ``random.Random(f"...:{tier}:{seed}")``:

  tier 1  one module (3 definitions + tests), one bug whose fix changes 1 line.
  tier 2  two modules, one bug whose fix is 2 lines (a deleted ``if`` branch, or two one-line
          mutations in the same module).
  tier 3  three modules, bugs in two of them (a one-line fix in each file).

Every task is checked before it is written: the FAIL_TO_PASS tests fail on the buggy snapshot,
the PASS_TO_PASS tests pass on it, each planted mutation alone breaks at least one test, and
applying the reference patch (as the expert's ``replace`` edits) makes every test pass.
Splits are disjoint seed ranges (:data:`SPLIT_SEEDS`). The tasks share one template library, so
train and test tasks differ by the functions chosen and the bug planted, not by vocabulary.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import pathlib
import random
import shutil
import tempfile

from meowjax.envs.base import EnvError, Task
from meowjax.envs.swe import mutate, sandbox, spec, templates

SPLIT_SEEDS: dict[str, range] = {
    "train": range(0, 100_000),
    "sft": range(100_000, 200_000),
    "valid": range(200_000, 300_000),
    "test": range(300_000, 400_000),
}
# tier -> (number of modules, number of buggy modules, lines changed by the fix per buggy module)
TIERS: dict[int, tuple[int, int, int]] = {1: (1, 1, 1), 2: (2, 1, 2), 3: (3, 2, 1)}
DEFS_PER_MODULE = 3
MAX_TRIES = 60
GEN_LIMITS = sandbox.Limits(timeout_s=5.0, memory_mb=512)
MANIFEST = "manifest.json"


def split_of_seed(seed: int) -> str:
    """The split whose seed range holds ``seed``."""
    for name, seeds in SPLIT_SEEDS.items():
        if seed in seeds:
            return name
    raise EnvError(f"seed {seed} is in no split; use a seed in one of "
                   f"{ {k: (v.start, v.stop) for k, v in SPLIT_SEEDS.items()} }")


def _canon(source: str) -> str:
    return ast.unparse(ast.parse(source)) + "\n"


def _fix_size(buggy: str, fixed: str) -> int:
    """Lines the fix touches: max(lines removed, lines added) of the buggy -> fixed diff."""
    minus = plus = 0
    for line in difflib.unified_diff(buggy.splitlines(), fixed.splitlines(), n=0, lineterm=""):
        if line.startswith("-") and not line.startswith("---"):
            minus += 1
        elif line.startswith("+") and not line.startswith("+++"):
            plus += 1
    return max(minus, plus)


def _pick(rng: random.Random, cands: list[mutate.Mutation]) -> mutate.Mutation:
    """Uniform over kinds first, then over sites (so constants do not dominate)."""
    kind = rng.choice(sorted({m.kind for m in cands}))
    return rng.choice([m for m in cands if m.kind == kind])


def _breaks(scratch: str, filename: str, source: str, ids: list[str]) -> list[str] | None:
    """Test ids of one module that fail with ``source``; None if it is not a clean bug."""
    pathlib.Path(scratch, filename).write_text(source)
    run = sandbox.run_tests(scratch, ids, limits=GEN_LIMITS)
    failing = run.not_passed
    return failing if failing and len(failing) < len(ids) and not run.timed_out else None


def _plant_bug(rng: random.Random, scratch: str, module: str, fixed: str, names: list[str],
               ids: list[str], fix_lines: int) -> tuple[str, list[str]]:
    """Mutates ``fixed`` until the change is a clean bug of ``fix_lines`` lines; (source, notes)."""
    tree = ast.parse(fixed)
    cands = mutate.find_mutations(tree, names)
    singles = [m for m in cands if m.kind in mutate.ONE_LINE_KINDS]
    branches = [m for m in cands if m.kind == "missing_branch"]
    filename, tried = f"{module}.py", set()
    try:
        for _ in range(MAX_TRIES):
            if fix_lines == 1:
                plan = (_pick(rng, singles),)
            elif branches and rng.random() < 0.5:
                plan = (rng.choice(branches),)
            else:
                plan = tuple(sorted({_pick(rng, singles), _pick(rng, singles)},
                                    key=lambda m: (m.target, m.index, m.variant)))
            if plan in tried:
                continue
            tried.add(plan)
            new_tree, notes = mutate.apply_mutations(tree, list(plan))
            buggy = ast.unparse(new_tree) + "\n"
            if buggy == fixed or _fix_size(buggy, fixed) != fix_lines:
                continue
            if len(plan) > 1 and any(
                    _breaks(scratch, filename, ast.unparse(mutate.apply_mutations(tree, [m])[0]),
                            ids) is None for m in plan):
                continue  # each planted change must matter on its own
            if _breaks(scratch, filename, buggy, ids) is not None:
                return buggy, notes
    finally:
        pathlib.Path(scratch, filename).write_text(fixed)
    raise EnvError(f"could not plant a {fix_lines}-line bug in {module} after {MAX_TRIES} tries; "
                   "add tests or templates to meowjax/envs/swe/templates.py")


def _problem_statement(run: sandbox.RunResult, f2p: list[str]) -> str:
    lines = ["Some code in this repository is broken. These tests fail:"]
    for test_id in f2p[:6]:
        msg = run.messages.get(test_id, run.status[test_id])
        lines.append(f"  - {test_id}: {msg}")
    if len(f2p) > 6:
        lines.append(f"  - ... and {len(f2p) - 6} more")
    lines.append("Fix the source code (not the tests) so that all tests pass, then submit.")
    return "\n".join(lines)


def _check_expert(files: dict[str, str], task: spec.SweTask, fixed: dict[str, str]) -> None:
    for edit in task.edits():
        files[edit.path] = spec.apply_edit(files[edit.path], edit)
    if any(files[p] != fixed[p] for p in fixed):
        raise EnvError(f"{task.task_id}: reference edits do not reproduce the fixed files")


def generate_task(out_dir: str | os.PathLike, tier: int, seed: int, split: str | None = None,
                  overwrite: bool = False) -> Task:
    """Generates (or reuses) and verifies one task folder; returns its :class:`Task`."""
    if tier not in TIERS:
        raise EnvError(f"unknown tier {tier}; tiers are {sorted(TIERS)}")
    split = split or split_of_seed(seed)
    if seed not in SPLIT_SEEDS.get(split, range(0)):
        raise EnvError(f"seed {seed} is outside split {split!r} "
                       f"(seeds {SPLIT_SEEDS.get(split)}); use split_of_seed(seed)")
    task_id = f"swe/t{tier}/{split}/{seed}"
    task_dir = pathlib.Path(out_dir) / f"t{tier}-{split}-{seed:06d}"
    meta = {"tier": tier, "seed": seed}
    if (task_dir / "task.json").is_file() and not overwrite:
        return Task(task_id, str(task_dir), "swe", split, meta)

    n_modules, n_buggy, fix_lines = TIERS[tier]
    rng = random.Random(f"meowjax-swe:{tier}:{seed}")
    modules = rng.sample(templates.MODULES, n_modules)
    fixed, ids, names = {}, {}, {}
    test_files = {}
    for m in modules:
        pool = templates.templates_of(m)
        chosen = sorted(rng.sample(pool, min(DEFS_PER_MODULE, len(pool))), key=pool.index)
        fixed[f"{m}.py"] = _canon(templates.module_source(m, chosen))
        test_files[f"tests/test_{m}.py"] = _canon(templates.render_tests(m, chosen))
        ids[m] = [templates.case_id(t, c) for t in chosen for c in t.tests]
        names[m] = [t.name for t in chosen]
    all_ids = [i for m in modules for i in ids[m]]

    buggy, notes = dict(fixed), []
    with tempfile.TemporaryDirectory(prefix="meowjax-swe-gen-") as scratch:
        for path, text in {**fixed, **test_files}.items():
            pathlib.Path(scratch, path).parent.mkdir(parents=True, exist_ok=True)
            pathlib.Path(scratch, path).write_text(text)
        if sandbox.run_tests(scratch, all_ids, limits=GEN_LIMITS).not_passed:
            raise EnvError(f"{task_id}: the template library fails its own tests; fix templates")
        for m in sorted(rng.sample(modules, n_buggy), key=modules.index):
            buggy[f"{m}.py"], more = _plant_bug(rng, scratch, m, fixed[f"{m}.py"], names[m],
                                                ids[m], fix_lines)
            notes += more
        for path, text in buggy.items():
            pathlib.Path(scratch, path).write_text(text)
        before = sandbox.run_tests(scratch, all_ids, limits=GEN_LIMITS)
    f2p, p2p = before.not_passed, before.passed
    if not f2p or not p2p:
        raise EnvError(f"{task_id}: generated bug breaks {len(f2p)}/{len(all_ids)} tests")

    record = {"instance_id": task_id, "problem_statement": _problem_statement(before, f2p),
              "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "patch": spec.make_patch(buggy, fixed),
              "test_command": None, "test_files": sorted(test_files), "repo_dir": "repo",
              "meta": {**meta, "split": split, "modules": modules, "mutations": notes}}
    os.makedirs(out_dir, exist_ok=True)
    tmp_dir = pathlib.Path(tempfile.mkdtemp(prefix=task_dir.name + ".", dir=out_dir))
    try:
        for path, text in {**buggy, **test_files}.items():
            (tmp_dir / "repo" / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_dir / "repo" / path).write_text(text)
        (tmp_dir / "task.json").write_text(json.dumps(record, indent=1))
        loaded = spec.read_task(Task(task_id, str(tmp_dir), "swe", split, meta))
        _check_expert(dict(buggy), loaded, fixed)
        with tempfile.TemporaryDirectory(prefix="meowjax-swe-gen-") as scratch:
            sandbox.copy_repo(loaded.repo_dir, scratch)
            for path, text in fixed.items():
                pathlib.Path(scratch, path).write_text(text)
            after = sandbox.run_tests(scratch, all_ids, limits=GEN_LIMITS)
        if after.not_passed:
            raise EnvError(f"{task_id}: reference fix leaves failing tests {after.not_passed}")
        if task_dir.exists():
            shutil.rmtree(task_dir)
        os.replace(tmp_dir, task_dir)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return Task(task_id, str(task_dir), "swe", split, meta)


def write_manifest(out_dir: str | os.PathLike, tasks: list[Task]) -> pathlib.Path:
    """Merges ``tasks`` into ``out_dir/manifest.json`` (paths stored relative to out_dir)."""
    path = pathlib.Path(out_dir) / MANIFEST
    entries = json.loads(path.read_text())["tasks"] if path.is_file() else []
    by_id = {e["task_id"]: e for e in entries}
    for t in tasks:
        by_id[t.task_id] = {"task_id": t.task_id, "dir": os.path.relpath(t.path, out_dir),
                            "split": t.split, **t.meta}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"family": "swe", "tasks": sorted(
        by_id.values(), key=lambda e: (e["tier"], e["split"], e["seed"]))}, indent=1))
    os.replace(tmp, path)
    return path


def generate_tasks(out_dir: str | os.PathLike, tier: int, split: str, num_tasks: int,
                   first: int = 0) -> list[Task]:
    """Tasks for seeds ``SPLIT_SEEDS[split].start + first + i``, i < num_tasks; updates manifest."""
    if split not in SPLIT_SEEDS:
        raise EnvError(f"unknown split {split!r}; splits are {sorted(SPLIT_SEEDS)}")
    os.makedirs(out_dir, exist_ok=True)
    seeds = SPLIT_SEEDS[split][first:first + num_tasks]
    tasks = [generate_task(out_dir, tier, seed, split) for seed in seeds]
    write_manifest(out_dir, tasks)
    return tasks


def load_tasks(out_dir: str | os.PathLike, split: str | None = None,
               tier: int | None = None) -> list[Task]:
    """Tasks listed in ``out_dir/manifest.json``, optionally filtered by split and tier."""
    path = pathlib.Path(out_dir) / MANIFEST
    if not path.is_file():
        raise EnvError(f"{path} not found; generate tasks first with "
                       "meowjax.envs.swe.tasks.generate_tasks(out_dir, tier, split, num_tasks)")
    tasks = []
    for e in json.loads(path.read_text())["tasks"]:
        if (split is None or e["split"] == split) and (tier is None or e["tier"] == tier):
            meta = {k: v for k, v in e.items() if k not in ("task_id", "dir", "split")}
            tasks.append(Task(e["task_id"], str(pathlib.Path(out_dir) / e["dir"]), "swe",
                              e["split"], meta))
    return tasks


def main(argv: list[str] | None = None) -> None:
    """CLI: ``python -m meowjax.envs.swe.tasks --out data/swe --tier 1 --split train --num 200``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for task folders + manifest.json")
    parser.add_argument("--tier", type=int, default=1, choices=sorted(TIERS))
    parser.add_argument("--split", default="train", choices=sorted(SPLIT_SEEDS))
    parser.add_argument("--num", type=int, default=100, help="number of tasks (consecutive seeds)")
    parser.add_argument("--first", type=int, default=0, help="offset into the split's seeds")
    args = parser.parse_args(argv)
    made = generate_tasks(args.out, args.tier, args.split, args.num, args.first)
    print(f"{len(made)} tier-{args.tier} {args.split} tasks in {args.out} (manifest.json updated)")


if __name__ == "__main__":
    main()
