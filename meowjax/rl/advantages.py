"""Advantage estimators for interleaved multi-turn token sequences.

One trajectory is one token row: observation (environment) tokens with `mask == 0`, agent tokens
with `mask == 1`, turn rewards placed at agent tokens (each turn's last token). All functions take
a batch `[B, L]` (or `[B]` for episode quantities) and are pure, jittable and shape-checked at
trace time. Arithmetic is done in at least float32.
"""
import chex
import jax
import jax.numpy as jnp
from jax import lax

from meowjax.rl.reduce import safe_divide


def _compute_dtype(*xs: chex.Array) -> jnp.dtype:
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def _check_token_inputs(name: str, *arrays_BL: chex.Array) -> None:
    chex.assert_rank(list(arrays_BL), 2, custom_message=name)
    chex.assert_equal_shape(list(arrays_BL), custom_message=name)


def _token_gae_row(
    rewards_L: chex.Array, values_L: chex.Array, mask_L: chex.Array, gamma: float, lam: float,
    bootstrap: chex.Array = 0.0,
) -> tuple[chex.Array, chex.Array]:
    """Masked GAE for one row (see `token_gae`); `bootstrap` = V after the last agent token."""
    dtype = _compute_dtype(rewards_L, values_L)
    valid_L = mask_L > 0
    r_L = jnp.where(valid_L, rewards_L, 0).astype(dtype)
    v_L = jnp.where(valid_L, values_L, 0).astype(dtype)

    def step(carry, x):
        next_value, next_adv = carry
        r_t, v_t, m_t = x
        delta = r_t + gamma * next_value - v_t
        adv = delta + gamma * lam * next_adv
        carry = (jnp.where(m_t, v_t, next_value), jnp.where(m_t, adv, next_adv))
        return carry, jnp.where(m_t, adv, 0)

    zero = jnp.zeros((), dtype)
    v_end = jnp.asarray(bootstrap, dtype)
    _, adv_L = lax.scan(step, (v_end, zero), (r_L, v_L, valid_L), reverse=True)
    returns_L = jnp.where(valid_L, adv_L + v_L, 0)
    return adv_L, returns_L


def token_gae(
    rewards_BL: chex.Array,
    values_BL: chex.Array,
    mask_BL: chex.Array,
    *,
    gamma: float,
    lam: float,
    bootstrap_B: chex.Array | None = None,
) -> tuple[chex.Array, chex.Array]:
    """Token-level GAE over agent tokens, carried across environment tokens.

    A reverse scan over `t = L-1 .. 0` with carry `(V_next, A_next)`, starting from
    `(bootstrap_b, 0)` beyond the last agent token: `bootstrap_b = 0` where the episode ended
    there (the default), the value of the state it was cut in where a turn budget truncated it.
    At an agent token (`mask_t = 1`):

        delta_t = r_t + gamma * V_next - V_t
        A_t     = delta_t + gamma * lam * A_next
        (V_next, A_next) <- (V_t, A_t)

    At an environment token (`mask_t = 0`) the carry passes through unchanged: the gap is not an
    episode end, so a turn reward bootstraps into earlier turns. Rewards and values at masked
    tokens are ignored. Outputs: `A_t` and value targets `R_t = A_t + V_t`, both exactly 0 at
    masked tokens. With an all-ones mask this is classic GAE with `V_L = 0`.

    Returns:
      `(advantages_BL, returns_BL)`.
    """
    _check_token_inputs("token_gae(rewards_BL, values_BL, mask_BL)", rewards_BL, values_BL, mask_BL)
    bootstrap_B = _bootstrap(bootstrap_B, rewards_BL)
    return jax.vmap(_token_gae_row, in_axes=(0, 0, 0, None, None, 0))(
        rewards_BL, values_BL, mask_BL, gamma, lam, bootstrap_B
    )


def _bootstrap(bootstrap_B: chex.Array | None, rewards_BL: chex.Array) -> chex.Array:
    """The per-row value after the last agent token: zeros (episodes ended) when None."""
    if bootstrap_B is None:
        return jnp.zeros(rewards_BL.shape[:1], _compute_dtype(rewards_BL))
    chex.assert_shape(bootstrap_B, rewards_BL.shape[:1])
    return bootstrap_B


def turn_ids(turn_end_BL: chex.Array) -> chex.Array:
    """Turn index of every token: the number of turn ends strictly before it (`int32 [B, L]`)."""
    chex.assert_rank(turn_end_BL, 2)
    ends_BL = (turn_end_BL > 0).astype(jnp.int32)
    return jnp.cumsum(ends_BL, axis=1) - ends_BL


