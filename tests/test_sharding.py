"""Sharding: mesh from config, the logical rule table, and 8-device parity with one device.

The multi-device checks need `--xla_force_host_platform_device_count=8` before jax is imported,
while the rest of the suite runs with 1 device in this process, so they run in a subprocess that
prints one JSON line of results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from meowjax import sharding
from conftest import CPU_COLLECTIVE_FLAGS

MESH_222 = AbstractMesh((2, 2, 2), ("data", "fsdp", "tensor"))


def test_resolve_mesh_shape_infers_minus_one():
    axes = [("data", -1), ("fsdp", 2), ("tensor", 2)]
    assert sharding.resolve_mesh_shape(axes, 8) == (("data", "fsdp", "tensor"), (2, 2, 2))
    assert sharding.resolve_mesh_shape(axes, 16)[1] == (4, 2, 2)
    assert sharding.resolve_mesh_shape([("data", 8)], 8)[1] == (8,)


@pytest.mark.parametrize(
    "axes, devices, match",
    [
        ([("data", -1), ("fsdp", 3)], 8, r"config\.mesh.*multiply to 3.*does not divide"),
        ([("data", -1), ("fsdp", -1)], 8, r"config\.mesh.*at most one"),
        ([("data", 2), ("fsdp", 2)], 8, r"config\.mesh.*multiply to 4 but there are 8"),
        ([("data", -1), ("data", 1)], 8, r"duplicate"),
        ([("data", 0)], 8, r">= 1 or -1"),
    ],
)
def test_resolve_mesh_shape_errors_name_the_field(axes, devices, match):
    with pytest.raises(ValueError, match=match):
        sharding.resolve_mesh_shape(axes, devices)


def test_make_mesh_single_device():
    mesh = sharding.make_mesh([("data", -1), ("fsdp", 1), ("tensor", 1)])
    assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 1}


def test_logical_to_spec_rules():
    rules = sharding.LOGICAL_RULES
    spec = sharding.logical_to_spec
    assert spec(("vocab", "embed"), rules, MESH_222, (512, 64)) == P("tensor", "fsdp")
    assert spec(("layers", "embed", "heads", "head_dim"), rules, MESH_222, (2, 64, 4, 16)) == P(
        None, "fsdp", "tensor"
    )
    # batch takes data+fsdp, so "embed" (fsdp) of an activation stays whole.
    assert spec(("batch", "length", "embed"), rules, MESH_222, (8, 5, 64)) == P(("data", "fsdp"))
    # 3 kv heads do not divide tensor=2: that dim falls back to replicated.
    assert spec(("embed", "kv_heads", "head_dim"), rules, MESH_222, (64, 3, 16)) == P("fsdp")
    # batch of 6 does not divide data*fsdp=4.
    assert spec(("batch", "length"), rules, MESH_222, (6, 5)) == P()
    assert spec(None, rules, MESH_222) == P()
    # mesh axes of size 1 or absent are dropped.
    mesh_d = AbstractMesh((8,), ("data",))
    assert spec(("batch", "embed"), rules, mesh_d, (8, 64)) == P("data")
    assert spec(("vocab", "embed"), rules, mesh_d, (512, 64)) == P()


def test_logical_to_spec_errors():
    with pytest.raises(KeyError, match="'expert'.*LOGICAL_RULES"):
        sharding.logical_to_spec(("expert", "embed"), sharding.LOGICAL_RULES, MESH_222)
    with pytest.raises(ValueError, match="rank 2.*shape \\(4,\\)"):
        sharding.logical_to_spec(("vocab", "embed"), sharding.LOGICAL_RULES, MESH_222, (4,))


def test_tree_shardings_structure_mismatch():
    mesh = sharding.make_mesh([("data", -1)])
    with pytest.raises(ValueError, match="differ in structure"):
        sharding.tree_shardings({"a": ("embed",)}, mesh, {"b": [1.0]})


def test_maybe_initialize_distributed_noop_and_errors():
    assert sharding.maybe_initialize_distributed(None) is False
    assert sharding.maybe_initialize_distributed({"coordinator_address": "", "num_processes": 1}) is False
    with pytest.raises(ValueError, match="coordinator_address"):
        sharding.maybe_initialize_distributed({"num_processes": 2})
    with pytest.raises(ValueError, match="num_processes"):
        sharding.maybe_initialize_distributed({"coordinator_address": "10.0.0.1:1234"})


_EIGHT_DEVICE_SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np, optax
    from jax.sharding import PartitionSpec as P
    from meowjax import sharding
    from meowjax.models import config, lm

    assert jax.device_count() == 8, jax.devices()
    cfg = config.get_preset("tiny", dtype="float32", param_dtype="float32")
    params = jax.jit(lm.init_params, static_argnums=0)(cfg, jax.random.key(0))
    rng = np.random.default_rng(0)
    B, L = 8, 12
    tokens = rng.integers(3, cfg.vocab_size, (B, L)).astype(np.int32)
    mask = np.ones((B, L), np.int32)
    for b in range(B):
        mask[b, : b % 4] = 0  # left padding of 0..3 tokens
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
    batch = {"tokens": tokens, "positions": positions, "mask": mask}

    def loss_fn(p, batch):
        logits = lm.forward(p, cfg, batch["tokens"], batch["positions"], batch["mask"])
        logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
        tgt = jnp.take_along_axis(logp, batch["tokens"][:, 1:, None], axis=-1)[..., 0]
        w = batch["mask"][:, 1:] * batch["mask"][:, :-1]
        return -(tgt * w).sum() / w.sum(), logits

    step = jax.value_and_grad(loss_fn, has_aux=True)
    (ref_loss, ref_logits), ref_grads = jax.jit(step)(params, batch)

    mesh = sharding.make_mesh([("data", -1), ("fsdp", 2), ("tensor", 2)])
    axes = lm.logical_axes(cfg)
    p_shard = sharding.tree_shardings(axes, mesh, params)
    params_s = sharding.shard_params(params, axes, mesh)
    batch_s = sharding.shard_batch(batch, mesh)
    out_shardings = ((sharding.replicated(mesh), sharding.batch_sharding(mesh)), p_shard)
    (loss, logits), grads = jax.jit(step, out_shardings=out_shardings)(params_s, batch_s)

    leaves_s = jax.tree_util.tree_leaves_with_path(params_s)
    split = [
        jax.tree_util.keystr(k) for k, x in leaves_s
        if x.sharding.spec != P() and x.addressable_shards[0].data.shape != x.shape
    ]
    max_grad_err = max(
        float(jnp.max(jnp.abs(a - b))) for a, b in
        zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads))
    )
    grads_keep_sharding = all(
        g.sharding.spec == s.spec for g, s in zip(jax.tree.leaves(grads), jax.tree.leaves(p_shard))
    )

    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    o_shard = sharding.opt_state_shardings(opt, params_s, p_shard, mesh)
    opt_state = jax.jit(opt.init, out_shardings=o_shard)(params_s)
    mu = opt_state[1][0].mu
    count = opt_state[1][0].count

    try:
        sharding.make_mesh([("data", -1), ("fsdp", 3)])
        bad_mesh = "no error"
    except ValueError as e:
        bad_mesh = str(e)

    try:
        sharding.shard_batch({"tokens": np.zeros((6, 3))}, mesh)
        bad_batch = "no error"
    except ValueError as e:
        bad_batch = str(e)
    constrained = jax.jit(
        lambda x: sharding.logical_constraint(x * 2, ("batch", "length", "embed"), mesh)
    )(jnp.ones((8, 4, 64)))

    print(json.dumps({
        "mesh": dict(mesh.shape),
        "inferred": dict(sharding.make_mesh([("data", 2), ("fsdp", -1), ("tensor", 2)]).shape),
        "loss_err": abs(float(loss) - float(ref_loss)),
        "logits_err": float(jnp.max(jnp.abs(logits - ref_logits))),
        "logits_scale": float(jnp.max(jnp.abs(ref_logits))),
        "grad_err": max_grad_err,
        "grad_scale": max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(ref_grads)),
        "logits_spec": str(logits.sharding.spec),
        "logits_shard_shape": list(logits.addressable_shards[0].data.shape),
        "split_params": split,
        "embed_spec": str(params_s["embed"]["embedding"].sharding.spec),
        "grads_keep_sharding": grads_keep_sharding,
        "mu_spec_matches": mu["embed"]["embedding"].sharding.spec == p_shard["embed"]["embedding"].spec,
        "count_spec": str(count.sharding.spec),
        "bad_mesh": bad_mesh,
        "bad_batch": bad_batch,
        "constrained_spec": str(constrained.sharding.spec),
    }))
    """
)


