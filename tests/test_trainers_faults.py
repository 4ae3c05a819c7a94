"""No fault costs a run: damaged checkpoints fall back to an older one, SIGTERM in any phase saves
and exits cleanly, a second run on a busy workdir is refused; each resumed run ends where an
uninterrupted one does."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import default
from meowjax.envs import textworld_games
from meowjax.runtime import checkpoint, preemption
from meowjax.trainers import loop
from meowjax.trainers import run as run_lib

# A two-iteration smoke run (configs/default.py:smoke=True plus these), small enough to run
# several times: the same fields as tests/test_trainers.py's tiny_config, and flags for the CLI.
TINY = {"games.world_size": 1, "games.nb_objects": 2, "games.quest_length": 2,
        "games.hard_world_size": 1, "games.hard_nb_objects": 3, "games.hard_quest_length": 3,
        "games.num_train": 2, "games.num_sft": 2, "games.num_eval": 2, "games.num_eval_hard": 1,
        "games.eval_split": "valid", "budget.total_episodes": 16, "budget.sft_share": 0.5,
        "rollout.tasks_per_iter": 2, "rollout.group_size": 2, "turns.max_turns": 4,
        "turns.eval_max_turns": 4, "eval.num_samples": 2, "eval.pass_ts": (2, 4),
        "checkpoint.every_iters": 1, "checkpoint.max_to_keep": 3, "rl.estimator": "rloo",
        "rl.minibatch_rows": 8}


def tiny(games_dir, **extra):
    c = default.get_config("smoke=True")
    c.unlock()
    for path, value in {**TINY, "games.cache_dir": games_dir, **extra}.items():
        section, field = path.split(".")
        c[section][field] = value
    c.lock()
    return c


def tiny_flags(games_dir):
    return [f"--config.{k}={v}" for k, v in {**TINY, "games.cache_dir": games_dir}.items()]


@pytest.fixture(scope="module")
def reference(tiny_games_dir, tmp_path_factory):
    """An uninterrupted run: workdir and run() output."""
    workdir = str(tmp_path_factory.mktemp("reference") / "w")
    return workdir, run_lib.run(tiny(tiny_games_dir), workdir)


def rl_records(workdir):
    """The RL iterations' metrics by step; a step logged twice (an iteration replayed after a
    fallback to an older checkpoint) counts by its later record, as TensorBoard shows it."""
    recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
    return {r["step"]: r for r in recs if "rollout/return" in r}


def assert_same_run(ref, workdir, out):
    """Final params, every evaluation and the RL metrics (not timings) equal the reference's."""
    ref_dir, ref_out = ref
    for a, b in zip(jax.tree.leaves(ref_out["state"].params), jax.tree.leaves(out["state"].params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert out["evals"] == ref_out["evals"]
    want, have = rl_records(ref_dir), rl_records(workdir)
    assert sorted(have) == sorted(want)
    for step, r in want.items():
        for k, v in r.items():
            if k.startswith(("rollout/", "pg/")) and k != "rollout/logp_mismatch_max":
                np.testing.assert_allclose(have[step][k], v, rtol=1e-5, atol=1e-6, err_msg=k)


# -- damaged checkpoints ------------------------------------------------------------------------
def _largest_file(folder):
    return max((p for p in glob.glob(folder + "/**", recursive=True) if os.path.isfile(p)),
               key=os.path.getsize)


def test_checkpointer_skips_a_corrupt_step_and_sets_it_aside(tmp_path, caplog):
    """A changed byte of an array file (orbax loads it as a wrong number) is caught by the sums;
    a checkpoint without sums (older runs) still loads; if none loads, nothing is renamed."""
    ck = checkpoint.Checkpointer(str(tmp_path), max_to_keep=3)
    tree = {"w": np.arange(2000, dtype=np.float32)}
    for step in (1, 2):
        ck.save(step, jax.tree.map(lambda x: x * step, tree), {"phase": "rl", "step": step})
    assert ck.restore_newest(lambda meta: tree)[1]["step"] == 2
    os.remove(os.path.join(ck.step_dir(2), checkpoint.SUMS))           # an older checkpoint
    assert ck.restore_newest(lambda meta: tree)[1]["step"] == 2
    checkpoint.write_sums(ck.step_dir(2))
    path = _largest_file(ck.step_dir(2))
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    os.rename(ck.step_dir(1) + "/meta", ck.step_dir(1) + "/meta.x")   # step 1 unreadable too
    with pytest.raises(ValueError, match="No checkpoint .* loads: step 2: .*CRC-32.*step 1"):
        ck.restore_newest(lambda meta: tree)
    assert sorted(os.listdir(ck.directory)) == ["1", "2"]
    os.rename(ck.step_dir(1) + "/meta.x", ck.step_dir(1) + "/meta")
    with caplog.at_level("WARNING"):
        restored, meta = ck.restore_newest(lambda meta: tree)
    assert meta["step"] == 1 and np.array_equal(restored["w"], tree["w"])
    assert f"Skipping checkpoint {ck.step_dir(2)}" in caplog.text and "CRC-32" in caplog.text
    assert sorted(os.listdir(ck.directory)) == ["1", "2.damaged"]
    ck.save(2, tree, {"phase": "rl", "step": 2})                        # its number is free again
    ck.close()


def _corrupt(step_dir, how):
    """The ways a file of a checkpoint gets damaged: cut short, overwritten, lost."""
    if how == "truncated":
        path = _largest_file(os.path.join(step_dir, "state"))
        data = open(path, "rb").read()
        open(path, "wb").write(data[:len(data) // 2])
    elif how == "garbage":   # two files, as an overwrite by another program does
        for name in ("meta/metadata", "state/_METADATA"):
            path = os.path.join(step_dir, name)
            open(path, "wb").write(os.urandom(os.path.getsize(path)))
    else:
        os.remove(os.path.join(step_dir, "state", "manifest.ocdbt"))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "garbage", "missing"])
def test_corrupt_checkpoint_resumes_from_the_previous_one(reference, tiny_games_dir, tmp_path,
                                                          caplog, how):
    """A run stopped before its final checkpoint whose newest checkpoint (after RL iteration 2)
    is damaged resumes from the one before (after iteration 1), replays iteration 2 and the
    final evaluation, and ends as the uninterrupted run did."""
    workdir = str(tmp_path / "w")
    shutil.copytree(reference[0], workdir)
    ckpts = os.path.join(workdir, "checkpoints")
    assert sorted(os.listdir(ckpts)) == ["2", "3", "4"]
    shutil.rmtree(os.path.join(ckpts, "4"))     # stopped before the final checkpoint
    _corrupt(os.path.join(ckpts, "3"), how)
    with caplog.at_level("WARNING"):
        out = run_lib.run(tiny(tiny_games_dir), workdir)
    assert f"Skipping checkpoint {ckpts}/3" in caplog.text
    assert f"Resuming from the older checkpoint {ckpts}/2" in caplog.text
    assert os.path.isdir(os.path.join(ckpts, "3.damaged"))
    assert_same_run(reference, workdir, out)


# -- SIGTERM --------------------------------------------------------------------------------------
class SigtermAt:
    """Sends this process a real SIGTERM at one point of a run (the handler decides what
    happens: stop at once, or at the end of the deferred section)."""

    def __init__(self, monkeypatch):
        self.phase = None
        self.iteration = -1
        kill = self._kill
        orig_make, orig_pack = textworld_games.make_one_game, loop.AgentTrainer.pack
        orig_eval, orig_iter = loop.AgentTrainer.evaluate, loop.AgentTrainer._rl_iteration
        orig_play = None

        def make_one_game(*a):
            out = orig_make(*a)
            kill("games")
            return out

        def pack(trainer, rows, num_rows, purpose):
            kill({"sft": "sft", "pg": "update"}.get(purpose))
            return orig_pack(trainer, rows, num_rows, purpose)

        def evaluate(trainer, params, pool, title, **kw):
            kill("start_eval" if title.startswith("evaluation of the start") else
                 "periodic_eval" if title.startswith("evaluation at RL iteration") else
                 "final_eval" if title.startswith("final") else None)
            return orig_eval(trainer, params, pool, title, **kw)

        def rl_iteration(trainer, state, ref, pool, it):
            nonlocal orig_play
            orig_play = trainer.play
            trainer.play = lambda *a, **kw: (kill("rollout"), orig_play(*a, **kw))[1]
            try:
                return orig_iter(trainer, state, ref, pool, it)
            finally:
                trainer.play = orig_play

        monkeypatch.setattr(textworld_games, "make_one_game", make_one_game)
        monkeypatch.setattr(loop.AgentTrainer, "pack", pack)
        monkeypatch.setattr(loop.AgentTrainer, "evaluate", evaluate)
        monkeypatch.setattr(loop.AgentTrainer, "_rl_iteration", rl_iteration)

    def _kill(self, phase):
        if phase is not None and phase == self.phase:
            self.phase = None   # once
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.slow
def test_sigterm_in_every_phase_saves_and_the_reruns_end_as_uninterrupted(
        reference, tmp_path, monkeypatch):
    """One run, stopped by a real SIGTERM in each phase in turn (game generation, SFT, the
    starting evaluation, an RL rollout, an RL update, a periodic evaluation, the final
    evaluation), each rerun resuming from what the stop saved, ends with the uninterrupted run's
    params, evaluations and metrics. (Periodic evaluations, on here, leave training as it is.)"""
    at = SigtermAt(monkeypatch)
    games = str(tmp_path / "games")   # a fresh cache: generation is a phase too
    c = tiny(games, **{"games.gen_workers": 1, "eval.every_iters": 1})
    workdir = str(tmp_path / "w")
    seen = []
    for phase in ("games", "sft", "start_eval", "rollout", "update", "periodic_eval",
                  "final_eval"):
        at.phase = phase
        with pytest.raises(preemption.Preempted):
            run_lib.run(c, workdir)
        assert at.phase is None, f"no SIGTERM sent in phase {phase}"
        ckpt = checkpoint.Checkpointer(workdir, 3)
        step = ckpt.latest_step()
        seen.append((phase, None if step is None else ckpt.read_meta()["phase"],
                     None if step is None else ckpt.read_meta()["iteration"]))
        ckpt.close()
    # What each stop kept: no checkpoint before SFT; SFT's state mid-SFT and after it; the
    # first RL rollout stops at the start of RL (its checkpoint); the first RL update finishes
    # its iteration and saves; the evaluation after it stays due, so it runs again on resume;
    # the final evaluation leaves the last iteration's state.
    assert seen == [("games", None, None), ("sft", "sft", 0), ("start_eval", "sft", 0),
                    ("rollout", "rl", 0), ("update", "rl", 1), ("periodic_eval", "rl", 1),
                    ("final_eval", "rl", 2)], seen
    out = run_lib.run(c, workdir)
    assert_same_run(reference, workdir, out)
    recs = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
    evals = sorted(r["step"] for r in recs if "eval/eval_success" in r)
    assert evals == sorted(rl_records(workdir)), evals   # one periodic evaluation per iteration


def test_workdir_lock_refuses_a_second_holder_until_the_first_ends(tmp_path):
    """flock locks belong to an open file, so a second hold conflicts even in one process."""
    from meowjax.runtime import workdir_lock
    with workdir_lock.hold(str(tmp_path)):
        with pytest.raises(workdir_lock.WorkdirBusy,
                           match=rf"Another run \(pid {os.getpid()}\) is using the workdir"):
            with workdir_lock.hold(str(tmp_path)):
                pass
    with workdir_lock.hold(str(tmp_path)):   # released when the holder ends
        pass


def _train_cmd(workdir, games_dir, xla_cache):
    return [sys.executable, "-m", "experiments.train", "--config=configs/default.py:smoke=True",
            f"--workdir={workdir}", f"--compile_cache={xla_cache}", *tiny_flags(games_dir)]


@pytest.mark.slow
def test_sigterm_cli_exits_75_without_traceback_and_a_second_run_hits_the_lock(
        reference, tiny_games_dir, tmp_path, pytestconfig):
    """The real entry point: a second run on the busy workdir is refused at once; SIGTERM during
    RL gives exit status 75, one line and no traceback; the rerun ends as the uninterrupted run."""
    workdir = str(tmp_path / "w")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = _train_cmd(workdir, tiny_games_dir, pytestconfig.meowjax_xla_cache)
    first = subprocess.Popen(cmd, cwd=root, text=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    err = []
    for line in first.stderr:
        err.append(line)
        if "run " in line and ": interface " in line:
            second = subprocess.run(cmd, cwd=root, text=True, capture_output=True, timeout=300)
            assert second.returncode == 1, second.stderr[-3000:]
            assert f"Another run (pid {first.pid}) is using the workdir" in second.stderr
            assert "Traceback" not in second.stderr
        if "evaluation of the starting policy" in line:
            first.send_signal(signal.SIGTERM)
    first.wait(timeout=300)
    err = "".join(err)
    assert first.returncode == preemption.EXIT_STATUS, err[-3000:]
    assert "Traceback" not in err and "Stopped by SIGTERM" in err, err[-3000:]
    again = subprocess.run(cmd, cwd=root, text=True, capture_output=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    evals = json.load(open(os.path.join(workdir, "evals.json")))
    ref_evals = json.load(open(os.path.join(reference[0], "evals.json")))
    assert evals == ref_evals
    want, have = rl_records(reference[0]), rl_records(workdir)
    assert sorted(have) == sorted(want)
    for step, r in want.items():
        for k in ("rollout/return", "rollout/success", "pg/policy_loss", "pg/kl_ref"):
            np.testing.assert_allclose(have[step][k], r[k], rtol=1e-5, atol=1e-6, err_msg=k)