def _turn_gae_row(
    rewards_L: chex.Array,
    values_L: chex.Array,
    mask_L: chex.Array,
    turn_end_L: chex.Array,
    gamma: float,
    lam: float,
    bootstrap: chex.Array = 0.0,
) -> tuple[chex.Array, chex.Array]:
    """Turn-level GAE for one row (see `turn_gae`)."""
    (length,) = rewards_L.shape
    dtype = _compute_dtype(rewards_L, values_L)
    valid_L = mask_L > 0
    end_L = valid_L & (turn_end_L > 0)
    tid_L = turn_ids(end_L[None])[0]  # in [0, L-1]
    r_K = jax.ops.segment_sum(jnp.where(valid_L, rewards_L, 0).astype(dtype), tid_L, length)
    # The turn's value is read at its first agent token: values_L[t] is the critic's value of
    # the context before token t, so there it is the value of the state the turn acts in.
    first_K = jax.ops.segment_min(jnp.where(valid_L, jnp.arange(length), length), tid_L, length)
    has_end_K = jax.ops.segment_sum(end_L.astype(jnp.int32), tid_L, length) > 0
    v_K = jnp.where(has_end_K, values_L[jnp.clip(first_K, 0, length - 1)], 0).astype(dtype)
    adv_K, ret_K = _token_gae_row(r_K, v_K, has_end_K, gamma, lam, bootstrap)
    adv_L = jnp.where(valid_L, adv_K[tid_L], 0)
    ret_L = jnp.where(valid_L, ret_K[tid_L], 0)
    return adv_L, ret_L


def turn_gae(
    rewards_BL: chex.Array,
    values_BL: chex.Array,
    mask_BL: chex.Array,
    turn_end_BL: chex.Array,
    *,
    gamma: float,
    lam: float,
    bootstrap_B: chex.Array | None = None,
) -> tuple[chex.Array, chex.Array]:
    """Turn-level GAE: one value and one reward per agent turn, advantage broadcast to its tokens.

    Turn `k` = the agent tokens after turn end `k-1` up to and including turn end `k` (a turn
    end is a token with `turn_end = 1` and `mask = 1`; `turn_end` on masked tokens is ignored).
    Per turn: `V_k` = value at its first agent token, `r_k` = sum of rewards on its agent tokens
    (the reward at its end when rewards sit at turn ends). `values_BL[t]` is the critic's value
    of the context before token `t`, so `V_k` is the value of the state turn `k` acts in, V(s_k).
    (Read at the turn's end token instead, it would have seen the action and estimate
    Q(s_k, a_k): once the critic fits, every action's advantage would be ~0.) Then over turns,
    with `A_K = 0` and `V_K = bootstrap_b` (0 by default: the episode ended; a value where it
    was truncated):

        delta_k = r_k + gamma * V_{k+1} - V_k
        A_k     = delta_k + gamma * lam * A_{k+1},     R_k = A_k + V_k

    `A_k` and `R_k` are broadcast to every agent token of turn `k`; masked tokens get 0. Agent
    tokens after the last turn end (an unfinished turn) have no value and get 0, and their
    rewards are ignored. With one agent token per turn this equals `token_gae`. A critic trained
    on these targets may use every agent token of a turn (each gets `R_k`) or only its first.

    Returns:
      `(advantages_BL, returns_BL)`.
    """
    _check_token_inputs(
        "turn_gae(rewards_BL, values_BL, mask_BL, turn_end_BL)",
        rewards_BL,
        values_BL,
        mask_BL,
        turn_end_BL,
    )
    bootstrap_B = _bootstrap(bootstrap_B, rewards_BL)
    return jax.vmap(_turn_gae_row, in_axes=(0, 0, 0, 0, None, None, 0))(
        rewards_BL, values_BL, mask_BL, turn_end_BL, gamma, lam, bootstrap_B
    )


def _check_group_inputs(
    name: str, returns_B: chex.Array, group_ids_B: chex.Array, row_weight_B: chex.Array
) -> None:
    chex.assert_rank([returns_B, group_ids_B, row_weight_B], 1, custom_message=name)
    chex.assert_equal_shape([returns_B, group_ids_B, row_weight_B], custom_message=name)
    chex.assert_type(group_ids_B, int, custom_message=f"{name}: group_ids_B must be integers")


def _group_segments(group_ids_B: chex.Array) -> chex.Array:
    """Group ids renumbered to `[0, B)` with a sized `jnp.unique` (a static segment count)."""
    (batch,) = group_ids_B.shape
    _, seg_B = jnp.unique(group_ids_B, size=batch, return_inverse=True)
    return seg_B.reshape(batch)


