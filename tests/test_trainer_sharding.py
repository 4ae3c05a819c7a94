"""The trainer on a mesh: (data=2, fsdp=2, tensor=2) over 8 fake CPU devices equals one device.

`--xla_force_host_platform_device_count=8` must be set before jax is imported while the rest of
the suite runs on 1 device, so each run is a subprocess (as in tests/test_sharding.py) that drives
the score trainer's own pieces (restore, SFT steps, RL state, old terms, PG steps, rollout scoring,
checkpoint and resume) without environments, prints one JSON line and saves the final params.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import CPU_COLLECTIVE_FLAGS

MESH_222 = [["data", 2], ["fsdp", 2], ["tensor", 2]]
MESH_1 = [["data", -1], ["fsdp", 1], ["tensor", 1]]

_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.time()
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import PartitionSpec as P
    from configs import default
    from meowjax.trainers import loop, rl_iteration
    from meowjax.trainers.loop import AgentTrainer

    games_dir, workdir, axes, out_path = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]

    def config(**rl):
        c = default.get_config("smoke=True")
        c.unlock()
        c.games.update(dict(cache_dir=games_dir, world_size=1, nb_objects=2, quest_length=2,
                            hard_world_size=1, hard_nb_objects=3, hard_quest_length=3,
                            num_train=2, num_sft=2, num_eval=2, num_eval_hard=1,
                            eval_split="valid"))
        c.budget.update(dict(total_episodes=16, sft_share=0.5))
        c.rollout.update(dict(tasks_per_iter=2, group_size=2, length_buckets=(256, 512, 1024)))
        c.mesh.axes = tuple(tuple(a) for a in axes)
        # sft.lm_coef stays the default run's 1.0: the SFT steps include the auxiliary prompt
        # LM loss. (An early version deadlocked in an XLA CPU collective with it on and set it to
        # 0; at 153324f five runs on 8 fake devices, two of them concurrent, finished without a
        # hang and matched one device.)
        assert c.sft.lm_coef > 0
        c.env.reward_mode = "sparse"
        # The test's own learning rates (not the default run's tuned ones): the parameter bound
        # below assumes policy steps of lr <= 1e-4.
        c.sft.lr, c.rl.lr = 1e-3, 1e-4
        c.rl.update(rl)
        c.lock()
        return c

    out = {"devices": jax.device_count(), "bad_rows": "not tried"}
    if jax.device_count() > 1:  # raised before any game or model is built
        try:
            AgentTrainer(config(minibatch_rows=6), workdir + "_bad")
            out["bad_rows"] = "no error"
        except ValueError as e:
            out["bad_rows"] = str(e)

    t = AgentTrainer(config(estimator="gae", minibatch_rows=8), workdir)
    out["setup_s"] = time.time() - t0
    out["mesh"] = dict(t.mesh.shape)
    leaves = jax.tree.leaves
    same = lambda tree, want: [x.sharding == s for x, s in zip(leaves(tree), leaves(want))]
    want_sft, want_rl = t.shardings[loop.SFT].state, t.shardings[loop.RL].state

    state, ref, meta = t.restore_state()
    out["fresh_sft_ok"] = all(same(state, want_sft))
    batch = t.pack(t.sft_rows[:8], 8, "sft")
    out["sft_loss"] = []
    for _ in range(3):  # the first step has lr 0 (warmup)
        state, m = t.sft_step(state, t.place.batch(batch))
        out["sft_loss"].append(float(m["sft/loss"]))
    out["after_sft_ok"] = all(same(state, want_sft))

    ref = t.place.params(jax.tree.map(jnp.copy, state.params))
    state = t._rl_state(state.params)
    out["fresh_rl_ok"] = all(same(state, want_rl))
    rows = [dict(r) for r in t.sft_rows[:8]]
    refl, vals, _ = rl_iteration.old_terms(t, state, ref, rows)   # no TIS (fp32): None
    old = refl  # the reference is a copy of the policy here: its log-probs are the policy's
    for k, r in enumerate(rows):
        r.update(old_logp=np.float32(old[k]), adv=np.float32((-1) ** k * (1 + k / 8)),
                 ret=np.float32(k % 2), old_value=np.float32(vals[k]), ref_logp=np.float32(refl[k]))
    out["old_logp"] = [float(x) for x in old]
    out["values"] = [float(x) for x in vals]
    out["pg_loss"], out["value_loss"] = [], []
    pg_batch = t.pack(rows, 8, "pg")
    for _ in range(3):
        state, m = t.pg_step(state, t.place.batch(pg_batch))
        out["pg_loss"].append(float(m["pg/policy_loss"]))
        out["value_loss"].append(float(m["pg/value_loss"]))
    out["after_pg_ok"] = all(same(state, want_rl))
    out["pg_compiles"] = t.pg_step._cache_size()
    out["step"] = int(state.step)
    # Not replicated by accident: these leaves are split across devices.
    def split(x):
        return x.sharding.spec != P() and x.addressable_shards[0].data.shape != x.shape
    out["split"] = {
        "embed": split(state.params["embed"]["embedding"]),
        "q_proj": split(state.params["layers"]["attn"]["q_proj"]["kernel"]),
        "value_mlp": split(state.value_params["layers"]["mlp"]["up_proj"]["kernel"]),
        "adam_mu": sum(split(x) for x in leaves(state.opt_state)),
        "critic_adam_mu": sum(split(x) for x in leaves(state.value_opt_state)),
        "ref": split(ref["embed"]["embedding"]),
    }
    out["embed_spec"] = str(state.params["embed"]["embedding"].sharding.spec)
    out["step_spec"] = str(state.step.sharding.spec)
    rollout = t.place.batch(t.pack(t.sft_rows[:4], t.batch_rows, "rollout"))
    out["score_logp"] = np.asarray(
        t.agent.score_fn(state.params, rollout, np.float32(1.0)))[:4].tolist()
    out["batch_spec"] = str(rollout["tokens"].sharding.spec)

    meta = {"phase": loop.RL, "sft_step": 2, "iteration": 1, "ckpt_index": 0, "evals": {}}
    t._save(state, ref, meta)
    state2, ref2, meta2 = t.restore_state()
    out["restored_ok"] = all(same(state2, want_rl)) and all(same(ref2, want_rl.params))
    out["restored_equal"] = all(bool(jnp.array_equal(a, b))
                                for a, b in zip(leaves(state2), leaves(state)))
    t.ckpt.close()
    t.writer.close()
    flat = jax.tree_util.tree_leaves_with_path({"p": state2.params, "v": state2.value_params})
    np.savez(out_path, **{jax.tree_util.keystr(k): np.asarray(x) for k, x in flat})
    out["total_s"] = time.time() - t0
    print(json.dumps(out))
    """
)


