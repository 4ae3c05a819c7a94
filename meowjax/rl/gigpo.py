"""GiGPO: Group-in-Group Policy Optimization (Feng et al. 2025), critic-free, two-level credit.

Episode groups as in GRPO (the rollouts of one task), plus *step groups*: the turns, over all
rollouts of one episode group, that act in the same observation (an "anchor state", identified by
its hash `state_key`). Turns of one step group are compared on their discounted return-to-go, so
a turn that leads to the goal sooner from the same state earns more than one that loops.

Works on `[B, X]` rows where X are tokens (free text: several agent tokens per turn, observation
gaps with `mask = 0`) or turns (scoring: every real position is a turn end).
"""
import chex
import jax
import jax.numpy as jnp
from jax import lax

from meowjax.rl import advantages


def _check_token_inputs(*arrays_BL: chex.Array) -> None:
    chex.assert_rank(list(arrays_BL), 2)
    chex.assert_equal_shape(list(arrays_BL))


def _agent_turn_ids(mask_BL: chex.Array, turn_end_BL: chex.Array) -> chex.Array:
    """`advantages.turn_ids` of the agent turn ends (`mask > 0` and `turn_end > 0`)."""
    return advantages.turn_ids((mask_BL > 0) & (turn_end_BL > 0))


def _returns_to_go_row(
    rewards_L: chex.Array, mask_L: chex.Array, tid_L: chex.Array, gamma: float
) -> chex.Array:
    (length,) = rewards_L.shape
    r_K = jax.ops.segment_sum(jnp.where(mask_L > 0, rewards_L, 0), tid_L, length)

    def step(next_return, r_k):
        ret = r_k + gamma * next_return
        return ret, ret

    _, ret_K = lax.scan(step, jnp.zeros((), r_K.dtype), r_K, reverse=True)
    return jnp.where(mask_L > 0, ret_K[tid_L], 0)


def turn_returns_to_go(
    rewards_BL: chex.Array, mask_BL: chex.Array, turn_end_BL: chex.Array, *, gamma: float
) -> chex.Array:
    """Discounted return-to-go over turns, broadcast to each turn's agent tokens:

        R_k = sum_{j >= k} gamma^(j - k) r_j,   r_j = sum of turn j's agent-token rewards

    (turns as in `advantages.turn_gae`; tokens after the last turn end form one more turn).
    Masked tokens get 0. `R_0` is `advantages.discounted_episode_returns`.
    """
    _check_token_inputs(rewards_BL, mask_BL, turn_end_BL)
    r_BL = rewards_BL.astype(jnp.promote_types(rewards_BL.dtype, jnp.float32))
    tid_BL = _agent_turn_ids(mask_BL, turn_end_BL)
    return jax.vmap(_returns_to_go_row, in_axes=(0, 0, 0, None))(r_BL, mask_BL, tid_BL, gamma)


def broadcast_turn_ends(
    x_BL: chex.Array, mask_BL: chex.Array, turn_end_BL: chex.Array
) -> chex.Array:
    """The value at each turn's end token, copied to all agent tokens of that turn:

        out_bt = x_b,e(t),   e(t) = the turn end of token t's turn

    Masked tokens and agent tokens after the last turn end (an unfinished turn) get 0; values at
    tokens other than turn ends are ignored.
    """
    _check_token_inputs(x_BL, mask_BL, turn_end_BL)
    _, length = x_BL.shape
    tid_BL = _agent_turn_ids(mask_BL, turn_end_BL)
    x_end_BL = jnp.where((mask_BL > 0) & (turn_end_BL > 0), x_BL, 0)
    x_K = jax.vmap(lambda x, t: jax.ops.segment_sum(x, t, length))(x_end_BL, tid_BL)
    return jnp.where(mask_BL > 0, jnp.take_along_axis(x_K, tid_BL, axis=1), 0)


def step_groups(group_ids_B: chex.Array, state_key_BL: chex.Array) -> chex.Array:
    """Step-group id of every position: `seg_bt = seg_b't'` iff `(group_b, key_bt) ==
    (group_b', key_b't')`, renumbered to `[0, B * L)` (int32 `[B, L]`).

    A sized `jnp.unique` over the `B * L` pairs (a sort: O(N log N) time, O(N) memory). Only
    positions the caller counts (valid turn ends) matter; the others get some id too.
    """
    chex.assert_rank([group_ids_B, state_key_BL], [1, 2])
    chex.assert_equal_shape_prefix([group_ids_B, state_key_BL], 1)
    chex.assert_type([group_ids_B, state_key_BL], int)
    batch, length = state_key_BL.shape
    group_BL = jnp.broadcast_to(group_ids_B[:, None], (batch, length))
    pairs_N2 = jnp.stack([group_BL, state_key_BL], axis=-1).reshape(batch * length, 2)
    _, seg_N = jnp.unique(pairs_N2, axis=0, size=batch * length, return_inverse=True,
                          fill_value=0)
    return seg_N.reshape(batch, length).astype(jnp.int32)


