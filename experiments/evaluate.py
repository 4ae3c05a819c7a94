"""Evaluate a trained checkpoint (or an imported model) on a named game set; write a report.

    # the run's own config + its workdir: params of the latest checkpoint
    python -m experiments.evaluate --config=configs/default.py --workdir=runs/default \
        --split=textworld:w4-o6-q8:test --ks=1,2,4 --ts=4,8,12 --samples=4
    # an imported model with the free-text interface (report under --workdir)
    python -m experiments.evaluate --config=configs/default.py --smollm2 --workdir=runs/smollm2
    python -m experiments.evaluate --config=configs/default.py --hf_path=/models/qwen --workdir=x

Splits: eval | eval_hard (the config's held-out sets) | textworld:<w-o-q>:<train|sft|valid|test> |
alfworld:<split>[:<task types>] (with --alfworld_root). --mode=single_run plays once at
T_max = max(ts) and reads every T ≤ T_max from the winning turn (our prompts never state the
budget); --mode=per_budget plays every T separately. The report says which one was used.
Output: <workdir>/eval_<split>/{report.md, results.json, plots/}.
"""

import os

from absl import app, flags, logging
from ml_collections import config_flags

from meowjax.runtime import console, host_memory, xla_cache

from meowjax.eval import evaluate

def define_flags() -> None:
    """The command-line flags (only when run as a script, so importing this module is free)."""
    config_flags.DEFINE_config_file("config", "configs/default.py",
                                    "The run's config (model, interface, games).")
    flags.DEFINE_string("workdir", None, "Run folder (checkpoints/ + tokenizer/); with "
                        "--hf_path/--smollm2, where the report goes.", required=True)
    flags.DEFINE_string("hf_path", "", "Evaluate this local Hugging Face folder instead.")
    flags.DEFINE_bool("smollm2", False, "Evaluate the bundled SmolLM2-135M-Instruct GGUF.")
    flags.DEFINE_string("split", "eval", "Named game set (see the module docstring).")
    flags.DEFINE_integer("num_games", 0, "Cap on the number of games (0: all/config).")
    flags.DEFINE_string("alfworld_root", os.environ.get("ALFWORLD_DATA", ""),
                        "ALFWorld data root for alfworld:* splits.")
    flags.DEFINE_list("ks", ["1", "2", "4"], "Pass@K grid.")
    flags.DEFINE_list("ts", ["4", "6", "8", "12"], "Turn-budget grid; T_max = max.")
    flags.DEFINE_integer("samples", 4, "Sampled episodes per game (>= max K).")
    flags.DEFINE_enum("mode", "single_run", list(evaluate.MODES), "Pass@(K,T) mode.")
    flags.DEFINE_integer("seed", 0, "Sampling seed.")
    flags.DEFINE_string("compile_cache", xla_cache.DEFAULT_DIR,
                        "JAX persistent compilation cache folder ('' = off).")
    flags.DEFINE_bool("keep_host_memory", True, "Reuse freed host memory instead of returning "
                      "it to the OS (glibc; meowjax/runtime/host_memory.py).")


def main(argv):
    del argv
    F = flags.FLAGS
    console.install()  # phase lines and progress bars; -v 1 for every log line
    if F.keep_host_memory:
        host_memory.keep_freed_memory()
    xla_cache.enable(F.compile_cache)
    c = F.config
    if F.hf_path or F.smollm2:
        policy = evaluate.load_imported_policy(c, F.workdir, hf_path=F.hf_path, smollm2=F.smollm2)
    else:
        policy = evaluate.load_policy(c, F.workdir)
    tasks = evaluate.named_tasks(policy.agent.c, F.split, F.num_games or None, F.alfworld_root)
    result = evaluate.evaluate_policy(policy, tasks, ks=[int(k) for k in F.ks],
                                     ts=[int(t) for t in F.ts], samples=F.samples, mode=F.mode,
                                     name=F.split, seed=F.seed)
    path = evaluate.write_eval_report(
        result, os.path.join(F.workdir, evaluate.out_dir_name(F.split)), step=policy.step)
    with open(path, encoding="utf-8") as f:
        print(f.read())
    logging.info("Report written to %s", path)


if __name__ == "__main__":
    define_flags()
    app.run(main)
