"""meowjax.trainers."""