def step_advantages(
    returns_BL: chex.Array,
    anchor_BL: chex.Array,
    group_ids_B: chex.Array,
    state_key_BL: chex.Array,
    *,
    use_std: bool = True,
    eps: float = 1e-6,
) -> chex.Array:
    """Step-level advantage at each anchor position (a valid turn end), 0 elsewhere:

        A_S(b, t) = (R_bt - mean_{s in S(b,t)} R_s) [/ (std_{s in S(b,t)} R + eps)]

    with `S(b, t)` the anchors whose `(group_id, state_key)` equal those of `(b, t)` and std
    unbiased (ddof = 1, as GRPO). Step groups of size 1 get 0.
    """
    chex.assert_equal_shape([returns_BL, anchor_BL, state_key_BL])
    shape = returns_BL.shape
    seg_N = step_groups(group_ids_B, state_key_BL).reshape(-1)
    adv_N = advantages.group_normalise(
        returns_BL.reshape(-1),
        seg_N,
        anchor_BL.reshape(-1),
        num_segments=seg_N.shape[0],
        use_std=use_std,
        eps=eps,
    )
    return adv_N.reshape(shape)


def gigpo_advantages(
    rewards_BL: chex.Array,
    mask_BL: chex.Array,
    turn_end_BL: chex.Array,
    state_key_BL: chex.Array,
    group_ids_B: chex.Array,
    row_weight_B: chex.Array,
    *,
    gamma: float,
    step_weight: float = 1.0,
    use_std: bool = True,
    episode_discount: bool = False,
    eps: float = 1e-6,
) -> tuple[chex.Array, chex.Array]:
    """GiGPO advantages, `A = A_E + step_weight * A_S` on agent tokens.

    Turns as in `advantages.turn_gae` (agent tokens up to and including a turn end; rewards at
    their tokens, normally the turn end). For row b:

        R_k  = sum_{j >= k} gamma^(j - k) r_j             return-to-go of turn k
        G    = sum_k r_k                                  the episode's total reward, as in the
                                                          GiGPO paper (episode_discount: G = R_0)
        A_E  = GRPO over the episode group of G           (`grpo_advantages`, use_std as given)
        A_S  = `step_advantages` of turn k's R_k, read at turn k's end token

    Only the step level discounts: `gamma` ranks turns acting in the same state by how soon
    their returns arrive; the episode level compares whole episodes by their outcome.

    Both are broadcast to the turn's agent tokens (`mask > 0`); agent tokens after the last turn
    end (an unfinished turn: no state key) get `A_S = 0`. Padded rows (`row_weight = 0`) enter no
    statistic and get 0; so do masked tokens. `state_key_BL` is read at turn ends only.

    Returns:
      `(advantages_BL, returns_BL)`, returns = `R_k` broadcast to turn k's agent tokens.
    """
    chex.assert_equal_shape([rewards_BL, mask_BL, turn_end_BL, state_key_BL])
    chex.assert_equal_shape([group_ids_B, row_weight_B])
    valid_BL = (mask_BL > 0) & (row_weight_B > 0)[:, None]
    anchor_BL = valid_BL & (turn_end_BL > 0)
    returns_BL = turn_returns_to_go(rewards_BL, mask_BL, turn_end_BL, gamma=gamma)
    episode_B = advantages.discounted_episode_returns(
        rewards_BL, mask_BL, turn_end_BL, gamma=gamma if episode_discount else 1.0
    )
    adv_e_B = advantages.grpo_advantages(
        episode_B, group_ids_B, row_weight_B, use_std=use_std, eps=eps
    )
    adv_s_BL = step_advantages(
        returns_BL, anchor_BL, group_ids_B, state_key_BL, use_std=use_std, eps=eps
    )
    adv_s_BL = broadcast_turn_ends(adv_s_BL, mask_BL, turn_end_BL)
    adv_BL = adv_e_B[:, None] + step_weight * adv_s_BL
    return jnp.where(valid_BL, adv_BL, 0), jnp.where(valid_BL, returns_BL, 0)
