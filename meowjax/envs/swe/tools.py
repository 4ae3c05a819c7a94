"""The agent's text tools: one command per turn, parsed leniently, errors become observations.

Syntax (also the system prompt, :data:`SYSTEM_PROMPT`)::

    ls [DIR]                 list files (recursively) under DIR, default the repository root
    cat PATH [START END]     show PATH with line numbers, optionally only lines START..END
    grep TEXT                find lines containing TEXT (plain text, case-sensitive) in all files
    replace PATH             replace the exact text between <<< and === by the text between
    <<<                      === and >>>; the old text must occur exactly once in PATH
    old lines
    ===
    new lines
    >>>
    test                     run the test suite
    submit                   finish; the hidden grader runs the tests on the original test files

Leniency: surrounding whitespace, a ``` fence around the command and a leading "Action:" are
ignored; the command word is case-insensitive. Everything else that does not parse gives a
:class:`ToolError` whose message tells the agent the correct form.
"""

from __future__ import annotations

import dataclasses
import os
import re

from meowjax.envs.swe.sandbox import SandboxError, resolve_inside

COMMANDS = ("ls", "cat", "grep", "replace", "test", "submit")

SYSTEM_PROMPT = """You are fixing a bug in a small Python repository. Each turn, reply with \
exactly one command and nothing else:

ls [DIR]              list the files under DIR (default: the repository root)
cat PATH [START END]  show a file with line numbers, optionally only lines START to END
grep TEXT             show the lines that contain TEXT in any file
replace PATH          replace text in PATH: the old text goes between <<< and ===,
<<<                   the new text between === and >>>. The old text must appear exactly
old text              once in the file, copied exactly (same indentation, no line numbers).
===
new text
>>>
test                  run the tests and show which fail
submit                finish the episode; your code is graded by the tests

Paths are relative to the repository root (e.g. tests/test_strutil.py). Fix the source code, \
not the tests. Submit when the tests pass."""

MAX_GREP_HITS = 50
MAX_LIST = 200


class ToolError(ValueError):
    """A malformed or refused command; its message is the observation."""


@dataclasses.dataclass(frozen=True)
class Command:
    """A parsed command. ``arg``: the DIR/PATH/TEXT argument; ``start``/``end``: cat range."""

    name: str
    arg: str = ""
    start: int | None = None
    end: int | None = None
    old: str = ""
    new: str = ""


def format_replace(path: str, old: str, new: str) -> str:
    """The replace command text for one edit (what an expert writes)."""
    return f"replace {path}\n<<<\n{old}\n===\n{new}\n>>>"


