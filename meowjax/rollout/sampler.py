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
A row that emitted a stop id keeps emitting `pad_id` with log-probs 0.
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


def sample_tokens(
    logits_BV: jax.Array, rng: jax.Array, temperature: jax.Array, top_p: jax.Array,
    greedy: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One sampling step: (token_B, logp_B, logp_raw_B); see the module docstring.

    ``greedy`` (a traced bool) selects one of two branches of a ``lax.cond``, so a greedy step
    pays for one argmax and one log_softmax over [B, V] only: no temperature-scaled
    log_softmax, top-p sort or Gumbel noise of B x V random numbers (what the sampled branch
    needs; 14% of a SmolLM2-135M decode step on CPU, ``benchmarks/sampler.py
    --greedy_compare``). Greedy: token = argmax(logits) (`first_argmax`), and
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
        token_B = jax.random.categorical(rng, filtered_BV, axis=-1).astype(jnp.int32)
        return token_B, pick(logp_BV, token_B), pick(logp_raw_BV, token_B)

    return jax.lax.cond(greedy, greedy_step, sampled_step, logits_BV)


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
    """

    # One sampling step (a class attribute so a benchmark can time another step in its place).
    sample_fn = staticmethod(sample_tokens)

    def __init__(
        self, cfg: ModelConfig, *, prompt_buckets: Sequence[int] = DEFAULT_PROMPT_BUCKETS,
        batch_buckets: Sequence[int] = DEFAULT_BATCH_BUCKETS, max_new_tokens: int = 256,
        pad_id: int | None = None, cache_dtype: Any = None,
        feature_major_decode: bool | None = None,
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
        self.num_compiles = 0
        self._generate_jit = jax.jit(self._generate_device, static_argnames=("max_new_tokens",))

    def _prefill(self, params, tokens_BP, positions_BP, cache, mask_BP):
        """(logits_BV at the last prompt slot, cache) after writing the prompts into the cache.

        Prompts are left-padded, so slot P - 1 is every row's last real token; the LM head runs
        on that slot only ([B, E] @ [E, V] instead of [B, P, E] @ [E, V]).
        """
        hidden_BPE, cache = lm.decode_hidden(params, self.cfg, tokens_BP, positions_BP, cache,
                                             mask_BP)
        return lm.logits_from_hidden(params, self.cfg, hidden_BPE[:, -1:])[:, 0], cache

    def _generate_device(self, params, tokens_BP, mask_BP, rng, temperature, top_p, greedy,
                         stop_ids_S, *, max_new_tokens: int):
        """The jitted body: prefill, then a while_loop of decode steps. Counts its traces."""
        self.num_compiles += 1
        cfg = self.cfg
        batch, prompt_len = tokens_BP.shape
        positions_BP = lm.positions_from_mask(mask_BP)
        cache = lm.init_cache(cfg, batch, prompt_len + max_new_tokens, self.cache_dtype)
        logits_BV, cache = self._prefill(params, tokens_BP, positions_BP, cache, mask_BP)
        sample = functools.partial(
            self.sample_fn, temperature=temperature, top_p=top_p, greedy=greedy
        )

        def record(state, step, logits_BV, key):
            token_B, logp_B, logp_raw_B = sample(logits_BV, key)
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
            )

        shape_BT = (batch, max_new_tokens)
        state = dict(
            tokens_BT=jnp.full(shape_BT, self.pad_id, jnp.int32),
            logp_BT=jnp.zeros(shape_BT, jnp.float32),
            logp_raw_BT=jnp.zeros(shape_BT, jnp.float32),
            lengths_B=jnp.zeros((batch,), jnp.int32),
            stopped_B=jnp.zeros((batch,), bool),
            done_B=jnp.zeros((batch,), bool),
            last_B=jnp.zeros((batch,), jnp.int32),
        )
        rng, key = jax.random.split(rng)
        state = record(state, 0, logits_BV, key)

        def cond(carry):
            step, state, _, _, _ = carry
            return (step < max_new_tokens) & ~jnp.all(state["done_B"])

        if self.feature_major_decode:
            dparams = decode.decode_params(params, cfg)
            decode_fn = lambda tokens_B, position_B, cache: decode.decode_token(
                dparams, cfg, tokens_B, position_B, cache)
        else:
            def decode_fn(tokens_B, position_B, cache):
                logits_B1V, cache = lm.decode_step(params, cfg, tokens_B[:, None],
                                                   position_B[:, None], cache)
                return logits_B1V[:, 0], cache

        def body(carry):
            step, state, cache, position_B, rng = carry
            logits_BV, cache = decode_fn(state["last_B"], position_B, cache)
            rng, key = jax.random.split(rng)
            state = record(state, step, logits_BV, key)
            return step + 1, state, cache, position_B + 1, rng

        next_position_B = jnp.sum(mask_BP, axis=-1).astype(jnp.int32)
        carry = (jnp.ones((), jnp.int32), state, cache, next_position_B, rng)
        _, state, _, _, _ = jax.lax.while_loop(cond, body, carry)
        return (state["tokens_BT"], state["logp_BT"], state["logp_raw_BT"], state["lengths_B"],
                state["stopped_B"])

    def _pad_prompts(self, prompts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
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
    ) -> SampleOutput:
        """Samples up to `max_new_tokens` tokens after each prompt; see `SampleOutput`.

        stop_ids defaults to (cfg.eos_token_id,) when the config knows one.
        """
        prompts = [list(map(int, p)) for p in prompts]
        self._validate(prompts, temperature, top_p)
        steps = self.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
        if steps < 1:
            raise ValueError(f"max_new_tokens={steps} must be >= 1.")
        if stop_ids is None:
            stop_ids = (self.cfg.eos_token_id,) if self.cfg.eos_token_id >= 0 else ()
        stop = np.full(max(_MIN_STOP_SLOTS, len(stop_ids)), -1, np.int32)
        stop[: len(stop_ids)] = list(stop_ids)
        scalars = (np.float32(temperature), np.float32(top_p), np.bool_(greedy))
        chunk = self.batch_buckets[-1]
        outputs = []
        for start in range(0, len(prompts), chunk):
            rows = prompts[start:start + chunk]
            tokens, mask = self._pad_prompts(rows)
            key = jax.random.fold_in(rng, start // chunk)
            out = self._generate_jit(params, tokens, mask, key, *scalars, stop,
                                     max_new_tokens=steps)
            outputs.append([x[: len(rows)] for x in jax.device_get(out)])
        fields = [np.concatenate(parts) for parts in zip(*outputs)]
        return SampleOutput(*fields)
