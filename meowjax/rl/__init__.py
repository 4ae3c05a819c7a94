"""meowjax.rl: pure, jittable RL math on `[B, L]` token sequences (advantages, losses, reductions).

No model, no environment, and no other meowjax package is imported here.
"""
from meowjax.rl.advantages import (
    broadcast_episode_advantage,
    episode_returns,
    fold_kl_into_rewards,
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
    compute_advantages,
    validate_estimator,
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
    "KL_KINDS",
    "broadcast_episode_advantage",
    "compute_advantages",
    "entropy_from_logits",
    "episode_returns",
    "fold_kl_into_rewards",
    "grpo_advantages",
    "kl_loss",
    "kl_penalty",
    "masked_aggregate",
    "masked_mean",
    "masked_whiten",
    "ppo_policy_loss",
    "rloo_advantages",
    "token_gae",
    "turn_gae",
    "turn_ids",
    "validate_estimator",
    "value_loss",
]
