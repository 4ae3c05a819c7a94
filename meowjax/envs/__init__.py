"""Host-side text environments behind one small interface. Never imports jax."""

from meowjax.envs.base import EnvError, ResetResult, StepResult, Task, TextEnv
from meowjax.envs.registry import EnvSpec, Family, get_family, make_env, register_family

__all__ = ["EnvError", "EnvSpec", "Family", "ResetResult", "StepResult", "Task", "TextEnv",
           "get_family", "make_env", "register_family"]
