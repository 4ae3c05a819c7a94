"""Action interface 2: the LM scores the game's admissible commands (as in GLAM).

The policy over the C candidate commands of a turn is

    pi(c | prompt) = softmax_c( s_c / tau ),   s_c = sum_j log p_LM(cand_c[j] | prompt, cand_c[<j])

(``norm="mean"`` divides s_c by the candidate's token count). All candidates of a turn are scored
in ONE packed row: ``[prompt | cand_0 | cand_1 | ...]`` with a block attention mask: prompt tokens
attend causally to the prompt, candidate tokens to the prompt and causally to their own candidate
only. Each candidate's positions continue from the prompt's length, so every candidate sees
exactly the context it would see alone. The first token of every candidate is predicted from the
prompt's last position; later ones from the previous candidate token.

The chosen command's ``log pi`` feeds the same PPO / GRPO / RLOO losses as free-text tokens do
(one "token" per turn). The value of a turn is read at the prompt's last position.
"""

from __future__ import annotations

from typing import Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from meowjax.models import lm
from meowjax.models.config import ModelConfig


def pack_turn(prompt_ids: Sequence[int], cand_ids: Sequence[Sequence[int]],
              max_cands: int) -> dict[str, np.ndarray]:
    """One turn as a packed host row (1-D arrays of equal length + scalars).

    Fields: tokens, seg (0 prompt, c+1 candidate c), positions, src (index of the position whose
    logits predict this token; 0 for prompt tokens), cand (candidate index, ``max_cands`` for
    prompt tokens), num_cands, prompt_len.
    """
    if not prompt_ids:
        raise ValueError("pack_turn: empty prompt.")
    if not cand_ids:
        raise ValueError("pack_turn: a turn needs at least one candidate command.")
    if len(cand_ids) > max_cands:
        raise ValueError(f"{len(cand_ids)} admissible commands exceed policy.max_cands={max_cands};"
                         " raise policy.max_cands.")
    p = len(prompt_ids)
    tokens, seg, pos, src, cand = list(prompt_ids), [0] * p, list(range(p)), [0] * p, [max_cands] * p
    for c, ids in enumerate(cand_ids):
        if not ids:
            raise ValueError(f"candidate {c} tokenizes to nothing.")
        start = len(tokens)
        for j, t in enumerate(ids):
            tokens.append(int(t))
            seg.append(c + 1)
            pos.append(p + j)
            src.append(p - 1 if j == 0 else start + j - 1)
            cand.append(c)
    i32 = lambda x: np.asarray(x, np.int32)
    return dict(tokens=i32(tokens), seg=i32(seg), positions=i32(pos), src=i32(src), cand=i32(cand),
                num_cands=np.int32(len(cand_ids)), prompt_len=np.int32(p))


def packed_attention_mask(seg_BL: jax.Array, mask_BL: jax.Array) -> jax.Array:
    """mask[b, i, j] = j <= i and real(j) and (seg[j] == 0 or seg[j] == seg[i])."""
    chex.assert_rank([seg_BL, mask_BL], 2)
    length = seg_BL.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))[None]
    same = (seg_BL[:, None, :] == 0) | (seg_BL[:, None, :] == seg_BL[:, :, None])
    return causal & same & (mask_BL[:, None, :] > 0)


def packed_hidden(params, cfg: ModelConfig, batch: dict) -> jax.Array:
    """Final hidden states [B, L, E] of packed rows under the block mask."""
    mask_BLS = packed_attention_mask(batch["seg"], batch["mask"])
    return lm.hidden_states_masked(params, cfg, batch["tokens"], batch["positions"], mask_BLS)


ABSENT = -1e9  # score of padded (absent) candidates: exp(ABSENT - lse) == 0 exactly, but finite


