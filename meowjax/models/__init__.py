"""meowjax.models."""
