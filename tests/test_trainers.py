"""Every trainer has a pulse; compiles equal shapes; kill-and-resume equals an uninterrupted run."""
import json
import os

import jax
import numpy as np
import pytest

from benchmarks.rollout import CompileCounter
from configs import default
from meowjax.envs import game_sets
from meowjax.trainers import data, loop
from meowjax.trainers.loop import AgentTrainer
from tests import config_tracking


def tiny_config(games_dir, **rl):
    c = default.get_config("smoke=True")
    c.unlock()
    c.games.update(dict(cache_dir=games_dir, world_size=1, nb_objects=2, quest_length=2,
                        hard_world_size=1, hard_nb_objects=3, hard_quest_length=3,
                        num_train=2, num_sft=2, num_eval=2, num_eval_hard=1, eval_split="valid"))
    c.budget.update(dict(total_episodes=16, sft_share=0.5))   # 1 demo, 2 RL iterations of 4
    c.rollout.update(dict(tasks_per_iter=2, group_size=2, length_buckets=(256, 512, 1024)))
    c.turns.update(dict(max_turns=4, eval_max_turns=4))
    c.eval.update(dict(every_iters=0, num_samples=2, pass_ks=(1, 2), pass_ts=(2, 4)))
    c.checkpoint.every_iters = 1
    c.rl.update(rl)
    c.lock()
    return c


def _leaves_differ(a, b):
    return any(not np.allclose(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["rloo", "grpo", "gae"])
def test_score_trainer_has_a_pulse(tiny_games_dir, tmp_path, estimator):
    c = tiny_config(tiny_games_dir, estimator=estimator, minibatch_rows=16)
    tracked = config_tracking.track(c)   # configs/default.py's honesty check rides on this run
    trainer = AgentTrainer(tracked, str(tmp_path))
    with CompileCounter() as counter:
        out = trainer.run()
    assert out["rl_iters"] == 2 and out["sft_rows"] > 0
    if estimator == "rloo":   # default's own estimator: every field default.py sets was read
        config_tracking.assert_honest("default", tracked)
    # Compiles are the trainer's own programs, each once per input signature, plus a few
    # setup-time eager ops (key creation, placement, a scalar): no per-op compiles of the RL
    # math or of optimizer-moment / reference-copy creation (57 of this run's 82 were, before).
    programs = {"step", "score", "old_terms", "advantages", "_copy_tree", "new_sft_state",
                "new_rl_state", "init_params"}
    assert all(counter.by_fn[f] == len(counter.signatures[f]) for f in programs)
    assert counter.by_fn["_copy_tree"] <= 1, counter.by_fn  # module-level jit: once a process
    others = {f: n for f, n in counter.by_fn.items() if f not in programs}
    assert sum(others.values()) <= 8, others
    assert _leaves_differ(out["state"].params, out["ref"])       # RL moved the policy
    assert bool(out["state"].value_params) == (estimator == "gae")
    recs = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    rl = [r for r in recs if "pg/policy_loss" in r]
    assert len(rl) == 2 and all(np.isfinite(v) for r in rl for v in r.values())
    assert all(r["rollout/logp_mismatch_max"] < 1e-4 for r in rl)   # sampled == recomputed
    # One compile per (function, shape): every shape seen compiled exactly once.
    assert trainer.pg_step._cache_size() == len(trainer.shapes_seen["pg"])
    assert trainer.sft_step._cache_size() == len(trainer.shapes_seen["sft"])
    # SFT steps run on a fixed row count (only the length varies): compiles = length buckets.
    assert {s[0] for s in trainer.shapes_seen["sft"]} == {c.sft.batch_rows}
    # RL update chunks (<= 16 rows here: 4 episodes of <= 4 turns) are padded to a multiple of 8
    # rows, the pre-update pass (reference log-probs for the KL, values for the critic) alike.
    assert [trainer.update_batch_rows(n) for n in (1, 8, 9, 16)] == [8, 8, 16, 16]
    assert {s[0] for s in trainer.shapes_seen["pg"]} <= {8, 16}
    assert trainer.shapes_seen["old"] == trainer.shapes_seen["pg"]
    assert trainer.old_terms._cache_size() == len(trainer.shapes_seen["old"])
    for split in ("eval", "eval_hard"):
        assert 0.0 <= out["evals"]["final"][split]["success"] <= 1.0
    assert os.listdir(tmp_path / "tb")


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["rloo", "gae"])
def test_text_trainer_has_a_pulse(tiny_games_dir, tmp_path, estimator):
    c = tiny_config(tiny_games_dir, estimator=estimator, minibatch_rows=4)
    c.unlock()
    c.policy.update(dict(interface="generate", window=None, history=False, max_action_tokens=6))
    c.lock()
    trainer = AgentTrainer(c, str(tmp_path))
    out = trainer.run()
    assert _leaves_differ(out["state"].params, out["ref"])
    recs = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    rl = [r for r in recs if "pg/policy_loss" in r]
    assert len(rl) == 2 and all(np.isfinite(v) for r in rl for v in r.values())
    assert all(r["rollout/logp_mismatch_max"] < 1e-4 for r in rl)
    assert trainer.pg_step._cache_size() == len(trainer.shapes_seen["pg"])


