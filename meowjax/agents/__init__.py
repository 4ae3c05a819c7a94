"""meowjax.agents: a model, its tokenizer and an action interface, playing episodes on its own
(evaluation) or inside a trainer."""
from meowjax.agents.base import Agent, Player
from meowjax.agents.registry import AGENTS, agent_class, register_agent

__all__ = ["AGENTS", "Agent", "Player", "agent_class", "register_agent"]
