"""Multi-host (TPU pod) launch: distributed start, mesh across hosts, training, an ahead-of-time
compile/fit check, and an evaluation split across the hosts.

Run the SAME command on every host (see experiments/pod.md for the gcloud line):

    python -m experiments.launch_pod --config=configs/pod_qwen2p5_1p5b.py --workdir=/shared/run \
        --mode=train          # SFT -> RL -> evaluation across every host (meowjax.trainers)

    python -m experiments.launch_pod --config=configs/pod_qwen2p5_1p5b.py --workdir=gs://b/run \
        --mode=check          # compile the sharded train step at pod shapes; print memory
    python -m experiments.launch_pod --config=configs/pod_qwen2p5_1p5b.py --workdir=/tmp/pod \
        --mode=eval --split=eval   # each host plays its block of the games; pod-wide success

On one machine (no coordinator configured) everything runs as a single process
(``--config=configs/pod_qwen2p5_1p5b.py:smoke=True``, optionally with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` for a multi-device CPU mesh); several
processes on one machine take ``--config.distributed.*`` (README "Scaling out").

Why buckets must agree: every host feeds its local rows of one global ``[B, L]`` batch into the
same jitted program; if one host padded to L=512 and another to L=1024 the hosts would run
different programs and deadlock in the first collective. So each host picks the bucket its own
rows need and all hosts take the max: ``L = max_h bucket_h`` (``agree_on_bucket``).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags, logging
from jax.experimental import multihost_utils
from ml_collections import config_flags

from meowjax import sharding
from meowjax.eval import stats
from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import buckets as rollout_buckets
from meowjax.runtime import multihost

MODES = ("check", "eval", "train")


# -- pure pieces (tested) -------------------------------------------------------------------------
def agree_on_bucket(local_length: int, buckets: Sequence[int]) -> int:
    """The bucket every host uses: the max over hosts of each host's own choice.

        L = max_h choose_bucket(length_h)      (process_allgather; a no-op gather on one host)
    """
    local = rollout_buckets.choose_bucket(local_length, buckets)
    chosen = multihost_utils.process_allgather(np.asarray([local], np.int32))
    return int(np.max(chosen))


# -- ahead-of-time compile check ------------------------------------------------------------------
def model_config(c):
    """The ModelConfig of the run (preset + overrides; vocab of the preset)."""
    return get_preset(c.model.preset, **dict(c.model.overrides))


def compile_check(c, mesh, batch_rows: int, length: int) -> dict[str, Any]:
    """Lowers and compiles one sharded SFT-style step (forward, NLL, grads, AdamW) at pod shapes.

    Params are placed by the logical-axis rule table, the batch over ("data", "fsdp"); nothing is
    allocated (abstract inputs). Returns the compiled memory analysis (bytes per device) so a
    config can be checked to fit before a pod is paid for.
    """
    cfg = model_config(c)
    params = lm.abstract_params(cfg)
    p_shard = sharding.tree_shardings(lm.logical_axes(cfg), mesh, params)
    opt = optax.adamw(c.rl.lr)
    o_shard = sharding.opt_state_shardings(opt, params, p_shard, mesh)
    opt_state = jax.eval_shape(opt.init, params)
    b_shard = sharding.batch_sharding(mesh)
    tokens = jax.ShapeDtypeStruct((batch_rows, length), jnp.int32)
    mask = jax.ShapeDtypeStruct((batch_rows, length), jnp.int32)

    def step(params, opt_state, tokens_BL, mask_BL):
        def loss_fn(p):
            pos_BL = lm.positions_from_mask(mask_BL)
            logits_BLV = lm.forward(p, cfg, tokens_BL, pos_BL, mask_BL)
            logp_BL = lm.token_logprobs(logits_BLV[:, :-1], tokens_BL[:, 1:])
            m_BL = mask_BL[:, 1:].astype(jnp.float32)
            return -(logp_BL * m_BL).sum() / jnp.maximum(m_BL.sum(), 1.0)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    jitted = jax.jit(step, in_shardings=(p_shard, o_shard, b_shard, b_shard),
                     out_shardings=(p_shard, o_shard, sharding.replicated(mesh)),
                     donate_argnums=(0, 1))
    compiled = jitted.lower(params, opt_state, tokens, mask).compile()
    mem = compiled.memory_analysis()
    out = {"batch_rows": batch_rows, "length": length, "params": int(sum(
        np.prod(x.shape) for x in jax.tree.leaves(params)))}
    for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
              "generated_code_size_in_bytes"):
        out[k] = int(getattr(mem, k, 0) or 0) if mem is not None else None
    return out


# -- the launch -----------------------------------------------------------------------------------
def setup(c) -> tuple[Any, dict[str, Any]]:
    """Starts jax.distributed (if configured) and builds the mesh over all hosts' devices."""
    started = sharding.maybe_initialize_distributed(c.distributed)
    mesh = sharding.make_mesh(c.mesh.axes)
    topo = {"distributed": started, "process_index": jax.process_index(),
            "process_count": jax.process_count(), "local_devices": jax.local_device_count(),
            "devices": jax.device_count(), "mesh": dict(mesh.shape)}
    logging.info("pod topology: %s", topo)
    return mesh, topo


