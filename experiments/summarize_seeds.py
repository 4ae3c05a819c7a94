"""Writes the machine-readable record of one recipe's seeds from their finished runs.

    python -m experiments.summarize_seeds --runs=runs/default_s0,runs/default_s1 \
        --out=docs/results/default/summary.json

Reads each run's ``evals.json`` and ``provenance.json`` (never typed by hand) and writes
``{"seeds": [{"seed", "commit", "cpu", "eval_split", "base_difficulty": D, "rl_difficulty": D,
"transfer_difficulty": D}, ...], "mean_gain": {...}}`` with ``D = {"name", "games", "before",
"after", "gain", "ci_low", "ci_high"}`` (see ``meowjax.eval.seed_summary``), and prints a table.
"""

import json
import os

from absl import app, flags

from meowjax.eval import seed_summary

_RUNS = flags.DEFINE_list("runs", None, "Finished run directories, one per seed.", required=True)
_OUT = flags.DEFINE_string("out", "docs/results/default/summary.json", "Where the record goes.")


def main(argv):
    del argv
    record = seed_summary.summarize(_RUNS.value)
    os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
    with open(_OUT.value, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    for r in record["seeds"]:
        cells = [f"{d['name']} {d['before']:.3f} -> {d['after']:.3f}, {d['gain']:+.3f} "
                 f"[{d['ci_low']:.3f}, {d['ci_high']:.3f}]"
                 for role in seed_summary.ROLES.values() if (d := r.get(role))]
        print(f"seed {r['seed']} ({r['commit'][:7] if r['commit'] else '?'}): " + "; ".join(cells))
    for role, m in record["mean_gain"].items():
        print(f"mean gain, {role}: {m['mean']:+.3f} [{m['ci_low']:.3f}, {m['ci_high']:.3f}] over "
              f"{m['seeds']} seeds (two-stage bootstrap [{m['two_stage_low']:.3f}, "
              f"{m['two_stage_high']:.3f}]; detectable at 80% power: {m['mde_80']:.3f})")
    print(f"wrote {_OUT.value}")


if __name__ == "__main__":
    app.run(main)
