"""ALFWorld-style game generator built only from what the ``alfworld`` wheel ships.

Scenes come from ``alfworld/gen/layouts`` (receptacle poses, classes present, floor points),
affordances from ``alfworld/gen/constants.py``, goals and task sentences from
``alfworld/gen/goal_library.py``, and the game logic from ``alfworld/data/alfred.pddl`` and
``alfred.twl2``. Every game is checked winnable by the fast-downward planner and stores its plan.

Modules: ``scene`` (rooms and ALFRED ids), ``tasks`` (targets + placement rules), ``problem``
(PDDL problem and game file), ``solve`` (planner check in worker processes), ``generate``
(folders, manifest cache).
"""

from meowjax.envs.alfworld_gen.generate import generate_alfworld_games
from meowjax.envs.alfworld_gen.tasks import TASK_TYPES

__all__ = ["TASK_TYPES", "generate_alfworld_games"]