def run_check(c, mesh) -> dict[str, Any]:
    """AOT check at the config's pod shapes (rows rounded up to the batch shards)."""
    shards = int(np.prod([mesh.shape[a] for a in sharding.batch_axes(mesh)]))
    rows = -(-c.pod.check_batch_rows // shards) * shards
    length = agree_on_bucket(c.pod.check_length, c.rollout.length_buckets)
    out = compile_check(c, mesh, rows, length)
    logging.info("compile check: %s", out)
    return out


def run_eval(c, workdir: str, split: str) -> dict[str, Any]:
    """The whole game set evaluated across the pod: each process plays its block of the games on
    its own devices and the episodes are gathered (``AgentTrainer.play_tasks``), so every
    process holds the pod-wide result; process 0 writes the report."""
    from meowjax.eval import evaluate
    if c.model.init == "scratch":
        policy = evaluate.load_policy(c, workdir)
    else:
        policy = evaluate.load_imported_policy(c, workdir, hf_path=c.model.hf_path,
                                             smollm2=c.model.init == "smollm2")
    tasks = evaluate.named_tasks(policy.agent.c, split)
    result = evaluate.evaluate_policy(policy, tasks, ks=c.eval.pass_ks, ts=c.eval.pass_ts,
                                     samples=c.eval.num_samples, name=split, seed=c.seed)
    out_dir = os.path.join(workdir, evaluate.out_dir_name(split))
    if jax.process_index() == 0:
        evaluate.write_eval_report(result, out_dir)
    wins, n = result.greedy["wins"], result.greedy["n"]
    low, high = stats.wilson_interval(wins, n)
    out = {"wins": wins, "n": n, "success": wins / n, "ci_low": low, "ci_high": high,
           "tasks_here": len(range(*multihost.share(len(tasks)))), "report": out_dir}
    logging.info("pod greedy success on %s: %s", split, out)
    return out


def define_flags() -> None:
    """The command-line flags (only when run as a script, so importing this module is free)."""
    config_flags.DEFINE_config_file("config", "configs/pod_qwen2p5_1p5b.py", "Pod config.")
    flags.DEFINE_string("workdir", "/tmp/meowjax_pod", "Run folder (shared or per host).")
    flags.DEFINE_enum("mode", "check", list(MODES),
                      "check: AOT compile; eval: evaluate; train: train across the processes "
                      "(experiments/train.py with the pod's config).")
    flags.DEFINE_string("split", "eval", "Game set for --mode=eval (see evaluate.py).")


def main(argv):
    del argv
    F = flags.FLAGS
    logging.set_verbosity(logging.INFO)
    c = F.config
    if F.mode == "train":   # the trainer starts jax.distributed and builds its own mesh
        from meowjax.runtime import preemption
        from meowjax.trainers import run as run_lib
        try:
            run_lib.run(c, F.workdir)
        except preemption.Preempted:   # as experiments/train.py: saved, rerun to resume
            print(f"Stopped by SIGTERM; saved in {F.workdir}. Rerun the same command on every "
                  "host to resume.", file=sys.stderr, flush=True)
            sys.exit(preemption.EXIT_STATUS)
        return
    mesh, topo = setup(c)
    out = run_check(c, mesh) if F.mode == "check" else run_eval(c, F.workdir, F.split)
    if jax.process_index() == 0:
        print({"topology": topo, F.mode: out})


if __name__ == "__main__":
    define_flags()
    app.run(main)