def packed_token_logp(params, cfg: ModelConfig, batch: dict) -> tuple[jax.Array, jax.Array]:
    """(cand_logp_BL, next_logp_BL) from one forward pass over packed rows.

    cand_logp_BL[b, l] = log p(tok[b, l] | logits at src[b, l])  (the candidates' token scores)
    next_logp_BL[b, l] = log p(tok[b, l] | logits at l - 1)      (plain next-token LM; 0 at l = 0)
    """
    hidden_BLE = packed_hidden(params, cfg, batch)
    logits_BLV = lm.logits_from_hidden(params, cfg, hidden_BLE)
    lse_BL = jax.nn.logsumexp(logits_BLV, axis=-1)
    b_idx = jnp.arange(logits_BLV.shape[0])[:, None]
    src_BL, tok_BL = batch["src"], batch["tokens"]
    cand_logp_BL = logits_BLV[b_idx, src_BL, tok_BL] - lse_BL[b_idx, src_BL]
    prev_BL = jnp.maximum(jnp.arange(tok_BL.shape[1])[None] - 1, 0)
    next_logp_BL = logits_BLV[b_idx, prev_BL, tok_BL] - lse_BL[b_idx, prev_BL]
    next_logp_BL = jnp.where(jnp.arange(tok_BL.shape[1])[None] > 0, next_logp_BL, 0.0)
    return cand_logp_BL, next_logp_BL


def prompt_lm_mask(batch: dict) -> jax.Array:
    """1 on prompt tokens after the first (the tokens an auxiliary LM loss predicts)."""
    seg_BL = batch["seg"]
    first = jnp.arange(seg_BL.shape[1])[None] > 0
    return ((seg_BL == 0) & (batch["mask"] > 0) & first).astype(jnp.int32)


def scores_from_token_logp(cand_logp_BL: jax.Array, batch: dict, max_cands: int,
                           norm: str = "sum") -> jax.Array:
    """s_BC = sum (or mean) of each candidate's token log-probs; ABSENT for padded candidates."""
    onehot_BLC = (batch["cand"][..., None] == jnp.arange(max_cands)) & (batch["mask"][..., None] > 0)
    onehot_BLC = onehot_BLC.astype(jnp.float32)
    sum_BC = jnp.einsum("bl,blc->bc", cand_logp_BL, onehot_BLC)
    if norm == "mean":
        sum_BC = sum_BC / jnp.maximum(onehot_BLC.sum(axis=1), 1.0)
    elif norm != "sum":
        raise ValueError(f"policy.score_norm={norm!r}; use 'sum' or 'mean'.")
    present_BC = jnp.arange(max_cands)[None] < batch["num_cands"][:, None]
    return jnp.where(present_BC, sum_BC, ABSENT)


def candidate_scores(params, cfg: ModelConfig, batch: dict, max_cands: int,
                     norm: str = "sum") -> jax.Array:
    """s_BC: per-candidate log-likelihood (sum or mean over its tokens); ABSENT for padding.

    Absent candidates get a large finite negative score rather than -inf, so that
    pi log pi and its gradient stay finite (0 * -inf is NaN in the backward pass).
    """
    cand_logp_BL, _ = packed_token_logp(params, cfg, batch)
    return scores_from_token_logp(cand_logp_BL, batch, max_cands, norm)


def candidate_logp(scores_BC: jax.Array, temperature: float | jax.Array = 1.0) -> jax.Array:
    """log pi_BC = log_softmax(s / tau); absent candidates get probability 0."""
    chex.assert_rank(scores_BC, 2)
    return jax.nn.log_softmax(scores_BC / temperature, axis=-1)


def make_score_fn(cfg: ModelConfig, *, max_cands: int, norm: str):
    """jit(params, batch, temperature) -> log pi_BC, for rollouts (one compile per batch shape;
    the temperature is an argument, so training and evaluation temperatures share it)."""
    @jax.jit
    def score(params, batch, temperature):
        return candidate_logp(candidate_scores(params, cfg, batch, max_cands, norm), temperature)
    return score


def candidate_entropy(logp_BC: jax.Array) -> jax.Array:
    """H_B = -sum_c pi_c log pi_c over present candidates."""
    p = jnp.exp(logp_BC)
    return -jnp.sum(jnp.where(p > 0, p * logp_BC, 0.0), axis=-1)


def prompt_last_hidden(hidden_BLE: jax.Array, prompt_len_B: jax.Array) -> jax.Array:
    """h_BE at each row's last prompt token (where a turn's value is read)."""
    idx = jnp.maximum(prompt_len_B - 1, 0)
    return jnp.take_along_axis(hidden_BLE, idx[:, None, None], axis=1)[:, 0]
