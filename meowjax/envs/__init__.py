"""Host-side text environments behind one small interface. Never imports jax."""

from meowjax.envs.base import EnvError, ResetResult, StepResult, Task, TextEnv

__all__ = ["EnvError", "ResetResult", "StepResult", "Task", "TextEnv"]
