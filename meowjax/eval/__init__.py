"""meowjax.eval."""
