"""Loading real SWE-Gym / SWE-bench-format task records for :class:`SweEnv`.

A record (one JSON object per line of a .jsonl file, or a JSON list) needs:

  instance_id        e.g. "getmoto__moto-5752"
  problem_statement  the issue text shown to the agent
  FAIL_TO_PASS       test ids (pytest node ids) that the fix must make pass; a list, or a JSON
  PASS_TO_PASS       string holding a list as on the Hugging Face hub
and optionally:
  patch              the gold patch (unified/git diff); gives the expert walkthrough
  test_command       argv prefix, default :data:`DEFAULT_TEST_COMMAND` (pytest's -rA summary
                     lines are parsed); a leading "python" is this interpreter
  test_env           extra environment variables for the test subprocess, e.g.
                     {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} (much faster pytest start-up)
  test_files         files restored before grading (default: the files named by the test ids)
  repo_dir           the snapshot folder, relative to the records file; default
                     ``<repos_dir>/<instance_id>``

The snapshot is the repository at ``base_commit`` *with ``test_patch`` already applied* (so the
FAIL_TO_PASS tests exist), with its dependencies installed in this Python's site-packages (the
sandbox shows the tests nothing else of the host). We cannot build the original Docker images
here (no container engine, no network), so tests run in the same sandbox as generated tasks
(see :mod:`meowjax.envs.swe.sandbox` for what it isolates).
"""

from __future__ import annotations

import json
import os
import pathlib

from meowjax.envs.base import EnvError, Task
from meowjax.envs.swe import spec

DEFAULT_TEST_COMMAND = "python -m pytest -rA -q -p no:cacheprovider"


def _read_records(path: pathlib.Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError as e:
        raise EnvError(f"cannot read SWE-Gym records {path}: {e}") from e
    try:
        if text.lstrip().startswith("["):
            records = json.loads(text)
        else:
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise EnvError(f"{path} is not JSON lines or a JSON list ({e}); one record per line") from e
    if not all(isinstance(r, dict) for r in records):
        raise EnvError(f"{path}: every record must be a JSON object")
    return records


def load_swegym_records(path: str | os.PathLike, repos_dir: str | os.PathLike | None = None,
                        split: str = "train",
                        test_command: str = DEFAULT_TEST_COMMAND) -> list[Task]:
    """Tasks for the records in ``path`` (validated now, so a missing snapshot fails early)."""
    path = pathlib.Path(path)
    repos = pathlib.Path(repos_dir) if repos_dir is not None else path.parent / "repos"
    tasks = []
    for i, raw in enumerate(_read_records(path)):
        where = f"{path} record {i} ({raw.get('instance_id', '?')})"
        if "instance_id" not in raw:
            raise EnvError(f"{where}: missing instance_id")
        repo = (path.parent / raw["repo_dir"] if "repo_dir" in raw
                else repos / str(raw["instance_id"]))
        record = {**raw, "repo_dir": str(repo.resolve()),
                  "test_command": raw.get("test_command") or test_command}
        record = {k: v for k, v in record.items()
                  if k in ("instance_id", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS",
                           "patch", "test_command", "test_files", "test_env", "repo_dir")}
        loaded = spec.task_from_record(record, str(repo), where)  # validates
        record["FAIL_TO_PASS"] = list(loaded.fail_to_pass)
        record["PASS_TO_PASS"] = list(loaded.pass_to_pass)
        tasks.append(Task(f"swegym/{loaded.task_id}", loaded.repo_dir, "swe", split,
                          {"record": record}))
    return tasks
