"""Train (and evaluate) an agent from one config file.

    python -m experiments.train --config=configs/default.py --workdir=runs/default
    python -m experiments.train --config=configs/default.py:smoke=True --workdir=/tmp/smoke \
        --config.rl.estimator=grpo

Across processes (hosts), the same command runs on each with `--config.distributed.*`
(coordinator address, process count, this process's id; "auto" on Cloud TPU and SLURM): see the
README's "Scaling out".

Rerunning the same command on the same workdir resumes from the latest checkpoint (the newest
one that loads: a damaged one is skipped with a warning). On SIGTERM the run saves its state,
prints one line and exits with status 75 (EX_TEMPFAIL: rerun to resume); a second run on a
workdir that one is using exits at once with status 1 and a message naming the running one's pid.

The console shows one line per phase, progress bars and one line per RL iteration; every metric
goes to <workdir>/metrics.jsonl and <workdir>/tb. `--verbosity=1` (`-v 1`) also prints every
metric of every step and third-party INFO logging (orbax, jax); see meowjax/runtime/console.py.
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from meowjax.trainers import run as run_lib
from meowjax.runtime import console, host_memory, preemption, workdir_lock, xla_cache

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Experiment config.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/default", "Where checkpoints, logs and reports go.")
_CACHE = flags.DEFINE_string(
    "compile_cache", xla_cache.DEFAULT_DIR,
    "JAX persistent compilation cache folder: later runs with the same shapes load the compiled "
    "programs instead of compiling them ('' = off; see meowjax/runtime/xla_cache.py).")

_KEEP_MEMORY = flags.DEFINE_bool(
    "keep_host_memory", True,
    "Keep freed host memory in the process for the next step's buffers instead of giving it back "
    "to the OS and faulting it in again (glibc; see meowjax/runtime/host_memory.py).")


def main(argv):
    del argv
    console.install()  # phase lines and progress bars; -v 1 for every log line
    if _KEEP_MEMORY.value:
        logging.debug("host memory kept for reuse: %s", host_memory.keep_freed_memory())
    xla_cache.enable(_CACHE.value)
    try:
        run_lib.run(_CONFIG.value, _WORKDIR.value)
    except preemption.Preempted:
        # Expected, not a crash: one line, no traceback, a status a scheduler can requeue on.
        print(f"Stopped by SIGTERM; what was done is saved in {_WORKDIR.value}. Rerun the same "
              "command to resume.", file=sys.stderr, flush=True)
        sys.exit(preemption.EXIT_STATUS)
    except workdir_lock.WorkdirBusy as e:
        print(e, file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
