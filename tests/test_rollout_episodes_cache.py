"""Per-episode KV caches kept across turns (`rollout.episode_cache`) vs re-prefilling every
turn: the same tokens and log-probs, bounded compiles, batch shrinking, compaction, overflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import CPU_COLLECTIVE_FLAGS

from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import episode_cache, episodes
from meowjax.rollout.sampler import Sampler
from meowjax.rollout.tokenizer import train_bpe_tokenizer

from test_rollout_episodes import GAME_TEXT, InProcessPool, tasks

pytestmark = pytest.mark.slow   # a few tiny-model sampler compiles per path
STEPS = 6


@pytest.fixture(scope="module")
def tok():
    return train_bpe_tokenizer(GAME_TEXT, vocab_size=320)


@pytest.fixture(scope="module")
def model(tok):
    cfg = get_preset("tiny", vocab_size=len(tok), dtype="float32")
    p = lm.init_params(cfg, jax.random.PRNGKey(1))
    # Larger weights than the 0.02 init: peaked next-token distributions, few near-ties.
    layers = jax.tree.map(lambda x: x * 5.0 if x.ndim > 2 else x, p["layers"])
    return cfg, dict(p, layers=layers)


def _sampler(cfg, tok, **kw):
    kw.setdefault("prompt_buckets", (128, 256, 512))
    return Sampler(cfg, batch_buckets=(1, 2, 4, 8), max_new_tokens=STEPS,
                   pad_id=tok.pad_token_id, **kw)


@pytest.fixture(scope="module")
def samplers(model, tok):
    """One sampler per path, shared by the tests (their compiles are counted)."""
    cfg, _ = model
    return {False: _sampler(cfg, tok), True: _sampler(cfg, tok)}


def _collect(samplers, model, tok, kv_reuse, *, greedy, max_context=512, seed=7, n_tasks=3):
    _, params = model
    return episodes.collect_episodes(
        samplers[kv_reuse], params, InProcessPool(), tok, tasks(n_tasks), group_size=2,
        max_turns=[2, 4, 6][:n_tasks], max_context=max_context, max_action_tokens=STEPS,
        temperature=0.7, greedy=greedy, rng=jax.random.PRNGKey(seed), kv_reuse=kv_reuse)


def _assert_same_episodes(want, got, atol):
    assert [e.turns for e in got] == [e.turns for e in want]
    for a, b in zip(want, got):
        np.testing.assert_array_equal(b.tokens, a.tokens)
        np.testing.assert_array_equal(b.loss_mask, a.loss_mask)
        np.testing.assert_array_equal(b.turn_end, a.turn_end)
        np.testing.assert_allclose(b.sample_logp, a.sample_logp, atol=atol)
        assert b.actions == a.actions and b.info == a.info


def test_cache_turns_greedy_episodes_equal_reprefill_token_for_token(samplers, model, tok):
    """Six episodes of 2, 4 and 6 turns (the batch shrinks 8 -> 4 -> 2): each turn prefilling
    only its new tokens gives the re-prefill path's greedy episodes, token for token."""
    want = _collect(samplers, model, tok, False, greedy=True)
    got = _collect(samplers, model, tok, True, greedy=True)
    assert [e.turns for e in got] == [2, 2, 4, 4, 6, 6]
    assert len({e.tokens[-STEPS:].tobytes() for e in got}) > 1   # not one constant action
    _assert_same_episodes(want, got, atol=1e-5)


def test_cache_turns_sampled_episodes_equal_reprefill_with_same_keys(samplers, model, tok):
    """Sampled at temperature 0.7 with the same rng: the same draws (row keys are folded with
    the episode index, not the row's place in a batch), log-probs to fp32 rounding."""
    want = _collect(samplers, model, tok, False, greedy=False, seed=3)
    got = _collect(samplers, model, tok, True, greedy=False, seed=3)
    _assert_same_episodes(want, got, atol=1e-5)
    assert got[0].tokens.tolist() != got[1].tokens.tolist()   # group members differ


