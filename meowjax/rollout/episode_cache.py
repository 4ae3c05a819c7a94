"""KV caches kept per episode across the turns of free-text rollouts: each turn prefills only
the tokens the cache does not hold yet (the environment's reply delta), then decodes the action
into the same cache.

Re-prefilling the whole conversation every turn costs sum_t P_t ~ T^2 / 2 turn lengths of
prefill over T turns, and its prompt bucket (one compile each) climbs with t. Here turn t
prefills n_t new tokens and decodes the action over the slots filled so far:

    turn:   tokens_BL  = each row's new tokens, left-padded to a new-token bucket L
            slots        [i, i + L)  <- their keys / values, positions p_b, p_b + 1, ...
                                        (p_b = tokens of episode b already cached)
            decode       step t writes the token sampled at step t - 1 into slot i + L + t - 1
            i           <- i + L + (decode steps run - 1)

Layout: one [N, B, S, K, D] cache per group of episodes (at most the sampler's largest batch
bucket), rows = episodes, one write index i shared by the rows (`lm.KVCache.index`), a mask per
slot. The past of a row is never re-padded: slots a row leaves unused (the left padding of its
new tokens, decode steps after it stopped, the steps of a finished episode) are gaps with mask
0, and each token carries its own RoPE position, so attention over a row with gaps equals
attention over the same tokens packed. The shared index keeps the prefill and the decode step
of `rollout.sampler` unchanged (one dynamic_update_slice per layer, the feature-major CPU
decode included). Gaps cost slots: a turn uses L + steps slots of every row.

Shapes: the prefill compiles once per (batch bucket B, cache bucket S, new-token bucket L), the
decode loop once per (B, S). Relayouts (a gather, one copy of the cache) happen only when
  - the live episodes fit a smaller batch bucket (finished rows are dropped),
  - the next turn needs more than S slots (the next cache bucket; the past is copied as is),
  - the next turn would pass the largest cache bucket: the rows' real slots are moved to the
    front (compaction), which always fits, since the episode loop ends an episode before its
    tokens + the next reply + the action could pass ``max_context`` (`episodes._fits`) and the
    largest cache bucket is >= max_context + the largest new-token bucket + max_new_tokens.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax
import numpy as np

from meowjax.models import lm
from meowjax.rollout.sampler import Sampler, SampleOutput, _bucket, stop_array

DEFAULT_NEW_TOKEN_BUCKETS = (16, 32, 64, 96, 128, 192, 256)
_MIN_CACHE_BUCKET = 256


def cache_buckets_for(max_slots: int) -> tuple[int, ...]:
    """Cache lengths 256, 512, ... up to the first power of two >= ``max_slots``."""
    buckets = [_MIN_CACHE_BUCKET]
    while buckets[-1] < max_slots:
        buckets.append(2 * buckets[-1])
    return tuple(buckets)


@dataclasses.dataclass
class CacheStats:
    """Counts over the turns of one `EpisodeCaches`: relayouts by cause, slots used vs real."""

    turns: int = 0
    grows: int = 0
    shrinks: int = 0
    compactions: int = 0
    prefill_tokens: int = 0   # real new tokens prefilled
    prefill_slots: int = 0    # B x L prefill slots computed


class EpisodeCache:
    """The kept cache of one group of episodes (host bookkeeping around the device cache).

    rows[r]: the episode held by row r (None: a freed row, kept until the next shrink).
    length[e]: tokens of episode e in the cache, which is also its next position.
    """

    def __init__(self, sampler: Sampler, episode_ids: Sequence[int], *,
                 cache_buckets: Sequence[int], new_token_buckets: Sequence[int],
                 stats: CacheStats, row_id_offset: int = 0):
        self.sampler, self.stats, self.row_id_offset = sampler, stats, row_id_offset
        self.cache_buckets, self.new_token_buckets = cache_buckets, new_token_buckets
        batch = _bucket(len(episode_ids), sampler.batch_buckets)
        self.rows: list[int | None] = list(episode_ids) + [None] * (batch - len(episode_ids))
        self.length = {int(e): 0 for e in episode_ids}
        self.cache: lm.KVCache | None = None
        self.index = 0

    @property
    def slots(self) -> int:
        return 0 if self.cache is None else int(self.cache.mask_BS.shape[1])

    def _plan_slots(self, new_len: int, steps: int) -> tuple[int, bool]:
        """(cache bucket for the next turn, whether the real slots must be compacted first)."""
        if self.index + new_len + steps <= self.slots:
            return self.slots, False
        slots = _bucket(self.index + new_len + steps, self.cache_buckets)
        if slots is not None:
            return slots, False
        longest = max(self.length[e] for e in self.rows if e is not None)
        slots = _bucket(longest + new_len + steps, self.cache_buckets)
        if slots is None:
            raise ValueError(
                f"A turn needs {longest + new_len + steps} cache slots, more than the largest "
                f"cache bucket {self.cache_buckets[-1]}; raise EpisodeCaches(max_context=...).")
        return slots, True

    def _relayout(self, live: list[int], new_len: int, steps: int) -> None:
        """Frees the rows of finished episodes; shrinks the batch, grows or compacts the cache
        when the next turn needs it (at most one copy of the cache)."""
        live_set = set(live)
        self.rows = [e if e in live_set else None for e in self.rows]
        batch = _bucket(len(live), self.sampler.batch_buckets)
        slots, compact = self._plan_slots(new_len, steps)
        if self.cache is None:
            self.rows = live + [None] * (batch - len(live))
            cache = lm.init_cache(self.sampler.cfg, batch, slots, self.sampler.cache_dtype)
            shardings = self.sampler.cache_shardings(batch)
            self.cache = cache if shardings is None else jax.device_put(cache, shardings)
            return
        shrink = batch < len(self.rows)
        if not (shrink or compact or slots != self.slots):
            return
        keep, rows = list(range(len(self.rows))), self.rows
        if shrink:   # live rows first, then copies of the last one as free filler rows
            keep = [r for r, e in enumerate(self.rows) if e is not None]
            rows = [self.rows[r] for r in keep] + [None] * (batch - len(keep))
            keep += [keep[-1]] * (batch - len(keep))
        index = max(self.length[e] for e in rows if e is not None) if compact else self.index
        self.stats.grows += int(slots > self.slots and not compact)
        self.cache = self.sampler.cache_relayout_jit(
            self.cache, np.asarray(keep, np.int32), np.int32(index), slots=slots,
            compact=compact)
        self.rows, self.index = rows, index
        self.stats.shrinks += int(shrink)
        self.stats.compactions += int(compact)

    def turn(self, params: Any, feeds: dict[int, list[int]], rng: jax.Array, *, steps: int,
             scalars: tuple, stop_S: np.ndarray) -> dict[int, tuple]:
        """Prefills each live episode's new tokens, decodes its action: {episode: the five
        `SampleOutput` fields of its row}. Episodes of the group missing from ``feeds`` are
        finished and lose their row."""
        live = [e for e in self.rows if e is not None and e in feeds]
        new_len = _bucket(max(len(feeds[e]) for e in live), self.new_token_buckets)
        if new_len is None:
            raise ValueError(
                f"An episode has {max(len(feeds[e]) for e in live)} new tokens, more than the "
                f"largest new-token bucket {self.new_token_buckets[-1]}; add a larger one.")
        self._relayout(live, new_len, steps)
        batch = len(self.rows)
        tokens_BL = np.full((batch, new_len), self.sampler.pad_id, np.int32)
        mask_BL = np.zeros((batch, new_len), np.int32)
        position_B = np.zeros(batch, np.int32)
        row_ids_B = np.zeros(batch, np.int32)
        live_B = np.zeros(batch, bool)
        counts = np.zeros(batch, np.int32)
        for r, e in enumerate(self.rows):
            if e is None:
                continue
            ids = feeds[e]
            if ids:
                tokens_BL[r, new_len - len(ids):] = ids
                mask_BL[r, new_len - len(ids):] = 1
            position_B[r], live_B[r], counts[r] = self.length[e], True, len(ids)
            row_ids_B[r] = e + self.row_id_offset
        logits_BV, cache = self.sampler.cache_prefill_jit(params, self.cache, tokens_BL, mask_BL,
                                                          position_B)
        out, cache, fed_B = self.sampler.cache_decode_jit(
            params, cache, logits_BV, position_B + counts, live_B, row_ids_B, rng, *scalars,
            stop_S, max_new_tokens=steps)
        self.cache = cache
        out, fed_B, index = jax.device_get((out, fed_B, cache.index))
        self.index = int(index)
        self.stats.turns += 1
        self.stats.prefill_tokens += int(counts.sum())
        self.stats.prefill_slots += batch * new_len
        results = {}
        for r, e in enumerate(self.rows):
            if e is not None:
                self.length[e] += int(counts[r]) + int(fed_B[r])
                results[e] = tuple(x[r] for x in out)
        return results


class EpisodeCaches:
    """Kept caches for episodes 0 .. n - 1, in groups of at most the sampler's largest batch
    bucket (group g holds episodes [g M, (g + 1) M)); see the module docstring.

    `turn` replaces one `Sampler.generate` call of the episode loop: the same outputs for the
    same rows, rng and row ids (greedy: the same argmax; sampled: row b's key is
    fold_in(step key, episode id) in both paths), with each episode's prompt given as the
    tokens appended since its last turn.
    """

    def __init__(self, sampler: Sampler, num_episodes: int, *, max_context: int,
                 max_new_tokens: int, new_token_buckets: Sequence[int] | None = None,
                 cache_buckets: Sequence[int] | None = None, row_id_offset: int = 0):
        """``row_id_offset``: episode e samples with row id ``row_id_offset + e``."""
        self.sampler = sampler
        new_token_buckets = tuple(sorted(set(
            new_token_buckets or DEFAULT_NEW_TOKEN_BUCKETS + tuple(sampler.prompt_buckets))))
        new_token_buckets = tuple(b for b in new_token_buckets if b < max_context) + (
            max_context,)
        self.new_token_buckets = new_token_buckets
        self.cache_buckets = tuple(cache_buckets or cache_buckets_for(
            max_context + new_token_buckets[-1] + max_new_tokens))
        self.stats = CacheStats()
        size = sampler.batch_buckets[-1]
        self.groups = [EpisodeCache(sampler, range(a, min(a + size, num_episodes)),
                                    cache_buckets=self.cache_buckets,
                                    new_token_buckets=self.new_token_buckets, stats=self.stats,
                                    row_id_offset=row_id_offset)
                       for a in range(0, num_episodes, size)]
        self.cached = np.zeros(num_episodes, np.int64)   # tokens of each episode in its cache

    def turn(self, params: Any, episode_ids: Sequence[int], new_tokens: Sequence[list[int]],
             rng: jax.Array, *, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, greedy: bool = False, stop_ids: Sequence[int] = ()
             ) -> SampleOutput:
        """One action for each of ``episode_ids`` after appending ``new_tokens[i]`` to episode
        ``episode_ids[i]``'s cached tokens; rows of the result in that order. Episodes not
        listed are finished: their rows are freed for good."""
        feeds = {int(e): [int(t) for t in ids] for e, ids in zip(episode_ids, new_tokens)}
        if len(feeds) != len(episode_ids) or not feeds:
            raise ValueError("turn() needs distinct episode ids, at least one.")
        scalars = (np.float32(temperature), np.float32(top_p), np.bool_(greedy))
        stop_S = stop_array(stop_ids)
        results: dict[int, tuple] = {}
        for group in self.groups:
            mine = {e: feeds[e] for e in group.length if e in feeds}
            if mine:
                results.update(group.turn(params, mine, rng, steps=max_new_tokens,
                                          scalars=scalars, stop_S=stop_S))
        for group in self.groups:
            for e in feeds:
                if e in group.length:
                    self.cached[e] = group.length[e]
        fields = [np.stack([results[int(e)][k] for e in episode_ids]) for k in range(5)]
        return SampleOutput(*fields)
