"""Jitted prefill + on-device decode loop with a preallocated KV cache.

One `generate` call = one device call per batch chunk and one host transfer of its outputs:
    prefill:   logits_0 = LM(prompt)[last slot] through the cache (prompts left-padded to a
               bucket, so the last slot is every row's last token; the head runs on it only)
    decode:    for t < T (lax.while_loop, exits early once every row stopped; on CPU each step
               runs in the feature-major layout of `models.decode`, its weights transposed once
               per call):
                 token_t ~ top_p(softmax(logits_t / temperature))   (argmax when greedy)
                 logp_t     = log_softmax(logits_t / temperature)[token_t]   (top-p not included)
                 logp_raw_t = log_softmax(logits_t)[token_t]
                 logits_{t+1} = LM(token_t) through the cache
A row that emitted a stop id keeps emitting `pad_id` with log-probs 0 (and its later cache
slots are masked). Row b's draw at step t uses fold_in(key_t, row_id_b), so it does not depend
on the other rows of its batch. The decode loop (`Sampler.decode_loop`) is shared with the
per-episode cache of `rollout.episode_cache`, which prefills only each turn's new tokens.
Shapes are bucketed: one compile per (prompt bucket, batch bucket, max_new_tokens).
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Any, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from meowjax.models import decode, lm
from meowjax.models.config import ModelConfig

DEFAULT_PROMPT_BUCKETS = (64, 128, 256, 512, 1024, 2048)
DEFAULT_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
_MIN_STOP_SLOTS = 8


@dataclasses.dataclass
class SampleOutput:
    """Host numpy results of `Sampler.generate` (B = number of prompts, T = max_new_tokens).

    Attributes:
      tokens_BT: int32 sampled ids; after a row stops it holds pad ids.
      logp_BT: float32 log_softmax(logits / temperature)[token] (temperature 1 when greedy);
        0 after the stop.
      logp_raw_BT: float32 log_softmax(logits)[token]; 0 after the stop.
      lengths_B: int32 generated tokens per row, the stop token included.
      stopped_B: bool, the row emitted a stop id (else it ran out of max_new_tokens).
    """

    tokens_BT: np.ndarray
    logp_BT: np.ndarray
    logp_raw_BT: np.ndarray
    lengths_B: np.ndarray
    stopped_B: np.ndarray


def _top_p_filter(logp_V: jax.Array, top_p: jax.Array) -> jax.Array:
    """Keeps the smallest set of most likely tokens whose mass reaches top_p; others -> -inf."""
    sorted_V = jnp.sort(logp_V, axis=-1)[..., ::-1]
    probs_V = jnp.exp(sorted_V)
    keep_V = (jnp.cumsum(probs_V, axis=-1) - probs_V) < top_p  # the first is always kept
    num_keep = jnp.sum(keep_V, axis=-1, keepdims=True)
    threshold = jnp.take_along_axis(sorted_V, num_keep - 1, axis=-1)
    return jnp.where(logp_V >= threshold, logp_V, -jnp.inf)


def first_argmax(x_BV: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(token_B, max_B): ``jnp.argmax(x, -1)`` (the first maximum; a NaN counts as the maximum,
    as in ``jnp.argmax``) and the row maximum, from two single-output reductions

        m = max_v x_v,   token = min {v : x_v = m or x_v is NaN}

    instead of ``jnp.argmax``'s one variadic (value, index) reduction, which took 7% of the tiny
    sampler's op time on XLA:CPU (`benchmarks/sampler.py --argmax_compare`)."""
    chex.assert_rank(x_BV, 2)
    max_B1 = jnp.max(x_BV, axis=-1, keepdims=True)
    iota_BV = jax.lax.broadcasted_iota(jnp.int32, x_BV.shape, 1)
    hit_BV = (x_BV == max_B1) | jnp.isnan(x_BV)
    return jnp.min(jnp.where(hit_BV, iota_BV, x_BV.shape[-1]), axis=-1), max_B1[:, 0]


