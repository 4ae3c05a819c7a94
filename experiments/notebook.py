# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # meowjax in a few minutes: train a tiny text-game agent, plot it, measure Pass@(K,T)
#
# This notebook (a `# %%` percent-format script, synced to `notebook.ipynb` with
# `python experiments/sync_notebook.py`) installs meowjax, generates TextWorld games, trains the
# tiny from-scratch agent of `configs/default.py:smoke=True` (SFT on expert walkthroughs, then PPO with a critic)
# for a few minutes on a CPU, plots the learning curve from `metrics.jsonl`, and evaluates
# Pass@(K,T): the chance that at least one of K episodes, each capped at T turns, wins.
#
# Environment variables (used by the test that runs this notebook top to bottom):
# `MEOWJAX_NOTEBOOK_WORKDIR` (run folder), `MEOWJAX_NOTEBOOK_GAMES` (games cache),
# `MEOWJAX_NOTEBOOK_TOY=1` (toy games and a 16-episode budget: about a minute of training).

# %%
import importlib.util
import os
import subprocess
import sys

if "__file__" in globals():                                # run as a script
    ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
else:                                                      # Jupyter: in experiments/ or the root
    ROOT = os.getcwd() if os.path.exists("setup.py") else os.path.dirname(os.getcwd())
if importlib.util.find_spec("meowjax") is None:           # e.g. a fresh Colab runtime
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", ROOT], check=True)
sys.path.insert(0, ROOT)                                   # for `configs`

# %%
import json

import numpy as np
from absl import logging
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from configs import default, textworld_fixed_budget
from meowjax.eval import evaluate
from meowjax.envs import game_sets
from meowjax.trainers import run

logging.set_verbosity(logging.WARNING)
WORKDIR = os.environ.get("MEOWJAX_NOTEBOOK_WORKDIR", "/tmp/meowjax_notebook")
GAMES = os.environ.get("MEOWJAX_NOTEBOOK_GAMES", os.path.join(ROOT, "data", "games"))
TOY = os.environ.get("MEOWJAX_NOTEBOOK_TOY", "0") == "1"

c = default.get_config("smoke=True")
c.unlock()
c.games.cache_dir = GAMES
if TOY:
    textworld_fixed_budget.smoke_overrides(c)
    c.turns.update(dict(max_turns=4, eval_max_turns=4))
    c.eval.pass_ts = (2, 4)
c.lock()
print(f"games {c.games.world_size}-{c.games.nb_objects}-{c.games.quest_length}, model "
      f"{c.model.preset}, {c.budget.total_episodes} episodes, workdir {WORKDIR}")

# %% [markdown]
# ## Games
# Train / SFT / held-out sets from disjoint seed ranges (cached on disk; the trainer reuses them).

# %%
sets = game_sets.game_sets(c)
for name, tasks in sets.items():
    print(f"{name:10s} {len(tasks):3d} games, e.g. {tasks[0].task_id if tasks else '-'}")

# %% [markdown]
# ## Train: SFT on walkthroughs, then RL (rerunning resumes from the checkpoint)

# %%
out = run.run(c, WORKDIR)
print({split: round(v["success"], 3) for split, v in out["evals"]["final"].items()
       if "success" in v})

# %% [markdown]
# ## Learning curve (from `metrics.jsonl`)

# %%
records = [json.loads(line) for line in open(os.path.join(WORKDIR, "metrics.jsonl"))]
sft = [(r["step"], r["sft/loss"]) for r in records if "sft/loss" in r]
rl = [(r["step"], r["rollout/success"]) for r in records if "rollout/success" in r]
fig = Figure(figsize=(9, 3.5))
FigureCanvasAgg(fig)
ax1, ax2 = fig.subplots(1, 2)
ax1.plot(*zip(*sft), marker=".")
ax1.set(title="SFT loss", xlabel="step", ylabel="NLL")
ax2.plot(*zip(*rl), marker="o")
ax2.set(title="RL rollout success", xlabel="step", ylabel="success rate", ylim=(-0.02, 1.02))
fig.tight_layout()
curve_png = os.path.join(WORKDIR, "learning_curve.png")
fig.savefig(curve_png)
fig  # displayed in Jupyter/Colab

# %% [markdown]
# ## Pass@(K,T) on held-out games
# `single_run` mode: each sampled episode is played once at T_max and success under a smaller T is
# read from the turn of the win (valid: the prompt never states the budget).

# %%
policy = evaluate.load_policy(c, WORKDIR)
tasks = evaluate.named_tasks(c, "eval")
result = evaluate.evaluate_policy(policy, tasks, ks=c.eval.pass_ks, ts=c.eval.pass_ts,
                                 samples=c.eval.num_samples, mode="single_run", name="eval")
report_path = evaluate.write_eval_report(result, os.path.join(WORKDIR, "eval_eval"))
res = result.pass_kt
print("Pass@(K,T), rows K =", res.ks, "columns T =", res.ts)
print(np.round(res.mean_KT, 3))
print("report:", report_path)
