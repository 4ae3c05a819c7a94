"""meowjax.sharding."""