def categorical_rows(rng: jax.Array, logits_BV: jax.Array) -> jax.Array:
    """token_B ~ softmax(logits_BV) per row. ``rng``: one key for the batch, or one key per row
    (leading dim B): row b's draw then depends on its own key only, not on which other rows share
    its batch or where it sits in it (what lets a cached and a re-prefilled rollout, whose
    batches hold different rows, draw the same tokens)."""
    typed = jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key)
    if rng.ndim == (0 if typed else 1):   # one key (a typed key, or a raw uint32[2] one)
        return jax.random.categorical(rng, logits_BV, axis=-1).astype(jnp.int32)
    chex.assert_equal(rng.shape[0], logits_BV.shape[0])
    return jax.vmap(jax.random.categorical)(rng, logits_BV).astype(jnp.int32)


def row_keys(key: jax.Array, row_ids_B: jax.Array) -> jax.Array:
    """One key per row: key_b = fold_in(key, row_ids_B[b])."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, row_ids_B)


def sample_tokens(
    logits_BV: jax.Array, rng: jax.Array, temperature: jax.Array, top_p: jax.Array,
    greedy: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One sampling step: (token_B, logp_B, logp_raw_B); see the module docstring.

    ``greedy`` (a traced bool) selects one of two branches of a ``lax.cond``, so a greedy step
    pays for one argmax and one log_softmax over [B, V] only: no temperature-scaled
    log_softmax, top-p sort or Gumbel noise of B x V random numbers (what the sampled branch
    needs; 14% of a SmolLM2-135M decode step on CPU, ``benchmarks/sampler.py
    --greedy_compare``). ``rng``: one key, or one per row (`categorical_rows`).
    Greedy: token = argmax(logits) (`first_argmax`), and
    logp = logp_raw = logits[token] - logsumexp(logits) = -log sum_v exp(logits_v - max), as
    the target is the max (temperature 1).
    """
    chex.assert_rank(logits_BV, 2)
    logits_BV = logits_BV.astype(jnp.float32)
    pick = lambda x_BV, token_B: jnp.take_along_axis(x_BV, token_B[:, None], axis=-1)[:, 0]

    def greedy_step(logits_BV):
        token_B, max_B = first_argmax(logits_BV)
        logp_B = -jnp.log(jnp.sum(jnp.exp(logits_BV - max_B[:, None]), axis=-1))
        return token_B, logp_B, logp_B

    def sampled_step(logits_BV):
        logp_BV = jax.nn.log_softmax(logits_BV / temperature, axis=-1)
        logp_raw_BV = jax.nn.log_softmax(logits_BV, axis=-1)
        filtered_BV = jax.lax.cond(
            top_p < 1.0, lambda x: jax.vmap(_top_p_filter, (0, None))(x, top_p), lambda x: x,
            logp_BV)
        token_B = categorical_rows(rng, filtered_BV)
        return token_B, pick(logp_BV, token_B), pick(logp_raw_BV, token_B)

    return jax.lax.cond(greedy, greedy_step, sampled_step, logits_BV)


def stop_array(stop_ids: Sequence[int]) -> np.ndarray:
    """Stop ids padded with -1 to at least _MIN_STOP_SLOTS entries (a few fixed shapes)."""
    stop = np.full(max(_MIN_STOP_SLOTS, len(stop_ids)), -1, np.int32)
    stop[: len(stop_ids)] = list(stop_ids)
    return stop


def _relayout_cache(cache: lm.KVCache, rows_R: jax.Array, index: jax.Array, *, slots: int,
                    compact: bool) -> lm.KVCache:
    """The cache with rows ``rows_R`` (in that order) and ``slots`` slots, written at ``index``.

    compact=False keeps each slot where it is (``slots`` >= the old index; new slots empty).
    compact=True moves each row's real slots, in order, to the front (a stable sort of its
    slots on ``mask == 0``) and drops the gaps: the caller sets ``index`` to the longest row.
    Real slots keep their keys and values (RoPE is applied before caching, so moving a slot
    does not change what it contributes; attention only reads masks, not slot numbers)."""
    k, v, mask_BS = cache.k_NBSKD[:, rows_R], cache.v_NBSKD[:, rows_R], cache.mask_BS[rows_R]
    if compact:
        order_BS = jnp.argsort(1 - mask_BS, axis=-1, stable=True)
        take = lambda x: jnp.take_along_axis(x, order_BS[None, :, :, None, None], axis=2)
        k, v = take(k), take(v)
        mask_BS = jnp.take_along_axis(mask_BS, order_BS, axis=-1)
    old = mask_BS.shape[1]
    if slots <= old:
        k, v, mask_BS = k[:, :, :slots], v[:, :, :slots], mask_BS[:, :slots]
    else:
        pad = lambda x: jnp.pad(x, [(0, 0)] * 2 + [(0, slots - old)] + [(0, 0)] * (x.ndim - 3))
        k, v = pad(k), pad(v)
        mask_BS = jnp.pad(mask_BS, [(0, 0), (0, slots - old)])
    return lm.KVCache(k_NBSKD=k, v_NBSKD=v, mask_BS=mask_BS, index=index.astype(jnp.int32))