@pytest.fixture(scope="module")
def eight_device_results() -> dict:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8 " + CPU_COLLECTIVE_FLAGS, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", _EIGHT_DEVICE_SCRIPT], env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # one ~30 s (CPU time) subprocess shared by the three 8-device tests
def test_eight_devices_forward_and_grads_match_single_device(eight_device_results):
    r = eight_device_results
    assert r["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
    assert r["loss_err"] < 1e-5
    assert r["logits_scale"] > 1e-2 and r["logits_err"] < 1e-5 * max(1.0, r["logits_scale"])
    assert r["grad_scale"] > 1e-4 and r["grad_err"] < 1e-5 * max(1.0, r["grad_scale"])


@pytest.mark.slow  # one ~30 s (CPU time) subprocess shared by the three 8-device tests
def test_eight_devices_shardings_are_real(eight_device_results):
    r = eight_device_results
    assert r["embed_spec"] == "P('tensor', 'fsdp')"
    # Every kernel and the embedding are split (norm scales over "embed" are too).
    assert any("q_proj" in k for k in r["split_params"]), r["split_params"]
    assert any("down_proj" in k for k in r["split_params"]), r["split_params"]
    assert len(r["split_params"]) >= 10, r["split_params"]
    assert r["logits_spec"] == "P(('data', 'fsdp'),)"
    assert r["logits_shard_shape"][0] == 2  # 8 rows over data*fsdp = 4
    assert r["grads_keep_sharding"]
    assert r["mu_spec_matches"] and r["count_spec"] == "P()"
    assert r["constrained_spec"] == "P(('data', 'fsdp'),)"


@pytest.mark.slow  # one ~30 s (CPU time) subprocess shared by the three 8-device tests
def test_eight_devices_mesh_inference_and_error(eight_device_results):
    r = eight_device_results
    assert r["inferred"] == {"data": 2, "fsdp": 2, "tensor": 2}
    assert "config.mesh" in r["bad_mesh"] and "does not divide the 8" in r["bad_mesh"]
    assert "['tokens'] has 6 rows, not divisible by the 4 batch shards" in r["bad_batch"]