def _run(axes, devices: int, games_dir: str, tmp_path, name: str) -> tuple[dict, dict]:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} " + CPU_COLLECTIVE_FLAGS)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    npz = str(tmp_path / f"{name}.npz")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, games_dir, str(tmp_path / name), json.dumps(axes), npz],
        env=env, cwd=root, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), dict(np.load(npz))


@pytest.fixture(scope="module")
def runs(tiny_games_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mesh")
    one = _run(MESH_1, 1, tiny_games_dir, tmp, "one")     # generates the games first
    eight = _run(MESH_222, 8, tiny_games_dir, tmp, "eight")
    return one, eight


@pytest.mark.slow  # two subprocesses, ~1-1.5 min CPU each (+ game generation on first use)
def test_mesh_222_matches_one_device(runs):
    (one, p_one), (eight, p_eight) = runs
    assert one["devices"] == 1 and one["mesh"] == {"data": 1, "fsdp": 1, "tensor": 1}
    assert eight["devices"] == 8 and eight["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
    for key in ("sft_loss", "old_logp", "values", "pg_loss", "value_loss", "score_logp"):
        np.testing.assert_allclose(eight[key], one[key], rtol=1e-4, atol=1e-5, err_msg=key)
    assert one["sft_loss"][2] < one["sft_loss"][1]                 # the steps did something
    assert one["pg_loss"][2] != one["pg_loss"][1]
    assert sorted(p_one) == sorted(p_eight) and len(p_one) > 10
    for k in p_one:
        # Adam turns ~1e-7 reduction-order noise in near-zero gradients into steps of up to lr:
        # the critic (lr 1e-3) gets a looser bound than the policy (lr <= 5e-5 in these steps).
        atol = 2e-6 if k.startswith("['p']") else 1e-4
        np.testing.assert_allclose(p_eight[k], p_one[k], rtol=1e-4, atol=atol, err_msg=k)


@pytest.mark.slow
def test_state_keeps_the_intended_shardings(runs):
    _, (eight, _) = runs
    assert eight["fresh_sft_ok"] and eight["after_sft_ok"] and eight["fresh_rl_ok"]
    assert eight["after_pg_ok"]                                    # no drift across steps
    assert eight["step"] == 3 and eight["pg_compiles"] == 1
    assert eight["embed_spec"] == "P('tensor', 'fsdp')" and eight["step_spec"] == "P()"
    s = eight["split"]
    assert s["embed"] and s["q_proj"] and s["value_mlp"] and s["ref"], s
    assert s["adam_mu"] >= 10 and s["critic_adam_mu"] >= 10, s     # mu and nu are split too
    assert eight["batch_spec"] == "P(('data', 'fsdp'),)"
    assert eight["restored_ok"] and eight["restored_equal"]        # resume lands sharded


@pytest.mark.slow
def test_batch_rows_must_divide_the_data_shards(runs):
    _, (eight, _) = runs
    msg = eight["bad_rows"]
    assert "config.rl.minibatch_rows=6" in msg and "4 data-parallel batch shards" in msg, msg
    assert "config.mesh.axes" in msg and "multiple of 4 (e.g. 8)" in msg, msg
