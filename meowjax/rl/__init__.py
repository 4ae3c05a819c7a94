"""meowjax.rl: pure, jittable RL math on `[B, L]` token sequences (advantages, losses, reductions,
the estimator registry).

No model, no environment, and no other meowjax package is imported here.
"""
from meowjax.rl.advantages import (
    broadcast_episode_advantage,
    discounted_episode_returns,
    episode_returns,
    fold_kl_into_rewards,
    group_normalise,
    grpo_advantages,
    rloo_advantages,
    token_gae,
    turn_gae,
    turn_ids,
)
from meowjax.rl.estimators import (
    ESTIMATORS,
    EstimatorInputs,
    EstimatorSpec,
    HParams,
    compute_advantages,
    estimator_hparams,
    make_inputs,
    register_estimator,
    validate_estimator,
)
from meowjax.rl.gigpo import (
    broadcast_turn_ends,
    gigpo_advantages,
    step_advantages,
    step_groups,
    turn_returns_to_go,
)
from meowjax.rl.losses import (
    KL_KINDS,
    entropy_from_logits,
    kl_loss,
    kl_penalty,
    ppo_policy_loss,
    value_loss,
)
from meowjax.rl.reduce import AGG_MODES, masked_aggregate, masked_mean, masked_whiten

__all__ = [
    "AGG_MODES",
    "ESTIMATORS",
    "EstimatorInputs",
    "EstimatorSpec",
    "HParams",
    "KL_KINDS",
    "broadcast_episode_advantage",
    "broadcast_turn_ends",
    "compute_advantages",
    "discounted_episode_returns",
    "entropy_from_logits",
    "episode_returns",
    "estimator_hparams",
    "fold_kl_into_rewards",
    "gigpo_advantages",
    "group_normalise",
    "grpo_advantages",
    "kl_loss",
    "kl_penalty",
    "masked_aggregate",
    "masked_mean",
    "make_inputs",
    "masked_whiten",
    "ppo_policy_loss",
    "register_estimator",
    "rloo_advantages",
    "step_advantages",
    "step_groups",
    "token_gae",
    "turn_gae",
    "turn_ids",
    "turn_returns_to_go",
    "validate_estimator",
    "value_loss",
]
