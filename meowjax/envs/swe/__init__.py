"""Code-repair environment: generated Python repos with planted bugs, text tools, test rewards.

Modules: templates (correct code + tests), mutate (ast bug planting), tasks (generation, splits,
manifest), spec (task records, reference patch, expert actions), sandbox (temp copies, test runs
and their results), isolation + jail (the namespaces sandbox: host side, init inside), tools
(the agent's command syntax), swegym (SWE-Gym-format records), env (:class:`SweEnv`, imported
lazily by the registry).
"""