def _strip_wrapping(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        lines = text.split("\n")[1:]
        if lines and lines[-1].strip().startswith("```"):
            lines = lines[:-1]
        text = "\n".join(lines).strip()
    return re.sub(r"^(action|command)\s*:\s*", "", text, flags=re.IGNORECASE)


def _parse_replace(path: str, lines: list[str]) -> Command:
    form = "replace PATH\n<<<\nold text\n===\nnew text\n>>>"
    if not path:
        raise ToolError(f"replace needs a file path. Use:\n{form}")
    marks = [ln.strip() for ln in lines]
    if not marks or marks[0] != "<<<":
        raise ToolError(f"replace: the line after 'replace {path}' must be <<<. Use:\n{form}")
    if "===" not in marks:
        raise ToolError(f"replace: missing the === line between old and new text. Use:\n{form}")
    sep = marks.index("===")
    ends = [i for i in range(sep + 1, len(marks)) if marks[i] == ">>>"]
    if not ends:
        raise ToolError(f"replace: missing the closing >>> line. Use:\n{form}")
    old, new = "\n".join(lines[1:sep]), "\n".join(lines[sep + 1:ends[-1]])
    if not old.strip():
        raise ToolError("replace: the old text is empty; copy the exact lines to change "
                        "between <<< and ===.")
    return Command("replace", path, old=old, new=new)


def parse_command(text: str) -> Command:
    """Parses one agent reply into a Command; ToolError (message for the agent) if malformed."""
    text = _strip_wrapping(text)
    if not text:
        raise ToolError(f"Empty command. Reply with one of: {', '.join(COMMANDS)}.")
    lines = text.split("\n")
    word, _, rest = lines[0].strip().partition(" ")
    name, rest = word.lower(), rest.strip()
    if name not in COMMANDS:
        raise ToolError(f"Unknown command {word[:40]!r}. Reply with exactly one command: "
                        f"{', '.join(COMMANDS)}.")
    if name == "replace":
        return _parse_replace(rest, lines[1:])
    if len(lines) > 1 and any(ln.strip() for ln in lines[1:]):
        raise ToolError(f"'{name}' takes a single line; send one command per turn.")
    if name == "cat":
        args = rest.split()
        if len(args) not in (1, 3):
            raise ToolError("cat needs a path and optionally a line range: cat PATH [START END]")
        if len(args) == 1:
            return Command("cat", args[0])
        try:
            start, end = int(args[1]), int(args[2])
        except ValueError:
            raise ToolError("cat: START and END must be line numbers, e.g. cat a.py 10 20"
                            ) from None
        if start < 1 or end < start:
            raise ToolError("cat: need 1 <= START <= END, e.g. cat a.py 10 20")
        return Command("cat", args[0], start, end)
    if name == "grep":
        if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "'\"":
            rest = rest[1:-1]
        if not rest:
            raise ToolError("grep needs the text to search for: grep TEXT")
        return Command("grep", rest)
    return Command(name, rest)  # ls [DIR], test, submit (extra words are ignored)


def _visible_files(root: str, start: str) -> list[str]:
    """Regular files under ``start`` (no symlinks, no caches), relative to root, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".git")
                             and not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if not os.path.islink(full) and not name.endswith(".pyc"):
                out.append(os.path.relpath(full, root))
    return out


def do_ls(root: str, rel: str = "") -> str:
    path = resolve_inside(root, rel or ".")
    if path.is_file():
        return rel
    if not path.is_dir():
        raise ToolError(f"ls: no such directory: {rel}")
    files = _visible_files(root, str(path))
    shown = "\n".join(files[:MAX_LIST])
    more = f"\n... ({len(files) - MAX_LIST} more)" if len(files) > MAX_LIST else ""
    return (shown + more) if files else "(no files)"


def _read_text(root: str, rel: str) -> str:
    path = resolve_inside(root, rel)
    if not path.is_file():
        raise ToolError(f"no such file: {rel} (use ls to see the files)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{rel} is not a UTF-8 text file") from None


def numbered(text: str, first: int = 1) -> str:
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(text.split("\n"), first))


def do_cat(root: str, rel: str, start: int | None = None, end: int | None = None) -> str:
    lines = _read_text(root, rel).split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if start is None:
        start, end = 1, len(lines)
    if start > len(lines):
        raise ToolError(f"cat: {rel} has only {len(lines)} lines")
    return numbered("\n".join(lines[start - 1:end]), start)


def do_grep(root: str, text: str) -> str:
    hits = []
    for rel in _visible_files(root, root):
        try:
            content = open(os.path.join(root, rel), encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        hits += [f"{rel}:{i}: {line}" for i, line in enumerate(content.split("\n"), 1)
                 if text in line]
    if not hits:
        return f"No matches for {text!r}."
    more = f"\n... ({len(hits) - MAX_GREP_HITS} more)" if len(hits) > MAX_GREP_HITS else ""
    return "\n".join(hits[:MAX_GREP_HITS]) + more


def do_replace(root: str, rel: str, old: str, new: str) -> str:
    content = _read_text(root, rel)
    count = content.count(old)
    if count == 0:
        raise ToolError(f"replace: the old text was not found in {rel}. Copy it exactly "
                        "(same indentation, without the line numbers that cat shows).")
    if count > 1:
        raise ToolError(f"replace: the old text occurs {count} times in {rel}; include more "
                        "surrounding lines so that it occurs exactly once.")
    at = content.index(old)
    updated = content[:at] + new + content[at + len(old):]
    try:
        data = updated.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("replace: the new text contains characters that are not valid UTF-8"
                        ) from None
    resolve_inside(root, rel).write_bytes(data)
    first = content.count("\n", 0, at) + 1
    shown = updated.split("\n")[max(0, first - 3):first + new.count("\n") + 2]
    return f"Replaced 1 occurrence in {rel}. Now:\n" + numbered("\n".join(shown), max(1, first - 2))


def run_file_tool(root: str, cmd: Command) -> str:
    """Runs ls/cat/grep/replace inside ``root``; refused paths raise ToolError."""
    try:
        if cmd.name == "ls":
            return do_ls(root, cmd.arg)
        if cmd.name == "cat":
            return do_cat(root, cmd.arg, cmd.start, cmd.end)
        if cmd.name == "grep":
            return do_grep(root, cmd.arg)
        if cmd.name == "replace":
            return do_replace(root, cmd.arg, cmd.old, cmd.new)
    except SandboxError as e:
        raise ToolError(f"{cmd.name}: {e}") from None
    raise ValueError(f"{cmd.name} is not a file tool")
