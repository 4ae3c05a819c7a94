"""Expert trajectories: a game's walkthrough replayed through any environment family's env.

Family-agnostic (the walkthrough comes from ``env.reset``): TextWorld, ALFWorld and code-repair
games replay their experts through the same function.
"""

from __future__ import annotations

from typing import Any

from meowjax.envs.base import EnvError, Task
from meowjax.envs.registry import EnvSpec, make_env


def expert_trajectory(env_or_spec, task: Task, max_turns: int) -> dict[str, Any]:
    """Replays the game's walkthrough through an env, recording what an agent would see.

    Returns ``dict(observations=[o_0, ..., o_T], actions=[a_1..a_T], rewards=[r_1..r_T],
    won=bool, objective=str)``: ``observations[0]`` is the reset observation and
    ``observations[t]`` follows ``actions[t-1]``. Stops at ``max_turns`` or when done.
    ``env_or_spec``: a TextEnv (reused, not closed) or an EnvSpec (built and closed here).
    """
    env = make_env(env_or_spec) if isinstance(env_or_spec, EnvSpec) else env_or_spec
    try:
        first = env.reset(task, max_turns)
        if not first.walkthrough:
            raise EnvError(f"Game {task.path} has no walkthrough; regenerate it with "
                           "experiments/make_games.py (textworld records one per game).")
        observations, actions, rewards, won = [first.observation], [], [], False
        for action in first.walkthrough[:max_turns]:
            result = env.step(action)
            observations.append(result.observation)
            actions.append(action)
            rewards.append(result.reward)
            won = result.won
            if result.done:
                break
        return {"observations": observations, "actions": actions, "rewards": rewards,
                "won": won, "objective": first.objective}
    finally:
        if isinstance(env_or_spec, EnvSpec):
            env.close()
