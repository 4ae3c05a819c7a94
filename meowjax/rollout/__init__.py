"""meowjax.rollout."""
