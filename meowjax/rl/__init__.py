"""meowjax.rl."""
