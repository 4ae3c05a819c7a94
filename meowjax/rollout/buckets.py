"""Padding variable-length host records into a few fixed ``[B, L]`` shapes.

XLA compiles once per distinct input shape. Rows are right-padded to the smallest length bucket
that holds the longest row, and the row count is padded to a fixed batch size with rows whose
``row_weight`` is 0, so a run compiles once per (function, bucket) however episodes vary.
A row longer than the largest bucket is an error naming the setting to raise: never truncated.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def choose_bucket(length: int, buckets: Sequence[int], what: str = "rollout.length_buckets") -> int:
    """The smallest bucket >= length; raises naming ``what`` if none is large enough."""
    for b in sorted(buckets):
        if length <= b:
            return int(b)
    raise ValueError(f"A sequence of {length} tokens does not fit the largest bucket "
                     f"{max(buckets)}; raise {what} (or shorten max_turns / the prompt window). "
                     "meowjax never truncates sequences silently.")


def pack_rows(rows: Sequence[Mapping[str, np.ndarray]], *, length_buckets: Sequence[int],
              num_rows: int, pad_values: Mapping[str, float | int] | None = None,
              what: str = "rollout.length_buckets") -> dict[str, np.ndarray]:
    """Stacks 1-D per-row arrays into ``[num_rows, L_bucket]`` arrays, right-padded.

    Every row must have the same keys with equal lengths. Adds ``mask`` (1 on real positions) and
    ``row_weight`` (1 for real rows, 0 for padding rows). Scalar (0-d) fields become ``[num_rows]``.
    """
    if not rows:
        raise ValueError("pack_rows needs at least one row.")
    if len(rows) > num_rows:
        raise ValueError(f"{len(rows)} rows do not fit a batch of {num_rows}.")
    pad_values = dict(pad_values or {})
    keys = list(rows[0].keys())
    seq_keys = [k for k in keys if np.ndim(rows[0][k]) == 1]
    lengths = []
    for i, row in enumerate(rows):
        if list(row.keys()) != keys:
            raise ValueError(f"row {i} has keys {sorted(row)}, expected {sorted(keys)}")
        ls = {len(row[k]) for k in seq_keys}
        if len(ls) != 1:
            raise ValueError(f"row {i} has sequence fields of different lengths: "
                             f"{ {k: len(row[k]) for k in seq_keys} }")
        lengths.append(ls.pop())
    length = choose_bucket(max(lengths), length_buckets, what)
    out: dict[str, np.ndarray] = {}
    for k in keys:
        first = np.asarray(rows[0][k])
        if first.ndim == 1:
            arr = np.full((num_rows, length), pad_values.get(k, 0), dtype=first.dtype)
            for i, row in enumerate(rows):
                arr[i, :lengths[i]] = row[k]
        else:
            arr = np.full((num_rows,), pad_values.get(k, 0), dtype=first.dtype)
            for i, row in enumerate(rows):
                arr[i] = row[k]
        out[k] = arr
    mask = np.zeros((num_rows, length), np.int32)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    out["mask"] = mask
    weight = np.zeros((num_rows,), np.float32)
    weight[:len(rows)] = 1.0
    out["row_weight"] = weight
    return out


def padding_efficiency(batch: Mapping[str, np.ndarray]) -> float:
    """Fraction of the ``[B, L]`` slots that hold real tokens of real rows."""
    mask = batch["mask"] * (batch["row_weight"][:, None] > 0)
    return float(mask.sum() / mask.size)


def row_bucket(num: int, max_rows: int, min_rows: int = 4) -> int:
    """The row count a batch of ``num`` real rows is padded to: the smallest of
    ``min_rows * 2^k`` (capped at ``max_rows``) that holds them, so a shrinking batch (episodes
    finishing, a last partial minibatch) runs on a few fixed shapes instead of always ``max_rows``."""
    if num > max_rows:
        raise ValueError(f"{num} rows do not fit a batch of {max_rows}.")
    rows = min(min_rows, max_rows)
    while rows < num:
        rows = min(2 * rows, max_rows)
    return rows


def row_multiple(num: int, max_rows: int, step: int) -> int:
    """The row count a minibatch of ``num`` real rows is padded to: the smallest multiple of
    ``step`` that holds them, capped at ``max_rows`` (so only the one partial minibatch of an
    epoch, at the short end (``length_grouped_minibatches``), runs on a smaller shape)."""
    if num > max_rows:
        raise ValueError(f"{num} rows do not fit a batch of {max_rows}.")
    return min(max_rows, step * -(-num // step))


def length_grouped_minibatches(lengths: Sequence[int], size: int,
                               rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Index minibatches of at most ``size`` rows, each of similar lengths.

    Rows are shuffled (so ties break randomly), stably sorted by length and cut into
    ``m = ceil(n / size)`` chunks, full ones from the long end, so the one partial chunk (padded
    with weight-0 rows, which cost slots too) holds the shortest rows; the chunk order is
    shuffled. Every row appears exactly once. Each chunk is padded only to its own longest row's
    bucket, not to the longest row of the whole iteration.

    This cut minimises the padded slots  S = size * sum_k bucket(longest row of chunk k)  over
    every split of the sorted rows into m chunks of <= size rows: in any such split the k-th
    chunk from the top ends at sorted position >= n - (k - 1) size (the k - 1 chunks above hold
    at most (k - 1) size rows), and bucket() is non-decreasing in that position; this cut meets
    every bound with equality.
    """
    n = len(lengths)
    order = rng.permutation(n) if rng is not None else np.arange(n)
    order = order[np.argsort(np.asarray(lengths)[order], kind="stable")]
    cuts = [0] + list(range(n - size * ((n - 1) // size), n + 1, size)) if n else [0]
    chunks = [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
    if rng is not None:
        chunks = [chunks[i] for i in rng.permutation(len(chunks))]
    return chunks