def _group_stats(
    returns_B: chex.Array, group_ids_B: chex.Array, row_weight_B: chex.Array
) -> tuple[chex.Array, chex.Array, chex.Array, chex.Array, chex.Array]:
    """Per row: `(valid_B, r0_B, count_B, sum_B, segment_B)`, where count and sum are over the
    valid rows (`weight > 0`) of the row's group (group ids may be any integers).
    """
    (batch,) = returns_B.shape
    dtype = _compute_dtype(returns_B)
    valid_B = row_weight_B > 0
    r0_B = jnp.where(valid_B, returns_B, 0).astype(dtype)
    seg_B = _group_segments(group_ids_B)
    count_S = jax.ops.segment_sum(valid_B.astype(dtype), seg_B, batch)
    sum_S = jax.ops.segment_sum(r0_B, seg_B, batch)
    return valid_B, r0_B, count_S[seg_B], sum_S[seg_B], seg_B


def group_normalise(
    x_N: chex.Array,
    segment_N: chex.Array,
    valid_N: chex.Array,
    *,
    num_segments: int,
    use_std: bool = True,
    eps: float = 1e-6,
) -> chex.Array:
    """Each value centred (and optionally scaled) within its segment, over the valid entries.

    With `G` valid members in segment `s` (`segment_N` in `[0, num_segments)`):

        mu_s = (1/G) sum_i x_i,   sd_s = sqrt( sum_i (x_i - mu_s)^2 / (G - 1) )
        A_i  = (x_i - mu_s) / (sd_s + eps)   if use_std,   x_i - mu_s   otherwise

    Invalid entries and segments of size 1 get 0; invalid entries never enter a statistic (their
    values may be anything, NaN included).
    """
    chex.assert_rank([x_N, segment_N, valid_N], 1)
    chex.assert_equal_shape([x_N, segment_N, valid_N])
    dtype = _compute_dtype(x_N)
    x0_N = jnp.where(valid_N, x_N, 0).astype(dtype)
    count_N = jax.ops.segment_sum(valid_N.astype(dtype), segment_N, num_segments)[segment_N]
    sum_N = jax.ops.segment_sum(x0_N, segment_N, num_segments)[segment_N]
    centered_N = jnp.where(valid_N, x0_N - safe_divide(sum_N, count_N), 0)
    adv_N = centered_N
    if use_std:
        sq_N = jax.ops.segment_sum(jnp.square(centered_N), segment_N, num_segments)[segment_N]
        adv_N = centered_N / (jnp.sqrt(safe_divide(sq_N, count_N - 1)) + eps)
    return jnp.where(valid_N & (count_N > 1), adv_N, 0)


def grpo_advantages(
    returns_B: chex.Array,
    group_ids_B: chex.Array,
    row_weight_B: chex.Array,
    *,
    use_std: bool = True,
    eps: float = 1e-6,
) -> chex.Array:
    """GRPO episode advantages: returns normalised within each group (`group_normalise`).

    Over the valid rows (`row_weight > 0`) of group `g` with `G` members:

        mu_g  = (1/G) sum_i R_i
        sd_g  = sqrt( sum_i (R_i - mu_g)^2 / (G - 1) )     (unbiased, ddof = 1, as torch.std)
        A_i   = (R_i - mu_g) / (sd_g + eps)                 if use_std
        A_i   = R_i - mu_g                                  otherwise (Dr. GRPO)

    Groups of size 1 and padded rows get advantage 0.
    """
    _check_group_inputs("grpo_advantages", returns_B, group_ids_B, row_weight_B)
    (batch,) = returns_B.shape
    return group_normalise(
        returns_B,
        _group_segments(group_ids_B),
        row_weight_B > 0,
        num_segments=batch,
        use_std=use_std,
        eps=eps,
    )


def rloo_advantages(
    returns_B: chex.Array, group_ids_B: chex.Array, row_weight_B: chex.Array
) -> chex.Array:
    """RLOO episode advantages: each return minus the mean of the other members of its group.

        A_i = R_i - (sum_{j in g} R_j - R_i) / (G - 1)

    over the valid rows (`row_weight > 0`) of group `g`. Groups of size 1 and padded rows get 0.
    """
    _check_group_inputs("rloo_advantages", returns_B, group_ids_B, row_weight_B)
    valid_B, r0_B, count_B, sum_B, _ = _group_stats(returns_B, group_ids_B, row_weight_B)
    adv_B = r0_B - safe_divide(sum_B - r0_B, count_B - 1)
    return jnp.where(valid_B & (count_B > 1), adv_B, 0)


