"""Training across real processes on one machine (``jax.distributed``, gloo CPU collectives):
the k-process run equals the one-process run on the same total number of devices, resumes
from its checkpoints after a SIGTERM or a killed process (also with another process count),
and stops everywhere when one dies.

Every run here is ``experiments/train.py`` in subprocesses (``tests/multihost_launch.py``),
sharing one persistent compile cache, so the programs of the first run load in the later ones.
"""

import os
import signal
import time

import pytest

from multihost_launch import Launch, assert_same_run, metrics

pytestmark = pytest.mark.slow

DEVICES = 4   # in total: 1 process x 4, 2 x 2, 4 x 1
# The default run's smoke config, shortened: 1 SFT demonstration, 2 RL iterations of 4
# episodes (a checkpoint after each), one length bucket (fewer programs to compile).
DEFAULT = ("configs/default.py:smoke=True",
           ["--config.budget.total_episodes=20", "--config.rollout.length_buckets=(512,)",
            "--config.checkpoint.every_iters=1",
            "--config.games.num_eval=2", "--config.games.num_eval_hard=1"])
# The free-text pod config's smoke variant: a tiny model from scratch, 2 RL iterations, its
# weights split over fsdp=2 (each process's pair of devices: rollouts use those shards as they are).
FREE_TEXT = ("configs/pod_qwen2p5_1p5b.py:smoke=True,fsdp=2",
             ["--config.rollout.length_buckets=(256,1024)", "--config.env.num_workers=0"])
TIMEOUT_S = 170


@pytest.fixture(scope="module")
def shared(tmp_path_factory, tiny_games_dir):
    """Games and a compile cache shared by every run of the module."""
    root = tmp_path_factory.mktemp("multihost")
    return {"root": str(root), "cache": str(root / "xla_cache"),
            "games": f"--config.games.cache_dir={tiny_games_dir}"}


def _launch(shared, name, run, num_processes, **kw):
    config, flags = run
    return Launch(os.path.join(shared["root"], name), config, num_processes=num_processes,
                  devices=DEVICES // num_processes, flags=[*flags, shared["games"]],
                  compile_cache=shared["cache"], **kw)


def _train(shared, name, run, num_processes) -> str:
    with _launch(shared, name, run, num_processes) as job:
        codes = job.wait(TIMEOUT_S * 2)
        assert codes == [0] * num_processes, job.log(0)[-3000:]
        return job.workdir


@pytest.fixture(scope="module")
def default_reference(shared):
    """The one-process run of DEFAULT on 4 devices (also fills the games and compile cache)."""
    return _train(shared, "default_1x4", DEFAULT, 1)


@pytest.fixture(scope="module")
def free_text_reference(shared):
    return _train(shared, "free_text_1x4", FREE_TEXT, 1)


def test_multihost_default_two_processes_equal_one_and_resume_after_sigterm(
        shared, default_reference):
    """2 processes x 2 devices: a SIGTERM to process 1 after the first checkpoint makes both
    save and exit 75; the relaunch resumes and the whole run's losses, rollout metrics and
    evaluation outcomes equal the one-process run's."""
    with _launch(shared, "default_2x2", DEFAULT, 2) as job:
        job.wait_for_file(os.path.join(job.workdir, "checkpoints", "2"), TIMEOUT_S)
        job.signal(1, signal.SIGTERM)
        assert job.wait(60) == [75, 75], job.log(0)[-3000:]
    assert "SIGTERM: state saved" in job.log(0) and "SIGTERM: state saved" in job.log(1)
    with _launch(shared, "default_2x2", DEFAULT, 2, tag="resumed") as job:
        assert job.wait(TIMEOUT_S) == [0, 0], job.log(0)[-3000:]
        assert "Resumed from checkpoint" in job.log(0) and "[process 1/2]" in job.log(1)
    assert_same_run(job.workdir, default_reference)
    # Process 0 alone writes metrics: each step once, though two processes logged it.
    assert len(metrics(job.workdir, last=False)) == len(metrics(default_reference, last=False))


def test_multihost_free_text_two_processes_equal_one(shared, free_text_reference):
    """The free-text interface (sampler on each process's devices with the trainer's
    fsdp-sharded weights, KV caches kept per episode): 2 processes x 2 devices equal the
    one-process run."""
    workdir = _train(shared, "free_text_2x2", FREE_TEXT, 2)
    assert_same_run(workdir, free_text_reference)


def test_multihost_four_processes_then_resumed_on_one_process(shared, default_reference):
    """4 processes x 1 device train until a SIGTERM to process 3 stops all four (each saves its
    shards); one process with the same 4 devices resumes from that checkpoint (orbax reads the
    shards into the new mesh) and the run equals the one-process run throughout."""
    with _launch(shared, "default_4x1", DEFAULT, 4) as job:
        job.wait_for_file(os.path.join(job.workdir, "checkpoints", "2"), TIMEOUT_S)
        job.signal(3, signal.SIGTERM)
        assert job.wait(60) == [75] * 4, job.log(0)[-3000:]
    with _launch(shared, "default_4x1", DEFAULT, 1, tag="resumed") as job:
        assert job.wait(TIMEOUT_S) == [0], job.log(0)[-3000:]
        assert "Resumed from checkpoint: phase rl" in job.log(0)
    assert_same_run(job.workdir, default_reference)


def test_multihost_killed_process_stops_the_others_and_relaunch_resumes(
        shared, default_reference):
    """SIGKILL on process 1 after the first checkpoint: process 0 exits non-zero with a message
    naming the likely cause well within the heartbeat timeout's bound; relaunching resumes from
    the checkpoint and finishes the same run."""
    with _launch(shared, "default_killed", DEFAULT, 2) as job:
        job.wait_for_file(os.path.join(job.workdir, "checkpoints", "2"), TIMEOUT_S)
        job.kill(1)
        t_kill = time.time()
        code = job.wait(60, indices=[0])[0]
        waited = time.time() - t_kill
        log = job.log(0)
    assert code != 0 and waited < 60
    assert ("If another process of this run died" in log
            or "another task died" in log), log[-3000:]
    with _launch(shared, "default_killed", DEFAULT, 2, tag="relaunch") as job:
        assert job.wait(TIMEOUT_S) == [0, 0], job.log(0)[-3000:]
        assert "Resumed from checkpoint" in job.log(0)
    assert_same_run(job.workdir, default_reference)