def test_cache_turn_programs_one_per_bucket(samplers, model, tok, monkeypatch):
    """Prefill: one compile per (batch bucket, cache bucket, new-token bucket) seen; decode:
    one per (batch bucket, cache bucket); a second rollout compiles nothing new. The batch
    shrinks as episodes finish (8 -> 4 -> 2 rows), each time with one relayout."""
    sampler = _sampler(model[0], tok)
    seen_prefill, seen_decode, made = set(), set(), []
    prefill, decode = sampler.cache_prefill_jit, sampler.cache_decode_jit

    def count_prefill(params, cache, tokens_BL, *args):
        seen_prefill.add((*tokens_BL.shape, cache.mask_BS.shape[1]))
        return prefill(params, cache, tokens_BL, *args)

    def count_decode(params, cache, *args, **kw):
        seen_decode.add(cache.mask_BS.shape)
        return decode(params, cache, *args, **kw)

    monkeypatch.setattr(sampler, "cache_prefill_jit", count_prefill)
    monkeypatch.setattr(sampler, "cache_decode_jit", count_decode)
    real = episode_cache.EpisodeCaches
    monkeypatch.setattr(episode_cache, "EpisodeCaches",
                        lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    _collect({True: sampler}, model, tok, True, greedy=True)
    assert sampler.cache_compiles["prefill"] == len(seen_prefill) >= 2
    assert sampler.cache_compiles["decode"] == len(seen_decode)
    assert {b for b, _ in seen_decode} == {8, 4, 2}
    stats = made[0].stats
    assert stats.turns == 6 and stats.shrinks == 2 and stats.compactions == 0
    assert stats.prefill_tokens < stats.prefill_slots
    before = dict(sampler.cache_compiles)
    _collect({True: sampler}, model, tok, True, greedy=False, seed=11)
    assert sampler.cache_compiles == before


def test_cache_turn_overflow_ends_episode_like_reprefill(samplers, model, tok):
    """A context that holds about two turns: episodes end with info["overflow"] (counted, never
    truncated) at the same turn on both paths, with the same tokens."""
    want = _collect(samplers, model, tok, False, greedy=True, max_context=260)
    got = _collect(samplers, model, tok, True, greedy=True, max_context=260)
    assert any(e.info["overflow"] for e in got)
    assert max(e.length for e in got) <= 260
    _assert_same_episodes(want, got, atol=1e-5)


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_episode_cache_turns_equal_generate_grow_compact_shrink(model, tok, greedy):
    """`EpisodeCaches.turn` on small buckets that force every relayout (the cache grows from 32
    to 64 slots, is compacted when the gaps of 16-token new-token slots would pass 64, and the
    batch shrinks from 4 to 2 rows when an episode finishes) equals `Sampler.generate` on each
    episode's full sequence, turn after turn."""
    cfg, params = model
    rng = np.random.default_rng(0)
    sampler = _sampler(cfg, tok, prompt_buckets=(16, 32, 64))
    caches = episode_cache.EpisodeCaches(sampler, 3, max_context=64, max_new_tokens=STEPS,
                                         new_token_buckets=(16,), cache_buckets=(32, 64))
    seqs = [rng.integers(3, cfg.vocab_size, n).tolist() for n in (5, 2, 7)]
    live, key = [0, 1, 2], jax.random.PRNGKey(5)
    kw = dict(max_new_tokens=STEPS, temperature=0.8, greedy=greedy, stop_ids=(int(seqs[0][0]),))
    for turn in range(4):
        key, turn_key = jax.random.split(key)
        want = sampler.generate(params, [seqs[e] for e in live], turn_key, row_ids=live, **kw)
        new = [seqs[e][caches.cached[e]:] for e in live]
        got = caches.turn(params, live, new, turn_key, **kw)
        np.testing.assert_array_equal(got.tokens_BT, want.tokens_BT)
        np.testing.assert_array_equal(got.lengths_B, want.lengths_B)
        np.testing.assert_allclose(got.logp_BT, want.logp_BT, atol=1e-5)
        for row, e in enumerate(live):
            n = int(got.lengths_B[row])
            seqs[e] += got.tokens_BT[row, :n].tolist() + rng.integers(3, 300, 3).tolist()
        live = [0, 2] if turn < 2 else [2]
    assert caches.stats.grows == 1 and caches.stats.compactions == 1
    assert caches.stats.shrinks == 2


_SHARDED_SCRIPT = """
import json, sys
sys.path.insert(0, "tests")
import jax, numpy as np
from meowjax import sharding
from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import episode_cache, episodes
from meowjax.rollout.sampler import Sampler
from meowjax.rollout.tokenizer import train_bpe_tokenizer
from test_rollout_episodes import GAME_TEXT, InProcessPool, tasks

assert jax.device_count() == 8, jax.devices()
tok = train_bpe_tokenizer(GAME_TEXT, vocab_size=320)
cfg = get_preset("tiny", vocab_size=len(tok), dtype="float32")
p = lm.init_params(cfg, jax.random.PRNGKey(1))
params = dict(p, layers=jax.tree.map(lambda x: x * 5.0 if x.ndim > 2 else x, p["layers"]))
mesh = sharding.make_mesh([("data", 4), ("fsdp", 1), ("tensor", 2)])
params_s = sharding.shard_params(params, lm.logical_axes(cfg), mesh)
make = lambda **kw: Sampler(cfg, prompt_buckets=(128, 256, 512), batch_buckets=(1, 2, 4, 8),
                            max_new_tokens=6, pad_id=tok.pad_token_id, **kw)
sharded = make(mesh=mesh, row_axes=sharding.batch_axes(mesh))
out = {}
for name, sampler, weights in (("one", make(), params), ("mesh", sharded, params_s)):
    eps = episodes.collect_episodes(
        sampler, weights, InProcessPool(), tok, tasks(3), group_size=2, max_turns=[2, 4, 6],
        max_context=512, max_action_tokens=6, temperature=0.7, greedy=True,
        rng=jax.random.PRNGKey(7), kv_reuse=True)
    out[name] = dict(tokens=[e.tokens.tolist() for e in eps],
                     logp=[e.sample_logp.tolist() for e in eps])
caches = episode_cache.EpisodeCaches(sharded, 8, max_context=512, max_new_tokens=6)
caches.turn(params_s, list(range(8)), [[5, 6, 7]] * 8, jax.random.PRNGKey(0), max_new_tokens=6)
k = caches.groups[0].cache.k_NBSKD
out["k_spec"] = str(k.sharding.spec)
out["k_shard_rows"] = k.addressable_shards[0].data.shape[1]
print(json.dumps(out))
"""


def test_cache_turns_sharded_rows_equal_one_device():
    """8 CPU devices, mesh data=4 x tensor=2: the kept cache's rows are split over the data
    axis, and greedy cached episodes equal the one-device ones (log-probs to rounding)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=root, XLA_FLAGS=(
        "--xla_force_host_platform_device_count=8 " + CPU_COLLECTIVE_FLAGS))
    proc = subprocess.run([sys.executable, "-c", _SHARDED_SCRIPT], env=env, cwd=root,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["k_shard_rows"] == 2 and "data" in out["k_spec"]
    assert out["mesh"]["tokens"] == out["one"]["tokens"]
    for a, b in zip(out["mesh"]["logp"], out["one"]["logp"]):
        np.testing.assert_allclose(a, b, atol=1e-5)
