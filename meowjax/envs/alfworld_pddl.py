"""The one way meowjax opens an ALFWorld game: textworld's ``PddlEnv`` inside ALFWorld's
``AlfredDemangler`` (names like "cabinet 3", in the game's own order), so the environment, the
planner check and the hand-coded expert all see the strings ALFWorld agents see.

    env = demangled_pddl_env(extras=("walkthrough",))
    env.load("game.tw-pddl"); state = env.reset()

A leaf: textworld and alfworld are imported on the first call (they are slow to import, and
pool workers that never play ALFWorld should not pay for them).
"""

from __future__ import annotations

from typing import Sequence


def demangled_pddl_env(*, extras: Sequence[str] = (), facts: bool = False,
                       handcoded_expert: bool = False):
    """A textworld env over ALFWorld games reporting admissible commands, the win, ``facts``
    when asked (dense rewards read them) and ``extras`` (e.g. "walkthrough", "expert_plan");
    ``handcoded_expert`` wraps it in ALFWorld's ``AlfredExpert`` (its HANDCODED agent), which
    fills ``extra.expert_plan``."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    from textworld.envs import PddlEnv

    infos = textworld.EnvInfos(admissible_commands=True, won=True, facts=facts,
                               extras=list(extras))
    env = AlfredDemangler(PddlEnv(infos), shuffle=False)
    if handcoded_expert:
        from alfworld.agents.environment.alfred_tw_env import AlfredExpert, AlfredExpertType
        env = AlfredExpert(env, expert_type=AlfredExpertType.HANDCODED)
    return env
