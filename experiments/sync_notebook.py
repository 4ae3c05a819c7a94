"""Writes experiments/notebook.ipynb from the percent-format experiments/notebook.py.

jupytext is not a dependency; this does the one conversion we need (``# %%`` code cells,
``# %% [markdown]`` cells whose lines start with ``# ``, the jupytext header block skipped):

    python experiments/sync_notebook.py            # rewrite the .ipynb
    python experiments/sync_notebook.py --check    # exit 1 if the .ipynb is out of date
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "notebook.py")
TARGET = os.path.join(HERE, "notebook.ipynb")


def _strip_blank(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def percent_to_cells(text: str) -> list[dict[str, Any]]:
    """Cells of a percent-format script (header ``# ---`` ... ``# ---`` block skipped)."""
    lines = text.splitlines()
    if lines and lines[0].strip() == "# ---":
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "# ---")
        lines = lines[end + 1:]
    cells, kind, body = [], None, []

    def flush():
        if kind is None:
            return
        src = _strip_blank(body)
        if kind == "markdown":
            src = [l[2:] if l.startswith("# ") else l.lstrip("#") for l in src]
        source = [l + "\n" for l in src[:-1]] + src[-1:]
        cell = {"cell_type": kind, "metadata": {}, "source": source}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)

    for line in lines:
        if line.startswith("# %%"):
            flush()
            kind, body = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None:
            body.append(line)
    flush()
    return cells


def notebook_json(text: str) -> str:
    nb = {"cells": percent_to_cells(text), "metadata": {
        "jupytext": {"formats": "ipynb,py:percent"},
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    for i, cell in enumerate(nb["cells"]):
        cell["id"] = f"cell-{i}"
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    with open(SOURCE, encoding="utf-8") as f:
        want = notebook_json(f.read())
    if "--check" in argv:
        have = open(TARGET, encoding="utf-8").read() if os.path.exists(TARGET) else ""
        if have != want:
            print(f"{TARGET} is out of date; run python experiments/sync_notebook.py")
            return 1
        return 0
    with open(TARGET, "w", encoding="utf-8") as f:
        f.write(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
