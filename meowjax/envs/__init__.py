"""Host-side text environments behind one small interface. Never imports jax."""

from meowjax.envs.base import EnvError, ResetResult, StepResult, Task, TextEnv
from meowjax.envs.registry import EnvSpec, make_env

__all__ = ["EnvError", "EnvSpec", "ResetResult", "StepResult", "Task", "TextEnv", "make_env"]
