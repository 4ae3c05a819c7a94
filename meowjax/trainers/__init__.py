"""meowjax.trainers: the schedule (SFT -> RL -> evaluation) and its jitted steps."""
from meowjax.trainers.interfaces import INTERFACES, Interface, get_interface, register_interface

__all__ = ["INTERFACES", "Interface", "get_interface", "register_interface"]
