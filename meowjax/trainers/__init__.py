"""meowjax.trainers: the schedule (SFT -> RL -> evaluation) and its jitted steps."""
from meowjax.trainers.registry import INTERFACES, register_interface, trainer_class

__all__ = ["INTERFACES", "register_interface", "trainer_class"]
