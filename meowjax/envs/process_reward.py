"""Process supervision: a turn-level reward for progress along the expert's remaining plan.

Three reward densities are compared in the studies (``env.reward_mode``):

  * sparse (outcome only):  r_t = 1[won at turn t]
  * dense (score delta):    r_t = score_t − score_{t−1}
  * process (expert plan):  r_t = (|P_{t−1}| − |P_t|) / |P_0|

where P_t is the expert's remaining plan after turn t (a list of commands that wins from the
current state). Two ways to know P_t:

  * replanning: the environment exposes the plan from the current state (TextWorld's
    ``policy_commands``, recomputed by the game's quest tracker after every action; ALFWorld's
    PDDL ``replan``). An action that makes the plan shorter is progress; one that undoes progress
    (drops a needed key) makes it longer and gets a negative reward.
  * prefix matching (no replanning available): P_0 is the walkthrough; an action equal (after
    normalisation) to the plan's next command, and accepted by the game, pops it: P_t = P_{t−1}[1:].
    Anything else leaves the plan unchanged (reward 0).

Either way the rewards of an episode telescope, Σ_t r_t = (|P_0| − |P_T|) / |P_0|, the fraction of
the plan completed (1 for a win along the plan). This is potential-based shaping with potential
Φ = −|P| / |P_0|: no loop of actions can farm reward (undo + redo sums to 0), and the set of optimal
policies is the outcome reward's.

``ExpertPlanTracker`` is the per-episode state a trainer calls once per step; ``ProcessRewardEnv``
wraps any :class:`TextEnv` family so that ``reward_mode="process"`` works through an ``EnvPool``
(its ``info`` carries ``process_reward``, ``progress``, ``plan_remaining``, ``outcome_reward``).
It is the registry's reward wrapper of ``reward_mode="process"``
(``registry.reward_spec(spec, "process")``). Host-only Python, no JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from meowjax.envs.base import EnvError, ResetResult, StepResult, Task
from meowjax.envs.registry import EnvSpec, make_env

PLAN_SOURCES = ("replan", "prefix")


def normalize_command(command: str) -> str:
    """Lower-cased, whitespace-collapsed command (how both TextWorld and ALFWorld parse them)."""
    return " ".join(str(command).lower().split())


def plan_progress_reward(plan_before: int, plan_after: int, plan_start: int) -> float:
    """r_t = (|P_{t−1}| − |P_t|) / |P_0|; 0 when the task had no plan (|P_0| = 0).

    Raises:
      ValueError: on negative plan lengths.
    """
    if min(plan_before, plan_after, plan_start) < 0:
        raise ValueError(f"plan lengths must be >= 0, got {plan_before}, {plan_after}, "
                         f"{plan_start}")
    if plan_start == 0:
        return 0.0
    return (plan_before - plan_after) / plan_start


@dataclasses.dataclass(frozen=True)
class PlanStep:
    """What one action did to the expert plan."""

    reward: float        # (|P_{t−1}| − |P_t|) / |P_0|
    progress: bool       # the plan got shorter
    remaining: int       # |P_t|


class ExpertPlanTracker:
    """Per-episode expert-plan state; one ``step`` per agent action.

    Args:
      walkthrough: the expert's winning commands from the start state (``ResetResult.walkthrough``).
      policy_commands: the environment's plan from the start state, if it can replan; then every
        ``step`` must pass the plan after the action too (``source == "replan"``), else prefix
        matching against ``walkthrough`` is used (``source == "prefix"``).

    Raises:
      ValueError: if neither a walkthrough nor policy commands are given.
    """

    def __init__(self, walkthrough: Sequence[str] | None,
                 policy_commands: Sequence[str] | None = None):
        if policy_commands is not None:
            self.source = "replan"
            self.plan = [normalize_command(c) for c in policy_commands]
        elif walkthrough:
            self.source = "prefix"
            self.plan = [normalize_command(c) for c in walkthrough]
        else:
            raise ValueError("process reward needs the expert plan: the environment returned no "
                             "walkthrough and no policy_commands for this task. Regenerate the "
                             "games with walkthroughs (experiments/make_games.py) or use "
                             "env.reward_mode='sparse'/'dense'.")
        self.start = len(self.plan)

    @property
    def remaining(self) -> int:
        return len(self.plan)

    def step(self, action: str, *, invalid: bool = False,
             policy_commands: Sequence[str] | None = None) -> PlanStep:
        """Advances the plan by one agent action and returns its process reward.

        replan: P_t = ``policy_commands`` (the env's plan after the action).
        prefix: P_t = P_{t−1}[1:] if the action is valid and equals P_{t−1}[0], else P_{t−1}.
        """
        before = len(self.plan)
        if self.source == "replan":
            if policy_commands is None:
                raise ValueError("this tracker replans (it started from policy_commands); pass "
                                 "the env's policy_commands after every step.")
            self.plan = [normalize_command(c) for c in policy_commands]
        elif self.plan and not invalid and normalize_command(action) == self.plan[0]:
            self.plan = self.plan[1:]
        after = len(self.plan)
        return PlanStep(plan_progress_reward(before, after, self.start), after < before, after)


def turn_reward(mode: str, *, won: bool, score_gain: float, process: float) -> float:
    """Turn reward per density: sparse = 1[won], dense = score gain, process = plan progress."""
    if mode == "sparse":
        return 1.0 if won else 0.0
    if mode == "dense":
        return float(score_gain)
    if mode == "process":
        return float(process)
    raise ValueError(f"reward mode {mode!r}; choose one of ('sparse', 'dense', 'process').")


# -- environment wrapper -------------------------------------------------------------------------
def _enable_replanning(env: Any) -> bool:
    """Asks a TextWorld-backed env for ``policy_commands`` before its game starts.

    TextWorldEnv keeps its ``textworld.EnvInfos`` in ``_infos`` (read when a game is started), so
    switching the flag on before the first reset makes the game's quest tracker replan after every
    step. Envs without it fall back to prefix matching.
    """
    infos = getattr(env, "_infos", None)
    if infos is None or not hasattr(infos, "policy_commands"):
        return False
    infos.policy_commands = True
    return True


def _policy_commands(env: Any, info: dict[str, Any]) -> list[str] | None:
    """The env's current plan: ``info["policy_commands"]`` if it publishes it, else read from the
    running TextWorld game's state (``None`` when the env cannot replan)."""
    if info.get("policy_commands") is not None:
        return list(info["policy_commands"])
    game = getattr(env, "_env", None)
    state = getattr(game, "state", None)
    if state is None or not hasattr(state, "get"):
        return None
    plan = state.get("policy_commands")
    return None if plan is None else list(plan)


class ProcessRewardEnv:
    """A :class:`TextEnv` whose reward is expert-plan progress, around any registered family.

    Built like every env from an :class:`EnvSpec` (picklable, so pool workers can build it):
    ``EnvSpec("textworld", dict(reward_mode="process", compact=True), wrapper="process")``.
    The inner env runs with ``reward_mode="dense"`` so its score gains stay visible in
    ``info["score_gain"]``; the returned reward is ``turn_reward(reward_mode, ...)`` plus the
    invalid-action penalty. ``info`` adds ``process_reward``, ``progress``, ``plan_remaining``,
    ``plan_source`` ("replan" or "prefix"), ``outcome_reward`` (1 on a win) and ``score_gain``.

    Args:
      inner_family: the wrapped family ("textworld", "alfworld").
      reward_mode: "process" (default), or "sparse"/"dense" to train on those while still logging
        the process signal.
      replan: use the game's own replanning when available (TextWorld ``policy_commands``).
      invalid_action_penalty: added (<= 0) on invalid actions, as in the inner envs.
      **inner_kwargs: the inner env's other options (admissible, compact, ...); a TextWorld
        inner env defaults to ``compact=True`` (the default of ``configs/common.py``).
    """

    def __init__(self, inner_family: str = "textworld", reward_mode: str = "process",
                 replan: bool = True, invalid_action_penalty: float = 0.0, **inner_kwargs: Any):
        turn_reward(reward_mode, won=False, score_gain=0.0, process=0.0)  # validates the mode
        if invalid_action_penalty > 0:
            raise EnvError(f"invalid_action_penalty={invalid_action_penalty} must be <= 0.")
        self.reward_mode = reward_mode
        self.penalty = float(invalid_action_penalty)
        if inner_family == "textworld":
            inner_kwargs.setdefault("compact", True)
        self.inner = make_env(EnvSpec(inner_family, dict(inner_kwargs, reward_mode="dense")))
        self.replan = replan and _enable_replanning(self.inner)
        self.tracker: ExpertPlanTracker | None = None

    def reset(self, task: Task, max_turns: int) -> ResetResult:
        res = self.inner.reset(task, max_turns)
        plan = _policy_commands(self.inner, res.info) if self.replan else None
        try:
            self.tracker = ExpertPlanTracker(res.walkthrough, plan)
        except ValueError as e:
            raise EnvError(f"{task.task_id}: {e}") from e
        res.info = dict(res.info, plan_remaining=self.tracker.remaining,
                        plan_source=self.tracker.source)
        return res

    def step(self, action: str) -> StepResult:
        if self.tracker is None:
            raise EnvError("ProcessRewardEnv.step() before reset(); call reset(task, max_turns).")
        res = self.inner.step(action)
        if res.info.get("after_end"):
            return res
        invalid = bool(res.info.get("invalid", False))
        gain = float(res.reward)  # the inner env runs dense with no penalty: the score gain
        plan = (_policy_commands(self.inner, res.info)
                if self.tracker.source == "replan" else None)
        if self.tracker.source == "replan" and plan is None:
            plan = [] if res.won else self.tracker.plan  # game over: the tracker stops replanning
        step = self.tracker.step(res.info.get("command", action), invalid=invalid,
                                 policy_commands=plan)
        reward = turn_reward(self.reward_mode, won=res.won, score_gain=gain, process=step.reward)
        if invalid:
            reward += self.penalty
        info = dict(res.info, process_reward=step.reward, progress=step.progress,
                    plan_remaining=step.remaining, plan_source=self.tracker.source,
                    outcome_reward=1.0 if res.won else 0.0, score_gain=gain)
        return StepResult(res.observation, float(reward), res.done, res.won, info)

    def close(self) -> None:
        self.inner.close()

