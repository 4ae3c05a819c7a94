"""Registry of advantage estimators, and one entry point that dispatches on the name.

Config validation is derived from the registry itself: `validate_estimator(name)` accepts exactly
the keys of `ESTIMATORS`, and `EstimatorSpec.needs_critic` tells the trainer whether to build a
value head.
"""
import dataclasses
from typing import Callable, Final, NamedTuple

import chex
import jax.numpy as jnp

from meowjax.rl import advantages


class EstimatorInputs(NamedTuple):
    """Everything an estimator may read (a pytree, so it can cross `jax.jit`).

    `values_BL` / `turn_end_BL` / `group_ids_B` may be `None` only for estimators that do not
    need them (see `EstimatorSpec.needs`)."""

    rewards_BL: chex.Array
    mask_BL: chex.Array
    row_weight_B: chex.Array
    values_BL: chex.Array | None = None
    turn_end_BL: chex.Array | None = None
    group_ids_B: chex.Array | None = None


EstimatorFn = Callable[..., tuple[chex.Array, chex.Array]]


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    """An advantage estimator.

    Attributes:
      name: registry key.
      needs_critic: whether it reads `values_BL` (the trainer then trains a value head).
      needs: the optional `EstimatorInputs` fields it reads.
      level: "token" (per-token advantages) or "episode" (one advantage per row, broadcast).
      fn: `fn(inputs, *, gamma, lam, use_std) -> (advantages_BL, returns_BL)`.
      description: one line for help texts.
    """

    name: str
    needs_critic: bool
    needs: tuple[str, ...]
    level: str
    fn: EstimatorFn
    description: str


def _gae(inputs: EstimatorInputs, *, gamma: float, lam: float, use_std: bool):
    del use_std
    return advantages.token_gae(
        inputs.rewards_BL, inputs.values_BL, inputs.mask_BL, gamma=gamma, lam=lam
    )


def _turn_gae(inputs: EstimatorInputs, *, gamma: float, lam: float, use_std: bool):
    del use_std
    return advantages.turn_gae(
        inputs.rewards_BL,
        inputs.values_BL,
        inputs.mask_BL,
        inputs.turn_end_BL,
        gamma=gamma,
        lam=lam,
    )


def _broadcast_episode(inputs: EstimatorInputs, adv_B: chex.Array, returns_B: chex.Array):
    return (
        advantages.broadcast_episode_advantage(adv_B, inputs.mask_BL),
        advantages.broadcast_episode_advantage(returns_B, inputs.mask_BL),
    )


def _grpo(inputs: EstimatorInputs, *, gamma: float, lam: float, use_std: bool):
    del gamma, lam
    returns_B = advantages.episode_returns(inputs.rewards_BL, inputs.mask_BL)
    adv_B = advantages.grpo_advantages(
        returns_B, inputs.group_ids_B, inputs.row_weight_B, use_std=use_std
    )
    return _broadcast_episode(inputs, adv_B, returns_B)


def _rloo(inputs: EstimatorInputs, *, gamma: float, lam: float, use_std: bool):
    del gamma, lam, use_std
    returns_B = advantages.episode_returns(inputs.rewards_BL, inputs.mask_BL)
    adv_B = advantages.rloo_advantages(returns_B, inputs.group_ids_B, inputs.row_weight_B)
    return _broadcast_episode(inputs, adv_B, returns_B)


ESTIMATORS: Final[dict[str, EstimatorSpec]] = {
    "gae": EstimatorSpec(
        "gae", True, ("values_BL",), "token", _gae, "token-level GAE with a critic (PPO)"
    ),
    "turn_gae": EstimatorSpec(
        "turn_gae",
        True,
        ("values_BL", "turn_end_BL"),
        "token",
        _turn_gae,
        "turn-level GAE: one value per agent turn, broadcast to the turn's tokens",
    ),
    "grpo": EstimatorSpec(
        "grpo",
        False,
        ("group_ids_B",),
        "episode",
        _grpo,
        "group-normalised episode returns (std switch = Dr. GRPO)",
    ),
    "rloo": EstimatorSpec(
        "rloo",
        False,
        ("group_ids_B",),
        "episode",
        _rloo,
        "leave-one-out group baseline on episode returns",
    ),
}


def validate_estimator(name: str) -> EstimatorSpec:
    """The spec registered under `name`; ValueError listing the valid names otherwise."""
    if name not in ESTIMATORS:
        raise ValueError(
            f"Unknown advantage estimator {name!r}; choose one of {sorted(ESTIMATORS)}."
        )
    return ESTIMATORS[name]


def compute_advantages(
    name: str,
    inputs: EstimatorInputs,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    use_std: bool = True,
) -> tuple[chex.Array, chex.Array]:
    """Run the estimator `name` on a batch: `(advantages_BL, returns_BL)`, 0 at masked tokens.

    For episode-level estimators `returns_BL` is the episode return broadcast to agent tokens
    (there is no critic to train on it). `gamma`/`lam` apply to the GAE estimators only,
    `use_std` to GRPO only. Missing inputs fail with a ValueError naming the field.
    """
    spec = validate_estimator(name)
    missing = [f for f in spec.needs if getattr(inputs, f) is None]
    if missing:
        raise ValueError(
            f"Estimator {name!r} needs {missing} in EstimatorInputs; pass them (needs: "
            f"{list(spec.needs)})."
        )
    adv_BL, returns_BL = spec.fn(inputs, gamma=gamma, lam=lam, use_std=use_std)
    valid = (inputs.mask_BL > 0) & (inputs.row_weight_B > 0)[:, None]
    return jnp.where(valid, adv_BL, 0), jnp.where(valid, returns_BL, 0)