def best_win_advantages(
    returns_B: chex.Array, won_B: chex.Array, group_ids_B: chex.Array,
    row_weight_B: chex.Array, *, best_only: bool = True, tol: float = 1e-6
) -> chex.Array:
    """Rejection-sampling fine-tuning (filtered self-imitation): 1 for the episodes to imitate,
    0 for every other:

        A_i = 1  if won_i and (not best_only or R_i >= max_{j in g, won_j} R_j - tol),  else 0

    over the valid rows (`row_weight > 0`) of group `g`. With a cost per turn the best win is
    the shortest; a group without a win imitates nothing.
    """
    _check_group_inputs("best_win_advantages", returns_B, group_ids_B, row_weight_B)
    chex.assert_equal_shape([returns_B, won_B])
    (batch,) = returns_B.shape
    dtype = _compute_dtype(returns_B)
    win_B = (row_weight_B > 0) & (won_B > 0)
    r_B = returns_B.astype(dtype)
    seg_B = _group_segments(group_ids_B)
    best_S = jax.ops.segment_max(jnp.where(win_B, r_B, -jnp.inf), seg_B, batch)
    keep_B = win_B & (r_B >= best_S[seg_B] - tol) if best_only else win_B
    return keep_B.astype(dtype)


def baseline_advantages(
    returns_B: chex.Array, baseline_B: chex.Array, row_weight_B: chex.Array
) -> chex.Array:
    """Episode advantages against a given per-row baseline (ReMax: the return of the task's
    greedy episode):

        A_i = R_i - b_i

    on the valid rows (`row_weight > 0`), 0 on padded rows.
    """
    chex.assert_rank([returns_B, baseline_B, row_weight_B], 1)
    chex.assert_equal_shape([returns_B, baseline_B, row_weight_B])
    dtype = _compute_dtype(returns_B)
    adv_B = returns_B.astype(dtype) - baseline_B.astype(dtype)
    return jnp.where(row_weight_B > 0, adv_B, 0)


def broadcast_episode_advantage(adv_B: chex.Array, mask_BL: chex.Array) -> chex.Array:
    """`A_bt = A_b` on agent tokens (`mask > 0`), 0 elsewhere."""
    chex.assert_rank([adv_B, mask_BL], [1, 2])
    chex.assert_equal_shape_prefix([adv_B, mask_BL], 1)
    return jnp.where(mask_BL > 0, adv_B[:, None], 0).astype(_compute_dtype(adv_B))


def fold_kl_into_rewards(
    rewards_BL: chex.Array, kl_BL: chex.Array, mask_BL: chex.Array, kl_coef: float
) -> chex.Array:
    """Per-token KL penalty folded into the rewards: `r'_t = r_t - kl_coef * kl_t` on agent
    tokens, 0 on masked tokens."""
    _check_token_inputs(
        "fold_kl_into_rewards(rewards_BL, kl_BL, mask_BL)", rewards_BL, kl_BL, mask_BL
    )
    valid_BL = mask_BL > 0
    dtype = _compute_dtype(rewards_BL, kl_BL)
    r_BL = jnp.where(valid_BL, rewards_BL, 0).astype(dtype)
    kl0_BL = jnp.where(valid_BL, kl_BL, 0).astype(dtype)
    return jnp.where(valid_BL, r_BL - kl_coef * kl0_BL, 0)


def episode_returns(
    rewards_BL: chex.Array,
    mask_BL: chex.Array,
    kl_BL: chex.Array | None = None,
    kl_coef: float = 0.0,
) -> chex.Array:
    """Undiscounted episode return over agent tokens, optionally KL-penalised:

        R_b = sum_t mask_bt * (r_bt - kl_coef * kl_bt)

    Rewards on masked tokens are ignored (turn rewards sit on agent turn-end tokens).
    """
    _check_token_inputs("episode_returns(rewards_BL, mask_BL)", rewards_BL, mask_BL)
    if kl_BL is None:
        kl_BL = jnp.zeros(rewards_BL.shape, _compute_dtype(rewards_BL))
    return jnp.sum(fold_kl_into_rewards(rewards_BL, kl_BL, mask_BL, kl_coef), axis=1)


def discounted_episode_returns(
    rewards_BL: chex.Array, mask_BL: chex.Array, turn_end_BL: chex.Array, *, gamma: float
) -> chex.Array:
    """Episode return discounted over turns (not tokens):

        G_b = sum_t mask_bt * gamma^k(t) * r_bt,   k(t) = turn index of token t (`turn_ids`)

    i.e. `sum_k gamma^k r_k` with `r_k` the rewards of turn `k`'s agent tokens. Tokens after the
    last turn end count as one more turn. With `gamma = 1` this is `episode_returns`.
    """
    _check_token_inputs(
        "discounted_episode_returns(rewards_BL, mask_BL, turn_end_BL)",
        rewards_BL,
        mask_BL,
        turn_end_BL,
    )
    dtype = _compute_dtype(rewards_BL)
    discount_BL = jnp.power(jnp.asarray(gamma, dtype), turn_ids((mask_BL > 0) & (turn_end_BL > 0)))
    return jnp.sum(jnp.where(mask_BL > 0, rewards_BL.astype(dtype) * discount_BL, 0), axis=1)