def test_compile_clock_counts_each_backend_compile():
    from meowjax.runtime import metrics_log
    clock = metrics_log.CompileClock()
    f = jax.jit(lambda x: x * 2.0 + 1.0)
    for n in (3, 3, 5):   # numpy inputs: no other jitted op runs in between
        f(np.ones(n, np.float32)).block_until_ready()
    snap = clock.snapshot()
    assert f._cache_size() == 2 and snap["compiles"] == 2
    assert snap["compile_s"] > 0 and snap["trace_s"] > 0
    assert metrics_log.CompileClock().snapshot()["compiles"] == 0   # counts from construction


_CACHE_PROBE = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from meowjax.runtime import metrics_log, xla_cache
xla_cache.enable(sys.argv[1], min_compile_s=0.0)
clock = metrics_log.CompileClock()
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(0) * 3.0)
out = np.asarray(f(np.arange(64, dtype=np.float32).reshape(8, 8) / 64))
print(json.dumps(dict(clock.snapshot(), out=out.tolist())))
"""


def test_persistent_compile_cache_loads_a_later_process_compile(tmp_path):
    """xla_cache.enable: the first process compiles and writes the cache; a second process
    with the same program loads it (CompileClock counts the hit), with identical results."""
    import subprocess
    import sys

    def probe():
        res = subprocess.run([sys.executable, "-c", _CACHE_PROBE, str(tmp_path / "xc")],
                             capture_output=True, text=True, timeout=300, check=True)
        return json.loads(res.stdout.strip().splitlines()[-1])

    first, second = probe(), probe()
    assert first["cache_hits"] == 0 and second["cache_hits"] >= 1
    assert first["compiles"] == second["compiles"] >= 1  # a hit still passes the compile step
    assert second["out"] == first["out"]
    assert any((tmp_path / "xc").iterdir())
    from meowjax.runtime import xla_cache
    assert xla_cache.enable("") == ""   # '' leaves the cache off


@pytest.mark.slow
def test_score_trainer_without_kl_or_critic_skips_the_pre_update_pass(tiny_games_dir, tmp_path):
    c = tiny_config(tiny_games_dir, estimator="rloo", minibatch_rows=8, kl_coef=0.0)
    trainer = AgentTrainer(c, str(tmp_path))
    out = trainer.run()
    assert out["rl_iters"] == 2 and "old" not in trainer.shapes_seen
    assert trainer.old_terms._cache_size() == 0
    recs = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    assert all(r["pg/kl_ref"] == 0.0 for r in recs if "pg/kl_ref" in r)


@pytest.mark.slow
def test_greedy_member_joins_each_group_and_is_trained_on(tiny_games_dir, tmp_path, monkeypatch):
    """rollout.greedy_member: each group's update holds its G sampled episodes plus the task's
    greedy episode (same task, same group id); rollout figures stay those of the sampled ones."""
    c = tiny_config(tiny_games_dir, estimator="rloo", minibatch_rows=8)
    c.unlock()
    c.rollout.greedy_member = True
    c.lock()
    trainer = AgentTrainer(c, str(tmp_path))
    iters = []   # per RL iteration: its play_share calls and the episodes it updated on
    active = []
    play_share, update_rows, iteration = (trainer.play_share, trainer.update_rows,
                                          trainer._rl_iteration)

    def recording_play(*args, greedy, **kw):
        out = play_share(*args, greedy=greedy, **kw)
        if active:   # not the evaluations'
            iters[-1]["plays"].append((greedy, kw["group_size"], out))
        return out

    def recording_update_rows(trajs):
        iters[-1]["update"] = list(trajs)
        return update_rows(trajs)

    def recording_iteration(*args):
        iters.append({"plays": [], "update": None})
        active.append(True)
        try:
            return iteration(*args)
        finally:
            active.pop()

    monkeypatch.setattr(trainer, "play_share", recording_play)
    monkeypatch.setattr(trainer, "update_rows", recording_update_rows)
    monkeypatch.setattr(trainer, "_rl_iteration", recording_iteration)
    out = trainer.run()
    assert out["rl_iters"] == 2 and len(iters) == 2
    updated = [it["update"] for it in iters]
    for it in iters:
        assert [(g, size) for g, size, _ in it["plays"]] == [(False, 2), (True, 1)]
        sampled, greedy = it["plays"][0][2], it["plays"][1][2]
        assert [id(e) for e in it["update"]] == [id(e) for e in sampled + greedy]
        for gid in range(c.rollout.tasks_per_iter):
            members = [e for e in it["update"] if e.group_id == gid]
            assert len(members) == c.rollout.group_size + 1
            assert len({e.task_id for e in members}) == 1
    recs = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    rl = [r for r in recs if "pg/policy_loss" in r]
    for r, eps in zip(rl, updated):
        sampled = eps[:-c.rollout.tasks_per_iter]
        assert r["rollout/success"] == pytest.approx(np.mean([e.won for e in sampled]))
        assert r["rollout/greedy_success"] == pytest.approx(
            np.mean([e.won for e in eps[-c.rollout.tasks_per_iter:]]))


@pytest.mark.slow
def test_kill_and_resume_equals_uninterrupted(tiny_games_dir, tmp_path):
    c = tiny_config(tiny_games_dir, estimator="rloo", minibatch_rows=8)
    full = AgentTrainer(c, str(tmp_path / "full")).run()

    class Interrupt(Exception):
        pass

    t = AgentTrainer(c, str(tmp_path / "cut"))
    original = t._rl_iteration

    def one_then_preempt(state, ref, pool, it):
        out = original(state, ref, pool, it)
        t.preempted = True            # what the SIGTERM handler sets
        return out

    t._rl_iteration = one_then_preempt
    with pytest.raises(loop.Preempted):
        t.run()
    resumed = AgentTrainer(c, str(tmp_path / "cut")).run()
    for a, b in zip(jax.tree.leaves(full["state"].params), jax.tree.leaves(resumed["state"].params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    m_full = [json.loads(l) for l in open(tmp_path / "full" / "metrics.jsonl")]
    m_cut = [json.loads(l) for l in open(tmp_path / "cut" / "metrics.jsonl")]
    key = lambda recs: [(r["step"], round(r["rollout/return"], 6)) for r in recs if "rollout/return" in r]
    assert key(m_full) == key(m_cut)
    assert full["evals"]["final"]["eval"] == resumed["evals"]["final"]["eval"]


def test_configs_switch_args_load_and_fit_their_budgets():
    """configs/smollm2_textworld.py's switches (each alone) build configs whose budgets fit
    their games, with the demonstrations and RL episodes their comments give."""
    from configs import smollm2_textworld
    plans = {a: data.budget_plan(smollm2_textworld.get_config(f"{a}=True"))
             for a in ("full", "gpu", "long_sft", "hard_rl")}
    assert plans["long_sft"] == {"sft_demos": 192, "rl_episodes": 8}
    assert plans["hard_rl"] == {"sft_demos": 96, "rl_episodes": 128}
    assert plans["gpu"] == {"sft_demos": 64, "rl_episodes": 320}


def test_configs_load_and_reject_unknown_keys():
    import glob
    import importlib.util
    for path in glob.glob(os.path.join(os.path.dirname(__file__), "..", "configs", "*.py")):
        if path.endswith(("common.py", "__init__.py")):
            continue
        spec = importlib.util.spec_from_file_location("cfg", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for arg in (None, "smoke=True"):
            c = mod.get_config(arg)
            with pytest.raises(AttributeError, match="no_such_field"):
                c.rl.no_such_field = 1
            data.budget_plan(c)  # its budget fits its game counts (swe_tiny's smoke did not)
    with pytest.raises(ValueError, match="Unknown config arg 'smok'"):
        default.get_config("smok=True")
    c = default.get_config("smoke=True")
    c.unlock()
    c.rollout.tasks_per_iter = c.games.num_train + c.games.num_train_hard + 1
    with pytest.raises(ValueError, match=r"rollout.tasks_per_iter=\d+ distinct tasks per RL "
                       r"iteration, but the RL pool has \d+ \(games.num_train="):
        data.budget_plan(c)
    c.budget.sft_share = 1.0       # no RL episodes: no pool needed
    c.games.num_sft = 10 ** 6
    data.budget_plan(c)


@pytest.mark.slow
def test_critic_warmup_fits_the_critic_and_leaves_the_policy(tiny_games_dir, tmp_path):
    """rl.critic_warmup_iters: critic-only iterations change the value params and not the
    policy's (nor its optimizer state); a whole run logs each warm-up iteration, and its first
    policy update finds the critic nearer the returns than a cold head does."""
    from meowjax.envs.pool import EnvPool

    def trainer_for(name, warm):
        # A turn cost: every return is non-zero, even a fresh policy's that never progresses.
        c = tiny_config(tiny_games_dir, estimator="gae", minibatch_rows=8, critic_lr=1e-2,
                        critic_warmup_iters=warm, turn_cost=0.1)
        return AgentTrainer(c, str(tmp_path / name))

    t = trainer_for("unit", 1)
    state, _, _ = t.restore_state()
    rl_state = t._rl_state(state.params)
    before = jax.tree.map(np.array, jax.device_get(rl_state))   # copies: the step donates
    pool = EnvPool(game_sets.env_spec(t.c, admissible=True), num_workers=1)
    try:   # two iterations: the critic's learning rate warms up from 0 at its first step
        after, m = t._rl_iteration(rl_state, before.params, pool, 0, critic_only=True)
        after, m = t._rl_iteration(after, before.params, pool, 1, critic_only=True)
    finally:
        pool.close()
        t.ckpt.close()
        t.writer.close()
    after = jax.device_get(after)
    jax.tree.map(np.testing.assert_array_equal, after.params, before.params)
    jax.tree.map(np.testing.assert_array_equal, after.opt_state, before.opt_state)
    assert _leaves_differ(after.value_params, before.value_params)
    assert set(m) == {k for k in m if k.startswith("critic_warmup/")} and m
    assert "pg/policy_loss" not in m

    def first_update_error(name, warm):
        out = trainer_for(name, warm).run()
        recs = [json.loads(l) for l in open(tmp_path / name / "metrics.jsonl")]
        assert sum("critic_warmup/value_abs_err" in r for r in recs) == warm
        assert out["rl_iters"] == 2
        return next(r["pg/value_abs_err"] for r in recs if "pg/value_abs_err" in r)

    cold, warm = first_update_error("cold", 0), first_update_error("warm", 3)
    assert warm < cold, (warm, cold)
    with pytest.raises(ValueError, match="has none: set it to 0"):
        AgentTrainer(tiny_config(tiny_games_dir, estimator="rloo", critic_warmup_iters=1),
                     str(tmp_path / "bad"))