def _bucket(size: int, buckets: Sequence[int]) -> int | None:
    i = bisect.bisect_left(buckets, size)
    return buckets[i] if i < len(buckets) else None


class Sampler:
    """Batched autoregressive sampling for one model config; see the module docstring.

    Args:
      cfg: the model config (static for all calls).
      prompt_buckets: allowed padded prompt lengths (sorted). Longer prompts raise.
      batch_buckets: allowed padded batch sizes; more prompts than the largest bucket are
        processed in chunks of that size.
      max_new_tokens: default number of decode steps T.
      pad_id: id emitted after a stop and used to pad prompts (default cfg.pad_token_id, else 0).
      cache_dtype: KV-cache dtype (default cfg.dtype).
      feature_major_decode: decode steps through `models.decode.decode_token` (weights as
        [out, in], activations as [E, B]; transposed once per call) instead of
        `lm.decode_step`. None (default): on when JAX's backend is the CPU, where XLA runs the
        skinny decode products twice as fast in that form (`benchmarks/sampler.py
        --decode_compare`); accelerators keep the training layout (no second copy of the
        weights in device memory). Costs: a transposed copy of the weights during each call,
        and a longer compile (its layers are unrolled: SmolLM2-135M's generate compiles in
        about 15 s instead of 4 on the dev VM).
      mesh, row_axes: data-parallel rows: the KV cache's row dim is split over the mesh axes
        ``row_axes`` (e.g. ("data", "fsdp")) when the batch bucket divides their product, else
        replicated; the weights keep whatever sharding they come with. None: no constraint.
    """

    # One sampling step (a class attribute so a benchmark can time another step in its place).
    sample_fn = staticmethod(sample_tokens)

    def __init__(
        self, cfg: ModelConfig, *, prompt_buckets: Sequence[int] = DEFAULT_PROMPT_BUCKETS,
        batch_buckets: Sequence[int] = DEFAULT_BATCH_BUCKETS, max_new_tokens: int = 256,
        pad_id: int | None = None, cache_dtype: Any = None,
        feature_major_decode: bool | None = None, mesh: jax.sharding.Mesh | None = None,
        row_axes: Sequence[str] = (),
    ):
        if not prompt_buckets or not batch_buckets:
            raise ValueError("Sampler needs at least one prompt bucket and one batch bucket.")
        self.cfg = cfg
        self.prompt_buckets = tuple(sorted(prompt_buckets))
        self.batch_buckets = tuple(sorted(batch_buckets))
        self.max_new_tokens = max_new_tokens
        self.pad_id = pad_id if pad_id is not None else max(cfg.pad_token_id, 0)
        self.cache_dtype = cache_dtype
        if feature_major_decode is None:
            feature_major_decode = jax.default_backend() == "cpu"
        self.feature_major_decode = bool(feature_major_decode)
        self.mesh, self.row_axes = mesh, tuple(row_axes)
        self.num_compiles = 0
        self._generate_jit = jax.jit(self._generate_device, static_argnames=("max_new_tokens",))
        # Programs of the per-episode cache (`rollout.episode_cache`), counted per kind.
        self.cache_compiles = {"prefill": 0, "decode": 0, "relayout": 0}
        self.cache_prefill_jit = jax.jit(self._cache_prefill_device, donate_argnums=(1,))
        self.cache_decode_jit = jax.jit(self._cache_decode_device, donate_argnums=(1,),
                                        static_argnames=("max_new_tokens",))
        self.cache_relayout_jit = jax.jit(self._cache_relayout_device,
                                          static_argnames=("slots", "compact"))

    def cache_shardings(self, batch: int) -> lm.KVCache | None:
        """Shardings of a [N, B, S, K, D] cache with rows split over ``row_axes`` (None when no
        mesh; rows replicated when ``batch`` does not divide over them)."""
        if self.mesh is None:
            return None
        shards = int(np.prod([self.mesh.shape[a] for a in self.row_axes]))
        rows = self.row_axes if self.row_axes and batch % shards == 0 else None
        named = lambda *spec: jax.sharding.NamedSharding(self.mesh,
                                                         jax.sharding.PartitionSpec(*spec))
        return lm.KVCache(k_NBSKD=named(None, rows), v_NBSKD=named(None, rows),
                          mask_BS=named(rows), index=named())

    def constrain_cache(self, cache: lm.KVCache) -> lm.KVCache:
        """``cache`` under `cache_shardings` (inside jit; the identity without a mesh)."""
        shardings = self.cache_shardings(cache.mask_BS.shape[0])
        return cache if shardings is None else jax.lax.with_sharding_constraint(cache, shardings)

    def _prefill(self, params, tokens_BP, positions_BP, cache, mask_BP):
        """(logits_BV at the last prompt slot, cache) after writing the prompts into the cache.

        Prompts are left-padded, so slot P - 1 is every row's last real token; the LM head runs
        on that slot only ([B, E] @ [E, V] instead of [B, P, E] @ [E, V]).
        """
        hidden_BPE, cache = lm.decode_hidden(params, self.cfg, tokens_BP, positions_BP, cache,
                                             mask_BP)
        return lm.logits_from_hidden(params, self.cfg, hidden_BPE[:, -1:])[:, 0], cache

    def _generate_device(self, params, tokens_BP, mask_BP, row_ids_B, live_B, rng, temperature,
                         top_p, greedy, stop_ids_S, *, max_new_tokens: int):
        """The jitted body: prefill, then `decode_loop`. Counts its traces."""
        self.num_compiles += 1
        batch, prompt_len = tokens_BP.shape
        positions_BP = lm.positions_from_mask(mask_BP)
        cache = self.constrain_cache(
            lm.init_cache(self.cfg, batch, prompt_len + max_new_tokens, self.cache_dtype))
        logits_BV, cache = self._prefill(params, tokens_BP, positions_BP, cache, mask_BP)
        next_position_B = jnp.sum(mask_BP, axis=-1).astype(jnp.int32)
        out, _, _ = self.decode_loop(params, cache, logits_BV, next_position_B, ~live_B,
                                     row_ids_B, rng, temperature, top_p, greedy, stop_ids_S,
                                     max_new_tokens=max_new_tokens)
        return out

    def decode_loop(self, params, cache, logits_BV, position_B, done_B, row_ids_B, rng,
                    temperature, top_p, greedy, stop_ids_S, *, max_new_tokens: int):
        """Samples up to ``max_new_tokens`` tokens per row from ``logits_BV`` (the prefill's)
        onward, through ``cache``: returns ((tokens_BT, logp_BT, logp_raw_BT, lengths_B,
        stopped_B), cache, fed_B).

        Step t draws with key_t (``rng, key_t = split(rng)`` per step) folded with the row id
        (`row_keys`), so a row's tokens depend on its id, not on its batch. Rows with
        ``done_B`` set start finished. Token t is written into the cache (at ``position_B + t``)
        by step t + 1, with mask 1 only while its row is live: after the loop the cache holds a
        row's first ``fed_B`` sampled tokens as real slots (``fed_B`` is ``lengths_B`` or one
        less: the loop stops before writing the last token of the rows that finished last).
        """
        cfg = self.cfg
        batch = logits_BV.shape[0]
        chex.assert_shape([position_B, done_B, row_ids_B], (batch,))
        sample = functools.partial(
            self.sample_fn, temperature=temperature, top_p=top_p, greedy=greedy
        )

        def record(state, step, logits_BV, key):
            token_B, logp_B, logp_raw_B = sample(logits_BV, row_keys(key, row_ids_B))
            done_B = state["done_B"]
            token_B = jnp.where(done_B, self.pad_id, token_B)
            zero = jnp.zeros_like(logp_B)
            hit_B = jnp.isin(token_B, stop_ids_S) & ~done_B
            put = lambda buf, x: jax.lax.dynamic_update_slice_in_dim(buf, x[:, None], step, 1)
            return dict(
                state,
                tokens_BT=put(state["tokens_BT"], token_B),
                logp_BT=put(state["logp_BT"], jnp.where(done_B, zero, logp_B)),
                logp_raw_BT=put(state["logp_raw_BT"], jnp.where(done_B, zero, logp_raw_B)),
                lengths_B=state["lengths_B"] + (~done_B).astype(jnp.int32),
                stopped_B=state["stopped_B"] | hit_B,
                done_B=done_B | hit_B,
                last_B=token_B,
                last_real_B=~done_B,
            )

        shape_BT = (batch, max_new_tokens)
        state = dict(
            tokens_BT=jnp.full(shape_BT, self.pad_id, jnp.int32),
            logp_BT=jnp.zeros(shape_BT, jnp.float32),
            logp_raw_BT=jnp.zeros(shape_BT, jnp.float32),
            lengths_B=jnp.zeros((batch,), jnp.int32),
            stopped_B=jnp.zeros((batch,), bool),
            done_B=done_B,
            last_B=jnp.zeros((batch,), jnp.int32),
            last_real_B=jnp.zeros((batch,), bool),
        )
        rng, key = jax.random.split(rng)
        state = record(state, 0, logits_BV, key)

        def cond(carry):
            step, state, _, _, _, _ = carry
            return (step < max_new_tokens) & ~jnp.all(state["done_B"])

        if self.feature_major_decode:
            dparams = decode.decode_params(params, cfg)
            decode_fn = lambda tokens_B, position_B, cache, mask_B: decode.decode_token(
                dparams, cfg, tokens_B, position_B, cache, mask_B)
        else:
            def decode_fn(tokens_B, position_B, cache, mask_B):
                logits_B1V, cache = lm.decode_step(params, cfg, tokens_B[:, None],
                                                   position_B[:, None], cache, mask_B[:, None])
                return logits_B1V[:, 0], cache

        def body(carry):
            step, state, cache, position_B, fed_B, rng = carry
            real_B = state["last_real_B"].astype(jnp.int32)
            logits_BV, cache = decode_fn(state["last_B"], position_B, cache, real_B)
            rng, key = jax.random.split(rng)
            state = record(state, step, logits_BV, key)
            return step + 1, state, cache, position_B + real_B, fed_B + real_B, rng

        carry = (jnp.ones((), jnp.int32), state, cache, position_B.astype(jnp.int32),
                 jnp.zeros((batch,), jnp.int32), rng)
        _, state, cache, _, fed_B, _ = jax.lax.while_loop(cond, body, carry)
        out = (state["tokens_BT"], state["logp_BT"], state["logp_raw_BT"], state["lengths_B"],
               state["stopped_B"])
        return out, cache, fed_B

    def _cache_prefill_device(self, params, cache, tokens_BL, mask_BL, position_B):
        """Writes each row's new tokens (left-padded to L) into slots [index, index + L) of a
        kept cache at positions position_B, position_B + 1, ...; returns (logits_BV at the last
        slot, cache). One compile per (batch bucket, cache bucket, new-token bucket)."""
        self.cache_compiles["prefill"] += 1
        chex.assert_equal_shape([tokens_BL, mask_BL])
        chex.assert_shape(position_B, tokens_BL.shape[:1])
        positions_BL = position_B[:, None] + lm.positions_from_mask(mask_BL)
        logits_BV, cache = self._prefill(params, tokens_BL, positions_BL,
                                         self.constrain_cache(cache), mask_BL)
        return logits_BV, self.constrain_cache(cache)

    def _cache_relayout_device(self, cache, rows_R, index, *, slots: int, compact: bool):
        """`_relayout_cache`, counted."""
        self.cache_compiles["relayout"] += 1
        return self.constrain_cache(_relayout_cache(cache, rows_R, index, slots=slots,
                                                    compact=compact))

    def _cache_decode_device(self, params, cache, logits_BV, position_B, live_B, row_ids_B, rng,
                             temperature, top_p, greedy, stop_ids_S, *, max_new_tokens: int):
        """`decode_loop` on a kept cache; rows without ``live_B`` start finished. Returns
        (outputs, cache, fed_B). One compile per (batch bucket, cache bucket)."""
        self.cache_compiles["decode"] += 1
        out, cache, fed_B = self.decode_loop(
            params, self.constrain_cache(cache), logits_BV, position_B, ~live_B, row_ids_B, rng,
            temperature, top_p, greedy, stop_ids_S, max_new_tokens=max_new_tokens)
        return out, self.constrain_cache(cache), fed_B

    def _pad_prompts(self, prompts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Prompts left-padded to (batch bucket, prompt bucket): (tokens_BP, mask_BP)."""
        longest = max(len(p) for p in prompts)
        prompt_len = _bucket(longest, self.prompt_buckets)
        if prompt_len is None:
            raise ValueError(
                f"A prompt has {longest} tokens, more than the largest prompt bucket "
                f"{self.prompt_buckets[-1]}; add a larger bucket to Sampler(prompt_buckets=...) "
                "(prompts are never truncated)."
            )
        batch = _bucket(len(prompts), self.batch_buckets)
        tokens = np.full((batch, prompt_len), self.pad_id, np.int32)
        mask = np.zeros((batch, prompt_len), np.int32)
        mask[len(prompts):, -1] = 1  # padded rows: one real pad token, discarded afterwards
        for row, prompt in enumerate(prompts):
            if prompt:
                tokens[row, prompt_len - len(prompt):] = prompt
                mask[row, prompt_len - len(prompt):] = 1
        return tokens, mask

    def _validate(self, prompts, temperature, top_p) -> None:
        if not prompts:
            raise ValueError("generate() needs at least one prompt.")
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError(f"Prompt {i} is empty; every prompt needs at least one token.")
            lo, hi = min(prompt), max(prompt)
            if lo < 0 or hi >= self.cfg.vocab_size:
                raise ValueError(
                    f"Prompt {i} has token ids outside [0, vocab_size={self.cfg.vocab_size})."
                )
        if not temperature > 0:
            raise ValueError(f"temperature={temperature} must be > 0; use greedy=True for argmax.")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p} must be in (0, 1].")

    def generate(
        self, params: lm.Params, prompts: list[list[int]], rng: jax.Array, *,
        max_new_tokens: int | None = None, temperature: float = 1.0, top_p: float = 1.0,
        greedy: bool = False, stop_ids: Sequence[int] | None = None,
        row_ids: Sequence[int] | None = None,
    ) -> SampleOutput:
        """Samples up to `max_new_tokens` tokens after each prompt; see `SampleOutput`.

        stop_ids defaults to (cfg.eos_token_id,) when the config knows one. row_ids (default
        0, 1, ...): one id per prompt, the row's key is ``fold_in(step key, id)`` (`decode_loop`);
        the same id and ``rng`` draw the same tokens whatever the other rows are.
        """
        prompts = [list(map(int, p)) for p in prompts]
        self._validate(prompts, temperature, top_p)
        steps = self.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
        if steps < 1:
            raise ValueError(f"max_new_tokens={steps} must be >= 1.")
        if stop_ids is None:
            stop_ids = (self.cfg.eos_token_id,) if self.cfg.eos_token_id >= 0 else ()
        stop = stop_array(stop_ids)
        ids = np.arange(len(prompts)) if row_ids is None else np.asarray(row_ids, np.int64)
        if ids.shape != (len(prompts),):
            raise ValueError(f"row_ids has {ids.size} entries for {len(prompts)} prompts.")
        scalars = (np.float32(temperature), np.float32(top_p), np.bool_(greedy))
        chunk = self.batch_buckets[-1]
        outputs = []
        for start in range(0, len(prompts), chunk):
            rows = prompts[start:start + chunk]
            tokens, mask = self._pad_prompts(rows)
            row_ids_B = np.zeros(tokens.shape[0], np.int32)
            row_ids_B[:len(rows)] = ids[start:start + chunk]
            live_B = np.arange(tokens.shape[0]) < len(rows)
            out = self._generate_jit(params, tokens, mask, row_ids_B, live_B, rng, *scalars, stop,
                                     max_new_tokens=steps)
            outputs.append([x[: len(rows)] for x in jax.device_get(out)])
        fields = [np.concatenate(parts) for parts in zip(*outputs)]
        return SampleOutput(*fields)
