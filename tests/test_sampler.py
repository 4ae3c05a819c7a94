"""KV-cache sampler vs the full training forward: greedy argmax, log-probs, stops, compiles."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meowjax.models import config as config_lib
from meowjax.models import lm
from meowjax.rollout.sampler import Sampler

CFG = config_lib.get_preset("tiny", tie_embeddings=False)
STEPS = 6
PROMPTS = [[5, 17, 99, 3, 42], [7, 8], [300, 301, 302, 303, 304, 305, 306]]


@pytest.fixture(scope="module")
def params():
    p = lm.init_params(CFG, jax.random.key(0))
    # Larger weights than the 0.02 init: context matters and next-token distributions are peaked.
    layers = jax.tree.map(lambda x: x * 5.0 if x.ndim > 2 else x, p["layers"])
    return dict(p, layers=layers, lm_head={"kernel": p["lm_head"]["kernel"] * 30.0})


@pytest.fixture(scope="module")
def sampler(params):
    s = Sampler(CFG, prompt_buckets=(8, 16), batch_buckets=(1, 2, 4), max_new_tokens=STEPS,
                pad_id=CFG.pad_token_id)
    s.generate(params, PROMPTS, jax.random.key(0))  # compiles the (8, 4) bucket all tests use
    assert s.num_compiles == 1
    return s


_forward = jax.jit(lm.forward, static_argnums=1)


def _full_forward(params, rows, length=16):
    """Logits of right-padded rows through the training forward."""
    tokens = np.zeros((len(rows), length), np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
        mask[i, : len(r)] = 1
    pos = lm.positions_from_mask(jnp.asarray(mask))
    return np.asarray(_forward(params, CFG, jnp.asarray(tokens), pos, jnp.asarray(mask)))


def test_greedy_equals_stepwise_argmax_of_full_forward(params, sampler):
    out = sampler.generate(params, PROMPTS, jax.random.key(1), greedy=True, stop_ids=())
    assert out.tokens_BT.shape == (3, STEPS) and out.tokens_BT.dtype == np.int32
    np.testing.assert_array_equal(out.lengths_B, STEPS)
    assert not out.stopped_B.any()
    assert len(set(out.tokens_BT.ravel().tolist())) > 3  # not a degenerate constant output
    for t in range(STEPS):
        rows = [p + out.tokens_BT[i, :t].tolist() for i, p in enumerate(PROMPTS)]
        logits = _full_forward(params, rows)
        last = np.stack([logits[i, len(r) - 1] for i, r in enumerate(rows)])
        top2 = np.sort(last, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 1e-3  # ignore near-ties (rounding could flip them)
        assert clear.mean() > 0.5
        np.testing.assert_array_equal(out.tokens_BT[clear, t], last.argmax(-1)[clear])
        logp = jax.nn.log_softmax(last, axis=-1)[np.arange(3), out.tokens_BT[:, t]]
        np.testing.assert_allclose(out.logp_BT[:, t], logp, atol=1e-5)
        np.testing.assert_allclose(out.logp_raw_BT[:, t], logp, atol=1e-5)


def test_sampled_logprobs_match_training_forward(params, sampler):
    temperature = 0.7
    out = sampler.generate(params, PROMPTS, jax.random.key(2), temperature=temperature, top_p=0.9,
                           stop_ids=())
    rows = [p + out.tokens_BT[i].tolist() for i, p in enumerate(PROMPTS)]
    logits = _full_forward(params, rows)
    targets = np.zeros(logits.shape[:2], np.int32)
    for i, r in enumerate(rows):
        targets[i, : len(r) - 1] = r[1:]
    ref_t = np.asarray(lm.token_logprobs(jnp.asarray(logits), jnp.asarray(targets), temperature))
    ref_raw = np.asarray(lm.token_logprobs(jnp.asarray(logits), jnp.asarray(targets)))
    for i, p in enumerate(PROMPTS):
        span = slice(len(p) - 1, len(p) - 1 + STEPS)
        np.testing.assert_allclose(out.logp_BT[i], ref_t[i, span], atol=2e-5)
        np.testing.assert_allclose(out.logp_raw_BT[i], ref_raw[i, span], atol=2e-5)
    assert not np.allclose(out.logp_BT, out.logp_raw_BT)  # temperature is applied
    # Top-p keeps only tokens inside the nucleus: every sampled token's tempered prob is not tiny.
    assert (out.logp_BT > np.log(1e-4)).all()


def test_top_p_tiny_is_greedy_and_rng_changes_samples(params, sampler):
    greedy = sampler.generate(params, PROMPTS, jax.random.key(3), greedy=True, stop_ids=())
    nucleus = sampler.generate(params, PROMPTS, jax.random.key(3), top_p=1e-6, stop_ids=())
    np.testing.assert_array_equal(greedy.tokens_BT, nucleus.tokens_BT)
    a = sampler.generate(params, PROMPTS, jax.random.key(4), temperature=3.0, stop_ids=())
    b = sampler.generate(params, PROMPTS, jax.random.key(5), temperature=3.0, stop_ids=())
    assert (a.tokens_BT != b.tokens_BT).any()


def test_stop_ids_per_row_then_padding(params, sampler):
    free = sampler.generate(params, PROMPTS, jax.random.key(1), greedy=True, stop_ids=())
    stop = int(free.tokens_BT[0, 2])
    out = sampler.generate(params, PROMPTS, jax.random.key(1), greedy=True, stop_ids=(stop, 511))
    for i in range(3):
        hits = np.flatnonzero(free.tokens_BT[i] == stop)
        n = hits[0] + 1 if hits.size else STEPS
        assert out.lengths_B[i] == n and out.stopped_B[i] == bool(hits.size)
        np.testing.assert_array_equal(out.tokens_BT[i, :n], free.tokens_BT[i, :n])
        np.testing.assert_array_equal(out.tokens_BT[i, n:], CFG.pad_token_id)
        np.testing.assert_array_equal(out.logp_BT[i, n:], 0.0)
        np.testing.assert_array_equal(out.logp_raw_BT[i, n:], 0.0)
    assert out.lengths_B[0] == 3 and out.stopped_B[0]


def test_one_compile_per_bucket(params, sampler):
    """One compile per (prompt bucket, batch bucket, max_new_tokens); (8, 4) is already built."""
    before, key = sampler.num_compiles, jax.random.key(0)
    sampler.generate(params, PROMPTS, key, greedy=True)                               # (8, 4)
    sampler.generate(params, [[1, 2, 3]], key)                                        # (8, 1) new
    sampler.generate(params, [[4]], key, greedy=True)                                 # (8, 1)
    sampler.generate(params, [[5, 6]], key, temperature=0.5, top_p=0.8)               # (8, 1)
    assert sampler.num_compiles - before == 1
    out = sampler.generate(params, [[7]] * 5, key)  # 5 rows: chunks (8, 4) + (8, 1), both built
    assert out.tokens_BT.shape == (5, STEPS) and sampler.num_compiles - before == 1
    sampler.generate(params, [[1] * 12] * 3, key)                                     # (16, 4) new
    assert sampler.num_compiles - before == 2


def test_bad_inputs(params, sampler):
    with pytest.raises(ValueError, match="prompt_buckets"):
        sampler.generate(params, [[1] * 17], jax.random.key(0))
    with pytest.raises(ValueError, match="empty"):
        sampler.generate(params, [[1], []], jax.random.key(0))
    with pytest.raises(ValueError, match="greedy=True"):
        sampler.generate(params, [[1]], jax.random.key(0), temperature=0.0)
    with pytest.raises(ValueError, match="vocab_size"):
        sampler.generate(params, [[CFG.vocab_size]], jax.random.key(0))


class _AllLogitsPrefill(Sampler):
    """The former prefill: LM-head logits at every prompt slot, then the last one is kept."""

    def _prefill(self, params, tokens_BP, positions_BP, cache, mask_BP):
        logits_BPV, cache = lm.decode_step(params, self.cfg, tokens_BP, positions_BP, cache,
                                           mask_BP)
        return logits_BPV[:, -1], cache


def test_last_slot_prefill_equals_all_slot_prefill(params, sampler):
    reference = _AllLogitsPrefill(CFG, prompt_buckets=(8, 16), batch_buckets=(1, 2, 4),
                                  max_new_tokens=STEPS, pad_id=CFG.pad_token_id)
    for kw in (dict(greedy=True), dict(temperature=0.8)):
        want = reference.generate(params, PROMPTS, jax.random.key(7), stop_ids=(), **kw)
        got = sampler.generate(params, PROMPTS, jax.random.key(7), stop_ids=(), **kw)
        np.testing.assert_array_equal(got.tokens_BT, want.tokens_BT)
        np.testing.assert_allclose(got.logp_BT, want.logp_BT, atol=1e-6)
        np.testing.assert_allclose(got.logp_raw_BT, want.logp_raw_BT, atol=1e-6)


def test_greedy_branch_equals_the_always_sample_step():
    """sample_tokens' lax.cond (greedy: argmax + one log_softmax) returns what the reference step
    that computes both results and picks one does, greedy or sampled (same key), with top-p."""
    from benchmarks.sampler import always_sample_tokens
    from meowjax.rollout.sampler import sample_tokens

    logits_BV = jax.random.normal(jax.random.key(3), (5, 37)) * 4.0
    step = jax.jit(sample_tokens)
    reference = jax.jit(always_sample_tokens)
    for temperature, top_p, greedy in ((1.0, 1.0, True), (0.7, 1.0, True), (0.7, 1.0, False),
                                       (1.3, 0.6, False), (1.0, 0.6, True)):
        args = (logits_BV, jax.random.key(11), jnp.float32(temperature), jnp.float32(top_p),
                jnp.bool_(greedy))
        got, want = step(*args), reference(*args)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], atol=1e-6)
        np.testing.assert_allclose(got[2], want[2], atol=1e-6)
        if greedy:
            np.testing.assert_array_equal(got[0], np.argmax(np.asarray(logits_BV), -1))
            np.testing.assert_allclose(got[1], got[2], atol=0)
    # and the sampled branch really samples: another key, other tokens
    other = step(logits_BV, jax.random.key(12), jnp.float32(1.3), jnp.float32(1.0),
                 jnp.bool_(False))[0]
    first = step(logits_BV, jax.random.key(11), jnp.float32(1.3), jnp.float32(1.0),
                 jnp.bool_(False))[0]
    assert not np.array_equal(other, first)


def test_first_argmax_is_the_first_maximum_like_jnp_argmax():
    """Ties go to the first index, a NaN counts as the maximum (as in np/jnp.argmax), an all
    -inf row gives 0; the max is returned too. Then the greedy step built on it gives the same
    tokens and bit-identical log-probs as jnp.argmax + log_softmax (benchmarks' reference)."""
    from benchmarks.sampler import argmax_sample_tokens
    from meowjax.rollout.sampler import first_argmax, sample_tokens

    x_BV = np.array([[1.0, 3.0, 3.0, 2.0],
                     [np.nan, 5.0, np.nan, 1.0],
                     [0.0, 1.0, np.nan, 9.0],
                     [-np.inf, -np.inf, -np.inf, -np.inf],
                     [-np.inf, np.inf, 0.0, np.inf],
                     [-2.0, -1.0, -1.5, -1.0]], np.float32)
    token_B, max_B = jax.jit(first_argmax)(jnp.asarray(x_BV))
    np.testing.assert_array_equal(token_B, [1, 0, 2, 0, 1, 1])
    np.testing.assert_array_equal(token_B, np.argmax(x_BV, -1))
    np.testing.assert_array_equal(token_B, jnp.argmax(jnp.asarray(x_BV), -1))
    np.testing.assert_array_equal(max_B, np.max(x_BV, -1))

    logits_BV = jax.random.normal(jax.random.key(5), (6, 300)) * 3.0
    args = (jax.random.key(1), jnp.float32(1.0), jnp.float32(1.0), jnp.bool_(True))
    got, want = jax.jit(sample_tokens)(logits_BV, *args), jax.jit(argmax_sample_tokens)(
        logits_BV, *args)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(
        got[1], jax.nn.log_softmax(logits_BV)[np.arange(6), np.asarray(got[0])], atol=1e-6)


def test_feature_major_decode_equals_the_training_layout_decode(params, sampler):
    """On CPU the sampler decodes through `models.decode` by default; the `lm.decode_step`
    loop gives the same greedy tokens and log-probs (to fp32 rounding), stops included."""
    assert sampler.feature_major_decode  # the default on the CPU backend
    reference = Sampler(CFG, prompt_buckets=(8, 16), batch_buckets=(1, 2, 4),
                        max_new_tokens=STEPS, pad_id=CFG.pad_token_id, feature_major_decode=False)
    for stop_ids in ((), (int(sampler.generate(params, PROMPTS, jax.random.key(3), greedy=True,
                                               stop_ids=()).tokens_BT[0, 2]),)):
        want = reference.generate(params, PROMPTS, jax.random.key(3), greedy=True,
                                  stop_ids=stop_ids)
        got = sampler.generate(params, PROMPTS, jax.random.key(3), greedy=True, stop_ids=stop_ids)
        np.testing.assert_array_equal(got.tokens_BT, want.tokens_BT)
        np.testing.assert_array_equal(got.lengths_B, want.lengths_B)
        np.testing.assert_array_equal(got.stopped_B, want.stopped_B)
        np.testing.assert_allclose(got.logp_BT, want.logp_BT, atol=1e-5)
    assert want.stopped_B[0] and want.lengths_B[0] == 3
