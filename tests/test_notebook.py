"""The percent-format notebook: its .ipynb is in sync, and it runs top to bottom (toy size)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
import sync_notebook  # noqa: E402


def test_ipynb_is_in_sync_with_the_percent_script():
    text = open(os.path.join(ROOT, "experiments", "notebook.py"), encoding="utf-8").read()
    nb = json.load(open(os.path.join(ROOT, "experiments", "notebook.ipynb"), encoding="utf-8"))
    assert nb == json.loads(sync_notebook.notebook_json(text)), \
        "run: python experiments/sync_notebook.py"
    assert nb["nbformat"] == 4
    n_cells = sum(line.startswith("# %%") for line in text.splitlines())
    assert len(nb["cells"]) == n_cells
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for c in code:
        compile(c, "<cell>", "exec")                     # every code cell is valid Python
    assert any("run.run(c, WORKDIR)" in c for c in code)


def test_percent_to_cells_on_a_small_example():
    cells = sync_notebook.percent_to_cells(
        "# ---\n# jupyter: x\n# ---\n\n# %% [markdown]\n# # Title\n# text\n\n# %%\na = 1\n\nb = 2\n")
    assert [c["cell_type"] for c in cells] == ["markdown", "code"]
    assert cells[0]["source"] == ["# Title\n", "text"]
    assert cells[1]["source"] == ["a = 1\n", "\n", "b = 2"]


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tiny_games_dir, tmp_path):
    env = dict(os.environ, MEOWJAX_NOTEBOOK_WORKDIR=str(tmp_path / "run"),
               MEOWJAX_NOTEBOOK_GAMES=tiny_games_dir, MEOWJAX_NOTEBOOK_TOY="1",
               JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "notebook.py")],
                         cwd=str(tmp_path), env=env, capture_output=True, text=True,
                         timeout=1500)   # ~3 min alone on 2 cores; generous under load
    assert out.returncode == 0, out.stderr[-4000:]
    assert "Pass@(K,T), rows K = (1, 2) columns T = (2, 4)" in out.stdout
    assert os.path.getsize(tmp_path / "run" / "learning_curve.png") > 1000
    md = (tmp_path / "run" / "eval_eval" / "report.md").read_text()
    assert "## Pass@(K,T) on eval" in md
