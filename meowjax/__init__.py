"""meowjax: multi-turn agentic RL for LLM agents in text environments, in JAX/Flax.

Subpackages (imports flow one way, see DESIGN):
  rl, models        -> depend on nothing of ours
  sharding          -> mesh and logical-axis rules
  envs              -> host-side Python only, never imports jax
  rollout           -> uses models and envs
  trainers          -> uses all of the above
  eval              -> success rates, Pass@(K,T), reports
"""

__version__ = "0.1.0"
